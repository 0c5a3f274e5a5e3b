-- The work queue (idem_queue): one row per unit of work, keyed like idem's records, so
-- enqueueing a key twice stores it once.
--
-- Written so that it also adopts a queue table an earlier idem-store-postgres created (its
-- migration 3, this one's text): every object is created only when it is missing.
CREATE TABLE IF NOT EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___queue" (
    key          text        PRIMARY KEY,
    payload      jsonb       NOT NULL,
    -- queued: waits until available_at; running: claimed by a worker until available_at (its
    -- lease); done: finished; dead: failed max_attempts times (kept until retried or discarded).
    state        text        NOT NULL DEFAULT 'queued'
                             CHECK (state IN ('queued', 'running', 'done', 'dead')),
    -- Claims so far. Also the fence of the current claim: a worker's acknowledgement names the
    -- attempt it ran, so a worker whose lease lapsed cannot settle a newer claim.
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL CHECK (max_attempts > 0),
    -- queued: when it may run (run-after, or the next retry); running: when the lease lapses.
    available_at timestamptz NOT NULL DEFAULT now(),
    worker       text,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);

-- Workers claim through this index: unfinished rows in the order they become available. A
-- running row whose lease has lapsed is claimable again, which is how a crashed worker's items
-- come back.
CREATE INDEX IF NOT EXISTS "__IDEM_TABLE___q_avail" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue" (available_at)
    WHERE state IN ('queued', 'running');

-- Dead-letter listing and purging finished rows.
CREATE INDEX IF NOT EXISTS "__IDEM_TABLE___q_finished" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue" (state, finished_at)
    WHERE state IN ('done', 'dead');

-- Wakes idle workers (LISTEN idem_queue) when work is inserted. Notifications are sent at commit,
-- so work enqueued in a transaction is announced only if the transaction commits; PostgreSQL
-- folds identical notifications of one transaction into one.
CREATE OR REPLACE FUNCTION "__IDEM_SCHEMA__"."__IDEM_TABLE___q_notify"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('idem_queue', '__IDEM_SCHEMA__.__IDEM_TABLE__');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS "__IDEM_TABLE___q_notify" ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue";
CREATE TRIGGER "__IDEM_TABLE___q_notify"
    AFTER INSERT ON "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    FOR EACH ROW EXECUTE FUNCTION "__IDEM_SCHEMA__"."__IDEM_TABLE___q_notify"();
