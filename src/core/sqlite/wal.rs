//! When the actor checkpoints the WAL (SQLite's auto-checkpoint is off).
//!
//! A WAL hook records the WAL's size after every commit. Past a soft limit a passive checkpoint
//! copies the new frames back, after which SQLite restarts the WAL from its beginning, so under
//! load the file stays near the soft limit. Past the hard limit (`Options::wal_bytes_max`) a
//! truncating checkpoint waits for readers, up to the busy timeout. A checkpoint that cannot
//! finish (a reader in another process) is tried again only after more growth.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

use crate::core::schema::Location;
use crate::error::Result;

/// WAL pages (16 MiB of 4 KiB pages) past which a quiet moment is used for a passive
/// checkpoint, so the WAL is reused in place instead of growing. Larger than SQLite's default of
/// 1000: hot pages rewritten in many frames are copied back once per checkpoint.
const SOFT_CHECKPOINT_PAGES: u64 = 4000;

/// The WAL's size as SQLite reports it after each commit, and when to checkpoint it. The file
/// can exceed `hard_pages` by at most what one batch writes.
pub(crate) struct WalSchedule {
    pub(crate) enabled: bool,
    pub(crate) pages: Arc<AtomicU64>,
    soft_pages: u64,
    hard_pages: u64,
    /// After a checkpoint that could not finish, the next waits until the WAL reaches this.
    retry_pages: u64,
    /// Whether a write committed since the last complete checkpoint.
    pub(crate) dirty: bool,
}

impl WalSchedule {
    pub(crate) fn install(
        conn: &mut Connection,
        location: &Location,
        wal_bytes_max: u64,
    ) -> Result<Self> {
        let enabled = matches!(location, Location::File(_));
        let pages = Arc::new(AtomicU64::new(0));
        let page_bytes: i64 = conn.pragma_query_value(None, "page_size", |row| row.get(0))?;
        let page_bytes = u64::try_from(page_bytes).unwrap_or(4096);
        let hard_pages = (wal_bytes_max / page_bytes.max(1)).max(1);
        if enabled {
            let seen = Arc::clone(&pages);
            conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, wal_pages| {
                seen.store(u64::try_from(wal_pages).unwrap_or(0), Ordering::Relaxed);
                Ok(())
            }))?;
        }
        let soft_pages = (hard_pages / 4).clamp(1, SOFT_CHECKPOINT_PAGES);
        Ok(Self { enabled, pages, soft_pages, hard_pages, retry_pages: 0, dirty: false })
    }

    /// Whether a checkpoint that could not finish may be tried again yet.
    pub(crate) fn may_retry(&self) -> bool {
        self.pages.load(Ordering::Relaxed) >= self.retry_pages
    }

    /// The checkpoint the WAL's size calls for now, if any.
    pub(crate) fn due(&self) -> Option<CheckpointMode> {
        let pages = self.pages.load(Ordering::Relaxed);
        match () {
            _ if !self.enabled || pages < self.retry_pages => None,
            _ if pages >= self.hard_pages => Some(CheckpointMode::TRUNCATE),
            _ if pages >= self.soft_pages => Some(CheckpointMode::PASSIVE),
            _ => None,
        }
    }

    pub(crate) fn checkpointed(&mut self, complete: bool) {
        let pages = self.pages.load(Ordering::Relaxed);
        if complete {
            // SQLite starts the WAL over at the next commit, whose hook reports the new size.
            self.pages.store(0, Ordering::Relaxed);
            self.retry_pages = 0;
            self.dirty = false;
        } else {
            self.retry_pages = pages + (self.soft_pages / 4).max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_are_due_by_wal_size_and_retried_after_growth() {
        let schedule = |pages: u64| WalSchedule {
            enabled: true,
            pages: Arc::new(AtomicU64::new(pages)),
            soft_pages: 100,
            hard_pages: 400,
            retry_pages: 0,
            dirty: true,
        };
        assert!(schedule(99).due().is_none());
        assert!(matches!(schedule(100).due(), Some(CheckpointMode::PASSIVE)));
        assert!(matches!(schedule(400).due(), Some(CheckpointMode::TRUNCATE)));

        let mut blocked = schedule(450);
        blocked.checkpointed(false);
        assert!(blocked.due().is_none(), "an unfinished checkpoint waits for more growth");
        blocked.pages.store(475, Ordering::Relaxed);
        assert!(matches!(blocked.due(), Some(CheckpointMode::TRUNCATE)));
        blocked.checkpointed(true);
        assert!(!blocked.dirty);
        assert!(blocked.due().is_none(), "a finished checkpoint starts the count over");
    }
}
