package storediff_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// base is the differential clock's origin (whole milliseconds throughout,
// which both backends store exactly).
var base = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

// TestBackendsAgree runs random call sequences against both backends and
// compares every answer and, after each call, every task.
func TestBackendsAgree(t *testing.T) {
	seeds, steps := 8, 300
	if testing.Short() {
		seeds, steps = 2, 150
	}
	// A deeper search: RETRYQ_DIFF_SEEDS=200, RETRYQ_DIFF_STEPS=2000.
	for _, o := range []struct {
		env string
		n   *int
	}{{"RETRYQ_DIFF_SEEDS", &seeds}, {"RETRYQ_DIFF_STEPS", &steps}} {
		if v := os.Getenv(o.env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				t.Fatalf("%s=%q: want a positive number", o.env, v)
			}
			*o.n = n
		}
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			t.Parallel()
			d := newDiff(t, uint64(seed))
			for i := range steps {
				d.step(i)
			}
			d.compareHistory()
		})
	}
}

// diff drives the two stores in lockstep.
type diff struct {
	t      *testing.T
	ctx    context.Context
	rng    *rand.Rand
	stores [2]store.Store
	names  [2]string
	now    time.Time
	ids    []string // every id ever inserted (or tried)
	next   int
	// leases[b][task] lists the lease ids granted to task by backend b, in
	// order; canon[b] maps each to its backend-independent name.
	leases [2]map[string][]string
	canon  [2]map[string]string
	log    []string // the calls so far, for the failure message
}

func newDiff(t *testing.T, seed uint64) *diff {
	ctx := t.Context()
	lite := backendtest.Open(t, backendtest.SQLite, "")
	t.Cleanup(func() { lite.Close() })
	pg := backendtest.Open(t, backendtest.Postgres, "")
	t.Cleanup(func() { pg.Close() })
	d := &diff{t: t, ctx: ctx, rng: rand.New(rand.NewPCG(seed, 0x5eed)), stores: [2]store.Store{lite, pg},
		names: [2]string{backendtest.SQLite, backendtest.Postgres}, now: base}
	for b := range 2 {
		d.leases[b] = map[string][]string{}
		d.canon[b] = map[string]string{}
	}
	return d
}

// step makes one random call on both stores, then compares the tables.
func (d *diff) step(i int) {
	switch r := d.rng.IntN(100); {
	case r < 22:
		d.insert()
	case r < 40:
		d.fetch()
	case r < 58:
		d.outcomes()
	case r < 64:
		d.extend()
	case r < 68:
		d.expired()
	case r < 74:
		d.promote()
	case r < 78:
		d.cancel()
	case r < 82:
		d.retry()
	case r < 85:
		d.redrive()
	case r < 87:
		d.purge()
	case r < 89:
		d.retention()
	case r < 93:
		d.meta()
	default:
		d.tick()
	}
	d.compareTables(i)
}

// call runs f on both stores and fails when the normalized answers differ.
func (d *diff) call(what string, f func(b int, s store.Store) any) {
	d.log = append(d.log, what)
	var got [2]any
	for b, s := range d.stores {
		got[b] = f(b, s)
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		d.fail("%s, %s (-) against %s (+):\n%s", what, d.names[0], d.names[1], lineDiff(show(got[0]), show(got[1])))
	}
}

func (d *diff) fail(format string, args ...any) {
	d.t.Helper()
	from := max(0, len(d.log)-15)
	d.t.Fatalf("backends disagree after %d calls (last: %s)\n"+format, append([]any{len(d.log), strings.Join(d.log[from:], " | ")}, args...)...)
}

// lineDiff shows the lines around the first difference of a and b.
func lineDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	i := 0
	for i < len(la) && i < len(lb) && la[i] == lb[i] {
		i++
	}
	from := max(0, i-12)
	var out []string
	for _, l := range la[from:min(len(la), i+6)] {
		out = append(out, "- "+l)
	}
	for _, l := range lb[from:min(len(lb), i+6)] {
		out = append(out, "+ "+l)
	}
	return strings.Join(out, "\n")
}

func show(v any) string {
	b, err := json.MarshalIndent(v, "  ", " ")
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// errClass reduces an error to what the contract specifies about it.
func errClass(err error) string {
	var ce *store.ConflictError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ce):
		return "conflict:" + string(ce.State)
	case errors.Is(err, store.ErrInvalid):
		return "invalid"
	case errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, store.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	}
	return "other: " + err.Error()
}

// errClasses reduces a batch call's answer (an error per item, and one for
// the call) to what the contract specifies: the call's class first.
func errClasses(errs []error, err error) []string {
	out := []string{errClass(err)}
	for _, e := range errs {
		out = append(out, errClass(e))
	}
	return out
}

func (d *diff) ms(max int) time.Duration { return time.Duration(d.rng.IntN(max+1)) * time.Millisecond }

func (d *diff) pick(xs ...string) string { return xs[d.rng.IntN(len(xs))] }

// someID returns an inserted id, now and then one that never was.
func (d *diff) someID() string {
	if len(d.ids) == 0 || d.rng.IntN(10) == 0 {
		return "missing"
	}
	return d.ids[d.rng.IntN(len(d.ids))]
}

func (d *diff) tick() {
	if d.rng.IntN(4) == 0 {
		d.now = d.now.Add(15 * time.Second) // past every lease
	} else {
		d.now = d.now.Add(d.ms(3000))
	}
	d.log = append(d.log, "tick to +"+d.now.Sub(base).String())
}

func (d *diff) insert() {
	var tasks []store.NewTask
	for range 1 + d.rng.IntN(3) {
		d.next++
		id := fmt.Sprintf("t%04d", d.next)
		nt := store.NewTask{ID: id, Type: d.pick("a", "b", "c"), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, d.next)),
			Priority: d.rng.IntN(5) - 2, MaxAttempts: d.rng.IntN(4)}
		if d.rng.IntN(4) == 0 {
			nt.IdempotencyKey = d.pick("k1", "k2", "k3", "k4", "k5", "k6")
		}
		switch d.rng.IntN(4) {
		case 0:
			nt.RunAt = d.now.Add(d.ms(5000))
		case 1:
			nt.RunAt = d.now.Add(-d.ms(5000))
		}
		if d.rng.IntN(5) == 0 {
			nt.Lease = &store.NewLease{LeaseID: "ins-" + id, WorkerID: "w-ins", Duration: time.Second + d.ms(9000)}
		}
		switch d.rng.IntN(60) {
		case 0:
			nt.Type = "" // invalid: the whole batch is refused
		case 1:
			nt.IdempotencyKey = "nul\x00key" // invalid too
		case 2:
			if len(d.ids) > 0 {
				nt.ID = d.ids[d.rng.IntN(len(d.ids))] // an id that is (or was) taken
			}
		}
		tasks = append(tasks, nt)
		d.ids = append(d.ids, id)
	}
	d.call(fmt.Sprintf("insert %d", len(tasks)), func(b int, s store.Store) any {
		res, err := s.InsertTasks(d.ctx, store.InsertParams{Tasks: tasks, Now: d.now})
		out := []any{errClass(err)}
		for _, r := range res {
			if r.Task.LeaseID != "" && !r.Duplicate {
				d.grant(b, r.Task.ID, r.Task.LeaseID)
			}
			out = append(out, r.Duplicate, d.norm(b, r.Task))
		}
		return out
	})
}

func (d *diff) fetch() {
	var types []string
	if d.rng.IntN(2) == 0 {
		types = []string{d.pick("a", "b", "c")}
	}
	limit := 1 + d.rng.IntN(4)
	worker := d.pick("w1", "w2")
	dur := time.Second + d.ms(9000)
	d.call(fmt.Sprintf("fetch %v %d", types, limit), func(b int, s store.Store) any {
		ts, err := s.FetchTasks(d.ctx, store.FetchParams{Types: types, Limit: limit, WorkerID: worker, LeaseDuration: dur, Now: d.now})
		out := []any{errClass(err)}
		for _, t := range ts {
			d.grant(b, t.ID, t.LeaseID)
			out = append(out, d.norm(b, t))
		}
		return out
	})
}

// grant records a lease backend b granted.
func (d *diff) grant(b int, task, lease string) {
	if _, ok := d.canon[b][lease]; ok {
		return
	}
	d.leases[b][task] = append(d.leases[b][task], lease)
	d.canon[b][lease] = fmt.Sprintf("%s#%d", task, len(d.leases[b][task]))
}

// leaseOf returns the lease of task that backend b granted k-th from the
// end (0: the latest), or a lease that never existed.
func (d *diff) leaseOf(b int, task string, k int) string {
	ls := d.leases[b][task]
	if k < 0 || k >= len(ls) {
		return "never-granted"
	}
	return ls[len(ls)-1-k]
}

// leased returns distinct tasks that were leased at least once.
func (d *diff) leased(n int) []string {
	var all []string
	for id := range d.leases[0] {
		all = append(all, id)
	}
	if len(all) == 0 {
		return nil
	}
	slices.Sort(all)
	d.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

func (d *diff) outcomes() {
	tasks := d.leased(1 + d.rng.IntN(3))
	if tasks == nil {
		return
	}
	type plan struct {
		task string
		k    int
		o    store.Outcome
	}
	var plans []plan
	for _, id := range tasks {
		k := 0
		if d.rng.IntN(8) == 0 {
			k = 1 + d.rng.IntN(2) // a stale (or never granted) lease
		}
		o := store.Outcome{TaskID: id, OutcomeKind: store.OutcomeFailed, LastDelay: d.ms(4000),
			Error: &store.ErrorInfo{Code: d.pick("E1", "E2", "HTTP_503"), Message: "boom", Class: "transient"}}
		switch d.rng.IntN(6) {
		case 0, 1:
			o = store.Outcome{TaskID: id, State: store.StateSucceeded, OutcomeKind: store.OutcomeSucceeded, Detail: "ok"}
		case 2:
			o.State, o.RunAt, o.EffectivePrio = store.StateRetryWaiting, d.now.Add(d.ms(4000)-time.Second), d.rng.IntN(5)-3
		case 3:
			o.State, o.DeadReason = store.StateDead, d.pick(store.DeadMaxAttempts, store.DeadNonRetryable, store.DeadRetryWindow)
			o.Error.Class = "permanent"
		case 4:
			// A release, now and then with an error and a delay, which it must not store.
			o = store.Outcome{TaskID: id, State: store.StatePending}
			if d.rng.IntN(2) == 0 {
				o.Error, o.LastDelay = &store.ErrorInfo{Code: "E_REL", Message: "shutdown", Class: "unknown"}, time.Second
			}
		case 5: // the reaper's own outcome
			o.ReapExpired, o.OutcomeKind = true, store.OutcomeLeaseExpired
			o.Error = &store.ErrorInfo{Code: "lease_expired", Message: "lease expired", Class: "lease_expired"}
			o.State, o.RunAt, o.EffectivePrio = store.StateRetryWaiting, d.now, -1
		}
		switch d.rng.IntN(30) {
		case 0:
			o.State = "finished" // not an outcome state: a per-item ErrInvalid
		case 1:
			o.Error = &store.ErrorInfo{Code: "E\x00", Message: "bad \xff text", Class: "transient"}
			o.Detail = "nul \x00 byte"
		}
		plans = append(plans, plan{id, k, o})
	}
	if d.rng.IntN(6) == 0 { // the same task twice: applied in order
		p := plans[0]
		p.k = d.rng.IntN(2)
		p.o.State, p.o.OutcomeKind, p.o.ReapExpired = store.StateSucceeded, store.OutcomeSucceeded, false
		plans = append(plans, p)
	}
	d.call(fmt.Sprintf("outcomes %v", tasks), func(b int, s store.Store) any {
		var os []store.Outcome
		for _, p := range plans {
			o := p.o
			o.LeaseID = d.leaseOf(b, p.task, p.k)
			os = append(os, o)
		}
		return errClasses(s.RecordOutcomes(d.ctx, store.OutcomeParams{Outcomes: os, Now: d.now}))
	})
}

func (d *diff) extend() {
	tasks := d.leased(1 + d.rng.IntN(3))
	if tasks == nil {
		return
	}
	exp := d.now.Add(d.ms(10_000))
	ks := make([]int, len(tasks))
	for i := range ks {
		if d.rng.IntN(6) == 0 {
			ks[i] = 1
		}
	}
	d.call(fmt.Sprintf("extend %v", tasks), func(b int, s store.Store) any {
		var refs []store.LeaseRef
		for i, id := range tasks {
			refs = append(refs, store.LeaseRef{TaskID: id, LeaseID: d.leaseOf(b, id, ks[i]), ExpiresAt: exp})
		}
		return errClasses(s.ExtendLeases(d.ctx, store.ExtendParams{Leases: refs, Now: d.now}))
	})
}

func (d *diff) expired() {
	limit := 1 + d.rng.IntN(5)
	d.call(fmt.Sprintf("expired %d", limit), func(b int, s store.Store) any {
		ts, err := s.ExpiredLeases(d.ctx, store.ExpiredParams{Limit: limit, Now: d.now})
		return []any{errClass(err), d.normAll(b, ts)}
	})
}

func (d *diff) promote() {
	limit := 1 + d.rng.IntN(5)
	d.call(fmt.Sprintf("promote %d", limit), func(b int, s store.Store) any {
		n, err := s.PromoteDue(d.ctx, store.PromoteParams{Limit: limit, Now: d.now})
		return []any{errClass(err), n}
	})
}

func (d *diff) cancel() {
	id := d.someID()
	d.call("cancel "+id, func(b int, s store.Store) any {
		t, err := s.CancelTask(d.ctx, store.CancelParams{ID: id, Now: d.now})
		return []any{errClass(err), d.norm(b, t)}
	})
}

func (d *diff) retry() {
	id := d.someID()
	d.call("retry "+id, func(b int, s store.Store) any {
		t, err := s.RetryTask(d.ctx, store.RetryParams{ID: id, Now: d.now})
		return []any{errClass(err), d.norm(b, t)}
	})
}

func (d *diff) deadFilter() store.DeadFilter {
	f := store.DeadFilter{Type: d.pick("", "", "a", "b"), Reason: d.pick("", "", store.DeadMaxAttempts, store.DeadNonRetryable),
		ErrorCode: d.pick("", "", "", "E1"), Limit: d.rng.IntN(4), Now: d.now}
	if d.rng.IntN(3) == 0 {
		f.Since = d.now.Add(-d.ms(8000))
	}
	return f
}

func (d *diff) redrive() {
	f := d.deadFilter()
	d.call(fmt.Sprintf("redrive %+v", f), func(b int, s store.Store) any {
		n, err := s.RedriveDead(d.ctx, f)
		return []any{errClass(err), n}
	})
}

func (d *diff) purge() {
	f := d.deadFilter()
	if d.rng.IntN(2) == 0 {
		f.Before = d.now.Add(-d.ms(5000))
	}
	d.call(fmt.Sprintf("purge %+v", f), func(b int, s store.Store) any {
		n, err := s.PurgeDead(d.ctx, f)
		return []any{errClass(err), n}
	})
}

func (d *diff) retention() {
	cut := func() time.Time {
		if d.rng.IntN(3) == 0 {
			return time.Time{}
		}
		return d.now.Add(-d.ms(6000))
	}
	p := store.RetentionParams{SucceededBefore: cut(), CancelledBefore: cut(), DeadBefore: cut(), Limit: 1 + d.rng.IntN(5)}
	d.call("retention", func(b int, s store.Store) any {
		r, err := s.DeleteFinished(d.ctx, p)
		return []any{errClass(err), r}
	})
}

// meta exercises types, leadership leases and the node registry.
func (d *diff) meta() {
	node := d.pick("n1", "n2", "n3")
	switch d.rng.IntN(4) {
	case 0:
		tc := store.TypeConfig{Type: d.pick("a", "b", "c"), Priority: d.rng.IntN(5), Timeout: d.ms(3000),
			Policy: json.RawMessage(d.pick("", `{"max_attempts":3}`))}
		d.call(fmt.Sprintf("put type %+v", tc), func(b int, s store.Store) any {
			got, err := s.PutType(d.ctx, tc, d.now)
			all, lerr := s.ListTypes(d.ctx)
			return []any{errClass(err), got.Type, got.Priority, got.Timeout, string(got.Policy), stamp(got.UpdatedAt), errClass(lerr), len(all)}
		})
	case 1:
		ttl := time.Second + d.ms(4000)
		d.call(fmt.Sprintf("acquire leader %s %v", node, ttl), func(b int, s store.Store) any {
			l, err := s.AcquireLeader(d.ctx, store.LeaderParams{Name: "sched", NodeID: node, TTL: ttl, Now: d.now})
			return []any{errClass(err), l.Name, l.NodeID, stamp(l.ExpiresAt)}
		})
	case 2:
		d.call("release leader "+node, func(b int, s store.Store) any {
			err := s.ReleaseLeader(d.ctx, store.LeaderParams{Name: "sched", NodeID: node, Now: d.now})
			l, aerr := s.AcquireLeader(d.ctx, store.LeaderParams{Name: "sched", NodeID: "probe", TTL: time.Millisecond, Now: d.now})
			return []any{errClass(err), errClass(aerr), l.NodeID, stamp(l.ExpiresAt)}
		})
	case 3:
		n := store.Node{ID: node, Host: "h-" + node, Version: "v1", Role: d.pick("leader", "standby", "worker"), StartedAt: base}
		since := d.now.Add(-d.ms(5000))
		d.call(fmt.Sprintf("heartbeat %s, nodes since %v", node, since.Sub(base)), func(b int, s store.Store) any {
			err := s.HeartbeatNode(d.ctx, n, d.now)
			ns, lerr := s.ListNodes(d.ctx, since)
			out := []any{errClass(err), errClass(lerr)}
			for _, x := range ns {
				out = append(out, x.ID, x.Host, x.Version, x.Role, stamp(x.StartedAt), stamp(x.LastSeen))
			}
			return out
		})
	}
}

// compareTables compares every task, the next wake-up and, every 20
// calls, the statistics and the dead-letter summary.
func (d *diff) compareTables(i int) {
	d.call("list tasks", func(b int, s store.Store) any {
		var all []normTask
		cursor := ""
		for range 100 {
			ts, next, err := s.ListTasks(d.ctx, store.ListParams{Limit: 50, Cursor: cursor})
			if err != nil {
				return "error: " + err.Error()
			}
			all = append(all, d.normAll(b, ts)...)
			if next == "" {
				break
			}
			cursor = next
		}
		return all
	})
	d.call("next wake-up", func(b int, s store.Store) any {
		w, err := s.NextWakeup(d.ctx, store.WakeupParams{})
		return []string{errClass(err), stamp(w.NextRunAt), stamp(w.NextLeaseExpiry)}
	})
	if i%5 == 4 {
		d.compareListings()
	}
	if i%20 != 19 {
		return
	}
	since := base
	if d.rng.IntN(2) == 0 {
		since = d.now.Add(-d.ms(10_000))
	}
	d.call("stats", func(b int, s store.Store) any {
		st, err := s.Stats(d.ctx, store.StatsParams{Since: since})
		return []any{errClass(err), st}
	})
	sp := store.SummaryParams{Since: since, Type: d.pick("", "a", "b"), Limit: d.rng.IntN(4)}
	d.call("dead summary", func(b int, s store.Store) any {
		g, err := s.DeadSummary(d.ctx, sp)
		for i := range g.Groups {
			g.Groups[i].Oldest, g.Groups[i].Newest = g.Groups[i].Oldest.UTC(), g.Groups[i].Newest.UTC()
		}
		return []any{errClass(err), g}
	})
}

// compareListings compares a filtered task listing and a filtered
// dead-letter listing, both read page by page with a random page size.
func (d *diff) compareListings() {
	typ := d.pick("", "a", "b")
	var states []store.State
	for range d.rng.IntN(3) {
		states = append(states, store.States[d.rng.IntN(len(store.States))])
	}
	size := 1 + d.rng.IntN(7)
	d.call(fmt.Sprintf("list tasks type %q states %v by %d", typ, states, size), func(b int, s store.Store) any {
		return d.pages(b, func(cursor string) ([]store.Task, string, error) {
			return s.ListTasks(d.ctx, store.ListParams{Type: typ, States: states, Limit: size, Cursor: cursor})
		})
	})
	f := d.deadFilter()
	f.Limit = size
	d.call(fmt.Sprintf("list dead %+v", f), func(b int, s store.Store) any {
		return d.pages(b, func(cursor string) ([]store.Task, string, error) {
			f.Cursor = cursor
			return s.ListDead(d.ctx, f)
		})
	})
}

// pages reads every page of a listing (at most 500).
func (d *diff) pages(b int, page func(cursor string) ([]store.Task, string, error)) any {
	var all []any
	cursor := ""
	for range 500 {
		ts, next, err := page(cursor)
		if err != nil {
			return append(all, errClass(err))
		}
		all = append(all, d.normAll(b, ts))
		if next == "" {
			break
		}
		cursor = next
	}
	return all
}

// compareHistory compares every task's attempt history.
func (d *diff) compareHistory() {
	for _, id := range d.ids {
		d.call("attempts "+id, func(b int, s store.Store) any {
			as, err := s.ListAttempts(d.ctx, id)
			out := []any{errClass(err)}
			for _, a := range as {
				out = append(out, []any{a.Number, a.WorkerID, stamp(a.StartedAt), stamp(a.FinishedAt), a.Outcome, a.Error, a.Delay, a.Detail})
			}
			return out
		})
	}
}
