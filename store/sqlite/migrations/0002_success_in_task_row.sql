-- retryq schema, version 2.
-- The successful (final) attempt of a task is no longer a row of attempts:
-- the task row already holds its number, worker, start and end (attempt,
-- worker_id, started_at, updated_at) and now its detail, and ListAttempts
-- appends it to the history. Half the rows written per task on the happy
-- path go away (an attempts row and two index entries).
ALTER TABLE tasks ADD COLUMN success_detail TEXT NOT NULL DEFAULT '';

UPDATE tasks SET success_detail = a.detail
FROM (SELECT task_id, detail FROM attempts WHERE outcome = 'succeeded') AS a
WHERE tasks.id = a.task_id AND tasks.state = 'succeeded';

DELETE FROM attempts WHERE outcome = 'succeeded';
