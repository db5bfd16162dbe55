package postgres

import (
	"strings"
	"testing"

	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/store"
)

// TestIdleTransactionLimitKeepsATighterServerSetting: the store bounds its
// explicit transactions' idle time with a transaction-scoped setting, but
// never loosens a tighter limit the operator set on the database.
func TestIdleTransactionLimitKeepsATighterServerSetting(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url, nil)
	if got := s.beginQuery(t.Context()); !strings.Contains(got, "SET LOCAL idle_in_transaction_session_timeout = 60000") {
		t.Errorf("begin on a server without a limit = %q; want the store's limit set locally", got)
	}
	c := connect(t, url)
	if _, err := c.Exec(t.Context(), "DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = ''5s''', current_database()); END$$"); err != nil {
		t.Fatal(err)
	}
	tight := openURL(t, url, nil)
	if got := tight.beginQuery(t.Context()); got != "BEGIN" {
		t.Errorf("begin on a database whose limit is 5s = %q; want plain BEGIN", got)
	}
	if _, err := tight.Stats(t.Context(), store.StatsParams{Since: t0}); err != nil {
		t.Fatal(err)
	}
}
