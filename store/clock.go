package store

import (
	"context"
	"time"
)

// DatabaseClock is implemented by backends whose database runs on a server
// that every node shares (PostgreSQL). DatabaseNow returns the database
// server's current time, read in one round trip.
//
// The engine uses it for the leadership lease: it passes the database's time
// as LeaderParams.Now instead of its own clock, so that the lease's expiry
// and every node's check of it are on one timeline and a node whose wall
// clock is off cannot take the lease early (see docs/architecture.md). It
// also measures the offset between its own clock and this one, and corrects
// the Now of every other call by it, so that due times and lease expiries
// written by one node are judged right by another. The Store contract itself keeps the caller-supplied Now, so conformance tests
// stay deterministic. A backend in one process (SQLite) has no other clock
// to agree with and does not implement it.
type DatabaseClock interface {
	// DatabaseNow returns the database server's current time. Errors are
	// translated like those of the Store methods (ErrUnavailable when the
	// database cannot be reached, ErrClosed after Close).
	DatabaseNow(ctx context.Context) (time.Time, error)
}
