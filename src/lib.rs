//! Spindle: an embedded, durable state store for workflow engines, job queues and agent
//! runtimes. One SQLite file, one thread that owns the connection, typed operations that
//! commit or roll back whole, and gap-free subscriptions to every event stream. No async
//! runtime: callers hold a cheap [`Store`] handle and block on crossbeam channels.
//!
//! ```
//! # fn main() -> spindle::Result<()> {
//! use spindle::{Store, Stream, TxOutcome};
//! use serde_json::json;
//!
//! let store = Store::open_in_memory()?;          // Store::open("app.db") for a file
//! let orders = Stream::custom("orders");
//! let mut follower = store.subscribe(&orders, 0)?;
//!
//! let stream = orders.clone();
//! store.transaction(move |tx| {
//!     tx.append_event(&stream, "placed", json!({"order": 1}))?;
//!     tx.append_event(&stream, "paid", json!({"order": 1}))?;
//!     Ok(TxOutcome::Commit(()))
//! })?;
//!
//! assert_eq!(follower.recv()?.event_type, "placed");
//! assert_eq!(follower.recv()?.event_type, "paid");
//! store.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! # What a store holds
//!
//! - [`Store::events`]: the event log. Append (optionally idempotent by key), read by cursor,
//!   follow with [`Store::subscribe`] / [`Store::subscribe_all`].
//! - [`Store::queue`]: the work queue. Enqueue with priorities, delays and dedupe keys; claim
//!   under fenced leases (or wait for work with `claim_wait`); complete, fail with retries and
//!   backoff, dead letters.
//! - [`Store::graphs`]: the graph engine. Nodes and coloured tokens routed over conditional
//!   edges, `All`/`Any` joins, gathers, sub-graphs and loops; untaken branches are skipped, so
//!   every graph finishes; recovered after a crash when the store opens.
//! - [`Store::workflows`]: workflow definitions (immutable, versioned), executions with a
//!   status machine and an atomic state (compare-and-set, merge patch, array append), an
//!   event stream per execution, snapshots, `load` and `replay`.
//! - [`Store::processes`]: the process registry. Idempotent registration, declared event
//!   types with payload schemas, replay-keyed events, terminal outputs, wake-ups and their
//!   acknowledgements, wait states, session handle grants, and fenced leases that a provably
//!   dead holder's successor can reclaim.
//! - [`Store::auth`] and [`Store::authenticate`]: tenants (a suspended one reads but cannot
//!   write) and hashed API tokens that open views bound to a tenant and a role.
//! - [`Store::transaction`]: any of the above, and the caller's own tables through
//!   [`Tx::sqlite`], committed or rolled back together.
//! - [`Store::backup_to`] and [`Store::restore`]: a consistent copy of a store file taken while
//!   its writers run, and a copy put in a closed store's place.
//!
//! # Raw SQL in a transaction
//!
//! [`Tx::sqlite`] hands a closure an [`Sql`] handle, never the connection: statements that read
//! and write the caller's own tables inside the transaction (and create, alter or drop them),
//! reads of the store's tables (not from a view bound to a tenant by a token), and reads of the
//! schema and of a few pragmas. Everything that would outlive the transaction on the store's
//! shared connection or go around its operations is refused with [`Error::Forbidden`] and
//! writes nothing: setting pragmas, temporary objects, `ATTACH`, `ANALYZE`, transaction
//! statements, writes, indexes and triggers on the store's tables, foreign keys into them. The
//! store reads the connection's settings back after every closure that ran SQL and refuses a
//! closure that changed them. [`Sql`] lists every rule.
//!
//! # Guarantees
//!
//! 1. A reply is sent only after the transaction that produced it has committed. `Ok` means
//!    the effect is on disk; under [`Durability::Full`] (the default) also across power loss.
//! 2. Every operation is atomic: it commits whole or leaves no trace, its events included.
//! 3. Events are published to subscribers only after commit, in commit order, to every
//!    subscriber. A subscriber never misses an event and never sees one twice, even when it
//!    falls behind.
//! 4. Every lease-holder write is checked against its fencing token in the same statement.
//! 5. Fencing tokens strictly increase per item and per process, across restarts.
//! 6. Idempotent writes return the first result for the same content, `Conflict` for
//!    different content, and write nothing the second time.
//! 7. Tenants are isolated: another tenant's object behaves exactly like a missing one.
//! 8. Nothing is unbounded: every size has a limit in [`Limits`] (or [`Options`]), and
//!    exceeding one is a typed error with nothing written.
//! 9. No operation panics on any input; a panic inside an operation is caught, rolled back and
//!    returned as [`Error::OpPanicked`], and the store stays usable.
//!
//! # How it works
//!
//! A [`Store`] sends each call that may write to one actor thread through a bounded mailbox
//! (or, with [`Options::inline`], runs the actor's loop on the calling thread); on PostgreSQL
//! a store has a few such writers ([`Options::writers`]), each with a session of its own, and
//! a calling thread always sends to the same one. The actor
//! takes a message, drains up to `batch_max` more, and runs them in one transaction with one
//! savepoint per operation that needs one (group commit: one fsync for the whole batch).
//! After `COMMIT` it replies to every caller and publishes every event. A call that only
//! reads goes to one of the store's reader threads ([`Options::readers`]), each with a
//! read-only connection of its own: a read never waits for the writer's batch, nor a write
//! for a read, and a read sees every write whose reply was sent before it was sent. No SQL
//! runs outside the store's own threads, but for the tools' connections of their own to a
//! file: a backup's read-only one ([`Store::backup_to`]), [`Store::restore`]'s to the backup
//! and the closed store it replaces, and the `spindle` command's `check` and `migrate`. See
//! `ARCHITECTURE.md` for the map.
//!
//! # How the API grows
//!
//! Within a major version, these keep compiling:
//! - Enums are `#[non_exhaustive]` (match them with a `_` arm), but [`TxOutcome`], whose two
//!   cases a closure must choose between.
//! - What the store answers with (items, records, stats, counts, reports: [`QueueItem`],
//!   [`QueueStats`], [`WorkerReport`](queue::WorkerReport), [`Graph`], [`Metrics`], ...) is `#[non_exhaustive]`:
//!   read its fields; a value to compare with starts from its `Default` (or
//!   [`QueueStats::empty`]) and sets the fields that matter. The records a model of the store
//!   rebuilds whole ([`ProcessEvent`], [`Execution`]) stay plain; a process event's meaning
//!   ([`process::EventSemantics`], [`process::TerminalSemantics::new`]) and a lease
//!   ([`ProcessLease::new`], kept elsewhere and presented again) are not.
//! - What a caller builds to configure or filter is `#[non_exhaustive]` too, so a new option
//!   or filter field is not a breaking change: it starts from `Default` or a constructor, and
//!   one chainable setter per field, named after the field, changes it
//!   (`Options::default().readers(0).batch_max(16)`; a setter of an `Option` field takes the
//!   value, not `Some(value)`). The fields stay public to read, and to assign
//!   (`options.readers = 0` on a value one holds).
//!   - From `Default` and setters: [`Options`], [`Limits`] (given to [`Options::limits`]),
//!     [`GraphFilter`], [`ExecutionFilter`], [`TenantUpdate`], [`ListFilter`] (also
//!     [`ListFilter::status`]).
//!   - From constructors (a value with required parts) and setters: [`NewItem::new`],
//!     [`Unique::new`], [`Schedule::cron`] and [`Schedule::every`], [`ItemFilter::due`] and
//!     [`ItemFilter::status`], [`NodeOptions::new`], [`Page::first`], [`Page::after`] and
//!     [`Page::new`], [`Backoff::new`]; the process registry's [`Registration::new`],
//!     [`EventType::new`], [`process::TerminalSpec::new`], [`process::WakeSpec::new`],
//!     [`process::Identity::new`], [`AppendRequest::new`], [`SessionScope::new`],
//!     [`LeaseOwner::new`], [`process::ExternalRef::new`], and from `Default`
//!     [`process::SemanticsSpec`] and [`process::HandleDescriptor`].
//!   - Kept plain: the op structs (below) with the parts they carry ([`queue::Completion`],
//!     [`queue::Lease`]), and the records a model of the store rebuilds (above), with their
//!     parts: [`process::WaitState`], which [`Processes::set_wait`](crate::Processes::set_wait)
//!     also takes, among them.
//! - `rusqlite` is part of the API where SQLite itself is: the handle a transaction closure
//!   gets for its own SQL ([`Sql`]: its statements and rows are rusqlite's), and the
//!   conversion of rusqlite's error into [`Error`] (so `?` works inside such a closure). A new
//!   major version of rusqlite is a new major version of this crate; [`Error::Sqlite`] itself
//!   carries an opaque [`SqliteError`] (codes, and rusqlite's error as its `source()`).
//! - An op struct's public fields are its API (see [`Op`]): a new option comes as a new op or a
//!   builder, not as a field.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(clippy::unwrap_used)]

mod core;
mod domains;
mod error;
mod hash;
mod ids;
mod limits;
mod metrics;
mod options;
mod page;
mod setters;
mod store;
mod subscription;

pub mod auth;
#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzzing;
pub mod graph;
pub mod log;
#[cfg(feature = "postgres")]
pub mod migrate;
pub mod process;
pub mod queue;
pub mod workflow;

pub use crate::auth::{Auth, Tenant, TenantStatus, TenantUpdate, TokenInfo, TokenSecret};
#[cfg(feature = "postgres")]
pub use crate::core::PgSql;
pub use crate::core::Sql;
pub use crate::core::backup::{BackupProgress, BackupReport};
pub use crate::core::clock::{Clock, ManualClock, SystemClock};
pub use crate::core::op::{Access, Op, Role, TxOutcome};
pub use crate::core::tx::Tx;
pub use crate::error::{Error, Result, SqliteError};
pub use crate::graph::{
    Edge, GatherStrategy, Graph, GraphEvent, GraphFilter, GraphId, GraphStatus, Graphs, JoinType,
    Node, NodeCounts, NodeId, NodeOptions, NodeOutput, NodeSpec, NodeStatus, Recovered, Token,
    TokenColor,
};
pub use crate::limits::Limits;
pub use crate::log::{Appended, Event, Events, Stream, StreamKind};
pub use crate::metrics::{Histogram, Metrics};
pub use crate::options::{Durability, Options, READERS_MAX, WRITERS_MAX};
pub use crate::page::Page;
pub use crate::process::Appended as ProcessAppended;
pub use crate::process::{
    AppendRequest, AwaitOutput, EventType, LeaseClaim, LeaseOwner, ListFilter, Liveness,
    ProcessCounts, ProcessEvent, ProcessLease, ProcessRecord, ProcessStatus, Processes,
    Registration, SessionScope,
};
pub use crate::queue::{
    Backoff, Cadence, CatchUp, Claimed, Enqueued, FailOutcome, ItemFilter, ItemStatus, NewItem,
    OnConflict, Queue, QueueItem, QueueStats, Reclaimed, Schedule, ScheduleInfo, Unique,
};
pub use crate::store::{DEFAULT_TENANT, Pending, Store};
pub use crate::subscription::Subscription;
pub use crate::workflow::{
    Definition, Execution, ExecutionFilter, Loaded, Snapshot, WorkflowStatus, Workflows,
};
/// The PostgreSQL client crate, for the types [`PgSql`] takes and returns (`ToSql`, `Row`).
#[cfg(feature = "postgres")]
pub use postgres;

/// The README's examples, compiled (not run) with the doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
