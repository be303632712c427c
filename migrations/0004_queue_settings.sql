-- Schema version 4: per-queue settings (issue 12). A queue may turn its per-item events off.

-- Per-queue settings; a queue without a row has the defaults. item_events = 0: the queue's
-- item changes append no events to its stream (for queues nobody follows).
CREATE TABLE queue_settings (
    tenant_id     TEXT    NOT NULL,
    queue         TEXT    NOT NULL,
    item_events   INTEGER NOT NULL CHECK (item_events IN (0, 1)),
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, queue)
) WITHOUT ROWID;
