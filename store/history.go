package store

import (
	"fmt"
	"math"
)

// HistoryRow is one row of a backend's schema history (its
// schema_migrations table): a migration's version and file name.
type HistoryRow struct {
	Version int64
	Name    string
}

// HistoryVersion returns the schema version a history records (0 for none),
// given the history in version order and the names of the migrations this
// binary knows (known[i] is version i+1). Each recorded version this binary
// knows must be the next one and carry its name; versions beyond them are a
// newer binary's (the caller reports ErrSchemaTooNew). Any other history is
// ErrForeignSchema: another tool's table of the same name.
func HistoryVersion(history []HistoryRow, known []string) (int, error) {
	var applied int64
	for i, r := range history {
		if r.Version <= int64(len(known)) && (r.Version != int64(i+1) || r.Name != known[i]) {
			return 0, fmt.Errorf("%w (version %d is %q, retryq's version %d is %q)",
				ErrForeignSchema, r.Version, r.Name, i+1, known[min(i, len(known)-1)])
		}
		applied = r.Version
	}
	if applied > math.MaxInt32 { // retryq's versions count its migration files
		return 0, fmt.Errorf("%w (version %d)", ErrForeignSchema, applied)
	}
	return int(applied), nil
}
