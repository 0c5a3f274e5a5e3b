-- The reason an operator gave when cancelling a running job (`Queue::cancel`). The job ends
-- `cancelled` when its handler stops, and that reason, not how the handler ended, is its last
-- error; the attempt log keeps both. A nullable column is added without rewriting the table.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___queue"
    ADD COLUMN IF NOT EXISTS cancel_reason text;
