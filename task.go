package retryq

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/retryq/retryq/store"
)

// TaskInfo is a stored task as returned by the Client.
type TaskInfo = store.Task

// Attempt is one entry of a task's history.
type Attempt = store.Attempt

// State is a task's lifecycle state.
type State = store.State

// The task states.
const (
	StateScheduled    = store.StateScheduled
	StatePending      = store.StatePending
	StateRunning      = store.StateRunning
	StateRetryWaiting = store.StateRetryWaiting
	StateSucceeded    = store.StateSucceeded
	StateDead         = store.StateDead
	StateCancelled    = store.StateCancelled
)

// Task is what a handler receives: one attempt of one task.
type Task struct {
	ID          string          // the task's id, as Enqueue returned it
	Type        string          // the task type
	Payload     json.RawMessage // the handler's own copy
	Attempt     int             // 1 for the first attempt
	MaxAttempts int             // 0 = the type's policy decides
	Priority    int             // as enqueued; higher runs first
	CreatedAt   time.Time       // when the task was enqueued
	// LastError is the previous attempt's error, nil on a first attempt.
	LastError *store.ErrorInfo
}

// Decode unmarshals the payload into v.
func (t *Task) Decode(v any) error { return json.Unmarshal(t.Payload, v) }

// taskFrom returns the handler's view of a leased task. It shares no
// memory with s, which the engine holds: a handler may change its Task.
func taskFrom(s *store.Task) *Task {
	t := &Task{
		ID: s.ID, Type: s.Type, Payload: bytes.Clone(s.Payload), Attempt: s.Attempt, MaxAttempts: s.MaxAttempts,
		Priority: s.Priority, CreatedAt: s.CreatedAt,
	}
	if s.LastError != nil {
		le := *s.LastError
		t.LastError = &le
	}
	return t
}
