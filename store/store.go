package store

import (
	"context"
	"encoding/json"
	"time"
)

// Store is the storage contract every backend implements. It is safe for
// concurrent use. Methods that write several rows do so in one transaction:
// a batch either happens whole or not at all. See docs/storage.md.
//
// Every method that takes a context refuses a nil one with ErrInvalid
// naming ctx (CheckContext) before anything else. A method answering a
// slice answers an empty one, not nil, when there is nothing to answer.
type Store interface {
	// InsertTasks inserts a batch of new tasks in one transaction. A task whose
	// RunAt is after Now starts scheduled, otherwise pending (or running, when
	// NewTask.Lease asks for direct dispatch). A task whose
	// idempotency key already exists (in the table or earlier in the same
	// batch) is not inserted: its result holds the existing task and
	// Duplicate=true. Results are in input order.
	InsertTasks(ctx context.Context, p InsertParams) ([]InsertResult, error)

	// FetchTasks atomically leases up to Limit pending tasks of the given types
	// (all types when empty), highest EffectivePrio first, then earliest RunAt,
	// then id. Each returned task is running, has Attempt incremented, a fresh
	// LeaseID never granted before, LeaseExpiresAt = Now+LeaseDuration,
	// WorkerID and StartedAt = Now. Concurrent fetches never return the same
	// task.
	FetchTasks(ctx context.Context, p FetchParams) ([]Task, error)

	// RecordOutcomes applies the outcomes of leased attempts in one
	// transaction. Each outcome applies only if the task is running under the
	// named lease and the lease has not expired at Now; otherwise its entry in
	// the returned slice is ErrLeaseLost and nothing changes for that task.
	RecordOutcomes(ctx context.Context, p OutcomeParams) ([]error, error)

	// ExtendLeases moves the expiry of running leases. Entries for leases that
	// are no longer current (or already expired at Now), or whose ids are not
	// text, are ErrLeaseLost. A lease named twice keeps the later entry's
	// expiry.
	ExtendLeases(ctx context.Context, p ExtendParams) ([]error, error)

	// ExpiredLeases returns up to Limit running tasks whose lease expired
	// before Now, oldest expiry first, leaving out tasks of the types in
	// ExcludeTypes. It changes nothing: the caller decides and records an
	// outcome under the expired lease via RecordOutcomes with ReapExpired
	// set.
	ExpiredLeases(ctx context.Context, p ExpiredParams) ([]Task, error)

	// PromoteDue moves up to Limit scheduled and retry_waiting tasks whose RunAt
	// is at or before Now to pending, earliest first, and returns how many.
	PromoteDue(ctx context.Context, p PromoteParams) (int, error)

	// NextWakeup returns the earliest RunAt among scheduled and retry_waiting
	// tasks and the earliest lease expiry among running tasks (zero when
	// none), so schedulers can sleep exactly until there is work. The lease
	// expiry leaves out the tasks of the types in p.ExcludeTypes.
	NextWakeup(ctx context.Context, p WakeupParams) (Wakeup, error)

	// GetTask returns one task or ErrNotFound.
	GetTask(ctx context.Context, id string) (Task, error)
	// ListAttempts returns a task's history in order (ErrNotFound for an
	// unknown task).
	ListAttempts(ctx context.Context, taskID string) ([]Attempt, error)
	// ListTasks returns a page of tasks, newest id first, and the cursor of the
	// next page ("" when there is none).
	ListTasks(ctx context.Context, p ListParams) ([]Task, string, error)

	// CancelTask moves a scheduled, pending, retry_waiting or running task to
	// cancelled (dropping its lease). Any other state is a *ConflictError.
	CancelTask(ctx context.Context, p CancelParams) (Task, error)
	// RetryTask puts a dead or cancelled task back to pending with its attempt
	// count, errors, first-failure time and dead reason reset and its
	// EffectivePrio back to Priority; the history is kept. Any other state is
	// a *ConflictError.
	RetryTask(ctx context.Context, p RetryParams) (Task, error)

	// ListDead lists dead tasks matching the filter, newest id first.
	ListDead(ctx context.Context, p DeadFilter) ([]Task, string, error)
	// DeadSummary counts the dead tasks matching p grouped by type, last
	// error code (NULL and '' are one group, "") and dead reason, largest
	// group first, then by type, code and reason in byte order. It returns
	// at most p.Limit groups, with the totals of all of them.
	DeadSummary(ctx context.Context, p SummaryParams) (Summary, error)
	// RedriveDead retries (as RetryTask) up to Limit dead tasks matching the
	// filter and returns how many moved. A backend may take them in
	// several transactions (both do, 500 tasks each); with an error it
	// returns how many moved in transactions that committed before it, 0
	// when none did.
	RedriveDead(ctx context.Context, p DeadFilter) (int, error)
	// PurgeDead deletes dead tasks matching the filter (and their history)
	// and returns how many were deleted; with an error, how many were
	// deleted by transactions that committed before it.
	PurgeDead(ctx context.Context, p DeadFilter) (int, error)

	// DeleteFinished enforces retention: it deletes up to Limit (0 = no
	// limit) tasks (with their history) per class whose UpdatedAt is before
	// the given cut-offs and reports exactly how many of each were deleted.
	// A backend may take them in several transactions (both do, 1,000
	// tasks per class each); with an error it returns what transactions
	// that committed before it deleted. In the same transaction as each
	// deletion it adds the tasks to the per-type totals that Stats reports
	// (TypeStats.RetentionDeleted), so a deletion is never uncounted.
	DeleteFinished(ctx context.Context, p RetentionParams) (RetentionResult, error)

	// Stats returns per-type counts by state and attempt counts since Since.
	Stats(ctx context.Context, p StatsParams) ([]TypeStats, error)

	// PutType stores (inserts or replaces) a type's configuration; it must
	// pass CheckTypeConfig (ErrInvalid otherwise).
	PutType(ctx context.Context, t TypeConfig, now time.Time) (TypeConfig, error)
	// GetType returns a type's configuration or ErrNotFound.
	GetType(ctx context.Context, typ string) (TypeConfig, error)
	// ListTypes returns all configured types ordered by name.
	ListTypes(ctx context.Context) ([]TypeConfig, error)

	// AcquireLeader takes or renews the named leadership lease for NodeID
	// until Now+TTL if it is free, expired, or already held by NodeID. It
	// returns the lease as it stands after the call; the caller leads iff
	// lease.NodeID == NodeID. Now is the caller's: every caller must take it
	// from one clock (the engine uses DatabaseClock when the store has it).
	AcquireLeader(ctx context.Context, p LeaderParams) (Lease, error)
	// ReleaseLeader gives up the named lease if NodeID holds it.
	ReleaseLeader(ctx context.Context, p LeaderParams) error
	// GetLeader returns the named lease as stored, expired or not (the
	// caller judges its expiry on the clock it was written at), or
	// ErrNotFound when no one holds it. It writes nothing.
	GetLeader(ctx context.Context, name string) (Lease, error)
	// HeartbeatNode upserts a node's registry row with LastSeen = now.
	HeartbeatNode(ctx context.Context, n Node, now time.Time) error
	// ListNodes lists registered nodes seen at or after since.
	ListNodes(ctx context.Context, since time.Time) ([]Node, error)
	// PruneNodes deletes the registry rows of the nodes last seen before
	// p.SeenBefore (a zero SeenBefore deletes nothing) and reports how
	// many it deleted.
	PruneNodes(ctx context.Context, p PruneNodesParams) (int, error)

	// SchemaVersion reports the applied schema version and the newest version
	// this binary knows.
	SchemaVersion(ctx context.Context) (applied, known int, err error)
	// Ping checks the database is reachable and accepts writes: a database
	// that answers but refuses writes (a read-only replica, a primary
	// demoted by a failover) fails with ErrUnavailable.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// Notifier is implemented by backends that can tell other processes that
// tasks may have become due (PostgreSQL LISTEN/NOTIFY). Notifications only
// speed things up: correctness never depends on receiving them.
type Notifier interface {
	// Wakeups returns a channel that receives a value whenever another
	// process inserted, promoted, released or manually retried (RetryTask,
	// RedriveDead) tasks, or recorded a retry with a new due time (which
	// the scheduler, on whichever node it runs, must wake up for). It is
	// closed when ctx is done (at once for a nil ctx). Lost notifications (for example across a
	// reconnect) are allowed.
	Wakeups(ctx context.Context) <-chan struct{}
}

// CancelNotifier is implemented by backends that tell every process when a
// running task was cancelled, so that the process running its handler stops
// it at once rather than at its next heartbeat (which finds the lease gone).
// Like wake-ups, delivery is best effort.
type CancelNotifier interface {
	// Cancellations returns a channel that receives the task and lease of
	// every running task cancelled by any process while ctx lasts (and
	// while the store's wake-up listener runs). It is closed when ctx is
	// done (at once for a nil ctx) or the store closes. Values may be dropped when the receiver
	// falls behind.
	Cancellations(ctx context.Context) <-chan LeaseRef
}

// GroupCommitter is implemented by backends that fold concurrent writes into
// shared transactions themselves (SQLite's single writer commits every
// queued write in one transaction). The engine then lets more enqueue
// batches commit at once; on other backends fewer, larger batches are
// cheaper.
type GroupCommitter interface {
	GroupCommit() bool
}

// GroupCounter is implemented by group-committing backends that count their
// shared transactions, for benchmarks and operators.
type GroupCounter interface {
	GroupStats() GroupStats
}

// GroupStats count the shared write transactions of a store since it
// opened: Writes calls were committed in Groups transactions.
type GroupStats struct {
	Groups, Writes int64
}

// NewTask is a task to insert. ID is chosen by the caller.
type NewTask struct {
	ID             string
	Type           string
	Payload        json.RawMessage
	Priority       int
	MaxAttempts    int
	IdempotencyKey string    // "" = none
	RunAt          time.Time // zero = Now
	// Lease, when set, inserts a task that is due at once already leased
	// (direct dispatch to a worker that has a free slot): it starts running
	// with Attempt 1, the given LeaseID, LeaseExpiresAt = Now+Lease.Duration,
	// WorkerID and StartedAt = Now. It is ignored for a task that starts
	// scheduled and for a duplicate idempotency key (the existing task is
	// returned as it is).
	Lease *NewLease
}

// NewLease leases a task at insert time. LeaseID must be unique, like the
// lease ids FetchTasks grants.
type NewLease struct {
	LeaseID  string
	WorkerID string
	Duration time.Duration
}

// InsertParams is the input of InsertTasks.
type InsertParams struct {
	Tasks []NewTask
	Now   time.Time
}

// InsertResult is the outcome of inserting one task.
type InsertResult struct {
	Task      Task
	Duplicate bool // an existing task with the same idempotency key was returned
}

// FetchParams is the input of FetchTasks.
type FetchParams struct {
	Types         []string // empty = any type
	Limit         int
	WorkerID      string
	LeaseDuration time.Duration
	Now           time.Time
	// MaxBytes bounds the payload bytes of a fetch (0 = no bound; negative
	// is ErrInvalid): the tasks are leased in fetch order, stopping before
	// the task whose payload would take the batch past MaxBytes, but at
	// least one task is leased, however large, so that any task can be
	// leased. Tasks past the cut are not leased or changed: they stay
	// pending for the next fetch.
	MaxBytes int
}

// Outcome is the decided result of one leased attempt.
type Outcome struct {
	TaskID  string
	LeaseID string
	// State is the new state: succeeded, retry_waiting, dead, or pending to
	// release the lease without counting the attempt (graceful shutdown).
	State State
	// RunAt is when a retry_waiting task becomes due. A retry_waiting
	// outcome whose RunAt is not after Now is stored as pending directly.
	// A release (pending) with a RunAt after Now is a delayed release: the
	// task waits as retry_waiting until RunAt, the attempt not counted and
	// nothing else changed, as for a release.
	RunAt time.Time
	// EffectivePrio is the new ordering priority (retry_waiting only).
	EffectivePrio int
	// Error is the attempt's classified error (nil on success).
	Error *ErrorInfo
	// DeadReason is set when State is dead.
	DeadReason string
	// LastDelay is the delay chosen after this attempt.
	LastDelay time.Duration
	// Detail is extra history detail (stack, response excerpt).
	Detail string
	// ReapExpired marks the lease reaper's own outcome: it applies only to a
	// lease that has expired (before the params' Now), where any other
	// outcome applies only to an unexpired one. A heartbeat that extended
	// the lease after the reaper listed it thus wins, and the worker that
	// holds it keeps its task.
	ReapExpired bool
	// OutcomeKind is the history outcome (OutcomeSucceeded, OutcomeFailed,
	// OutcomeLeaseExpired). Releases record no history.
	OutcomeKind string
}

// OutcomeParams is the input of RecordOutcomes.
type OutcomeParams struct {
	Outcomes []Outcome
	Now      time.Time
}

// LeaseRef names one lease to extend.
type LeaseRef struct {
	TaskID    string
	LeaseID   string
	ExpiresAt time.Time
}

// ExtendParams is the input of ExtendLeases.
type ExtendParams struct {
	Leases []LeaseRef
	Now    time.Time
}

// ExpiredParams is the input of ExpiredLeases.
type ExpiredParams struct {
	Limit int
	Now   time.Time
	// ExcludeTypes leaves out the tasks of these types (at most
	// MaxExcludeTypes distinct names): a reaper that cannot decide a type's
	// tasks for now lists past them instead of getting the same batch back.
	ExcludeTypes []string
}

// PromoteParams is the input of PromoteDue.
type PromoteParams struct {
	Limit int
	Now   time.Time
}

// WakeupParams is the input of NextWakeup.
type WakeupParams struct {
	// ExcludeTypes leaves the leases of tasks of these types (at most
	// MaxExcludeTypes distinct names) out of NextLeaseExpiry: the reaper
	// passes over them for now (ExpiredParams.ExcludeTypes), and their past
	// expiry would hide the next lease it can reap.
	ExcludeTypes []string
}

// Wakeup holds the next times a scheduler has work.
type Wakeup struct {
	NextRunAt       time.Time // earliest scheduled/retry_waiting RunAt; zero = none
	NextLeaseExpiry time.Time // earliest running lease expiry; zero = none
}

// ListParams filters ListTasks.
type ListParams struct {
	Type   string  // "" = any
	States []State // empty = any
	Limit  int
	Cursor string // from a previous page
	// MaxBytes bounds the payload bytes of a page (0 = no bound; negative
	// is ErrInvalid): a page holds the next tasks whose payloads total at
	// most MaxBytes, but always at least one task, however large, so that
	// paging progresses. A page cut short by it has a next cursor that
	// continues right after its last task.
	MaxBytes int
}

// CancelParams is the input of CancelTask.
type CancelParams struct {
	ID  string
	Now time.Time
}

// RetryParams is the input of RetryTask.
type RetryParams struct {
	ID  string
	Now time.Time
}

// DeadFilter selects dead tasks. Zero fields do not filter.
type DeadFilter struct {
	Type      string
	ErrorCode string
	// NoErrorCode selects only tasks whose last error has no code (the
	// summary's group with an empty ErrorCode); with ErrorCode set too,
	// nothing matches.
	NoErrorCode bool
	Reason      string
	Since       time.Time // died (UpdatedAt) at or after
	Before      time.Time // died before (purge's older_than)
	IDs         []string
	Limit       int    // 0 = no limit for redrive/purge; list requires > 0
	Cursor      string // ListDead only
	Now         time.Time
	// MaxBytes bounds the payload bytes of a ListDead page as
	// ListParams.MaxBytes does (0 = no bound); redrive and purge ignore it.
	MaxBytes int
}

// SummaryParams is the input of DeadSummary. Its fields select dead tasks
// as the DeadFilter fields of the same names do (empty: no condition), so
// that a summary counts what a redrive or purge with that filter would
// take.
type SummaryParams struct {
	Since       time.Time // died (UpdatedAt) at or after; zero = all
	Type        string
	ErrorCode   string
	NoErrorCode bool
	Reason      string
	// Limit bounds the groups returned (0 = all of them). Error codes are
	// whatever workers report, so the number of groups has no bound of its
	// own.
	Limit int
}

// Summary is the answer of DeadSummary.
type Summary struct {
	// Groups are the largest groups, at most SummaryParams.Limit of them.
	Groups []DeadGroup
	// GroupCount is the number of groups, those past the limit included.
	GroupCount int
	// TaskCount is the number of dead tasks in all the groups.
	TaskCount int
}

// DeadGroup is one row of the DLQ summary.
type DeadGroup struct {
	Type      string
	ErrorCode string
	Reason    string
	Count     int
	Oldest    time.Time
	Newest    time.Time
}

// PruneNodesParams is the input of PruneNodes.
type PruneNodesParams struct {
	// SeenBefore is the cut-off: rows last seen strictly before it go.
	SeenBefore time.Time
}

// RetentionParams is the input of DeleteFinished. A zero cut-off deletes
// nothing of that class.
type RetentionParams struct {
	SucceededBefore time.Time
	CancelledBefore time.Time
	DeadBefore      time.Time
	Limit           int
}

// RetentionResult counts what DeleteFinished deleted.
type RetentionResult struct {
	Succeeded int
	Cancelled int
	Dead      int
}

// StatsParams is the input of Stats.
type StatsParams struct {
	Since time.Time // attempt counts consider attempts finished at or after Since
}

// TypeStats are the statistics of one task type.
type TypeStats struct {
	Type          string
	Counts        map[State]int
	FirstAttempts int // attempts numbered 1 finished since Since
	Retries       int // attempts numbered > 1 finished since Since
	Failures      int // failed or lease-expired attempts since Since
	// RetentionDeleted counts, by final state, the tasks of this type that
	// DeleteFinished has deleted since the database was created (nil when
	// none). PurgeDead, an operator's explicit request, is not counted.
	// A type appears in Stats while it has tasks or such a count.
	RetentionDeleted map[State]int
}

// LeaderParams is the input of AcquireLeader and ReleaseLeader.
type LeaderParams struct {
	Name   string
	NodeID string
	TTL    time.Duration
	Now    time.Time
}
