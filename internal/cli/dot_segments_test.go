package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTypesSetDotSegmentRefused: a type name with a "..", "." or empty
// segment is refused as a usage error. Such a name used to pass, and
// "types set a/../b" stored its configuration for type b: the server's
// router cleans the path /v1/types/a/../b and redirects to /v1/types/b,
// and the CLI's HTTP client followed the redirect with the same body (it
// now follows none).
func TestTypesSetDotSegmentRefused(t *testing.T) {
	s := startAPIServer(t, nil)
	f := filepath.Join(t.TempDir(), "p.json")
	writeTestFile(t, f, `{"retry": {"max_attempts": 3}}`)
	for _, name := range []string{"a/../b", "b/.", "a//b", "/b"} {
		st, _, errOut := cli(t, "", "types", "set", name, "--file", f, "--server", s.url)
		if st != 2 || !strings.Contains(errOut, "segment") {
			t.Errorf("types set %q: status %d, stderr %q; want a usage error (2) about the segment", name, st, errOut)
		}
	}
	var b apiTypeConfig
	s.cliJSON(t, &b, "types", "get", "b")
	if b.Stored {
		t.Errorf("type b was configured by a refused command: %+v", b)
	}
}

// TestTasksDotIDRefused: "." and ".." are not task ids. "tasks get ." used
// to print a blank task and exit 0 (the server redirected the request to
// another route, whose answer decoded into an empty task).
func TestTasksDotIDRefused(t *testing.T) {
	s := startAPIServer(t, nil)
	for _, args := range [][]string{{"get", "."}, {"get", ".."}, {"retry", ".."}, {"cancel", "."}} {
		st, _, errOut := cli(t, "", append(append([]string{"tasks"}, args...), "--server", s.url)...)
		if st != 2 || !strings.Contains(errOut, "is not a task id") {
			t.Errorf("tasks %s: status %d, stderr %q; want a usage error (2)", strings.Join(args, " "), st, errOut)
		}
	}
}
