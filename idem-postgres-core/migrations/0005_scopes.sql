-- Scopes: every record belongs to a scope, stored apart from its key (a column, never a prefix
-- a key template could forge), so the same key in two scopes names two records: two handlers
-- with one template, or a handler and a queue job, never share one. Records written before
-- this migration are in the scope '' (which no caller can name: scopes are not empty), and
-- claims in any scope still find them until they expire, so upgrading never turns done work
-- into new work.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE__" ADD COLUMN scope text NOT NULL DEFAULT '';
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE__" DROP CONSTRAINT "__IDEM_TABLE___pkey";
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE__" ADD PRIMARY KEY (key, scope);

ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___effects" ADD COLUMN scope text NOT NULL DEFAULT '';
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___effects" DROP CONSTRAINT "__IDEM_TABLE___effects_pkey";
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE___effects" ADD PRIMARY KEY (key, scope, effect);
