// Package retrytest provides a fake [retry.Clock] for deterministic tests
// of code that uses retry.Do (or any code that waits through a
// retry.Clock): time only moves when the test says so, or, with an
// auto-advancing clock, jumps straight to each timer's deadline.
package retrytest
