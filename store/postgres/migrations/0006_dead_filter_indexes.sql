-- retryq schema, version 6.
-- ListDead reads dead tasks in id order below the probe's edge (see
-- probePage), comparing and ordering ids under "POSIX" (byte order, as the
-- column's "C", but a collation the primary key does not have, so that no
-- plan walks the primary key for them). These indexes give that order, so
-- a page costs the rows it returns: the old tasks_dead_idx (type, id) did
-- not, and every matching dead task was read and sorted for a page (1M
-- tasks, 50,000 dead among them: 74-185 ms unfiltered, 100-150 ms for an
-- error code matching none). One per filter: none, type, error code (as
-- the filters compare it, NULL as ''), reason. Partial on dead tasks: only
-- the rare moves to and from dead write them.
DROP INDEX tasks_dead_idx;
CREATE INDEX tasks_dead_idx ON tasks (type, id COLLATE "POSIX")
    WHERE state = 'dead';
CREATE INDEX tasks_dead_id_idx ON tasks (id COLLATE "POSIX")
    WHERE state = 'dead';
CREATE INDEX tasks_dead_code_idx ON tasks ((coalesce(last_error_code, '')), id COLLATE "POSIX")
    WHERE state = 'dead';
CREATE INDEX tasks_dead_reason_idx ON tasks (dead_reason, id COLLATE "POSIX")
    WHERE state = 'dead';
