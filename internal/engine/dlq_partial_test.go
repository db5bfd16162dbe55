package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/retryq/retryq/store"
)

// errLaterRound is the failure of a later round of a bulk DLQ change.
var errLaterRound = errors.New("connection lost in a later round")

// failAfterDeadChange is a store whose RedriveDead and PurgeDead do their
// work and then fail, as the PostgreSQL store's do when a round after the
// first one fails: the tasks of the committed rounds have moved, and the
// store reports how many along with the error.
type failAfterDeadChange struct {
	store.Store
}

func (s failAfterDeadChange) RedriveDead(ctx context.Context, f store.DeadFilter) (int, error) {
	n, err := s.Store.RedriveDead(ctx, f)
	if err != nil {
		return n, err
	}
	return n, errLaterRound
}

func (s failAfterDeadChange) PurgeDead(ctx context.Context, f store.DeadFilter) (int, error) {
	n, err := s.Store.PurgeDead(ctx, f)
	if err != nil {
		return n, err
	}
	return n, errLaterRound
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestDeadChangeCutShortReportsWhatMoved: a redrive or purge that fails
// after the store has moved or deleted tasks returns how many with the
// error, and logs them: those tasks are not left unreported, as if the
// call had changed nothing.
func TestDeadChangeCutShortReportsWhatMoved(t *testing.T) {
	inner := openWorkerStoreOn(t, "sqlite")
	var logs syncBuffer
	e := startWorkerEngine(t, failAfterDeadChange{inner}, Config{NoScheduler: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	deadTask(t, inner, "cut-1", "dlq.cut", "E1")
	deadTask(t, inner, "cut-2", "dlq.cut", "E1")
	deadTask(t, inner, "cut-3", "dlq.cut", "E2")

	n, err := e.Redrive(ctx, store.DeadFilter{ErrorCode: "E1"})
	if !errors.Is(err, errLaterRound) || n != 2 {
		t.Errorf("Redrive cut short = %d, %v; want 2 and the error", n, err)
	}
	n, err = e.Purge(ctx, store.DeadFilter{ErrorCode: "E2"})
	if !errors.Is(err, errLaterRound) || n != 1 {
		t.Errorf("Purge cut short = %d, %v; want 1 and the error", n, err)
	}
	out := logs.String()
	for _, want := range []string{`msg="dead tasks redriven" count=2`, `msg="dead tasks purged" count=1`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
