package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// errInvalidStatus is a response whose status is not an HTTP status code
// (under 100): a delivery error, retried like an unrecognised one.
var errInvalidStatus = errors.New("invalid HTTP status")

// pushResult is what one HTTP delivery produced.
type pushResult struct {
	status     int           // response status; 0 when no response arrived
	retryAfter time.Duration // parsed Retry-After of the response
	location   string        // Location of a 3xx response, cut to pushLocationExcerpt bytes
	excerpt    string        // first pushBodyExcerpt bytes of the body, made printable
	truncated  bool          // the body was longer than the excerpt
	err        error         // transport error when status is 0
	timedOut   bool          // the attempt's timeout fired
	sent       bool          // the whole request was written to the connection
	reused     bool          // on a keep-alive connection an earlier delivery used
}

// deliver runs one delivery of a leased task and records its outcome.
func (p *pusher) deliver(f *pushFetcher, pt *pushTarget, t *store.Task) {
	e := p.e
	defer p.deliveries.Done()
	defer f.finish() // after the outcome is committed: the slot counts until then

	leaseCtx, cancelLease := context.WithCancelCause(p.deliverCtx)
	defer cancelLease(nil)
	started, expiring := e.leases.startInTime(t.ID, t.LeaseID, cancelLease, e.now(), watchdogMargin(e.cfg.LeaseDuration))
	if !started {
		e.leases.remove(t.ID, t.LeaseID)
		if expiring {
			// Its fetch answered late: sent now, the delivery would run
			// on a lease running out under it. Given back as after a
			// watchdog stop (a heartbeat may have kept the lease), the
			// attempt not counted.
			e.log.Warn("push: lease about to expire before the delivery started; giving it back", "task_id", t.ID, "type", t.Type, "lease_id", t.LeaseID)
			settled := make(chan struct{})
			e.giveBackExpired(t, func() { close(settled) })
			<-settled
			return
		}
		e.log.Warn("push: lease lost before the delivery started; skipped", "task_id", t.ID, "type", t.Type)
		return
	}
	if e.debugging() {
		e.log.Debug("push delivery started", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "url", pt.logURL)
	}
	// The delivery is decided under its type's policy, read before it is
	// sent: when that cannot be read, nothing is sent and the task is held
	// back rather than decided under the engine's defaults.
	spec, err := e.decidingSpec(leaseCtx, t.Type)
	if err != nil {
		if !e.leases.finish(t.ID, t.LeaseID) {
			e.ctr.leaseLost.Add(1)
			return
		}
		defer e.leases.remove(t.ID, t.LeaseID)
		if leaseCtx.Err() != nil {
			// Stopped while it waited for the configuration (shutdown,
			// or the lease lost), not a configuration that cannot be
			// read: nothing was sent.
			p.abandon(leaseCtx, t)
			return
		}
		_ = e.record(context.WithoutCancel(leaseCtx), t, e.holdBack(t, err)) // logged by record
		return
	}
	res := p.attempt(leaseCtx, pt, t)
	if !e.leases.finish(t.ID, t.LeaseID) {
		// The task was leased again since: this delivery's lease is gone,
		// and its outcome would be refused.
		e.ctr.leaseLost.Add(1)
		e.log.Warn("push delivery returned after its lease was lost; outcome dropped", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt)
		return
	}
	// The lease stays heartbeated until the outcome has committed: a slow
	// commit must not let the reaper count the delivery as lost.
	defer e.leases.remove(t.ID, t.LeaseID)
	// Outcomes are committed even if the engine is shutting down: the
	// commit loops stop only after the pusher.
	recCtx := context.WithoutCancel(leaseCtx)

	if res.status == 0 && leaseCtx.Err() != nil {
		p.abandon(leaseCtx, t)
		return
	}

	var out store.Outcome
	if res.status >= 200 && res.status <= 299 {
		out = store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StateSucceeded,
			OutcomeKind: store.OutcomeSucceeded, Detail: res.detail()}
	} else {
		// Decided under the policy as it stands now, not as it stood
		// when the delivery was sent (decisionSpec).
		dspec := e.decisionSpec(recCtx, t.Type, &spec)
		out = e.Decide(t, dspec, res.failure(pt), e.now())
	}
	_ = e.record(recCtx, t, out) // logged by record
}

// abandon ends a delivery whose lease context was cancelled before a
// response came (its lease is finishing): a lost lease records nothing (one
// the watchdog gave up on is given back, in case a late heartbeat kept it),
// and at shutdown the task is given back at once, the attempt not counted.
func (p *pusher) abandon(leaseCtx context.Context, t *store.Task) {
	e := p.e
	if cause := context.Cause(leaseCtx); errors.Is(cause, ErrLeaseLost) {
		e.log.Warn("push delivery aborted: lease lost (task cancelled or reaped)", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt)
		if errors.Is(cause, ErrLeaseExpired) {
			// The watchdog gave up on the lease; a late heartbeat may
			// have kept it after all.
			settled := make(chan struct{})
			e.giveBackExpired(t, func() { close(settled) })
			<-settled
		} else {
			e.ctr.leaseLost.Add(1)
		}
		return
	}
	// Shutdown cancelled the delivery: give the task back at once.
	out := store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending}
	_ = e.record(context.WithoutCancel(leaseCtx), t, out)
}

// attempt sends the request and reads the start of the response.
func (p *pusher) attempt(parent context.Context, pt *pushTarget, t *store.Task) pushResult {
	ctx, cancel := context.WithTimeoutCause(parent, pt.timeout, ErrAttemptTimeout)
	defer cancel()
	// The request has a context of its own, inside the attempt's, so that
	// reading past the excerpt can be cut short (which closes the
	// connection) without calling the attempt timed out.
	reqCtx, stopRequest := context.WithCancel(ctx)
	defer stopRequest()
	req, err := http.NewRequestWithContext(reqCtx, pt.method, pt.url, bytes.NewReader(t.Payload))
	if err != nil {
		return pushResult{err: err}
	}
	// Without GetBody net/http never sends the request again by itself
	// (it would for a GET, or a request carrying an Idempotency-Key, on a
	// reused connection the target closed): every send is an attempt that
	// Decide sees and the history counts.
	req.GetBody = nil
	req.Header = pt.header.Clone()
	if pt.host != "" {
		req.Host = pt.host
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "retryq/"+p.e.cfg.Version)
	}
	req.Header.Set(HeaderTaskID, t.ID)
	req.Header.Set(HeaderAttempt, strconv.Itoa(t.Attempt))
	req.Header.Set(HeaderTaskType, t.Type)
	// Whether the request went out, and on which connection, for the
	// message of a delivery that got no answer (sentNote). The callbacks
	// run in the transport's goroutines. WroteRequest reports the request
	// once it is in the connection's buffer, before the flush that sends
	// it: a write that failed after it is told by the error (writeFailed).
	var sent, reused atomic.Bool
	var location string // a 3xx's Location (locationHider)
	req = req.WithContext(httptrace.WithClientTrace(withLocationSlot(reqCtx, &location), &httptrace.ClientTrace{
		GotConn:      func(i httptrace.GotConnInfo) { reused.Store(i.Reused) },
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.Store(i.Err == nil) },
	}))

	// Counted until the body is closed (deferred below, so run first):
	// the connection is idle again then, and closed if the target was
	// retired meanwhile.
	pt.conns.acquire()
	defer pt.conns.release()
	resp, err := pt.conns.client.Do(req)
	if err != nil {
		return pushResult{err: err, timedOut: errors.Is(context.Cause(ctx), ErrAttemptTimeout),
			sent: sent.Load() && !writeFailed(err), reused: reused.Load()}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 100 {
		// net/http takes any three digits: "000" would read as status 0,
		// which means no response here, with no error to classify.
		return pushResult{err: fmt.Errorf("read response: %w %03d", errInvalidStatus, resp.StatusCode)}
	}
	res := pushResult{status: resp.StatusCode}
	if v := resp.Header.Get("Retry-After"); v != "" {
		res.retryAfter, _ = retry.ParseRetryAfter(v, p.e.now())
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		// The history is shown to read-only tokens: the credentials a
		// redirect may carry (a presigned URL's signature, a login
		// token) are masked as in a target's URL. The target chooses its
		// length: keep an excerpt, like the body's.
		switch loc := redactLocation(location); {
		case len(loc) > pushLocationExcerpt:
			res.location = printable([]byte(loc[:pushLocationExcerpt])) + " …[truncated]"
		default:
			res.location = printable([]byte(loc))
		}
	}
	if resp.StatusCode < 200 {
		// Only a 101 gets here (net/http skips the other 1xx answers). Its
		// body is the raw connection, handed over for another protocol:
		// no context bounds its reads, so reading it would last as long
		// as the target keeps the connection open. Nothing is read.
		return res
	}
	// The status decides the outcome; a body that cannot be read in time
	// only shortens the excerpt.
	b, _ := io.ReadAll(io.LimitReader(resp.Body, pushBodyExcerpt+1))
	if len(b) > pushBodyExcerpt {
		b, res.truncated = b[:pushBodyExcerpt], true
	}
	res.excerpt = printable(b)
	if res.truncated {
		// Read a little more so the connection can be reused, if that
		// much arrives soon; a larger or slower body closes it. Waiting
		// longer would hold the type's slot (up to the timeout, with a
		// target that trickles its body) for a decided delivery.
		drain := time.AfterFunc(pushDrainWait, stopRequest)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, pushDrainLimit))
		drain.Stop()
	}
	return res
}

// printable makes a body excerpt safe to store as text (store.CleanText):
// a rune cut by the excerpt limit becomes U+FFFD.
func printable(b []byte) string { return store.CleanText(string(b)) }

// detail is the history detail of a response: "HTTP 503: <body excerpt>".
func (r *pushResult) detail() string {
	if r.status == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "HTTP %d", r.status)
	if r.location != "" {
		fmt.Fprintf(&sb, " (redirect to %s not followed)", r.location)
	}
	if r.excerpt != "" {
		sb.WriteString(": ")
		sb.WriteString(r.excerpt)
		if r.truncated {
			sb.WriteString(" …[truncated]")
		}
	}
	return sb.String()
}

// failure converts a failed delivery into the Failure that Decide
// classifies (the policy's retry_on / no_retry_on lists still apply to the
// code).
func (r *pushResult) failure(pt *pushTarget) Failure {
	switch {
	case r.status != 0:
		he := &retry.HTTPError{StatusCode: r.status, RetryAfter: r.retryAfter}
		msg := he.Error()
		if r.status >= 300 && r.status <= 399 {
			msg += ": push targets do not follow redirects"
		}
		return Failure{Code: strconv.Itoa(r.status), Message: msg, Class: he.Class(),
			RetryAfter: r.retryAfter, Detail: r.detail()}
	case r.timedOut:
		return Failure{Code: retry.CodeTimeout, Class: retry.ClassTransient,
			Message: fmt.Sprintf("push delivery timed out after %s: %s%s", pt.timeout, r.errText(pt), r.sentNote())}
	}
	class, code, _ := retry.Classify(r.err)
	if code == "" && errors.Is(r.err, io.EOF) {
		// The target closed the connection without answering.
		class, code = retry.ClassTransient, retry.CodeConnectionReset
	}
	switch code {
	case retry.CodeDeadlineExceeded:
		class, code = retry.ClassTransient, retry.CodeTimeout
	case retry.CodeDNSNotFound:
		// A target's name that does not resolve is usually a service
		// being recreated or a DNS hiccup, not a property of the task:
		// retried by the policy (no_retry_on can still make it final).
		class = retry.ClassTransient
	case "", retry.CodeCanceled:
		class, code = retry.ClassUnknown, CodeDeliveryError
	}
	return Failure{Code: code, Message: "push delivery failed: " + r.errText(pt) + r.sentNote(), Class: class}
}

// sentNote says, for a delivery that got no answer, that its request had
// gone out whole, so the target may have acted on it although the attempt
// failed (the retry delivers it again: at least once), and whether that
// was on a kept-alive connection, which a target closing idle connections
// may close as the request arrives.
func (r *pushResult) sentNote() string {
	switch {
	case r.sent && r.reused:
		return " (the request was sent, on a reused keep-alive connection: the target may have received it)"
	case r.sent:
		return " (the request was sent: the target may have received it)"
	}
	return ""
}

// writeFailed reports whether err is a failed write to the connection:
// the request, or its tail, never went out, whatever WroteRequest said.
func writeFailed(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

// errText is the transport error's text naming the target as the log
// does: net/http's errors quote the URL with its password masked but its
// query whole, and a webhook URL's query often holds its key, which would
// be kept in the history and shown to read-only tokens.
func (r *pushResult) errText(pt *pushTarget) string {
	if r.err == nil {
		return "no response" // not reached: attempt sets err without a status
	}
	var ue *url.Error
	if errors.As(r.err, &ue) {
		return fmt.Sprintf("%s %q: %v", ue.Op, pt.logURL, ue.Err)
	}
	return r.err.Error()
}

// pushLease is the lease a push fetch takes for a target's timeout: the
// timeout plus pushLeaseMargin, and at least the engine's LeaseDuration.
// The heartbeat loop extends the lease only every third of LeaseDuration,
// and the lease watchdog stops a delivery a tenth of it before the known
// expiry: a shorter lease (a short timeout under a long --lease) was
// stopped by the watchdog, or ran out in the store, before its first
// heartbeat, while the request was still within its timeout.
func pushLease(timeout, leaseDuration time.Duration) time.Duration {
	return max(timeout+pushLeaseMargin, leaseDuration)
}

// pushSlots are a type's deliveries in flight: leased and not yet recorded
// or released.
type pushSlots struct {
	inFlight atomic.Int64
	freed    chan struct{} // one slot: a delivery finished
	// fetchers counts the fetchers running for the type, which alone add
	// to inFlight (a removed one may still be in its last fetch); the
	// slots go, in sync, once neither they nor deliveries are left.
	// Guarded by pusher.mu.
	fetchers int
}

// fetcherDone notes that a fetcher of typ, counted in slots, has
// returned: no delivery of the type is started by it any more. The slots
// go now if nothing else needs them (see sync for the other case).
func (p *pusher) fetcherDone(typ string, slots *pushSlots) {
	p.mu.Lock()
	defer p.mu.Unlock()
	slots.fetchers--
	if slots.fetchers == 0 && slots.inFlight.Load() == 0 && p.slots[typ] == slots {
		delete(p.slots, typ)
	}
}

func (f *pushFetcher) finish() {
	f.slots.inFlight.Add(-1)
	signal(f.slots.freed)
}
