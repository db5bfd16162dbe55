package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cmdResult is how a task's command ended.
type cmdResult struct {
	ok        bool
	code      string
	message   string
	retryable *bool
}

// execute runs the command for t, stopping it when the lease is lost, the
// --timeout passes or the worker must stop.
func (w *pullWorker) execute(t leasedTask, lost <-chan struct{}) cmdResult {
	yes, no := true, false
	cmd := exec.Command("sh", "-c", w.o.exec)
	payload := t.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	cmd.Stdin = bytes.NewReader(append(slices.Clip(payload), '\n'))
	tail := &tailBuffer{max: stderrTailBytes}
	cmd.Stdout = w.out
	cmd.Stderr = io.MultiWriter(w.errOut, tail)
	cmd.Env = append(os.Environ(),
		"RETRYQ_TASK_ID="+t.ID,
		"RETRYQ_TASK_TYPE="+t.Type,
		"RETRYQ_ATTEMPT="+strconv.Itoa(t.Attempt))
	cmd.WaitDelay = killGrace // bounds waiting for pipes held open by leftovers
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return cmdResult{code: "start_failed", message: "could not start sh -c: " + err.Error(), retryable: &yes}
	}
	pgid := cmd.Process.Pid
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()

	var timeoutC <-chan time.Time
	if w.o.timeout > 0 {
		tm := time.NewTimer(w.o.timeout)
		defer tm.Stop()
		timeoutC = tm.C
	}
	stopReason := ""
	select {
	case <-waited:
	case <-lost:
		stopReason = "lease_lost"
	case <-timeoutC:
		stopReason = "timeout"
	case <-w.killCtx.Done():
		stopReason = "worker_stopped"
	}
	if stopReason != "" {
		signalGroup(pgid, sigTERM)
		kt := time.NewTimer(killGrace)
		select {
		case <-waited:
		case <-kt.C:
			signalGroup(pgid, sigKILL)
			<-waited
		}
		kt.Stop()
	}
	signalGroup(pgid, sigKILL) // whatever the command left behind in its group
	status, sig := exitStatus(cmd.ProcessState)
	switch stopReason {
	case "timeout":
		return cmdResult{code: "timeout", message: fmt.Sprintf("the command ran longer than --timeout %v and was stopped", w.o.timeout), retryable: &yes}
	case "worker_stopped":
		return cmdResult{code: "worker_stopped", message: "the worker stopped before the command finished", retryable: &yes}
	case "lease_lost":
		return cmdResult{code: "lease_lost", message: "lease lost"}
	}
	if status == 0 && sig == "" {
		return cmdResult{ok: true}
	}
	msg := tail.lastLine()
	if sig != "" {
		if msg == "" {
			msg = "killed by signal " + sig
		}
		return cmdResult{code: "signal:" + sig, message: msg, retryable: &yes}
	}
	if msg == "" {
		msg = "exit status " + strconv.Itoa(status)
	}
	r := cmdResult{code: exitCode(status), message: msg, retryable: &yes}
	if slices.Contains(w.o.permanent, status) {
		r.retryable = &no
	}
	return r
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// lastLine returns the last line that reads as not empty on a terminal,
// cleaned and bounded: escape sequences (colours) are dropped, and of a
// line redrawn with carriage returns (a progress bar) only the last
// drawing counts.
func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	segs := strings.FieldsFunc(string(t.b), func(r rune) bool { return r == '\n' || r == '\r' })
	for i := len(segs) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(cleanCell(segs[i], 0)); l != "" {
			return cleanCell(l, maxMessageRunes)
		}
	}
	return ""
}
