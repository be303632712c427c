//! Whether a store is alone on its database when it opens: recovering interrupted work at open
//! (the graphs' running nodes) is right only when no other live process is running that work.
//!
//! Every writable store says it is there for as long as it is open, and an opening store that
//! finds no other one there is alone: it recovers, and keeps others from opening until it is
//! done (`Options::recover_on_open`).
//!
//! - On PostgreSQL a writable store's session holds the schema's presence lock shared; an
//!   opening store that can take it exclusively too is the only one (`PgConn::hold_alone`).
//! - A writable SQLite file store holds an advisory lock (`flock`) shared on a file beside the
//!   store's, `<db>-presence` ([`Presence`]), from its open to its close; the kernel drops it
//!   when the process dies, however it dies. An opening store that can take the lock
//!   exclusively is alone, and holds it so, while it recovers: another store waits to open
//!   (up to `busy_timeout`, then `Busy`) until it is shared again. The lock belongs to the
//!   open file, not the process, so two stores of one process on one file see each other as
//!   two processes' would. Going from shared to exclusive and back is not atomic (the old
//!   lock is let go first, and may be lost when the new one is refused), so a store always
//!   finishes holding one again before it does any work; what holds is that a store holds the
//!   lock exclusively only while no other store that holds it is doing work. A closing store
//!   lets the lock go before it closes the file: a child process that another thread forked
//!   shares the open file until it runs its program, and would hold the lock as long. The lock is on
//!   its own file, never on the store's (closing any descriptor of a file drops the process's
//!   POSIX locks on it, which are SQLite's), and that file is never deleted (deleting a lock
//!   file races with a process that has just opened it). It is made with the store file's mode
//!   (an owner running as root gives it to the store file's owner, as SQLite does its `-wal`
//!   and `-shm`); one that cannot be written is opened to read, which is enough to lock it.
//! - A read-only store does no work recovery could interrupt: it holds nothing and creates no
//!   file. An in-memory store is private, and so alone; so is a store on a VFS of the caller's
//!   own (`Options::vfs`), whose files need not be the operating system's.

use std::fs::{File, Metadata, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::{Error, Result};

/// Whether the store is alone on its database; if so, others wait to open until
/// [`ReleaseAlone`].
#[derive(Debug, Clone)]
pub(crate) struct HoldAlone;

/// Lets other stores open again after [`HoldAlone`] returned `true`.
#[derive(Debug, Clone)]
pub(crate) struct ReleaseAlone;

impl Sealed for HoldAlone {}
impl Op for HoldAlone {
    type Output = bool;
    fn access(&self) -> Access {
        Access::Admin
    }
    /// A session lock, taken in a reading batch: it takes no tenant's writers.
    fn writes(&self) -> bool {
        false
    }
    fn on_writer(&self) -> bool {
        true
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<bool> {
        tx.hold_alone()
    }
}

impl Sealed for ReleaseAlone {}
impl Op for ReleaseAlone {
    type Output = ();
    fn access(&self) -> Access {
        Access::Admin
    }
    fn writes(&self) -> bool {
        false
    }
    fn on_writer(&self) -> bool {
        true
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.release_alone()
    }
}

/// What the presence file's name adds to the store file's.
const SUFFIX: &str = "-presence";

/// How long a store waiting for another's recovery sleeps between looks, at most.
const PAUSE_MAX: Duration = Duration::from_millis(50);

/// A writable SQLite file store's presence on its file: the shared lock on `<db>-presence`,
/// held until this is dropped (see the module header).
#[derive(Debug)]
pub(crate) struct Presence {
    file: File,
    path: PathBuf,
    /// How long to wait for another store's recovery before `Busy`.
    busy_timeout: Duration,
}

impl Presence {
    /// Joins the stores open on the file at `db` (which exists): opens `<db>-presence`
    /// (making it if it is missing) and holds it shared, waiting while a store recovering at
    /// open holds it exclusively.
    ///
    /// # Errors
    /// `Busy` when a recovering store held it longer than `busy_timeout`; `StoreFile` when the
    /// presence file cannot be made or opened.
    pub(crate) fn join(db: &Path, busy_timeout: Duration) -> Result<Self> {
        let path = presence_path(db)?;
        let store_file = std::fs::metadata(db).map_err(|error| cannot(&path, &error))?;
        let file = open_or_make(&path, &store_file).map_err(|error| cannot(&path, &error))?;
        let presence = Self { file, path, busy_timeout };
        presence.share()?;
        Ok(presence)
    }

    /// Whether no other store holds the presence lock; if so, holds it exclusively until
    /// [`Presence::release_alone`]. Otherwise the store goes on holding it shared (taking it
    /// again if the refused exclusive request let it go).
    ///
    /// # Errors
    /// As [`Presence::join`].
    pub(crate) fn hold_alone(&self) -> Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(TryLockError::WouldBlock) => self.share().map(|()| false),
            Err(TryLockError::Error(error)) => Err(cannot(&self.path, &error)),
        }
    }

    /// Holds the lock shared again after [`Presence::hold_alone`] returned `true`.
    ///
    /// # Errors
    /// As [`Presence::join`].
    pub(crate) fn release_alone(&self) -> Result<()> {
        self.share()
    }

    /// Holds the lock shared, waiting (up to the busy timeout) while another store holds it
    /// exclusively. On a lock held exclusively, this converts it.
    fn share(&self) -> Result<()> {
        let deadline = Instant::now() + self.busy_timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            match self.file.try_lock_shared() {
                Ok(()) => return Ok(()),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {}
                Err(TryLockError::WouldBlock) => return Err(Error::Busy),
                Err(TryLockError::Error(error)) => return Err(cannot(&self.path, &error)),
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(PAUSE_MAX);
        }
    }
}

impl Drop for Presence {
    /// Lets the lock go before the file is closed: the lock belongs to the open file, which a
    /// child process forked by another thread shares until it runs its program (the file is
    /// closed then), and which would hold the lock that long after this store closed.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// `<db>-presence`, beside the file `db` names (after symbolic links, as SQLite's own `-wal`
/// and `-shm` are): every path to one file names one presence file.
fn presence_path(db: &Path) -> Result<PathBuf> {
    let resolved = std::fs::canonicalize(db).map_err(|error| cannot(db, &error))?;
    let mut name = resolved.into_os_string();
    name.push(SUFFIX);
    Ok(PathBuf::from(name))
}

/// Opens the presence file to read (enough to lock it, and all a user who may not write it
/// gets), or makes it with the store file's mode and owner.
fn open_or_make(path: &Path, store_file: &Metadata) -> io::Result<File> {
    // Another process may make it (or, against the rules, delete it) between the two tries.
    let mut tries = 0;
    loop {
        match OpenOptions::new().read(true).open(path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound && tries < 3 => {}
            opened => return opened,
        }
        match OpenOptions::new().read(true).write(true).create_new(true).open(path) {
            Ok(file) => {
                like_store_file(&file, store_file)?;
                return Ok(file);
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => tries += 1,
            Err(error) => return Err(error),
        }
    }
}

/// Gives a new presence file the store file's permissions (without the umask, as SQLite does
/// its `-wal` and `-shm`), and, when made by root, its owner and group: whoever may open the
/// store may lock it.
#[cfg(unix)]
fn like_store_file(file: &File, store_file: &Metadata) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    file.set_permissions(std::fs::Permissions::from_mode(store_file.mode() & 0o666))?;
    if crate::core::store_file::Credentials::current().is_some_and(|me| me.is_root()) {
        std::os::unix::fs::fchown(file, Some(store_file.uid()), Some(store_file.gid()))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn like_store_file(_file: &File, _store_file: &Metadata) -> io::Result<()> {
    Ok(())
}

/// The presence file at `path` cannot be made, opened or locked.
fn cannot(path: &Path, error: &io::Error) -> Error {
    Error::StoreFile {
        path: path.to_path_buf(),
        kind: error.kind(),
        message: format!(
            "cannot use {} ({error}): a writable store holds a lock on this file beside the \
             store's while it is open, so that another opening it knows it is not alone",
            path.display()
        ),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn store_file() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("s.db");
        std::fs::write(&db, b"").expect("store file");
        (dir, db)
    }

    #[test]
    fn the_first_present_is_alone_and_a_second_is_not_and_waits_while_it_recovers() -> Result<()> {
        let (_dir, db) = store_file();
        let first = Presence::join(&db, Duration::from_millis(200))?;
        assert!(first.hold_alone()?, "nobody else is there");
        // While the first recovers, a second cannot join: it waits, then gives up.
        let started = Instant::now();
        assert!(matches!(Presence::join(&db, Duration::from_millis(100)), Err(Error::Busy)));
        assert!(started.elapsed() >= Duration::from_millis(100));
        first.release_alone()?;
        let second = Presence::join(&db, Duration::from_millis(200))?;
        assert!(!second.hold_alone()?, "the first is there");
        assert!(!first.hold_alone()?, "the second is there");
        // A refused exclusive request left each holding it shared: a third is not alone.
        let third = Presence::join(&db, Duration::from_millis(200))?;
        assert!(!third.hold_alone()?);
        drop((first, second));
        assert!(third.hold_alone()?, "the others are gone");
        third.release_alone()?;
        Ok(())
    }

    #[test]
    fn a_closed_store_is_gone_even_while_a_forked_child_shares_its_open_file() -> Result<()> {
        let (_dir, db) = store_file();
        let first = Presence::join(&db, Duration::from_millis(200))?;
        // What a child forked by another thread holds until it runs its program.
        let shared_by_a_child = first.file.try_clone()?;
        drop(first);
        let second = Presence::join(&db, Duration::from_millis(200))?;
        assert!(second.hold_alone()?, "the closed store's lock went with it");
        drop(shared_by_a_child);
        Ok(())
    }

    #[test]
    fn every_path_to_one_file_names_one_presence_file_which_stays() -> Result<()> {
        let (dir, db) = store_file();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&db, &link)?;
        let first = Presence::join(&db, Duration::from_millis(200))?;
        let second = Presence::join(&link, Duration::from_millis(200))?;
        assert!(!second.hold_alone()?, "through a link, the same lock");
        drop((first, second));
        assert!(dir.path().join("s.db-presence").is_file(), "never deleted");
        assert!(!dir.path().join("link.db-presence").exists());
        Ok(())
    }

    #[test]
    fn the_presence_file_has_the_store_files_mode() -> Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (dir, db) = store_file();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o660))?;
        drop(Presence::join(&db, Duration::from_millis(200))?);
        let made = std::fs::metadata(dir.path().join("s.db-presence"))?;
        assert_eq!(made.mode() & 0o777, 0o660);
        // One that may only be read is still locked.
        std::fs::set_permissions(
            dir.path().join("s.db-presence"),
            PermissionsExt::from_mode(0o444),
        )?;
        let reading = Presence::join(&db, Duration::from_millis(200))?;
        assert!(reading.hold_alone()?);
        Ok(())
    }
}
