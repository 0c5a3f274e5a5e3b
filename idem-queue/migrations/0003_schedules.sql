-- Schedules (idem_queue::Scheduler): one row per schedule a scheduler declared. Every replica
-- enqueues the same ticks (the enqueue dedupes on the tick's key); this row says which ticks
-- were considered, so that after downtime the ticks within the catch-up window are enqueued
-- once each and older ones counted as missed, and which were verified as completed.
CREATE TABLE IF NOT EXISTS "__IDEM_SCHEMA__"."__IDEM_TABLE___schedules" (
    name             text        PRIMARY KEY,
    -- What it fires on, as the code that last declared it said (shown to operators).
    spec             text        NOT NULL,
    paused           boolean     NOT NULL DEFAULT false,
    -- The latest tick enqueued or counted as missed; a new schedule starts when declared.
    last_tick        timestamptz NOT NULL,
    -- Ticks up to here were checked for a completed job.
    verified_through timestamptz NOT NULL,
    next_tick        timestamptz,
    missed           bigint      NOT NULL DEFAULT 0,
    last_missed_at   timestamptz,
    last_success_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- When a scheduler last declared it: a schedule removed from the code stops firing, and
    -- this says since when.
    seen_at          timestamptz NOT NULL DEFAULT now()
);
