-- Control over which job runs when: named queues (`queue`, served by workers that name it),
-- priorities within a queue (higher first, then by `available_at`), serial keys (jobs that share
-- one run one at a time, in the order they were enqueued), a job's result (its handler's `Ok`
-- value, JSON), cancellation (`cancelled`: it will not run again; a running job is asked first,
-- through `cancel_requested_at`), the `snoozed` outcome in the attempt log, and trace context.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default',
    ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS serial_key text,
    ADD COLUMN IF NOT EXISTS result bytea,
    ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;

ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    DROP CONSTRAINT IF EXISTS "__IDEM_TABLE___queue_state_check";
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    ADD CONSTRAINT "__IDEM_TABLE___queue_state_check"
    CHECK (state IN ('queued', 'running', 'done', 'dead', 'cancelled'));

-- The claim's order: a queue's jobs by priority, then by when they became available. It
-- replaces `q_avail` (the same rows, in one queue's order), so a claim still costs one index.
CREATE INDEX IF NOT EXISTS "__IDEM_TABLE___q_ready" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    (queue, priority DESC, available_at)
    WHERE state IN ('queued', 'running');
DROP INDEX IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_avail";

-- Enqueue order, within a transaction too: a job's `created_at` is the moment its row was
-- inserted, not its transaction's start (which every row of one transaction shares).
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    ALTER COLUMN created_at SET DEFAULT clock_timestamp();

-- A serial key's unfinished jobs in enqueue order: a claim takes a key's first one only, and
-- only while no other job of the key runs. Jobs without a serial key are not in it, and cost
-- it nothing.
CREATE INDEX IF NOT EXISTS "__IDEM_TABLE___q_serial" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    (serial_key, created_at, key)
    WHERE serial_key IS NOT NULL AND state IN ('queued', 'running');

-- The finished states' index gains `cancelled`, which operators' lists read as they read
-- `done` and `dead`.
DROP INDEX IF EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___q_finished";
CREATE INDEX IF NOT EXISTS "__IDEM_TABLE___q_finished" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    (state, finished_at)
    WHERE state IN ('done', 'dead', 'cancelled');

-- A serial key's next job becomes claimable when the one before it ends: idle workers are told,
-- as they are of new work, instead of finding it at their next poll. Jobs without a serial key
-- are not announced (the condition is checked per row, and is false for them).
DROP TRIGGER IF EXISTS "__IDEM_TABLE___q_serial_notify" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue";
CREATE TRIGGER "__IDEM_TABLE___q_serial_notify"
    AFTER UPDATE OF state ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    FOR EACH ROW
    WHEN (NEW.serial_key IS NOT NULL AND OLD.state = 'running' AND NEW.state <> 'running')
    EXECUTE FUNCTION "__IDEM_SCHEMA__"."__IDEM_TABLE___q_notify"();

-- The W3C `traceparent` of the span that enqueued the job, for the job's span to link to.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    ADD COLUMN IF NOT EXISTS traceparent text;

-- HTTP jobs and their stored schedules move to the named queue `idem-http`, the only one
-- `idem worker` serves: before named queues, it ran on a table of its own, so the HTTP jobs
-- waiting there (and its schedules' next ticks) keep running after the upgrade.
UPDATE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue" SET queue = 'idem-http'
    WHERE state IN ('queued', 'running') AND payload ? 'http';
UPDATE "__IDEM_SCHEMA__"."__IDEM_TABLE___schedules"
    SET stored = stored || '{"queue": "idem-http"}'::jsonb
    WHERE stored IS NOT NULL AND NOT (stored ? 'queue') AND stored->'payload' ? 'http';
