-- Schema version 6 on PostgreSQL (issue 31), as migrations/0006_queue_controls.sql makes it on
-- SQLite (schema_postgres.sql says what each part means): an item's run timeout, tags and
-- metadata (columns added in place, NULL for every existing item: no rewrite), the tables of
-- item tags and of keys unique over a window, and paused queues and per-queue concurrency
-- limits (two columns of the per-queue settings; every row keeps its item_events setting, not
-- paused and without a limit).
ALTER TABLE queue_settings
    ADD COLUMN paused BIGINT NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    ADD COLUMN concurrency_max BIGINT CHECK (concurrency_max >= 1);
ALTER TABLE queue_items ADD COLUMN run_timeout_ms BIGINT CHECK (run_timeout_ms >= 1);
ALTER TABLE queue_items ADD COLUMN tags TEXT COLLATE "C";
ALTER TABLE queue_items ADD COLUMN metadata TEXT COLLATE "C";

CREATE TABLE queue_item_tags (
    tenant_id TEXT COLLATE "C" NOT NULL,
    queue     TEXT COLLATE "C" NOT NULL,
    tag       TEXT COLLATE "C" NOT NULL,
    item_id   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, queue, tag, item_id)
);

CREATE TABLE queue_unique (
    tenant_id       TEXT COLLATE "C" NOT NULL,
    queue           TEXT COLLATE "C" NOT NULL,
    unique_key      TEXT COLLATE "C" NOT NULL,
    window_start_ms BIGINT  NOT NULL,
    item_id         TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, queue, unique_key, window_start_ms)
);

CREATE INDEX queue_unique_item ON queue_unique (tenant_id, item_id);
