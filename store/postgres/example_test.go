package postgres_test

import (
	"context"
	"errors"
	"log"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// Open a store on a database of retryq's own, migrating it, and run a
// client on it. The example is compiled but not run: it needs a server.
func ExampleOpen() {
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{
		URL:         "postgres://retryq:secret@127.0.0.1:5432/retryq?sslmode=disable",
		AutoMigrate: true, // else run Migrate (retryq migrate) before the nodes start
	})
	switch {
	case errors.Is(err, store.ErrSchemaTooNew):
		log.Fatal("a newer retryq migrated this database: upgrade this binary")
	case err != nil:
		log.Fatal(err)
	}
	defer st.Close() // after the client

	client, err := retryq.NewClient(st, retryq.Options{NodeID: "api-1"})
	if err != nil {
		log.Print(err)
		return
	}
	if err := client.Start(ctx); err != nil {
		log.Print(err)
		return
	}
	defer client.Close()
}
