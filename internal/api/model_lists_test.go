package api

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/retryq/retryq/store"
)

// The listing, statistics and dead-letter actions of the model-based test
// (model_test.go).

// listAll reads every page of a task list route and checks the pages:
// newest (highest id) first, no task twice, a cursor only after a full page.
// It returns the tasks and the clock after the last page.
func (m *model) listAll(path string, q url.Values) ([]map[string]any, time.Time) {
	m.t.Helper()
	limit := []int{30, 200, 1000}[m.rnd.IntN(3)]
	q.Set("limit", strconv.Itoa(limit))
	var out []map[string]any
	var t1 time.Time
	prev := ""
	for page := 0; ; page++ {
		if page > len(m.order)/limit+2 {
			m.fatalf("GET %s: more pages than tasks", path)
		}
		r, _, tt := m.call("GET", path+"?"+q.Encode(), nil)
		t1 = tt
		ts, ok := r.m["tasks"].([]any)
		if r.status != http.StatusOK || !ok || len(ts) > limit {
			m.fatalf("GET %s?%s: %s", path, q.Encode(), r)
		}
		for _, x := range ts {
			o := x.(map[string]any)
			m.checkTaskJSON(path, o)
			id := o["id"].(string)
			if prev != "" && id >= prev {
				m.fatalf("GET %s: %s after %s: not newest first, or repeated", path, id, prev)
			}
			prev = id
			out = append(out, o)
		}
		nc, has := r.m["next_cursor"]
		if !has {
			m.fatalf("GET %s: no next_cursor member: %s", path, r)
		}
		if nc == nil {
			break
		}
		if len(ts) != limit {
			m.fatalf("GET %s: a next_cursor after a page of %d < %d", path, len(ts), limit)
		}
		q.Set("cursor", nc.(string))
	}
	return out, t1
}

// live returns the tasks the model holds (not purged).
func (m *model) live() []*modelTask {
	var out []*modelTask
	for _, t := range m.order {
		if !t.deleted {
			out = append(out, t)
		}
	}
	return out
}

func (m *model) actList() {
	q := url.Values{}
	var typ string
	var states []store.State
	if m.rnd.IntN(2) == 0 {
		if m.rnd.IntN(2) == 0 {
			typ = m.typ()
			q.Set("type", typ)
		}
		if m.rnd.IntN(2) == 0 {
			for len(states) == 0 {
				for _, s := range store.States {
					if m.rnd.IntN(3) == 0 {
						states = append(states, s)
					}
				}
			}
			var names []string
			for _, s := range states {
				names = append(names, string(s))
			}
			q.Set("state", joinComma(names))
		}
	}
	filter := q.Encode()
	got, t1 := m.listAll("/v1/tasks", q)
	m.note("list %s -> %d tasks", filter, len(got))
	ids := map[string]map[string]any{}
	for _, o := range got {
		ids[o["id"].(string)] = o
	}
	for _, t := range m.live() {
		o, listed := ids[t.id]
		matches := (typ == "" || t.typ == typ) && (states == nil || slices.Contains(states, t.state))
		if !listed && matches && m.settled(t, t1) {
			m.fatalf("list %s: task %s (state %s) is missing", filter, t.id, t.state)
		}
		if listed {
			if (typ != "" && o["type"] != typ) || (states != nil && !slices.Contains(states, store.State(o["state"].(string)))) {
				m.fatalf("list %s: task %v does not match", filter, o)
			}
			m.observe(t, o, t1, false)
			delete(ids, t.id)
		}
	}
	for id := range ids {
		m.fatalf("list %s: task %s is not one the model holds", filter, id)
	}
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// counts counts the tasks of a full listing by type and state.
func (m *model) counts() map[string]map[string]int {
	got, _ := m.listAll("/v1/tasks", url.Values{})
	c := map[string]map[string]int{}
	for _, o := range got {
		typ := o["type"].(string)
		if c[typ] == nil {
			c[typ] = map[string]int{}
		}
		c[typ][o["state"].(string)]++
	}
	return c
}

func sameCounts(a, b map[string]map[string]int) bool {
	return maps.EqualFunc(a, b, maps.Equal[map[string]int])
}

// checkStatsCounts checks one statistics object against listed counts.
func (m *model) checkStatsCounts(what string, o map[string]any, want map[string]int) {
	m.t.Helper()
	cs, _ := o["counts"].(map[string]any)
	total := 0
	for _, s := range store.States {
		n, ok := cs[string(s)].(float64)
		if !ok || int(n) != want[string(s)] {
			m.fatalf("stats %s: %s = %v, listing has %d (%v)", what, s, cs[string(s)], want[string(s)], o)
		}
		total += int(n)
	}
	if jnum(o, "total") != total || jnum(o, "dlq_size") != want["dead"] {
		m.fatalf("stats %s: total/dlq_size wrong: %v (listing %v)", what, o, want)
	}
	for _, k := range []string{"attempts", "retries", "failures", "retry_rate", "mean_retries_per_task", "retention_deleted"} {
		if _, ok := o[k]; !ok {
			m.fatalf("stats %s: no %s in %v", what, k, o)
		}
	}
	if rr, _ := o["retry_rate"].(float64); rr < 0 || rr > 1 {
		m.fatalf("stats %s: retry_rate %v", what, rr)
	}
}

func (m *model) actStats() {
	before := m.counts()
	r, _, _ := m.call("GET", "/v1/stats", nil)
	after := m.counts()
	if r.status != http.StatusOK || r.m["window_seconds"] != 3600.0 {
		m.fatalf("stats: %s", r)
	}
	if !sameCounts(before, after) {
		m.note("stats: tasks moved meanwhile; counts not compared")
		return
	}
	m.note("stats compared")
	overall := map[string]int{}
	for _, c := range after {
		for s, n := range c {
			overall[s] += n
		}
	}
	ov, _ := r.m["overall"].(map[string]any)
	m.checkStatsCounts("overall", ov, overall)
	types, _ := r.m["types"].([]any)
	seen := map[string]bool{}
	for _, x := range types {
		o := x.(map[string]any)
		typ, _ := o["type"].(string)
		if seen[typ] {
			m.fatalf("stats: type %q twice", typ)
		}
		seen[typ] = true
		m.checkStatsCounts(typ, o, after[typ])
	}
	for typ := range after {
		if !seen[typ] {
			m.fatalf("stats: type %s has tasks but is not listed: %s", typ, r)
		}
	}
}

// deadCount lists the DLQ and returns its size.
func (m *model) deadCount() int {
	got, _ := m.listAll("/v1/dlq", url.Values{})
	return len(got)
}

func (m *model) actSummary() {
	before := m.deadCount()
	r, _, _ := m.call("GET", "/v1/dlq/summary", nil)
	after := m.deadCount()
	gs, ok := r.m["groups"].([]any)
	if r.status != http.StatusOK || !ok {
		m.fatalf("dlq summary: %s", r)
	}
	sum, last := 0, -1
	for _, x := range gs {
		g := x.(map[string]any)
		n := jnum(g, "count")
		if n < 1 || (last >= 0 && n > last) {
			m.fatalf("dlq summary: counts not positive and descending: %s", r)
		}
		last = n
		sum += n
	}
	if sum != jnum(r.m, "total") {
		m.fatalf("dlq summary: total %v, groups add up to %d", r.m["total"], sum)
	}
	if before == after && sum != after {
		m.fatalf("dlq summary: total %d, the DLQ lists %d", sum, after)
	}
	m.note("dlq summary total %d", sum)
}

func (m *model) actDLQList() {
	q := url.Values{}
	typ, reason := "", ""
	if m.rnd.IntN(2) == 0 {
		typ = m.typ()
		q.Set("type", typ)
	}
	if m.rnd.IntN(3) == 0 {
		reason = []string{store.DeadNonRetryable, store.DeadMaxAttempts, store.DeadRetryWindow}[m.rnd.IntN(3)]
		q.Set("reason", reason)
	}
	filter := q.Encode()
	got, t1 := m.listAll("/v1/dlq", q)
	m.note("dlq list %s -> %d", filter, len(got))
	ids := map[string]map[string]any{}
	for _, o := range got {
		ids[o["id"].(string)] = o
	}
	for _, t := range m.live() {
		o, listed := ids[t.id]
		matches := t.state == store.StateDead && (typ == "" || t.typ == typ) && (reason == "" || t.deadReason == reason)
		if matches && !listed {
			m.fatalf("dlq list %s: dead task %s missing", filter, t.id)
		}
		if listed {
			if o["state"] != "dead" || (typ != "" && o["type"] != typ) || (reason != "" && o["dead_reason"] != reason) {
				m.fatalf("dlq list %s: %v does not match", filter, o)
			}
			m.observe(t, o, t1, false)
			delete(ids, t.id)
		}
	}
	for id := range ids {
		m.fatalf("dlq list %s: task %s is not one the model holds", filter, id)
	}
}

// deadFilter makes a random redrive or purge filter and returns, for a task
// as the model knew it before the call, whether the filter may and whether
// it must select it. now0 and now1 bracket the server's clock.
func (m *model) deadFilter(purge bool) (body map[string]any, limit int, match func(t *modelTask, now0, now1 time.Time) (may, must bool)) {
	body = map[string]any{}
	var typ, reason, code string
	var ids []string
	var older *time.Duration
	if m.rnd.IntN(5) < 2 {
		typ = m.typ()
		body["type"] = typ
	}
	if m.rnd.IntN(5) == 0 {
		reason = []string{store.DeadNonRetryable, store.DeadMaxAttempts, store.DeadRetryWindow}[m.rnd.IntN(3)]
		body["reason"] = reason
	}
	if m.rnd.IntN(7) == 0 {
		code = []string{"400", "503", "lease_expired", "x1"}[m.rnd.IntN(4)]
		body["error_code"] = code
	}
	if m.rnd.IntN(4) == 0 {
		for range 1 + m.rnd.IntN(4) {
			if t := m.pick(); t != nil {
				ids = append(ids, t.id)
			}
		}
		if len(ids) > 0 {
			body["ids"] = ids
		}
	}
	if m.rnd.IntN(4) == 0 {
		limit = 1 + m.rnd.IntN(3)
		body["limit"] = limit
	}
	if purge && m.rnd.IntN(4) == 0 {
		d := []time.Duration{0, 10 * time.Second, 100 * time.Second}[m.rnd.IntN(3)]
		older = &d
		body["older_than_seconds"] = d.Seconds()
	}
	match = func(t *modelTask, now0, now1 time.Time) (bool, bool) {
		if len(ids) > 0 && !slices.Contains(ids, t.id) || typ != "" && t.typ != typ {
			return false, false
		}
		if t.state == store.StateDead {
			if reason != "" && t.deadReason != reason || code != "" && t.errCode != code {
				return false, false
			}
			if older == nil {
				return true, true
			}
			return t.updatedAt.Before(now1.Add(-*older)), t.updatedAt.Before(now0.Add(-*older))
		}
		if !slices.Contains(m.may(t, now1), store.StateDead) {
			return false, false
		}
		// Reaped meanwhile: the reaper's dead reason and error code.
		return (reason == "" || reason == store.DeadMaxAttempts) && (code == "" || code == "lease_expired"), false
	}
	return body, limit, match
}

func (m *model) actRedrive() { m.dlqAction(false) }
func (m *model) actPurge()   { m.dlqAction(true) }

// dlqAction runs a redrive or a purge with a random filter and checks that
// it moved exactly the tasks it says, each one a match, and every task
// that had to match unless the limit stopped it.
func (m *model) dlqAction(purge bool) {
	verb, field := "redrive", "redriven"
	if purge {
		verb, field = "purge", "purged"
	}
	body, limit, match := m.deadFilter(purge)
	// Only dead tasks, and running ones that may be reaped to dead
	// meanwhile, can be moved.
	now := m.e.clock.Now().Add(time.Second)
	before := map[string]modelTask{}
	for _, t := range m.live() {
		if slices.Contains(m.may(t, now), store.StateDead) {
			m.sync(t, false, false)
			before[t.id] = *t
		}
	}
	r, t0, t1 := m.call("POST", "/v1/dlq/"+verb, body)
	if t1.After(now) {
		m.note("%s: the clock passed the candidates' horizon; not checked", verb)
		for _, t := range m.live() {
			m.sync(t, !purge, purge)
		}
		return
	}
	m.note("%s %v -> %s", verb, body, r)
	n, ok := r.m[field].(float64)
	if r.status != http.StatusOK || !ok {
		m.fatalf("%s %v: %s", verb, body, r)
	}
	moved := 0
	for id, old := range before {
		t := m.tasks[id]
		m.sync(t, !purge, purge)
		gone := t.deleted
		back := !purge && t.state == store.StatePending && t.attempt == 0 && old.attempt > 0
		may, must := match(&old, t0, t1)
		if back && old.state != store.StateDead {
			t.histKnown = false // reaped to dead, then redriven
		}
		if gone || back {
			moved++
			if !may {
				m.fatalf("%s %v moved task %s, which does not match (was %s, reason %q, code %q)", verb, body, id, old.state, old.deadReason, old.errCode)
			}
			continue
		}
		if must && (limit == 0 || int(n) < limit) {
			m.fatalf("%s %v left matching task %s (reason %q, code %q)", verb, body, id, old.deadReason, old.errCode)
		}
	}
	if moved != int(n) {
		m.fatalf("%s %v says %d, %d tasks moved", verb, body, int(n), moved)
	}
}
