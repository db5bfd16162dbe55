package engine

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// A pull worker that reports retryable=false must dead-letter the task
// (docs/api.md: "error.retryable (true/false) overrides the
// classification"; an explicit permanent error goes straight to the DLQ),
// even when the type's retry_on list names the reported code. In process,
// retry.Permanent(retry.WithCode("503", err)) is dead at once; over the pull
// API the same failure is retried.
func TestPullRetryableFalseBeatsRetryOn(t *testing.T) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, "sqlite")
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	pol := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Minute, MaxDelay: time.Hour,
		Jitter: retry.JitterNone, MaxAttempts: 5, RetryOn: []string{"503"}}
	if _, err := e.PutType(ctx, TypeSpec{Type: "pull.t", Policy: pol}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Enqueue(ctx, EnqueueRequest{Type: "pull.t"}); err != nil {
		t.Fatal(err)
	}
	ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.t"}, Max: 1})
	if err != nil || len(ts) != 1 {
		t.Fatalf("lease: %v %d", err, len(ts))
	}
	no := false
	out, err := e.Fail(ctx, ts[0].ID, LeaseToken(&ts[0]), ReportedError{Code: "503", Message: "do not retry this", Retryable: &no})
	if err != nil {
		t.Fatal(err)
	}
	if out.State != store.StateDead || out.DeadReason != store.DeadNonRetryable {
		t.Fatalf("retryable=false reported: got state %s (dead reason %q), want dead non_retryable", out.State, out.DeadReason)
	}
}
