package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/pgtest"
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
