-- The attempt log: when the current attempt started (`attempted_at`, set by every claim), and
-- each ended attempt that did not complete (`attempt_log`: a JSON array of {attempt,
-- started_at, ended_at, outcome, error}, the latest 20), so an operator sees every attempt's
-- start, end, outcome and error (`idem jobs show`). A completed attempt is the row itself:
-- `attempted_at` to `finished_at`. Both columns are new and unindexed: adding them rewrites
-- nothing, and writing them keeps a row's updates in place.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    ADD COLUMN IF NOT EXISTS attempted_at timestamptz,
    ADD COLUMN IF NOT EXISTS attempt_log jsonb NOT NULL DEFAULT '[]';
