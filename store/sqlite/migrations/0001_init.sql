-- 0001_init: the initial retryq schema.
--
-- Conventions:
--   * timestamps are INTEGER unix microseconds (UTC); NULL means "zero time";
--   * durations are INTEGER nanoseconds (time.Duration);
--   * JSON documents (payload, policy, target) are BLOBs, stored byte-for-byte.
--
-- Every hot query is served by a (partial) index so that its cost is
-- proportional to the rows it touches, not to the size of the table.

CREATE TABLE tasks (
    id                 TEXT    NOT NULL PRIMARY KEY,
    type               TEXT    NOT NULL,
    payload            BLOB,
    priority           INTEGER NOT NULL DEFAULT 0,
    effective_prio     INTEGER NOT NULL DEFAULT 0,
    state              TEXT    NOT NULL,
    attempt            INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL DEFAULT 0,
    idempotency_key    TEXT,
    run_at             INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    first_failure_at   INTEGER,
    last_error_code    TEXT,  -- NULL iff the task has no last error
    last_error_message TEXT,
    last_error_class   TEXT,
    last_delay         INTEGER NOT NULL DEFAULT 0,
    dead_reason        TEXT    NOT NULL DEFAULT '',
    lease_id           TEXT,
    lease_expires_at   INTEGER,
    worker_id          TEXT    NOT NULL DEFAULT '',
    started_at         INTEGER
) STRICT;

-- FetchTasks without a type filter: walk pending tasks in dispatch order.
CREATE INDEX tasks_fetch ON tasks (effective_prio DESC, run_at, id)
    WHERE state = 'pending';

-- FetchTasks with a type filter (one index range per type).
CREATE INDEX tasks_fetch_type ON tasks (type, effective_prio DESC, run_at, id)
    WHERE state = 'pending';

-- PromoteDue and NextWakeup: earliest due scheduled/retry_waiting tasks.
CREATE INDEX tasks_due ON tasks (run_at, id)
    WHERE state IN ('scheduled', 'retry_waiting');

-- ExpiredLeases and NextWakeup: running tasks by lease expiry.
CREATE INDEX tasks_lease ON tasks (lease_expires_at, id)
    WHERE state = 'running';

-- Idempotency keys are unique among the tasks that have one.
CREATE UNIQUE INDEX tasks_idempotency ON tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- DeleteFinished (retention) and the DLQ's Since/Before filters.
CREATE INDEX tasks_finished ON tasks (state, updated_at, id)
    WHERE state IN ('succeeded', 'cancelled', 'dead');

-- ListDead: dead tasks newest id first.
CREATE INDEX tasks_dead_id ON tasks (id)
    WHERE state = 'dead';

-- DeadSummary: a covering index for the GROUP BY.
CREATE INDEX tasks_dead_group ON tasks (type, last_error_code, dead_reason, updated_at)
    WHERE state = 'dead';

-- Attempt history. The id orders the history; attempt numbers can repeat
-- after a manual retry.
CREATE TABLE attempts (
    id            INTEGER PRIMARY KEY,
    task_id       TEXT    NOT NULL,
    task_type     TEXT    NOT NULL,
    number        INTEGER NOT NULL,
    worker_id     TEXT    NOT NULL DEFAULT '',
    started_at    INTEGER,
    finished_at   INTEGER NOT NULL,
    outcome       TEXT    NOT NULL,
    error_code    TEXT,   -- NULL iff the attempt has no error
    error_message TEXT,
    error_class   TEXT,
    delay         INTEGER NOT NULL DEFAULT 0,
    detail        TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX attempts_task ON attempts (task_id, id);

-- Stats: a covering index for "attempts finished since".
CREATE INDEX attempts_finished ON attempts (finished_at, task_type, number, outcome);

CREATE TABLE task_types (
    type       TEXT    NOT NULL PRIMARY KEY,
    policy     BLOB,
    timeout    INTEGER NOT NULL DEFAULT 0,
    priority   INTEGER NOT NULL DEFAULT 0,
    target     BLOB,
    updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE nodes (
    id         TEXT    NOT NULL PRIMARY KEY,
    host       TEXT    NOT NULL DEFAULT '',
    version    TEXT    NOT NULL DEFAULT '',
    role       TEXT    NOT NULL DEFAULT '',
    started_at INTEGER,
    last_seen  INTEGER NOT NULL
) STRICT;

CREATE TABLE leader_leases (
    name       TEXT    NOT NULL PRIMARY KEY,
    node_id    TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
