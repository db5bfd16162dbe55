//go:build !unix

package sqlite

import "testing"

// runUnprivileged returns false off Unix: there is no root who may write
// any file, so the calling test runs as it is.
func runUnprivileged(*testing.T) bool { return false }
