-- retryq schema, version 7.
-- FetchTasks reads, for each type it fetches, that type's pending tasks in
-- fetch order from tasks_pending_type_idx, and stops after the rows it
-- leases. tasks_pending_idx held every type in one fetch order, so a fetch
-- filtered by type read every pending task of other types ahead of the
-- first match: a backlog of 200,000 tasks of one type made each fetch of
-- another type take 165 ms. The new index replaces it (two pending indexes
-- would write two entries for every task inserted or promoted pending).
CREATE INDEX tasks_pending_type_idx ON tasks (type, effective_prio DESC, run_at, id)
    WHERE state = 'pending';
DROP INDEX tasks_pending_idx;
