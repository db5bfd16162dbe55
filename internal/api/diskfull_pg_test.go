package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store/postgres"
)

// TestPostgresDiskFullIsNotReady: on PostgreSQL, once an enqueue is
// refused with disk_full (53100, here from a trigger, as the server
// answers when a table cannot grow) and answered 503 storage_full,
// /readyz answers 503 not_ready saying the storage is full, until a write
// commits again. It answered 200: the store's readiness check only reads,
// and reads work on a full disk, so a load balancer kept sending enqueues
// to a node that refused them all.
func TestPostgresDiskFullIsNotReady(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: dbURL, AutoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	x, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close(context.Background())
	// The engine's own writes (heartbeats, the leader lease) are refused
	// too, as on a disk that is full for every table: one that committed
	// would end the outage.
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
		`CREATE TRIGGER disk_full_sim BEFORE INSERT OR UPDATE ON nodes FOR EACH ROW EXECUTE FUNCTION disk_full_sim()`,
		`CREATE TRIGGER disk_full_sim BEFORE INSERT OR UPDATE ON leader FOR EACH ROW EXECUTE FUNCTION disk_full_sim()`,
	} {
		if _, err := x.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	setFull := func(full bool) {
		t.Helper()
		if _, err := x.Exec(ctx, `UPDATE disk_full_switch SET is_full = $1`, full); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuffer
	e := newEnv(t, envOpts{store: st, log: slog.New(slog.NewTextHandler(&logs, nil))})
	e.enqueue(map[string]any{"type": "a"})
	e.must(http.StatusOK, "GET", "/readyz", nil)
	setFull(true)
	e.mustErr(http.StatusServiceUnavailable, CodeStorageFull, "", "POST", "/v1/tasks", map[string]any{"type": "a"})
	r := e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
	if !strings.Contains(r.errMsg(), "storage is full") {
		t.Errorf("/readyz message %q does not say the storage is full", r.errMsg())
	}
	setFull(false)
	e.enqueue(map[string]any{"type": "a"})
	e.must(http.StatusOK, "GET", "/readyz", nil)
	if out := logs.String(); !strings.Contains(out, "ready again") {
		t.Errorf("no 'ready again' line once a write committed:\n%s", out)
	}
}
