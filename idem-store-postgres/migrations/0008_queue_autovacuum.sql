-- Autovacuum for the work queue's table once dead row versions reach a hundredth of its rows,
-- not PostgreSQL's default fifth (`autovacuum_vacuum_scale_factor`). A claim reads the
-- `available_at` index from its start, past the entries of every job claimed since the table
-- was last vacuumed (only VACUUM removes them), so its cost grows with the jobs run since then;
-- and finished jobs stay in the table until they are purged, so under the default, the more a
-- queue keeps, the longer it goes between vacuums. Measured (BENCHMARKS.md, "The queue table and
-- VACUUM"): with 2,000,000 finished jobs kept, one worker running 1,000 jobs/s, a job's claim
-- and completion took 0.11 ms at first and 0.36 ms 150,000 jobs later, autovacuum not yet
-- come; with this setting it came every minute and they stayed between 0.13 and 0.24 ms.
--
-- Setting a storage parameter takes a SHARE UPDATE EXCLUSIVE lock, which does not block reads
-- or writes. A value already set on the table (an operator's own) is left alone.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_class, unnest(reloptions) AS option
        WHERE pg_class.oid = '"__IDEM_SCHEMA__"."__IDEM_TABLE___queue"'::regclass
          AND option LIKE 'autovacuum_vacuum_scale_factor=%'
    ) THEN
        ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
            SET (autovacuum_vacuum_scale_factor = 0.01);
    END IF;
END
$$;
