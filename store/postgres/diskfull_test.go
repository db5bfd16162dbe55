package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// refuseForFullDisk makes the server answer every insert and update of a
// task with disk_full (53100), as it does when the tasks table cannot grow,
// while full returns true; the switch is a row of a table of the test's
// own, which the server's trigger reads.
func refuseForFullDisk(t *testing.T, x *pgx.Conn) (setFull func(bool)) {
	t.Helper()
	for _, sql := range []string{
		`CREATE TABLE disk_full_switch (is_full boolean NOT NULL)`,
		`INSERT INTO disk_full_switch VALUES (false)`,
		`CREATE FUNCTION disk_full_sim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT is_full FROM disk_full_switch) THEN
		RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full';
	END IF;
	RETURN NEW;
END $$`,
		`CREATE TRIGGER disk_full_sim BEFORE INSERT OR UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION disk_full_sim()`,
	} {
		if _, err := x.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return func(full bool) {
		t.Helper()
		if _, err := x.Exec(t.Context(), `UPDATE disk_full_switch SET is_full = $1`, full); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPingFailsWhileTheLastWriteFoundTheDiskFull: a write the server
// refuses with disk_full marks the store full until a write commits again:
// Ping, which backs /readyz, fails meanwhile with ErrUnavailable and
// ErrDiskFull. Ping only reads, and reads work on a full disk: it said
// ready while every enqueue failed with 503 storage_full. The mark comes
// from the inserts (grouped or keyed) and the fetches' updates, and goes
// with the next insert that commits, or with Ping's own try of one (an
// insert it rolls back). A write to another table that still has room
// (the node heartbeat, every few seconds) does not end it: it did, and a
// node whose tasks table could not grow flipped back to ready at every
// heartbeat.
func TestPingFailsWhileTheLastWriteFoundTheDiskFull(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	x := connect(t, dbURL)
	s := openURL(t, dbURL, nil)
	ctx := t.Context()
	setFull := refuseForFullDisk(t, x)
	now := time.Now()
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("before", 2), Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping before the disk is full: %v", err)
	}
	pingFull := func(after string) {
		t.Helper()
		for range 2 { // and again: Ping's own reads do not clear it
			err := s.Ping(ctx)
			if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, store.ErrDiskFull) {
				t.Fatalf("Ping after %s: %v, want ErrUnavailable and ErrDiskFull", after, err)
			}
		}
	}
	pingOK := func(after string) {
		t.Helper()
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping after %s: %v", after, err)
		}
	}
	heartbeat := func() {
		t.Helper()
		if err := s.HeartbeatNode(ctx, store.Node{ID: "n1", Role: "standby"}, time.Now()); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	}

	setFull(true)
	_, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("grouped", 1), Now: now})
	if !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("insert on a full disk: %v, want ErrDiskFull", err)
	}
	pingFull("an insert refused for a full disk")
	if _, err := s.GetTask(ctx, "before000000"); err != nil {
		t.Fatalf("read on a full disk: %v", err)
	}
	pingFull("a read")
	heartbeat()
	pingFull("a heartbeat committed while the tasks table cannot grow")
	setFull(false)
	pingOK("the tasks table has room again (Ping's own insert)")
	setFull(true)

	keyed := newTasks("keyed", 1)
	keyed[0].IdempotencyKey = "k1"
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: keyed, Now: now}); !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("keyed insert on a full disk: %v, want ErrDiskFull", err)
	}
	pingFull("a keyed insert refused for a full disk")
	setFull(false)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("after", 1), Now: now}); err != nil {
		t.Fatalf("insert once the disk has room: %v", err)
	}
	pingOK("an insert committed")

	setFull(true)
	_, err = s.FetchTasks(ctx, store.FetchParams{Limit: 1, WorkerID: "w", LeaseDuration: time.Minute, Now: now})
	if !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("fetch on a full disk: %v, want ErrDiskFull", err)
	}
	pingFull("a fetch refused for a full disk")
	heartbeat()
	pingFull("a heartbeat committed while the tasks table cannot grow")
	setFull(false)
	pingOK("the tasks table has room again (Ping's own insert)")
	var n int
	if err := x.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE id = $1`, pingProbeID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("Ping's probe left %d rows (%v)", n, err)
	}
}

// TestDuplicateOnlyInsertLeavesTheDiskFullMark: a keyed insert that only
// found its keys taken inserted no row, so it says nothing of the room in
// the tasks table and leaves the full-disk mark (store/sqlite leaves
// duplicates out too); one that inserted a row ends it. The first ended
// it: Ping, and /readyz, said ready again with the disk still full.
func TestDuplicateOnlyInsertLeavesTheDiskFullMark(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	x := connect(t, dbURL)
	s := openURL(t, dbURL, nil)
	ctx := t.Context()
	setFull := refuseForFullDisk(t, x)
	now := time.Now()
	keyed := func(prefix string, keys ...string) []store.NewTask {
		ts := newTasks(prefix, len(keys))
		for i, k := range keys {
			ts[i].IdempotencyKey = k
		}
		return ts
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: keyed("first", "d1", "d2"), Now: now}); err != nil {
		t.Fatal(err)
	}
	setFull(true)
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("refused", 1), Now: now}); !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("insert on a full disk: %v, want ErrDiskFull", err)
	}
	// The server's trigger fires before the key's conflict is found, so
	// the duplicates go in while it lets inserts through; Ping is asked
	// once it refuses them again, so its own insert fails.
	setFull(false)
	res, err := s.InsertTasks(ctx, store.InsertParams{Tasks: keyed("again", "d1", "d2"), Now: now})
	if err != nil || len(res) != 2 || !res[0].Duplicate || !res[1].Duplicate {
		t.Fatalf("insert of taken keys: %+v, %v, want two duplicates", res, err)
	}
	setFull(true)
	if err := s.Ping(ctx); !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("Ping after an insert that only found its keys taken: %v, want ErrDiskFull", err)
	}
	setFull(false)
	res, err = s.InsertTasks(ctx, store.InsertParams{Tasks: keyed("mixed", "d1", "n1"), Now: now})
	if err != nil || len(res) != 2 || !res[0].Duplicate || res[1].Duplicate {
		t.Fatalf("insert of a taken and a new key: %+v, %v", res, err)
	}
	setFull(true) // Ping only reads once the mark is gone
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after an insert that inserted a row: %v", err)
	}
}
