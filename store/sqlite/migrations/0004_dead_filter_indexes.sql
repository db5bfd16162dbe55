-- retryq schema, version 4.
-- ListDead filtered by type, last error code or dead reason: each reads a
-- range of its own index in id order, so a page costs the rows it returns,
-- not every dead task (the walk of tasks_dead_id read them all when the
-- filter matched few: 112 ms for an error code matching none among 50,000
-- dead tasks of 1M). Partial on dead tasks: only the rare moves to and
-- from dead write them. The error code is indexed as the filters compare
-- it, with NULL (no last error) as '' (NoErrorCode).
CREATE INDEX tasks_dead_type ON tasks (type, id)
    WHERE state = 'dead';

CREATE INDEX tasks_dead_code ON tasks (coalesce(last_error_code, ''), id)
    WHERE state = 'dead';

CREATE INDEX tasks_dead_reason ON tasks (dead_reason, id)
    WHERE state = 'dead';
