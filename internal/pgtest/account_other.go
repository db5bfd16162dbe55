//go:build !unix

package pgtest

import "os/exec"

// prepare does nothing off Unix: programAccount never returns an account
// there (os.Geteuid is -1), and there are no process groups to leave.
func (a *account) prepare(*exec.Cmd, bool) {}
