//! What a read-only open by another user left beside the store: the race `store_file`'s check
//! cannot close.
//!
//! The check before a read (`store_file::check_before_open`) lets another user read a store
//! while its `-wal` and `-shm` are there, which they are while a process of its owner has it
//! open. If that process closes the store between the check and SQLite's open, SQLite removes
//! them, and the read makes them again, owned by the reader, with the store file's mode: files
//! the owner cannot write, which turn its next write into "database is read-only". So after a
//! read-only open by a user who is neither root nor the store file's owner, they are looked at
//! again ([`left_by_reading`]): if this user owns one the owner could not write, the open is
//! refused (`Error::StoreFile`), and the files are removed when that is safe
//! ([`LeftBehind::refuse`], which says why it is or is not).
//!
//! Only the kernel's list of locks (`/proc/locks`) tells who has the files open, so this is
//! Linux's: elsewhere nothing is removed.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::core::sqlite::store_file::{self, Credentials};
use crate::error::Error;

/// Files a read-only open left beside another user's store that its owner could not write.
#[derive(Debug)]
pub(crate) struct LeftBehind {
    /// The store's path as given.
    store: PathBuf,
    /// The store file's owner.
    owner: u32,
    /// This process's user, who owns the files.
    me: u32,
    /// The files, `-wal` before `-shm`.
    files: Vec<PathBuf>,
}

/// After a read-only open of the store at `path` (while the connection is still open, or after
/// it closed): the `-wal` and `-shm` this user owns and the store file's owner could not
/// write, if this user is neither root nor the store file's owner and there are any.
pub(crate) fn left_by_reading(path: &Path) -> Option<LeftBehind> {
    left_by(&Credentials::current()?, path)
}

/// [`left_by_reading`], for the process `me`.
#[cfg(unix)]
fn left_by(me: &Credentials, path: &Path) -> Option<LeftBehind> {
    use std::os::unix::fs::MetadataExt;
    let store = std::fs::metadata(path).ok()?;
    if me.is_root() || store.uid() == me.uid {
        return None;
    }
    let base = store_file::resolved(path);
    let files: Vec<PathBuf> = store_file::WAL_FILES
        .iter()
        .map(|suffix| store_file::beside(&base, suffix))
        .filter(|side| {
            std::fs::symlink_metadata(side).is_ok_and(|meta| {
                meta.uid() == me.uid
                    && !store_file::others_may_write(meta.mode(), meta.gid(), &store)
            })
        })
        .collect();
    let left = LeftBehind { store: path.to_path_buf(), owner: store.uid(), me: me.uid, files };
    (!left.files.is_empty()).then_some(left)
}

#[cfg(not(unix))]
fn left_by(_me: &Credentials, _path: &Path) -> Option<LeftBehind> {
    None
}

impl LeftBehind {
    /// The error that refuses the open, once this process's connection is closed; the files
    /// are removed first if that is safe ([`LeftBehind::removable`]).
    pub(crate) fn refuse(self) -> Error {
        let removed = self.removable() && self.remove();
        let names = store_file::names(&self.files);
        let what = format!(
            "{} belongs to {}, and this read left {names} beside it owned by {}, which the \
             owner could not write (its process closed the store while this read opened it, \
             and SQLite made them again; or they were left before)",
            self.store.display(),
            store_file::user(self.owner),
            store_file::user(self.me)
        );
        let message = if removed {
            format!(
                "{what}. They held nothing and no process had the store open, so they were \
                 removed: read it as its owner (or as root), or while a process of its owner \
                 has it open"
            )
        } else {
            let plain: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
            format!(
                "{what}, and they were left (a process has the store open, or the WAL is not \
                 empty, or the kernel's list of locks cannot be read). Once no process has the \
                 store open, remove them (`rm {}`), or its owner's next write fails",
                plain.join(" ")
            )
        };
        store_file::refused(&self.store, ErrorKind::PermissionDenied, &message)
    }

    /// Whether removing the files loses nothing and pulls them from under no one. They hold
    /// nothing when the `-wal` is empty: a reader never writes it (one that is not empty holds
    /// a writer's commits, which only a checkpoint moves into the store file), and the `-shm`
    /// is only an index of the WAL, made again from it. No one uses them when the kernel lists
    /// no lock on the store file, its `-shm` or its `-presence` (this process's connection is
    /// closed by now): every SQLite connection that has read a WAL-mode file holds a read lock
    /// on the `-shm` from its first read until it closes, and every writable store holds its
    /// presence lock. A connection opened but yet to read has not opened them, and makes them
    /// afresh when it first reads.
    ///
    /// What is left is the moment between this look and the removal: a process that reads the
    /// store for the first time then would keep the removed files while later ones make new
    /// ones. The owner's processes cannot write through them (which is why they go: one that
    /// opens to write fails), so only a writer that may write this user's files (root, or this
    /// user where the store file's mode lets it write) could lose commits, written to a WAL no
    /// other process sees, and it would have to open the store within those microseconds.
    fn removable(&self) -> bool {
        let wal_empty = self
            .files
            .iter()
            .filter(|file| file.as_os_str().to_string_lossy().ends_with("-wal"))
            .all(|wal| std::fs::symlink_metadata(wal).is_ok_and(|meta| meta.len() == 0));
        wal_empty && self.unlocked()
    }

    /// Whether the kernel lists no lock on the store file, its `-shm` or its `-presence`
    /// (`false` where its list cannot be read).
    fn unlocked(&self) -> bool {
        let base = store_file::resolved(&self.store);
        let files = [
            base.clone(),
            store_file::beside(&base, "-shm"),
            store_file::beside(&base, store_file::PRESENCE_SUFFIX),
        ];
        locked(&files) == Some(false)
    }

    /// Removes the files, `-wal` first (the one that could hold commits); whether none is
    /// left.
    fn remove(&self) -> bool {
        self.files.iter().all(|file| match std::fs::remove_file(file) {
            Ok(()) => true,
            Err(error) => error.kind() == ErrorKind::NotFound,
        })
    }
}

/// Whether the kernel lists a lock (any process's, this one's too) on one of `files` that are
/// there; `None` where its list cannot be read (not on Linux). Every SQLite connection that has
/// read a WAL-mode store holds a lock on its `-shm` until it closes.
pub(crate) fn locked(files: &[PathBuf]) -> Option<bool> {
    let listed = std::fs::read_to_string("/proc/locks").ok()?;
    let locked = locked_inodes(&listed);
    Some(files.iter().filter_map(|file| inode(file)).any(|inode| locked.contains(&inode)))
}

/// The inode number of the file at `path` (not followed), if it is there.
#[cfg(unix)]
fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|meta| meta.ino())
}

#[cfg(not(unix))]
fn inode(_path: &Path) -> Option<u64> {
    None
}

/// The inode numbers of the files a lock is listed on, in the text of `/proc/locks`: a line a
/// lock (or a waiter, after `->`), its file as `MAJOR:MINOR:INODE` (the device in hex). Inode
/// numbers alone, across every file system: one that is locked on another device only makes
/// the answer more careful.
fn locked_inodes(listed: &str) -> Vec<u64> {
    listed.lines().filter_map(|line| line.split_whitespace().find_map(file_of_lock)).collect()
}

/// The inode of a `MAJOR:MINOR:INODE` field.
fn file_of_lock(field: &str) -> Option<u64> {
    let mut parts = field.split(':');
    let (major, minor, inode) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = |part: &str| !part.is_empty() && part.chars().all(|c| c.is_ascii_hexdigit());
    if parts.next().is_some() || !hex(major) || !hex(minor) {
        return None;
    }
    inode.parse().ok()
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::{PermissionsExt, chown};

    use super::*;

    const OWNER: u32 = 64_101;
    const READER: u32 = 64_102;

    #[test]
    fn the_locked_files_are_read_from_the_kernels_list() {
        let listed = "1: POSIX  ADVISORY  READ 17979 fe:00:10059986 128 128\n\
                      2: FLOCK  ADVISORY  WRITE 17629 fe:00:5317105 0 EOF\n\
                      3: -> POSIX  ADVISORY  WRITE 1 08:1f:42 0 EOF\n\
                      4: OFDLCK ADVISORY  READ  -1 00:05:77 0 0\n";
        assert_eq!(locked_inodes(listed), [10_059_986, 5_317_105, 42, 77]);
        assert_eq!(file_of_lock("1:"), None);
        assert_eq!(file_of_lock("zz:00:5"), None);
    }

    /// `name` in `dir`, holding `bytes`, owned by `uid`, mode 0644.
    fn plant(dir: &Path, name: &str, bytes: &[u8], uid: u32) {
        let file = dir.join(name);
        if !bytes.is_empty() || !file.exists() {
            std::fs::write(&file, bytes).expect("write");
        }
        chown(&file, Some(uid), Some(uid)).expect("chown");
        std::fs::set_permissions(&file, PermissionsExt::from_mode(0o644)).expect("chmod");
    }

    /// A store of `OWNER`, mode 0644, and what a read by `READER` left beside it (as root
    /// can make it: a test process is not `READER`).
    fn read_by_another_user() -> Option<(tempfile::TempDir, PathBuf, Credentials)> {
        let me = Credentials::current()?;
        if !me.is_root() {
            println!("needs root to give the files to other users; not checked");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("s.db");
        let conn = rusqlite::Connection::open(&db).expect("open");
        conn.pragma_update(None, "journal_mode", "wal").expect("wal");
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1)").expect("write");
        drop(conn);
        plant(dir.path(), "s.db", b"", OWNER);
        plant(dir.path(), "s.db-wal", b"", READER);
        plant(dir.path(), "s.db-shm", &[0; 32_768], READER);
        Some((dir, db, Credentials::of(READER, READER)))
    }

    #[test]
    fn a_readers_files_are_refused_and_removed_when_nobody_has_the_store_open() {
        let Some((dir, db, reader)) = read_by_another_user() else { return };
        let left = left_by(&reader, &db).expect("the reader's files are found");
        assert_eq!(left.files, [dir.path().join("s.db-wal"), dir.path().join("s.db-shm")]);
        let Error::StoreFile { kind, message, .. } = left.refuse() else { panic!("StoreFile") };
        assert_eq!(kind, ErrorKind::PermissionDenied);
        assert!(message.contains("were removed") && message.contains("uid 64102"), "{message}");
        assert!(!dir.path().join("s.db-wal").exists() && !dir.path().join("s.db-shm").exists());
    }

    #[test]
    fn a_readers_files_are_left_while_a_process_has_the_store_open_or_the_wal_holds_frames() {
        let Some((dir, db, reader)) = read_by_another_user() else { return };
        // A connection that has read the store holds a lock on its -shm (root's gives them to
        // the store file's owner: given back to the reader here).
        let open = rusqlite::Connection::open(&db).expect("open");
        let _: i64 = open.query_row("SELECT x FROM t", [], |row| row.get(0)).expect("read");
        plant(dir.path(), "s.db-wal", b"", READER);
        plant(dir.path(), "s.db-shm", b"", READER);
        let left = left_by(&reader, &db).expect("the reader's files are found");
        let Error::StoreFile { message, .. } = left.refuse() else { panic!("StoreFile") };
        assert!(message.contains("they were left") && message.contains("rm "), "{message}");
        assert!(dir.path().join("s.db-wal").exists() && dir.path().join("s.db-shm").exists());
        // Its close removed them (it may write them): a WAL that is not empty holds commits,
        // and is left with nobody there.
        drop(open);
        plant(dir.path(), "s.db-wal", b"frames", READER);
        plant(dir.path(), "s.db-shm", &[0; 32_768], READER);
        let left = left_by(&reader, &db).expect("still the reader's");
        let Error::StoreFile { message, .. } = left.refuse() else { panic!("StoreFile") };
        assert!(message.contains("they were left"), "{message}");
        assert!(dir.path().join("s.db-wal").exists() && dir.path().join("s.db-shm").exists());
    }

    #[test]
    fn the_owners_own_files_and_files_the_owner_may_write_are_no_matter() {
        let Some((dir, db, reader)) = read_by_another_user() else { return };
        assert!(left_by(&Credentials::of(OWNER, OWNER), &db).is_none(), "the owner's read");
        for name in ["s.db-wal", "s.db-shm"] {
            let file = dir.path().join(name);
            std::fs::set_permissions(&file, PermissionsExt::from_mode(0o664)).expect("chmod");
            chown(&file, None, Some(OWNER)).expect("the store file's group");
        }
        assert!(left_by(&reader, &db).is_none(), "the owner's group may write them");
    }
}
