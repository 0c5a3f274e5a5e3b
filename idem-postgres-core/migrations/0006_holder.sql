-- Who holds a claim: the host and process id of the run that made it (`host:pid`, set by the
-- runtime, see `idem_core::holder`), or a queue worker's name for a job's record. Operators read
-- it (`idem list --state stale` names the process that died). NULL for records claimed before.
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE__" ADD COLUMN holder text;
