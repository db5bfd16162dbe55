//go:build !linux

package sqlite

// spaceShortage says why writes to files fail for lack of space; off
// Linux it does not look, and returns "": only SQLITE_FULL is ErrDiskFull.
func spaceShortage(files []string) string { return "" }
