package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// CheckSchemaBroken checks the contract for a schema changed under the
// store by someone else: exec runs one statement on the same database
// through a connection of its own. Once the tasks table is renamed away,
// Ping and every call on it fail with ErrUnavailable and ErrSchemaBroken
// (an API answers 503, /readyz is not ready); renamed back, all pass again.
// A column renamed away fails the calls that name it the same way.
func CheckSchemaBroken(ctx context.Context, t *testing.T, st store.Store, exec func(query string) error) {
	t.Helper()
	now := time.Now()
	insert := func(id string) error {
		_, err := st.InsertTasks(ctx, store.InsertParams{Now: now, Tasks: []store.NewTask{nt(id, "email")}})
		return err
	}
	if err := insert("t_before"); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("Ping on an intact schema: %v", err)
	}
	broken := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrSchemaBroken) || !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s = %v, want ErrSchemaBroken and ErrUnavailable", what, err)
		}
	}
	run := func(q string) {
		t.Helper()
		if err := exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	run("ALTER TABLE tasks RENAME TO tasks_gone")
	broken("Ping with the tasks table renamed away", st.Ping(ctx))
	_, err := st.GetTask(ctx, "t_before")
	broken("GetTask", err)
	broken("InsertTasks", insert("t_during"))
	run("ALTER TABLE tasks_gone RENAME TO tasks")
	if err := st.Ping(ctx); err != nil {
		t.Errorf("Ping with the table back: %v", err)
	}
	if _, err := st.GetTask(ctx, "t_before"); err != nil {
		t.Errorf("GetTask with the table back: %v", err)
	}
	run("ALTER TABLE tasks RENAME COLUMN payload TO payload_gone")
	_, err = st.GetTask(ctx, "t_before")
	broken("GetTask with the payload column renamed away", err)
	run("ALTER TABLE tasks RENAME COLUMN payload_gone TO payload")
	run("DROP TABLE attempts")
	broken("Ping with the attempts table dropped", st.Ping(ctx))
}
