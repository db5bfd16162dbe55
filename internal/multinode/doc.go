// Package multinode holds the multi-process tests of retryq on PostgreSQL:
// several node processes (the test binary re-executed as a node) share one
// database while the tests kill the elected leader or restart the database
// server, then check from the database and from the nodes' run logs that
// every task finished exactly as its failures dictate and that no two runs
// of one task overlapped in time.
//
// The package has no non-test code; run it with
//
//	go test -race ./internal/multinode
package multinode
