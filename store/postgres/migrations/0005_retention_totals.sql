-- retryq schema, version 5.
-- Retention deletes finished tasks; the totals it deleted, per type and
-- final state, are kept here (updated in the deleting transaction) so that
-- Stats reports them on every node and across restarts and leader changes:
-- deletions are counted, never silent.
CREATE TABLE retention_totals (
    type    text COLLATE "C" NOT NULL,
    state   text NOT NULL CHECK (state IN ('succeeded', 'cancelled', 'dead')),
    deleted bigint NOT NULL,
    PRIMARY KEY (type, state)
);
