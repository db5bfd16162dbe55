package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

func TestWarmConns(t *testing.T) {
	for _, tc := range []struct {
		min, max int32
		want     int
	}{
		{0, 10, DefaultWarmConns},
		{0, 3, 3},
		{12, 20, 12},
		{2, 20, DefaultWarmConns},
	} {
		if got := warmConns(Config{MinConns: tc.min, MaxConns: tc.max}); got != tc.want {
			t.Errorf("MinConns %d, MaxConns %d: warm %d, want %d", tc.min, tc.max, got, tc.want)
		}
	}
}

// TestOpenWarmsConnections checks that Open leaves warmed connections in
// the pool, each with the hot statements prepared (none behind a
// transaction-mode pooler, which cannot keep them).
func TestOpenWarmsConnections(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	for _, tc := range []struct {
		name     string
		mod      func(*Config)
		conns    int
		prepared bool
	}{
		{"default", nil, DefaultWarmConns, true},
		{"MinConns", func(c *Config) { c.MinConns, c.MaxConns = 11, 12 }, 11, true},
		{"PollOnly", func(c *Config) { c.PollOnly = true }, DefaultWarmConns, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openURL(t, url, tc.mod)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conns := s.Pool().AcquireAllIdle(ctx)
			defer func() {
				for _, c := range conns {
					c.Release()
				}
			}()
			if len(conns) < tc.conns {
				t.Fatalf("%d idle connections after Open, want at least %d", len(conns), tc.conns)
			}
			warmed := 0 // connections with every hot statement prepared
			for i, c := range conns {
				var hot, all int
				if err := c.QueryRow(ctx, "SELECT count(*) FILTER (WHERE statement = ANY($1)), count(*) FROM pg_prepared_statements",
					hotStatements).Scan(&hot, &all); err != nil {
					t.Fatal(err)
				}
				if !tc.prepared && all != 0 {
					t.Errorf("connection %d: %d prepared statements, want none", i, all)
				}
				if hot == len(hotStatements) {
					warmed++
				}
			}
			if tc.prepared && warmed < tc.conns {
				t.Errorf("%d of %d connections have the %d hot statements prepared, want at least %d", warmed, len(conns), len(hotStatements), tc.conns)
			}
		})
	}
}

// TestOpenWithFewerConnectionsThanWarmUp checks that a server refusing some
// of the warm-up's connections (a role limited to 3) does not stop Open:
// the store opens with what it got and works.
func TestOpenWithFewerConnectionsThanWarmUp(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	admin := openURL(t, url, nil) // migrates, as the superuser
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	role := fmt.Sprintf("rq_limited_%d", time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN CONNECTION LIMIT 3",
		"GRANT ALL ON ALL TABLES IN SCHEMA public TO " + role,
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO " + role,
	} {
		if _, err := admin.Pool().Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Pool().Exec(ctx, "REASSIGN OWNED BY "+role+" TO postgres")
		_, _ = admin.Pool().Exec(ctx, "DROP OWNED BY "+role)
		_, _ = admin.Pool().Exec(ctx, "DROP ROLE "+role)
	})
	u, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	limitedURL := fmt.Sprintf("postgres://%s@%s:%d/%s", role, u.Host, u.Port, u.Database)
	s, err := Open(ctx, Config{URL: limitedURL}) // MaxConns 10: the warm-up asks for 8
	if err != nil {
		t.Fatalf("Open with a role limited to 3 connections (warm-up wants %d): %v", DefaultWarmConns, err)
	}
	defer s.Close()
	if _, err := s.InsertTasks(ctx, store.InsertParams{Tasks: newTasks("limited", 5), Now: t0}); err != nil {
		t.Fatalf("insert through the limited store: %v", err)
	}
	got, err := s.FetchTasks(ctx, store.FetchParams{Limit: 10, WorkerID: "w", LeaseDuration: time.Minute, Now: t0})
	if err != nil || len(got) != 5 {
		t.Fatalf("fetch: %d tasks, err %v; want 5", len(got), err)
	}
}

// TestPoolSizeFromURL checks that pool_max_conns and pool_min_conns in the
// URL apply unless the Config sets the sizes (retryq server has only --db).
func TestPoolSizeFromURL(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	with := func(params string) string {
		if strings.Contains(url, "://") {
			if strings.Contains(url, "?") {
				return url + "&" + params
			}
			return url + "?" + params
		}
		return url + " " + strings.ReplaceAll(params, "&", " ")
	}
	for _, tc := range []struct {
		name             string
		url              string
		max, min         int32
		wantMax, wantMin int32
	}{
		{"defaults", url, 0, 0, DefaultMaxConns, 0},
		{"URL", with("pool_max_conns=3&pool_min_conns=2"), 0, 0, 3, 2},
		{"Config wins", with("pool_max_conns=3&pool_min_conns=2"), 5, 1, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openURL(t, tc.url, func(c *Config) { c.MaxConns, c.MinConns = tc.max, tc.min })
			pc := s.Pool().Config()
			if pc.MaxConns != tc.wantMax || pc.MinConns != tc.wantMin {
				t.Fatalf("pool max %d min %d, want %d and %d", pc.MaxConns, pc.MinConns, tc.wantMax, tc.wantMin)
			}
		})
	}
}
