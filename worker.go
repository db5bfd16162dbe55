package retryq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Handler runs tasks; required. A *Mux also supplies the types to fetch.
	Handler Handler
	// Types to fetch; default: the types registered on the Mux when
	// NewWorker is called (a type registered later is not fetched). Run
	// refuses a type with a push target (set through the HTTP API or the
	// CLI): the server delivers its tasks itself. A type that gains one
	// while Run runs is no longer fetched from when this process learns of
	// it (at once when set through this Client's engine, else within about
	// 5 s), and is fetched again once the target is removed.
	Types []string
	// Concurrency is the number of handlers running at once (default 10;
	// at most MaxConcurrency).
	Concurrency int
	// Prefetch is how many tasks beyond Concurrency the worker may lease
	// ahead, waiting in its buffer for a free handler so that fetches stay
	// large under load (default 3 x Concurrency; negative: none; at most
	// MaxPrefetch). A prefetched task is held by this worker (it shows as
	// running) until one of its handlers is free, even while another
	// worker or process is idle: for long tasks shared by several
	// workers, set -1.
	Prefetch int
	// ShutdownGrace is how long running handlers may finish at shutdown
	// before their leases are released to other workers (default 10s).
	ShutdownGrace time.Duration
	// ID names the worker in leases and history (default: node id based):
	// UTF-8 text without NUL bytes, at most MaxWorkerIDBytes.
	ID string
}

// Bounds of WorkerConfig's fields.
const (
	// MaxConcurrency is the largest WorkerConfig.Concurrency: each handler
	// slot is a goroutine started by Run.
	MaxConcurrency = 10_000
	// MaxPrefetch is the largest WorkerConfig.Prefetch (the default for
	// MaxConcurrency): Run sizes its buffer by Concurrency + Prefetch.
	MaxPrefetch = 3 * MaxConcurrency
	// MaxWorkerIDBytes bounds WorkerConfig.ID, as the HTTP API bounds a
	// pull worker's id.
	MaxWorkerIDBytes = 200
)

// Worker runs tasks in this process. Make one with NewWorker: the zero
// Worker is not usable.
type Worker struct {
	c   *Client
	cfg WorkerConfig
}

// NewWorker returns a worker that runs tasks through c's engine. Invalid
// fields are ErrInvalid errors naming the field.
func NewWorker(c *Client, cfg WorkerConfig) (*Worker, error) {
	invalid := func(field, msg string) error {
		return fmt.Errorf("new worker: %w", &engine.FieldError{Field: field, Message: msg})
	}
	if c == nil {
		return nil, invalid("Client", "is required")
	}
	if nilHandler(cfg.Handler) {
		return nil, invalid("Handler", "is required")
	}
	if len(cfg.Types) == 0 {
		if m, ok := cfg.Handler.(*Mux); ok {
			cfg.Types = m.Types()
		}
	}
	if len(cfg.Types) == 0 {
		return nil, invalid("Types", "is required (or register handlers on a Mux first)")
	}
	if len(cfg.Types) > store.MaxFetchTypes {
		return nil, invalid("Types", fmt.Sprintf("has %d types; at most %d", len(cfg.Types), store.MaxFetchTypes))
	}
	for i, typ := range cfg.Types {
		if err := engine.ValidateType(fmt.Sprintf("Types[%d]", i), typ); err != nil {
			return nil, fmt.Errorf("new worker: %w", err)
		}
	}
	cfg.Types = slices.Clone(cfg.Types)
	if cfg.Concurrency < 0 || cfg.Concurrency > MaxConcurrency {
		return nil, invalid("Concurrency", fmt.Sprintf("must be between 0 and %d (got %d)", MaxConcurrency, cfg.Concurrency))
	}
	if cfg.Prefetch > MaxPrefetch {
		return nil, invalid("Prefetch", fmt.Sprintf("must be at most %d (got %d)", MaxPrefetch, cfg.Prefetch))
	}
	if len(cfg.ID) > MaxWorkerIDBytes || !store.ValidText(cfg.ID) {
		return nil, invalid("ID", fmt.Sprintf("must be UTF-8 text without NUL bytes, at most %d bytes", MaxWorkerIDBytes))
	}
	if cfg.ShutdownGrace < 0 {
		return nil, invalid("ShutdownGrace", "must not be negative")
	}
	return &Worker{c: c, cfg: cfg}, nil
}

// Run fetches and runs tasks until ctx is cancelled, or the Client is
// closed, then shuts down gracefully (see WorkerConfig.ShutdownGrace) and
// returns nil. It returns ErrNotStarted before the Client's Start (the
// worker's outcomes are recorded by the Client's loops), ErrClosed after
// its Close, and an ErrInvalid error naming ctx for a nil ctx.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.c.check(ctx, true); err != nil {
		return fmt.Errorf("run worker: %w", err)
	}
	h := w.cfg.Handler
	return w.c.e.RunWorker(ctx, engine.WorkerConfig{
		ID: w.cfg.ID, Types: w.cfg.Types, Concurrency: w.cfg.Concurrency, Prefetch: w.cfg.Prefetch,
		ShutdownGrace: w.cfg.ShutdownGrace,
		Handle:        func(ctx context.Context, t *store.Task) error { return h.ProcessTask(ctx, taskFrom(t)) },
	})
}
