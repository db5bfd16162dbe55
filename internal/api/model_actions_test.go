package api

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/retryq/retryq/store"
)

// The actions of the model-based test (model_test.go): each sends one kind
// of call with random arguments and checks the answer against the model.

func (m *model) typ() string { return modelTypes[m.rnd.IntN(len(modelTypes))] }

func dsecs(d time.Duration) float64 { return d.Seconds() }

// within reports whether got lies in [lo, hi], give or take a microsecond
// (times are stored with microsecond precision).
func within(got, lo, hi time.Time) bool {
	return !got.Before(lo.Add(-time.Microsecond)) && !got.After(hi.Add(time.Microsecond))
}

// enqueueBody makes a random enqueue object. future reports whether the
// task must start scheduled; delay is its delay (0: none or run_at).
func (m *model) enqueueBody(now time.Time) (b map[string]any, future bool, delay time.Duration) {
	b = map[string]any{"type": m.typ(), "payload": map[string]any{"step": m.step}}
	if m.rnd.IntN(5) < 2 {
		b["idempotency_key"] = fmt.Sprintf("k%d", m.rnd.IntN(40))
	}
	if m.rnd.IntN(3) == 0 {
		b["max_attempts"] = 1 + m.rnd.IntN(3)
	}
	if m.rnd.IntN(4) == 0 {
		b["priority"] = m.rnd.IntN(5) - 2
	}
	switch m.rnd.IntN(7) {
	case 0:
		ds := []float64{0, 0.5, 3, 20}[m.rnd.IntN(4)]
		b["delay_seconds"] = ds
		delay = time.Duration(ds * float64(time.Second))
		future = ds > 0
	case 1:
		b["run_at"] = now.Add(-time.Duration(1+m.rnd.IntN(100)) * time.Second).Format(time.RFC3339Nano)
	case 2:
		b["run_at"] = now.Add(time.Duration(2+m.rnd.IntN(100)) * time.Second).Format(time.RFC3339Nano)
		future = true
	}
	return b, future, delay
}

// acknowledge checks a new task in an enqueue answer and adds it to the model.
func (m *model) acknowledge(b, o map[string]any, future bool, delay time.Duration, t0, t1 time.Time) {
	m.t.Helper()
	m.checkTaskJSON("enqueue", o)
	id := o["id"].(string)
	if m.tasks[id] != nil {
		m.fatalf("enqueue: new task has the id of an existing one: %v", o)
	}
	if o["duplicate"] != nil {
		m.fatalf("enqueue: new task flagged duplicate: %v", o)
	}
	want := store.StatePending
	if future {
		want = store.StateScheduled
	}
	if store.State(o["state"].(string)) != want || jnum(o, "attempt") != 0 || o["type"] != b["type"] {
		m.fatalf("enqueue %v: got %v, want state %s attempt 0", b, o, want)
	}
	runAt := m.timeOf(o["run_at"])
	if ra, ok := b["run_at"].(string); ok && !runAt.Equal(m.timeOf(ra).Truncate(time.Microsecond)) {
		m.fatalf("enqueue: run_at %v, asked %s", o["run_at"], ra)
	}
	if delay > 0 && !within(runAt, t0.Add(delay), t1.Add(delay)) {
		m.fatalf("enqueue: run_at %v, want now + %s", o["run_at"], delay)
	}
	t := &modelTask{id: id, typ: b["type"].(string), state: want, runAt: runAt, histKnown: true}
	t.key, _ = b["idempotency_key"].(string)
	t.maxAttempts, _ = b["max_attempts"].(int)
	if jnum(o, "max_attempts") != m.effMax(t) {
		m.fatalf("enqueue: max_attempts %v, want %d", o["max_attempts"], m.effMax(t))
	}
	m.tasks[id] = t
	m.order = append(m.order, t)
	if t.key != "" {
		m.keys[t.key] = id
	}
}

func (m *model) actEnqueue() {
	b, future, delay := m.enqueueBody(m.e.clock.Now())
	r, t0, t1 := m.call("POST", "/v1/tasks", b)
	m.note("enqueue %v -> %d %v %v", b, r.status, r.m["id"], r.m["state"])
	key, _ := b["idempotency_key"].(string)
	if id, ok := m.keys[key]; key != "" && ok {
		if r.status != http.StatusOK || r.m["id"] != id || r.m["duplicate"] != true {
			m.fatalf("enqueue with the key of task %s: got %s, want 200 with that task and duplicate", id, r)
		}
		m.observe(m.tasks[id], r.m, t1, false)
		return
	}
	if r.status != http.StatusCreated {
		m.fatalf("enqueue %v: got %s, want 201", b, r)
	}
	m.acknowledge(b, r.m, future, delay, t0, t1)
}

func (m *model) actBatch() {
	n := 1 + m.rnd.IntN(5)
	now := m.e.clock.Now()
	bodies := make([]map[string]any, n)
	futures := make([]bool, n)
	delays := make([]time.Duration, n)
	for i := range bodies {
		bodies[i], futures[i], delays[i] = m.enqueueBody(now)
	}
	items := make([]any, n)
	for i, b := range bodies {
		items[i] = b
	}
	r, t0, t1 := m.call("POST", "/v1/tasks/batch", map[string]any{"tasks": items})
	m.note("batch of %d -> %d", n, r.status)
	if r.status != http.StatusCreated {
		m.fatalf("batch: got %s, want 201", r)
	}
	out, _ := r.m["tasks"].([]any)
	if len(out) != n {
		m.fatalf("batch of %d: %d answers: %s", n, len(out), r)
	}
	for i, b := range bodies {
		o := out[i].(map[string]any)
		key, _ := b["idempotency_key"].(string)
		if id, ok := m.keys[key]; key != "" && ok {
			if o["id"] != id || o["duplicate"] != true {
				m.fatalf("batch item %d with the key of task %s: got %v", i, id, o)
			}
			m.checkTaskJSON("batch duplicate", o)
			continue
		}
		m.acknowledge(b, o, futures[i], delays[i], t0, t1)
	}
	for _, x := range out {
		if o := x.(map[string]any); o["duplicate"] == true {
			m.sync(m.tasks[o["id"].(string)], false, false)
		}
	}
}

func (m *model) actPutType() {
	typ := m.typ()
	p := &modelPolicy{stored: true}
	d := []float64{0.5, 2, 5, 30}[m.rnd.IntN(4)]
	p.delay = time.Duration(d * float64(time.Second))
	p.maxDelay = p.delay * time.Duration([]int{1, 2, 10}[m.rnd.IntN(3)])
	p.maxAttempts = 1 + m.rnd.IntN(5)
	retry := map[string]any{"backoff": "fixed", "initial_delay_seconds": d, "max_delay_seconds": dsecs(p.maxDelay),
		"jitter": "none", "max_attempts": p.maxAttempts}
	if m.rnd.IntN(3) == 0 {
		p.noRetryOn = []string{"x1"}
		retry["no_retry_on"] = p.noRetryOn
	}
	if m.rnd.IntN(5) == 0 {
		p.retryOn = []string{"503", "x2"}
		retry["retry_on"] = p.retryOn
	}
	body := map[string]any{"retry": retry}
	if m.rnd.IntN(2) == 0 {
		p.timeout = time.Duration(1+m.rnd.IntN(120)) * time.Second
		body["timeout_seconds"] = dsecs(p.timeout)
	}
	r, _, _ := m.call("PUT", "/v1/types/"+typ, body)
	m.note("put type %s %v -> %d", typ, body, r.status)
	if r.status != http.StatusOK || r.m["stored"] != true || r.m["type"] != typ {
		m.fatalf("put type: %s", r)
	}
	if rp, _ := r.m["retry"].(map[string]any); jnum(rp, "max_attempts") != p.maxAttempts {
		m.fatalf("put type: retry %v", rp)
	}
	m.policies[typ] = p
}

// defaultLease is the lease a pull lease grants when it names no length.
func (m *model) defaultLease(types []string) time.Duration {
	var longest time.Duration
	for _, typ := range types {
		p := m.policies[typ]
		timeout := p.timeout
		if timeout == 0 {
			timeout = 5 * time.Minute // the engine's default timeout
		}
		if p.stored && timeout > longest {
			longest = timeout
		}
	}
	if longest > 0 {
		return min(longest, time.Hour)
	}
	return 30 * time.Second
}

func (m *model) actLease() {
	types := []string{m.typ()}
	for m.rnd.IntN(3) == 0 && len(types) < 4 {
		types = append(types, m.typ())
	}
	body := map[string]any{"worker_id": fmt.Sprintf("w%d", m.rnd.IntN(3)), "types": types}
	max := 1
	if m.rnd.IntN(3) > 0 {
		max = 1 + m.rnd.IntN(5)
		body["max"] = max
	}
	d := m.defaultLease(types)
	if m.rnd.IntN(5) < 3 {
		ls := []float64{0.5, 2, 10, 30, 60, 120}[m.rnd.IntN(6)]
		d = time.Duration(ls * float64(time.Second))
		body["lease_seconds"] = ls
	}
	r, t0, t1 := m.call("POST", "/v1/leases", body)
	if r.status != http.StatusOK {
		m.fatalf("lease %v: %s", body, r)
	}
	ts, ok := r.m["tasks"].([]any)
	if !ok || len(ts) > max {
		m.fatalf("lease %v (max %d): %s", body, max, r)
	}
	got := map[string]bool{}
	for _, x := range ts {
		o := x.(map[string]any)
		id, _ := o["id"].(string)
		t := m.tasks[id]
		if t == nil || t.deleted {
			m.fatalf("lease handed out task %s, which the model does not hold: %s", id, r)
		}
		if got[id] {
			m.fatalf("lease handed out task %s twice in one answer: %s", id, r)
		}
		got[id] = true
		if !slices.Contains(types, t.typ) || o["type"] != t.typ {
			m.fatalf("lease for %v handed out task %s of type %s", types, id, t.typ)
		}
		if t.state == store.StateRunning && t.leaseExp.After(t1) {
			m.fatalf("task %s leased twice at once: its lease %s expires at %s (now %s)", id, t.lease,
				t.leaseExp.Format(time.RFC3339Nano), t1.Format(time.RFC3339Nano))
		}
		if !slices.Contains(m.may(t, t1), store.StatePending) {
			m.fatalf("lease handed out task %s in model state %s (run_at %s, now %s)", id, t.state, t.runAt, t1)
		}
		if jnum(o, "attempt") != t.attempt+1 {
			m.fatalf("lease: task %s attempt %v, want %d", id, o["attempt"], t.attempt+1)
		}
		tok, _ := o["lease_id"].(string)
		exp := m.timeOf(o["lease_expires_at"])
		if tok == "" || m.tokTask[tok] != "" || !within(exp, t0.Add(d), t1.Add(d)) {
			m.fatalf("lease: task %s lease %q expires %v, want a fresh lease until now + %s", id, tok, o["lease_expires_at"], d)
		}
		if _, ok := o["payload"]; !ok {
			m.fatalf("lease: task %s without payload", id)
		}
		if t.state == store.StateRunning {
			// Reaped and leased again since the model last looked.
			t.histKnown = false
		}
		t.state, t.attempt, t.lease, t.leaseExp = store.StateRunning, t.attempt+1, tok, exp
		t.worker = body["worker_id"].(string)
		m.tokens = append(m.tokens, tok)
		m.tokTask[tok] = id
	}
	m.note("lease %v -> %d tasks %v", body, len(ts), keysOf(got))
	if len(ts) < max {
		// Nothing the model knows to be pending may be left behind.
		for _, t := range m.order {
			if !t.deleted && t.state == store.StatePending && slices.Contains(types, t.typ) && !got[t.id] {
				m.fatalf("lease %v returned %d < %d tasks but left pending task %s", body, len(ts), max, t.id)
			}
		}
	}
}

func keysOf(s map[string]bool) []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// pickToken returns a lease token: mostly a current one, else any ever
// issued. ok is false when none was issued yet.
func (m *model) pickToken() (tok string, t *modelTask, ok bool) {
	if len(m.tokens) == 0 {
		return "", nil, false
	}
	if m.rnd.IntN(10) < 7 {
		var cur []*modelTask
		for _, t := range m.order {
			if !t.deleted && t.state == store.StateRunning && t.lease != "" {
				cur = append(cur, t)
			}
		}
		if len(cur) > 0 {
			t := cur[m.rnd.IntN(len(cur))]
			return t.lease, t, true
		}
	}
	tok = m.tokens[m.rnd.IntN(len(m.tokens))]
	return tok, m.tasks[m.tokTask[tok]], true
}

// leaseVerdict tells whether a call under tok at a server time within
// [t0, t1] must succeed (1), must be refused (-1), or may go either way
// (0, the lease expires meanwhile).
func (m *model) leaseVerdict(t *modelTask, tok string, t0, t1 time.Time) int {
	if t.deleted || t.state != store.StateRunning || t.lease != tok {
		return -1
	}
	switch {
	case t.leaseExp.After(t1):
		return 1
	case t.leaseExp.Before(t0):
		return -1
	}
	return 0
}

func (m *model) actHeartbeat() {
	tok, t, ok := m.pickToken()
	if !ok {
		return
	}
	var body any
	// Without lease_seconds: the default of a lease of the task's type, and
	// never shorter than the lease already is.
	d, keep := m.defaultLease([]string{t.typ}), t.leaseExp
	if m.rnd.IntN(2) == 0 {
		ls := []float64{0.5, 5, 30, 90}[m.rnd.IntN(4)]
		body = map[string]any{"lease_seconds": ls}
		d, keep = time.Duration(ls*float64(time.Second)), time.Time{}
	}
	r, t0, t1 := m.call("POST", "/v1/leases/"+tok+"/heartbeat", body)
	v := m.leaseVerdict(t, tok, t0, t1)
	m.note("heartbeat %s (task %s, verdict %d) -> %s", tok, t.id, v, r)
	switch {
	case r.status == http.StatusOK && v >= 0:
		exp := m.timeOf(r.m["lease_expires_at"])
		lo, hi := t0.Add(d), t1.Add(d)
		if keep.After(lo) {
			lo = keep
		}
		if keep.After(hi) {
			hi = keep
		}
		if !within(exp, lo, hi) {
			m.fatalf("heartbeat: expiry %v, want now + %s (and not before %v)", r.m["lease_expires_at"], d, keep)
		}
		t.leaseExp = exp
	case r.status == http.StatusConflict && v <= 0:
		m.expectErr(r, http.StatusConflict, CodeLeaseLost, "heartbeat")
	default:
		m.fatalf("heartbeat of lease %s (task %s, model state %s, lease %s expiring %s, now %s..%s): got %s",
			tok, t.id, t.state, t.lease, t.leaseExp.Format(time.RFC3339Nano), t0.Format(time.RFC3339Nano), t1.Format(time.RFC3339Nano), r)
	}
}

// finishTarget picks the token and the task id a complete or fail call
// names; now and then the id of another task, which must be refused.
func (m *model) finishTarget() (tok string, t *modelTask, id string, mismatch, ok bool) {
	tok, t, ok = m.pickToken()
	if !ok {
		return "", nil, "", false, false
	}
	id = t.id
	if m.rnd.IntN(10) == 0 {
		if o := m.pick(); o != nil && o.id != t.id {
			id, mismatch = o.id, true
		}
	}
	return tok, t, id, mismatch, true
}

// finishRefusal checks the answer of a complete or fail under the model's
// verdict on its lease. It reports whether the call succeeded (where it
// may); every refusal must be the documented one.
func (m *model) finishRefusal(what string, r *resp, t *modelTask, v int, mismatch bool) (succeeded bool) {
	m.t.Helper()
	switch {
	case mismatch:
		m.expectErr(r, http.StatusConflict, CodeLeaseLost, what+" naming another task")
	case t.deleted:
		m.expectErr(r, http.StatusNotFound, CodeNotFound, what+" of a purged task")
	case r.status == http.StatusOK && v >= 0:
		return true
	case r.status == http.StatusConflict && v <= 0:
		m.expectErr(r, http.StatusConflict, CodeLeaseLost, what)
	default:
		m.fatalf("%s of task %s (model state %s, lease %s expiring %s, verdict %d): got %s",
			what, t.id, t.state, t.lease, t.leaseExp.Format(time.RFC3339Nano), v, r)
	}
	return false
}

func (m *model) actComplete() {
	tok, t, id, mismatch, ok := m.finishTarget()
	if !ok {
		return
	}
	r, t0, t1 := m.call("POST", "/v1/tasks/"+id+"/complete", map[string]any{"lease_id": tok})
	v := m.leaseVerdict(t, tok, t0, t1)
	m.note("complete %s lease %s (verdict %d) -> %s", id, tok, v, r)
	if m.finishRefusal("complete", r, t, v, mismatch) {
		if r.m["state"] != "succeeded" {
			m.fatalf("complete: %s", r)
		}
		t.state, t.lease, t.leaseExp = store.StateSucceeded, "", time.Time{}
		t.hist = append(t.hist, histRow{number: t.attempt, outcome: store.OutcomeSucceeded, worker: t.worker})
		m.sync(t, false, false)
	}
}

// failExpect is the decision the model expects for a failure report.
func (m *model) failExpect(t *modelTask, code string, retryable *bool, ra time.Duration) (dead bool, reason string, lo, hi time.Duration) {
	p := m.policies[t.typ]
	class := "unknown"
	explicit := false
	switch {
	case retryable != nil && !*retryable:
		class, explicit = "permanent", true
	case retryable != nil:
		class = "transient"
	case code == "503" || code == "429":
		class = "transient"
	case code == "400":
		class = "permanent" // an HTTP status decides, Retry-After or not
	case ra > 0:
		class = "transient"
	}
	if !explicit {
		switch {
		case code != "" && slices.Contains(p.noRetryOn, code):
			class = "permanent"
		case len(p.retryOn) > 0 && code != "" && slices.Contains(p.retryOn, code):
			class = "transient"
		case len(p.retryOn) > 0:
			class = "permanent"
		}
	}
	if class == "permanent" {
		return true, store.DeadNonRetryable, 0, 0
	}
	if t.attempt >= m.effMax(t) {
		return true, store.DeadMaxAttempts, 0, 0
	}
	switch {
	case ra > 0:
		d := min(ra, p.maxDelay)
		return false, "", d, d
	case p.stored:
		d := min(p.delay, p.maxDelay)
		return false, "", d, d
	}
	return false, "", 0, p.maxDelay
}

func (m *model) actFail() {
	tok, t, id, mismatch, ok := m.finishTarget()
	if !ok {
		return
	}
	code := []string{"503", "400", "429", "x1", "x2", ""}[m.rnd.IntN(6)]
	errBody := map[string]any{"code": code, "message": "boom"}
	var retryable *bool
	if x := m.rnd.IntN(4); x < 2 {
		b := x == 0
		retryable = &b
		errBody["retryable"] = b
	}
	var ra time.Duration
	if m.rnd.IntN(4) == 0 {
		s := []float64{0.5, 3, 1000}[m.rnd.IntN(3)]
		ra = time.Duration(s * float64(time.Second))
		errBody["retry_after_seconds"] = s
	}
	attempt := t.attempt
	r, t0, t1 := m.call("POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_id": tok, "error": errBody})
	v := m.leaseVerdict(t, tok, t0, t1)
	m.note("fail %s lease %s %v (verdict %d, attempt %d) -> %s", id, tok, errBody, v, attempt, r)
	if !m.finishRefusal("fail", r, t, v, mismatch) {
		return
	}
	dead, reason, lo, hi := m.failExpect(t, code, retryable, ra)
	st, _ := r.m["state"].(string)
	if dead {
		if st != "dead" || r.m["dead_reason"] != reason || r.m["next_run_at"] != nil {
			m.fatalf("fail %v at attempt %d of %d: got %s, want dead %s", errBody, t.attempt, m.effMax(t), r, reason)
		}
		t.state, t.deadReason = store.StateDead, reason
		t.hist = append(t.hist, histRow{number: t.attempt, outcome: store.OutcomeFailed, code: code, worker: t.worker})
	} else {
		ds, _ := r.m["delay_seconds"].(float64)
		d := time.Duration(math.Round(ds * 1e9))
		if st != "retry_waiting" || d < lo-time.Microsecond || d > hi+time.Microsecond || r.m["dead_reason"] != nil {
			m.fatalf("fail %v at attempt %d of %d: got %s, want retry_waiting after %s..%s (type %s policy %+v)", errBody, t.attempt, m.effMax(t), r, lo, hi, t.typ, *m.policies[t.typ])
		}
		next := m.timeOf(r.m["next_run_at"])
		if !within(next, t0.Add(d), t1.Add(d)) {
			m.fatalf("fail: next_run_at %v, want now + %s", r.m["next_run_at"], d)
		}
		t.state, t.runAt = store.StateRetryWaiting, next
		t.hist = append(t.hist, histRow{number: t.attempt, outcome: store.OutcomeFailed, code: code, worker: t.worker, delay: d})
	}
	t.lease, t.leaseExp = "", time.Time{}
	m.sync(t, false, false)
}

var (
	cancellable = []store.State{store.StateScheduled, store.StatePending, store.StateRetryWaiting, store.StateRunning}
	retriable   = []store.State{store.StateDead, store.StateCancelled}
)

func overlaps(a, b []store.State) bool {
	for _, s := range a {
		if slices.Contains(b, s) {
			return true
		}
	}
	return false
}

func (m *model) actCancel() { m.stateAction("cancel", cancellable, store.StateCancelled) }
func (m *model) actRetry()  { m.stateAction("retry", retriable, store.StatePending) }

// stateAction runs cancel or retry on a random task: allowed in the states
// from, it moves the task to to; elsewhere it is 409 conflict.
func (m *model) stateAction(verb string, from []store.State, to store.State) {
	t := m.pick()
	if t == nil {
		return
	}
	r, _, t1 := m.call("POST", "/v1/tasks/"+t.id+"/"+verb, nil)
	may := m.may(t, t1)
	m.note("%s %s (may %v) -> %d %v", verb, t.id, may, r.status, r.m["state"])
	switch {
	case t.deleted:
		m.expectErr(r, http.StatusNotFound, CodeNotFound, verb+" of a purged task")
		return
	case r.status == http.StatusOK && overlaps(may, from):
		m.checkTaskJSON(verb, r.m)
		want := t.attempt
		if verb == "retry" {
			want = 0
		}
		if store.State(r.m["state"].(string)) != to || jnum(r.m, "attempt") != want {
			m.fatalf("%s: got %s, want state %s attempt %d", verb, r, to, want)
		}
		if verb == "retry" && r.m["last_error"] != nil {
			m.fatalf("retry: last_error kept: %s", r)
		}
		if t.state != to && len(may) > 1 {
			t.histKnown = false // it may have been reaped first
		}
		t.state, t.attempt, t.lease, t.leaseExp = to, want, "", time.Time{}
	case r.status == http.StatusConflict && slices.ContainsFunc(may, func(s store.State) bool { return !slices.Contains(from, s) }):
		m.expectErr(r, http.StatusConflict, CodeConflict, verb)
	default:
		m.fatalf("%s of task %s (may be %v): got %s", verb, t.id, may, r)
	}
	m.sync(t, false, false)
}

func (m *model) actGet() {
	if t := m.pick(); t != nil {
		m.sync(t, false, false)
	}
}

func (m *model) actAdvance() {
	d := []time.Duration{200 * time.Millisecond, time.Second, 5 * time.Second, 31 * time.Second, 70 * time.Second}[m.rnd.IntN(5)]
	if m.advanced+d > 6*time.Hour { // far from the 24h retention of finished tasks
		return
	}
	m.advanced += d
	m.e.clock.Advance(d)
	m.note("advance clock by %s", d)
}
