-- Schema version 5 on PostgreSQL (issue 28): counts kept as the rows change, and indexes of
-- finished graphs by status and of finished items by queue, as migrations/0005_counts.sql
-- makes them on SQLite (schema.sql's last section says why); the tables and the kind function
-- as schema_postgres.sql creates them, then each count filled from the rows in one pass of
-- GROUP BY.

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

CREATE TABLE queue_counts (
    tenant_id TEXT COLLATE "C" NOT NULL,
    queue     TEXT COLLATE "C" NOT NULL,
    status    TEXT COLLATE "C" NOT NULL
                      CHECK (status = 'completed' OR status = 'dead' OR status = 'cancelled'),
    total     BIGINT  NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, queue, status)
);

CREATE TABLE graph_counts (
    tenant_id TEXT COLLATE "C" NOT NULL,
    kind      TEXT COLLATE "C" NOT NULL,
    root      BIGINT  NOT NULL CHECK (root = 0 OR root = 1),
    status    TEXT COLLATE "C" NOT NULL
                      CHECK (status = 'pending' OR status = 'running' OR status = 'complete'
                             OR status = 'failed' OR status = 'cancelled'),
    total     BIGINT  NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, kind, root, status)
);

-- A graph's kind as graph_counts keys it: the metadata's top-level "kind" when it is a
-- string, else ''. Read as `json` (its text as written, as SQLite reads it), not `jsonb`.
-- Metadata with a string PostgreSQL's text cannot hold (\u0000) counts as '' (a metadata
-- filter cannot read it either: `jsonb` refuses it).
CREATE FUNCTION graph_count_kind(metadata TEXT) RETURNS TEXT LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF json_typeof(metadata::json -> 'kind') = 'string' THEN
        RETURN metadata::json ->> 'kind';
    END IF;
    RETURN '';
EXCEPTION WHEN untranslatable_character THEN
    RETURN '';
END
$$;

CREATE TABLE process_counts (
    tenant_id TEXT COLLATE "C" NOT NULL,
    state     TEXT COLLATE "C" NOT NULL
                      CHECK (state = 'running' OR state = 'waiting' OR state = 'completed'
                             OR state = 'failed' OR state = 'cancelled'),
    total     BIGINT  NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, state)
);

CREATE TABLE workflow_counts (
    tenant_id TEXT COLLATE "C" NOT NULL,
    status    TEXT COLLATE "C" NOT NULL
                      CHECK (status = 'pending' OR status = 'running' OR status = 'paused'
                             OR status = 'completed' OR status = 'failed'
                             OR status = 'cancelled' OR status = 'limit_exceeded'),
    total     BIGINT  NOT NULL CHECK (total >= 1),
    PRIMARY KEY (tenant_id, status)
);

-- The counts of the rows already there.
INSERT INTO queue_counts (tenant_id, queue, status, total)
SELECT tenant_id, queue, status, count(*) FROM queue_items
WHERE status IN ('completed', 'dead', 'cancelled')
GROUP BY tenant_id, queue, status;

INSERT INTO graph_counts (tenant_id, kind, root, status, total)
SELECT tenant_id, graph_count_kind(metadata), (parent_graph_id IS NULL)::int, status, count(*)
FROM graphs
GROUP BY 1, 2, 3, 4;

INSERT INTO process_counts (tenant_id, state, total)
SELECT tenant_id, CASE WHEN wait_state IS NULL THEN status ELSE 'waiting' END, count(*)
FROM processes
GROUP BY 1, 2;

INSERT INTO workflow_counts (tenant_id, status, total)
SELECT tenant_id, status, count(*) FROM workflow_executions
GROUP BY tenant_id, status;
