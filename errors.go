package retryq

import (
	"errors"
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
	// ErrClosed: the Client was closed.
	ErrClosed = engine.ErrClosed
	// ErrNotStarted: the Client's Start has not been called yet.
	ErrNotStarted = errors.New("client not started")
)

// Why a handler's context ended: context.Cause(ctx) matches one of these
// with errors.Is (see Handler).
var (
	// ErrAttemptTimeout: the attempt ran past its type's timeout.
	ErrAttemptTimeout = engine.ErrAttemptTimeout
	// ErrTaskCancelled: the task was cancelled (Client.Cancel) while it
	// ran. It matches ErrLeaseLost too.
	ErrTaskCancelled = engine.ErrTaskCancelled
	// ErrLeaseLost: the handler's lease is gone (cancelled, expired
	// without a heartbeat, or the task reaped); nothing the handler
	// returns is recorded.
	ErrLeaseLost = engine.ErrLeaseLost
	// ErrWorkerStopped: the worker stopped and its ShutdownGrace ran out;
	// the attempt is not counted and the task runs again.
	ErrWorkerStopped = engine.ErrWorkerStopped
)

// Permanent marks err as not retryable: the task goes straight to the
// dead-letter queue with reason non_retryable, whatever the type's code
// lists say, also when the error is wrapped again (fmt.Errorf with %w), or
// joined with other errors (errors.Join, fmt.Errorf with several %w),
// retryable ones included, in any order.
// Permanent(nil) is nil: a handler returning it completes its task.
func Permanent(err error) error { return retry.Permanent(err) }

// Transient marks err as retryable. The type's code lists still apply: a
// no_retry_on list holding its code, or a retry_on list not holding it,
// makes it permanent. Transient(nil) is nil.
func Transient(err error) error { return retry.Transient(err) }

// RetryAfter marks err as retryable no sooner than d from now (capped by the
// type's max delay); d <= 0 leaves the delay to the type's backoff. As for
// Transient, the type's code lists apply. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error { return retry.RetryAfter(err, d) }

// WithCode attaches an error code, matched by a policy's retry_on and
// no_retry_on lists and shown in the dead-letter queue. The class is taken
// from err. WithCode(code, nil) is nil.
func WithCode(code string, err error) error { return retry.WithCode(code, err) }

// invalidError marks an error that names an invalid field as ErrInvalid,
// keeping its message.
type invalidError struct{ err error }

func (e invalidError) Error() string { return e.err.Error() }

func (e invalidError) Unwrap() error { return e.err }

// Is reports whether target is ErrInvalid.
func (e invalidError) Is(target error) bool { return target == ErrInvalid }
