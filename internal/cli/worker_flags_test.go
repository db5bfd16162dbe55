//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestWorkerFlagsTheServerWouldRefuseOrAlter: a --worker-id that is not
// UTF-8 and more --types than a lease request may name are usage errors
// naming the flag, before any request. The worker id used to be sent
// altered (JSON encoding turns its bad bytes into U+FFFD, so the history
// named a worker that does not exist), and the types refused by the server
// as a 400 on "types" with exit status 1.
func TestWorkerFlagsTheServerWouldRefuseOrAlter(t *testing.T) {
	s := startAPIServer(t, nil)
	manyTypes := make([]string, 257)
	for i := range manyTypes {
		manyTypes[i] = fmt.Sprintf("t%d", i)
	}
	for _, tc := range []struct {
		name, flag string
		args       []string
	}{
		{"worker id not UTF-8", "--worker-id", []string{"--types", "cli.flags", "--worker-id", "w\xff1"}},
		{"257 types", "--types", []string{"--types", strings.Join(manyTypes, ",")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Bounded: a worker that accepts the flags runs until stopped.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			args := append([]string{"worker", "--server", s.url, "--exec", "true"}, tc.args...)
			st := Main(ctx, args, strings.NewReader(""), &stdout, &stderr)
			if st != exitUsage || !strings.Contains(stderr.String(), tc.flag+":") {
				t.Errorf("status %d, want %d with a message naming %s\nstderr: %s", st, exitUsage, tc.flag, stderr.String())
			}
		})
	}
}

// TestWorkerStopsWithNothingRunningWithoutGraceWarning: a worker stopped
// with --grace 0 while no command runs says it stopped, not that the grace
// period is over and it is stopping commands. It used to race the zero
// grace timer against noticing that nothing ran.
func TestWorkerStopsWithNothingRunningWithoutGraceWarning(t *testing.T) {
	s := startAPIServer(t, nil)
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		var stderr lockedBuffer
		status := make(chan int, 1)
		go func() {
			args := []string{"worker", "--server", s.url, "--exec", "true", "--types", "cli.idle", "--grace", "0"}
			status <- Main(ctx, args, strings.NewReader(""), io.Discard, &stderr)
		}()
		pollUntil(t, 10*time.Second, "the worker to start", func() bool { return strings.Contains(stderr.String(), "leasing") },
			stderr.String)
		cancel()
		if st := <-status; st != exitOK {
			t.Fatalf("run %d: status %d\n%s", i, st, stderr.String())
		}
		if out := stderr.String(); strings.Contains(out, "grace period") || !strings.Contains(out, "stopped") {
			t.Fatalf("run %d: with no command running, the worker's log says:\n%s", i, out)
		}
	}
}
