package api

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// The model-based test drives a real server (engine on a SQLite file, the
// API handler on an httptest server on 127.0.0.1) with a seeded random
// sequence of HTTP calls, keeps a small model of what must be true, and
// checks it after every step. The scheduler runs for real (promotion and
// reaping happen in the background), so the model knows which states a task
// may have drifted to on its own: a due scheduled or retry_waiting task may
// have become pending, and a running task whose lease expired may have been
// reaped (retry_waiting, pending or dead). Nothing else moves a task: this
// test is the only worker.

// modelTypes are the task types the test uses (one contains a slash: a
// type is also a path under /v1/types/).
var modelTypes = []string{"m.a", "m.b", "m/c"}

// modelPolicy is what the model knows of a type's stored configuration.
type modelPolicy struct {
	stored      bool
	delay       time.Duration // fixed backoff, no jitter (when stored)
	maxDelay    time.Duration
	maxAttempts int
	noRetryOn   []string
	retryOn     []string
	timeout     time.Duration
}

// modelTask is what the model knows of one acknowledged task.
type modelTask struct {
	id, typ, key string
	maxAttempts  int // the task's own (0: the type's)
	state        store.State
	attempt      int
	runAt        time.Time
	updatedAt    time.Time
	deadReason   string
	errCode      string
	lease        string // the current lease token while running
	leaseExp     time.Time
	worker       string // the worker of the current or last lease
	deleted      bool   // purged by the test
	// hist is the attempt history the task must show, when histKnown (a
	// reap the test could not tell from its own action makes it unknown
	// until the next read).
	hist      []histRow
	histKnown bool
}

// histRow is one expected row of a task's attempt history.
type histRow struct {
	number   int
	outcome  string
	code     string
	worker   string
	delay    time.Duration
	anyDelay bool // chosen by the reaper: not known to the test
}

// model is the test's state: the server, the random source and the model.
type model struct {
	t        testing.TB
	e        *env
	rnd      *rand.Rand
	tasks    map[string]*modelTask
	order    []*modelTask // in acknowledgement order
	keys     map[string]string
	tokens   []string          // every lease token ever handed out
	tokTask  map[string]string // token -> task id
	policies map[string]*modelPolicy
	advanced time.Duration
	step     int
	log      []string       // the last steps, for failure messages
	seen     map[string]int // how often each kind of answer came, for the log
	lastRaw  string
}

func newModel(t testing.TB, o envOpts, seed uint64) *model {
	o.sync = "OFF" // durability is not what this test checks; speed matters
	m := &model{
		t: t, e: newEnv(t, o), rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		tasks: map[string]*modelTask{}, keys: map[string]string{}, tokTask: map[string]string{},
		policies: map[string]*modelPolicy{}, seen: map[string]int{},
	}
	for _, typ := range modelTypes {
		m.policies[typ] = &modelPolicy{maxAttempts: 5, maxDelay: 300 * time.Second}
	}
	return m
}

// fatalf fails the test with the recent history of steps.
func (m *model) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("step %d: %s\nrecent steps:\n  %s", m.step, fmt.Sprintf(format, args...), strings.Join(m.log, "\n  "))
}

func (m *model) note(format string, args ...any) {
	kind := strings.Fields(format)[0]
	if kind == "%s" && len(args) > 0 {
		kind = fmt.Sprint(args[0])
	}
	if len(args) > 0 {
		if r, ok := args[len(args)-1].(*resp); ok {
			kind += fmt.Sprint(" ", r.status)
		}
	}
	m.seen[kind]++
	m.log = append(m.log, fmt.Sprintf("%d: ", m.step)+fmt.Sprintf(format, args...))
	if len(m.log) > 30 {
		m.log = m.log[1:]
	}
}

// call sends a request and checks what every response must satisfy: no
// 5xx, a JSON object body, and the error shape on 4xx. t0 and t1 bracket
// the server's clock during the call.
func (m *model) call(method, path string, body any) (r *resp, t0, t1 time.Time) {
	m.t.Helper()
	t0 = m.e.clock.Now()
	r = m.e.do(method, path, body)
	t1 = m.e.clock.Now()
	if r.status >= 500 {
		m.fatalf("%s %s: server error %s", method, path, r)
	}
	if r.m == nil {
		m.fatalf("%s %s: no JSON body: %s", method, path, r)
	}
	if r.status >= 400 && (r.errCode() == "" || r.errMsg() == "") {
		m.fatalf("%s %s: error without code or message: %s", method, path, r)
	}
	return r, t0, t1
}

// expectErr checks an error response's status and code.
func (m *model) expectErr(r *resp, status int, code, what string) {
	m.t.Helper()
	if r.status != status || r.errCode() != code {
		m.fatalf("%s: got %s, want %d %s", what, r, status, code)
	}
}

func (m *model) pick() *modelTask {
	if len(m.order) == 0 {
		return nil
	}
	// Favour recent tasks: they are the ones still moving.
	n := len(m.order)
	if m.rnd.IntN(3) > 0 && n > 20 {
		return m.order[n-1-m.rnd.IntN(20)]
	}
	return m.order[m.rnd.IntN(n)]
}

// may lists the states t may be in at time now without the test's doing:
// the scheduler promotes due tasks and reaps expired leases.
func (m *model) may(t *modelTask, now time.Time) []store.State {
	if t.deleted {
		return nil
	}
	s := []store.State{t.state}
	switch t.state {
	case store.StateScheduled, store.StateRetryWaiting:
		if !t.runAt.After(now) {
			s = append(s, store.StatePending)
		}
	case store.StateRunning:
		if !t.leaseExp.After(now) {
			s = append(s, store.StateRetryWaiting, store.StatePending, store.StateDead)
		}
	}
	return s
}

// settled reports whether t cannot move without the test's doing.
func (m *model) settled(t *modelTask, now time.Time) bool { return len(m.may(t, now)) == 1 }

// effMax is the attempt limit of t.
func (m *model) effMax(t *modelTask) int {
	if t.maxAttempts > 0 {
		return t.maxAttempts
	}
	return m.policies[t.typ].maxAttempts
}

// checkTaskJSON checks the documented shape of a task object.
func (m *model) checkTaskJSON(what string, o map[string]any) {
	m.t.Helper()
	id, _ := o["id"].(string)
	if !isTaskID(id) {
		m.fatalf("%s: bad id in %v", what, o)
	}
	st, _ := o["state"].(string)
	if !store.State(st).Valid() {
		m.fatalf("%s: bad state in %v", what, o)
	}
	for _, f := range []string{"run_at", "created_at", "updated_at"} {
		if s, _ := o[f].(string); s == "" || !strings.HasSuffix(s, "Z") {
			m.fatalf("%s: %s is not a UTC time in %v", what, f, o)
		}
	}
	if _, ok := o["payload"]; !ok {
		m.fatalf("%s: no payload in %v", what, o)
	}
	if _, ok := o["last_error"]; !ok {
		m.fatalf("%s: no last_error in %v", what, o)
	}
	dr, hasDR := o["dead_reason"]
	if (st == "dead") != hasDR {
		m.fatalf("%s: dead_reason %v in state %s", what, dr, st)
	}
	if hasDR {
		if _, err := checkReason("", dr.(string)); err != nil || dr == "" {
			m.fatalf("%s: bad dead_reason %v", what, dr)
		}
	}
	if a, ok := o["attempt"].(float64); !ok || a < 0 {
		m.fatalf("%s: bad attempt in %v", what, o)
	}
	if mx, ok := o["max_attempts"].(float64); !ok || mx < 1 {
		m.fatalf("%s: bad max_attempts in %v", what, o)
	}
}

func jnum(o map[string]any, k string) int {
	f, _ := o[k].(float64)
	return int(f)
}

func (m *model) timeOf(v any) time.Time {
	m.t.Helper()
	s, _ := v.(string)
	tt, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		m.fatalf("not an RFC 3339 time: %v", v)
	}
	return tt
}

// observe reconciles the model with a task object read from the server at
// or before now: its state must be one the model allows, and its attempt
// count must not have moved on its own. redriven allows a dead task (or one
// that may have been reaped to dead) to be back to pending with attempt 0.
func (m *model) observe(t *modelTask, o map[string]any, now time.Time, redriven bool) {
	m.t.Helper()
	m.checkTaskJSON("task "+t.id, o)
	st := store.State(o["state"].(string))
	att := jnum(o, "attempt")
	may := m.may(t, now)
	if redriven && slices.Contains(may, store.StateDead) && st == store.StatePending && att == 0 {
		// Put back by a redrive.
	} else {
		if !slices.Contains(may, st) {
			m.fatalf("task %s is %s (attempt %d); the model allows %v (model state %s, run_at %s, lease expires %s, now %s)",
				t.id, st, att, may, t.state, t.runAt.Format(time.RFC3339Nano), t.leaseExp.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
		}
		if att != t.attempt {
			m.fatalf("task %s: attempt %d, model %d (state %s -> %s)", t.id, att, t.attempt, t.state, st)
		}
	}
	if o["type"] != t.typ {
		m.fatalf("task %s: type %v, want %s", t.id, o["type"], t.typ)
	}
	if jnum(o, "max_attempts") != m.effMax(t) {
		m.fatalf("task %s: max_attempts %d, want %d", t.id, jnum(o, "max_attempts"), m.effMax(t))
	}
	if st == store.StateScheduled && t.state == store.StateScheduled && !m.timeOf(o["run_at"]).Equal(t.runAt) {
		m.fatalf("task %s: run_at %v, model %s", t.id, o["run_at"], t.runAt.Format(time.RFC3339Nano))
	}
	if t.state == store.StateRunning && st != store.StateRunning && t.histKnown {
		// Reaped: the reaper records the attempt as lease_expired.
		t.hist = append(t.hist, histRow{number: t.attempt, outcome: store.OutcomeLeaseExpired,
			code: "lease_expired", worker: t.worker, anyDelay: true})
	}
	if st != store.StateRunning {
		t.lease, t.leaseExp = "", time.Time{}
	}
	t.state, t.attempt = st, att
	t.runAt = m.timeOf(o["run_at"])
	t.updatedAt = m.timeOf(o["updated_at"])
	t.deadReason, _ = o["dead_reason"].(string)
	t.errCode = ""
	if le, ok := o["last_error"].(map[string]any); ok {
		t.errCode, _ = le["code"].(string)
	}
}

// sync reads t from the server and reconciles the model with it. A task
// the model holds must exist unless the test purged it, or purged says it
// may just have been purged (when it was or may have become dead).
func (m *model) sync(t *modelTask, redriven, purged bool) {
	m.t.Helper()
	if t.deleted {
		m.mustGone(t)
		return
	}
	r, _, t1 := m.call("GET", "/v1/tasks/"+t.id, nil)
	if r.status == http.StatusNotFound {
		if purged && slices.Contains(m.may(t, t1), store.StateDead) {
			m.forget(t)
			return
		}
		m.fatalf("acknowledged task %s (model state %s) is lost: %s", t.id, t.state, r)
	}
	if r.status != http.StatusOK {
		m.fatalf("GET task %s: %s", t.id, r)
	}
	as, ok := r.m["attempts"].([]any)
	if !ok {
		m.fatalf("GET task %s: no attempts list: %s", t.id, r)
	}
	m.observe(t, r.m, t1, redriven)
	m.lastRaw = string(r.raw)
	m.checkHistory(t, as)
}

// checkHistory compares a task's attempt history with the model's.
func (m *model) checkHistory(t *modelTask, as []any) {
	m.t.Helper()
	var got []histRow
	for _, x := range as {
		a := x.(map[string]any)
		h := histRow{number: jnum(a, "number"), outcome: fmt.Sprint(a["outcome"]), worker: fmt.Sprint(a["worker_id"])}
		h.delay = time.Duration(math.Round(a["delay_seconds"].(float64) * 1e9))
		if e, ok := a["error"].(map[string]any); ok {
			h.code = fmt.Sprint(e["code"])
			if e["message"] == "" || e["class"] == "" {
				m.fatalf("task %s: attempt error without message or class: %v", t.id, a)
			}
		} else if h.outcome != store.OutcomeSucceeded {
			m.fatalf("task %s: failed attempt without error: %v", t.id, a)
		}
		for _, f := range []string{"started_at", "finished_at"} {
			if s, _ := a[f].(string); !strings.HasSuffix(s, "Z") {
				m.fatalf("task %s: attempt %s is not a UTC time: %v", t.id, f, a)
			}
		}
		got = append(got, h)
	}
	if !t.histKnown {
		t.hist, t.histKnown = got, true
		return
	}
	same := len(got) == len(t.hist)
	for i := 0; same && i < len(got); i++ {
		w := t.hist[i]
		g := got[i]
		same = g.number == w.number && g.outcome == w.outcome && g.code == w.code && g.worker == w.worker &&
			(w.anyDelay || g.delay-w.delay < time.Microsecond && w.delay-g.delay < time.Microsecond)
	}
	if !same {
		m.fatalf("task %s (state %s): attempt history\n  got  %+v\n  want %+v\n%s", t.id, t.state, got, t.hist, m.lastRaw)
	}
}

func (m *model) mustGone(t *modelTask) {
	m.t.Helper()
	r, _, _ := m.call("GET", "/v1/tasks/"+t.id, nil)
	m.expectErr(r, http.StatusNotFound, CodeNotFound, "GET purged task "+t.id)
}

// forget records that t was purged: its idempotency key is free again.
func (m *model) forget(t *modelTask) {
	t.deleted = true
	t.lease = ""
	if t.key != "" && m.keys[t.key] == t.id {
		delete(m.keys, t.key)
	}
}

// syncAll reconciles every task.
func (m *model) syncAll() {
	for _, t := range m.order {
		m.sync(t, false, false)
	}
}

// run executes n random steps and then a final full check.
func (m *model) run(n int) {
	type action struct {
		weight int
		name   string
		f      func()
	}
	actions := []action{
		{14, "enqueue", m.actEnqueue},
		{5, "batch", m.actBatch},
		{2, "put type", m.actPutType},
		{12, "lease", m.actLease},
		{6, "heartbeat", m.actHeartbeat},
		{10, "complete", m.actComplete},
		{10, "fail", m.actFail},
		{4, "cancel", m.actCancel},
		{4, "retry", m.actRetry},
		{2, "dlq list", m.actDLQList},
		{2, "redrive", m.actRedrive},
		{2, "purge", m.actPurge},
		{5, "get", m.actGet},
		{1, "list", m.actList},
		{1, "stats", m.actStats},
		{1, "dlq summary", m.actSummary},
		{6, "advance clock", m.actAdvance},
	}
	total := 0
	for _, a := range actions {
		total += a.weight
	}
	for m.step = 0; m.step < n; m.step++ {
		x := m.rnd.IntN(total)
		for _, a := range actions {
			if x < a.weight {
				a.f()
				break
			}
			x -= a.weight
		}
	}
	m.syncAll()
	m.actList()
	m.actStats()
	m.t.Logf("answers seen: %v", m.seen)
}

// TestAPIModelRandomSequences runs seeded random call sequences against a
// real server and checks the model's invariants after every step.
func TestAPIModelRandomSequences(t *testing.T) {
	steps := 1800
	if testing.Short() {
		steps = 300
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			newModel(t, envOpts{}, seed).run(steps / 3)
		})
	}
}

// FuzzAPIModel runs the model-based test for the seeds the fuzzer picks.
func FuzzAPIModel(f *testing.F) {
	f.Add(uint64(7))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, seed uint64) {
		sub, err := os.MkdirTemp(dir, "model")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(sub) })
		newModel(t, envOpts{sqliteDir: sub}, seed).run(150)
	})
}
