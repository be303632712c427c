-- Schema version 4 (issue 12): per-queue settings (a queue may turn its per-item events off),
-- and events and queue_items rebuilt with their kind and status checks as comparisons instead
-- of `IN` (SQLite built a temporary index of the five values at every row written). The rows
-- are copied as they are: positions, sequences, fences and attempts. A large store copies its
-- whole event log once, at its first open by this version.

ALTER TABLE events RENAME TO events_v3;

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

-- The old table's index goes with it. The next position follows the highest the old table ever
-- handed out (its AUTOINCREMENT counter), not the highest it still holds.
INSERT INTO events SELECT * FROM events_v3;
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'events_v3')
WHERE name = 'events';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'events', seq FROM sqlite_sequence
WHERE name = 'events_v3' AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events');
DROP TABLE events_v3;
CREATE INDEX events_by_tenant_position ON events (tenant_id, position);

ALTER TABLE queue_items RENAME TO queue_items_v3;

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
    finished_at_ms      INTEGER,
    PRIMARY KEY (tenant_id, item_id),
    CHECK ((status = 'claimed') = (lease_expires_at_ms IS NOT NULL)),
    CHECK ((dedupe_key IS NULL) = (payload_hash IS NULL))
) WITHOUT ROWID;

-- The old table's indexes go with it, then come back on the new one.
INSERT INTO queue_items SELECT * FROM queue_items_v3;
DROP TABLE queue_items_v3;

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

CREATE INDEX queue_items_execution
    ON queue_items (tenant_id, execution_id, item_id)
    WHERE execution_id IS NOT NULL AND status IN ('pending', 'claimed');

-- Per-queue settings; a queue without a row has the defaults. item_events = 0: the queue's
-- item changes append no events to its stream (for queues nobody follows).
CREATE TABLE queue_settings (
    tenant_id     TEXT    NOT NULL,
    queue         TEXT    NOT NULL,
    item_events   INTEGER NOT NULL CHECK (item_events IN (0, 1)),
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, queue)
) WITHOUT ROWID;
