//! The engine: the actor thread, the mailbox, the operation contract, transactions, the event
//! store and publishing, opening and the schema, and time.
//!
//! Each engine's own code is in a folder of its own, private to this module: `sqlite/` (the
//! connection, the call guard, the raw SQL handle, WAL checkpoints, the file's identity, fresh
//! images, backups) and `postgres/` (the session, the raw SQL handle, the listener). What
//! differs between them reaches the batch loop through `conn` (private too) and the
//! statements through `db` (the engine seam), so nothing above `core` can name a connection:
//! the compiler holds that rule. The few engine parts named above are re-exported below.
//!
//! Nothing here names a domain or the handle: what the engine needs from a domain is
//! registered in `crate::domains` and handed in (`actor::EngineHooks`). Domains see only
//! [`Tx`](tx::Tx) and [`Op`](op::Op): never a channel, a thread or the raw connection outside
//! a transaction.

pub(crate) mod actor;
pub(crate) mod bell;
pub(crate) mod clock;
mod conn;
pub(crate) mod counts;
pub(crate) mod db;
pub(crate) mod events;
pub(crate) mod meter;
pub(crate) mod msg;
pub(crate) mod op;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod presence;
pub(crate) mod publish;
pub(crate) mod readers;
pub(crate) mod schema;
mod sqlite;
pub(crate) mod state;
pub(crate) mod tx;
pub(crate) mod value;
pub(crate) mod writers;

// The engines' folders are private: above `core`, only these of their parts can be named.

/// Copies of a live store, and a copy put in a closed store's place (`Store::backup_to`).
pub(crate) use sqlite::backup;
/// A transaction closure's own SQL on a SQLite store (`Tx::sqlite`).
pub use sqlite::raw::Sql;
/// The checks on a store file before it is opened (the migration tool opens files too).
#[cfg(feature = "postgres")]
pub(crate) use sqlite::store_file;

/// A transaction closure's own SQL on a PostgreSQL store (`Tx::postgres`).
#[cfg(feature = "postgres")]
pub use postgres::raw::PgSql;

/// What of the PostgreSQL session is needed above the engine: for the migration tool, a plain
/// client and the mapping of its values; for the queue's tests of its set-based statements,
/// the dialect rewrite that turns them into what the server runs.
#[cfg(feature = "postgres")]
pub(crate) mod pg {
    #[cfg(test)]
    pub(crate) use super::postgres::session::rewrite;
    pub(crate) use super::postgres::session::{Raw, connect_client, value_ref};
}

/// What the registry's tests compare a fresh store's kept objects with.
#[cfg(test)]
pub(crate) use sqlite::fresh::tests as fresh_tests;
