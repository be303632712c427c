-- Schema version 7 on PostgreSQL (issue 29; SQLite's step changes nothing): the claim's plan cannot go
-- wrong on a table without statistics. queue_items_schedule asks, beside status = 'pending',
-- what every pending item holds (lease_expires_at_ms IS NULL, the table's check) and the
-- claim's WHERE does not: queue_items_pending is then the only index of pending items the
-- claim can read, in its order with the LIMIT on the scan (schema_postgres.sql says why).
-- An index of a store's schema, rebuilt in place: CREATE INDEX reads the pending items only.
--
-- To merge: another branch makes version 7 too (the schedules table); these two statements
-- then join that version's PostgreSQL step (or become version 8's, with a SQLite step that
-- changes nothing, as migrations/0007_claim_plan.sql is here).
DROP INDEX queue_items_schedule;
CREATE INDEX queue_items_schedule
    ON queue_items (tenant_id, queue, run_at_ms)
    WHERE status = 'pending' AND lease_expires_at_ms IS NULL;
