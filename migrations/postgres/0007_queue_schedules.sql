-- Schema version 7 on PostgreSQL (issue 31), as migrations/0007_queue_schedules.sql makes it on
-- SQLite: periodic jobs, a new table; nothing existing changes.
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
