-- Spindle's whole schema, applied to an empty file in one transaction.
--
-- Conventions (DESIGN.md §4): times are INTEGER epoch milliseconds (*_at_ms); ids are TEXT;
-- JSON is compact TEXT; every root table carries tenant_id, and every unique key and every
-- query includes it. The SQL keeps to what SQLite and PostgreSQL share.
--
-- The version at the bottom must equal SCHEMA_VERSION in src/core/schema.rs. A change to this
-- file that an existing store must see needs a forward step in MIGRATIONS there as well.

-- Tenants. 'default' always exists; administration comes with the auth domain.
CREATE TABLE tenants (
    tenant_id     TEXT    NOT NULL PRIMARY KEY,
    name          TEXT    NOT NULL,
    status        TEXT    NOT NULL DEFAULT 'active'
                          CHECK (status IN ('active', 'suspended', 'archived')),
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

INSERT INTO tenants (tenant_id, name, status, created_at_ms, updated_at_ms)
VALUES ('default', 'Default', 'active', 0, 0);

-- The event log: one table for every stream. position is global and only grows
-- (AUTOINCREMENT never reuses a value); seq is dense per stream from 1. The kind check compares
-- one value at a time (see queue_items).
CREATE TABLE events (
    position      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT    NOT NULL,
    stream_kind   TEXT    NOT NULL
                          CHECK (stream_kind = 'execution' OR stream_kind = 'process'
                                 OR stream_kind = 'graph' OR stream_kind = 'queue'
                                 OR stream_kind = 'custom'),
    stream_id     TEXT    NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    event_type    TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    idem_key      TEXT,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (tenant_id, stream_kind, stream_id, seq)
);

-- Every idempotency key ever used on a stream, with the hash of what it appended. Kept apart
-- from events so that truncating a stream does not forget its keys (a replay after truncation
-- still returns the first event instead of writing it again).
CREATE TABLE event_keys (
    tenant_id    TEXT    NOT NULL,
    stream_kind  TEXT    NOT NULL,
    stream_id    TEXT    NOT NULL,
    idem_key     TEXT    NOT NULL,
    payload_hash TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    position     INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, stream_kind, stream_id, idem_key)
) WITHOUT ROWID;

CREATE INDEX events_by_tenant_position ON events (tenant_id, position);

-- The head (last seq) of every stream that has been truncated, recorded by the truncation.
-- The next seq is one past the stream's newest event or, when truncation removed them all, one
-- past this head: a seq is never handed out twice, and an append writes only its event row.
CREATE TABLE stream_heads (
    tenant_id   TEXT    NOT NULL,
    stream_kind TEXT    NOT NULL,
    stream_id   TEXT    NOT NULL,
    head_seq    INTEGER NOT NULL CHECK (head_seq >= 1),
    PRIMARY KEY (tenant_id, stream_kind, stream_id)
) WITHOUT ROWID;

-- The work queue. An item is live while pending or claimed; fence grows by one at every
-- claim and is never reset, so a stale holder can never match it again. attempt counts the
-- claims consumed (a release refunds one); run_at_ms is when a pending item becomes due.
-- The status check compares one value at a time: for `IN` with more than two values SQLite
-- builds a temporary index at every row it writes (a fifth of a job cycle's cost).
-- run_timeout_ms (version 6): how long a worker pool lets one attempt run before it fails it
-- as retryable (NULL: no limit but the lease). tags: a JSON array of the item's tags (NULL:
-- none; queue_item_tags finds items by them); metadata: a JSON object kept for the caller.
-- They follow finished_at_ms on the same line because that is where SQLite's ALTER TABLE ..
-- ADD COLUMN writes them in a migrated store's schema text.
CREATE TABLE queue_items (
    tenant_id           TEXT    NOT NULL,
    item_id             TEXT    NOT NULL,
    queue               TEXT    NOT NULL,
    payload             TEXT    NOT NULL,
    payload_hash        TEXT,
    priority            INTEGER NOT NULL,
    run_at_ms           INTEGER NOT NULL,
    attempt             INTEGER NOT NULL CHECK (attempt >= 0),
    max_attempts        INTEGER NOT NULL CHECK (max_attempts >= 1),
    backoff_base_ms     INTEGER NOT NULL CHECK (backoff_base_ms >= 0),
    backoff_max_ms      INTEGER NOT NULL CHECK (backoff_max_ms >= backoff_base_ms),
    dedupe_key          TEXT,
    execution_id        TEXT,
    node_id             TEXT,
    status              TEXT    NOT NULL
                                CHECK (status = 'pending' OR status = 'claimed'
                                       OR status = 'completed' OR status = 'dead'
                                       OR status = 'cancelled'),
    fence               INTEGER NOT NULL CHECK (fence >= 0),
    worker_id           TEXT,
    lease_expires_at_ms INTEGER,
    last_error          TEXT,
    result              TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    finished_at_ms      INTEGER, run_timeout_ms INTEGER CHECK (run_timeout_ms >= 1), tags TEXT, metadata TEXT,
    PRIMARY KEY (tenant_id, item_id),
    CHECK ((status = 'claimed') = (lease_expires_at_ms IS NOT NULL)),
    CHECK ((dedupe_key IS NULL) = (payload_hash IS NULL))
) WITHOUT ROWID;

-- An item's tags, one row each (version 6): a queue's items with a tag, in id order, are a key
-- range (Queue::items with ItemFilter::tag). Written with the item; deleted with it.
CREATE TABLE queue_item_tags (
    tenant_id TEXT NOT NULL,
    queue     TEXT NOT NULL,
    tag       TEXT NOT NULL,
    item_id   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, queue, tag, item_id)
) WITHOUT ROWID;

-- Unique keys over a window (version 6, NewItem::unique): the item that holds a queue's key in
-- the window starting at window_start_ms (0 for a key without a window). A later enqueue with
-- the key in that window meets it while the item is in one of the states the enqueue names.
-- Deleted with the item (prune, purge), through queue_unique_item.
CREATE TABLE queue_unique (
    tenant_id       TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    unique_key      TEXT    NOT NULL,
    window_start_ms INTEGER NOT NULL,
    item_id         TEXT    NOT NULL,
    PRIMARY KEY (tenant_id, queue, unique_key, window_start_ms)
) WITHOUT ROWID;

CREATE INDEX queue_unique_item ON queue_unique (tenant_id, item_id);

-- What claim reads: due items of a queue in claim order, one priority level at a time.
CREATE INDEX queue_items_pending
    ON queue_items (tenant_id, queue, priority DESC, run_at_ms, item_id)
    WHERE status = 'pending';

-- When the next pending item of a queue falls due (what a blocking claim sleeps until).
CREATE INDEX queue_items_schedule
    ON queue_items (tenant_id, queue, run_at_ms)
    WHERE status = 'pending';

-- A dedupe key is unique among the live items of a queue.
CREATE UNIQUE INDEX queue_items_dedupe
    ON queue_items (tenant_id, queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'claimed');

CREATE INDEX queue_items_leases
    ON queue_items (tenant_id, queue, lease_expires_at_ms)
    WHERE status = 'claimed';

CREATE INDEX queue_items_dead
    ON queue_items (tenant_id, queue, item_id)
    WHERE status = 'dead';

CREATE INDEX queue_items_finished
    ON queue_items (tenant_id, finished_at_ms)
    WHERE status IN ('completed', 'cancelled');

-- A queue's completed or cancelled items of one status in id (enqueue) order: a page of them
-- (`Queue::items`, the dashboard) is a key range, however many items other queues hold.
-- Partial, so that only a completion or cancel and a prune write it.
CREATE INDEX queue_items_done_by_queue
    ON queue_items (tenant_id, queue, status, item_id)
    WHERE status IN ('completed', 'cancelled');

CREATE INDEX queue_items_execution
    ON queue_items (tenant_id, execution_id, item_id)
    WHERE execution_id IS NOT NULL AND status IN ('pending', 'claimed');

-- Per-queue settings; a queue without a row has the defaults. item_events = 0: the queue's
-- item changes append no events to its stream (for queues nobody follows). paused = 1: no one
-- claims the queue's items (its claimed ones run to their end). concurrency_max: at most this
-- many of its items claimed at once, by every worker and process together (NULL: no limit).
-- The claiming statement reads the row (version 6).
CREATE TABLE queue_settings (
    tenant_id       TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    item_events     INTEGER NOT NULL CHECK (item_events IN (0, 1)),
    updated_at_ms   INTEGER NOT NULL,
    paused          INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    concurrency_max INTEGER CHECK (concurrency_max >= 1),
    PRIMARY KEY (tenant_id, queue)
) WITHOUT ROWID;

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

-- A tenant's finished graphs of one status, newest first (the dashboard's recent failures): a
-- listing of finished graphs by status reads the graphs of that status only. Partial, so that
-- the writes of an unfinished graph's steps do not touch it.
CREATE INDEX graphs_finished ON graphs (tenant_id, status, graph_id)
    WHERE status = 'complete' OR status = 'failed' OR status = 'cancelled';

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

-- The process registry: records, what each event meant, acknowledged wakes, session handle
-- grants and leases. Its events live in the event log (stream kind 'process').

-- A registered process. registration is the prepared registration's JSON (its hash is
-- registration_hash); the other columns are what changes after registration.
CREATE TABLE processes (
    tenant_id           TEXT    NOT NULL,
    process_id          TEXT    NOT NULL,
    registration_hash   TEXT    NOT NULL,
    registration        TEXT    NOT NULL,
    definition_hash     TEXT,
    status              TEXT    NOT NULL
                                CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    await_output        TEXT,
    external_ref        TEXT,
    wait_state          TEXT,
    wake_target         TEXT,
    wake_target_session TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, process_id),
    CHECK ((status = 'running') = (await_output IS NULL)),
    CHECK (status = 'running' OR wait_state IS NULL)
);

CREATE INDEX processes_by_status ON processes (tenant_id, status, process_id);
CREATE INDEX processes_by_wake_session ON processes (tenant_id, wake_target_session, process_id)
    WHERE wake_target_session IS NOT NULL;
CREATE INDEX processes_finished ON processes (tenant_id, updated_at_ms, process_id)
    WHERE status <> 'running';

-- What an event meant (its terminal output, its wake), for the events that meant something.
CREATE TABLE process_event_semantics (
    tenant_id  TEXT    NOT NULL,
    process_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    semantics  TEXT    NOT NULL,
    has_wake   INTEGER NOT NULL CHECK (has_wake IN (0, 1)),
    PRIMARY KEY (tenant_id, process_id, seq),
    FOREIGN KEY (tenant_id, process_id) REFERENCES processes (tenant_id, process_id)
        ON DELETE CASCADE
) WITHOUT ROWID;

-- Wakes a session has acted on: wake_events_after leaves them out.
CREATE TABLE process_wake_acks (
    tenant_id   TEXT    NOT NULL,
    process_id  TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    acked_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, process_id, seq),
    FOREIGN KEY (tenant_id, process_id) REFERENCES processes (tenant_id, process_id)
        ON DELETE CASCADE
) WITHOUT ROWID;

-- Which session scopes may address which processes.
CREATE TABLE process_handle_grants (
    tenant_id     TEXT    NOT NULL,
    scope_id      TEXT    NOT NULL,
    process_id    TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    descriptor    TEXT    NOT NULL,
    granted_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, scope_id, process_id),
    FOREIGN KEY (tenant_id, process_id) REFERENCES processes (tenant_id, process_id)
        ON DELETE CASCADE
) WITHOUT ROWID;

CREATE INDEX process_grants_by_session
    ON process_handle_grants (tenant_id, session_id, process_id, scope_id);
CREATE INDEX process_grants_by_process
    ON process_handle_grants (tenant_id, process_id, session_id, scope_id);

-- A process's lease. fencing_token grows by one at every grant and is kept when the lease is
-- released (owner and token set to NULL), so it is never handed out twice.
CREATE TABLE process_leases (
    tenant_id      TEXT    NOT NULL,
    process_id     TEXT    NOT NULL,
    owner_id       TEXT,
    incarnation_id TEXT,
    liveness       TEXT,
    lease_token    TEXT,
    fencing_token  INTEGER NOT NULL CHECK (fencing_token >= 1),
    claimed_at_ms  INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, process_id),
    FOREIGN KEY (tenant_id, process_id) REFERENCES processes (tenant_id, process_id)
        ON DELETE CASCADE,
    CHECK ((owner_id IS NULL) = (lease_token IS NULL))
) WITHOUT ROWID;

-- The highest fencing token of any pruned process of a tenant: a process's first lease takes
-- a token past it, so an id pruned and registered again never sees an old token again.
CREATE TABLE process_fence_floors (
    tenant_id     TEXT    NOT NULL PRIMARY KEY,
    fencing_token INTEGER NOT NULL CHECK (fencing_token >= 1)
) WITHOUT ROWID;

-- Workflows: immutable definitions, executions with a compare-and-set state, snapshots. An
-- execution's events live in the event log (stream kind 'execution').
-- Workflow definitions: immutable once put. def_seq numbers a workflow's versions in the order
-- they were put (versions are caller strings, so "latest" is the last put, not the largest).
CREATE TABLE workflow_definitions (
    tenant_id     TEXT    NOT NULL,
    workflow_id   TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    ir            TEXT    NOT NULL,
    ir_hash       TEXT    NOT NULL,
    def_seq       INTEGER NOT NULL CHECK (def_seq >= 1),
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, workflow_id, version),
    UNIQUE (tenant_id, workflow_id, def_seq)
);

-- Workflow executions. state_version grows by one at every change of state (compare-and-set).
CREATE TABLE workflow_executions (
    tenant_id        TEXT    NOT NULL,
    execution_id     TEXT    NOT NULL,
    workflow_id      TEXT    NOT NULL,
    workflow_version TEXT    NOT NULL,
    status           TEXT    NOT NULL
                             CHECK (status IN ('pending', 'running', 'paused', 'completed',
                                               'failed', 'cancelled', 'limit_exceeded')),
    input            TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    state_version    INTEGER NOT NULL CHECK (state_version >= 0),
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    completed_at_ms  INTEGER,
    PRIMARY KEY (tenant_id, execution_id),
    FOREIGN KEY (tenant_id, workflow_id, workflow_version)
        REFERENCES workflow_definitions (tenant_id, workflow_id, version)
);

CREATE INDEX workflow_executions_by_status
    ON workflow_executions (tenant_id, status, execution_id);
CREATE INDEX workflow_executions_by_workflow
    ON workflow_executions (tenant_id, workflow_id, execution_id);
CREATE INDEX workflow_executions_by_workflow_status
    ON workflow_executions (tenant_id, workflow_id, status, execution_id);

-- Snapshots of an execution's state at a sequence of its event stream; immutable once written.
CREATE TABLE workflow_snapshots (
    tenant_id     TEXT    NOT NULL,
    execution_id  TEXT    NOT NULL,
    at_seq        INTEGER NOT NULL CHECK (at_seq >= 0),
    state         TEXT    NOT NULL,
    state_hash    TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, execution_id, at_seq),
    FOREIGN KEY (tenant_id, execution_id) REFERENCES workflow_executions (tenant_id, execution_id)
        ON DELETE CASCADE
) WITHOUT ROWID;

-- Counts kept as the rows change (schema version 5). What a count reports (`queue().stats()`,
-- `graphs().count_by_status`, `processes().count`, `workflows().count_by_status`) is read here
-- instead of from the rows, whose number only grows: reading a count costs O(queues or
-- statuses), not O(items). Each op that moves a counted row into or out of a counted status
-- (inserts, changes status, deletes it) writes its count in the same op, so the count commits
-- or rolls back with the row; only the store's SQL writes these tables and the rows they count
-- (a caller's raw SQL may not: see core/guard.rs). A row exists while its total is at least 1
-- (the last one out deletes it), so a count table holds exactly what a `SELECT ..., count(*)
-- ... GROUP BY` over the counted rows answers; the model tests compare the two after every
-- step, and `spindle check` does too.
--
-- Kept by statements in the ops, not by triggers: a trigger makes every statement that
-- writes the table's status column a multi-row write for SQLite, which then keeps a statement
-- journal for it (a copy of every page it touches that the transaction had already changed);
-- on the batched job cycle that made the op half as costly again (measured, issue 28). An
-- op's own count statement is a one-row upsert, and a job's cycle writes at most one: a batch
-- of completions counts each queue's once.
--
-- The status checks compare one value at a time (see queue_items).

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

PRAGMA application_id = 1397771844; -- 'SPND'
PRAGMA user_version = 7;
