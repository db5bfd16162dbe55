// Package window counts events over a sliding time window kept in a fixed
// ring of buckets, so memory does not grow with traffic. It backs the
// failure-rate rule of package breaker and the ratio rule of package
// budget. A Counter is not safe for concurrent use; its users hold a lock.
package window
