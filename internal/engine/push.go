package engine

// Push targets: the engine delivers the tasks of a type that has a Target
// itself, by HTTP, instead of handing them to workers.
//
// Every node (leader or not) runs one pusher. Its refresh loop reads the
// stored types every pushRefreshInterval, and at once after PutType in this
// process (Engine.pushTypesChanged), and keeps one fetcher per type with a
// target. A fetcher leases up to (concurrency − in flight) tasks of its type
// with worker id "<node>/push", woken like in-process workers by the wake
// broadcaster and the poll interval, and delivers each task in its own
// goroutine. Concurrency is counted per type from lease to committed outcome,
// so a type whose target hangs fills only its own slots: there is no shared
// pool that one slow target could exhaust, and the total number of
// deliveries is bounded by the sum of the types' concurrencies.
//
// A delivery is one HTTP request: the payload as body (Content-Type
// application/json), the target's headers, then Retryq-Task-Id (the
// receiver's idempotency key), Retryq-Attempt and Retryq-Task-Type, which
// the target's headers cannot override. Its context times out after the
// target's timeout_seconds, else the type's timeout, else 30s. The outcome
// goes through the single retry decision (Engine.Decide) and the outcome
// coalescer; the pusher has no retry loop of its own:
//
//   - 2xx: succeeded;
//   - 429, 408, 425, 5xx except 501: transient, code = the status ("503");
//     Retry-After (seconds or HTTP date) sets the delay, capped by the
//     policy's max delay (in retry.Policy.Decide);
//   - any other status, 3xx included: permanent, code = the status (a
//     101 Switching Protocols too, its connection closed unread);
//   - a status under 100 ("000"): not an HTTP status, class unknown
//     (retried), code "delivery_error";
//   - the attempt timed out: transient, "timeout";
//   - refused connection: transient, "connection_refused"; a reset or a
//     connection closed without a response (EOF): transient,
//     "connection_reset"; other network errors as retry.Classify says, and
//     unrecognised ones class unknown (retried), code "delivery_error".
//
// The history row's Detail holds "HTTP <status>: <first KiB of the body>"
// for every response, successes included (a 3xx adds the first 512 bytes
// of its Location). The rest of the body is read, up to 64 KiB more, only
// if it arrives within pushDrainWait, so that the connection is reused;
// otherwise the connection is closed rather than holding the delivery.
// Response headers are read up to 64 KiB; a response with more fails like
// an unrecognised delivery error (retried). Log lines and the error
// messages of failed deliveries name a target by its URL with its secrets
// masked (RedactURL); that of a delivery that got no
// answer says whether its request had gone out whole, on a reused
// keep-alive connection or not (pushResult.sentNote).
//
// Redirects are never followed, whatever the method: following a 301/302/303
// turns a POST into a body-less GET and would silently drop the payload, and
// a push target is configuration, so a redirect means the URL is wrong. A 3xx
// is a permanent failure (code "301", …) whose detail names the Location; fix
// the URL and redrive the dead tasks.
//
// The request carries no Idempotency-Key header on purpose: net/http treats
// requests with one as replayable and may resend them on its own after some
// connection errors, which would be a hidden retry outside Decide.
//
// Leases: a fetch leases for timeout + pushLeaseMargin, at least the
// engine's LeaseDuration (pushLease), and the delivery is
// registered in the engine's lease table, so the heartbeat loop extends it
// and a lease found lost (the task was cancelled or reaped) cancels the
// request; its outcome is then dropped. If the node dies, the reaper retries
// the task as lease_expired.
//
// Shutdown (Engine.Close, before the commit loops stop): fetchers stop at
// once; deliveries in flight get up to pushShutdownGrace (less once
// Engine.EndGraces is called) to finish and record their outcome; those
// still running are then cancelled and their
// leases released (pending again, the attempt not counted) so another node
// delivers them at once instead of waiting for the lease to expire. The
// receiver may therefore see the same Retryq-Task-Id twice; that is what the
// idempotency key is for.
//
// Config conflict: a type with a target must not also be served by
// in-process workers (RunWorker) or pull workers (Lease). Both would compete
// with the pusher for the same tasks; each task is still leased by only one
// of them at a time, but which one runs it is arbitrary. See
// Engine.checkNoPushTargets, and push_types.go for a target set while
// workers run.

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq/store"
)

// Push defaults and limits.
const (
	DefaultPushConcurrency = 16
	DefaultPushTimeout     = 30 * time.Second

	// CodeDeliveryError is the error code of a failed delivery that no
	// classifier recognised (class unknown, retried).
	CodeDeliveryError = "delivery_error"

	pushRefreshInterval = typeCacheTTL
	pushLeaseMargin     = 10 * time.Second       // covers the outcome commit after a timed-out request
	pushMaxFetch        = 100                    // tasks per fetch
	pushBodyExcerpt     = 1 << 10                // bytes of the response body kept in the history
	pushDrainLimit      = 64 << 10               // bytes read past the excerpt to reuse the connection
	pushDrainWait       = 250 * time.Millisecond // time they may take to arrive, else the connection closes
	pushLocationExcerpt = 512                    // bytes of a 3xx's Location kept in the history
	pushMaxHeaderBytes  = 64 << 10               // response headers a delivery reads at most
	pushShutdownGrace   = 10 * time.Second       // in-flight deliveries may finish within this at Close
	pushStopWait        = 5 * time.Second        // then cancelled deliveries must return within this
)

// Headers set on every delivery.
const (
	HeaderTaskID   = "Retryq-Task-Id"
	HeaderAttempt  = "Retryq-Attempt"
	HeaderTaskType = "Retryq-Task-Type"
)

// pushTarget is a type's resolved target. It is immutable; a changed
// configuration is swapped in as a new value.
type pushTarget struct {
	url         string
	logURL      string // url with its secrets masked (redactURL), for the log
	method      string
	header      http.Header
	host        string // a "Host" header from the target, else ""
	timeout     time.Duration
	concurrency int
	raw         string     // stored JSON and timeout, to detect changes
	conns       *pushConns // the target's connections (push_conns.go)
}

// resolveTarget applies the defaults: method POST, timeout the target's,
// else the type's stored timeout, else 30s; concurrency 16.
func resolveTarget(t *Target, typeTimeout time.Duration) *pushTarget {
	pt := &pushTarget{url: t.URL, logURL: redactURL(t.URL), method: t.Method, header: make(http.Header), concurrency: t.Concurrency,
		conns: newPushConns()}
	if pt.method == "" {
		pt.method = http.MethodPost
	}
	switch {
	case t.TimeoutSeconds > 0:
		pt.timeout = time.Duration(t.TimeoutSeconds * float64(time.Second))
	case typeTimeout > 0:
		pt.timeout = typeTimeout
	default:
		pt.timeout = DefaultPushTimeout
	}
	if pt.concurrency <= 0 {
		pt.concurrency = DefaultPushConcurrency
	}
	pt.header.Set("Content-Type", "application/json")
	for k, v := range t.Headers {
		if strings.EqualFold(k, "Host") {
			pt.host = v
			continue
		}
		pt.header.Set(k, v)
	}
	return pt
}

// pusher runs the push fetchers and deliveries of one engine.
type pusher struct {
	e        *Engine
	workerID string
	grace    time.Duration // pushShutdownGrace; tests shorten it
	refresh  chan struct{} // one slot: the stored types changed
	bad      badTargetLog  // the refresh loop's log of unusable targets

	mu       sync.Mutex
	started  bool
	stopped  bool
	fetchers map[string]*pushFetcher
	// slots count each type's deliveries in flight, across the fetchers
	// the type has had: a target removed and put back gets a new fetcher,
	// while the old one's deliveries may still run.
	slots map[string]*pushSlots
	// delivered is the set of types with a fetcher, for the workers and
	// long polls, which leave them out (push_types.go).
	delivered atomic.Pointer[pushSet]

	ctx              context.Context // fetchers' context; cancelled first at stop
	cancel           context.CancelFunc
	deliverCtx       context.Context // deliveries' context; cancelled after the grace
	cancelDeliveries context.CancelFunc
	loops            sync.WaitGroup // refresh loop and fetchers
	deliveries       sync.WaitGroup // delivery goroutines
	stopOnce         sync.Once
}

func newPusher(e *Engine) *pusher {
	return &pusher{
		e:        e,
		workerID: e.cfg.NodeID + "/push",
		grace:    pushShutdownGrace,
		refresh:  make(chan struct{}, 1),
		bad:      badTargetLog{log: e.log},
		fetchers: make(map[string]*pushFetcher),
		slots:    make(map[string]*pushSlots),
	}
}

// newPushClient returns the HTTP client of a target's deliveries
// (pushConns): a transport sized for many concurrent requests to the same few hosts (the
// default keeps only 2 idle connections per host, so a busy target would
// pay a new connection per request), response headers bounded (net/http
// would read up to 10 MiB per response, times every delivery in flight,
// from a target whose headers never end), no overall client timeout (each
// request has its own context) and no redirects (a 3xx's Location is
// taken out of net/http's sight: locationHider).
func newPushClient() *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: pushMaxHeaderBytes,
	}
	return &http.Client{
		Transport: locationHider{tr},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// pushTypesChanged makes the pusher reload the stored types now (called
// after PutType). It never blocks.
func (e *Engine) pushTypesChanged() {
	if e.push == nil {
		return
	}
	select {
	case e.push.refresh <- struct{}{}:
	default:
	}
}

// checkNoPushTargets returns an error naming the first of types that has a
// push target, as this node's type cache or its pusher knows it: such a
// type is delivered by the engine and must not also be fetched by
// workers.
func (e *Engine) checkNoPushTargets(ctx context.Context, types []string) error {
	pushed := e.pushTypes()
	for _, typ := range types {
		ent, err := e.types.get(ctx, typ)
		if err != nil {
			return err
		}
		if ent.spec.Target != nil || pushed.has(typ) {
			return fieldErr("types", "type %q has a push target: the engine delivers its tasks itself, workers must not fetch them", typ)
		}
	}
	return nil
}

// start launches the refresh loop; parent is the engine's loop context.
func (p *pusher) start(parent context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.stopped {
		return
	}
	p.started = true
	p.ctx, p.cancel = context.WithCancel(parent)
	p.deliverCtx, p.cancelDeliveries = context.WithCancel(context.WithoutCancel(parent))
	p.loops.Add(1)
	go func() {
		defer p.loops.Done()
		p.run(p.ctx)
	}()
}

// stop stops fetching, lets deliveries finish within the grace, cancels and
// releases the rest and waits for their outcomes. It must run before the
// outcome coalescer stops. It is idempotent.
func (p *pusher) stop() {
	p.stopOnce.Do(func() {
		if !p.stopFetching() {
			return
		}
		p.loops.Wait() // no delivery starts after this
		if n := p.inFlight(); n > 0 {
			// Said before the wait: a log silent for the whole grace
			// reads as a shutdown that hangs.
			p.e.log.Info("waiting for push deliveries in flight", "node", p.e.cfg.NodeID, "deliveries", n, "grace", p.grace)
		}
		done := make(chan struct{})
		go func() {
			p.deliveries.Wait()
			close(done)
		}()
		grace := time.NewTimer(p.grace)
		defer grace.Stop()
		cut := false
		select {
		case <-done:
		case <-grace.C:
			cut = true
		case <-p.e.gracesEnded:
			cut = true
		}
		if cut {
			// Counted, not taken from the select: with EndGraces called
			// before, its case wins whenever done's goroutine has not run
			// yet, with no delivery in flight as with some.
			if n := p.inFlight(); n > 0 {
				p.e.log.Info("push deliveries still running at shutdown; cancelling and releasing them", "node", p.e.cfg.NodeID, "deliveries", n)
			}
			p.cancelDeliveries()
			wait := time.NewTimer(pushStopWait)
			defer wait.Stop()
			select {
			case <-done:
			case <-wait.C:
				p.e.log.Warn("push deliveries did not return after cancellation", "node", p.e.cfg.NodeID)
			}
		}
		p.cancelDeliveries()
		p.mu.Lock()
		for _, f := range p.fetchers {
			f.target.Load().conns.retire() // removed ones were retired then
		}
		p.mu.Unlock()
	})
}

// inFlight counts the deliveries leased and not yet recorded or released,
// across the types.
func (p *pusher) inFlight() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, s := range p.slots {
		n += s.inFlight.Load()
	}
	return n
}

// stopFetching cancels the refresh loop and the fetchers without waiting
// for them: no fetch starts after it, a fetch in flight releases what it
// leased, and deliveries in flight go on. It reports whether the pusher had
// started. It is idempotent.
func (p *pusher) stopFetching() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped && p.started {
		p.cancel()
	}
	p.stopped = true
	return p.started
}

// run keeps the set of fetchers in line with the stored targets. Failed
// reloads are logged once per outage (a warning at the first, the rest at
// Debug, a line when one works again), not every pushRefreshInterval for
// as long as the database is away.
func (p *pusher) run(ctx context.Context) {
	tick := time.NewTicker(pushRefreshInterval)
	defer tick.Stop()
	out := outageLog{log: p.e.log, then: "; keeping the current targets"}
	for {
		switch err := p.sync(ctx); {
		case ctx.Err() != nil:
		case err != nil:
			out.failed("push: reload types", err)
		default:
			out.recovered("push: types reloaded again")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.refresh:
		}
	}
}

// sync reads the stored types and starts, updates or stops fetchers.
func (p *pusher) sync(ctx context.Context) error {
	tcs, err := p.e.st.ListTypes(ctx)
	if err != nil {
		return err
	}
	want := make(map[string]*pushTarget)
	p.bad.beginReload()
	for _, tc := range tcs {
		raw := bytes.TrimSpace(tc.Target)
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var t Target
		if err := json.Unmarshal(raw, &t); err != nil {
			p.bad.unusable(tc.Type, string(raw), "undecodable", err)
			continue
		}
		if err := t.Validate(); err != nil {
			p.bad.unusable(tc.Type, string(raw), "invalid", err)
			continue
		}
		pt := resolveTarget(&t, tc.Timeout)
		pt.raw = string(raw) + "|" + tc.Timeout.String()
		want[tc.Type] = pt
	}
	p.bad.reloaded(func(typ string) bool { return want[typ] != nil })
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || ctx.Err() != nil {
		return nil
	}
	for typ, f := range p.fetchers {
		if want[typ] == nil {
			f.cancel()
			f.target.Load().conns.retire()
			delete(p.fetchers, typ)
			p.e.log.Info("push target removed; deliveries in flight finish", "type", typ)
		}
	}
	for typ, s := range p.slots {
		// A type with no fetcher left running and no delivery in flight
		// needs its count no more (it would be kept for every type that
		// ever had a target): one that gets a target again starts anew.
		if s.fetchers == 0 && s.inFlight.Load() == 0 {
			delete(p.slots, typ)
		}
	}
	for typ, pt := range want {
		if f := p.fetchers[typ]; f != nil {
			if old := f.target.Load(); old.raw != pt.raw {
				if old.url == pt.url {
					pt.conns = old.conns
				} else {
					old.conns.retire()
				}
				f.target.Store(pt)
				signal(f.changed)
				p.e.log.Info("push target updated", "type", typ, "url", pt.logURL, "concurrency", pt.concurrency, "timeout", pt.timeout)
			}
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		slots := p.slots[typ]
		if slots == nil {
			slots = &pushSlots{freed: make(chan struct{}, 1)}
			p.slots[typ] = slots
		}
		f := &pushFetcher{p: p, typ: typ, cancel: cancel, slots: slots, changed: make(chan struct{}, 1)}
		f.target.Store(pt)
		p.fetchers[typ] = f
		slots.fetchers++
		p.loops.Add(1)
		go func() {
			defer p.loops.Done()
			f.run(fctx)
			p.fetcherDone(typ, slots)
		}()
		p.e.log.Info("push target active", "type", typ, "url", pt.logURL, "concurrency", pt.concurrency, "timeout", pt.timeout)
	}
	p.updateDelivered()
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pushFetcher leases and delivers the tasks of one push type.
type pushFetcher struct {
	p       *pusher
	typ     string
	target  atomic.Pointer[pushTarget]
	slots   *pushSlots
	changed chan struct{} // one slot: the target changed
	cancel  context.CancelFunc
}

func (f *pushFetcher) run(ctx context.Context) {
	e := f.p.e
	sub := e.wake.subscribe(f.typ)
	defer e.wake.unsubscribe(sub)
	timer := time.NewTimer(e.cfg.PollInterval)
	defer timer.Stop()
	retry := newFetchRetry(e.log, "push: ", "type", f.typ)
	for ctx.Err() == nil {
		pt := f.target.Load()
		free := int64(pt.concurrency) - f.slots.inFlight.Load()
		if free <= 0 {
			select {
			case <-f.slots.freed:
			case <-f.changed:
			case <-ctx.Done():
			}
			continue
		}
		limit := int(min(free, pushMaxFetch))
		// The fetch is not cut short by shutdown: one cancelled after the
		// store committed would lose its leases to the reaper (an attempt
		// counted). It is bounded (by the timeout and margin, not by the
		// lease, which may be an hour long: Close waits for it), and what
		// it got is released if the pusher stopped meanwhile.
		lease := pushLease(pt.timeout, e.cfg.LeaseDuration)
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), pt.timeout+pushLeaseMargin)
		var tasks []store.Task
		var err error
		if e.clockReady() { // nothing leased on a clock not yet synced
			tasks, err = e.st.FetchTasks(fctx, store.FetchParams{
				Types: []string{f.typ}, Limit: limit, WorkerID: f.p.workerID,
				LeaseDuration: lease, Now: e.now(), MaxBytes: DefaultFetchBytes,
			})
		}
		fcancel()
		if err == nil && ctx.Err() != nil {
			for i := range tasks {
				t := &tasks[i]
				_ = e.record(context.WithoutCancel(ctx), t, store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending})
			}
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// As an in-process worker's: at most fetchBackoffMax, cut
			// short by a wake-up, logged once per outage.
			retry.failed(ctx, sub, err)
			continue
		}
		retry.succeeded()
		for i := range tasks {
			t := &tasks[i]
			f.slots.inFlight.Add(1)
			e.leases.addTask(t)
			f.p.deliveries.Add(1)
			go f.p.deliver(f, pt, t)
		}
		if fetchMayHaveMore(tasks, limit) {
			continue // there may be more
		}
		resetTimer(timer, e.cfg.PollInterval)
		select {
		case <-sub:
		case <-timer.C:
		case <-f.changed:
		case <-ctx.Done():
		}
	}
}
