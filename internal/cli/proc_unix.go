//go:build unix

package cli

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// terminationSignals are the signals retryq forwards to the running attempt.
var terminationSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// hangupSignals are the signals of a closed terminal or session. "retryq
// run" forwards them too, rather than die and leave running an attempt
// whose own process group the terminal does not signal.
var hangupSignals = []os.Signal{syscall.SIGHUP}

// quitSignals are the signals of a user asking a program to quit (the
// terminal's Ctrl-\). "retryq run" forwards them as it does
// terminationSignals, rather than dump its goroutines and exit 2 (Go's
// default), leaving the attempt running with nobody waiting for it.
var quitSignals = []os.Signal{syscall.SIGQUIT}

// jobStopSignal and jobContinueSignal are job control's stop (the
// terminal's Ctrl-Z) and continue (a shell's fg and bg), which "retryq run"
// passes on to an attempt in a process group of its own.
var (
	jobStopSignal     os.Signal = syscall.SIGTSTP
	jobContinueSignal os.Signal = syscall.SIGCONT
)

// stopSelf stops retryq until a SIGCONT, as a SIGTSTP at its default
// action would: Go cannot give a caught SIGTSTP back its default action,
// so retryq sends itself SIGSTOP (a shell reports the job as "Stopped
// (signal)" rather than "Stopped").
func stopSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}

// brokenPipeSignals are the signals a write to a pipe nobody reads raises.
// The worker catches them so that such a write to its standard output or
// error fails instead of killing it (Go's default for fds 1 and 2); caught,
// not ignored, so that the commands it starts get the default disposition.
var brokenPipeSignals = []os.Signal{syscall.SIGPIPE}

// sigTERM and sigKILL are used to stop a timed-out attempt.
var (
	sigTERM os.Signal = syscall.SIGTERM
	sigKILL os.Signal = syscall.SIGKILL
)

// setProcessGroup makes cmd the leader of a new process group, so that the
// attempt and everything it starts can be signalled together.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to every process in the group pgid. A group that
// is already gone is not an error.
func signalGroup(pgid int, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok || pgid <= 0 {
		return
	}
	_ = syscall.Kill(-pgid, s)
}

// signalProcess sends sig to the process pid alone. A process that is
// already gone is not an error.
func signalProcess(pid int, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok || pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, s)
}

// exitStatus returns the status a shell would report for a finished
// process and, for a death by signal, the signal's short name.
func exitStatus(state *os.ProcessState) (status int, signal string) {
	if state == nil {
		return 1, ""
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), signalName(ws.Signal())
	}
	return state.ExitCode(), ""
}

// maxSignal is the highest signal number (SIGRTMAX on Linux, above the
// others' highest).
const maxSignal = 64

// signalCode returns the error code of an attempt killed by the signal
// whose exit status is n (128+N for signal N), as outcome.code names it;
// ok is false when n is no such status.
func signalCode(n int) (code string, ok bool) {
	if n <= 128 || n > 128+maxSignal {
		return "", false
	}
	return "signal:" + signalName(syscall.Signal(n-128)), true
}

// signalStatus is the exit status for a death by sig.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT", syscall.SIGILL: "ILL",
	syscall.SIGTRAP: "TRAP", syscall.SIGABRT: "ABRT", syscall.SIGBUS: "BUS", syscall.SIGFPE: "FPE",
	syscall.SIGKILL: "KILL", syscall.SIGUSR1: "USR1", syscall.SIGSEGV: "SEGV", syscall.SIGUSR2: "USR2",
	syscall.SIGPIPE: "PIPE", syscall.SIGALRM: "ALRM", syscall.SIGTERM: "TERM",
}

// signalName returns "TERM" for SIGTERM, and so on.
func signalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}

// openFileLimit returns the process's file descriptor limit (its soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard limit at start),
// or 0 when it cannot be read.
func openFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return uint64(lim.Cur) //nolint:unconvert // int64 on some systems
}
