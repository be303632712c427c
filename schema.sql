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
-- (AUTOINCREMENT never reuses a value); seq is dense per stream from 1.
CREATE TABLE events (
    position      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT    NOT NULL,
    stream_kind   TEXT    NOT NULL
                          CHECK (stream_kind IN ('execution', 'process', 'graph', 'custom')),
    stream_id     TEXT    NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    event_type    TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    idem_key      TEXT,
    payload_hash  TEXT,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (tenant_id, stream_kind, stream_id, seq),
    CHECK ((idem_key IS NULL) = (payload_hash IS NULL))
);

CREATE UNIQUE INDEX events_by_idem_key
    ON events (tenant_id, stream_kind, stream_id, idem_key)
    WHERE idem_key IS NOT NULL;

CREATE INDEX events_by_tenant_position ON events (tenant_id, position);

-- The last seq handed out per stream. Kept apart from events so that truncating a stream
-- never lets a seq be handed out twice.
CREATE TABLE stream_heads (
    tenant_id   TEXT    NOT NULL,
    stream_kind TEXT    NOT NULL,
    stream_id   TEXT    NOT NULL,
    head_seq    INTEGER NOT NULL CHECK (head_seq >= 1),
    PRIMARY KEY (tenant_id, stream_kind, stream_id)
) WITHOUT ROWID;

PRAGMA application_id = 1397771844; -- 'SPND'
PRAGMA user_version = 1;
