//! The PostgreSQL engine: the session an actor (or a reader) owns, with its dialect rewrite and
//! value mapping (`session`), the pipelining client under it (`client`), a transaction closure's raw SQL handle (`PgSql`, in `raw`), and
//! the listener that hears other processes' commits (`listen`).
//!
//! Private to the engine: nothing above `core` can name a session. `core/mod.rs` re-exports
//! the few things the crate root, the migration tool and the queue's set statements need.

pub(crate) mod client;
pub(crate) mod listen;
pub(crate) mod raw;
pub(crate) mod session;
