package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestURL(t *testing.T) {
	t.Parallel()
	u1, u2 := URL(t), URL(t)
	if u1 == u2 {
		t.Fatalf("two databases share a URL: %s", u1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range []string{u1, u2} {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var fsync string
		if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil {
			t.Fatal(err)
		}
		if fsync != "on" {
			t.Errorf("fsync = %s, want on", fsync)
		}
		conn.Close(ctx)
	}
}

func TestClusterRestart(t *testing.T) {
	t.Parallel()
	c := NewCluster(t)
	u := c.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ping := func() error {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx)
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err == nil {
		t.Fatal("ping succeeded while the cluster is stopped")
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
}

func TestDBName(t *testing.T) {
	n := dbName("TestSomething/sub-test_with.ALotOfCharacters/and/more/and/more/and/more")
	if len(n) > 63 {
		t.Fatalf("name too long: %d %s", len(n), n)
	}
}
