package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/retryq/retryq/internal/api"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

func init() {
	register(&command{name: "demo", summary: "watch retryq handle a flaky simulated AI API (starts everything itself)", run: runDemo})
}

const demoUsage = `Usage: retryq demo [--duration 20s] [--rate 20] [--db sqlite:PATH] [--listen 127.0.0.1:0] [--log FILE]

Starts, in this one process, a retryq server on embedded SQLite (a temporary
file unless --db), a simulated "AI API" on 127.0.0.1 that misbehaves like a
real one (latency, 429 with Retry-After, 503 bursts, an outage from 40% to
60% of the run, inputs it rejects for good), and a stream of --rate tasks a
second of two types:

  ai.summarize  delivered by the server itself: its type has a push target
                pointing at the simulated API;
  ai.embed      run by an in-process Go worker that calls the simulated API.

It prints progress every second and, after --duration or on Ctrl-C, a
summary per type and state, the dead-letter queue by reason, and the commands
to inspect it. With --db the data stays for "retryq server --db ..."; its
unfinished tasks wait there for the next demo on it (nothing else runs
them), whose counts are its own. Ctrl-C during the summary skips it; the
temporary database is removed all the same.
`

// The demo's task types.
const (
	demoPushType   = "ai.summarize"
	demoWorkerType = "ai.embed"
)

// demoPushTimeoutSeconds bounds each push delivery of demoPushType.
const demoPushTimeoutSeconds = 2

// demoBadEvery: every demoBadEvery-th task carries an input the simulated
// API rejects with 400.
const demoBadEvery = 25

type demoOptions struct {
	db       string
	duration time.Duration
	rate     float64
	listen   string
	logFile  string
}

func parseDemo(env *Env, args []string) (*demoOptions, int) {
	const name = "demo"
	o := &demoOptions{duration: 20 * time.Second, rate: 20, listen: "127.0.0.1:0"}
	fs := newFlagSet(name, demoUsage)
	fs.StringVar(&o.db, "db", "", "keep the data in this `database`, e.g. sqlite:demo.db (default: a temporary SQLite file)")
	fs.Var(durationValue{&o.duration}, "duration", "`time` to enqueue tasks for, 1s..1h")
	fs.Float64Var(&o.rate, "rate", o.rate, "`N` tasks enqueued per second, 0.1..1000")
	fs.StringVar(&o.listen, "listen", o.listen, "`address` of the demo's retryq API (loopback only)")
	fs.StringVar(&o.logFile, "log", "", "write the server's warnings and errors to this `file` (default: discarded)")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return nil, st
	}
	if st, ok := wantArgs(env, name, pos, 0, ""); !ok {
		return nil, st
	}
	switch {
	case o.duration < time.Second || o.duration > time.Hour:
		return nil, usageError(env, name, fmt.Sprintf("--duration: must be between 1s and 1h (got %v)", o.duration))
	case math.IsNaN(o.rate) || o.rate < 0.1 || o.rate > 1000:
		return nil, usageError(env, name, fmt.Sprintf("--rate: must be between 0.1 and 1000 tasks a second (got %v)", o.rate))
	}
	if err := api.CheckListen(o.listen, false); err != nil {
		if _, _, perr := net.SplitHostPort(o.listen); perr == nil {
			// The server's refusal advises --api-token, which the demo
			// does not take: its API is open, so it stays on loopback.
			err = fmt.Errorf("the demo's API takes no token, so it listens on a loopback address only, such as 127.0.0.1:0 (got %s)", o.listen)
		}
		return nil, usageError(env, name, "--listen: "+err.Error())
	}
	if o.db != "" {
		// What migrate and server refuse before opening anything ("sqlite:"
		// without a path too), not after the demo has begun to boot.
		if err := checkDSN(o.db); err != nil {
			return nil, usageError(env, name, "--db: "+err.Error())
		}
	}
	return o, exitOK
}

func runDemo(ctx context.Context, env *Env, args []string) int {
	o, st := parseDemo(env, args)
	if o == nil {
		return st
	}
	runCtx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	d := &demo{o: o, env: env}
	if err := d.boot(runCtx); err != nil {
		d.cleanup()
		if runCtx.Err() != nil {
			// Ctrl-C while starting: the stop asked for, not a failure
			// (as for the server); boot's error is only its consequence.
			fmt.Fprintln(env.Stdout, "interrupted before the demo started")
			return exitOK
		}
		return fail(env, "demo", err)
	}
	d.run(runCtx)
	// A Ctrl-C from now on (the second, or the first after --duration)
	// cuts the summary short; the shutdown that follows is bounded and
	// removes the temporary database, so Ctrl-C stays caught until the
	// end: dying of it would leave the database behind. Caught before the
	// run's catch is let go, so that none falls through to the default.
	hurry, stopHurry := signal.NotifyContext(context.WithoutCancel(ctx), os.Interrupt, syscall.SIGTERM)
	defer stopHurry()
	stopSignals()
	return d.finish(hurry)
}

// demo is one run of "retryq demo".
type demo struct {
	o   *demoOptions
	env *Env

	tmpDir  string // temporary database directory, removed at the end
	dbDSN   string
	logOut  *os.File
	srv     *runningServer
	sim     *simAPI
	hc      *http.Client
	since   time.Time // before the server started: its attempts are this run's
	began   time.Time // the simulated API's start and the enqueue clock
	elapsed time.Duration

	// before holds, per demo type, the tasks --db held in a final state
	// when the run began: the counts are this run's, not the database's.
	before   map[string]map[store.State]int
	found    int // tasks of the demo types --db held
	leftover int // of them, unfinished: this run takes them over

	workerStop context.CancelFunc
	workerDone chan struct{}
	enqueued   int
	interrupt  bool
}

// Policies of the demo types: the pushed type retries longer (8 attempts,
// up to 4s apart: most of its tasks ride out the outage), the worker type
// gives up sooner (4 attempts: tasks caught in the outage end in the
// dead-letter queue).
var (
	demoPushPolicy = retry.Policy{Backoff: retry.BackoffExponential, InitialDelay: 250 * time.Millisecond, Multiplier: 2,
		MaxDelay: 4 * time.Second, Jitter: retry.JitterFull, MaxAttempts: 8}
	demoWorkerPolicy = retry.Policy{Backoff: retry.BackoffExponential, InitialDelay: 200 * time.Millisecond, Multiplier: 2,
		MaxDelay: 2 * time.Second, Jitter: retry.JitterProportional, JitterFraction: 0.25, MaxAttempts: 4}
)

func (d *demo) boot(ctx context.Context) error {
	d.dbDSN = d.o.db
	if d.dbDSN == "" {
		dir, err := os.MkdirTemp("", "retryq-demo-")
		if err != nil {
			return fmt.Errorf("create a temporary directory: %w", err)
		}
		d.tmpDir = dir
		d.dbDSN = "sqlite:" + filepath.Join(dir, "demo.db")
	}
	logW := io.Discard
	if d.o.logFile != "" {
		// Readable by its owner only, as the database: its warnings carry
		// the attempts' error messages. A file that exists keeps its mode.
		f, err := os.OpenFile(d.o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		d.logOut, logW = f, f
	}
	log := slog.New(slog.NewTextHandler(logW, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d.since = time.Now()
	srv, err := startServer(ctx, &serverOptions{db: d.dbDSN, listen: d.o.listen, nodeID: "demo",
		logFormat: "text", logLevel: "warn", maxBody: api.DefaultMaxBodyBytes, poll: 250 * time.Millisecond}, log)
	if err != nil {
		return err
	}
	d.srv = srv
	if err := d.countBefore(ctx); err != nil {
		return err
	}
	d.began = time.Now()
	// The simulated API's rate limit: a bit above the steady request rate,
	// so that the retries piling up after the outage meet 429s.
	d.sim, err = startSimAPI(d.began, d.o.duration, int64(math.Ceil(d.o.rate*1.5)))
	if err != nil {
		return err
	}
	d.hc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}

	if _, err := srv.eng.PutType(ctx, engine.TypeSpec{Type: demoPushType, Policy: demoPushPolicy, Timeout: 5 * time.Second,
		Target: &engine.Target{URL: d.sim.url + "/v1/summarize", Method: "POST", TimeoutSeconds: demoPushTimeoutSeconds, Concurrency: 16}}); err != nil {
		return fmt.Errorf("configure %s: %w", demoPushType, err)
	}
	if _, err := srv.eng.PutType(ctx, engine.TypeSpec{Type: demoWorkerType, Policy: demoWorkerPolicy, Timeout: 5 * time.Second}); err != nil {
		return fmt.Errorf("configure %s: %w", demoWorkerType, err)
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.workerStop, d.workerDone = stop, make(chan struct{})
	go func() {
		defer close(d.workerDone)
		err := srv.eng.RunWorker(wctx, engine.WorkerConfig{ID: "demo/embed-worker", Types: []string{demoWorkerType},
			Concurrency: 16, Handle: d.embed, ShutdownGrace: 2 * time.Second})
		if err != nil {
			log.Error("demo worker stopped", "err", err)
		}
	}()
	d.printIntro()
	return nil
}

// embed is the in-process handler of ai.embed: one call to the simulated
// API. Failures are classified by the type's policy: retry.FromResponse
// makes 429/5xx transient (honouring Retry-After) and 400 permanent.
func (d *demo) embed(ctx context.Context, t *store.Task) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.sim.url+"/v1/embed", bytes.NewReader(t.Payload))
	if err != nil {
		return retry.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Retryq-Task-Id", t.ID)
	resp, err := d.hc.Do(req)
	if err != nil {
		if errors.Is(err, io.EOF) { // the connection was dropped without an answer
			return retry.WithCode(retry.CodeConnectionReset, retry.Transient(err))
		}
		return err
	}
	defer resp.Body.Close()
	if err := retry.FromResponse(resp, time.Now()); err != nil {
		var he *retry.HTTPError
		if errors.As(err, &he) && strings.TrimSpace(he.Body) != "" {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(he.Body)) // still classified by its status
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return nil
}

func (d *demo) printIntro() {
	w := d.env.Stdout
	from, to := outageWindow(d.o.duration)
	where := "a temporary SQLite database"
	if d.o.db != "" {
		where = redactDSN(d.o.db)
	}
	fmt.Fprintf(w, "retryq demo: %v of tasks at %s/s against a simulated AI API that misbehaves:\n", d.o.duration, strconv.FormatFloat(d.o.rate, 'f', -1, 64))
	fmt.Fprintf(w, "  20-200ms latency, 429 + Retry-After over its rate limit, 503 bursts, an outage from %v to %v,\n", from.Round(100*time.Millisecond), to.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  and 1 task in %d with an input it rejects (400).\n\n", demoBadEvery)
	fmt.Fprintf(w, "  retryq API    http://%s (%s)\n", d.srv.addr, where)
	fmt.Fprintf(w, "  %-13s pushed by the server to %s/v1/summarize; %s\n", demoPushType, d.sim.url, policyWords(&demoPushPolicy))
	fmt.Fprintf(w, "  %-13s run by an in-process Go worker calling %s/v1/embed; %s\n\n", demoWorkerType, d.sim.url, policyWords(&demoWorkerPolicy))
	d.printFound()
	fmt.Fprintf(w, "While it runs, try in another terminal:\n  retryq stats --server http://%s\n  retryq dlq summary --server http://%s\n\n", d.srv.addr, d.srv.addr)
	fmt.Fprintln(w, "Press Ctrl-C to stop early.")
	fmt.Fprintln(w)
}

// policyWords describes a retry policy in a few words.
func policyWords(p *retry.Policy) string {
	return fmt.Sprintf("%s backoff from %v up to %v, %d attempts", p.Backoff, p.InitialDelay, p.MaxDelay, p.MaxAttempts)
}

// run enqueues tasks at the configured rate and prints progress every
// second until the duration passes or ctx ends.
func (d *demo) run(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(d.o.duration)
	defer deadline.Stop()
	nextReport := d.began.Add(time.Second)
	// Bounded: one round per 100ms tick until the deadline timer fires.
	for {
		select {
		case <-ctx.Done():
			d.interrupt = true
			d.elapsed = time.Since(d.began)
			fmt.Fprintln(d.env.Stdout, "\ninterrupted")
			return
		case <-deadline.C:
			d.enqueueDue(ctx, d.o.duration)
			// The run's length is taken now, not after the overdue lines
			// below (their queries take a while on a loaded machine).
			d.elapsed = time.Since(d.began)
			// A loaded machine can get here with a report overdue (the
			// ticks came late): print it rather than skip a second.
			// Bounded: one line per second of the duration at most.
			for due := nextReport.Sub(d.began); due < d.o.duration && !time.Now().Before(nextReport); due += time.Second {
				d.progress(ctx, due)
				nextReport = nextReport.Add(time.Second)
			}
			return
		case now := <-tick.C:
			d.enqueueDue(ctx, now.Sub(d.began))
			if !now.Before(nextReport) {
				// Labelled with the second it reports, even when the tick
				// came late: each second gets its one line.
				d.progress(ctx, nextReport.Sub(d.began))
				nextReport = nextReport.Add(time.Second)
			}
		}
	}
}

// enqueueDue enqueues the tasks due by elapsed time e.
func (d *demo) enqueueDue(ctx context.Context, e time.Duration) {
	want := int(d.o.rate * min(e, d.o.duration).Seconds())
	if want <= d.enqueued {
		return
	}
	reqs := make([]engine.EnqueueRequest, 0, want-d.enqueued)
	for i := d.enqueued; i < want; i++ {
		typ := demoPushType
		if i%2 == 1 {
			typ = demoWorkerType
		}
		p := map[string]any{"doc": fmt.Sprintf("doc-%05d", i+1), "text": "The quick brown fox jumps over the lazy dog."}
		if i%demoBadEvery == demoBadEvery/2 {
			p["bad"] = true
			p["text"] = "\x00\x01 not text"
		}
		b, _ := json.Marshal(p)
		reqs = append(reqs, engine.EnqueueRequest{Type: typ, Payload: b})
	}
	if _, err := d.srv.eng.EnqueueMany(ctx, reqs); err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(d.env.Stderr, "retryq demo: enqueue failed: %v\n", err)
		}
		return
	}
	d.enqueued = want
}

func (d *demo) progress(ctx context.Context, e time.Duration) {
	c, err := d.counts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(d.env.Stderr, "retryq demo: read stats: %v\n", err)
		}
		return
	}
	t := c.total
	fmt.Fprintf(d.env.Stdout, "[%3ds] enqueued %5d  succeeded %5d  retrying %4d  dead %4d  in flight %4d  retry rate %6s  upstream: %s\n",
		int(e.Round(time.Second)/time.Second), d.enqueued, t[store.StateSucceeded], t[store.StateRetryWaiting], t[store.StateDead],
		inFlight(t), retryRate(c.first, c.retries), phaseAt(e, d.o.duration))
}

// finish stops the worker and the push deliveries, prints the summary and
// shuts everything down. When hurry ends (a Ctrl-C) it skips what is left
// of the summary.
func (d *demo) finish(hurry context.Context) int {
	ctx, cancel := context.WithTimeout(hurry, 30*time.Second)
	defer cancel()
	d.workerStop()
	select {
	case <-d.workerDone:
	case <-ctx.Done():
	}
	// The simulated API goes away with the demo: a server run on a kept
	// --db afterwards would deliver the unfinished tasks to its closed
	// port and fill the dead-letter queue with connection_refused. Without
	// a target they wait for the next demo, which sets it again. Done
	// after a Ctrl-C too, within a bound of its own.
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := d.srv.eng.PutType(tctx, engine.TypeSpec{Type: demoPushType, Policy: demoPushPolicy, Timeout: 5 * time.Second})
	tcancel()
	if err != nil {
		err = fmt.Errorf("remove the push target of %s: %w", demoPushType, err)
	}
	if err == nil {
		d.awaitPushDeliveries(ctx)
	}
	var c *demoCounts
	if err == nil {
		c, err = d.counts(ctx)
	}
	var dead []store.DeadGroup
	since := d.runStart()
	if err == nil {
		var sum store.Summary
		sum, err = d.srv.eng.DeadSummary(ctx, store.SummaryParams{Since: since})
		dead = sum.Groups
	}
	sampleID := ""
	if err == nil && len(dead) > 0 {
		var ts []store.Task
		ts, _, err = d.srv.eng.ListDead(ctx, store.DeadFilter{Type: dead[0].Type, ErrorCode: dead[0].ErrorCode,
			NoErrorCode: dead[0].ErrorCode == "", Since: since, Limit: 1})
		if len(ts) > 0 {
			sampleID = ts[0].ID
		}
	}
	status := exitOK
	switch {
	case hurry.Err() != nil:
		fmt.Fprintln(d.env.Stdout, "\ninterrupted: stopping without the summary")
	case err != nil:
		fmt.Fprintf(d.env.Stderr, "retryq demo: read the final counts: %v\n", err)
		status = exitFailure
	default:
		d.printSummary(c, dead, sampleID)
	}
	d.cleanup()
	return status
}

// awaitPushDeliveries waits, for at most the push timeout and a margin,
// until no delivery of the pushed type is in flight. Deliveries leased
// before its target was removed go on and record their outcomes: counted
// as running, they would make the summary's counts and its number of
// unfinished tasks those of a moment before most of them succeeded.
func (d *demo) awaitPushDeliveries(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, (demoPushTimeoutSeconds+2)*time.Second)
	defer cancel()
	for {
		c, err := d.counts(ctx)
		if err != nil || c.byType[demoPushType][store.StateRunning] == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cleanup shuts the server and the simulated API down and removes the
// temporary database.
func (d *demo) cleanup() {
	if d.workerStop != nil {
		d.workerStop()
		<-d.workerDone
	}
	if d.srv != nil {
		d.srv.shutdown()
	}
	if d.sim != nil {
		d.sim.close()
	}
	if d.hc != nil {
		d.hc.CloseIdleConnections()
	}
	if d.logOut != nil {
		d.logOut.Close()
	}
	if d.tmpDir != "" {
		_ = os.RemoveAll(d.tmpDir)
	}
}
