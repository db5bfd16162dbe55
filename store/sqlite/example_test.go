package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// Open creates and migrates the database file; a path SQLite would not
// keep in one file is refused.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "retryq-example")
	defer os.RemoveAll(dir)

	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "retryq.db")})
	if err != nil {
		panic(err)
	}
	defer st.Close() // after the retryq.Client using it is closed
	applied, known, _ := st.SchemaVersion(ctx)
	fmt.Println("migrated:", applied == known, "ping:", st.Ping(ctx))

	_, err = sqlite.Open(ctx, sqlite.Config{Path: ":memory:"})
	fmt.Println(errors.Is(err, store.ErrInvalid), err)
	// Output:
	// migrated: true ping: <nil>
	// true sqlite config: Path: invalid argument: in-memory databases are not supported
}
