package retryq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq"
)

// TestHandlerContextCausesCanBeMatched: the reasons a handler's context
// ends, which the Handler doc lists, are exported, so a handler can tell
// them apart with errors.Is on context.Cause: its attempt's timeout, the
// task's cancellation (also a lost lease), and its worker's stop past the
// shutdown grace. They used to be unexported, and the stop's cause was a
// bare context.Canceled.
func TestHandlerContextCausesCanBeMatched(t *testing.T) {
	e := newEnvOn(t, openStore(t, ""), retryq.Options{})
	ctx := context.Background()
	if err := e.client.SetType(ctx, retryq.TypeConfig{Type: "slow", Policy: fastPolicy(1), Timeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 4)
	causes := make(chan error, 4)
	wait := func(ctx context.Context, tk *retryq.Task) error {
		started <- tk.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}
	e.mux.HandleFunc("slow", wait)
	e.mux.HandleFunc("cancel", wait)
	e.mux.HandleFunc("stop", wait)
	recv := func(what string) error {
		t.Helper()
		select {
		case c := <-causes:
			return c
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
			return nil
		}
	}
	started1 := func(what string) string {
		t.Helper()
		select {
		case id := <-started:
			return id
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %s to start", what)
			return ""
		}
	}
	e.startWorker(retryq.WorkerConfig{Concurrency: 2, ShutdownGrace: 100 * time.Millisecond})

	if _, err := e.client.Enqueue(ctx, "slow", nil); err != nil {
		t.Fatal(err)
	}
	started1("the slow task")
	if c := recv("the timeout's cause"); !errors.Is(c, retryq.ErrAttemptTimeout) {
		t.Errorf("cause after the type's timeout: %v, want ErrAttemptTimeout", c)
	}

	res, err := e.client.Enqueue(ctx, "cancel", nil)
	if err != nil {
		t.Fatal(err)
	}
	started1("the task to cancel")
	if _, err := e.client.Cancel(ctx, res.Task.ID); err != nil {
		t.Fatal(err)
	}
	if c := recv("the cancellation's cause"); !errors.Is(c, retryq.ErrTaskCancelled) || !errors.Is(c, retryq.ErrLeaseLost) {
		t.Errorf("cause after Cancel: %v, want ErrTaskCancelled and ErrLeaseLost", c)
	}

	if _, err := e.client.Enqueue(ctx, "stop", nil); err != nil {
		t.Fatal(err)
	}
	started1("the task running at the worker's stop")
	e.cancel() // stops the worker; the handler outlives the grace
	e.cancel = nil
	if c := recv("the stop's cause"); !errors.Is(c, retryq.ErrWorkerStopped) {
		t.Errorf("cause after the worker stopped: %v, want ErrWorkerStopped", c)
	}
}
