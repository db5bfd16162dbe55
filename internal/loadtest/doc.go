// Package loadtest holds retryq's benchmark workloads (bulk, stream, paced,
// retry, scale). They run the real engine, through the public Client and
// Worker, against any store.Store, and report throughput and the latency
// from enqueue to handler start. The go test benchmarks of the root package
// and the backends call them; docs/benchmarks.md records the figures.
package loadtest
