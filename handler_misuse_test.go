package retryq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/store"
)

// TestJoinedPermanentErrorIsPermanent: a Permanent error joined with a
// retryable one (errors.Join, or fmt.Errorf with several %w) dead-letters
// the task at once, whichever comes first: a retry cannot fix the
// permanent part. It was retried when the retryable error came first.
func TestJoinedPermanentErrorIsPermanent(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{DefaultPolicy: fastPolicy(5)})
	bad, slow := errors.New("invalid input"), errors.New("slow down")
	handlers := map[string]error{
		"permanent-first": errors.Join(retryq.Permanent(bad), retryq.RetryAfter(slow, time.Millisecond)),
		"retryable-first": errors.Join(retryq.RetryAfter(slow, time.Millisecond), retryq.Permanent(bad)),
		"transient-first": errors.Join(retryq.Transient(slow), retryq.WithCode("bad_input", retryq.Permanent(bad))),
		"wrapped-join":    retryq.WithCode("batch", errors.Join(retryq.Transient(slow), retryq.Permanent(bad))),
	}
	for typ, err := range handlers {
		e.mux.HandleFunc(typ, func(context.Context, *retryq.Task) error { return err })
	}
	e.startWorker(retryq.WorkerConfig{})
	for typ := range handlers {
		res, err := e.client.Enqueue(context.Background(), typ, nil)
		if err != nil {
			t.Fatal(err)
		}
		ti := e.waitState(res.Task.ID, 10*time.Second, store.StateDead)
		if ti.Attempt != 1 || ti.DeadReason != store.DeadNonRetryable || ti.LastError == nil || ti.LastError.Class != "permanent" {
			t.Errorf("%s: dead after %d attempts, reason %q, last error %+v; want non_retryable after 1, class permanent",
				typ, ti.Attempt, ti.DeadReason, ti.LastError)
		}
	}
}
