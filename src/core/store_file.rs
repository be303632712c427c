//! The store's file as users and other processes meet it: its path looked at before SQLite
//! opens it, and the files beside it looked at when SQLite cannot open or write it.
//!
//! Before the open ([`check_before_open`]), a path that cannot hold a store is refused with
//! `Error::StoreFile`, and nothing is created: a directory, a device or anything else that is
//! not a regular file (SQLite would answer "disk I/O error" or "unable to open database file",
//! and beside a device it would make its journal), a missing directory, a path that may not
//! be looked up, and for a read-only open a missing file. So is a read-only open that would
//! leave behind files the store's owner could not write: to read a WAL-mode file (a store
//! always is one) SQLite makes its `-wal` and `-shm` when they are missing, which they are
//! when no process has the store open, owned by whoever opens it, with the store file's mode;
//! SQLite running as root gives them to the store file's owner. A `-wal` or `-shm` its owner
//! cannot write turns every later write of the owner into "database is read-only", until
//! someone removes them. Such a read is refused unless the files would be writable by the
//! owner anyway (its group's, in a directory that gives new files the store file's group).
//!
//! After SQLite failed to open or to write ([`explain`]), the store's file and the files beside
//! it (`-wal`, `-shm`, `-journal`) are looked at to say why, naming the files, their owners and
//! what to do: a file this user may not read or write, another user's side files, a directory
//! it may not make them in. Where nothing explains it, SQLite's error is kept.
//!
//! Nothing here opens the store's file: closing any descriptor of a file drops the process's
//! POSIX locks on it, which are SQLite's. Who may do what is judged from owners and mode bits,
//! as the kernel judges it without ACLs or capabilities, and only after SQLite failed, except
//! for the reader's refusal above (a directory whose default ACL grants the owner access to
//! the new files is refused too: read as the owner there).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The files SQLite keeps beside a store's: the write-ahead log, its index, and the rollback
/// journal (a store in WAL mode has one only while it is first made).
const SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The side files SQLite makes to read a WAL-mode file.
const WAL_FILES: [&str; 2] = ["-wal", "-shm"];

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
        Ok(_) => Ok(()),
        Err(error) if error.kind() == ErrorKind::NotFound => check_missing(path, read_only),
        Err(error) => Err(unreachable(path, &error)),
    }
}

/// SQLite's `error` at open or at its first write, explained by the files if they explain it
/// (see the module header); otherwise `error` itself.
pub(crate) fn explain(path: &Path, read_only: bool, error: Error) -> Error {
    let about_access = match &error {
        Error::ReadOnly => true,
        Error::Sqlite(rusqlite::Error::SqliteFailure(failure, _)) => matches!(
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
        Ok(_) => Ok(()),
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
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `path` with `suffix` added to its file name, as SQLite names its side files.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
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

fn refused(path: &Path, kind: ErrorKind, message: &str) -> Error {
    Error::StoreFile { path: path.to_path_buf(), kind, message: message.to_owned() }
}

/// Who this process is, for messages: `uid 1000 (ann)`, or `this user` where unknown.
fn current_user() -> String {
    Credentials::current().map_or_else(|| "this user".to_owned(), |me| user(me.uid))
}

/// What a file that is not a regular one (nor a directory) is.
#[cfg(unix)]
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_char_device() {
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
fn file_kind(_meta: &std::fs::Metadata) -> &'static str {
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

/// Refuses a read that would make `-wal`/`-shm` the store's owner could not write (see the
/// module header): the file is another user's, one of them is missing (no process has the
/// store open), and they would be neither this process's group's nor writable by others.
#[cfg(unix)]
fn check_reader(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Some(me) = Credentials::current() else { return Ok(()) };
    if me.is_root() || meta.uid() == me.uid {
        return Ok(());
    }
    if !me.may(meta, READ) {
        // Refused either way: say the first reason.
        return Err(may_not_read(path, &me, meta));
    }
    let missing: Vec<PathBuf> =
        WAL_FILES.iter().map(|suffix| beside(path, suffix)).filter(|p| !p.exists()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let directory = directory_of(path);
    let Ok(holder) = std::fs::metadata(&directory) else { return Ok(()) };
    // New files get the directory's group where it is set-group-ID, else this process's.
    let group = if holder.mode() & 0o2000 != 0 { holder.gid() } else { me.gid };
    let mode = meta.mode();
    let owner_may_write = mode & 0o002 != 0 || (mode & 0o020 != 0 && group == meta.gid());
    let may_make = me.may(&holder, WRITE | SEARCH);
    if owner_may_write && may_make {
        return Ok(());
    }
    let names = names(&missing);
    let why = if may_make {
        format!(
            "reading it now would make {names} owned by {}, which its owner could not write: \
             its next write would fail as read-only",
            user(me.uid)
        )
    } else {
        format!(
            "SQLite would have to make {names} to read it, and {} may not make files in {}",
            user(me.uid),
            directory.display()
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

#[cfg(not(unix))]
fn check_reader(_path: &Path, _meta: &std::fs::Metadata) -> Result<()> {
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
            mode_and_owner(&meta)
        );
        return Some(refused(path, ErrorKind::PermissionDenied, &message));
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
fn names(paths: &[PathBuf]) -> String {
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
