-- A schedule's latest pause: ticks after `paused_at` (and, once resumed, up to `resumed_at`)
-- are passed over, neither run nor missed; ticks before it are enqueued or counted as usual,
-- even when the pause came before any scheduler reached them.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___schedules"
    ADD COLUMN IF NOT EXISTS paused_at timestamptz,
    ADD COLUMN IF NOT EXISTS resumed_at timestamptz;
