-- Autovacuum for the work queue's table once dead row versions reach a hundredth of its rows,
-- not PostgreSQL's default fifth (`autovacuum_vacuum_scale_factor`). A claim reads the
-- `available_at` index from its start, past the entries of every job claimed since the table
-- was last vacuumed (only VACUUM removes them), so its cost grows with the jobs run since then;
-- and finished jobs stay in the table until they are purged, so under the default, the more a
-- queue keeps, the longer it goes between vacuums, and the slower its claims grow meanwhile.
-- Vacuumed at a hundredth, a queue that keeps many finished jobs claims at a steady cost.
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
