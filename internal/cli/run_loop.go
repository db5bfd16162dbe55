package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"slices"
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
	// shareGroup runs attempts in retryq's own process group instead of
	// one each: a standard stream is retryq's controlling terminal, and an
	// attempt in a group of its own, which is not the terminal's
	// foreground group, would be stopped (SIGTTIN, SIGTTOU) as soon as it
	// read from it or changed its settings, and retryq would wait for it
	// forever. Sharing the group, it gets the terminal's signals (Ctrl-C,
	// Ctrl-Z, hangup) with retryq, as a shell's job does.
	shareGroup bool

	attempts    int         // attempts started
	last        outcome     // the latest attempt's outcome
	circuitOpen bool        // the breaker stopped retrying
	openClass   retry.Class // the class of the failure that opened the breaker
}

func newRunner(env *Env, o *runOptions) *runner {
	r := &runner{env: env, o: o, maxAttempts: o.policy.WithDefaults().MaxAttempts,
		shareGroup: onControllingTerminal(env.Stdin, env.Stdout, env.Stderr)}
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
	if caught := stopSignals(); len(caught) > 0 { // none would mean all
		signal.Notify(sigs, caught...)
	}
	defer signal.Stop(sigs)
	jobc := make(chan os.Signal, 4)
	if !r.shareGroup && jobStopSignal != nil && !signal.Ignored(jobStopSignal) {
		// Sharing retryq's group, the attempt gets the terminal's Ctrl-Z
		// and the shell's SIGCONT itself.
		signal.Notify(jobc, jobStopSignal, jobContinueSignal)
	}
	defer signal.Stop(jobc)
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
				if !r.fromTerminal(s) {
					r.group.stop(s)
				}
			case s := <-jobc:
				// Stopped, the attempt is stopped first, so that it does
				// not run on while the shell reports the job stopped;
				// continued, it is continued.
				r.group.signal(s)
				if s == jobStopSignal {
					stopSelf()
				}
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

// stopSignals are the signals that stop a run and are forwarded to the
// attempt (SIGQUIT among them: it asks retryq to quit, not to dump its
// goroutines), less those retryq was started with ignored (nohup ignores
// SIGHUP; a shell script's asynchronous command starts with SIGINT
// ignored): caught, they would no longer be ignored by retryq, nor by its
// attempts, which inherit an ignored signal but not a caught one.
func stopSignals() []os.Signal {
	var caught []os.Signal
	for _, s := range slices.Concat(terminationSignals, quitSignals, hangupSignals) {
		if !signal.Ignored(s) {
			caught = append(caught, s)
		}
	}
	return caught
}

// fromTerminal reports whether sig is taken for the terminal's Ctrl-C or
// Ctrl-\, which the attempt got as well: a SIGINT or SIGQUIT while the
// attempt shares retryq's process group and that group is the terminal's
// foreground group. It is not forwarded, or the attempt would get it twice
// (many programs take a second SIGINT for "stop now, skip the clean-up").
func (r *runner) fromTerminal(sig os.Signal) bool {
	return r.shareGroup && (sig == os.Interrupt || slices.Contains(quitSignals, sig)) &&
		inTerminalForeground(r.env.Stdin, r.env.Stdout, r.env.Stderr)
}

func (r *runner) op(ctx context.Context) error {
	r.attempts++
	r.last = r.attempt(r.attempts)
	if r.last.ok() {
		return nil
	}
	err := r.last.err(r.o.timeout)
	if r.last.signal == "PIPE" && outputReaderGone(r.env.Stdout, r.env.Stderr) {
		// Killed writing to an output whose reader has gone ("retryq run
		// -- cmd | head -1"): every further attempt would run the command
		// again only to write into the same broken pipe.
		return retry.Permanent(err)
	}
	if r.br == nil {
		return err
	}
	if class, counted := r.breakerDecides(ctx, err); counted {
		now := time.Now()
		r.br.Failure(now)
		if r.br.State(now) == breaker.Open {
			r.circuitOpen, r.openClass = true, class
			return retry.Permanent(err) // final because of the breaker, not of its class
		}
	}
	return err
}

// breakerDecides reports whether a failed attempt is one the breaker
// counts: one the policy would retry. An attempt that fails permanently or
// is the last ends the run for that reason, and one ended by retryq's own
// interruption is no failure of the command. It returns the failure's
// class under the policy too.
func (r *runner) breakerDecides(ctx context.Context, err error) (retry.Class, bool) {
	if ctx.Err() != nil || r.attempts >= r.maxAttempts {
		return retry.ClassUnknown, false
	}
	class, _, _ := r.o.policy.Classify(err)
	return class, class != retry.ClassPermanent
}

func (r *runner) hook(a retry.AttemptInfo) {
	if r.circuitOpen {
		// retry.Do saw the failure made permanent by the breaker: log the
		// class the policy gave it.
		a.Class = r.openClass
	}
	r.log.attempt(a, r.last, r.o.timeout, r.breakerThreshold())
}

// breakerThreshold is --breaker once the breaker has opened, else 0.
func (r *runner) breakerThreshold() int {
	if r.circuitOpen {
		return r.o.breaker
	}
	return 0
}
