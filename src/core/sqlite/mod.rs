//! The SQLite engine: the actor's connection and what it keeps around it (the call guard, WAL
//! checkpoints, the file's identity), a transaction closure's raw SQL handle (`Sql`), fresh
//! in-memory images for fuzz harnesses, the checks on a store file before it is opened, and
//! backups.
//!
//! Private to the engine: nothing above `core` can name a connection. `core/mod.rs` re-exports
//! the few things the handle and the crate root need (`Sql`, backups, the store file checks).

pub(crate) mod backup;
pub(crate) mod conn;
pub(crate) mod fresh;
pub(crate) mod guard;
pub(crate) mod identity;
pub(crate) mod left_behind;
pub(crate) mod raw;
pub(crate) mod store_file;
pub(crate) mod wal;
