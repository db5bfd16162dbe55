package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// groupOf runs fns as one group: a blocking write holds the writer while
// they queue, then they commit together. It returns each write's answer.
func groupOf(t *testing.T, s *Store, fns ...func(ctx context.Context, tx *sql.Tx) error) []error {
	t.Helper()
	release, blocked := blockWriter(s)
	answers := make([]chan error, len(fns))
	for i, fn := range fns {
		answers[i] = make(chan error, 1)
		go func() { answers[i] <- s.write(context.Background(), "group write", fn) }()
		waitQueued(t, s, i+1) // in this order
	}
	close(release)
	timeout := time.After(30 * time.Second)
	errs := make([]error, len(fns))
	for i, ch := range append([]chan error{blocked}, answers...) {
		select {
		case err := <-ch:
			if i == 0 {
				if err != nil {
					t.Fatalf("blocking write: %v", err)
				}
				continue
			}
			errs[i-1] = err
		case <-timeout:
			t.Fatalf("write %d of the group was never answered", i)
		}
	}
	return errs
}

// blockWriter runs a write that holds the writer until release is
// closed, and returns once it runs: writes queued meanwhile form the
// writer's next group. blocked answers the blocking write.
func blockWriter(s *Store) (release chan struct{}, blocked chan error) {
	release, started := make(chan struct{}), make(chan struct{})
	blocked = make(chan error, 1)
	go func() {
		blocked <- s.write(context.Background(), "block", func(context.Context, *sql.Tx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	return release, blocked
}

// insertType returns a write inserting the task type name.
func insertType(name string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO task_types (type, updated_at) VALUES (?, 0)`, name)
		return err
	}
}

// typeExists reports whether the task type name was committed.
func typeExists(t *testing.T, s *Store, name string) bool {
	t.Helper()
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM task_types WHERE type = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestPanickingWriteFailsAlone: a write whose function panics in a group
// fails with an error, its changes rolled back; the writes beside it
// commit, and the store keeps working. The panic used to end the writer
// goroutine, and with it the process.
func TestPanickingWriteFailsAlone(t *testing.T) {
	s := openTemp(t)
	panicking := func(ctx context.Context, tx *sql.Tx) error {
		if err := insertType("p")(ctx, tx); err != nil {
			return err
		}
		panic("boom")
	}
	errs := groupOf(t, s, insertType("a"), panicking, insertType("b"))
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("writes beside the panicking one: %v, %v; want both committed", errs[0], errs[2])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "boom") {
		t.Fatalf("panicking write = %v, want an error naming the panic", errs[1])
	}
	if !typeExists(t, s, "a") || !typeExists(t, s, "b") || typeExists(t, s, "p") {
		t.Fatalf("committed a=%v b=%v p=%v; want a and b, not p", typeExists(t, s, "a"), typeExists(t, s, "b"), typeExists(t, s, "p"))
	}
	// Alone (no savepoint), too.
	if err := s.write(t.Context(), "alone", panicking); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panicking write alone = %v, want an error naming the panic", err)
	}
	if typeExists(t, s, "p") {
		t.Fatal("the lone panicking write committed its change")
	}
	if err := s.write(t.Context(), "after", insertType("c")); err != nil || !typeExists(t, s, "c") {
		t.Fatalf("write after the panics: %v", err)
	}
}

// TestWriteThatEndsTheTransactionFailsTheOthersAsUnavailable: when a
// write's statement fails so that SQLite rolls back the whole transaction
// (it may on SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY, SQLITE_NOMEM), that
// write keeps its own error, and the other writes of its group, whose work
// went with the transaction, fail with store.ErrUnavailable (retry the
// call). All of them used to get the savepoint's "no such savepoint"
// error, which callers take for a bug of their own (HTTP 500, no retry).
func TestWriteThatEndsTheTransactionFailsTheOthersAsUnavailable(t *testing.T) {
	s := openTemp(t)
	own := errors.New("the write's own error")
	ending := func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `ROLLBACK`); err != nil { // as SQLite does on some errors
			return err
		}
		return own
	}
	errs := groupOf(t, s, insertType("a"), ending, insertType("b"))
	if !errors.Is(errs[1], own) {
		t.Errorf("the write that ended the transaction = %v, want its own error", errs[1])
	}
	for _, i := range []int{0, 2} {
		if !errors.Is(errs[i], store.ErrUnavailable) {
			t.Errorf("write %d beside it = %v, want ErrUnavailable", i, errs[i])
		}
	}
	if typeExists(t, s, "a") || typeExists(t, s, "b") {
		t.Fatal("a write of the rolled-back transaction was committed")
	}
	if err := s.write(t.Context(), "after", insertType("c")); err != nil || !typeExists(t, s, "c") {
		t.Fatalf("write after the rolled-back group: %v", err)
	}
}
