//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDemoLogFileIsTheOwners: the file demo --log creates is readable by
// its owner only under the usual umask (022), as the SQLite database is:
// its warnings carry the attempts' error messages. It was created 0644.
func TestDemoLogFileIsTheOwners(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a second")
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "demo.log")
	st, _, errOut := cli(t, "", "demo", "--duration", "1s", "--rate", "1", "--db", "sqlite:"+filepath.Join(dir, "demo.db"), "--log", logFile)
	if st != 0 {
		t.Fatalf("demo: status %d\nstderr: %s", st, errOut)
	}
	for _, name := range []string{logFile, filepath.Join(dir, "demo.db")} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v, want it readable by its owner only", filepath.Base(name), perm)
		}
	}
}
