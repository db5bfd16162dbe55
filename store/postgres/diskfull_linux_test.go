//go:build linux

package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestDiskFullOnATablespace: the tasks table on a tablespace whose file
// system fills up (a tmpfs of 1 MiB) makes PostgreSQL refuse inserts with
// disk_full (53100). The store answers them with ErrUnavailable and
// ErrDiskFull, the tasks committed before stay readable, Ping (/readyz)
// fails with ErrDiskFull while its own try of an insert of 1 KiB fails too
// (it passed, as it only reads), and inserts work again once the file
// system has room. It needs
// root (to mount the tmpfs)
// and a local server (the tablespace is a directory of this machine).
func TestDiskFullOnATablespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs for a tablespace needs root")
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		t.Skip("the tablespace must be on this machine: not with " + pgtest.EnvURL)
	}
	pg, err := user.Lookup("postgres") // the user pgtest runs the server as under root
	if err != nil {
		t.Skipf("no postgres user to give the tablespace to: %v", err)
	}
	// Not t.TempDir: its parent is open to root only.
	dir, err := os.MkdirTemp("", "retryq-tablespace-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	loc := filepath.Join(dir, "ts")
	if err := os.Mkdir(loc, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", loc, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(loc, 0); err != nil {
			t.Errorf("unmount %s: %v", loc, err)
		}
	})
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	if err := os.Chown(loc, uid, gid); err != nil {
		t.Fatal(err)
	}

	dbURL := pgtest.URL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	admin := *u
	admin.Path = "/postgres"
	x := connect(t, admin.String())
	ts := "retryq_full_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := x.Exec(t.Context(), "CREATE TABLESPACE "+ts+" LOCATION '"+loc+"'"); err != nil {
		t.Skipf("cannot create a tablespace on the tmpfs: %v", err)
	}
	// Runs before the unmount and pgtest's own drop of the database: the
	// tablespace can only go once no table is in it.
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := x.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database: %v", err)
		}
		if _, err := x.Exec(ctx, "DROP TABLESPACE "+ts); err != nil {
			t.Errorf("drop tablespace: %v", err)
		}
	})

	s, err := Open(t.Context(), Config{URL: dbURL, AutoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, err := s.Pool().Exec(ctx, "ALTER TABLE tasks SET TABLESPACE "+ts); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var before []string
	for i := range 5 {
		id := fmt.Sprintf("before_%d", i)
		if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now,
			Tasks: []store.NewTask{{ID: id, Type: "t", MaxAttempts: 3, Payload: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
		before = append(before, id)
	}
	// Payloads that do not compress (TOAST would shrink repeated bytes).
	pad := make([]byte, 0, 64<<10)
	for i := 0; len(pad) < cap(pad)-16; i++ {
		pad = strconv.AppendUint(pad, uint64(i)*2654435761%1000003, 36)
	}
	payload := []byte(`{"pad":"` + string(pad) + `"}`)
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = s.InsertTasks(ctx, store.InsertParams{Now: now,
			Tasks: []store.NewTask{{ID: fmt.Sprintf("t_%03d", i), Type: "t", MaxAttempts: 3, Payload: payload}}})
	}
	if werr == nil {
		t.Fatal("100 inserts of 64 KiB fitted on a tablespace of 1 MiB")
	}
	t.Logf("insert on a full tablespace: %v", werr)
	if !errors.Is(werr, store.ErrUnavailable) || !errors.Is(werr, store.ErrDiskFull) {
		t.Fatalf("insert on a full tablespace = %v, want ErrUnavailable and ErrDiskFull", werr)
	}
	for _, id := range before {
		if _, err := s.GetTask(ctx, id); err != nil {
			t.Errorf("task %s committed before the disk filled: %v", id, err)
		}
	}
	// Ping tries an insert of a task of a typical size (1 KiB): while the
	// table's pages have room for such a row, it may say ready (such an
	// enqueue works); once they are full too, it fails.
	small := []byte(`{"pad":"` + string(pad[:1000]) + `"}`)
	var serr error
	for i := 0; i < 1000 && serr == nil; i++ {
		_, serr = s.InsertTasks(ctx, store.InsertParams{Now: now,
			Tasks: []store.NewTask{{ID: fmt.Sprintf("small_%03d", i), Type: "t", MaxAttempts: 3, Payload: small}}})
	}
	if !errors.Is(serr, store.ErrDiskFull) {
		t.Fatalf("inserts of 1 KiB on a full tablespace ended with %v, want ErrDiskFull", serr)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Ping after an insert refused for a full tablespace: %v, want ErrUnavailable and ErrDiskFull", err)
	}
	if err := syscall.Mount("tmpfs", loc, "tmpfs", syscall.MS_REMOUNT, "size=64m,mode=0700"); err != nil {
		t.Fatalf("grow the tmpfs: %v", err)
	}
	if _, err := s.InsertTasks(ctx, store.InsertParams{Now: now,
		Tasks: []store.NewTask{{ID: "after", Type: "t", MaxAttempts: 3, Payload: payload}}}); err != nil {
		t.Fatalf("insert once the tablespace has room: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after an insert committed on the grown tablespace: %v", err)
	}
}
