package postgres

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/retryq/retryq/internal/pgtest"
)

// lockModes are PostgreSQL's table lock modes, weakest first.
var lockModes = []string{"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock",
	"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"}

// sqlComment matches a "--" comment to the end of its line (no migration
// has "--" inside a string).
var sqlComment = regexp.MustCompile(`--[^\n]*`)

// TestMigrationLocks pins the table locks each migration takes on tasks
// and attempts, statement by statement, which docs/operations.md
// ("Upgrades") tells operators about: a lock is held until the migration
// transaction commits, so the strongest one taken by a statement lasts
// through every later statement (and every later migration applied in the
// same run). ShareLock (an index build) makes writes wait; AccessExclusive
// makes reads wait too. A migration added or changed here must say in the
// docs what it locks, and for how long.
func TestMigrationLocks(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"0002_attempts_without_fk.sql":      {"tasks AccessExclusiveLock, attempts AccessExclusiveLock"},
		"0003_success_in_task_row.sql":      {"tasks AccessExclusiveLock", "tasks AccessExclusiveLock, attempts AccessShareLock", "tasks AccessExclusiveLock, attempts RowExclusiveLock"},
		"0004_attempts_lighter_indexes.sql": {"attempts AccessExclusiveLock", "attempts AccessExclusiveLock", "attempts AccessExclusiveLock"},
		"0005_retention_totals.sql":         {""},
		"0006_dead_filter_indexes.sql":      slices.Repeat([]string{"tasks AccessExclusiveLock"}, 5),
		"0007_pending_by_type.sql":          {"tasks ShareLock", "tasks AccessExclusiveLock"},
	}
	s := atVersion(t, pgtest.URL(t), 1, nil)
	ctx := t.Context()
	for _, m := range migrations[1:] {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for stmt := range strings.SplitSeq(sqlComment.ReplaceAllString(m.sql, ""), ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: %s: %v", m.name, stmt, err)
			}
			var held []string
			for _, table := range []string{"tasks", "attempts"} {
				var modes []string
				if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(mode), '{}') FROM pg_locks
					WHERE pid = pg_backend_pid() AND relation = to_regclass($1)`, table).Scan(&modes); err != nil {
					t.Fatal(err)
				}
				strongest := -1
				for _, mode := range modes {
					strongest = max(strongest, slices.Index(lockModes, mode))
				}
				if strongest >= 0 {
					held = append(held, fmt.Sprintf("%s %s", table, lockModes[strongest]))
				}
			}
			got = append(got, strings.Join(held, ", "))
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if w, ok := want[m.name]; !ok || !slices.Equal(got, w) {
			t.Errorf("%s holds, after each statement:\n%q\nwant\n%q", m.name, got, w)
		}
	}
}
