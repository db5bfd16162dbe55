package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestServerRefusesSurroundingWhiteSpace: a database name or listen
// address with white space around it (an env file that keeps a trailing
// space) is a usage error naming where it came from and the white space.
// RETRYQ_DB="sqlite:q.db " created and served a new, empty file "q.db "
// beside the real one; RETRYQ_LISTEN=" 127.0.0.1:7420" was refused as an
// address other machines could reach, naming --listen.
func TestServerRefusesSurroundingWhiteSpace(t *testing.T) {
	clearServerEnv(t)
	path := filepath.Join(t.TempDir(), "q.db")
	for _, c := range []struct {
		env, val, from string
		args           []string
	}{
		{"RETRYQ_DB", "sqlite:" + path + " ", "RETRYQ_DB", []string{"--listen", "127.0.0.1:0"}},
		{"RETRYQ_DB", "", "--db", []string{"--db", " sqlite:" + path, "--listen", "127.0.0.1:0"}},
		{"RETRYQ_LISTEN", " 127.0.0.1:0", "RETRYQ_LISTEN", []string{"--db", "sqlite:" + path}},
		{"RETRYQ_LISTEN", "", "--listen", []string{"--db", "sqlite:" + path, "--listen", "127.0.0.1:0\t"}},
	} {
		t.Setenv(c.env, c.val)
		status, stderr := runServerBriefly(t, c.args...)
		if status != exitUsage || !strings.Contains(stderr, c.from+": ") || !strings.Contains(stderr, "white space") {
			t.Errorf("%s=%q server %q: status %d, stderr %q; want %d naming %s and the white space",
				c.env, c.val, c.args, status, stderr, exitUsage, c.from)
		}
		t.Setenv(c.env, "")
		noFile(t, path, "white space")
		noFile(t, path+" ", "white space")
	}
	t.Setenv("RETRYQ_DB", "sqlite:"+path+" ")
	if status, _, stderr := runMain("migrate"); status != exitUsage || !strings.Contains(stderr, "RETRYQ_DB: ") || !strings.Contains(stderr, "white space") {
		t.Errorf("migrate with RETRYQ_DB=%q: status %d, stderr %q; want %d naming RETRYQ_DB and the white space", "sqlite:"+path+" ", status, stderr, exitUsage)
	}
	noFile(t, path+" ", "migrate with white space")
}
