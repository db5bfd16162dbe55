package retryq

import (
	"context"
	"errors"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Handler runs tasks; required. A *Mux also supplies the types to fetch.
	Handler Handler
	// Types to fetch; default: the Mux's registered types.
	Types []string
	// Concurrency is the number of handlers running at once (default 10).
	Concurrency int
	// ShutdownGrace is how long running handlers may finish at shutdown
	// before their leases are released to other workers (default 10s).
	ShutdownGrace time.Duration
	// ID names the worker in leases and history (default: node id based).
	ID string
}

// Worker runs tasks in this process.
type Worker struct {
	c   *Client
	cfg WorkerConfig
}

// NewWorker returns a worker that runs tasks through c's engine.
func NewWorker(c *Client, cfg WorkerConfig) (*Worker, error) {
	if cfg.Handler == nil {
		return nil, errors.New("new worker: Handler: required")
	}
	if len(cfg.Types) == 0 {
		if m, ok := cfg.Handler.(*Mux); ok {
			cfg.Types = m.Types()
		}
	}
	if len(cfg.Types) == 0 {
		return nil, errors.New("new worker: Types: required (or register handlers on a Mux first)")
	}
	if cfg.Concurrency < 0 {
		return nil, errors.New("new worker: Concurrency: must not be negative")
	}
	return &Worker{c: c, cfg: cfg}, nil
}

// Run fetches and runs tasks until ctx is cancelled, then shuts down
// gracefully (see WorkerConfig.ShutdownGrace) and returns.
func (w *Worker) Run(ctx context.Context) error {
	h := w.cfg.Handler
	return w.c.e.RunWorker(ctx, engine.WorkerConfig{
		ID: w.cfg.ID, Types: w.cfg.Types, Concurrency: w.cfg.Concurrency, ShutdownGrace: w.cfg.ShutdownGrace,
		Handle: func(ctx context.Context, t *store.Task) error { return h.ProcessTask(ctx, taskFrom(t)) },
	})
}
