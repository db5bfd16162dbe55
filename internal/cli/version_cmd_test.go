package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/retryq/retryq/store/postgres"
	"github.com/retryq/retryq/store/sqlite"
)

// TestVersionCommand: "retryq version" prints the version a node records
// in the registry and the newest schema version each backend's migrations
// reach, as text and as JSON; arguments are usage errors.
func TestVersionCommand(t *testing.T) {
	status, out, errOut := runMain("version")
	if status != exitOK || errOut != "" {
		t.Fatalf("version: status %d, stderr %q", status, errOut)
	}
	want := fmt.Sprintf("retryq %s (%s, %s/%s)\nschema versions known: sqlite %d, postgres %d\n",
		buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH, sqlite.KnownVersion(), postgres.KnownVersion())
	if out != want {
		t.Errorf("version printed %q, want %q", out, want)
	}
	status, out, _ = runMain("version", "--json")
	var v versionInfo
	if status != exitOK || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version --json: status %d, output %q", status, out)
	}
	if v.Version != buildVersion() || v.Schema.SQLite != sqlite.KnownVersion() || v.Schema.Postgres != postgres.KnownVersion() || v.Schema.Postgres < 7 {
		t.Errorf("version --json = %+v", v)
	}
	status, _, errOut = runMain("version", "extra")
	if status != exitUsage || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("version extra: status %d, stderr %q", status, errOut)
	}
}
