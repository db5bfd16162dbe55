package retryq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store"
)

// The scripted actions of a stress task, one per attempt (the last one
// repeats).
const (
	actOK      = "ok"      // succeed
	actFail    = "fail"    // fail transiently
	actPerm    = "perm"    // fail permanently
	actPanic   = "panic"   // panic
	actTimeout = "timeout" // run past the type's timeout
	actBlock   = "block"   // block until cancelled (the test cancels it)
)

const (
	stressMaxAttempts = 4
	stressTimeout     = 150 * time.Millisecond
	stressGrace       = 100 * time.Millisecond
)

// stressScripts are the first-run scripts a task draws from. After a manual
// retry every task runs stressRetryScript.
var stressScripts = [][]string{
	{actOK}, {actOK}, {actOK}, {actFail, actOK}, {actFail, actFail, actFail, actFail}, {actPerm},
	{actPanic, actOK}, {actTimeout, actOK}, {actFail, actTimeout, actPanic, actOK}, {actBlock},
}

var stressRetryScript = []string{actFail, actOK}

// stressWorkers are the workers' types and concurrencies; every type is
// served by two of them.
var stressWorkers = []struct {
	types []string
	conc  int
}{
	{[]string{"st.a", "st.b"}, 4}, {[]string{"st.b", "st.c"}, 3}, {[]string{"st.c"}, 2}, {[]string{"st.a"}, 2},
}

// stressFinal is the state and attempt count a script ends in (block
// scripts end only by a cancellation).
func stressFinal(script []string) (store.State, int) {
	for n := 1; ; n++ {
		switch stressAction(script, n) {
		case actOK:
			return store.StateSucceeded, n
		case actPerm:
			return store.StateDead, n
		case actBlock:
			return store.StateCancelled, 0
		}
		if n >= stressMaxAttempts {
			return store.StateDead, n
		}
	}
}

// stressType is the type of the i-th task: scripts that time out run as
// st.c (short timeout), scripts that block as st.a or st.b (long timeout),
// the others as any.
func stressType(script []string, i int) string {
	for _, a := range script {
		switch a {
		case actTimeout:
			return "st.c"
		case actBlock:
			return []string{"st.a", "st.b"}[i%2]
		}
	}
	return []string{"st.a", "st.b", "st.c"}[i%3]
}

func stressAction(script []string, attempt int) string {
	return script[min(attempt, len(script))-1]
}

// invocation is one handler call, as the handler saw it.
type invocation struct {
	epoch, attempt, worker int
	action                 string
	ctx                    context.Context
	cause                  error // context.Cause at return
}

// stressRun is the test's model: the scripts, what the test did to each
// task, and what the handlers saw.
type stressRun struct {
	t             *testing.T
	client        *retryq.Client
	mu            sync.Mutex
	byIndex       [][]string          // scripts by the payload's index
	scripts       map[string][]string // scripts by task id
	epoch         map[string]int      // manual retries so far
	cancelled     map[string]bool     // cancelled by the test, not retried since
	everCancelled map[string]bool
	active        map[string][]*invocation
	done          map[string][]*invocation
	violations    []string
	deadRetries   int
	blockStarts   chan string
}

func (r *stressRun) violate(format string, args ...any) {
	// r.mu is held.
	if len(r.violations) < 20 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}

// handler is worker wi's handler of every type (so that a task of a type
// the worker does not serve is seen, not refused by a Mux).
func (r *stressRun) handler(wi int) retryq.HandlerFunc {
	serves := map[string]bool{}
	for _, typ := range stressWorkers[wi].types {
		serves[typ] = true
	}
	return func(ctx context.Context, task *retryq.Task) (err error) {
		r.mu.Lock()
		id := task.ID
		if !serves[task.Type] {
			r.violate("task %s of type %s ran on worker %d serving %v", id, task.Type, wi, stressWorkers[wi].types)
		}
		if r.cancelled[id] {
			r.violate("task %s (attempt %d) started on worker %d after Cancel returned", id, task.Attempt, wi)
		}
		for _, o := range r.active[id] {
			if o.ctx.Err() == nil {
				r.violate("task %s: attempt %d started on worker %d while attempt %d runs on worker %d, not told to stop",
					id, task.Attempt, wi, o.attempt, o.worker)
			}
		}
		ep := r.epoch[id]
		script := stressRetryScript
		if ep == 0 {
			// From the payload: a task dispatched at enqueue runs before
			// Enqueue returns its id.
			var p struct{ I int }
			if err := task.Decode(&p); err != nil || p.I < 0 || p.I >= len(r.byIndex) {
				r.mu.Unlock()
				return retryq.Permanent(fmt.Errorf("bad payload %s", task.Payload))
			}
			script = r.byIndex[p.I]
		}
		inv := &invocation{epoch: ep, attempt: task.Attempt, worker: wi, action: stressAction(script, task.Attempt), ctx: ctx}
		r.active[id] = append(r.active[id], inv)
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			inv.cause = context.Cause(ctx)
			as := r.active[id]
			for i := range as {
				if as[i] == inv {
					r.active[id] = append(as[:i:i], as[i+1:]...)
					break
				}
			}
			r.done[id] = append(r.done[id], inv)
			r.mu.Unlock()
		}()
		switch inv.action {
		case actOK:
			return nil
		case actFail:
			return retryq.Transient(errors.New("scripted failure"))
		case actPerm:
			return retryq.Permanent(errors.New("scripted permanent failure"))
		case actPanic:
			panic("scripted panic")
		case actBlock:
			select {
			case r.blockStarts <- id:
			default:
			}
		}
		select { // actTimeout, actBlock
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Second):
			return errors.New("never cancelled")
		}
	}
}

// cancel cancels a task and checks that no handler of it still runs
// unaware once Cancel returned.
func (r *stressRun) cancel(id string) {
	_, err := r.client.Cancel(context.Background(), id)
	if errors.Is(err, retryq.ErrConflict) {
		return // finished already
	}
	if err != nil {
		r.t.Errorf("cancel %s: %v", id, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancelled[id], r.everCancelled[id] = true, true
	for _, o := range r.active[id] {
		if o.ctx.Err() == nil {
			r.violate("task %s: attempt %d on worker %d still runs, not told to stop, after Cancel returned", id, o.attempt, o.worker)
		}
	}
}

// retry manually retries a task the test knows is cancelled or dead.
func (r *stressRun) retry(id string, dead bool) {
	r.mu.Lock()
	r.epoch[id]++
	r.cancelled[id] = false
	if dead {
		r.deadRetries++
	}
	r.mu.Unlock()
	if _, err := r.client.Retry(context.Background(), id); err != nil {
		r.t.Errorf("retry %s: %v", id, err)
	}
}

// chaos cancels every blocking handler, random tasks, and retries some
// cancelled and dead tasks, until quiet; then only what the end needs.
func (r *stressRun) chaos(rng *rand.Rand, ids func() []string, quiet, stop <-chan struct{}) {
	type later struct {
		id  string
		due time.Time
	}
	var retries []later
	tick := time.NewTicker(3 * time.Millisecond)
	defer tick.Stop()
	loud := true
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-quiet:
			loud, quiet = false, nil
		case id := <-r.blockStarts:
			r.cancel(id)
			if rng.IntN(2) == 0 {
				retries = append(retries, later{id, time.Now().Add(time.Duration(rng.IntN(20)) * time.Millisecond)})
			}
		case <-tick.C:
			for len(retries) > 0 && time.Now().After(retries[0].due) {
				r.mu.Lock()
				ok := r.cancelled[retries[0].id]
				r.mu.Unlock()
				if ok {
					r.retry(retries[0].id, false)
				}
				retries = retries[1:]
			}
			if !loud {
				continue
			}
			if all := ids(); len(all) > 0 && rng.IntN(4) == 0 {
				id := all[rng.IntN(len(all))]
				r.cancel(id)
				if rng.IntN(3) == 0 {
					retries = append(retries, later{id, time.Now().Add(time.Duration(rng.IntN(30)) * time.Millisecond)})
				}
			}
			if n%15 == 0 {
				dead, _, err := r.client.List(context.Background(), retryq.ListParams{States: []store.State{store.StateDead}, Limit: 3})
				if err != nil {
					r.t.Errorf("list dead: %v", err)
				}
				for _, d := range dead {
					r.retry(d.ID, true)
				}
			}
		}
	}
}

// TestWorkerStressEveryTaskEndsAsScripted runs in-process workers of
// several types and concurrencies over tasks whose handlers succeed, fail,
// fail permanently, panic, time out or block, while the test cancels and
// retries tasks and stops and restarts workers. Every task must end as its
// script and the test's operations dictate with the history its handlers
// saw, never run on a worker that does not serve its type, never run twice
// at once unless the older run was told to stop, never run unaware after
// Cancel returned; Close must stop the workers promptly and leave no
// goroutine behind, and the counters must agree with the store.
func TestWorkerStressEveryTaskEndsAsScripted(t *testing.T) {
	// One backend at a time: each run checks that the process's goroutines
	// come back to their count from before it started.
	backendtest.RunSerial(t, testWorkerStressEveryTaskEndsAsScripted)
}

func testWorkerStressEveryTaskEndsAsScripted(t *testing.T, backend string) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { stressOnce(t, backend, seed, 600) })
	}
}

func stressOnce(t *testing.T, backend string, seed uint64, tasks int) {
	ctx := context.Background()
	// The goroutine baseline is taken before the store opens, and the
	// store is closed before the count is compared with it: a PostgreSQL
	// pool's idle connection may keep a background reader goroutine
	// (pgx starts one on a write slower than 15 ms, as on a loaded
	// machine) until the connection closes. Database starts the
	// throwaway cluster and makes the database before the baseline.
	openStore := backendtest.Database(t, backend, "")
	baseline := runtime.NumGoroutine()
	st := openStore()
	defer func() { _ = st.Close() }() // a second Close does nothing
	// The lease bounds every store call the workers make (enqueue
	// batches, outcomes, heartbeats): it is long enough that a loaded
	// machine's slow SQLite writes (-race, 2 cores shared with another
	// package's tests) do not expire leases of handlers that returned in
	// time, which would add attempts the scripts do not have. Stopped
	// workers give their leases back, so nothing here waits for one to
	// expire.
	client, err := retryq.NewClient(st, retryq.Options{LeaseDuration: 8 * time.Second, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = client.Close()
		}
	}()
	for _, typ := range []string{"st.a", "st.b", "st.c"} {
		timeout := 30 * time.Second // blocking handlers wait for the test
		if typ == "st.c" {
			timeout = stressTimeout
		}
		if err := client.SetType(ctx, retryq.TypeConfig{Type: typ, Policy: fastPolicy(stressMaxAttempts), Timeout: timeout}); err != nil {
			t.Fatal(err)
		}
	}
	r := &stressRun{t: t, client: client, scripts: map[string][]string{}, epoch: map[string]int{},
		cancelled: map[string]bool{}, everCancelled: map[string]bool{}, active: map[string][]*invocation{},
		done: map[string][]*invocation{}, blockStarts: make(chan string, 4*tasks)}
	rng := rand.New(rand.NewPCG(seed, 7))

	// Workers, each restartable; Close stops those running at the end.
	var runs sync.WaitGroup
	stops := make([]context.CancelFunc, len(stressWorkers))
	dones := make([]chan struct{}, len(stressWorkers))
	startWorker := func(wi int) {
		w, err := retryq.NewWorker(client, retryq.WorkerConfig{Handler: r.handler(wi), Types: stressWorkers[wi].types,
			Concurrency: stressWorkers[wi].conc, ShutdownGrace: stressGrace, ID: fmt.Sprintf("w%d", wi)})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		stops[wi], dones[wi] = cancel, make(chan struct{})
		runs.Add(1)
		go func(done chan struct{}) {
			defer runs.Done()
			defer close(done)
			if err := w.Run(wctx); err != nil {
				t.Errorf("worker %d: %v", wi, err)
			}
		}(dones[wi])
	}
	for wi := range stressWorkers {
		startWorker(wi)
	}

	var idsMu sync.Mutex
	var ids []string
	allIDs := func() []string {
		idsMu.Lock()
		defer idsMu.Unlock()
		return ids
	}
	quiet, stopChaos := make(chan struct{}), make(chan struct{})
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		r.chaos(rand.New(rand.NewPCG(seed, 11)), allIDs, quiet, stopChaos)
	}()
	var stopOnce sync.Once
	endChaos := func() {
		stopOnce.Do(func() { close(stopChaos) })
		<-chaosDone
	}
	defer endChaos()
	// Restart a random worker every few tens of milliseconds until quiet.
	restartsDone := make(chan struct{})
	go func() {
		defer close(restartsDone)
		rr := rand.New(rand.NewPCG(seed, 13))
		for {
			select {
			case <-quiet:
				return
			case <-time.After(time.Duration(20+rr.IntN(60)) * time.Millisecond):
			}
			wi := rr.IntN(len(stressWorkers))
			stops[wi]()
			select {
			case <-dones[wi]:
			case <-time.After(15 * time.Second):
				t.Errorf("worker %d: Run still running 15s after its context was cancelled (grace %s)", wi, stressGrace)
				return
			}
			startWorker(wi)
		}
	}()

	// Enqueue from a few producers.
	scripts := make([][]string, tasks)
	for i := range scripts {
		scripts[i] = stressScripts[rng.IntN(len(stressScripts))]
	}
	r.mu.Lock()
	r.byIndex = scripts
	r.mu.Unlock()
	var prod sync.WaitGroup
	for p := 0; p < 4; p++ {
		prod.Add(1)
		go func() {
			defer prod.Done()
			for i := p; i < tasks; i += 4 {
				res, err := client.Enqueue(ctx, stressType(scripts[i], i), map[string]int{"i": i})
				if err != nil {
					t.Errorf("enqueue: %v", err)
					return
				}
				r.mu.Lock()
				r.scripts[res.Task.ID] = scripts[i]
				r.mu.Unlock()
				idsMu.Lock()
				ids = append(ids, res.Task.ID)
				idsMu.Unlock()
				if i%16 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	prod.Wait()
	time.Sleep(200 * time.Millisecond) // let the chaos run over a busy queue
	close(quiet)
	<-restartsDone

	// Wait until every task is finished.
	drain := func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			open, _, err := client.List(ctx, retryq.ListParams{Limit: 5, States: []store.State{
				store.StateScheduled, store.StatePending, store.StateRunning, store.StateRetryWaiting}})
			if err != nil {
				t.Fatal(err)
			}
			if len(open) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("tasks still unfinished after 30s, e.g. %s in %s (attempt %d)", open[0].ID, open[0].State, open[0].Attempt)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	drain()
	// The chaos may still retry a task it cancelled a moment ago (the
	// queue looked finished while the retry waited its few milliseconds):
	// once it has stopped, wait for such a task too.
	endChaos()
	drain()

	// Close stops the running workers.
	start := time.Now()
	_ = client.Close()
	closed = true
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %s (grace %s)", d, stressGrace)
	}
	runsDone := make(chan struct{})
	go func() { runs.Wait(); close(runsDone) }()
	select {
	case <-runsDone:
	case <-time.After(5 * time.Second):
		t.Fatalf("workers still running 5s after Close returned")
	}
	r.check(ctx, st)
	if err := st.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > baseline; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 10s after Close, %d before the store opened:\n%s",
				runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
	}
}

// check compares every task with its script, the test's operations and
// what the handlers saw, and the counters with the store.
func (r *stressRun) check(ctx context.Context, st store.Store) {
	t := r.t
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Error(v)
	}
	var succeededRows, failedRows, finalDead int
	bad := 0
	for id, script := range r.scripts {
		task, err := st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		hist, err := st.ListAttempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range hist {
			if a.Outcome == store.OutcomeSucceeded {
				succeededRows++
			} else {
				failedRows++
			}
		}
		if task.State == store.StateDead {
			finalDead++
		}
		ep := r.epoch[id]
		if ep > 0 {
			script = stressRetryScript
		}
		want, attempts := stressFinal(script)
		if r.cancelled[id] {
			want = store.StateCancelled
		}
		if task.State != want && bad < 10 {
			bad++
			t.Errorf("task %s (script %v, epoch %d, cancelled by the test %v): state %s, want %s; last error %+v",
				id, script, ep, r.cancelled[id], task.State, want, task.LastError)
		}
		if ep > 0 || r.everCancelled[id] || bad >= 10 {
			continue
		}
		// Never cancelled nor retried: the history is attempts 1..n of
		// the script, and the handlers ran exactly those attempts.
		ran := map[int]bool{}
		for _, inv := range r.done[id] {
			ran[inv.attempt] = true
		}
		ok := len(hist) == attempts && len(ran) == attempts
		for i, a := range hist {
			act := stressAction(script, i+1)
			wantOutcome := store.OutcomeFailed
			if act == actOK {
				wantOutcome = store.OutcomeSucceeded
			}
			if a.Number != i+1 || a.Outcome != wantOutcome || !ran[i+1] {
				ok = false
			}
		}
		if !ok {
			bad++
			t.Errorf("task %s (script %v): history %s, handlers ran attempts %v; want %d attempts", id, script, histString(hist), ran, attempts)
		}
	}
	c := r.client.Counters()
	if c.Succeeded != int64(succeededRows) || c.Dead != int64(finalDead+r.deadRetries) || c.Retried+c.Dead != int64(failedRows) {
		t.Errorf("counters %+v disagree with the store: %d succeeded and %d failed attempts, %d dead now, %d dead retried",
			c, succeededRows, failedRows, finalDead, r.deadRetries)
	}
}

func histString(hist []store.Attempt) string {
	s := ""
	for _, a := range hist {
		s += fmt.Sprintf("[#%d %s %v]", a.Number, a.Outcome, a.Error)
	}
	return s
}
