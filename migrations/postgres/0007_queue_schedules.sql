-- Schema version 7 on PostgreSQL, as migrations/0007_queue_schedules.sql makes it on SQLite:
-- periodic jobs, a new table (issue 31). And, on PostgreSQL only (issue 29), the claim's plan
-- cannot go wrong on a table without statistics: queue_items_schedule asks, beside
-- status = 'pending', what every pending item holds (lease_expires_at_ms IS NULL, the table's
-- check) and the claim's WHERE does not, so queue_items_pending is the only index of pending
-- items the claim can read, in its order with the LIMIT on the scan (schema_postgres.sql says
-- why). The index is rebuilt in place: CREATE INDEX reads the pending items only.
CREATE TABLE queue_schedules (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    name          TEXT COLLATE "C" NOT NULL,
    queue         TEXT COLLATE "C" NOT NULL,
    cron          TEXT COLLATE "C",
    time_zone     TEXT COLLATE "C",
    interval_ms   BIGINT CHECK (interval_ms >= 1000),
    backfill_max  BIGINT NOT NULL CHECK (backfill_max BETWEEN 1 AND 100),
    template      TEXT COLLATE "C" NOT NULL,
    next_tick_ms  BIGINT,
    last_tick_ms  BIGINT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    CHECK ((cron IS NULL) <> (interval_ms IS NULL)),
    CHECK ((cron IS NULL) = (time_zone IS NULL)),
    PRIMARY KEY (tenant_id, name)
);

-- The schedules due next, across tenants (what the store's sweep reads).
CREATE INDEX queue_schedules_due ON queue_schedules (next_tick_ms)
    WHERE next_tick_ms IS NOT NULL;

-- A tenant's schedules due next (what a firing for one tenant reads).
CREATE INDEX queue_schedules_tenant_due ON queue_schedules (tenant_id, next_tick_ms)
    WHERE next_tick_ms IS NOT NULL;

-- The next tick of a queue's schedules (what an idle worker pool sleeps until).
CREATE INDEX queue_schedules_queue ON queue_schedules (tenant_id, queue, next_tick_ms);

DROP INDEX queue_items_schedule;
CREATE INDEX queue_items_schedule
    ON queue_items (tenant_id, queue, run_at_ms)
    WHERE status = 'pending' AND lease_expires_at_ms IS NULL;
