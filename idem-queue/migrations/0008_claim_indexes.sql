-- Waiting and running jobs in indexes of their own. `q_ready` held both, in one order (a queue's
-- jobs by priority, then `available_at`), and a running job's entry sat at its lease's end:
-- within its priority, after the waiting jobs. Once a priority's waiting jobs were all taken, a
-- claim for the next priority read past every entry its running and just-finished jobs left
-- (only VACUUM removes them), so a queue with priorities claimed more slowly than one without.
--
-- Now `q_waiting` holds waiting jobs only, and a claim leaves it; `q_leases` holds running jobs
-- by lease end, which a claim that looks for lapsed ones (their workers stopped) reads, and
-- which counts the jobs of a queue running now (its global limit).
--
-- Building the two indexes blocks writes to the queue's table until this migration commits
-- (seconds on a table of millions of kept jobs; purge finished jobs first to shorten it).
-- Workers of an older version claim through `q_ready` and read the whole table without it:
-- stop them before migrating, or replace them right after.
CREATE INDEX IF NOT EXISTS "__IDEM_TABLE___q_leases" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    (queue, available_at)
    WHERE state = 'running';
CREATE INDEX IF NOT EXISTS "__IDEM_TABLE___q_waiting" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    (queue, priority DESC, available_at)
    WHERE state = 'queued';
DROP INDEX IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_ready";
