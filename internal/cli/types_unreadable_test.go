package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// TestCLITypesShowAnUnreadableType: a stored configuration the server
// cannot decode (a newer version's policy) is listed and shown with the
// reason, next to the other types, instead of failing `types list`; its
// readable parts (timeout, push target) are still shown.
func TestCLITypesShowAnUnreadableType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s := startAPIServer(t, func(o *serverOptions) { o.db = "sqlite:" + path })
	good := filepath.Join(t.TempDir(), "good.json")
	writeTestFile(t, good, `{"retry": {"max_attempts": 4}}`)
	s.cliOK(t, "types", "set", "good", "--file", good)
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.PutType(t.Context(), store.TypeConfig{
		Type: "newer", Policy: []byte(`{"max_attempts":1,"field_from_a_newer_version":1}`), Timeout: 7 * time.Second,
		Target: []byte(`{"url":"http://127.0.0.1:1/hook"}`),
	}, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := s.cliOK(t, "types", "list")
	wantOutput(t, "types list", out, "good", "newer", "unreadable (see types get)")
	out = s.cliOK(t, "types", "get", "newer")
	wantOutput(t, "types get", out, "unreadable by this server", "field_from_a_newer_version", "7s", "http://127.0.0.1:1/hook")
	if strings.Contains(out, "Backoff") {
		t.Errorf("types get shows a backoff for a policy it cannot read:\n%s", out)
	}
}
