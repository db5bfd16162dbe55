-- retryq schema, version 4.
-- Every failed attempt writes one attempts row, and each of its btree
-- entries is a WAL record and a page change in the outcome's commit.
-- Attempt rows are only ever read through their task (task_id, seq), never
-- by seq alone, so the primary key's index is dropped; seq stays an
-- identity column, unique by construction and the history's order.
-- The finished_at index serves only the statistics window (recent
-- attempts); rows arrive in finished_at order, so a BRIN index answers it
-- at a tiny fraction of a btree's upkeep.
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_pkey;
DROP INDEX IF EXISTS attempts_finished_idx;
CREATE INDEX attempts_finished_brin ON attempts USING brin (finished_at) WITH (autosummarize = on);
