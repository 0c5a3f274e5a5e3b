-- idem's records: one row per key. `__IDEM_SCHEMA__` and `__IDEM_TABLE__` are replaced with the
-- store's validated schema and table names when the migration runs (PgStore::migrate).

-- Fencing tokens come from one sequence, so a key that is released or purged and claimed again
-- still gets a token larger than any earlier run of it.
CREATE SEQUENCE "__IDEM_SCHEMA__"."__IDEM_TABLE___fence";

CREATE TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE__" (
    key          text        PRIMARY KEY,
    fence        bigint      NOT NULL,
    fingerprint  text,
    -- NULL while the work is in progress.
    completed_at timestamptz,
    -- In progress: when the lease lapses. Completed: when `keep` ends. Either way, the row no
    -- longer counts once this is in the past, and purge may delete it.
    expires_at   timestamptz NOT NULL,
    -- The replayed output, when the handler uses `replay`.
    output       bytea
);

-- Purge walks expired rows in bounded batches through this index.
CREATE INDEX "__IDEM_TABLE___expires_at" ON "__IDEM_SCHEMA__"."__IDEM_TABLE__" (expires_at);
