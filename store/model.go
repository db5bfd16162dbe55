package store

import (
	"encoding/json"
	"time"
)

// State is the lifecycle state of a task.
//
//	scheduled ──due──▶ pending ──fetch──▶ running ──ok──▶ succeeded
//	                      ▲                  │
//	                      │                  ├─retryable─▶ retry_waiting ──due──▶ pending
//	                      │                  ├─exhausted/permanent─▶ dead
//	                      └──release─────────┘
//	any non-terminal ──cancel──▶ cancelled;  dead|cancelled ──retry──▶ pending
type State string

// The task states.
const (
	StateScheduled    State = "scheduled"     // first run in the future
	StatePending      State = "pending"       // ready to be fetched
	StateRunning      State = "running"       // leased by a worker
	StateRetryWaiting State = "retry_waiting" // in the retry queue until RunAt
	StateSucceeded    State = "succeeded"     // done
	StateDead         State = "dead"          // in the dead-letter queue
	StateCancelled    State = "cancelled"     // cancelled by an operator or client
)

// States lists every state, in lifecycle order.
var States = []State{StateScheduled, StatePending, StateRunning, StateRetryWaiting, StateSucceeded, StateDead, StateCancelled}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	for _, k := range States {
		if s == k {
			return true
		}
	}
	return false
}

// Terminal reports whether s is succeeded, dead or cancelled.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateDead || s == StateCancelled
}

// Dead reasons recorded when a task enters the dead-letter queue.
const (
	DeadNonRetryable = "non_retryable" // permanent error: no attempts wasted
	DeadMaxAttempts  = "max_attempts"  // attempts exhausted
	DeadRetryWindow  = "retry_window"  // total retry window exceeded
)

// Attempt outcomes recorded in the history.
const (
	OutcomeSucceeded    = "succeeded"
	OutcomeFailed       = "failed"
	OutcomeLeaseExpired = "lease_expired"
)

// ErrorInfo is the classified error of an attempt.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Class   string `json:"class"` // transient, permanent, unknown, lease_expired
}

// Task is one durable unit of work.
type Task struct {
	ID             string
	Type           string
	Payload        json.RawMessage
	Priority       int // as enqueued; higher runs first
	EffectivePrio  int // ordering priority; sinks with failed attempts
	State          State
	Attempt        int // attempts started so far
	MaxAttempts    int // 0 = the type's policy decides
	IdempotencyKey string
	RunAt          time.Time // when the task is (or was) due
	CreatedAt      time.Time
	UpdatedAt      time.Time
	FirstFailureAt time.Time // zero until the first failure
	LastError      *ErrorInfo
	LastDelay      time.Duration // delay chosen after the last failure
	DeadReason     string

	// Set while running.
	LeaseID        string
	LeaseExpiresAt time.Time
	WorkerID       string
	StartedAt      time.Time // start of the current/last attempt
}

// Attempt is one row of a task's history.
type Attempt struct {
	TaskID     string
	TaskType   string
	Number     int // the task's attempt number (restarts at 1 after a manual retry)
	WorkerID   string
	StartedAt  time.Time
	FinishedAt time.Time
	Outcome    string // OutcomeSucceeded, OutcomeFailed, OutcomeLeaseExpired
	Error      *ErrorInfo
	Delay      time.Duration // delay chosen after this attempt (0 if none)
	Detail     string        // stack trace, response excerpt, ...
}

// TypeConfig is the stored configuration of a task type.
type TypeConfig struct {
	Type      string
	Policy    json.RawMessage // retry.Policy JSON; empty = defaults
	Timeout   time.Duration   // per-attempt timeout; 0 = engine default
	Priority  int             // default priority for new tasks
	Target    json.RawMessage // push target JSON; empty = none
	UpdatedAt time.Time
}

// Node is one retryq process registered in the database.
type Node struct {
	ID        string
	Host      string
	Version   string
	Role      string // "leader", "standby", "worker" (no scheduler) or "stopped" (closed)
	StartedAt time.Time
	LastSeen  time.Time
}

// Lease on a named leadership row.
type Lease struct {
	Name      string
	NodeID    string
	ExpiresAt time.Time
}
