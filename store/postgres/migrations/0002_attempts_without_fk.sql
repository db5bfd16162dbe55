-- retryq schema, version 2.
-- The attempts history no longer references tasks through a foreign key:
-- its rows are only ever written from the task row being updated in the
-- same statement (so they cannot dangle), and the referential check cost
-- a row lock and a trigger per recorded attempt, a tenth of an outcome's
-- cost. Deleting a task now deletes its history explicitly (retention,
-- purge), in the same statement.
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_task_id_fkey;
