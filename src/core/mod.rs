//! The engine: the actor thread, the mailbox, the operation contract, transactions, the event
//! store and publishing, opening and the schema, and time.
//!
//! Nothing here names a domain or the handle: what the engine needs from a domain is
//! registered in `crate::domains` and handed in (`actor::EngineHooks`). Domains see only
//! [`Tx`](tx::Tx) and [`Op`](op::Op): never a channel, a thread or the raw connection outside
//! a transaction.

pub(crate) mod actor;
pub(crate) mod backup;
pub(crate) mod bell;
pub(crate) mod checkpoint;
pub(crate) mod clock;
pub(crate) mod conn;
pub(crate) mod counts;
pub(crate) mod db;
pub(crate) mod events;
pub(crate) mod fresh;
pub(crate) mod guard;
pub(crate) mod identity;
pub(crate) mod left_behind;
pub(crate) mod meter;
pub(crate) mod msg;
pub(crate) mod op;
#[cfg(feature = "postgres")]
pub(crate) mod pg;
#[cfg(feature = "postgres")]
pub(crate) mod pg_client;
#[cfg(feature = "postgres")]
pub(crate) mod pg_listen;
#[cfg(feature = "postgres")]
pub(crate) mod pg_sql;
pub(crate) mod presence;
pub(crate) mod publish;
pub(crate) mod readers;
pub(crate) mod schema;
pub(crate) mod sql;
pub(crate) mod state;
pub(crate) mod store_file;
pub(crate) mod tx;
