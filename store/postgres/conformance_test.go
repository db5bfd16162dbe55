package postgres

import (
	"testing"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/storetest"
)

// TestConformance runs the store contract suite, each subtest on its own
// fresh database.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openURL(t, pgtest.URL(t), func(c *Config) { c.MaxConns = 4 })
	})
}
