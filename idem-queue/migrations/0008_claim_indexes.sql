-- no-transaction
-- online unless empty: "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
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
-- Built concurrently, outside a transaction: jobs are enqueued, claimed and settled while the
-- indexes are built (a build waits for transactions already running to end, and reads the
-- table twice). A build that stopped midway (the process died) leaves an invalid index, which
-- this migration drops and builds again when it runs again. Workers of an older version claim
-- through `q_ready`, which is dropped last: they go on working beside the new ones, reading
-- more of the table for each claim, until they are replaced.
DROP INDEX CONCURRENTLY IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_leases_building";
CREATE INDEX CONCURRENTLY "__IDEM_TABLE___q_leases_building" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    (queue, available_at)
    WHERE state = 'running';
DROP INDEX CONCURRENTLY IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_waiting_building";
CREATE INDEX CONCURRENTLY "__IDEM_TABLE___q_waiting_building" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    (queue, priority DESC, available_at)
    WHERE state = 'queued';
DROP INDEX CONCURRENTLY IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_leases";
ALTER INDEX "__IDEM_SCHEMA__"."__IDEM_TABLE___q_leases_building" RENAME TO "__IDEM_TABLE___q_leases";
DROP INDEX CONCURRENTLY IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_waiting";
ALTER INDEX "__IDEM_SCHEMA__"."__IDEM_TABLE___q_waiting_building" RENAME TO "__IDEM_TABLE___q_waiting";
DROP INDEX CONCURRENTLY IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_ready";
