-- Schema version 3: the process registry (DESIGN.md §5.4) and workflows (§5.2). Their events
-- live in the event log (stream kinds 'process' and 'execution'); these tables hold the
-- process records, what each process event meant, acknowledged wakes, session handle grants
-- and leases, and the workflow definitions, executions and snapshots.

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
