//! Copies of a store file: a live store copied while its writers go on ([`backup`], behind
//! `Store::backup_to`), and a copy put in the place of a store no process has open
//! ([`restore`], behind `Store::restore`).
//!
//! A backup reads one snapshot: a read-only connection of its own (never a reader thread's,
//! which the store's reads need meanwhile) opens after the call, begins a read transaction and
//! reads once, so every write acknowledged before the call is in it and nothing of a batch
//! that had not committed. SQLite's online backup API then copies the file's pages a step at a
//! time inside that one transaction (a step that began a transaction of its own would start
//! over whenever the writer committed). In WAL mode a reader holds no writer back: the writer
//! commits on; only the WAL cannot be reset past the snapshot until the copy is done, so it
//! grows by what is written meanwhile.
//!
//! Nothing appears at the destination before it is whole. The pages go to a file of its own in
//! the destination's directory (`DEST.partial-PID-N`, made with `O_EXCL`), which is switched to
//! a rollback journal (a single self-contained file: any SQLite reads it without making files
//! beside it; a store opening it to write switches it back to WAL), flushed to disk, and only
//! then linked in as `DEST`, which must not exist (a hard link never replaces a file; where the
//! file system has none, a rename after a look), and the directory flushed. A copy that fails
//! removes its partial file; one killed midway leaves it (and, when killed during the switch,
//! its `-wal` and `-shm`), under those names only, never at `DEST`.
//!
//! A restore takes the store's presence lock (`core::presence`) exclusively, without waiting:
//! while any store has the file open to write it is refused, and none opens to write until it
//! is done. Read-only stores hold no presence lock, so the kernel's list of locks is read too
//! (every SQLite connection that has read a WAL-mode store holds a lock on its `-shm`): a store
//! some process has open in any way is refused (on Linux). It replaces only a Spindle store (or
//! an empty file), never another file. The backup is copied into a partial file beside the
//! store the same way, and checked there before anything of the store changes: a store of a
//! schema version this build opens, SQLite's integrity check, no foreign key violation. Then
//! the old store's own WAL is checkpointed into it (so that the moment below loses nothing), its
//! `-wal`, `-shm` and `-journal` are removed (SQLite would apply a stale WAL to the new file),
//! and the copy renamed over it. Killed between the removal and the rename, the old store is
//! still whole at the path, and a restore run again finishes the work. One race is left: a
//! store that began to open the old file just before the restore looked (it holds no lock yet)
//! could go on with the replaced file; restore a store no process is starting either.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use super::{left_behind, store_file};
use crate::core::presence::Presence;
use crate::core::schema::{self, Location};
use crate::error::{Error, Result};
use crate::options::Options;

/// Pages copied per step (1 MiB of 4 KiB pages): how often progress is told.
const PAGES_PER_STEP: i32 = 256;

/// The files SQLite keeps beside a database file, which must not outlive it.
const SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// What a backup or a restore wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct BackupReport {
    /// The file written, as an absolute path.
    pub path: PathBuf,
    /// Its pages.
    pub pages: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// The store's schema version in it (an older one is brought up to date the next time a
    /// store opens it to write).
    pub schema_version: i64,
}

/// How far a backup has come, told after each step of the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupProgress {
    /// Pages copied so far.
    pub copied_pages: u64,
    /// Pages of the snapshot being copied.
    pub total_pages: u64,
}

/// What a store is copied from: kept by the handle from its open.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A store file on SQLite's own VFS: its absolute path, and the options it was opened with.
    File { path: PathBuf, options: Box<Options> },
    /// A private in-memory store.
    Memory,
    /// A store file on a VFS of the caller's own (`Options::vfs`).
    Vfs,
    /// A PostgreSQL store.
    #[cfg(feature = "postgres")]
    Postgres,
}

impl Source {
    /// What a store opened at `location` with `options` is copied from.
    pub(crate) fn of(location: &Location, options: &Options) -> Self {
        match location {
            Location::File(_) if options.vfs.is_some() => Source::Vfs,
            Location::File(path) => Source::File {
                path: std::path::absolute(path).unwrap_or_else(|_| path.clone()),
                options: Box::new(options.clone()),
            },
            Location::Memory => Source::Memory,
            #[cfg(feature = "postgres")]
            Location::Postgres(_) => Source::Postgres,
        }
    }

    /// The size of the store file's WAL (`None` without a file of SQLite's own VFS; 0 while
    /// there is no WAL file).
    pub(crate) fn wal_bytes(&self) -> Option<u64> {
        let Source::File { path, .. } = self else { return None };
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        Some(std::fs::metadata(wal).map_or(0, |metadata| metadata.len()))
    }

    /// The store file and its options, or why there is none to copy.
    fn file(&self) -> Result<(&Path, &Options)> {
        match self {
            Source::File { path, options } => Ok((path, options)),
            Source::Memory => Err(Error::InvalidInput(
                "an in-memory store has no file to back up: back up a store opened on a file"
                    .into(),
            )),
            Source::Vfs => Err(Error::InvalidInput(
                "a store on a VFS of the caller's own (Options::vfs) keeps its files there: \
                 copy them through that VFS"
                    .into(),
            )),
            #[cfg(feature = "postgres")]
            Source::Postgres => Err(Error::WrongEngine(
                "Store::backup_to copies a SQLite store file; back up a PostgreSQL store with \
                 pg_dump of its schema (pg_dump --schema=NAME), see the README"
                    .into(),
            )),
        }
    }
}

/// Copies the store at `source` into the new file `dest`, telling `progress` after each step
/// (see the module header).
///
/// # Errors
/// See `Store::backup_to`.
pub(crate) fn backup(
    source: &Source,
    dest: &Path,
    progress: &mut dyn FnMut(BackupProgress),
) -> Result<BackupReport> {
    let (path, options) = source.file()?;
    let dest = new_destination(dest)?;
    let from = open_snapshot(path, options)?;
    let partial = Partial::create(&dest, new_file_mode(&std::fs::metadata(path)?))?;
    let copied = copy_into(&from, &partial.path, Check::Shape, progress)?;
    drop(from);
    partial.sync()?;
    partial.link_as(&dest)?;
    Ok(copied.report(dest))
}

/// Puts a copy of the backup `src` in the place of the store file `dest` (see the module
/// header).
///
/// # Errors
/// See `Store::restore`.
pub(crate) fn restore(src: &Path, dest: &Path) -> Result<BackupReport> {
    let source = backup_file(src)?;
    let target = Target::of(dest)?;
    target.refuse_same_file(src, &source)?;
    // Refusals that need nothing made come first: a bad backup, a store in use, another file.
    let from = open_backup(src)?;
    schema::check_is_store(&from)?;
    target.refuse_in_use()?;
    target.refuse_unless_store()?;
    let _presence =
        Presence::hold_exclusive(&target.path, target.meta.as_ref().unwrap_or(&source))?;
    // A reader may have opened it before the lock was taken.
    target.refuse_in_use()?;
    let partial = Partial::create(&target.path, new_file_mode(&source))?;
    if let Some(meta) = &target.meta {
        fit_owner_and_mode(&partial.path, meta)?;
    }
    let copied = copy_into(&from, &partial.path, Check::Integrity, &mut |_| {})?;
    drop(from);
    partial.sync()?;
    target.clear_old_store()?;
    partial.rename_to(&target.path)?;
    Ok(copied.report(target.path))
}

/// How much of a copy is checked before it is put in place.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// A store of a version this build opens (a backup: the live store it came from is one).
    Shape,
    /// That, SQLite's integrity check and no foreign key violation (a restore).
    Integrity,
}

/// What a copy holds.
struct Copied {
    pages: u64,
    bytes: u64,
    schema_version: i64,
}

impl Copied {
    fn report(self, path: PathBuf) -> BackupReport {
        let Copied { pages, bytes, schema_version } = self;
        BackupReport { path, pages, bytes, schema_version }
    }
}

/// Copies the database `from` (in a read transaction: one snapshot) into the empty file at
/// `to`, then leaves it a self-contained rollback-journal file, checked as `check` says.
fn copy_into(
    from: &Connection,
    to: &Path,
    check: Check,
    progress: &mut dyn FnMut(BackupProgress),
) -> Result<Copied> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(store_file::sqlite_name(to), flags)?;
    // A partial file is thrown away whole on any failure: no journal, no syncs (it is synced
    // once, at the end).
    conn.pragma_update(None, "journal_mode", "OFF")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    copy_pages(from, &mut conn, progress)?;
    // The pages came with the WAL mode of the store's header: a single file instead.
    let mode: String = conn.query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(Error::InvalidInput(format!("the copy's journal mode stayed {mode}")));
    }
    let schema_version = schema::check_is_store(&conn)?;
    if check == Check::Integrity {
        check_integrity(&conn)?;
    }
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
    conn.close().map_err(|(_, error)| Error::from(error))?;
    let bytes = std::fs::metadata(to)?.len();
    Ok(Copied { pages: u64::try_from(pages).unwrap_or(0), bytes, schema_version })
}

/// SQLite's online backup of `from` into `to`, a step at a time.
fn copy_pages(
    from: &Connection,
    to: &mut Connection,
    progress: &mut dyn FnMut(BackupProgress),
) -> Result<()> {
    let backup = Backup::new(from, to)?;
    loop {
        let step = backup.step(PAGES_PER_STEP)?;
        let done = backup.progress();
        let total_pages = u64::try_from(done.pagecount).unwrap_or(0);
        let left = u64::try_from(done.remaining).unwrap_or(0);
        progress(BackupProgress { copied_pages: total_pages.saturating_sub(left), total_pages });
        match step {
            StepResult::Done => return Ok(()),
            StepResult::More => {}
            // The source's snapshot is held and the partial file is this copy's own: another
            // connection holds a lock it should not.
            _ => return Err(Error::Busy),
        }
    }
}

/// Refuses a copy that SQLite's integrity check or foreign key check finds fault with.
fn check_integrity(conn: &Connection) -> Result<()> {
    let mut statement = conn.prepare("PRAGMA integrity_check(20)")?;
    let found: Vec<String> =
        statement.query_map([], |row| row.get(0))?.collect::<rusqlite::Result<_>>()?;
    if found != ["ok"] {
        return Err(Error::Corrupt(format!(
            "the backup fails SQLite's integrity check: {}",
            found.join("; ")
        )));
    }
    let violations: i64 =
        conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| row.get(0))?;
    if violations > 0 {
        return Err(Error::Corrupt(format!("the backup has {violations} foreign key violations")));
    }
    Ok(())
}

/// A read-only connection to the store file at `path`, opened as the store's readers are,
/// holding one snapshot: a read transaction begun and read from.
fn open_snapshot(path: &Path, options: &Options) -> Result<Connection> {
    let options = Options { read_only: true, recover_on_open: false, ..options.clone() };
    let conn = schema::open(&Location::File(path.to_path_buf()), &options)?.conn;
    hold_snapshot(&conn)?;
    Ok(conn)
}

/// A read-only connection to the backup file at `src`, holding one snapshot.
fn open_backup(src: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(store_file::sqlite_name(src), flags)?;
    hold_snapshot(&conn)?;
    Ok(conn)
}

/// Begins a read transaction on `conn` and reads, which takes its snapshot (a deferred `BEGIN`
/// alone takes none), held until the connection ends it.
fn hold_snapshot(conn: &Connection) -> Result<()> {
    conn.execute_batch("BEGIN DEFERRED")?;
    let _: i64 = conn.query_row("SELECT count(*) FROM main.sqlite_schema", [], |row| row.get(0))?;
    Ok(())
}

/// `dest` as an absolute path, if a backup may make it: nothing there (nor SQLite's files
/// beside it, which would be taken for the copy's), in a directory that is there.
fn new_destination(dest: &Path) -> Result<PathBuf> {
    if dest.as_os_str().is_empty() {
        return Err(store_file::refused(
            dest,
            ErrorKind::InvalidInput,
            "a backup's path is empty: name a file",
        ));
    }
    let dest = std::path::absolute(dest)?;
    let taken = std::iter::once(dest.clone())
        .chain(SIDE_FILES.iter().map(|suffix| store_file::beside(&dest, suffix)))
        .find(|path| std::fs::symlink_metadata(path).is_ok());
    if let Some(taken) = taken {
        let message = format!(
            "{} exists: a backup makes a new file and never replaces one (nor a file SQLite \
             would take for the copy's own): name another path, or remove it",
            taken.display()
        );
        return Err(store_file::refused(&taken, ErrorKind::AlreadyExists, &message));
    }
    existing_directory(&dest)?;
    Ok(dest)
}

/// Refuses `path` unless the directory it names a file in is there.
fn existing_directory(path: &Path) -> Result<PathBuf> {
    let directory = store_file::directory_of(path);
    match std::fs::metadata(&directory) {
        Ok(meta) if meta.is_dir() => Ok(directory),
        Ok(_) => Err(store_file::refused(
            path,
            ErrorKind::NotADirectory,
            &format!(
                "{} is not a directory, so {} cannot be there",
                directory.display(),
                path.display()
            ),
        )),
        Err(error) => Err(store_file::refused(
            path,
            error.kind(),
            &format!("the directory of {} cannot be used: {error}", path.display()),
        )),
    }
}

/// The backup file at `src`: a regular file (its metadata; the file is not opened here).
fn backup_file(src: &Path) -> Result<Metadata> {
    match std::fs::metadata(src) {
        Ok(meta) if meta.is_file() => Ok(meta),
        Ok(_) => Err(store_file::refused(
            src,
            ErrorKind::InvalidInput,
            &format!("{} is not a regular file, so not a backup", src.display()),
        )),
        Err(error) => Err(store_file::refused(
            src,
            error.kind(),
            &format!("no backup at {}: {error}", src.display()),
        )),
    }
}

/// The store file a restore replaces (or makes).
struct Target {
    /// Its path after symbolic links (SQLite names the files beside it after that one).
    path: PathBuf,
    /// Its metadata, if there is a file there.
    meta: Option<Metadata>,
}

impl Target {
    /// The store file `dest` names, if a store could be opened there to write.
    fn of(dest: &Path) -> Result<Self> {
        store_file::check_before_open(dest, false)?;
        let path = match std::fs::canonicalize(dest) {
            Ok(resolved) => resolved,
            Err(error) if error.kind() == ErrorKind::NotFound => {
                let directory = std::fs::canonicalize(existing_directory(dest)?)?;
                let name = dest.file_name().ok_or_else(|| {
                    store_file::refused(
                        dest,
                        ErrorKind::InvalidInput,
                        "a store's path names a file",
                    )
                })?;
                directory.join(name)
            }
            Err(error) => return Err(error.into()),
        };
        let meta = std::fs::metadata(&path).ok();
        Ok(Self { path, meta })
    }

    /// Refuses a backup that is the store file itself.
    fn refuse_same_file(&self, src: &Path, source: &Metadata) -> Result<()> {
        match &self.meta {
            Some(meta) if same_file(meta, source) => Err(Error::InvalidInput(format!(
                "{} is the store file {} itself: restore a backup of it",
                src.display(),
                self.path.display()
            ))),
            _ => Ok(()),
        }
    }

    /// Refuses a store some process has open (read-only ones included: they hold no presence
    /// lock, but a lock on the store's `-shm` once they have read it), where the kernel's list
    /// of locks can be read.
    fn refuse_in_use(&self) -> Result<()> {
        let files = [self.path.clone(), store_file::beside(&self.path, "-shm")];
        if left_behind::locked(&files) != Some(true) {
            return Ok(());
        }
        let message = format!(
            "a store is open on {} (the kernel lists a lock on it or on its -shm: a process \
             reads or writes it): close every store on it, readers too, then try again",
            self.path.display()
        );
        Err(store_file::refused(&self.path, ErrorKind::ResourceBusy, &message))
    }

    /// Refuses to replace a file that is neither a Spindle store nor empty.
    fn refuse_unless_store(&self) -> Result<()> {
        let Some(meta) = self.meta.as_ref().filter(|meta| meta.len() > 0) else { return Ok(()) };
        let mut header = [0_u8; 72];
        let read = File::open(&self.path).and_then(|mut file| file.read_exact(&mut header));
        let sqlite = read.is_ok() && header.starts_with(SQLITE_MAGIC);
        let id = u32::from_be_bytes([header[68], header[69], header[70], header[71]]);
        // A store that never checkpointed has its header (and schema) in its WAL still.
        if sqlite && (i64::from(id) == schema::APPLICATION_ID || self.store_or_nothing()) {
            return Ok(());
        }
        let message = format!(
            "{} is not a Spindle store ({} bytes that are not one): a restore replaces only a \
             store; name another path, or remove it first",
            self.path.display(),
            meta.len()
        );
        Err(store_file::refused(&self.path, ErrorKind::InvalidInput, &message))
    }

    /// Whether SQLite, reading the file with its WAL, finds a Spindle store or no table at all
    /// (a store cut off while it was first made).
    fn store_or_nothing(&self) -> bool {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let Ok(conn) = Connection::open_with_flags(store_file::sqlite_name(&self.path), flags)
        else {
            return false;
        };
        let id = conn.query_row("PRAGMA application_id", [], |row| row.get::<_, i64>(0));
        let tables = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0));
        id.is_ok_and(|id| id == schema::APPLICATION_ID) || tables.is_ok_and(|n: i64| n == 0)
    }

    /// Leaves nothing beside the old store that SQLite would apply to the new file: its WAL
    /// checkpointed into it first (no process has it open: the restore holds its presence lock
    /// and the kernel listed no lock), so that the old store stays whole until the rename; then
    /// its `-wal`, `-shm` and `-journal` removed.
    fn clear_old_store(&self) -> Result<()> {
        let wal = store_file::beside(&self.path, "-wal");
        if std::fs::metadata(&wal).is_ok_and(|meta| meta.len() > 0) {
            // Best effort: a file too damaged to checkpoint is being replaced anyway.
            let _ = checkpoint(&self.path);
        }
        for suffix in SIDE_FILES {
            let side = store_file::beside(&self.path, suffix);
            match std::fs::remove_file(&side) {
                Ok(()) => {}
                Err(error) if error.kind() == ErrorKind::NotFound => {}
                Err(error) => {
                    let message = format!(
                        "cannot remove {} ({error}): SQLite would apply it to the restored \
                         store; nothing was replaced",
                        side.display()
                    );
                    return Err(store_file::refused(&side, error.kind(), &message));
                }
            }
        }
        Ok(())
    }
}

/// Checkpoints the WAL of the closed store file at `path` into it (truncating it).
fn checkpoint(path: &Path) -> Result<()> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(store_file::sqlite_name(path), flags)?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    conn.close().map_err(|(_, error)| Error::from(error))
}

/// A file a copy is written to before it is whole, beside where it goes; removed when dropped
/// (after the copy was linked or renamed into place, only its name goes).
struct Partial {
    path: PathBuf,
}

/// Tells this process's partial files apart.
static PARTIALS: AtomicU64 = AtomicU64::new(0);

impl Partial {
    /// Makes a new, empty file `DEST.partial-PID-N` (never one that is there) with `mode`.
    fn create(dest: &Path, mode: u32) -> Result<Self> {
        loop {
            let n = PARTIALS.fetch_add(1, Ordering::Relaxed);
            let path = store_file::beside(dest, &format!(".partial-{}-{n}", std::process::id()));
            match new_file(mode).open(&path) {
                Ok(_) => return Ok(Self { path }),
                Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
                Err(error) => {
                    let message = format!(
                        "cannot make {} to copy into ({error}): the copy is written beside {} \
                         first",
                        path.display(),
                        dest.display()
                    );
                    return Err(store_file::refused(dest, error.kind(), &message));
                }
            }
        }
    }

    /// Flushes the file to disk.
    fn sync(&self) -> Result<()> {
        Ok(File::open(&self.path)?.sync_all()?)
    }

    /// Links the file in as `dest`, which must not exist, then flushes the directory.
    fn link_as(self, dest: &Path) -> Result<()> {
        match std::fs::hard_link(&self.path, dest) {
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {
                return Err(new_destination(dest).err().unwrap_or(Error::Io(error)));
            }
            // A file system without hard links: a look, then a rename.
            Err(_) => {
                new_destination(dest)?;
                std::fs::rename(&self.path, dest)?;
            }
        }
        sync_directory(dest)
    }

    /// Renames the file over `dest`, then flushes the directory.
    fn rename_to(self, dest: &Path) -> Result<()> {
        std::fs::rename(&self.path, dest)?;
        sync_directory(dest)
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let _ = std::fs::remove_file(store_file::beside(&self.path, suffix));
        }
    }
}

/// Flushes the directory `path` is in, so that a name made or changed there lasts.
#[cfg(unix)]
fn sync_directory(path: &Path) -> Result<()> {
    Ok(File::open(store_file::directory_of(path))?.sync_all()?)
}

/// Elsewhere a directory is not opened as a file: the rename is left to the file system.
#[cfg(not(unix))]
fn sync_directory(_path: &Path) -> Result<()> {
    Ok(())
}

/// What makes a new file of `mode` (less the umask), never one that is there.
#[cfg(unix)]
fn new_file(mode: u32) -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(mode);
    options
}

#[cfg(not(unix))]
fn new_file(_mode: u32) -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    options
}

/// The mode of a new copy of a file of `meta`: its read and write bits (a copy holds what the
/// store holds, so it is no more readable than the store), less the umask.
#[cfg(unix)]
fn new_file_mode(meta: &Metadata) -> u32 {
    use std::os::unix::fs::MetadataExt;
    meta.mode() & 0o666
}

#[cfg(not(unix))]
fn new_file_mode(_meta: &Metadata) -> u32 {
    0o644
}

/// Gives the file at `path` the mode of the store file it replaces, and (when run as root) its
/// owner and group, as the store had them.
#[cfg(unix)]
fn fit_owner_and_mode(path: &Path, store: &Metadata) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(store.mode() & 0o777))?;
    if store_file::Credentials::current().is_some_and(|me| me.is_root()) {
        std::os::unix::fs::chown(path, Some(store.uid()), Some(store.gid()))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn fit_owner_and_mode(_path: &Path, _store: &Metadata) -> Result<()> {
    Ok(())
}

/// Whether two files' metadata are of one file.
#[cfg(unix)]
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_file(_a: &Metadata, _b: &Metadata) -> bool {
    false
}
