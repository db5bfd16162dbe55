package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCLITypesTablesMaskTargetSecrets: the tables of types set, get and
// list name a push target by its URL with its password and query values
// masked, as the server's log does: operators paste them into tickets, and
// a full-access token is answered with the URL whole. --json keeps it
// whole, so that get --json, edited, can be set again.
func TestCLITypesTablesMaskTargetSecrets(t *testing.T) {
	s := startAPIServer(t, nil)
	file := filepath.Join(t.TempDir(), "target.json")
	writeTestFile(t, file, `{"target": {"url": "http://svc:s3cret-XYZ@127.0.0.1:1/send?token=s3cret-XYZ&region=eu",
		"headers": {"Authorization": "Bearer s3cret-XYZ"}}}`)
	for _, args := range [][]string{
		{"types", "set", "email.send", "--file", file},
		{"types", "get", "email.send"},
		{"types", "list"},
	} {
		out := s.cliOK(t, args...)
		if strings.Contains(out, "s3cret") {
			t.Errorf("%s: the output shows the target's secret:\n%s", strings.Join(args, " "), out)
		}
		if !strings.Contains(out, "svc:xxxxx@127.0.0.1:1/send?token=xxxxx") {
			t.Errorf("%s: the output does not name the target masked:\n%s", strings.Join(args, " "), out)
		}
	}
	var tc apiTypeConfig
	s.cliJSON(t, &tc, "types", "get", "email.send")
	if tc.Target == nil || !strings.Contains(tc.Target.URL, "svc:s3cret-XYZ@") {
		t.Errorf("types get --json: the target is not whole for a full-access token: %+v", tc.Target)
	}
}
