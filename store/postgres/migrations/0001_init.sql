-- retryq schema, version 1.
-- Text keys use the "C" collation so that ordering is bytewise, the same as
-- Go string comparison, whatever the database's default collation.

CREATE TABLE tasks (
    id                 text COLLATE "C" PRIMARY KEY,
    type               text COLLATE "C" NOT NULL,
    payload            bytea,             -- the JSON exactly as given (not jsonb)
    priority           integer NOT NULL,
    effective_prio     integer NOT NULL,
    state              text NOT NULL CHECK (state IN
                         ('scheduled','pending','running','retry_waiting','succeeded','dead','cancelled')),
    attempt            integer NOT NULL DEFAULT 0,
    max_attempts       integer NOT NULL DEFAULT 0,
    idempotency_key    text COLLATE "C",  -- NULL = none
    run_at             timestamptz NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    first_failure_at   timestamptz,
    last_error_code    text,              -- NULL = no last error
    last_error_message text,
    last_error_class   text,
    last_delay_ns      bigint NOT NULL DEFAULT 0,
    dead_reason        text NOT NULL DEFAULT '',
    lease_id           text COLLATE "C",
    lease_expires_at   timestamptz,
    worker_id          text NOT NULL DEFAULT '',
    started_at         timestamptz
);

CREATE UNIQUE INDEX tasks_idempotency_key_idx ON tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- FetchTasks order.
CREATE INDEX tasks_pending_idx ON tasks (effective_prio DESC, run_at, id)
    WHERE state = 'pending';
-- PromoteDue and NextWakeup.
CREATE INDEX tasks_due_idx ON tasks (run_at, id)
    WHERE state IN ('scheduled', 'retry_waiting');
-- ExpiredLeases and NextWakeup.
CREATE INDEX tasks_lease_idx ON tasks (lease_expires_at, id)
    WHERE state = 'running';
-- Retention (DeleteFinished) and dead-letter time filters.
CREATE INDEX tasks_finished_idx ON tasks (state, updated_at)
    WHERE state IN ('succeeded', 'cancelled', 'dead');
-- Dead-letter listing and filters (newest id first).
CREATE INDEX tasks_dead_idx ON tasks (type, id)
    WHERE state = 'dead';

CREATE TABLE attempts (
    seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id       text COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    task_type     text COLLATE "C" NOT NULL,
    number        integer NOT NULL,
    worker_id     text NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL,
    outcome       text NOT NULL,
    error_code    text,                  -- NULL = no error
    error_message text,
    error_class   text,
    delay_ns      bigint NOT NULL DEFAULT 0,
    detail        text NOT NULL DEFAULT ''
);

CREATE INDEX attempts_task_idx ON attempts (task_id, seq);
CREATE INDEX attempts_finished_idx ON attempts (finished_at);

CREATE TABLE task_types (
    type       text COLLATE "C" PRIMARY KEY,
    policy     bytea,
    timeout_ns bigint NOT NULL DEFAULT 0,
    priority   integer NOT NULL DEFAULT 0,
    target     bytea,
    updated_at timestamptz NOT NULL
);

CREATE TABLE nodes (
    id         text COLLATE "C" PRIMARY KEY,
    host       text NOT NULL,
    version    text NOT NULL,
    role       text NOT NULL,
    started_at timestamptz,
    last_seen  timestamptz NOT NULL
);

CREATE TABLE leader (
    name       text COLLATE "C" PRIMARY KEY,
    node_id    text NOT NULL,
    expires_at timestamptz NOT NULL
);
