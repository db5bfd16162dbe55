package engine

import (
	"context"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

// batcher coalesces concurrent requests into one call of fn (group commit).
// A single loop takes the first waiting request, drains whatever else is
// already queued up to max, and runs fn once for all of them. When idle a
// request is committed at once, alone; under load many share one commit. No
// timer is involved, so batching never adds latency to a lone request.
//
// With linger set, after a commit that answered k waiting callers the loop
// yields the processor (timers are far coarser than this wait) until k
// requests are queued again or linger has passed: callers that each wait for
// their own commit come straight back with their next request, and without
// the wait they would split into two halves that alternate, each waiting for
// two commits.
type batcher[Req, Res any] struct {
	ch     chan batchCall[Req, Res]
	max    int
	linger time.Duration
	fn     func(ctx context.Context, reqs []Req) ([]Res, []error, error)
	done   chan struct{} // closed when the loops stop: wakes senders blocked on a full queue
	once   sync.Once
	// sendMu and closed keep requests from being queued once the loops
	// stopped reading: senders check closed and send under the read lock;
	// a stopping loop sets closed under the write lock, so whatever was
	// queued before is in ch when it drains it, and nothing comes after.
	sendMu sync.RWMutex
	closed bool
}

type batchCall[Req, Res any] struct {
	req   Req
	reply chan batchReply[Res] // nil for fire-and-forget
	after func(Res, error)     // optional callback run by the loop
	// waits marks a caller that waits for the answer (and may come back
	// with its next request): do sets it, and so does a caller that waits
	// on its own through after. The linger counts these callers.
	waits bool
}

type batchReply[Res any] struct {
	res Res
	err error
}

func newBatcher[Req, Res any](max, queue int, fn func(ctx context.Context, reqs []Req) ([]Res, []error, error)) *batcher[Req, Res] {
	return &batcher[Req, Res]{ch: make(chan batchCall[Req, Res], queue), max: max, fn: fn, done: make(chan struct{})}
}

// do submits req and waits for its result. After the loops stopped it
// returns errEngineClosed.
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	var zero Res
	reply := make(chan batchReply[Res], 1)
	if err := b.send(ctx, batchCall[Req, Res]{req: req, reply: reply, waits: true}); err != nil {
		return zero, err
	}
	select {
	case r := <-reply:
		return r.res, r.err
	case <-ctx.Done():
		// The request is committed or failed regardless; we stop waiting.
		return zero, ctx.Err()
	}
}

// submit queues req without waiting; after (if not nil) runs with its result,
// or with errEngineClosed when the loops stopped. It blocks only when the
// queue is full (back-pressure).
func (b *batcher[Req, Res]) submit(req Req, after func(Res, error)) {
	if err := b.send(context.Background(), batchCall[Req, Res]{req: req, after: after}); err != nil && after != nil {
		var zero Res
		after(zero, err)
	}
}

// send queues c unless the loops stopped (errEngineClosed) or ctx ends
// first. A queued call is always answered: by a commit, or by the drain of
// a stopping loop.
func (b *batcher[Req, Res]) send(ctx context.Context, c batchCall[Req, Res]) error {
	b.sendMu.RLock()
	defer b.sendMu.RUnlock()
	if b.closed {
		return errEngineClosed
	}
	select {
	case b.ch <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		// Stopping: the loop waits for the read lock to be released.
		return errEngineClosed
	}
}

// run is the commit loop. It returns when ctx is done and the queue is empty.
func (b *batcher[Req, Res]) run(ctx context.Context) {
	calls := make([]batchCall[Req, Res], 0, b.max)
	reqs := make([]Req, 0, b.max)
	want := 0 // calls expected back: queued during the last commit plus the callers it answered
	for {
		calls, reqs = calls[:0], reqs[:0]
		select {
		case c := <-b.ch:
			calls = append(calls, c)
		case <-ctx.Done():
			// Stop accepting (done first: it wakes senders blocked on a
			// full queue, which hold the read lock), then flush whatever
			// was queued before, in batches of up to max as before: one
			// commit each would hold the stop for as many commits, each
			// bounded only by its own retries.
			b.once.Do(func() { close(b.done) })
			b.sendMu.Lock()
			b.closed = true
			b.sendMu.Unlock()
			for {
				calls, reqs = calls[:0], reqs[:0]
			flush:
				for len(calls) < b.max {
					select {
					case c := <-b.ch: // other loops of the batcher may drain it too
						calls, reqs = append(calls, c), append(reqs, c.req)
					default:
						break flush
					}
				}
				if len(calls) == 0 {
					return
				}
				b.commit(context.WithoutCancel(ctx), calls, reqs)
			}
		}
		if b.linger > 0 && want > 1 {
			store.YieldUntil(func() bool { return len(b.ch) >= want-1 }, b.linger)
		}
	drain:
		for len(calls) < b.max {
			select {
			case c := <-b.ch:
				calls = append(calls, c)
			default:
				break drain
			}
		}
		waiters := 0
		for _, c := range calls {
			reqs = append(reqs, c.req)
			if c.waits {
				waiters++
			}
		}
		want = b.commit(context.WithoutCancel(ctx), calls, reqs) + waiters
	}
}

// commit runs fn for one batch and answers its calls. It returns how many
// calls were queued when fn returned (before the answers went out).
func (b *batcher[Req, Res]) commit(ctx context.Context, calls []batchCall[Req, Res], reqs []Req) int {
	res, errs, err := b.fn(ctx, reqs)
	queued := len(b.ch)
	for i, c := range calls {
		var r batchReply[Res]
		if err != nil {
			r.err = err
		} else {
			if i < len(res) {
				r.res = res[i]
			}
			if i < len(errs) {
				r.err = errs[i]
			}
		}
		if c.after != nil {
			c.after(r.res, r.err)
		}
		if c.reply != nil {
			c.reply <- r
		}
	}
	return queued
}
