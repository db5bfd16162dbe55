package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// envModelSeed sets the seed of TestEnginesUnderUserOperations, to replay a run.
const envModelSeed = "RETRYQ_MODEL_SEED"

// opsSlots is how many engines the operations test runs at once.
const opsSlots = 3

// opsAdminApp is the application name of the test's own sessions, which
// the test's terminations spare.
const opsAdminApp = "ops-test"

// TestEnginesUnderUserOperations runs three engines on one PostgreSQL
// database, each with an in-process worker, pull workers and the push
// deliveries of a type whose target is an httptest server on 127.0.0.1,
// over tasks whose scripts say what each attempt does (success, a
// transient failure, a permanent one, a Retry-After, a run that holds its
// lease a while; a push target answers 200, 500, 400 or 429 with
// Retry-After), while the test does what operators do: it cancels tasks
// in every state, retries dead and cancelled ones, redrives and purges
// the DLQ with filters while tasks die, lowers and raises a type's max
// attempts, restarts engines and ends every session of the database but
// its own (pg_terminate_backend). A trigger audits every transition of
// every task; the checks (engines_ops_check_test.go) then hold each task's
// audit to the lifecycle of docs/architecture.md (attempt numbers
// contiguous, nothing after a terminal state but a manual retry, a
// cancelled running attempt without a history row, deletes only of dead
// tasks), its history to its attempts, each decision to the script and
// the set of max attempts a node may have held then (a type cache serves
// a change within opsPolicyLag), the test's operations to the manual
// moves, and the handler runs to the history (no run while another held a
// valid lease; every recorded outcome from an observed run; every run
// that returned with its lease recorded, unless its node logged that it
// dropped the outcome: engines_outcome_test.go).
//
// The seed is logged; RETRYQ_MODEL_SEED replays it (the operations
// replay; their timing against the engines cannot). RETRYQ_MULTINODE_LOG
// names a file for the engines' logs. About 30 s with -race on 2 cores;
// -short runs a smaller workload.
func TestEnginesUnderUserOperations(t *testing.T) {
	seed := testSeed(t, envModelSeed)
	total, chaosFor := 2000, 14*time.Second
	if testing.Short() {
		total, chaosFor = 300, 4*time.Second
	}
	dbURL := pgtest.URL(t)
	m := newOpsModel()
	c := &opsCluster{engineSet: engineSet{slots: make([]*engineSlot, opsSlots)}, t: t, url: dbURL, m: m, rng: rand.New(rand.NewPCG(seed, 4)),
		log: engineLogger(t, &m.modelBook)}
	srv := httptest.NewServer(http.HandlerFunc(c.serveTarget))
	defer srv.Close()
	c.target = srv.URL + "/deliver"

	c.admin = openAdmin(t, dbURL, opsAdminApp, installAudit,
		c.spec(opsTypeLocal, opsInitialMax), c.spec(opsTypePull, opsInitialMax), c.spec(opsTypePush, opsInitialMax))

	rng := rand.New(rand.NewPCG(seed, 1))
	types := []string{opsTypeLocal, opsTypePull, opsTypePush}
	reqs := make([]engine.EnqueueRequest, total)
	for i := range total {
		typ := types[rng.IntN(len(types))]
		m.scripts[i] = opsScripts[rng.IntN(len(opsScripts))]
		reqs[i] = engine.EnqueueRequest{Type: typ, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), IdempotencyKey: fmt.Sprintf("ops-%d", i)}
		if rng.IntN(5) == 0 { // scheduled, for cancels of scheduled tasks
			reqs[i].Delay = time.Duration(300+rng.IntN(1700)) * time.Millisecond
		}
	}

	for i := range opsSlots {
		c.open(i)
	}
	defer func() {
		for i := range opsSlots {
			c.close(i)
		}
	}()

	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		c.produce(reqs, rand.New(rand.NewPCG(seed, 2)), chaosFor*2/3)
	}()

	crng := rand.New(rand.NewPCG(seed, 3))
	chaosEnd := time.Now().Add(chaosFor)
	// The max attempts of a type change six times over the chaos.
	nextPolicy := time.Now().Add(chaosFor / 7)
	for n := 0; time.Now().Before(chaosEnd) && n < 100_000; n++ {
		time.Sleep(time.Duration(20+crng.IntN(50)) * time.Millisecond)
		live := c.live()
		s := live[crng.IntN(len(live))]
		if time.Now().After(nextPolicy) {
			nextPolicy = nextPolicy.Add(chaosFor / 7)
			c.setMaxAttempts(s, types[crng.IntN(len(types))], []int{2, 3, 5, 6}[crng.IntN(4)])
			continue
		}
		switch k := crng.IntN(100); {
		case k < 2:
			c.restart(crng.IntN(opsSlots))
		case k < 5:
			c.terminateAll()
		case k < 45:
			states := []store.State{store.StatePending, store.StateRunning, store.StateRetryWaiting, store.StateScheduled}
			c.cancelIn(s, types[crng.IntN(len(types))], states[crng.IntN(len(states))], crng)
		case k < 60:
			c.retryCancelled(s, crng)
		case k < 72:
			c.retryDead(s, crng)
		case k < 86:
			f := store.DeadFilter{Type: types[crng.IntN(len(types))], Limit: 1 + crng.IntN(4)}
			switch crng.IntN(3) {
			case 0:
				f.Reason = store.DeadMaxAttempts
			case 1:
				f.Since = time.Now().Add(-time.Duration(crng.IntN(3000)) * time.Millisecond)
			}
			c.redrive(s, f)
		default:
			f := store.DeadFilter{Type: types[crng.IntN(len(types))], Limit: 1 + crng.IntN(3)}
			switch crng.IntN(4) {
			case 0:
				f.Reason = store.DeadNonRetryable
			case 1:
				f.ErrorCode = map[string]string{opsTypeLocal: "poison", opsTypePull: "poison", opsTypePush: "400"}[f.Type]
			case 2:
				f.Before = time.Now().Add(-time.Duration(crng.IntN(1000)) * time.Millisecond) // dead for a while
			}
			c.purge(s, f)
		}
	}
	<-prodDone
	if t.Failed() {
		return
	}
	drain(t, c.admin)
	for i := range opsSlots {
		c.close(i)
	}
	m.waitRunsEnded(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m.checkEnqueued(t, total)
	tot := m.check(t, ctx, c.admin)
	t.Logf("%d tasks, %d recorded attempts (%d reaped), %d released; cancelled from %v; %d dead and %d cancelled retried; %d purged; %d session cuts, %d policy changes",
		total, tot.attempts, tot.reaped, tot.released, tot.cancelledFrom, tot.deadRetried, tot.cancelledRetried, tot.deleted,
		len(m.cuts), len(m.policies))
}

// opsCluster is the operations test's engines on one database. mu
// (engineSet's) guards rng and cancelled too.
type opsCluster struct {
	engineSet
	t      *testing.T
	url    string
	target string
	admin  *postgres.Store
	m      *opsModel
	log    *slog.Logger // the engines' logs (engineLogger)
	rng    *rand.Rand   // under mu
	// cancelled holds the tasks the test cancelled, for its retries; under mu.
	cancelled []string
}

func (c *opsCluster) spec(typ string, maxAttempts int) engine.TypeSpec {
	s := engine.TypeSpec{Type: typ, Timeout: 5 * time.Second, Policy: retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: opsDelay,
		MaxDelay: opsMaxDelay, Jitter: retry.JitterNone, MaxAttempts: maxAttempts}}
	if typ == opsTypePush {
		s.Target = &engine.Target{URL: c.target, Concurrency: 8}
	}
	return s
}

// open opens an engine in slot i with an in-process worker and two pull
// loops; its push deliveries run inside the engine.
func (c *opsCluster) open(i int) {
	c.t.Helper()
	node := fmt.Sprintf("ops-%d-g%d", i, c.nextGen())
	c.put(i, openSlot(c.t, node, slotSpec{
		url: c.url,
		engine: engine.Config{LeaseDuration: opsLease, PollInterval: 100 * time.Millisecond, LeaderTTL: engine.MinLeaderTTL,
			DefaultPolicy: c.spec(opsTypeLocal, opsInitialMax).Policy, Logger: c.log.With("node", node)},
		worker: engine.WorkerConfig{Types: []string{opsTypeLocal}, Concurrency: 4, ShutdownGrace: 100 * time.Millisecond,
			Handle: func(hctx context.Context, t *store.Task) error { return c.runLocal(hctx, node, t) }},
		pulls: 2,
		pull:  c.pullLoop,
	}))
}

func (c *opsCluster) close(i int) {
	s := c.take(i)
	if s == nil {
		return
	}
	c.m.mu.Lock()
	c.m.closing = append(c.m.closing, opsClose{node: s.node, at: time.Now()})
	c.m.mu.Unlock()
	s.stop()
}

func (c *opsCluster) restart(i int) {
	c.close(i)
	c.open(i)
}

// indexOf returns the script index a payload names, or -1.
func indexOf(payload []byte) int {
	var p struct{ I *int }
	if err := json.Unmarshal(payload, &p); err != nil || p.I == nil {
		return -1
	}
	return *p.I
}

// hold runs a hold action: opsHoldFor, or less when ctx ends (then the
// run is "aborted", a failure).
func hold(ctx context.Context) string {
	sleepCtx(ctx, opsHoldFor)
	if ctx.Err() != nil {
		return "aborted"
	}
	return opsOK
}

func (c *opsCluster) runLocal(ctx context.Context, node string, t *store.Task) error {
	idx := indexOf(t.Payload)
	r := c.m.begin(&modelRun{task: t.ID, typ: opsTypeLocal, node: node, attempt: t.Attempt, leaseID: t.LeaseID, startedAt: t.StartedAt,
		expires: t.LeaseExpiresAt, action: c.m.actionOf(idx, t.Attempt), ctx: ctx})
	defer func() { c.m.end(r, nil) }()
	if r.action == opsHold {
		if a := hold(ctx); a != opsOK {
			c.m.mu.Lock()
			r.action = a
			c.m.mu.Unlock()
			return ctx.Err()
		}
		return nil
	}
	if err, ok := scriptedError(r.action, opsRetryAfter); ok {
		return err
	}
	return fmt.Errorf("task %s: unknown action %q", t.ID, r.action)
}

// serveTarget is the push target: it answers each delivery as the task's
// script says.
func (c *opsCluster) serveTarget(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	att, _ := strconv.Atoi(req.Header.Get(engine.HeaderAttempt))
	r := c.m.begin(&modelRun{task: req.Header.Get(engine.HeaderTaskID), typ: opsTypePush, attempt: att,
		action: c.m.actionOf(indexOf(body), att), ctx: req.Context()})
	defer func() { c.m.end(r, nil) }()
	switch r.action {
	case opsOK:
		w.WriteHeader(http.StatusOK)
	case opsHold:
		if a := hold(req.Context()); a != opsOK {
			c.m.mu.Lock()
			r.action = a
			c.m.mu.Unlock()
			return
		}
		w.WriteHeader(http.StatusOK)
	case opsFail:
		w.WriteHeader(http.StatusInternalServerError)
	case opsPerm:
		w.WriteHeader(http.StatusBadRequest)
	case opsAfter:
		w.Header().Set("Retry-After", strconv.Itoa(int(opsRetryAfter/time.Second)))
		w.WriteHeader(http.StatusTooManyRequests)
	default:
		w.WriteHeader(http.StatusTeapot)
	}
}

// pullLoop leases pull tasks and reports each as its script says until ctx ends.
func (c *opsCluster) pullLoop(ctx context.Context, s *engineSlot) {
	req := engine.LeaseRequest{Types: []string{opsTypePull}, Max: 2, Wait: 200 * time.Millisecond, LeaseDuration: opsPullLease}
	s.pullLoop(ctx, c.t, req, func(tasks []store.Task) {
		for j := range tasks {
			c.pullRun(ctx, s, &tasks[j])
		}
	})
}

func (c *opsCluster) pullRun(ctx context.Context, s *engineSlot, t *store.Task) {
	r := c.m.begin(&modelRun{task: t.ID, typ: opsTypePull, node: s.node, pull: true, attempt: t.Attempt, leaseID: t.LeaseID,
		startedAt: t.StartedAt, expires: t.LeaseExpiresAt, action: c.m.actionOf(indexOf(t.Payload), t.Attempt), ctx: context.Background()})
	tok := engine.LeaseToken(t)
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	act := r.action
	if act == opsHold {
		act = hold(ctx)
		c.m.mu.Lock()
		r.action = act
		c.m.mu.Unlock()
	}
	yes, no := true, false
	rep := engine.ReportedError{Code: "scripted", Message: "scripted " + act, Retryable: &yes}
	if act != "aborted" {
		c.m.reports(r)
	}
	switch act {
	case opsOK:
		err = s.e.Complete(rctx, t.ID, tok)
	case "aborted":
		err = errors.New("not reported: the loop stopped")
	case opsPerm:
		rep.Code, rep.Retryable = "poison", &no
		_, err = s.e.Fail(rctx, t.ID, tok, rep)
	case opsAfter:
		rep.RetryAfter = opsRetryAfter
		_, err = s.e.Fail(rctx, t.ID, tok, rep)
	default:
		_, err = s.e.Fail(rctx, t.ID, tok, rep)
	}
	c.m.end(r, err)
}

// produce enqueues the tasks in batches of 25 through random live
// engines, over about spread.
func (c *opsCluster) produce(reqs []engine.EnqueueRequest, rng *rand.Rand, spread time.Duration) {
	const batch = 25
	pause := spread / time.Duration(max(1, len(reqs)/batch))
	produce(c.t, reqs, batch, c.live, rng, func() time.Duration { return pause }, func(start int, res []store.InsertResult) {
		c.m.mu.Lock()
		defer c.m.mu.Unlock()
		for j, r := range res {
			c.m.ids[r.Task.ID] = start + j
			c.m.typeOf[r.Task.ID] = reqs[start+j].Type
		}
	})
}
