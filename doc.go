// Package retryq is a durable task queue and scheduler whose core is doing
// failure right: errors are classified, retried with per-type policies in a
// separate delayed queue, bounded in attempts and time, and what cannot
// succeed lands in a dead-letter queue with its payload, reason and every
// attempt.
//
// A [Client] enqueues and inspects tasks; a [Worker] runs them with handlers
// registered on a [Mux], shaped like net/http. Both sit on a store.Store
// backend: store/sqlite embedded in a file, or store/postgres for many
// nodes. Handlers only report outcomes: the engine alone decides whether a
// failed attempt is retried, when, or dead-lettered.
//
// # A first program
//
// Open a store, start a client on it, register handlers on a Mux, run a
// worker and enqueue:
//
//	ctx := context.Background()
//	st, err := sqlite.Open(ctx, sqlite.Config{Path: "retryq.db"})
//	if err != nil {
//		return err
//	}
//	defer st.Close() // last: the client does not close its store
//	client, err := retryq.NewClient(st, retryq.Options{})
//	if err != nil {
//		return err
//	}
//	if err := client.Start(ctx); err != nil {
//		return err
//	}
//	defer client.Close() // stops the workers gracefully, then the loops
//
//	mux := retryq.NewMux()
//	mux.HandleFunc("email.send", func(ctx context.Context, t *retryq.Task) error {
//		var p struct{ To string }
//		if err := t.Decode(&p); err != nil {
//			return retryq.Permanent(err) // never retried: straight to the DLQ
//		}
//		return send(ctx, p.To) // a plain error is classified and retried
//	})
//	w, err := retryq.NewWorker(client, retryq.WorkerConfig{Handler: mux, Concurrency: 20})
//	if err != nil {
//		return err
//	}
//	go w.Run(ctx) // until ctx ends or the client closes
//
//	_, err = client.Enqueue(ctx, "email.send", map[string]string{"to": "a@example.com"},
//		retryq.WithIdempotencyKey("welcome-a@example.com"))
//
// [Worker.Run] returns nil once its context is cancelled and its running
// handlers have returned (or WorkerConfig.ShutdownGrace ran out);
// [Client.Close] stops every worker of the client the same way. The
// runnable examples of [NewWorker], [Client.Enqueue] and the package show
// the whole cycle.
//
// # Failures and retries
//
// A handler's error is classified by package retry: [Permanent] marks one
// that retrying cannot fix (the task is dead-lettered at once),
// [RetryAfter] one that asks for the next attempt after a given wait,
// [Transient] one worth retrying, and [WithCode] attaches a code that a
// policy's retry_on and no_retry_on lists match and the dead-letter queue
// groups by. Other errors are classified by what they are (timeouts,
// refused connections, HTTP statuses through [retry.FromResponse]) and
// retried unless known to be permanent. See [Handler] for when a handler's
// context ends and why.
//
// How often and how long a type is retried is its [retry.Policy]: backoff,
// jitter, max delay, max attempts and a retry window.
// Options.DefaultPolicy applies to every type; [Client.SetType] stores a
// type's own policy, timeout and priority. A policy has a JSON form
// ([retry.Policy.UnmarshalJSON]), the one the HTTP API and the CLI take.
//
// # The dead-letter queue
//
// A task whose attempts, or retry window, ran out, or whose error was
// permanent, is dead: it keeps its payload, its DeadReason and its last
// error. [Client.DeadSummary] counts the dead tasks by type, error code
// and reason; [Client.ListDead] pages through them; [Client.Redrive] runs
// the ones a [DeadFilter] selects again ([Client.Retry] one of them), and
// [Client.Purge] deletes them. Dead tasks are deleted after
// Options.DeadRetention (30 days by default).
//
// # Guarantees
//
// Delivery is at least once: a task may run again after its handler did
// its work (a crash, or a lease lost before the outcome was recorded), so
// make handlers idempotent. A Client and a Mux are safe for concurrent
// use.
package retryq
