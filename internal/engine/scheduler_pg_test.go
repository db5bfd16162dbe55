package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// TestRetryRecordedOnAnotherNodeStartsOnTime: on PostgreSQL the scheduler
// runs on one elected node, while attempts usually fail on the others. A
// retry recorded on a node that does not lead must still start when it is
// due, not when the leader next polls: the leader is told of the new due
// time as it is of a new scheduled task. Before, a delayed retry sent no
// notification, so with a 100 ms delay the second attempt waited for the
// leader's poll interval (here 4 s).
func TestRetryRecordedOnAnotherNodeStartsOnTime(t *testing.T) {
	const (
		poll  = 4 * time.Second
		delay = 100 * time.Millisecond
		// bound on the second attempt's lateness: far below poll, far
		// above a notification's round trip on a loaded machine.
		lateness = 1500 * time.Millisecond
	)
	url := pgtest.URL(t)
	stA, stB := openPG(t, url), openPG(t, url)
	leader := startWorkerEngine(t, stA, Config{NodeID: "leader", PollInterval: poll})
	waitFor(t, "the leader node to lead", leader.IsLeader)
	node := startWorkerEngine(t, stB, Config{NodeID: "worker-node", PollInterval: poll, NoScheduler: true})
	if _, err := node.PutType(context.Background(), TypeSpec{Type: "flaky", Policy: retry.Policy{
		Backoff: retry.BackoffFixed, InitialDelay: delay, Jitter: retry.JitterNone, MaxAttempts: 3,
	}}); err != nil {
		t.Fatal(err)
	}
	var failedAt atomic.Int64 // unix nanoseconds of the first attempt's failure
	second := make(chan time.Time, 1)
	runWorker(t, node, WorkerConfig{Types: []string{"flaky"}, Concurrency: 1, Handle: func(ctx context.Context, task *store.Task) error {
		if task.Attempt == 1 {
			failedAt.Store(time.Now().UnixNano())
			return retry.Transient(errors.New("downstream hiccup"))
		}
		select {
		case second <- time.Now():
		default:
		}
		return nil
	}})
	id := mustEnqueue(t, node, "flaky", `{}`)
	started := recvWithin(t, second, 2*poll, "the second attempt")
	late := started.Sub(time.Unix(0, failedAt.Load())) - delay
	if late > lateness {
		t.Fatalf("second attempt started %v after its due time; want within %v (leader poll interval %v)", late, lateness, poll)
	}
	waitTask(t, node, id, "the task to succeed", func(tk store.Task) bool { return tk.State == store.StateSucceeded })
}
