// Package retryq is a durable task queue and scheduler whose core is doing
// failure right: errors are classified, retried with per-type policies in a
// separate delayed queue, bounded in attempts and time, and what cannot
// succeed lands in a dead-letter queue with its payload, reason and every
// attempt.
//
// A Client enqueues and inspects tasks; a Worker runs them with handlers
// registered on a Mux, shaped like net/http. Both sit on a store.Store
// backend (store/sqlite embedded in a file, or store/postgres for many
// nodes). Handlers only report outcomes: the engine alone decides whether a
// failed attempt is retried, when, or dead-lettered. The Client also
// inspects the dead-letter queue and acts on it (DeadSummary, ListDead,
// Redrive, Purge); see Handler for when a handler's context ends.
//
//	st, _ := sqlite.Open(ctx, sqlite.Config{Path: "retryq.db"})
//	client, _ := retryq.NewClient(st, retryq.Options{})
//	client.Start(ctx)
//	defer client.Close() // stops the workers gracefully, then the loops
//	mux := retryq.NewMux()
//	mux.HandleFunc("email.send", func(ctx context.Context, t *retryq.Task) error { ... })
//	w, _ := retryq.NewWorker(client, retryq.WorkerConfig{Handler: mux, Concurrency: 20})
//	go w.Run(ctx)
//	client.Enqueue(ctx, "email.send", map[string]string{"to": "a@example.com"})
package retryq
