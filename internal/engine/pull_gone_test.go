package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// fetchCommittedThenCancelled is a store whose FetchTasks commits, then
// sees its caller's request cancelled and answers with the cancellation,
// as a PostgreSQL driver does when the cancel arrives while the commit's
// answer is on its way back: the tasks are leased under lease ids nobody
// was told. Once its caller's context is cancelled, a fetch is cut that
// way; a fetch under a context that cannot be cancelled is answered.
type fetchCommittedThenCancelled struct {
	store.Store
	cancel context.CancelFunc
}

func (s *fetchCommittedThenCancelled) FetchTasks(ctx context.Context, p store.FetchParams) ([]store.Task, error) {
	ts, err := s.Store.FetchTasks(context.WithoutCancel(ctx), p)
	if err != nil || len(ts) == 0 {
		return ts, err
	}
	s.cancel()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fetch tasks: %w", err)
	}
	return ts, nil
}

// TestLeaseFetchOutlivesTheCaller: a pull request whose client hangs up
// while the fetch commits must not leave the tasks the fetch leased under
// leases nobody holds: the fetch is not cut by the caller's context (as an
// in-process worker's is not), and what it leased is released at once,
// attempt not counted. The fetch ran under the request's context: cut
// after its commit, it left the task running under an hour's lease.
func TestLeaseFetchOutlivesTheCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &fetchCommittedThenCancelled{Store: openWorkerStoreOn(t, "sqlite"), cancel: cancel}
	e := startWorkerEngine(t, st, Config{NoScheduler: true})
	id := mustEnqueue(t, e, "pull.cut", `1`)
	ts, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"pull.cut"}, Max: 1, LeaseDuration: time.Hour})
	if err == nil || len(ts) != 0 {
		t.Fatalf("Lease for a gone caller = %d tasks, %v; want none and an error", len(ts), err)
	}
	tk := waitTask(t, e, id, "the task leased as the caller left to be released", func(tk store.Task) bool {
		return tk.State == store.StatePending
	})
	if tk.Attempt != 0 || tk.LeaseID != "" {
		t.Fatalf("released task: attempt %d, lease %q; want attempt 0 and no lease", tk.Attempt, tk.LeaseID)
	}
}
