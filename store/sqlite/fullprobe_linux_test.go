//go:build linux

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// TestSmallWritesDoNotEndADiskFull: on a full disk, small writes that
// change rows in pages the WAL has room for (the node heartbeat, every
// 5 s; an outcome; a lease extension) commit while enqueues are refused
// for space. They must not make Ping (/readyz) say ready while an enqueue
// would still fail: they did, so a full node flipped back to ready at
// every heartbeat. Ping says ready again once an enqueue-sized write can
// commit, which it tries itself while the mark is set: behind a load
// balancer that sends no enqueue to a node that is not ready, no enqueue
// would come to clear it.
func TestSmallWritesDoNotEndADiskFull(t *testing.T) {
	dir := mountSmallTmpfs(t, 4<<20)
	ctx := t.Context()
	s := openFile(t, filepath.Join(dir, "q.db"))
	heartbeat := func() error { return s.HeartbeatNode(ctx, store.Node{ID: "n1", Role: "leader"}, time.Now()) }
	if err := heartbeat(); err != nil {
		t.Fatal(err)
	}
	insert := func(id string, size int) error {
		_, err := s.InsertTasks(ctx, store.InsertParams{Now: time.Now(), Tasks: []store.NewTask{
			{ID: id, Type: "t", MaxAttempts: 3, Payload: []byte(`{"pad":"` + strings.Repeat("x", size) + `"}`)}}})
		return err
	}
	// A WAL that keeps its size once checkpointed: room for small writes.
	for i := range 30 {
		if err := insert(fmt.Sprintf("w_%03d", i), 3000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(RESTART)"); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for range 2048 { // at most 8 MiB: the file system holds 4
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	var werr error
	for i := 0; i < 200 && werr == nil; i++ {
		werr = insert(fmt.Sprintf("t_%03d", i), 8000)
	}
	if !errors.Is(werr, ErrDiskFull) {
		t.Fatalf("inserts on a full disk ended with %v, want ErrDiskFull", werr)
	}
	heartbeats := 0
	for i := range 5 {
		hb := heartbeat()
		if hb == nil {
			heartbeats++
		}
		pingErr := s.Ping(ctx)
		insErr := insert(fmt.Sprintf("kb_%d", i), 1000)
		t.Logf("heartbeat: %v; Ping: %v; insert of 1 KB: %v", hb, pingErr, insErr)
		if pingErr == nil && insErr != nil {
			t.Errorf("Ping said ready (after a heartbeat: %v) while an enqueue of 1 KB fails: %v", hb, insErr)
		}
		if pingErr != nil && !errors.Is(pingErr, ErrDiskFull) {
			t.Errorf("Ping on a full disk = %v, want ErrDiskFull", pingErr)
		}
	}
	if heartbeats == 0 {
		t.Log("no heartbeat committed on the full disk: the case was not met")
	}
	// Space freed: Ping's own try commits and readiness is back, before
	// any enqueue.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping once space is freed: %v", err)
	}
	if err := insert("after", 8000); err != nil {
		t.Fatalf("insert once space is freed: %v", err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE id = ?`, pingProbeID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("Ping's probe left %d rows (%v)", n, err)
	}
}
