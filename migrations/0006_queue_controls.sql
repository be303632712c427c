-- Schema version 6 (issue 31). Items may carry a run timeout (run_timeout_ms: a worker pool
-- fails an attempt that runs longer, as retryable), tags (found through the new table
-- queue_item_tags) and metadata: columns added in place (SQLite writes each after the last
-- column, where schema.sql has them; no row is rewritten). Keys unique over a window live in
-- the new table queue_unique. A queue may be paused (no one claims its items; its claimed ones
-- run to their end) and may have a concurrency limit (at most this many of its items claimed
-- at once, by every worker and process together): two columns of the per-queue settings,
-- which the claiming statement reads. That table is rebuilt (it holds a row per queue whose
-- settings were changed: a few), so that its SQL is the fresh schema's; every row keeps its
-- item_events setting, not paused and without a limit.

ALTER TABLE queue_settings RENAME TO queue_settings_v5;

CREATE TABLE queue_settings (
    tenant_id       TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    item_events     INTEGER NOT NULL CHECK (item_events IN (0, 1)),
    updated_at_ms   INTEGER NOT NULL,
    paused          INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    concurrency_max INTEGER CHECK (concurrency_max >= 1),
    PRIMARY KEY (tenant_id, queue)
) WITHOUT ROWID;

INSERT INTO queue_settings (tenant_id, queue, item_events, updated_at_ms)
SELECT tenant_id, queue, item_events, updated_at_ms FROM queue_settings_v5;
DROP TABLE queue_settings_v5;

ALTER TABLE queue_items ADD COLUMN run_timeout_ms INTEGER CHECK (run_timeout_ms >= 1);
ALTER TABLE queue_items ADD COLUMN tags TEXT;
ALTER TABLE queue_items ADD COLUMN metadata TEXT;

CREATE TABLE queue_item_tags (
    tenant_id TEXT NOT NULL,
    queue     TEXT NOT NULL,
    tag       TEXT NOT NULL,
    item_id   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, queue, tag, item_id)
) WITHOUT ROWID;

CREATE TABLE queue_unique (
    tenant_id       TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    unique_key      TEXT    NOT NULL,
    window_start_ms INTEGER NOT NULL,
    item_id         TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, queue, unique_key, window_start_ms)
) WITHOUT ROWID;

CREATE INDEX queue_unique_item ON queue_unique (tenant_id, item_id);
