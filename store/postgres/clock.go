package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/retryq/retryq/store"
)

var _ store.DatabaseClock = (*Store)(nil)

// DatabaseNow implements store.DatabaseClock: the server's clock_timestamp()
// (the time when the statement runs, not when its transaction began), in
// UTC with microsecond precision.
func (s *Store) DatabaseNow(ctx context.Context) (time.Time, error) {
	const op = "read database time"
	if err := store.CheckContext(ctx); err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return time.Time{}, err
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		return time.Time{}, translate(op, err)
	}
	return now.UTC(), nil
}
