-- retryq schema, version 3.
-- Retention deletes finished tasks; the totals it deleted, per type and
-- final state, are kept here (updated in the deleting transaction) so that
-- Stats reports them on every node and across restarts: deletions are
-- counted, never silent.
CREATE TABLE retention_totals (
    type    TEXT NOT NULL,
    state   TEXT NOT NULL CHECK (state IN ('succeeded', 'cancelled', 'dead')),
    deleted INTEGER NOT NULL,
    PRIMARY KEY (type, state)
) WITHOUT ROWID;
