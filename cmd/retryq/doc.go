// Command retryq is the retryq binary: a durable task queue whose core is
// doing failure right.
//
// Run "retryq help" for the list of commands. One of them, "retryq run",
// retries a flaky command per a retry policy:
//
//	retryq run --attempts 5 --delay 0.2 -- ./examples/flaky.sh
package main
