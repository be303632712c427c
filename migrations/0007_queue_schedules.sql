-- Schema version 7 (issue 31): periodic jobs, a new table (schema.sql says what each column
-- means); nothing existing changes.
CREATE TABLE queue_schedules (
    tenant_id     TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    queue         TEXT    NOT NULL,
    cron          TEXT,
    time_zone     TEXT,
    interval_ms   INTEGER CHECK (interval_ms >= 1000),
    backfill_max  INTEGER NOT NULL CHECK (backfill_max BETWEEN 1 AND 100),
    template      TEXT    NOT NULL,
    next_tick_ms  INTEGER,
    last_tick_ms  INTEGER,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    CHECK ((cron IS NULL) <> (interval_ms IS NULL)),
    CHECK ((cron IS NULL) = (time_zone IS NULL)),
    PRIMARY KEY (tenant_id, name)
) WITHOUT ROWID;

-- The schedules due next, across tenants (what the store's sweep reads).
CREATE INDEX queue_schedules_due ON queue_schedules (next_tick_ms)
    WHERE next_tick_ms IS NOT NULL;

-- A tenant's schedules due next (what a firing for one tenant reads).
CREATE INDEX queue_schedules_tenant_due ON queue_schedules (tenant_id, next_tick_ms)
    WHERE next_tick_ms IS NOT NULL;

-- The next tick of a queue's schedules (what an idle worker pool sleeps until).
CREATE INDEX queue_schedules_queue ON queue_schedules (tenant_id, queue, next_tick_ms);
