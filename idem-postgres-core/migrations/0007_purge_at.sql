-- When purge next looks at a record, in place of an index on `expires_at`. A completion
-- rewrites `expires_at` (from the lease's end to the end of `keep`), and while an index covered
-- that column each completion wrote a new version of the row into every index: no HOT update.
-- `purge_at` is set with `expires_at` when a record is claimed and is not changed by a
-- completion (unless `keep` ends before the lease would have: then it moves to that earlier
-- end), so the completion rewrites the row in place. Purge takes the records whose `purge_at`
-- has passed: it deletes those that expired and moves the others' `purge_at` to their
-- `expires_at`. So every expired record is due (`purge_at <= expires_at`, or in the past).
--
-- Existing records get the time of this migration (a constant default: no table rewrite), so
-- the first purge after it looks at each of them once.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE__"
    ADD COLUMN purge_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX "__IDEM_TABLE___purge_at" ON "__IDEM_SCHEMA__"."__IDEM_TABLE__" (purge_at);
DROP INDEX "__IDEM_SCHEMA__"."__IDEM_TABLE___expires_at";
