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
//!   (up to `busy_timeout`, then `Error::StoreFile` of kind `WouldBlock`, naming the presence
//!   file: a recovery that runs longer than that fails the stores opening meanwhile). The lock
//!   belongs to the open file, not the process, so two stores of one process on one file see
//!   each other as two processes' would. Going from shared to exclusive and back is not atomic
//!   (the old lock is let go first, and may be lost when the new one is refused), so a store
//!   always finishes holding one again before it does any work; what holds is that a store
//!   holds the lock exclusively only while no other store that holds it is doing work. A
//!   closing store lets the lock go before it closes the file: a child process that another
//!   thread forked shares the open file until it runs its program, and would hold the lock as
//!   long. The lock is on its own file, never on the store's (closing any descriptor of a file
//!   drops the process's POSIX locks on it, which are SQLite's), and that file is never deleted
//!   (deleting a lock file races with a process that has just opened it).
//! - The presence file gives read and write to the classes (owner, group, others) the store
//!   file's mode lets write, and nothing to the others (`store_file::presence_mode`: 0600
//!   beside a store of mode 0644): a lock can be taken through a descriptor open only to read,
//!   so a user who may only read the store could otherwise hold it exclusively (the owner's
//!   stores could not open to write) or shared (no store would ever be alone). A store opens it
//!   to read and write, and, where it may (the file is its user's, or it runs as root), gives
//!   it that mode again when it has another (one made by an older version, or a store file
//!   whose mode changed). A store running as root gives a presence file it makes to the store
//!   file's owner, as SQLite does its `-wal` and `-shm`. Anyone who may write the directory may
//!   put a file at that name first, so it is opened without following a symbolic link and
//!   without waiting (a named pipe would never answer), and refused, naming it, unless it is a
//!   regular file whose owner the store file's mode lets write the store. A store that would
//!   have to make it in a directory its user may not write is refused before SQLite opens the
//!   store (`store_file::check_before_open`), saying how to make it once, rather than opened
//!   without a lock: a store that holds none would be invisible to the others, which could
//!   then recover its running nodes.
//! - What this does not cover. A dead process's running nodes are recovered only when a store
//!   opens alone: a long-lived writable store (`spindle ui --allow-actions`, an application
//!   that keeps its store open) keeps every other from being alone, so nothing is recovered at
//!   open while it lives (the command line's runs are covered anyway: a runner of the run
//!   takes over a node whose lease lapsed). Hard links give one file two names, and each name
//!   its own presence file and so its own lock (SQLite's own `-wal` and `-shm` go by name too:
//!   SQLite warns against opening a database through more than one name). On NFS, Linux
//!   emulates `flock` with POSIX byte-range locks, which belong to the process: two stores of
//!   one process may then both take the lock exclusively, and each sees itself alone.
//! - Work that replaces the store's file (`core::sqlite::backup`'s restore) holds the lock exclusively
//!   from start to end, without waiting for it ([`Presence::hold_exclusive`]): refused while
//!   any store is open to write, and no store opens to write meanwhile.
//! - A read-only store does no work recovery could interrupt: it holds nothing and creates no
//!   file. An in-memory store is private, and so alone; so is a store on a VFS of the caller's
//!   own (`Options::vfs`), whose files need not be the operating system's.

use std::fs::{File, Metadata, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::sqlite::store_file::{self, Credentials};
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

/// How long a store waiting for another's recovery sleeps between looks, at most.
const PAUSE_MAX: Duration = Duration::from_millis(50);

/// `open(2)` flags std has no builder method for, with the values the `libc` crate gives them
/// on Linux (the library does without that dependency): never through a symbolic link
/// (`O_NOFOLLOW`: the open fails), and never waiting (`O_NONBLOCK`: a named pipe opens at
/// once, and is then refused by its kind). std opens every file with `O_CLOEXEC` already. On
/// a target not listed they are left out: the file's kind is still looked at before the open
/// (not following a link) and after it, only not in one step with it.
mod open_flags {
    /// `O_NOFOLLOW` where it is 0o100000 (these architectures use 0o400000 for
    /// `O_DIRECTORY`).
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        any(
            target_arch = "arm",
            target_arch = "aarch64",
            target_arch = "powerpc",
            target_arch = "powerpc64"
        )
    ))]
    pub(super) const O_NOFOLLOW: i32 = 0o100_000;
    /// `O_NOFOLLOW` where it is 0o400000.
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        any(
            target_arch = "x86",
            target_arch = "x86_64",
            target_arch = "riscv64",
            target_arch = "loongarch64",
            target_arch = "s390x"
        )
    ))]
    pub(super) const O_NOFOLLOW: i32 = 0o400_000;
    /// `O_NOFOLLOW`: left out here.
    #[cfg(not(all(
        any(target_os = "linux", target_os = "android"),
        any(
            target_arch = "arm",
            target_arch = "aarch64",
            target_arch = "powerpc",
            target_arch = "powerpc64",
            target_arch = "x86",
            target_arch = "x86_64",
            target_arch = "riscv64",
            target_arch = "loongarch64",
            target_arch = "s390x"
        )
    )))]
    pub(super) const O_NOFOLLOW: i32 = 0;
    /// `O_NONBLOCK`, 0o4000 on every architecture above.
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        any(
            target_arch = "arm",
            target_arch = "aarch64",
            target_arch = "powerpc",
            target_arch = "powerpc64",
            target_arch = "x86",
            target_arch = "x86_64",
            target_arch = "riscv64",
            target_arch = "loongarch64",
            target_arch = "s390x"
        )
    ))]
    pub(super) const O_NONBLOCK: i32 = 0o4_000;
    /// `O_NONBLOCK`: left out here.
    #[cfg(not(all(
        any(target_os = "linux", target_os = "android"),
        any(
            target_arch = "arm",
            target_arch = "aarch64",
            target_arch = "powerpc",
            target_arch = "powerpc64",
            target_arch = "x86",
            target_arch = "x86_64",
            target_arch = "riscv64",
            target_arch = "loongarch64",
            target_arch = "s390x"
        )
    )))]
    pub(super) const O_NONBLOCK: i32 = 0;
}

/// A writable SQLite file store's presence on its file: the shared lock on `<db>-presence`,
/// held until this is dropped (see the module header).
#[derive(Debug)]
pub(crate) struct Presence {
    file: File,
    path: PathBuf,
    /// How long to wait for another store's recovery before giving up.
    busy_timeout: Duration,
}

impl Presence {
    /// Joins the stores open on the file at `db` (which exists): opens `<db>-presence`
    /// (making it if it is missing) and holds it shared, waiting while a store recovering at
    /// open holds it exclusively.
    ///
    /// # Errors
    /// `StoreFile`: of kind `WouldBlock` when another store (recovering at open) held the
    /// lock exclusively longer than `busy_timeout`; of another kind when the presence file
    /// cannot be made or opened, or is not a regular file of a user who may write the store.
    pub(crate) fn join(db: &Path, busy_timeout: Duration) -> Result<Self> {
        let path = presence_path(db)?;
        let store_file = std::fs::metadata(db).map_err(|error| cannot(&path, &error))?;
        let file = open_or_make(&path, &store_file)?;
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

    /// Holds the presence lock of the store file `db` exclusively, without waiting, for work
    /// that must not run while any store has the file open to write (`core::sqlite::backup`'s
    /// restore, which replaces the file). `db` is the store file's resolved path, and may not
    /// exist yet: `store_file` is then the metadata of the file about to take its place (the
    /// presence file's mode and the owners it trusts are judged from it). Let go when dropped.
    ///
    /// # Errors
    /// `StoreFile` of kind `ResourceBusy` when a store holds the lock (it is open to write),
    /// and as [`Presence::join`] when the presence file cannot be made or opened.
    pub(crate) fn hold_exclusive(db: &Path, store_file: &Metadata) -> Result<Self> {
        let path = store_file::beside(db, store_file::PRESENCE_SUFFIX);
        let file = open_or_make(&path, store_file)?;
        match file.try_lock() {
            Ok(()) => Ok(Self { file, path, busy_timeout: Duration::ZERO }),
            Err(TryLockError::WouldBlock) => Err(open_elsewhere(db, &path)),
            Err(TryLockError::Error(error)) => Err(cannot(&path, &error)),
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
                Err(TryLockError::WouldBlock) => return Err(self.held_off()),
                Err(TryLockError::Error(error)) => return Err(cannot(&self.path, &error)),
            }
            tracing::debug!(
                pause_ms = pause.as_millis(),
                "spindle: the presence lock held off; retried"
            );
            std::thread::sleep(pause);
            pause = (pause * 2).min(PAUSE_MAX);
        }
    }

    /// Another store held the lock exclusively for longer than the busy timeout: not the
    /// store's write lock (`Busy`), so it says whose it is.
    fn held_off(&self) -> Error {
        let message = format!(
            "{} was held exclusively for longer than the busy timeout ({} ms): another store \
             opening alone on this file holds it so while it recovers the graphs' interrupted \
             work (or another process holds it). Try again once it is done, or open with a \
             longer busy timeout",
            self.path.display(),
            self.busy_timeout.as_millis()
        );
        store_file::refused(&self.path, io::ErrorKind::WouldBlock, &message)
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
    Ok(store_file::beside(&resolved, store_file::PRESENCE_SUFFIX))
}

/// Opens the presence file to read and write, or makes it (see [`make`]); then checks what
/// was opened ([`vet`]). A symbolic link or a file that is not a regular one is refused
/// without being followed or waited on; anyone who may write the directory can put one there.
fn open_or_make(path: &Path, store_file: &Metadata) -> Result<File> {
    // Another process may make it (or, against the rules, delete it) between the two tries.
    let mut tries = 0;
    loop {
        refuse_unless_regular(path)?;
        match options().read(true).write(true).open(path) {
            Ok(file) => return vet(file, path, store_file),
            Err(error) if error.kind() == io::ErrorKind::NotFound && tries < 3 => {}
            Err(error) => return Err(cannot_open(path, store_file, &error)),
        }
        match make(path, store_file) {
            Ok(file) => return vet(file, path, store_file),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => tries += 1,
            Err(error) => return Err(cannot(path, &error)),
        }
    }
}

/// What opens the presence file: without following a link at its end, without waiting.
#[cfg(unix)]
fn options() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.custom_flags(open_flags::O_NOFOLLOW | open_flags::O_NONBLOCK);
    options
}

#[cfg(not(unix))]
fn options() -> OpenOptions {
    OpenOptions::new()
}

/// Makes the presence file (never through a link: `O_EXCL` refuses any file there) with the
/// mode [`store_file::presence_mode`] gives (without the umask, as SQLite does its `-wal` and
/// `-shm`), and, when made by root, gives it to the store file's owner and group.
#[cfg(unix)]
fn make(path: &Path, store_file: &Metadata) -> io::Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let mode = store_file::presence_mode(store_file.mode());
    let file = options().read(true).write(true).create_new(true).mode(mode).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    if Credentials::current().is_some_and(|me| me.is_root()) {
        std::os::unix::fs::fchown(&file, Some(store_file.uid()), Some(store_file.gid()))?;
    }
    Ok(file)
}

#[cfg(not(unix))]
fn make(path: &Path, _store_file: &Metadata) -> io::Result<File> {
    options().read(true).write(true).create_new(true).open(path)
}

/// Refuses a presence path that names something other than a regular file (a link is not
/// followed); a missing one is fine.
fn refuse_unless_regular(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_file() => Err(not_regular(path, &meta)),
        Ok(_) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(cannot(path, &error)),
    }
}

/// The opened presence file, if it is a regular file of a user who may write the store
/// (looked at on the open file: the path may have changed since); given the mode it should
/// have where this process may set it.
fn vet(file: File, path: &Path, store_file: &Metadata) -> Result<File> {
    let meta = file.metadata().map_err(|error| cannot(path, &error))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    check_owner(path, &meta, store_file)?;
    fit_mode(&file, &meta, store_file).map_err(|error| cannot(path, &error))?;
    Ok(file)
}

/// Refuses a presence file whose owner the store file's mode does not let write the store:
/// another user made it (in a directory such as `/tmp` anyone may), and could hold its lock.
#[cfg(unix)]
fn check_owner(path: &Path, meta: &Metadata, store_file: &Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = Credentials::current();
    let trusted = meta.uid() == store_file.uid()
        || meta.uid() == 0
        || me.is_some_and(|me| me.uid == meta.uid())
        || store_file::others_may_write(store_file.mode(), meta.gid(), store_file);
    if trusted {
        return Ok(());
    }
    let message = format!(
        "{} belongs to {}, whom the store file's mode does not let write the store: another \
         user made it, and could hold its lock to keep stores from opening to write or from \
         recovering. Remove it (as its owner or as root); the next store opening to write \
         makes it again",
        path.display(),
        store_file::user(meta.uid())
    );
    Err(store_file::refused(path, io::ErrorKind::PermissionDenied, &message))
}

#[cfg(not(unix))]
fn check_owner(_path: &Path, _meta: &Metadata, _store_file: &Metadata) -> Result<()> {
    Ok(())
}

/// Gives the presence file the mode the store file's mode calls for, if it has another and
/// this process may change it (it is this user's, or this is root): a presence file made by
/// an older version has the store file's mode, and the store file's mode may have changed.
#[cfg(unix)]
fn fit_mode(file: &File, meta: &Metadata, store_file: &Metadata) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let wanted = store_file::presence_mode(store_file.mode());
    let mine = Credentials::current().is_some_and(|me| me.is_root() || me.uid == meta.uid());
    if mine && meta.mode() & 0o7777 != wanted {
        file.set_permissions(std::fs::Permissions::from_mode(wanted))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn fit_mode(_file: &File, _meta: &Metadata, _store_file: &Metadata) -> io::Result<()> {
    Ok(())
}

/// A store holds the presence lock of `db` (it is open to write): what must not run meanwhile
/// is refused.
fn open_elsewhere(db: &Path, presence: &Path) -> Error {
    let message = format!(
        "a store is open to write on {} (it holds {}): close it first (stop the runs, the \
         dashboard, the application that has it open), then try again",
        db.display(),
        presence.display()
    );
    store_file::refused(db, io::ErrorKind::ResourceBusy, &message)
}

/// The presence path names a link, a named pipe or another file that is not a regular one.
fn not_regular(path: &Path, meta: &Metadata) -> Error {
    let message = format!(
        "{} is {}, not a regular file: a store open to write holds a lock on this file beside \
         the store's, and opens nothing else there (anyone who may write the directory can put \
         a file there). Remove it; the next store opening to write makes it",
        path.display(),
        store_file::file_kind(meta)
    );
    store_file::refused(path, io::ErrorKind::InvalidInput, &message)
}

/// The presence file is there and cannot be opened to read and write: say who may.
#[cfg(unix)]
fn cannot_open(path: &Path, store_file: &Metadata, error: &io::Error) -> Error {
    use std::os::unix::fs::MetadataExt;
    if error.kind() != io::ErrorKind::PermissionDenied {
        return cannot(path, error);
    }
    let mode = store_file::presence_mode(store_file.mode());
    let message = format!(
        "permission denied: {} may not open {} to read and write: a store open to write holds \
         a lock on it, and its mode gives read and write only to those the store file's mode \
         lets write (mode {mode:04o} here). The store file's owner's next open to write gives \
         it that mode, or `chmod {mode:04o} {}`",
        store_file::current_user(),
        path.display(),
        path.display()
    );
    store_file::refused(path, io::ErrorKind::PermissionDenied, &message)
}

#[cfg(not(unix))]
fn cannot_open(path: &Path, _store_file: &Metadata, error: &io::Error) -> Error {
    cannot(path, error)
}

/// The presence file at `path` cannot be made, opened or locked.
fn cannot(path: &Path, error: &io::Error) -> Error {
    let message = format!(
        "cannot use {} ({error}): a writable store holds a lock on this file beside the \
         store's while it is open, so that another opening it knows it is not alone",
        path.display()
    );
    store_file::refused(path, error.kind(), &message)
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
        match Presence::join(&db, Duration::from_millis(100)) {
            Err(Error::StoreFile { path, kind: io::ErrorKind::WouldBlock, message }) => {
                assert_eq!(path, first.path);
                assert!(message.contains("recovers") && message.contains("100 ms"), "{message}");
            }
            other => panic!("expected StoreFile (WouldBlock), got {other:?}"),
        }
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
    fn work_that_must_run_alone_is_refused_while_a_store_is_there_and_holds_others_off()
    -> Result<()> {
        let (_dir, db) = store_file();
        let meta = std::fs::metadata(&db)?;
        let there = Presence::join(&db, Duration::from_millis(200))?;
        match Presence::hold_exclusive(&db, &meta) {
            Err(Error::StoreFile { path, kind: io::ErrorKind::ResourceBusy, message }) => {
                assert_eq!(path, db);
                assert!(message.contains("open to write") && message.contains("-presence"));
            }
            other => panic!("expected StoreFile (ResourceBusy), got {other:?}"),
        }
        drop(there);
        let alone = Presence::hold_exclusive(&db, &meta)?;
        // Meanwhile a store opening waits, then gives up; once it is let go, one opens.
        match Presence::join(&db, Duration::from_millis(50)) {
            Err(Error::StoreFile { kind: io::ErrorKind::WouldBlock, .. }) => {}
            other => panic!("expected StoreFile (WouldBlock), got {other:?}"),
        }
        drop(alone);
        drop(Presence::join(&db, Duration::from_millis(200))?);
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
    fn the_presence_file_gives_read_and_write_to_those_who_may_write_the_store() -> Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (dir, db) = store_file();
        let presence = dir.path().join("s.db-presence");
        let mode_after_join = |store_mode: u32| -> Result<u32> {
            std::fs::set_permissions(&db, PermissionsExt::from_mode(store_mode))?;
            drop(Presence::join(&db, Duration::from_millis(200))?);
            Ok(std::fs::metadata(&presence)?.mode() & 0o7777)
        };
        assert_eq!(mode_after_join(0o644)?, 0o600, "made: only the owner may write the store");
        // Made before with another mode (an older version gave it the store file's), or the
        // store file's mode changed: set again by its owner's (or root's) next join.
        std::fs::set_permissions(&presence, PermissionsExt::from_mode(0o644))?;
        assert_eq!(mode_after_join(0o644)?, 0o600);
        assert_eq!(mode_after_join(0o664)?, 0o660);
        assert_eq!(mode_after_join(0o666)?, 0o666);
        assert_eq!(mode_after_join(0o444)?, 0o000, "nobody may write it (root still opens it)");
        assert_eq!(store_file::presence_mode(0o4755), 0o600);
        assert_eq!(store_file::presence_mode(0o622), 0o666);
        Ok(())
    }

    /// The refusal of a join on `db` within a few seconds (a join that hangs fails the test).
    fn refusal(db: &Path) -> (PathBuf, io::ErrorKind, String) {
        let (send, answer) = std::sync::mpsc::channel();
        let db = db.to_path_buf();
        std::thread::spawn(move || send.send(Presence::join(&db, Duration::from_millis(200))));
        match answer.recv_timeout(Duration::from_secs(10)).expect("the join hangs") {
            Err(Error::StoreFile { path, kind, message }) => (path, kind, message),
            other => panic!("expected StoreFile, got {other:?}"),
        }
    }

    #[test]
    fn a_named_pipe_at_the_presence_path_is_refused_at_once() {
        let (dir, db) = store_file();
        let presence = dir.path().join("s.db-presence");
        let made = std::process::Command::new("mkfifo").arg(&presence).status();
        if !made.is_ok_and(|status| status.success()) {
            println!("no mkfifo here; not checked");
            return;
        }
        let (path, kind, message) = refusal(&db);
        assert_eq!((path, kind), (presence.clone(), io::ErrorKind::InvalidInput));
        assert!(message.contains("is a named pipe, not a regular file"), "{message}");
        assert!(message.contains(&presence.display().to_string()), "{message}");
        // Opened without waiting, it is still refused by its kind (as when a pipe took a
        // regular file's place between the look and the open).
        let opened = options().read(true).write(true).open(&presence).expect("no wait");
        match vet(opened, &presence, &std::fs::metadata(&db).expect("store")) {
            Err(Error::StoreFile { kind: io::ErrorKind::InvalidInput, .. }) => {}
            other => panic!("expected StoreFile (InvalidInput), got {other:?}"),
        }
    }

    #[test]
    fn a_symbolic_link_at_the_presence_path_is_never_followed() -> Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (dir, db) = store_file();
        let presence = dir.path().join("s.db-presence");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"kept")?;
        std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o644))?;
        std::os::unix::fs::symlink(&victim, &presence)?;
        let (path, kind, message) = refusal(&db);
        assert_eq!((path, kind), (presence.clone(), io::ErrorKind::InvalidInput));
        assert!(message.contains("is a symbolic link"), "{message}");
        let kept = std::fs::metadata(&victim)?;
        assert_eq!((std::fs::read(&victim)?, kept.mode() & 0o777), (b"kept".to_vec(), 0o644));
        // Not followed even when the look missed it: the open itself refuses a link.
        assert!(options().read(true).write(true).open(&presence).is_err(), "O_NOFOLLOW");
        // A link to nowhere makes nothing there either.
        std::fs::remove_file(&presence)?;
        let nowhere = dir.path().join("nowhere");
        std::os::unix::fs::symlink(&nowhere, &presence)?;
        let (_, kind, _) = refusal(&db);
        assert_eq!(kind, io::ErrorKind::InvalidInput);
        assert!(make(&presence, &std::fs::metadata(&db)?).is_err(), "O_EXCL");
        assert!(!nowhere.exists(), "nothing made through the link");
        Ok(())
    }

    #[test]
    fn a_presence_file_of_a_user_who_may_not_write_the_store_is_refused() -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if !Credentials::current().is_some_and(|me| me.is_root()) {
            println!("needs root to give a file to another user; not checked");
            return Ok(());
        }
        let (dir, db) = store_file();
        std::fs::set_permissions(&db, PermissionsExt::from_mode(0o644))?;
        let presence = dir.path().join("s.db-presence");
        std::fs::write(&presence, b"")?;
        std::fs::set_permissions(&presence, PermissionsExt::from_mode(0o666))?;
        std::os::unix::fs::chown(&presence, Some(64_102), Some(64_102))?;
        let (path, kind, message) = refusal(&db);
        assert_eq!((path, kind), (presence.clone(), io::ErrorKind::PermissionDenied));
        assert!(message.contains("belongs to uid 64102"), "{message}");
        // The store file's group may write it, and this is the store file's group's: fine.
        std::fs::set_permissions(&db, PermissionsExt::from_mode(0o664))?;
        std::os::unix::fs::chown(&db, Some(64_101), Some(64_102))?;
        drop(Presence::join(&db, Duration::from_millis(200))?);
        Ok(())
    }
}
