//! The store's file as users and other processes meet it: its path looked at before SQLite
//! opens it, and the files beside it looked at when SQLite cannot open or write it.
//!
//! Before the open ([`check_before_open`]), a path that cannot hold a store is refused with
//! `Error::StoreFile`, and nothing is created: a directory, a device or anything else that is
//! not a regular file (SQLite would answer "disk I/O error" or "unable to open database file",
//! and beside a device it would make its journal), a missing directory, a path that may not
//! be looked up, for a read-only open a missing file, and for a writable one a file this user
//! may not write (SQLite would quietly fall back to reading it, after making its `-wal` and
//! `-shm`) or a directory it may not make there the files a writable store needs when they are
//! missing (a new store's own, `-wal`, `-shm`, `-presence`).
//!
//! So is an open that would leave behind files the store's owner could not write. To read or
//! write a WAL-mode file (a store always is one) SQLite makes its `-wal` and `-shm` when they
//! are missing, which they are when no process has the store open, owned by whoever opens it,
//! with the store file's mode; a writable store makes `<db>-presence` when it is missing
//! (`core::presence`), with read and write for the classes the store file's mode lets write.
//! SQLite running as root gives its files to the store file's owner, and so does a store. A
//! `-wal` or `-shm` its owner cannot write turns every later write of the owner into "database
//! is read-only" until someone removes them, and a `-presence` it cannot open keeps the owner
//! from opening to write. An open of another user's file that would make any of them is
//! refused unless they would be writable by the owner anyway: its group's (a group-writable
//! store, in a directory that gives new files the store file's group: set-group-ID), or
//! everyone's. One race is left to the check, and looked at after the open instead: see
//! `core::sqlite::left_behind`.
//!
//! After SQLite failed to open or to write ([`explain`]), the store's file and the files beside
//! it (`-wal`, `-shm`, `-journal`) are looked at to say why, naming the files, their owners and
//! what to do: a file this user may not read or write, another user's side files, a directory
//! it may not make them in. Where nothing explains it, SQLite's error is kept.
//!
//! Nothing here opens the store's file: closing any descriptor of a file drops the process's
//! POSIX locks on it, which are SQLite's. Who may do what is judged from owners and mode bits,
//! as the kernel judges it without ACLs or capabilities (a directory whose default ACL grants
//! the owner access to the new files is refused too: open the store as its owner there).
//!
//! A path is always a path: SQLite reads a name that starts with `file:` as a URI (the bundled
//! build does without being asked), so such a relative path is handed to it as `./file:...`
//! ([`sqlite_name`]).

use std::borrow::Cow;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result, SqliteError};

/// The files SQLite keeps beside a store's: the write-ahead log, its index, and the rollback
/// journal (a store in WAL mode has one only while it is first made).
const SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The side files SQLite makes to read a WAL-mode file.
pub(crate) const WAL_FILES: [&str; 2] = ["-wal", "-shm"];

/// What the presence file's name adds to the store file's (see `core::presence`).
pub(crate) const PRESENCE_SUFFIX: &str = "-presence";

/// The files beside the store a writable open makes when they are missing.
const WRITER_FILES: [&str; 3] = ["-wal", "-shm", PRESENCE_SUFFIX];

/// Refuses a path that cannot hold a store, or whose reading would leave behind files its
/// owner could not write (see the module header). Creates nothing.
///
/// # Errors
/// `StoreFile`, naming the path and what to do.
pub(crate) fn check_before_open(path: &Path, read_only: bool) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(refused(path, ErrorKind::InvalidInput, "a store's path is empty: name a file"));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(refused(
            path,
            ErrorKind::IsADirectory,
            &format!(
                "{} is a directory, not a store file: name a file (such as {})",
                path.display(),
                path.join("spindle.db").display()
            ),
        )),
        Ok(meta) if !meta.is_file() => Err(refused(
            path,
            ErrorKind::InvalidInput,
            &format!(
                "{} is {}, not a regular file: a store is a file of its own (and SQLite makes \
                 its journal beside it)",
                path.display(),
                file_kind(&meta)
            ),
        )),
        Ok(meta) if read_only => check_reader(path, &meta),
        Ok(meta) => check_writer(path, &meta),
        Err(error) if error.kind() == ErrorKind::NotFound => check_missing(path, read_only),
        Err(error) => Err(unreachable(path, &error)),
    }
}

/// SQLite's `error` at open or at its first write, explained by the files if they explain it
/// (see the module header); otherwise `error` itself.
pub(crate) fn explain(path: &Path, read_only: bool, error: Error) -> Error {
    let about_access = match &error {
        Error::ReadOnly => true,
        Error::Sqlite(SqliteError(rusqlite::Error::SqliteFailure(failure, _))) => matches!(
            failure.code,
            rusqlite::ErrorCode::CannotOpen
                | rusqlite::ErrorCode::PermissionDenied
                | rusqlite::ErrorCode::SystemIoFailure
                | rusqlite::ErrorCode::ReadOnly
        ),
        _ => false,
    };
    if !about_access {
        return error;
    }
    why_not(path, read_only).unwrap_or(error)
}

/// A path that names nothing: fine to create, if its directory is there (a read-only open
/// creates nothing).
fn check_missing(path: &Path, read_only: bool) -> Result<()> {
    let directory = directory_of(path);
    match std::fs::metadata(&directory) {
        Ok(meta) if !meta.is_dir() => Err(refused(
            path,
            ErrorKind::NotADirectory,
            &format!(
                "{} is not a directory, so the store file {} cannot be there",
                directory.display(),
                path.display()
            ),
        )),
        Ok(_) if read_only => Err(refused(
            path,
            ErrorKind::NotFound,
            &format!("no store at {}: a read-only open creates none", path.display()),
        )),
        Ok(holder) => check_may_create(path, &directory, &holder),
        Err(error) if error.kind() == ErrorKind::NotFound => Err(refused(
            path,
            ErrorKind::NotFound,
            &format!(
                "the directory {} does not exist: create it first (a store creates its file, \
                 not the directories above it)",
                directory.display()
            ),
        )),
        Err(error) => Err(unreachable(path, &error)),
    }
}

/// The directory a store file is (or would be) in.
pub(crate) fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `path` with `suffix` added to its file name, as SQLite names its side files.
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The store file's path after symbolic links, which SQLite names its side files after (and a
/// store its presence file); `path` itself where it cannot be resolved.
pub(crate) fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The name SQLite is given for the store file at `path`: the path itself, except that a
/// relative path starting with `file:` gets `./` in front. SQLite reads a name starting with
/// `file:` as a URI (`file:x.db?mode=memory` would be an in-memory database) whenever URIs are
/// on, and the bundled build turns them on for every open; `./file:x.db` is a path to SQLite
/// and to the file system alike. An absolute path never starts with `file:`.
pub(crate) fn sqlite_name(path: &Path) -> Cow<'_, Path> {
    if path.as_os_str().as_encoded_bytes().starts_with(b"file:") {
        Cow::Owned(Path::new(".").join(path))
    } else {
        Cow::Borrowed(path)
    }
}

/// The mode of a presence file beside a store file of mode `store_mode`: read and write for
/// each class (owner, group, others) that may write the store, nothing for the others. A lock
/// can be taken on a file opened only to read, so a class that may read it could hold off the
/// store's writers.
pub(crate) fn presence_mode(store_mode: u32) -> u32 {
    [0o200, 0o020, 0o002]
        .iter()
        .filter(|&&write| store_mode & write != 0)
        .map(|write| write * 3)
        .sum()
}

/// Looking up `path` failed with `error` (other than its not being there).
fn unreachable(path: &Path, error: &std::io::Error) -> Error {
    let message = match error.kind() {
        ErrorKind::PermissionDenied => format!(
            "permission denied: {} cannot be looked up (a directory on its way may not be \
             searched by {})",
            path.display(),
            current_user()
        ),
        ErrorKind::NotADirectory => {
            format!(
                "{}: a part of the path before the file's name is not a directory",
                path.display()
            )
        }
        _ => format!("{}: {error}", path.display()),
    };
    refused(path, error.kind(), &message)
}

/// `Error::StoreFile` for `path`.
pub(crate) fn refused(path: &Path, kind: ErrorKind, message: &str) -> Error {
    Error::StoreFile { path: path.to_path_buf(), kind, message: message.to_owned() }
}

/// Who this process is, for messages: `uid 1000 (ann)`, or `this user` where unknown.
pub(crate) fn current_user() -> String {
    Credentials::current().map_or_else(|| "this user".to_owned(), |me| user(me.uid))
}

/// What a file that is not a regular one (nor a directory) is.
#[cfg(unix)]
pub(crate) fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a named pipe"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
pub(crate) fn file_kind(_meta: &std::fs::Metadata) -> &'static str {
    "a special file"
}

/// A process's ids, as the kernel checks a file's mode bits against them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// The effective user id.
    pub(crate) uid: u32,
    /// The effective group id.
    gid: u32,
    /// The supplementary groups.
    groups: Vec<u32>,
}

/// Mode bits: read, write, and search (a directory's).
const READ: u32 = 4;
const WRITE: u32 = 2;
const SEARCH: u32 = 1;

impl Credentials {
    /// This process's effective ids, read from `/proc/self/status` (`None` where there is no
    /// such file: not on Linux).
    pub(crate) fn current() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/self/status").ok()?)
    }

    /// The ids in the text of a `/proc/PID/status` file: the second of the `Uid:` and `Gid:`
    /// lines' four (real, effective, saved, file system), and `Groups:`.
    fn parse(status: &str) -> Option<Self> {
        let field = |name: &str| status.lines().find_map(|line| line.strip_prefix(name));
        let effective = |name: &str| field(name)?.split_whitespace().nth(1)?.parse().ok();
        let groups: std::result::Result<Vec<u32>, _> =
            field("Groups:")?.split_whitespace().map(str::parse).collect();
        Some(Self { uid: effective("Uid:")?, gid: effective("Gid:")?, groups: groups.ok()? })
    }

    /// A process of user `uid` and group `gid`, in no other group.
    #[cfg(test)]
    pub(crate) fn of(uid: u32, gid: u32) -> Self {
        Self { uid, gid, groups: Vec::new() }
    }

    /// Whether this is root, who may read and write every file (on a writable file system).
    pub(crate) fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `gid` is one of this process's groups.
    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the mode bits of `meta` give this process every one of `bits`.
    #[cfg(unix)]
    fn may(&self, meta: &std::fs::Metadata, bits: u32) -> bool {
        use std::os::unix::fs::MetadataExt;
        if self.is_root() {
            return true;
        }
        let shift = if meta.uid() == self.uid {
            6
        } else if self.in_group(meta.gid()) {
            3
        } else {
            0
        };
        (meta.mode() >> shift) & bits == bits
    }
}

/// `uid 1000 (ann)`: the user's name from `/etc/passwd` where it is there.
pub(crate) fn user(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then_some(name)
    });
    match name {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

/// A file's mode and owner, for messages: `mode 0644, owner uid 1000 (ann)`.
#[cfg(unix)]
fn mode_and_owner(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("mode {:04o}, owner {}", meta.mode() & 0o7777, user(meta.uid()))
}

/// This process may not read the store file at `path`.
#[cfg(unix)]
fn may_not_read(path: &Path, me: &Credentials, meta: &std::fs::Metadata) -> Error {
    let message = format!(
        "permission denied: {} may not read {} ({})",
        user(me.uid),
        path.display(),
        mode_and_owner(meta)
    );
    refused(path, ErrorKind::PermissionDenied, &message)
}

/// This process may not write the store file at `path`.
#[cfg(unix)]
fn may_not_write(path: &Path, me: &Credentials, meta: &std::fs::Metadata) -> Error {
    use std::os::unix::fs::MetadataExt;
    let advice = if meta.uid() == me.uid {
        "make it writable (`chmod u+w`)"
    } else {
        "have its owner let you write it"
    };
    let message = format!(
        "permission denied: {} may not write {} ({}): open it read-only, or {advice}",
        user(me.uid),
        path.display(),
        mode_and_owner(meta)
    );
    refused(path, ErrorKind::PermissionDenied, &message)
}

/// What an open of the store file would make beside it: the files that are missing, where,
/// whether this process may make them there, and whether the store file's owner could write
/// them once this process made them.
#[cfg(unix)]
struct WouldMake {
    /// The missing files, named after the store file's resolved path.
    missing: Vec<PathBuf>,
    /// The directory they would be made in.
    directory: PathBuf,
    /// Whether this process may make files there.
    may_make: bool,
    /// Whether the store file's owner could write them, made by this process.
    owner_may_write: bool,
}

/// What an open by `me` of the store file `meta` at `path` would make of the side files
/// `suffixes`; `None` if nothing is missing (or the directory cannot be looked at: SQLite
/// will say so).
#[cfg(unix)]
fn would_make(
    me: &Credentials,
    path: &Path,
    meta: &std::fs::Metadata,
    suffixes: &[&str],
) -> Option<WouldMake> {
    use std::os::unix::fs::MetadataExt;
    let base = resolved(path);
    let missing: Vec<PathBuf> = suffixes
        .iter()
        .map(|suffix| beside(&base, suffix))
        .filter(|side| std::fs::symlink_metadata(side).is_err())
        .collect();
    if missing.is_empty() {
        return None;
    }
    let directory = directory_of(&base);
    let holder = std::fs::metadata(&directory).ok()?;
    // New files get the directory's group where it is set-group-ID, else this process's; the
    // side files get the store file's mode, a presence file read and write for the same classes.
    let group = if holder.mode() & 0o2000 != 0 { holder.gid() } else { me.gid };
    let owner_may_write = meta.uid() == me.uid || others_may_write(meta.mode(), group, meta);
    Some(WouldMake {
        missing,
        directory,
        may_make: me.may(&holder, WRITE | SEARCH),
        owner_may_write,
    })
}

/// Whether the owner of the store file `store` may write a file of another user with `mode`
/// and `group`, by the bits that are not the file owner's: everyone's, or its group's where
/// that is the store file's group.
#[cfg(unix)]
pub(crate) fn others_may_write(mode: u32, group: u32, store: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    mode & 0o002 != 0 || (mode & 0o020 != 0 && group == store.gid())
}

/// Refuses a read that would make `-wal`/`-shm` the store's owner could not write (see the
/// module header): the file is another user's, one of them is missing (no process has the
/// store open), and they would be neither its group's nor writable by others.
#[cfg(unix)]
fn check_reader(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    match Credentials::current() {
        Some(me) => check_reader_as(&me, path, meta),
        None => Ok(()),
    }
}

#[cfg(not(unix))]
fn check_reader(_path: &Path, _meta: &std::fs::Metadata) -> Result<()> {
    Ok(())
}

/// [`check_reader`], for the process `me`.
#[cfg(unix)]
fn check_reader_as(me: &Credentials, path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if me.is_root() || meta.uid() == me.uid {
        return Ok(());
    }
    if !me.may(meta, READ) {
        // Refused either way: say the first reason.
        return Err(may_not_read(path, me, meta));
    }
    let Some(made) = would_make(me, path, meta, &WAL_FILES) else { return Ok(()) };
    if made.may_make && made.owner_may_write {
        return Ok(());
    }
    let names = names(&made.missing);
    let why = if made.may_make {
        format!(
            "reading it now would make {names} owned by {}, which its owner could not write: \
             its next write would fail as read-only",
            user(me.uid)
        )
    } else {
        format!(
            "SQLite would have to make {names} to read it, and {} may not make files in {}",
            user(me.uid),
            made.directory.display()
        )
    };
    Err(refused(
        path,
        ErrorKind::PermissionDenied,
        &format!(
            "{} belongs to {} and no process has it open (no {}): {why}. Read it as its owner \
             (or as root), or while a process of its owner has it open",
            path.display(),
            user(meta.uid()),
            names
        ),
    ))
}

/// Refuses a writable open (not root's) that SQLite would fail, or that would leave behind
/// files the store's owner could not write (see the module header): a file this user may not
/// write, a directory it may not make the missing `-wal`, `-shm` or `-presence` in, or missing
/// ones it would make that its owner could not write (the file is another user's).
#[cfg(unix)]
fn check_writer(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    match Credentials::current() {
        Some(me) => check_writer_as(&me, path, meta),
        None => Ok(()),
    }
}

#[cfg(not(unix))]
fn check_writer(_path: &Path, _meta: &std::fs::Metadata) -> Result<()> {
    Ok(())
}

/// [`check_writer`], for the process `me`.
#[cfg(unix)]
fn check_writer_as(me: &Credentials, path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if me.is_root() {
        return Ok(());
    }
    if !me.may(meta, READ) {
        return Err(may_not_read(path, me, meta));
    }
    if !me.may(meta, WRITE) {
        return Err(may_not_write(path, me, meta));
    }
    let Some(made) = would_make(me, path, meta, &WRITER_FILES) else { return Ok(()) };
    if !made.may_make {
        return Err(cannot_make_beside(path, me, meta, &made));
    }
    if made.owner_may_write {
        return Ok(());
    }
    let names = names(&made.missing);
    Err(refused(
        path,
        ErrorKind::PermissionDenied,
        &format!(
            "{} belongs to {} and {names} beside it are missing: writing it now would make them \
             owned by {}, which its owner could not write (its next open to write would fail). \
             Write it as its owner (or as root), or while a process of its owner has it open \
             to write; a store a group shares is group-writable, in a directory whose new files \
             get its group (`chmod g+s`)",
            path.display(),
            user(meta.uid()),
            user(me.uid)
        ),
    ))
}

/// A writable open of the store at `path` needs files made beside it, and `me` may not make
/// files in that directory.
#[cfg(unix)]
fn cannot_make_beside(
    path: &Path,
    me: &Credentials,
    meta: &std::fs::Metadata,
    made: &WouldMake,
) -> Error {
    use std::os::unix::fs::MetadataExt;
    let directory = made.directory.display();
    let message = match made.missing.as_slice() {
        [presence] if presence.as_os_str().to_string_lossy().ends_with(PRESENCE_SUFFIX) => {
            format!(
                "permission denied: {} may not make files in {directory}, and {} is missing: a \
                 store open to write holds a lock on that file (made by the first such open, \
                 never removed). Have root make it once (`install -m {:04o} -o {} -g {} \
                 /dev/null {}`), or let {} write in {directory}; or open the store read-only",
                user(me.uid),
                presence.display(),
                presence_mode(meta.mode()),
                meta.uid(),
                meta.gid(),
                presence.display(),
                user(me.uid)
            )
        }
        missing => format!(
            "permission denied: {} may not make files in {directory}, where {} must be made \
             beside {} to open it to write (SQLite's `-wal` and `-shm` are there only while a \
             process has the store open; `-presence` is the lock file of the stores open to \
             write): let it write in {directory}, or move the store to a directory it may write",
            user(me.uid),
            names(missing),
            path.display()
        ),
    };
    refused(path, ErrorKind::PermissionDenied, &message)
}

/// Refuses a new store in a directory this process (not root) may not make files in; SQLite
/// would answer "unable to open database file".
#[cfg(unix)]
fn check_may_create(path: &Path, directory: &Path, holder: &std::fs::Metadata) -> Result<()> {
    match Credentials::current() {
        Some(me) => check_may_create_as(&me, path, directory, holder),
        None => Ok(()),
    }
}

/// [`check_may_create`], for the process `me`.
#[cfg(unix)]
fn check_may_create_as(
    me: &Credentials,
    path: &Path,
    directory: &Path,
    holder: &std::fs::Metadata,
) -> Result<()> {
    if me.may(holder, WRITE | SEARCH) {
        return Ok(());
    }
    let message = format!(
        "permission denied: {} may not make files in {}, so no store can be made at {}: name a \
         file in a directory it may write (or let it write this one)",
        user(me.uid),
        directory.display(),
        path.display()
    );
    Err(refused(path, ErrorKind::PermissionDenied, &message))
}

#[cfg(not(unix))]
fn check_may_create(_path: &Path, _directory: &Path, _holder: &std::fs::Metadata) -> Result<()> {
    Ok(())
}

/// What keeps this process from opening or writing the store at `path`, by the files' owners
/// and modes; `None` if they say nothing.
#[cfg(unix)]
fn why_not(path: &Path, read_only: bool) -> Option<Error> {
    let me = Credentials::current()?;
    let meta = std::fs::metadata(path).ok()?;
    if !me.may(&meta, READ) {
        return Some(may_not_read(path, &me, &meta));
    }
    if !read_only && !me.may(&meta, WRITE) {
        return Some(may_not_write(path, &me, &meta));
    }
    let foreign: Vec<(PathBuf, std::fs::Metadata)> = SIDE_FILES
        .iter()
        .filter(|_| !read_only)
        .filter_map(|suffix| {
            let side = beside(path, suffix);
            let side_meta = std::fs::metadata(&side).ok()?;
            (!me.may(&side_meta, WRITE)).then_some((side, side_meta))
        })
        .collect();
    if !foreign.is_empty() {
        return Some(foreign_side_files(path, &me, &foreign));
    }
    let missing: Vec<PathBuf> =
        WAL_FILES.iter().map(|suffix| beside(path, suffix)).filter(|p| !p.exists()).collect();
    let directory = directory_of(path);
    let holder = std::fs::metadata(&directory).ok()?;
    if !missing.is_empty() && !me.may(&holder, WRITE | SEARCH) {
        let message = format!(
            "permission denied: {} may not make files in {}, where SQLite keeps {} beside the \
             store (it cannot open a WAL-mode file without them, even to read)",
            user(me.uid),
            directory.display(),
            names(&missing)
        );
        return Some(refused(path, ErrorKind::PermissionDenied, &message));
    }
    None
}

#[cfg(not(unix))]
fn why_not(_path: &Path, _read_only: bool) -> Option<Error> {
    None
}

/// The error for side files of the store at `path` that this process may not write.
#[cfg(unix)]
fn foreign_side_files(
    path: &Path,
    me: &Credentials,
    foreign: &[(PathBuf, std::fs::Metadata)],
) -> Error {
    let listed: Vec<String> = foreign
        .iter()
        .map(|(side, meta)| format!("{}: {}", side.display(), mode_and_owner(meta)))
        .collect();
    let paths: Vec<PathBuf> = foreign.iter().map(|(side, _)| side.clone()).collect();
    let names = names(&paths);
    // An empty WAL or journal, and an index, hold nothing once no process has the store open.
    let removable = foreign.iter().all(|(side, meta)| {
        side.as_os_str().to_string_lossy().ends_with("-shm") || meta.len() == 0
    });
    let plain: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let advice = if removable {
        format!(
            "Once no process has the store open, remove them (`rm {}`: they hold nothing then), \
             or have root give them to {}",
            plain.join(" "),
            user(me.uid)
        )
    } else {
        format!(
            "Have root give them to {} (`chown {} {}`); do not remove them: a WAL or journal \
             that is not empty holds commits",
            user(me.uid),
            me.uid,
            plain.join(" ")
        )
    };
    let message = format!(
        "{} cannot be written: {names} beside it belong to another user ({}), and {} may not \
         write them (SQLite made them when that user opened the store while no process had it \
         open). {advice}",
        path.display(),
        listed.join("; "),
        user(me.uid)
    );
    refused(path, ErrorKind::PermissionDenied, &message)
}

/// `a, b and c`, of the paths.
pub(crate) fn names(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    match shown.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn the_effective_ids_and_groups_are_read_from_a_status_file() {
        let status =
            "Name:\tx\nUid:\t1000\t1001\t1002\t1003\nGid:\t50\t51\t52\t53\nGroups:\t7 8 \n";
        let parsed = Credentials::parse(status).expect("parses");
        assert_eq!(parsed, Credentials { uid: 1001, gid: 51, groups: vec![7, 8] });
        assert!(parsed.in_group(51) && parsed.in_group(8) && !parsed.in_group(50));
        let none = Credentials::parse("Uid:\t1\t2\t3\t4\nGid:\t1\t2\t3\t4\nGroups:\t\n");
        assert_eq!(none.map(|c| c.groups), Some(vec![]));
        assert!(Credentials::parse("Uid:\t1\n").is_none());
        assert!(Credentials::current().is_some(), "this is Linux");
    }

    #[test]
    fn what_cannot_hold_a_store_is_refused_by_kind_and_nothing_is_made() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kind = |path: &Path, read_only| match check_before_open(path, read_only) {
            Err(Error::StoreFile { kind, message, .. }) => Some((kind, message)),
            Ok(()) => None,
            Err(other) => panic!("{other}"),
        };
        let (is_dir, message) = kind(dir.path(), false).expect("a directory");
        assert_eq!(is_dir, ErrorKind::IsADirectory);
        assert!(message.contains("is a directory"), "{message}");
        let (device, message) = kind(Path::new("/dev/null"), true).expect("a device");
        assert_eq!(device, ErrorKind::InvalidInput);
        assert!(message.contains("a character device"), "{message}");
        let missing_dir = dir.path().join("gone").join("s.db");
        let (gone, message) = kind(&missing_dir, false).expect("a missing directory");
        assert_eq!(gone, ErrorKind::NotFound);
        assert!(message.contains("does not exist"), "{message}");
        assert_eq!(kind(&dir.path().join("new.db"), false), None, "made by the open");
        let (absent, _) = kind(&dir.path().join("new.db"), true).expect("read-only, absent");
        assert_eq!(absent, ErrorKind::NotFound);
        let file = dir.path().join("file");
        std::fs::write(&file, b"").expect("write");
        let (not_dir, _) = kind(&file.join("s.db"), false).expect("under a file");
        assert_eq!(not_dir, ErrorKind::NotADirectory);
        assert_eq!(kind(Path::new(""), false).map(|(kind, _)| kind), Some(ErrorKind::InvalidInput));
        let made: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert_eq!(made.len(), 1, "only the test's own file");
    }

    const OWNER: u32 = 64_101;
    const OTHER: u32 = 64_102;

    /// A store file of `OWNER` (group `OWNER`) with `mode`, in a directory anyone may use
    /// (`/tmp`'s mode), or one with `directory_mode` and group `OWNER`; `None` unless this is
    /// root (who may give files to other users).
    fn owned_store(mode: u32, directory_mode: u32) -> Option<(tempfile::TempDir, PathBuf)> {
        use std::os::unix::fs::{PermissionsExt, chown};
        if !Credentials::current().is_some_and(|me| me.is_root()) {
            println!("needs root to give files to other users; not checked");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("s.db");
        std::fs::write(&db, b"").expect("store file");
        chown(&db, Some(OWNER), Some(OWNER)).expect("chown");
        std::fs::set_permissions(&db, PermissionsExt::from_mode(mode)).expect("chmod");
        chown(dir.path(), None, Some(OWNER)).expect("chgrp");
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(directory_mode))
            .expect("chmod");
        Some((dir, db))
    }

    /// The message of `check`'s refusal (`None` if it allowed the open).
    fn refusal(check: Result<()>) -> Option<String> {
        match check {
            Ok(()) => None,
            Err(Error::StoreFile { kind: ErrorKind::PermissionDenied, message, .. }) => {
                Some(message)
            }
            Err(other) => panic!("expected StoreFile (PermissionDenied), got {other}"),
        }
    }

    #[test]
    fn a_write_by_a_user_who_may_not_write_the_file_is_refused_before_sqlite_runs() {
        let Some((_dir, db)) = owned_store(0o644, 0o1777) else { return };
        let meta = std::fs::metadata(&db).expect("stat");
        let other = Credentials::of(OTHER, OTHER);
        let said = refusal(check_writer_as(&other, &db, &meta)).expect("refused");
        assert!(said.contains("may not write") && said.contains("mode 0644"), "{said}");
        assert_eq!(refusal(check_writer_as(&Credentials::of(OWNER, OWNER), &db, &meta)), None);
        assert_eq!(refusal(check_writer_as(&Credentials::of(0, 0), &db, &meta)), None, "root");
    }

    #[test]
    fn a_group_members_write_is_refused_unless_the_owner_could_write_what_it_makes() {
        use std::os::unix::fs::PermissionsExt;
        let Some((dir, db)) = owned_store(0o664, 0o1777) else { return };
        let meta = std::fs::metadata(&db).expect("stat");
        let member = Credentials { uid: OTHER, gid: OTHER, groups: vec![OWNER] };
        // New files would be the member's group's: the owner could not write them.
        let said = refusal(check_writer_as(&member, &db, &meta)).expect("refused");
        for name in ["s.db-wal", "s.db-shm", "s.db-presence", "its owner could not write"] {
            assert!(said.contains(name), "{name}: {said}");
        }
        // A set-group-ID directory gives them the store file's group, which may write them.
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o3777)).expect("g+s");
        assert_eq!(refusal(check_writer_as(&member, &db, &meta)), None);
        // So does a store everyone may write, anywhere.
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o1777)).expect("g-s");
        std::fs::set_permissions(&db, PermissionsExt::from_mode(0o666)).expect("chmod");
        let meta = std::fs::metadata(&db).expect("stat");
        let anyone = Credentials::of(OTHER, OTHER);
        assert_eq!(refusal(check_writer_as(&anyone, &db, &meta)), None);
        // Once they are all there (a process of the owner has it open), nothing is made.
        std::fs::set_permissions(&db, PermissionsExt::from_mode(0o664)).expect("chmod");
        for name in ["s.db-wal", "s.db-shm", "s.db-presence"] {
            std::fs::write(dir.path().join(name), b"").expect("side file");
        }
        let meta = std::fs::metadata(&db).expect("stat");
        assert_eq!(refusal(check_writer_as(&member, &db, &meta)), None);
    }

    #[test]
    fn a_write_needing_files_in_a_directory_this_user_may_not_write_says_what_to_do() {
        use std::os::unix::fs::PermissionsExt;
        let Some((dir, db)) = owned_store(0o644, 0o755) else { return };
        let meta = std::fs::metadata(&db).expect("stat");
        let owner = Credentials::of(OWNER, OWNER);
        let said = refusal(check_writer_as(&owner, &db, &meta)).expect("refused");
        assert!(said.contains("may not make files in") && said.contains("-wal"), "{said}");
        // Only the presence file missing (a process has the store open): how to make it.
        for name in ["s.db-wal", "s.db-shm"] {
            std::fs::write(dir.path().join(name), b"").expect("side file");
        }
        let said = refusal(check_writer_as(&owner, &db, &meta)).expect("refused");
        let presence = dir.path().join("s.db-presence").display().to_string();
        let install = format!("install -m 0600 -o {OWNER} -g {OWNER} /dev/null {presence}");
        assert!(said.contains(&install) && said.contains("read-only"), "{said}");
        // A new store there: refused before SQLite says "unable to open database file".
        let new = dir.path().join("new.db");
        let holder = std::fs::metadata(dir.path()).expect("stat");
        let said = refusal(check_may_create_as(&owner, &new, dir.path(), &holder));
        assert!(said.expect("refused").contains("so no store can be made at"));
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o777)).expect("chmod");
        let holder = std::fs::metadata(dir.path()).expect("stat");
        assert_eq!(refusal(check_may_create_as(&owner, &new, dir.path(), &holder)), None);
    }

    #[test]
    fn a_relative_path_starting_with_file_is_handed_to_sqlite_as_a_path() {
        assert_eq!(
            sqlite_name(Path::new("file:x.db?mode=memory")),
            Path::new("./file:x.db?mode=memory")
        );
        assert_eq!(sqlite_name(Path::new("file:/tmp/x")), Path::new("./file:/tmp/x"));
        assert_eq!(sqlite_name(Path::new("/tmp/file:x")), Path::new("/tmp/file:x"));
        assert_eq!(sqlite_name(Path::new("files.db")), Path::new("files.db"));
        assert_eq!(sqlite_name(Path::new("FILE:x")), Path::new("FILE:x"), "SQLite's test is exact");
    }

    #[test]
    fn names_are_listed_with_and() {
        let paths = |names: &[&str]| names.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(names(&paths(&["a"])), "a");
        assert_eq!(names(&paths(&["a", "b", "c"])), "a, b and c");
    }

    #[test]
    fn a_user_name_is_found_for_root() {
        assert_eq!(user(0), "uid 0 (root)");
        assert_eq!(user(4_000_000_000), "uid 4000000000");
    }
}
