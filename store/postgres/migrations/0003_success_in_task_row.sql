-- retryq schema, version 3.
-- The successful (final) attempt of a task is no longer a row of attempts:
-- the task row already holds its number, worker, start and end (attempt,
-- worker_id, started_at, updated_at) and now its detail, and ListAttempts
-- appends it to the history. On the happy path this saves an attempts row
-- and three index entries per task.
ALTER TABLE tasks ADD COLUMN success_detail text NOT NULL DEFAULT '';

UPDATE tasks AS t SET success_detail = a.detail
FROM attempts AS a
WHERE a.task_id = t.id AND a.outcome = 'succeeded' AND t.state = 'succeeded';

DELETE FROM attempts WHERE outcome = 'succeeded';
