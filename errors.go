package retryq

import (
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// Sentinel errors returned by the Client.
var (
	// ErrNotFound: no task with that id.
	ErrNotFound = store.ErrNotFound
	// ErrConflict: the operation is not allowed in the task's state.
	ErrConflict = store.ErrConflict
	// ErrInvalid: an argument was invalid; the message names the field.
	ErrInvalid = engine.ErrInvalid
)

// Permanent marks err as not retryable: the task goes straight to the
// dead-letter queue with reason non_retryable.
func Permanent(err error) error { return retry.Permanent(err) }

// Transient marks err as retryable.
func Transient(err error) error { return retry.Transient(err) }

// RetryAfter marks err as retryable no sooner than d from now (capped by the
// type's max delay).
func RetryAfter(err error, d time.Duration) error { return retry.RetryAfter(err, d) }

// WithCode attaches an error code, matched by a policy's retry_on and
// no_retry_on lists and shown in the dead-letter queue.
func WithCode(code string, err error) error { return retry.WithCode(code, err) }
