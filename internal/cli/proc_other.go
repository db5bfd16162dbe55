//go:build !unix

package cli

import (
	"os"
	"os/exec"
)

// On systems without process groups, retryq signals only the attempt's own
// process, and a timed-out attempt is killed outright.

var (
	terminationSignals = []os.Signal{os.Interrupt}
	hangupSignals      = []os.Signal(nil)
	brokenPipeSignals  = []os.Signal(nil)
	quitSignals        = []os.Signal(nil)
	jobStopSignal      os.Signal
	jobContinueSignal  os.Signal
	sigTERM            os.Signal = os.Kill
	sigKILL            os.Signal = os.Kill
)

func setProcessGroup(cmd *exec.Cmd) {}

// stopSelf does nothing: there is no job control here.
func stopSelf() {}

func signalGroup(pid int, sig os.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(sig)
	}
}

func signalProcess(pid int, sig os.Signal) { signalGroup(pid, sig) }

func exitStatus(state *os.ProcessState) (int, string) {
	if state == nil {
		return 1, ""
	}
	return state.ExitCode(), ""
}

func signalStatus(os.Signal) int { return 130 }

// signalCode reports false: attempts end by exiting here, not by a signal.
func signalCode(int) (string, bool) { return "", false }

func signalName(sig os.Signal) string { return sig.String() }

// openFileLimit returns 0: the limit is not known here.
func openFileLimit() uint64 { return 0 }
