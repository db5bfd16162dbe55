//go:build unix

package sqlite

import "syscall"

// writable reports why this process may not write the file at path: nil
// when it may. The kernel answers for the process's real ids, and a file
// system mounted read-only refuses every process, root included.
func writable(path string) error { return syscall.Access(path, 2 /* W_OK */) }
