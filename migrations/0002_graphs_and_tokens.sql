-- Version 1 -> 2: the graph engine's tables and API tokens. The same DDL is in schema.sql; a unit test in
-- src/core/schema.rs checks that a migrated store and a fresh one have the same schema.

-- Graphs. The per-status node counts are kept up to date by every transition, so the engine
-- knows in O(1) when nothing is ready or running (the graph is then finished) and `get`
-- reports progress without reading the nodes. parent_node_id is the SubGraph node of the
-- parent graph that runs this one, once a node names it.
CREATE TABLE graphs (
    tenant_id       TEXT    NOT NULL,
    graph_id        TEXT    NOT NULL,
    parent_graph_id TEXT,
    parent_node_id  TEXT,
    metadata        TEXT    NOT NULL,
    status          TEXT    NOT NULL
                            CHECK (status IN ('pending', 'running', 'complete', 'failed',
                                              'cancelled')),
    node_count      INTEGER NOT NULL DEFAULT 0,
    edge_count      INTEGER NOT NULL DEFAULT 0,
    child_count     INTEGER NOT NULL DEFAULT 0,
    token_count     INTEGER NOT NULL DEFAULT 0,
    fire_count      INTEGER NOT NULL DEFAULT 0,
    pending         INTEGER NOT NULL DEFAULT 0 CHECK (pending >= 0),
    ready           INTEGER NOT NULL DEFAULT 0 CHECK (ready >= 0),
    running         INTEGER NOT NULL DEFAULT 0 CHECK (running >= 0),
    complete        INTEGER NOT NULL DEFAULT 0 CHECK (complete >= 0),
    failed          INTEGER NOT NULL DEFAULT 0 CHECK (failed >= 0),
    skipped         INTEGER NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    timeout_ms      INTEGER CHECK (timeout_ms >= 0),
    deadline_at_ms  INTEGER,
    error           TEXT,
    failed_node_id  TEXT,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    started_at_ms   INTEGER,
    finished_at_ms  INTEGER,
    PRIMARY KEY (tenant_id, graph_id)
) WITHOUT ROWID;

CREATE INDEX graphs_by_parent ON graphs (tenant_id, parent_graph_id, graph_id);

-- What a tenant's deadline sweep reads.
CREATE INDEX graphs_running
    ON graphs (tenant_id, deadline_at_ms, graph_id)
    WHERE status = 'running';

-- What recovery reads, a page at a time.
CREATE INDEX graphs_running_ids
    ON graphs (tenant_id, graph_id)
    WHERE status = 'running';

-- The store's alarm: the earliest deadline of any tenant, and who is overdue.
CREATE INDEX graphs_deadlines
    ON graphs (deadline_at_ms, tenant_id)
    WHERE status = 'running' AND deadline_at_ms IS NOT NULL;

-- Nodes. in_edges counts inbound edges other than self-loops; in_filled those of them that
-- hold a token; in_dead those that hold none and whose source has finished without sending
-- one. Together they decide the join rule and dead-path elimination without reading edges.
-- fires counts how many times the node was made ready or run (loops are bounded by it);
-- fired_seq is the graph's fire_count when it last fired, which orders firings: a finished
-- node fires again only for a token from a node fired after it and reachable from it (a loop,
-- not a late sibling).
CREATE TABLE graph_nodes (
    tenant_id      TEXT    NOT NULL,
    graph_id       TEXT    NOT NULL,
    node_id        TEXT    NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('task', 'scatter', 'gather', 'sub_graph')),
    spec           TEXT    NOT NULL,
    join_type      TEXT    NOT NULL CHECK (join_type IN ('all', 'any')),
    status         TEXT    NOT NULL
                           CHECK (status IN ('pending', 'ready', 'running', 'complete',
                                             'failed', 'skipped')),
    output         TEXT,
    error          TEXT,
    in_edges       INTEGER NOT NULL DEFAULT 0 CHECK (in_edges >= 0),
    in_filled      INTEGER NOT NULL DEFAULT 0 CHECK (in_filled >= 0),
    in_dead        INTEGER NOT NULL DEFAULT 0 CHECK (in_dead >= 0),
    fires          INTEGER NOT NULL DEFAULT 0 CHECK (fires >= 0),
    fired_seq      INTEGER NOT NULL DEFAULT 0,
    created_seq    INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    started_at_ms  INTEGER,
    finished_at_ms INTEGER,
    PRIMARY KEY (tenant_id, graph_id, node_id)
) WITHOUT ROWID;

CREATE INDEX graph_nodes_by_status
    ON graph_nodes (tenant_id, graph_id, status, created_seq);

-- Edges, numbered from 1 per graph, stored by source so that a node's outbound edges are one
-- range of the primary key. tokens counts the tokens delivered on the edge; dead is 1 while it
-- holds none and its source has finished without sending one.
CREATE TABLE graph_edges (
    tenant_id    TEXT    NOT NULL,
    graph_id     TEXT    NOT NULL,
    edge_seq     INTEGER NOT NULL CHECK (edge_seq >= 1),
    from_node_id TEXT    NOT NULL,
    to_node_id   TEXT    NOT NULL,
    condition    TEXT,
    tokens       INTEGER NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    dead         INTEGER NOT NULL DEFAULT 0 CHECK (dead IN (0, 1)),
    PRIMARY KEY (tenant_id, graph_id, from_node_id, edge_seq)
) WITHOUT ROWID;

CREATE UNIQUE INDEX graph_edges_by_seq ON graph_edges (tenant_id, graph_id, edge_seq);

-- Tokens delivered on edges (the marking), numbered in arrival order per graph and stored by
-- target, so that a node's inputs are one range of the primary key. Tokens are never
-- consumed: they are a node's inputs, and a loop adds to them.
CREATE TABLE graph_tokens (
    tenant_id  TEXT    NOT NULL,
    graph_id   TEXT    NOT NULL,
    token_seq  INTEGER NOT NULL CHECK (token_seq >= 1),
    edge_seq   INTEGER NOT NULL,
    to_node_id TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, graph_id, to_node_id, token_seq)
) WITHOUT ROWID;

-- API tokens. Only the SHA-256 of a secret is stored; a secret is looked up by its hash (one
-- index seek), which also checks revocation and expiry. last_used_at_ms is refreshed at most
-- once a minute.
CREATE TABLE api_tokens (
    token_id        TEXT    NOT NULL PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    role            TEXT    NOT NULL CHECK (role IN ('admin', 'writer', 'reader')),
    secret_hash     TEXT    NOT NULL UNIQUE,
    created_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER,
    revoked_at_ms   INTEGER,
    last_used_at_ms INTEGER
) WITHOUT ROWID;

CREATE INDEX api_tokens_by_tenant ON api_tokens (tenant_id, token_id);
