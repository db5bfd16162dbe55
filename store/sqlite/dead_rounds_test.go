package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/retryq/retryq/store"
)

// fillDead inserts n dead tasks, half of type a and half of type b, that
// died one µs apart from 1000 in the order they were inserted (of their
// rowids), not of their ids (n must not be a multiple of 7919).
func fillDead(t *testing.T, s *Store, n int) {
	t.Helper()
	if _, err := s.w.Exec(`WITH RECURSIVE x(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM x WHERE i < ?)
		INSERT INTO tasks (id, type, state, run_at, created_at, updated_at, last_error_code, dead_reason)
		SELECT printf('t%07d', (i * 7919) % ?), CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, 'dead', 1, 1, 1000 + i,
			'c', 'max_attempts' FROM x`, n, n); err != nil {
		t.Fatal(err)
	}
}

// writerPages returns how many pages the writer connection has read from
// its cache or the file since it opened.
func writerPages(t *testing.T, s *Store) int {
	t.Helper()
	return poolPages(t, s.w)
}

// poolPages returns how many pages a connection of db (one of a pool held
// at one connection) has read from its cache or the file since it opened.
func poolPages(t *testing.T, db *sql.DB) int {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pages := 0
	if err := c.Raw(func(dc any) error {
		for _, op := range []msqlite.DBStatusOp{msqlite.DBStatusCacheHit, msqlite.DBStatusCacheMiss} {
			n, _, err := dc.(msqlite.DBStatus).Status(op, false)
			if err != nil {
				return err
			}
			pages += n
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return pages
}

// TestDeadRoundWorkDoesNotGrowWithTheQueue: a round of a redrive or purge
// holds the single writer for the work of its own deadBatch tasks, not
// for a read of every matching dead task. Each round selected its tasks,
// oldest death first, inside its write transaction by reading every
// matching dead task through tasks_dead_id (or a filter's index) and
// sorting them: the writer, and every enqueue, fetch and outcome behind
// it, waited for that: a purge of 200,000 dead tasks took 400 rounds and
// 19 s (quadratic in the queue), now 4.8 s. The pages the
// writer connection reads for one round are counted, on a queue of 2,000
// tasks and on one of 20,000.
func TestDeadRoundWorkDoesNotGrowWithTheQueue(t *testing.T) {
	ctx := context.Background()
	filters := []store.DeadFilter{{}, {Type: "a"}, {Reason: store.DeadMaxAttempts}}
	for _, op := range []string{"redrive", "purge"} {
		for _, f := range filters {
			t.Run(fmt.Sprintf("%s type=%q reason=%q", op, f.Type, f.Reason), func(t *testing.T) {
				pages := map[int]int{}
				for _, n := range []int{2000, 20000} {
					s := openTemp(t)
					fillDead(t, s, n)
					f.Limit, f.Now = deadBatch, time.UnixMicro(1<<40)
					before := writerPages(t, s)
					var got int
					var err error
					if op == "redrive" {
						got, err = s.RedriveDead(ctx, f)
					} else {
						got, err = s.PurgeDead(ctx, f)
					}
					if err != nil || got != deadBatch {
						t.Fatalf("%s of %d dead tasks: %d, %v; want %d", op, n, got, err, deadBatch)
					}
					pages[n] = writerPages(t, s) - before
				}
				t.Logf("pages read on the writer: %d with 2,000 dead tasks, %d with 20,000", pages[2000], pages[20000])
				if pages[20000] > 2*pages[2000] {
					t.Errorf("a round of %d tasks read %d pages on the writer with 2,000 dead tasks, %d with 20,000: its work grows with the queue",
						deadBatch, pages[2000], pages[20000])
				}
			})
		}
	}
}

// TestDeadRoundsOfAFewTasksReadOnlyThem: a redrive or purge whose filter
// matches a few dead tasks among many reads their keys through the
// filter's own index, not by walking every dead task in death order (the
// walk is for calls of several rounds, whose tasks it reads once): a
// purge of the 10 dead tasks of a type among 20,000 read all 20,000 (and
// their rows); of 100 among 300,000, 25 times as long as the rounds of
// before 4e70bcb (400 ms, not 16). The pages the read pool (held at one
// connection) reads are counted, with 2,000 and with 20,000 dead tasks of
// other types.
func TestDeadRoundsOfAFewTasksReadOnlyThem(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		op    string
		limit int
	}{{"redrive", 1000}, {"purge", 0}} {
		op, limit := c.op, c.limit
		t.Run(fmt.Sprintf("%s limit=%d", op, limit), func(t *testing.T) {
			pages := map[int]int{}
			for _, n := range []int{2000, 20000} {
				s := openTemp(t)
				s.r.SetMaxOpenConns(1)
				fillDead(t, s, n) // types a and b
				// Ten tasks of c, spread over the queue.
				if _, err := s.w.Exec(`UPDATE tasks SET type = 'c' WHERE rowid % ? = 0`, n/10); err != nil {
					t.Fatal(err)
				}
				f := store.DeadFilter{Type: "c", Limit: limit, Now: time.UnixMicro(1 << 40)}
				before := poolPages(t, s.r)
				var got int
				var err error
				if op == "redrive" {
					got, err = s.RedriveDead(ctx, f)
				} else {
					got, err = s.PurgeDead(ctx, f)
				}
				if want := 10; err != nil || got != want {
					t.Fatalf("%s of the dead tasks of c among %d: %d, %v; want %d", op, n, got, err, want)
				}
				pages[n] = poolPages(t, s.r) - before
			}
			t.Logf("pages read on the read pool: %d with 2,000 dead tasks, %d with 20,000", pages[2000], pages[20000])
			if pages[20000] > 2*pages[2000] {
				t.Errorf("a call taking 10 tasks read %d pages on the read pool among 2,000 dead tasks, %d among 20,000: its work grows with the queue",
					pages[2000], pages[20000])
			}
		})
	}
}
