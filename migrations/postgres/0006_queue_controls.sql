-- Schema version 6 on PostgreSQL (issue 31): an item's run timeout, tags and metadata
-- (columns added in place, NULL for every existing item: no rewrite; and the table that finds
-- items by tag), paused queues and per-queue concurrency limits,
-- two columns of the per-queue settings, as migrations/0006_queue_controls.sql makes them on
-- SQLite (schema_postgres.sql's queue_settings says what they mean). Every row keeps its
-- item_events setting, not paused and without a limit.
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
