package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"time"

	"github.com/retryq/retryq/breaker"
	"github.com/retryq/retryq/retry"
)

// runner carries one "retryq run" invocation.
type runner struct {
	env         *Env
	o           *runOptions
	maxAttempts int
	log         *runLog
	br          *breaker.Breaker // nil without --breaker
	group       procGroup

	attempts    int     // attempts started
	last        outcome // the latest attempt's outcome
	circuitOpen bool    // the breaker stopped retrying
}

func newRunner(env *Env, o *runOptions) *runner {
	r := &runner{env: env, o: o, maxAttempts: o.policy.WithDefaults().MaxAttempts}
	r.log = newRunLog(env.Stderr, o.logFormat, r.maxAttempts)
	if o.breaker > 0 {
		// Validated flags make this config valid; the run ends before any
		// cool-down could matter.
		r.br, _ = breaker.New("command", breaker.Config{ConsecutiveFailures: o.breaker, FailureRate: -1, CoolDown: time.Hour})
	}
	return r
}

// run retries the command with retry.Do and returns retryq's exit status.
func (r *runner) run(parent context.Context) int {
	start := time.Now()
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, terminationSignals...)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		parentDone := parent.Done()
		for {
			// The reason is recorded and the context cancelled before the
			// signal reaches the attempt: an attempt that exits at once on
			// it must find the run interrupted, not schedule a retry.
			select {
			case s := <-sigs:
				r.group.note(s)
				cancel()
				r.group.stop(s)
			case <-parentDone:
				r.group.note(sigTERM)
				cancel()
				r.group.stop(sigTERM)
				parentDone = nil
			case <-done:
				return
			}
		}
	}()

	err := retry.Do(ctx, r.op, r.o.policy, retry.WithHook(r.hook))
	status := r.last.status
	if r.last.timedOut && status == 0 {
		status = timedOutStatus
	}
	if r.attempts == 0 {
		status = 1
		if sig := r.group.stopSignal(); sig != nil {
			status = signalStatus(sig)
		}
	}
	stop := retry.StopNone
	var ex *retry.ExhaustedError
	if errors.As(err, &ex) {
		stop = ex.Stop
	} else if err != nil {
		stop = retry.StopCanceled
	}
	r.log.summary(summary{
		attempts: r.attempts, status: status, stop: stop, elapsed: time.Since(start),
		signal: r.group.stopSignal(), breaker: r.breakerThreshold(),
	})
	return status
}

func (r *runner) op(ctx context.Context) error {
	r.attempts++
	r.last = r.attempt(r.attempts)
	if r.last.ok() {
		return nil
	}
	err := r.last.err(r.o.timeout)
	if r.br != nil && r.breakerDecides(ctx, err) {
		now := time.Now()
		r.br.Failure(now)
		if r.br.State(now) == breaker.Open {
			r.circuitOpen = true
			return retry.Permanent(err)
		}
	}
	return err
}

// breakerDecides reports whether a failed attempt is one the breaker
// counts: one the policy would retry. An attempt that fails permanently or
// is the last ends the run for that reason, and one ended by retryq's own
// interruption is no failure of the command.
func (r *runner) breakerDecides(ctx context.Context, err error) bool {
	if ctx.Err() != nil || r.attempts >= r.maxAttempts {
		return false
	}
	class, _, _ := r.o.policy.Classify(err)
	return class != retry.ClassPermanent
}

func (r *runner) hook(a retry.AttemptInfo) {
	r.log.attempt(a, r.last, r.o.timeout, r.breakerThreshold())
}

// breakerThreshold is --breaker once the breaker has opened, else 0.
func (r *runner) breakerThreshold() int {
	if r.circuitOpen {
		return r.o.breaker
	}
	return 0
}
