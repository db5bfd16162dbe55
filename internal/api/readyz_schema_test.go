package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryq/retryq/store"
)

// schemaStore reports the applied schema version its offset says, relative
// to the version the binary knows.
type schemaStore struct {
	store.Store
	offset atomic.Int64
}

func (s *schemaStore) SchemaVersion(ctx context.Context) (int, int, error) {
	applied, known, err := s.Store.SchemaVersion(ctx)
	return applied + int(s.offset.Load()), known, err
}

// TestReadyzSaysWhichWayTheSchemaDiffers: a node whose database was
// migrated by a newer binary (an upgrade's 'retryq migrate' while it runs)
// logs that the schema is newer and that the node is to be replaced; one
// on an older schema logs that it needs 'retryq migrate'. Both said 'schema
// version 6, this binary needs 5', which reads as if the database lacked
// a migration the old node needs.
func TestReadyzSaysWhichWayTheSchemaDiffers(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var ss *schemaStore
	e := newEnv(t, envOpts{
		log:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		wrap: func(st store.Store) store.Store { ss = &schemaStore{Store: st}; return ss },
	})
	e.must(http.StatusOK, "GET", "/readyz", nil)
	for _, tc := range []struct {
		offset int64
		want   []string
	}{
		{1, []string{"newer than this binary", "replace this node"}},
		{-1, []string{"older than this binary", "retryq migrate"}},
	} {
		ss.offset.Store(tc.offset)
		before := len(logs.String())
		e.mustErr(http.StatusServiceUnavailable, CodeNotReady, "", "GET", "/readyz", nil)
		got := logs.String()[before:]
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("schema %+d: the not-ready log does not say %q:\n%s", tc.offset, w, got)
			}
		}
	}
	ss.offset.Store(0)
	e.must(http.StatusOK, "GET", "/readyz", nil)
}
