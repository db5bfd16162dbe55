package sqlite

import (
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/retryq/retryq/store"
)

// corruptError is a SQLite error saying that the database file is damaged
// (SQLITE_CORRUPT) or is not a database (SQLITE_NOTADB), with the file's
// name. It matches store.ErrCorrupt and store.ErrUnavailable.
type corruptError struct {
	path string
	err  error // the SQLite error, perhaps wrapped
}

func (e *corruptError) Error() string {
	return e.path + " is corrupt or not a SQLite database (restore it from a backup, then restart): " + e.err.Error()
}

func (e *corruptError) Unwrap() []error {
	return []error{store.ErrUnavailable, store.ErrCorrupt, e.err}
}

// isCorrupt reports whether err is SQLITE_CORRUPT or SQLITE_NOTADB (any
// extended code).
func isCorrupt(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_CORRUPT || code == sqlite3.SQLITE_NOTADB
}

// translate is the package's translate for the store's own calls: a
// corruption is also named after the database file and kept for Ping, so
// that the node is not ready from then on, whichever statement found it
// (Ping's own reads do not touch the pages of the tasks).
func (s *Store) translate(op string, err error) error {
	if isCorrupt(err) {
		if _, ok := errors.AsType[*corruptError](err); !ok {
			err = &corruptError{path: s.cfg.Path, err: err}
		}
		s.corrupt.CompareAndSwap(nil, &err)
	}
	return translate(op, err)
}
