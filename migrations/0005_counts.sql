-- Schema version 5 (issue 28): counts kept as the rows change, so that `queue().stats()`,
-- `graphs().count_by_status`, `processes().count` and `workflows().count_by_status` read no
-- finished row (see the last section of schema.sql for the argument); and indexes of finished
-- graphs by status and of finished items by queue, so that listings of them stay key ranges.
-- The tables are created as schema.sql creates them, then each count is filled from the rows
-- in one pass of GROUP BY: a store with a million finished items counts them once, at its
-- first open by this version.

-- A tenant's finished graphs of one status, newest first (the dashboard's recent failures): a
-- listing of finished graphs by status reads the graphs of that status only. Partial, so that
-- the writes of an unfinished graph's steps do not touch it.
CREATE INDEX graphs_finished ON graphs (tenant_id, status, graph_id)
    WHERE status = 'complete' OR status = 'failed' OR status = 'cancelled';

-- A queue's completed or cancelled items of one status in id (enqueue) order: a page of them
-- (`Queue::items`, the dashboard) is a key range, however many items other queues hold.
-- Partial, so that only a completion or cancel and a prune write it.
CREATE INDEX queue_items_done_by_queue
    ON queue_items (tenant_id, queue, status, item_id)
    WHERE status IN ('completed', 'cancelled');

-- A queue's completed, dead and cancelled items: the ones that pile up until pruned or
-- purged. Live items are counted from their partial indexes (queue_items_schedule,
-- queue_items_leases) instead: they are bounded by the work in flight, and counting them here
-- would cost every enqueue and claim a write.
CREATE TABLE queue_counts (
    tenant_id TEXT    NOT NULL,
    queue     TEXT    NOT NULL,
    status    TEXT    NOT NULL
                      CHECK (status = 'completed' OR status = 'dead' OR status = 'cancelled'),
    total     INTEGER NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, queue, status)
) WITHOUT ROWID;

-- Graphs by status, per kind and root (1: no parent graph). The kind is the metadata's
-- top-level "kind" when it is a string, else '' (src/graph/sql.rs reads it the same way
-- everywhere). What `count_by_status` answers without reading graphs: no metadata filter, or
-- only a non-empty "kind"; roots only or not. A graph's metadata and parent never change.
CREATE TABLE graph_counts (
    tenant_id TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    root      INTEGER NOT NULL CHECK (root = 0 OR root = 1),
    status    TEXT    NOT NULL
                      CHECK (status = 'pending' OR status = 'running' OR status = 'complete'
                             OR status = 'failed' OR status = 'cancelled'),
    total     INTEGER NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, kind, root, status)
) WITHOUT ROWID;

-- Processes by state: their status, and 'waiting' for a running process with a wait state.
CREATE TABLE process_counts (
    tenant_id TEXT    NOT NULL,
    state     TEXT    NOT NULL
                      CHECK (state = 'running' OR state = 'waiting' OR state = 'completed'
                             OR state = 'failed' OR state = 'cancelled'),
    total     INTEGER NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, state)
) WITHOUT ROWID;

-- Workflow executions by status.
CREATE TABLE workflow_counts (
    tenant_id TEXT    NOT NULL,
    status    TEXT    NOT NULL
                      CHECK (status = 'pending' OR status = 'running' OR status = 'paused'
                             OR status = 'completed' OR status = 'failed'
                             OR status = 'cancelled' OR status = 'limit_exceeded'),
    total     INTEGER NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, status)
) WITHOUT ROWID;

-- The counts of the rows already there.
INSERT INTO queue_counts (tenant_id, queue, status, total)
SELECT tenant_id, queue, status, count(*) FROM queue_items
WHERE status = 'completed' OR status = 'dead' OR status = 'cancelled'
GROUP BY tenant_id, queue, status;

INSERT INTO graph_counts (tenant_id, kind, root, status, total)
SELECT tenant_id,
       CASE WHEN json_type(metadata, '$.kind') = 'text' THEN metadata ->> '$.kind' ELSE '' END,
       parent_graph_id IS NULL, status, count(*)
FROM graphs
GROUP BY 1, 2, 3, 4;

INSERT INTO process_counts (tenant_id, state, total)
SELECT tenant_id, CASE WHEN wait_state IS NULL THEN status ELSE 'waiting' END, count(*)
FROM processes
GROUP BY 1, 2;

INSERT INTO workflow_counts (tenant_id, status, total)
SELECT tenant_id, status, count(*) FROM workflow_executions
GROUP BY tenant_id, status;
