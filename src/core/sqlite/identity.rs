//! The store's file as opened: a write is committed only while its path still names it.
//!
//! SQLite keeps writing through its open file handle after the file is deleted or replaced
//! under it: the commit succeeds and goes with the deleted file (or never reaches the one now
//! at the path). So before each writing batch commits, the actor looks at the path (one
//! `stat`, about a microsecond next to the commit) and abandons the batch with an I/O error if
//! the file there is missing or another. A deletion between that look and the commit is not
//! caught: this narrows the window to microseconds, it cannot close it.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A file's identity: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    device: u64,
    inode: u64,
}

/// The path of the store's file and the file it named at open.
#[derive(Debug)]
pub(crate) struct FileWatch {
    path: PathBuf,
    opened: Identity,
}

impl FileWatch {
    /// Notes what `path` names now (`None` where identities cannot be read: not on Unix). The
    /// path is made absolute first, so that the process changing its directory changes nothing.
    pub(crate) fn new(path: &Path) -> Option<Self> {
        let path = std::path::absolute(path).ok()?;
        let opened = identity(&path).ok()??;
        Some(Self { path, opened })
    }

    /// `Ok` while the path names the file the store opened.
    ///
    /// # Errors
    /// `Io` when the file was deleted, replaced or cannot be looked at.
    pub(crate) fn check(&self) -> Result<()> {
        let now = identity(&self.path).map_err(Error::Io)?;
        if now == Some(self.opened) {
            return Ok(());
        }
        Err(Error::Io(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "the store's file {} was deleted or replaced while open: a write now would be \
                 lost with it, so writes are refused",
                self.path.display()
            ),
        )))
    }
}

#[cfg(unix)]
fn identity(path: &Path) -> io::Result<Option<Identity>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(Some(Identity { device: meta.dev(), inode: meta.ino() }))
}

#[cfg(not(unix))]
fn identity(_path: &Path) -> io::Result<Option<Identity>> {
    Ok(None)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_or_replaced_file_is_noticed() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("f");
        std::fs::write(&path, b"a")?;
        let watch = FileWatch::new(&path).expect("an identity on unix");
        watch.check()?;
        std::fs::write(&path, b"changed in place")?;
        watch.check()?;
        // Made while the first still exists, so it cannot have the same inode.
        std::fs::write(dir.path().join("g"), b"another")?;
        std::fs::rename(dir.path().join("g"), &path)?;
        assert!(matches!(watch.check(), Err(Error::Io(_))), "another file at the path");
        std::fs::remove_file(&path)?;
        assert!(matches!(watch.check(), Err(Error::Io(e)) if e.kind() == io::ErrorKind::NotFound));
        Ok(())
    }
}
