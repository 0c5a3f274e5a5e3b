-- Prefetching: workers claim jobs past their free slots and start each as a slot frees up. A
-- prefetched job's claim leaves `attempted_at` NULL until the job starts (the workers write it
-- then, or with its outcome). When such a job's lease lapses unstarted (its worker died first),
-- the claim that takes it over counts the lost claim in `unrun` instead of as an attempt, as do
-- claims given back (a shutdown, a key held elsewhere) and snoozes, which used to give their
-- attempt number back. A job's attempts as users see them are `attempts - unrun`, while
-- `attempts` counts every claim, only grows, and stays the fence that tells a claim's outcome
-- from any later claim's. A column with a constant default is added without rewriting the
-- table.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    ADD COLUMN IF NOT EXISTS unrun integer NOT NULL DEFAULT 0;
