//go:build unix

package sqlite

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// unprivilegedEnv marks the child process runUnprivileged starts.
const unprivilegedEnv = "RETRYQ_TEST_UNPRIVILEGED"

// runUnprivileged makes a test about file permissions meaningful when the
// tests run as root, who may write any file: it runs the calling test again
// in a child process as user nobody (uid and gid 65534), in a temporary
// directory that user owns, reports the child's output and result, and
// returns true: the caller then returns at once. Run by another user (or
// in that child) it returns false, and the caller goes on. It skips the
// test when it cannot start the child.
func runUnprivileged(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 || os.Getenv(unprivilegedEnv) != "" {
		return false
	}
	const nobody = 65534
	// Not t.TempDir: its parent is open to root only.
	dir, err := os.MkdirTemp("", "retryq-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, nobody, nobody); err != nil {
		t.Skipf("cannot give a directory to user nobody: %v", err)
	}
	// The test binary may sit in a directory only root can enter.
	bin := filepath.Join(dir, "sqlite.test")
	if err := copyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), unprivilegedEnv+"=1", "TMPDIR="+tmp, "HOME="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	t.Logf("as user nobody:\n%s", out)
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Skipf("cannot run the test as user nobody: %v", err)
		}
		t.Fatalf("the test failed as user nobody: %v", err)
	}
	return true
}

// copyFile copies src to dst, created with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
