-- The claim's token: a random number the caller picks for one call. A claim statement whose
-- answer was lost (the connection broke after the server committed it) is sent again with the
-- same token, and finds the record it made: the call recognises its own claim instead of taking
-- it for another run's. NULL for records claimed without one (earlier versions, queue batches).
ALTER TABLE "__IDEM_SCHEMA__"."__IDEM_TABLE__" ADD COLUMN token bigint;
