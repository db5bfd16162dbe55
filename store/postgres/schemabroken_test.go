package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store/storetest"
)

// TestSchemaBrokenWhenATableIsDroppedOrRenamed: a table or column renamed
// or dropped under the store by another session (SQLSTATE 42P01, 42703)
// is ErrSchemaBroken and ErrUnavailable, and Ping fails with it. Before,
// the errors matched no sentinel (the API answered 500) and Ping said
// ready.
func TestSchemaBrokenWhenATableIsDroppedOrRenamed(t *testing.T) {
	ctx := t.Context()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	storetest.CheckSchemaBroken(ctx, t, s, func(q string) error {
		_, err := other.Exec(ctx, q)
		return err
	})
}

// TestPingDoesNotWaitForATableLock: Ping's check that every table exists
// takes no lock on them, so a session holding one exclusively (a
// migration, VACUUM FULL) does not stall /readyz.
func TestPingDoesNotWaitForATableLock(t *testing.T) {
	ctx := t.Context()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE tasks, attempts IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.Ping(pctx); err != nil {
		t.Fatalf("Ping while another session locks the tables: %v", err)
	}
}
