package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemoInspectHintsHideTheDBPassword: the commands the demo's summary
// suggests (retryq server --db ..., retryq demo --db ...) name a --db
// holding a password with the password hidden, as its "Found N tasks"
// line does; they quoted it whole, into an output made to be pasted. A
// --db without one is quoted as it is, ready to run.
func TestDemoInspectHintsHideTheDBPassword(t *testing.T) {
	for db, want := range map[string]string{
		"postgres://u:s3cret-XYZ@127.0.0.1:1/db":          "retryq server --db 'postgres://u:***@127.0.0.1:1/db'",
		"postgres://u@127.0.0.1:1/db?password=s3cret-XYZ": "retryq server --db 'postgres://u@127.0.0.1:1/db?password=***'",
		"sqlite:demo.db": "retryq server --db sqlite:demo.db",
	} {
		var out bytes.Buffer
		d := &demo{o: &demoOptions{db: db}, env: &Env{Stdout: &out}}
		d.printInspect(nil, "", 3)
		if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), want) {
			t.Errorf("--db %q: the summary's hints are\n%s\nwant %q and no password", db, out.String(), want)
		}
	}
}
