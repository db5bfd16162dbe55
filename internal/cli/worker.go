package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

func init() {
	register(&command{name: "worker", summary: "run a shell command for each task leased from a retryq server", run: runWorker})
}

const workerUsage = `Usage: retryq worker --types A,B --exec 'CMD' [flags]

A pull worker: leases tasks of the given types from a retryq server over the
HTTP API (long-polling while there are none) and runs CMD with "sh -c" once
per task, up to --concurrency at a time. The task's JSON payload is CMD's
standard input; RETRYQ_TASK_ID, RETRYQ_TASK_TYPE and RETRYQ_ATTEMPT are in
its environment. Its standard output and error pass through.

While CMD runs the lease is heartbeated every --lease/3 (a failed heartbeat
is tried again after a tenth of that). Exit status 0 completes the task. Any
other exit fails the attempt with error code "exit:N" and the last non-empty
line CMD wrote to standard error as the message; codes listed in
--permanent-exit are reported as not retryable, the others as retryable.
The server decides with the type's retry policy whether and when the task
runs again. If the lease is lost (the task was cancelled, or the lease
expired and another worker took it) or runs out while no heartbeat reaches
the server, CMD is stopped and its outcome dropped. An outcome the server
cannot take yet (it is unreachable or answers 5xx, say while it restarts)
is retried until the lease would expire.

SIGINT, SIGTERM or SIGHUP stops leasing and lets running commands finish for up to
--grace; commands still running then are stopped (SIGTERM, then SIGKILL to
their process group) and their attempts failed as retryable. A second
signal stops them at once and gives up every outcome not yet reported,
running commands' included: their tasks run again once their leases
expire. A SIGHUP ignored at start (nohup) stays ignored.

Exit status: 0 after SIGINT, SIGTERM or SIGHUP; 128+N after a second signal
N; 1 when the server refuses the worker's lease requests (a bad token, an
unknown route, a type that has a push target), once the running commands
are done; 2 on a usage error.

Example:
  retryq worker --types img.resize --exec './resize.sh' --concurrency 4 --permanent-exit 2,64
`

// Worker tuning.
const (
	pullWaitSeconds  = 20                     // long-poll length of a lease request
	stderrTailBytes  = 4096                   // how much of CMD's stderr is kept for the message
	maxMessageRunes  = 1000                   // longest reported error message
	killGrace        = 5 * time.Second        // SIGTERM → SIGKILL for a command being stopped
	maxLeaseBackoff  = 5 * time.Second        // longest pause between failing lease requests
	reportAttempts   = 5                      // fewest tries to report an outcome through network errors
	reportRetryPause = 500 * time.Millisecond // first pause between those tries
	maxReportPause   = 5 * time.Second        // longest pause between those tries
)

type workerOptions struct {
	cf          clientFlags
	types       []string
	exec        string
	concurrency int
	permanent   []int
	lease       time.Duration
	grace       time.Duration
	timeout     time.Duration
	id          string
}

func parseWorker(env *Env, args []string) (*workerOptions, int) {
	const name = "worker"
	o := &workerOptions{concurrency: 1, lease: 30 * time.Second, grace: 30 * time.Second}
	var types string
	fs := newFlagSet(name, workerUsage)
	o.cf.register(fs, false)
	fs.StringVar(&types, "types", "", "comma-separated task `types` to lease; required")
	fs.StringVar(&o.exec, "exec", "", "shell `command` run with sh -c for each task; required")
	intFlag(fs, &o.concurrency, "concurrency", o.concurrency, "`N` commands running at once, 1..1000")
	fs.Var(exitCodesValue{&o.permanent}, "permanent-exit", "exit `codes` that are permanent failures (not retried), e.g. 2,64")
	fs.Var(durationValue{&o.lease}, "lease", "lease `length`; heartbeated every third of it (1s..1h)")
	fs.Var(durationValue{&o.grace}, "grace", "`time` running commands may take to finish after SIGINT, SIGTERM or SIGHUP")
	fs.Var(durationValue{&o.timeout}, "timeout", "stop a command running longer than this `duration` and fail the attempt as retryable (0 = none)")
	fs.StringVar(&o.id, "worker-id", "", "this worker's `id` in leases and task history (default HOST-PID)")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return nil, st
	}
	if st, ok := wantArgs(env, name, pos, 0, ""); !ok {
		return nil, st
	}
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if err := engine.ValidateType("--types", t); err != nil {
			return nil, usageError(env, name, err.Error())
		}
		if !slices.Contains(o.types, t) {
			o.types = append(o.types, t)
		}
	}
	switch {
	case len(o.types) == 0:
		return nil, usageError(env, name, "--types: required, e.g. --types email.send,img.resize")
	case strings.TrimSpace(o.exec) == "":
		return nil, usageError(env, name, "--exec: required, the shell command to run for each task")
	case o.concurrency < 1 || o.concurrency > 1000:
		return nil, usageError(env, name, fmt.Sprintf("--concurrency: must be between 1 and 1000 (got %d)", o.concurrency))
	case o.lease < time.Second || o.lease > engine.MaxLeaseDuration:
		return nil, usageError(env, name, fmt.Sprintf("--lease: must be between 1s and 1h (got %v)", o.lease))
	case o.grace < 0:
		return nil, usageError(env, name, fmt.Sprintf("--grace: must not be negative (got %v)", o.grace))
	case o.timeout < 0:
		return nil, usageError(env, name, fmt.Sprintf("--timeout: must not be negative (got %v)", o.timeout))
	case len(o.types) > store.MaxFetchTypes:
		return nil, usageError(env, name, fmt.Sprintf("--types: at most %d types (got %d)", store.MaxFetchTypes, len(o.types)))
	case len(o.id) > 200:
		return nil, usageError(env, name, "--worker-id: at most 200 bytes")
	case !utf8.ValidString(o.id):
		// Sent as JSON it would become another id (U+FFFD for each bad byte).
		return nil, usageError(env, name, "--worker-id: must be UTF-8 text")
	}
	if o.id == "" {
		host, _ := os.Hostname()
		o.id = fmt.Sprintf("%s-%d", firstNonEmpty(host, "worker"), os.Getpid())
	}
	return o, exitOK
}

func runWorker(ctx context.Context, env *Env, args []string) int {
	o, st := parseWorker(env, args)
	if o == nil {
		return st
	}
	c, err := o.cf.client(env)
	if err != nil {
		return usageError(env, "worker", err.Error())
	}
	defer c.close()
	w := &pullWorker{o: o, env: env, c: c, out: &lockedWriter{w: env.Stdout}, errOut: &lockedWriter{w: env.Stderr},
		sem: make(chan struct{}, o.concurrency)}
	return w.run(ctx)
}

// lockedWriter serializes writes of concurrent commands and log lines. A
// write that fails (standard output is a pipe whose reader is gone) is
// reported as done: output that cannot be shown is dropped, the commands
// producing it keep running.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(p)
	return len(p), nil
}

// pullWorker is a running "retryq worker".
type pullWorker struct {
	o      *workerOptions
	env    *Env
	c      *apiClient
	out    io.Writer
	errOut io.Writer

	// killCtx is cancelled when running commands must stop (grace over,
	// second signal).
	killCtx context.Context
	// abandonCtx is cancelled by a second signal: heartbeats and reports
	// in flight are cut and no more are tried.
	abandonCtx context.Context
	// sem holds one token per command in flight (capacity --concurrency);
	// running counts the task goroutines.
	sem     chan struct{}
	running sync.WaitGroup
}

func (w *pullWorker) logf(format string, args ...any) {
	fmt.Fprintf(w.errOut, "%s retryq worker: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// leasedTask is a task of a lease answer.
type leasedTask struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	Attempt int             `json:"attempt"`
	LeaseID string          `json:"lease_id"`

	// endsBy is when the lease has expired at the latest, on this
	// machine's clock: the time the lease's answer (or the last accepted
	// heartbeat's) arrived plus --lease. Past it the task may run
	// elsewhere and no outcome of this run can count; before it the
	// server may still take one. (The earliest expiry is not known: a
	// long poll's task was leased at some time during the poll.) Only
	// handle's goroutines touch it.
	endsBy time.Time
}

func (w *pullWorker) run(ctx context.Context) int {
	sigs := make(chan os.Signal, 2)
	// A hangup (the terminal closed, the SSH session dropped) stops the
	// worker as gracefully as SIGTERM: its commands run in their own
	// process groups, which the terminal does not signal, and would be
	// left running unsupervised if it killed the worker. A hangup ignored
	// at start (nohup) stays ignored, as by "retryq run" and the server.
	signal.Notify(sigs, stopSignals()...)
	defer signal.Stop(sigs)
	if len(brokenPipeSignals) > 0 {
		pipes := make(chan os.Signal, 1) // never read: Notify drops what does not fit
		signal.Notify(pipes, brokenPipeSignals...)
		defer signal.Stop(pipes)
	}

	leaseCtx, stopLeasing := context.WithCancel(ctx)
	defer stopLeasing()
	killCtx, kill := context.WithCancel(context.WithoutCancel(ctx))
	defer kill()
	w.killCtx = killCtx
	abandonCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	w.abandonCtx = abandonCtx

	// Signals: the first stops leasing, the second stops the commands,
	// gives up the reports not yet made (their tasks run again once their
	// leases expire) and makes the exit status that of a death by it
	// (128+N), as for the server: the stop was not the clean one the first
	// signal asked for.
	stopped := make(chan struct{})
	defer close(stopped)
	second := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigs:
			w.logf("received %v: no new tasks; letting running commands finish (up to %v; signal again to stop them now)", s, w.o.grace)
			stopLeasing()
		case <-ctx.Done():
			stopLeasing()
		case <-stopped:
			return
		}
		select {
		case s := <-sigs:
			w.logf("received %v again: stopping running commands and abandoning the outcomes not yet reported (%d task(s) held); their tasks run again once their leases expire",
				s, len(w.sem))
			second <- s
			abandon()
			kill()
		case <-stopped:
		}
	}()

	w.logf("%s leasing %s from %s; concurrency %d, lease %v", w.o.id, strings.Join(w.o.types, ","), w.c.base,
		w.o.concurrency, w.o.lease)
	status := w.leaseLoop(leaseCtx)

	// Drain: wait for running commands, up to the grace period. A task
	// goroutine gives its token back once its command has ended and its
	// outcome is reported: with none held, there is nothing to wait for
	// (a zero grace timer would race noticing that).
	n := len(w.sem)
	if n > 0 {
		w.logf("waiting for %d running command(s)", n)
	}
	done := make(chan struct{})
	go func() { w.running.Wait(); close(done) }()
	grace := time.NewTimer(w.o.grace)
	defer grace.Stop()
	if n == 0 {
		grace.Stop()
	}
	select {
	case <-done:
	case <-grace.C:
		w.logf("grace period of %v is over: stopping the commands still running", w.o.grace)
		kill()
		<-done
	case <-killCtx.Done():
		<-done
	}
	select {
	case s := <-second:
		w.logf("stopped by a second signal; exit status %d", signalStatus(s))
		return signalStatus(s)
	default:
	}
	w.logf("stopped")
	return status
}

// leaseLoop leases tasks while ctx lives and starts a command for each.
// It returns the exit status: 0, or exitFailure when the server rejects
// the worker's requests (bad token, unknown route).
func (w *pullWorker) leaseLoop(ctx context.Context) int {
	backoff := 250 * time.Millisecond
	failing := false
	for ctx.Err() == nil {
		// Wait for a free slot, then take every free slot (at most 100).
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return exitOK
		}
		free := 1
		for free < min(w.o.concurrency, engine.MaxLeaseBatch) {
			select {
			case w.sem <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		tasks, err := w.lease(ctx, free)
		answered := time.Now()
		for range free - len(tasks) {
			<-w.sem
		}
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			var ae *apiCallError
			if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != 408 && ae.Status != 429 {
				w.logf("the server rejected the lease request: %v", err)
				return exitFailure
			}
			if !failing {
				w.logf("lease request failed, retrying with backoff: %v", err)
			}
			failing = true
			// At least as long as the server asked (a 503's Retry-After).
			pause := backoff
			if errors.As(err, &ae) {
				pause = max(pause, ae.RetryAfter)
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			backoff = min(2*backoff, maxLeaseBackoff)
			continue
		}
		if failing {
			w.logf("lease requests work again")
			failing, backoff = false, 250*time.Millisecond
		}
		for i := range tasks {
			t := tasks[i]
			t.endsBy = answered.Add(w.o.lease)
			w.running.Add(1)
			go func() {
				defer w.running.Done()
				defer func() { <-w.sem }()
				w.handle(t)
			}()
		}
	}
	return exitOK
}

// lease asks for up to n tasks, long-polling.
func (w *pullWorker) lease(ctx context.Context, n int) ([]leasedTask, error) {
	body := map[string]any{
		"worker_id": w.o.id, "types": w.o.types, "max": n,
		"wait_seconds": pullWaitSeconds, "lease_seconds": w.o.lease.Seconds(),
	}
	var out struct {
		Tasks []leasedTask `json:"tasks"`
	}
	if _, err := w.c.call(ctx, "POST", "/v1/leases", nil, body, &out); err != nil {
		return nil, err
	}
	// A task more than asked for would run past --concurrency and give
	// back a slot it never took (leaseLoop), one without an id or a lease
	// id could not be reported, and the log prints ids and types raw.
	if len(out.Tasks) > n {
		return nil, fmt.Errorf("POST /v1/leases: the server answered %d tasks for at most %d; is %s a retryq server?", len(out.Tasks), n, w.c.base)
	}
	for _, t := range out.Tasks {
		if t.ID == "" || t.LeaseID == "" || strings.ContainsFunc(t.ID+t.Type+t.LeaseID, unprintable) {
			return nil, fmt.Errorf("POST /v1/leases: the server answered a task with an id %q, type %q and lease id %q; is %s a retryq server?",
				t.ID, t.Type, t.LeaseID, w.c.base)
		}
	}
	return out.Tasks, nil
}

// handle runs one task's command while heartbeating its lease, then reports
// the outcome.
func (w *pullWorker) handle(t leasedTask) {
	start := time.Now()
	lost := make(chan struct{})
	hbCtx, stopHB := context.WithCancel(w.abandonCtx)
	hbDone := make(chan time.Time, 1)
	go func() { hbDone <- w.heartbeat(hbCtx, t, lost) }()
	res := w.execute(t, lost)
	stopHB()
	t.endsBy = <-hbDone
	took := time.Since(start).Round(time.Millisecond)
	select {
	case <-lost:
		w.logf("task %s (%s, attempt %d): lease lost while the command ran; outcome dropped", t.ID, t.Type, t.Attempt)
		return
	default:
	}
	if res.ok {
		err := w.report(t, "complete", map[string]any{"lease_id": t.LeaseID})
		w.logReport(t, err, fmt.Sprintf("succeeded in %v", took))
		return
	}
	e := map[string]any{"code": res.code, "message": res.message}
	if res.retryable != nil {
		e["retryable"] = *res.retryable
	}
	var answer struct {
		State        string  `json:"state"`
		DeadReason   string  `json:"dead_reason"`
		DelaySeconds float64 `json:"delay_seconds"`
	}
	err := w.reportInto(t, "fail", map[string]any{"lease_id": t.LeaseID, "error": e}, &answer)
	what := fmt.Sprintf("failed in %v with %s: %s", took, res.code, res.message)
	switch answer.State {
	case "retry_waiting", "pending":
		what += fmt.Sprintf(" → retry in %s", fmtSeconds(answer.DelaySeconds))
	case "dead":
		what += " → dead (" + answer.DeadReason + ")"
	}
	w.logReport(t, err, what)
}

func (w *pullWorker) logReport(t leasedTask, err error, what string) {
	switch {
	case err == nil:
		w.logf("task %s (%s, attempt %d) %s", t.ID, t.Type, t.Attempt, what)
	case errors.Is(err, errReportAbandoned):
		w.logf("task %s (%s, attempt %d) %s, but its outcome was abandoned by the second signal: the task runs again once its lease expires",
			t.ID, t.Type, t.Attempt, what)
	case isAPIError(err, 409, ""):
		w.logf("task %s (%s, attempt %d) %s, but the lease was lost: outcome dropped (%v)", t.ID, t.Type, t.Attempt, what, err)
	default:
		w.logf("task %s (%s, attempt %d) %s, but reporting it failed: %v", t.ID, t.Type, t.Attempt, what, err)
	}
}

// heartbeat extends the lease every lease/3 until ctx ends; it closes lost
// when the server says the lease is gone, or when the lease has run out
// with no heartbeat accepted (the server unreachable or hanging), as the
// engine's watchdog stops an in-process handler. It returns when the lease
// has expired at the latest, after its last successful extension.
func (w *pullWorker) heartbeat(ctx context.Context, t leasedTask, lost chan<- struct{}) time.Time {
	// Every third of the lease, counted from the previous try; a failed
	// try is repeated after a tenth of that, so that a server back within
	// the lease extends it in time.
	interval := w.o.lease / 3
	next := time.NewTimer(interval)
	defer next.Stop()
	path := "/v1/leases/" + url.PathEscape(t.LeaseID) + "/heartbeat"
	body := map[string]any{"lease_seconds": w.o.lease.Seconds()}
	endsBy := t.endsBy
	watchdog := time.NewTimer(time.Until(endsBy))
	defer watchdog.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return endsBy
		case <-watchdog.C:
			w.logf("task %s: its lease ran out with no heartbeat accepted since %s; stopping the command (the task may run elsewhere)",
				t.ID, endsBy.Add(-w.o.lease).Format("15:04:05.000"))
			close(lost)
			return endsBy
		case <-next.C:
		}
		asked := time.Now()
		// A call still waiting when the lease runs out would extend
		// nothing the watchdog could wait for.
		callCtx, cancel := context.WithDeadline(ctx, endsBy)
		_, err := w.c.call(callCtx, "POST", path, nil, body, nil)
		cancel()
		if err == nil {
			next.Reset(max(0, interval-time.Since(asked)))
		} else {
			next.Reset(interval / 10)
		}
		switch {
		case err == nil:
			endsBy = time.Now().Add(w.o.lease)
			watchdog.Reset(time.Until(endsBy))
			if failing {
				w.logf("task %s: heartbeats work again", t.ID)
			}
			failing = false
		case ctx.Err() != nil:
		case isAPIError(err, 409, ""), isAPIError(err, 404, ""):
			close(lost)
			return endsBy
		case !time.Now().Before(endsBy): // the watchdog fires next
		case !failing:
			w.logf("task %s: heartbeat failed (will retry until the lease runs out at %s): %v", t.ID, endsBy.Format("15:04:05.000"), err)
			failing = true
		}
	}
}

// errReportAbandoned is the error of a report a second signal gave up.
var errReportAbandoned = errors.New("report abandoned by a second signal")

// report posts an outcome, retrying through network errors and 5xx.
func (w *pullWorker) report(t leasedTask, action string, body any) error {
	return w.reportInto(t, action, body, nil)
}

// reportInto posts an outcome and decodes the answer into out. Network
// errors and 5xx answers (a server restarting, a database failing over)
// are retried, with pauses doubling from reportRetryPause up to
// maxReportPause, until the lease has surely expired (the server refuses
// the outcome after that) but at least reportAttempts times; the grace
// period's end ends the retries after those tries. A second signal gives
// the report up at once (errReportAbandoned), cutting a call in flight.
func (w *pullWorker) reportInto(t leasedTask, action string, body, out any) error {
	path := "/v1/tasks/" + url.PathEscape(t.ID) + "/" + action
	pause := reportRetryPause
	var err error
	// Bounded by time (the lease, at most an hour) and by count: an hour of
	// pauses of up to 5s is some 720 tries.
	for i := 0; i < 1000; i++ {
		if w.abandonCtx.Err() != nil {
			return errReportAbandoned
		}
		if _, err = w.c.call(w.abandonCtx, "POST", path, nil, body, out); err == nil {
			return nil
		}
		if w.abandonCtx.Err() != nil {
			return errReportAbandoned
		}
		var ae *apiCallError
		if errors.As(err, &ae) && ae.Status < 500 {
			return err
		}
		if i+1 >= reportAttempts && (w.killCtx.Err() != nil || time.Now().Add(pause).After(t.endsBy)) {
			return err
		}
		if i == 0 {
			w.logf("task %s: reporting its outcome failed, retrying until its lease would expire (%s): %v",
				t.ID, t.endsBy.Format("15:04:05"), err)
		}
		tm := time.NewTimer(pause)
		select {
		case <-tm.C:
		case <-w.killCtx.Done():
			if i+1 >= reportAttempts {
				tm.Stop()
				return err
			}
			select {
			case <-tm.C:
			case <-w.abandonCtx.Done():
				tm.Stop()
				return errReportAbandoned
			}
		}
		pause = min(2*pause, maxReportPause)
	}
	return err
}
