package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/backendtest"
	"github.com/retryq/retryq/store/postgres"
)

// TestReadyzFailsWhileTheDatabaseRefusesWrites: a PostgreSQL database that
// answers but refuses writes (set read-only by an operator here; a standby
// or a primary demoted by a failover looks the same) makes /readyz answer
// 503 not_ready, as every enqueue then fails with 503; it is ready again
// once the database accepts writes. It used to answer 200, so a load
// balancer kept sending work to a node that could take none.
func TestReadyzFailsWhileTheDatabaseRefusesWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{backend: backendtest.Postgres})
	ps := e.st.(*postgres.Store)
	ctx := t.Context()
	e.must(http.StatusOK, "GET", "/readyz", nil)
	var db string
	if err := ps.Pool().QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	setReadOnly := func(on string) {
		t.Helper()
		sql := "ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " SET default_transaction_read_only = " + on
		// A read-write transaction: the sessions may already be read-only.
		err := pgx.BeginTxFunc(ctx, ps.Pool(), pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ps.Pool().Reset() // sessions opened from now on have the setting
	}
	setReadOnly("on")
	e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "POST", "/v1/tasks", `{"type":"a"}`)
	e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
	e.must(http.StatusOK, "GET", "/healthz", nil)
	setReadOnly("off")
	e.must(http.StatusOK, "GET", "/readyz", nil)
	e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a"}`)
}

// TestSchemaBrokenIsUnavailableAndNotReady: with a table renamed away by
// another session (a foreign migration, an operator's mistake), requests
// on it answer 503 unavailable naming the schema, and /readyz 503
// not_ready; both recover once the table is back. They answered 500 and
// 200.
func TestSchemaBrokenIsUnavailableAndNotReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{backend: backendtest.Postgres})
	ps := e.st.(*postgres.Store)
	ctx := t.Context()
	created := e.must(http.StatusCreated, "POST", "/v1/tasks", `{"type":"a"}`)
	id, _ := created.m["id"].(string)
	exec := func(q string) {
		t.Helper()
		if _, err := ps.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("ALTER TABLE tasks RENAME TO tasks_gone")
	r := e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "POST", "/v1/tasks", `{"type":"a"}`)
	if !strings.Contains(r.errMsg(), "schema") {
		t.Errorf("error message %q does not name the schema", r.errMsg())
	}
	e.mustErr(http.StatusServiceUnavailable, CodeUnavailable, "", "GET", "/v1/tasks/"+id, nil)
	e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
	exec("ALTER TABLE tasks_gone RENAME TO tasks")
	e.must(http.StatusOK, "GET", "/readyz", nil)
	e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil)
}
