-- 2,000,000 finished jobs kept (not yet purged) and 400,000 queued, in a queue table made by
-- idem's migrations; then a VACUUM, so every run starts from a freshly vacuumed table.
INSERT INTO idem_vacuum.idem_records_queue (key, payload, state, attempts, max_attempts, available_at, finished_at)
    SELECT 'old:' || i, to_jsonb(i), 'done', 1, 20, now() - interval '2 days', now() - interval '1 day'
    FROM generate_series(1, 2000000) i;
INSERT INTO idem_vacuum.idem_records_queue (key, payload, max_attempts, available_at)
    SELECT 'job:' || i, to_jsonb(i), 20, now() - interval '1 hour' + i * interval '1 ms'
    FROM generate_series(1, 400000) i;
VACUUM ANALYZE idem_vacuum.idem_records_queue;
