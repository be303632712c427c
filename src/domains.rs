//! The one place that names every domain for the engine and the handle: what each needs from
//! them, and the calls that open a store with it (`Store::open` and the rest). Adding a domain
//! adds a line here only if the engine must act for it (an alarm, a stream only it may write,
//! work at open); its accessor on `Store` lives in the domain.

use std::path::Path;

use crate::core::actor::{AlarmOp, EngineHooks};
use crate::core::schema::Location;
use crate::core::tx::Tx;
#[cfg(feature = "postgres")]
use crate::error::Error;
use crate::error::Result;
use crate::options::Options;
use crate::store::{DEFAULT_TENANT, DomainHooks, Store};
use crate::{graph, process, queue, workflow};

/// The domains' hooks.
pub(crate) static HOOKS: DomainHooks = DomainHooks {
    engine: EngineHooks {
        alarm: Some(AlarmOp { tenant: DEFAULT_TENANT, apply: sweeps }),
        owned_streams: &[process::owns_stream, workflow::owns_stream],
    },
    at_open: &[graph::at_open, queue::at_open],
};

/// How long after a failed sweep it runs again, in milliseconds.
const SWEEP_RETRY_MS: i64 = 1_000;

/// What the actor runs when an alarm a domain set is due: every domain's sweep, each on its
/// own, each setting the alarm again for its own next time (the graphs' deadlines, the queue's
/// schedules). One that fails (rolled back alone) is told and tried again a moment later, and
/// the others' work commits.
fn sweeps(tx: &mut Tx<'_>) -> Result<()> {
    if let Err(error) = tx.exec(graph::ExpireDeadlines) {
        tracing::warn!(%error, "spindle: the graphs' deadline sweep failed; tried again");
        tx.set_alarm(tx.now_ms().saturating_add(SWEEP_RETRY_MS));
    }
    if let Err(error) = tx.exec(queue::SweepSchedules) {
        tracing::warn!(%error, "spindle: the schedules' sweep failed; tried again");
        tx.set_alarm(tx.now_ms().saturating_add(SWEEP_RETRY_MS));
    }
    Ok(())
}

impl Store {
    /// Opens (or creates) the store file at `path` with the default, durable options.
    ///
    /// A writable store holds a lock on `<path>-presence` (made beside the file if missing,
    /// never deleted) while it is open, so that a store opening knows whether it is alone
    /// (see `Options::recover_on_open`).
    ///
    /// # Errors
    /// `StoreFile` when the path cannot hold a store or this user may not use the file there:
    /// a directory, a device, a missing directory, a directory it may not make the store's
    /// files in, a file it may not read or write, `-wal` or `-shm` of another user (nothing is
    /// created beside it then); `StoreFile` of kind `WouldBlock` when another store recovering
    /// at open held this one off past `busy_timeout`, or when `<path>-presence` cannot be
    /// opened or is not a regular file of a user who may write the store; `NotADatabase`,
    /// `Corrupt`, `SchemaTooNew`, `Busy`, `Io` or `Sqlite` when the file cannot be opened as a
    /// store; nothing is changed in a file that is refused.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Self::open_with(path, Options::default())
    }

    /// Opens (or creates) the store file at `path` with `options`.
    ///
    /// # Errors
    /// As [`Store::open`], and `InvalidInput` for unusable options. A read-only open of a file
    /// that is not there, or of another user's store that no process has open (SQLite would
    /// make `-wal` and `-shm` its owner could not write), is refused with `StoreFile`.
    pub fn open_with(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        Self::start(Location::File(path.as_ref().to_path_buf()), options, &HOOKS)
    }

    /// Opens a private in-memory store (gone when closed), for tests and scratch work.
    ///
    /// # Errors
    /// Only if SQLite cannot start.
    pub fn open_in_memory() -> Result<Store> {
        Self::open_in_memory_with(Options::default())
    }

    /// Opens a private in-memory store with `options` (a `ManualClock`, say). It starts as a
    /// copy of a fresh store (or on a closed in-memory store's connection, wiped), so opening
    /// one costs a fraction of a millisecond; it holds at most 1 GiB (SQLite's bound for such
    /// copies), past which writes fail with `DiskFull`.
    ///
    /// # Errors
    /// `InvalidInput` for unusable options.
    pub fn open_in_memory_with(options: Options) -> Result<Store> {
        Self::start(Location::Memory, options, &HOOKS)
    }

    /// Opens (or creates) the store in a PostgreSQL database, shared by every process that
    /// connects to it, with the default options. `url` is a `postgres://` URL or a
    /// `key=value` connection string; the store lives in the connection's current schema
    /// (`options=-csearch_path=NAME` in the URL chooses another).
    ///
    /// # Errors
    /// `Postgres` when the server cannot be reached or refuses; `InvalidInput` for a URL that
    /// does not parse; `NotADatabase` when the schema holds tables that are not a store's;
    /// `SchemaTooNew` for a store of a newer Spindle; `Busy` when another store recovering at
    /// open (`Options::recover_on_open`) held this one off longer than `busy_timeout`.
    #[cfg(feature = "postgres")]
    pub fn connect(url: &str) -> Result<Store> {
        Self::connect_with(url, Options::default())
    }

    /// Opens (or creates) the store in a PostgreSQL database with `options`.
    ///
    /// # Errors
    /// As [`Store::connect`], `InvalidInput` for options only a SQLite store has (a VFS, a file
    /// size cap), and `NotADatabase` for a read-only store where the schema holds none (no
    /// schema is created then).
    #[cfg(feature = "postgres")]
    pub fn connect_with(url: &str, options: Options) -> Result<Store> {
        if options.vfs.is_some() || options.file_bytes_max.is_some() {
            return Err(Error::InvalidInput(
                "a PostgreSQL store has no SQLite file: no VFS, no file size cap".into(),
            ));
        }
        Self::start(Location::Postgres(url.to_owned()), options, &HOOKS)
    }
}

#[cfg(test)]
mod tests {
    use crate::Result;
    use crate::core::fresh_tests::KEPT_HERE;

    #[test]
    fn an_inline_store_that_wrote_in_every_domain_leaves_its_connection_as_a_spare() -> Result<()> {
        use serde_json::json;
        let options = crate::Options { inline: true, ..crate::Options::default() };
        let store = crate::Store::open_in_memory_with(options)?;
        let flows = store.workflows();
        flows.put_definition("w", "v1", json!({}))?;
        let execution = flows.create_execution("w", "v1", json!({}))?;
        flows.write_snapshot(&execution.id, 0, json!({}))?;
        let registration = crate::Registration::new("p", "tool", json!({}));
        store.processes().register(registration)?;
        store.processes().append_event("p", crate::AppendRequest::cancel_requested("test"))?;
        store.queue().enqueue(crate::NewItem::new("q", json!({})))?;
        let before = KEPT_HERE.with(std::cell::Cell::get);
        store.close()?;
        assert_eq!(KEPT_HERE.with(std::cell::Cell::get), before + 1, "wiped and kept");
        Ok(())
    }
}
