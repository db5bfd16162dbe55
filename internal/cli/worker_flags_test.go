package cli

import (
	"bytes"
	"context"
	"fmt"
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
