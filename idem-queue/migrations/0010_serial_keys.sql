-- A row per serial key naming the job that holds it: the last job of the key a claim took
-- (`holder`), and the transaction of that claim (`xact`). A claim reads the queue on its
-- statement's snapshot, which may predate another claim of the key: a job of the key enqueued
-- and claimed meanwhile is invisible to it. Every claim of a serial job therefore also writes
-- its key's row here, and writing the row takes its lock and reads its newest version; the claim
-- takes the job only if the row names the same job, or if the claim that wrote the row is
-- visible on its own snapshot and the holder it names no longer runs on a live lease. Two claims
-- of a key's jobs so meet on one row whatever the order their jobs' enqueues committed in, as
-- graphile-worker's job queues meet on their queue's row.
CREATE TABLE IF NOT EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___queue_serial" (
    serial_key text PRIMARY KEY,
    holder     text NOT NULL,
    xact       xid8 NOT NULL
);

-- A key whose job runs now is held by it: workers of an earlier version wrote no rows.
INSERT INTO "__IDEM_SCHEMA__"."__IDEM_TABLE___queue_serial" (serial_key, holder, xact)
SELECT DISTINCT ON (serial_key) serial_key, key, pg_current_xact_id()
FROM "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
WHERE serial_key IS NOT NULL AND state = 'running'
ORDER BY serial_key, available_at DESC
ON CONFLICT (serial_key) DO NOTHING;
