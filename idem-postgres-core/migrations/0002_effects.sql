-- The effect journal: one row per named effect of a key's runs. It outlives a release of the
-- key (a retry must see what the failed run did) and is purged by its own `expires_at`.
CREATE TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___effects" (
    key         text        NOT NULL,
    effect      text        NOT NULL,
    -- 0: started (intent recorded, at-most-once), 1: done.
    state       smallint    NOT NULL,
    output      bytea,
    -- The fence of the run that wrote it.
    fence       bigint      NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (key, effect)
);

CREATE INDEX "__IDEM_TABLE___effects_expires_at"
    ON "__IDEM_SCHEMA__"."__IDEM_TABLE___effects" (expires_at);
