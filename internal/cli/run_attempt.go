package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/retryq/retryq/retry"
)

// outcome is how one attempt of "retryq run" ended.
type outcome struct {
	status   int    // exit status as a shell reports it (128+N for signal N)
	signal   string // "TERM" when the attempt died by a signal
	timedOut bool   // killed by --timeout
	startErr error  // the command could not be started
	elapsed  time.Duration
}

// ok reports a successful attempt. One stopped by --timeout has failed,
// whatever status it then exited with (a program may exit 0 on SIGTERM).
func (o outcome) ok() bool { return o.status == 0 && o.startErr == nil && !o.timedOut }

// timedOutStatus is retryq's exit status when its last attempt was stopped
// by --timeout yet exited 0, as timeout(1) reports a timeout.
const timedOutStatus = 124

// code is the error code the retry policy matches against its lists.
func (o outcome) code() string {
	switch {
	case o.startErr != nil:
		return "start_failed"
	case o.timedOut:
		return retry.CodeTimeout
	case o.signal != "":
		return "signal:" + o.signal
	default:
		return exitCode(o.status)
	}
}

// err is the attempt's failure as a classified error for retry.Do:
// a command that cannot start is permanent, a timeout is transient, and
// other failures are left to the policy's lists (unknown otherwise).
func (o outcome) err(timeout time.Duration) error {
	switch {
	case o.startErr != nil:
		return retry.Permanent(retry.WithCode(o.code(), o.startErr))
	case o.timedOut:
		return retry.WithCode(o.code(), retry.Transient(fmt.Errorf("attempt timed out after %v", timeout)))
	case o.signal != "":
		return retry.WithCode(o.code(), fmt.Errorf("killed by signal %s", o.signal))
	default:
		return retry.WithCode(o.code(), fmt.Errorf("exit status %d", o.status))
	}
}

// procGroup tracks the running attempt and the signal that stopped
// retryq, so that a signal arriving at any moment reaches the attempt: one
// already running, or one just starting. An attempt normally leads its own
// process group and is signalled as a group; one sharing retryq's group
// (see runner.shareGroup) is signalled alone.
type procGroup struct {
	mu      sync.Mutex
	pid     int  // the attempt's process; 0 when none runs
	own     bool // the attempt leads its own process group
	stopSig os.Signal
}

// signalAttempt sends sig to an attempt's process group, or to its process
// alone when it shares retryq's group.
func signalAttempt(pid int, own bool, sig os.Signal) {
	if own {
		signalGroup(pid, sig)
	} else {
		signalProcess(pid, sig)
	}
}

func (g *procGroup) started(pid int, own bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pid, g.own = pid, own
	if g.stopSig != nil {
		signalAttempt(pid, own, g.stopSig)
	}
}

func (g *procGroup) exited() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pid = 0
}

// note records sig as the reason to stop (the first one counts) without
// forwarding it yet.
func (g *procGroup) note(sig os.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopSig == nil {
		g.stopSig = sig
	}
}

// stop records sig as the reason to stop and forwards it to the attempt.
func (g *procGroup) stop(sig os.Signal) {
	g.note(sig)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pid != 0 {
		signalAttempt(g.pid, g.own, sig)
	}
}

// signal forwards sig to the running attempt, if any, without taking it
// for a reason to stop.
func (g *procGroup) signal(sig os.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pid != 0 {
		signalAttempt(g.pid, g.own, sig)
	}
}

func (g *procGroup) stopSignal() os.Signal {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopSig
}

// attempt runs the command once, as attempt n, in its own process group
// (or in retryq's, see runner.shareGroup). With a timeout, the group gets
// SIGTERM when it expires and SIGKILL after the grace period; once the
// attempt's main process has exited, whatever is left of a timed-out group
// is killed at once.
func (r *runner) attempt(n int) outcome {
	start := time.Now()
	cmd := exec.Command(r.o.argv[0], r.o.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.env.Stdin, r.env.Stdout, r.env.Stderr
	cmd.Env = append(os.Environ(),
		"RETRYQ_ATTEMPT="+strconv.Itoa(n),
		"RETRYQ_MAX_ATTEMPTS="+strconv.Itoa(r.maxAttempts))
	cmd.WaitDelay = r.o.grace // bounds waiting for pipes held open by leftovers
	own := !r.shareGroup
	if own {
		setProcessGroup(cmd)
	}
	if err := cmd.Start(); err != nil {
		status := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			status = 127
		}
		return outcome{status: status, startErr: err, elapsed: time.Since(start)}
	}
	pid := cmd.Process.Pid
	r.group.started(pid, own)
	defer r.group.exited()
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // see below: the process state is what counts
		close(waited)
	}()

	var timeoutC <-chan time.Time
	if r.o.timeout > 0 {
		t := time.NewTimer(r.o.timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	// Wait's error is not needed: the process state says how it ended, even
	// when Wait gave up on pipes held open by leftovers (exec.ErrWaitDelay).
	timedOut := false
	select {
	case <-waited:
	case <-timeoutC:
		timedOut = true
		signalAttempt(pid, own, sigTERM)
		grace := time.NewTimer(r.o.grace)
		select {
		case <-waited:
		case <-grace.C:
			signalAttempt(pid, own, sigKILL)
			<-waited
		}
		grace.Stop()
		if own {
			signalGroup(pid, sigKILL) // leftovers of the group
		}
	}
	status, sig := exitStatus(cmd.ProcessState)
	return outcome{status: status, signal: sig, timedOut: timedOut, elapsed: time.Since(start)}
}
