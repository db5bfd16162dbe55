//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cli

// onControllingTerminal reports false where retryq cannot ask a terminal
// for its foreground process group: attempts get their own process groups.
func onControllingTerminal(...any) bool { return false }

// inTerminalForeground reports false: see onControllingTerminal.
func inTerminalForeground(...any) bool { return false }
