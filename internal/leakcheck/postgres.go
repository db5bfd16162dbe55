package leakcheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Backends returns how many sessions other than its own are connected to
// the database url names (pg_stat_activity), with the application name of
// each. It connects for the count and closes its connection.
func Backends(ctx context.Context, url string) (int, []string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, nil, fmt.Errorf("count backends: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `SELECT application_name || ' ' || coalesce(state, '') || ' ' || left(query, 60)
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return 0, nil, fmt.Errorf("count backends: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, nil, fmt.Errorf("count backends: %w", err)
	}
	return len(names), names, nil
}

// BackendsSettled waits up to within for the database url names to have
// at most want sessions besides the one counting (Backends), and fails t
// otherwise, naming them. what names the cycles run.
func BackendsSettled(t testing.TB, url string, want int, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, names, err := Backends(ctx, url)
		cancel()
		if err == nil && n <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d database sessions (want at most %d), err %v: %q", what, n, want, err, names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
