//go:build unix

package pgtest

import (
	"os/exec"
	"syscall"
)

// prepare makes cmd run as a (when not nil) and, with ownGroup, in a
// process group of its own, so that signals sent to the test's group do
// not reach it.
func (a *account) prepare(cmd *exec.Cmd, ownGroup bool) {
	attr := &syscall.SysProcAttr{Setpgid: ownGroup}
	if a != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid)}
	}
	cmd.SysProcAttr = attr
}
