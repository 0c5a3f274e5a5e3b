-- One job at one worker, as the queue runs it on the queue's table: the claim (the queue's own
-- `UPDATE .. WHERE key = ANY(..)` of the jobs it picked `FOR UPDATE SKIP LOCKED` from its
-- waiting jobs' index, as a claim that does not look for lapsed jobs picks them), then the job marked
-- done, each its own transaction. (The queue's real statements also claim and complete the
-- job's idempotency record, in another table; what grows is this table's index walk.)
UPDATE idem_vacuum.idem_records_queue
SET state = 'running', attempts = attempts + 1, worker = 'bench', available_at = now() + interval '5 minutes'
WHERE key = ANY(ARRAY(
    SELECT key FROM idem_vacuum.idem_records_queue
    WHERE state = 'queued' AND available_at <= now() AND queue = 'default'
    ORDER BY priority DESC, available_at LIMIT 1 FOR UPDATE SKIP LOCKED))
RETURNING key, attempts
\gset
UPDATE idem_vacuum.idem_records_queue SET state = 'done', finished_at = now(), worker = NULL
WHERE key = :key AND attempts = :attempts AND state = 'running';
