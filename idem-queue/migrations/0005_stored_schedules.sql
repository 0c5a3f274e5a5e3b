-- Schedules stored in the database rather than declared in code (`idem schedules add`): their
-- definition (expression, zone, catch-up, the job's payload), which `idem worker` reads and
-- fires. NULL for a schedule a program declares.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___schedules"
    ADD COLUMN IF NOT EXISTS stored jsonb;
