//! The actor's side of subscriptions: live subscribers, fan-out after commit, and going live
//! from a cursor between two commits.
//!
//! The writer never blocks on a reader: events go out with `try_send`, and a subscriber whose
//! buffer is full is dropped. Dropping is not an error for the subscriber: its channel closes
//! after the events already in it, and it goes back to paging from its cursor (see
//! `subscription.rs`), so it still sees every event exactly once.

use std::sync::{Arc, Weak};

use crossbeam_channel::{Sender, TrySendError};

use crate::core::db::Db;
use crate::core::events::{self, Event, Stream};
use crate::error::Result;

/// An event that committed, with the tenant it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    pub(crate) tenant: Arc<str>,
    pub(crate) event: Event,
}

/// Which events a subscriber wants, within its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Filter {
    /// One stream; the cursor is the stream's `seq`.
    Stream(Stream),
    /// Every stream of the tenant; the cursor is the global `position`.
    All,
}

impl Filter {
    /// The cursor value of `event` under this filter.
    pub(crate) fn cursor_of(&self, event: &Event) -> u64 {
        match self {
            Filter::Stream(_) => event.seq,
            Filter::All => event.position,
        }
    }

    fn matches(&self, event: &Event) -> bool {
        match self {
            Filter::Stream(stream) => event.stream == *stream,
            Filter::All => true,
        }
    }
}

/// A subscriber's request to be fed live from `after` on.
#[derive(Debug)]
pub(crate) struct LiveRequest {
    pub(crate) tenant: Arc<str>,
    pub(crate) filter: Filter,
    pub(crate) after: u64,
    /// Bounded to the subscriber's buffer size.
    pub(crate) sender: Sender<Event>,
    pub(crate) capacity: usize,
    /// Gone when the subscription is dropped, so a subscriber of a quiet stream is pruned too.
    pub(crate) alive: Weak<()>,
}

/// The live subscribers, owned by the actor.
#[derive(Debug, Default)]
pub(crate) struct Publisher {
    live: Vec<LiveRequest>,
    /// `PRAGMA data_version` when last looked at: it changes when another connection (another
    /// process) commits, whose events the live subscribers have not been sent.
    data_version: Option<i64>,
}

impl Publisher {
    /// Sends every committed event to every subscriber that wants it, in commit order, and drops
    /// the subscribers that are full or gone.
    pub(crate) fn publish(&mut self, events: &[Published]) {
        if self.live.is_empty() {
            return;
        }
        self.live.retain(|subscriber| {
            subscriber.alive.strong_count() > 0 && deliver_all(subscriber, events)
        });
    }

    /// Whether any subscriber is live.
    pub(crate) fn has_live(&self) -> bool {
        !self.live.is_empty()
    }

    /// Drops every live subscriber if another connection committed since the last look (the
    /// connection's count of foreign commits, `version`, moved or cannot be read): they go back
    /// to paging from their cursors and read what it wrote. Runs before this connection's events
    /// are published, so none of them can be skipped.
    pub(crate) fn notice_foreign_writes(&mut self, version: Option<i64>) {
        if self.live.is_empty() {
            return;
        }
        if version.is_none() || version != self.data_version {
            self.live.clear();
            self.data_version = version;
        }
    }

    /// Sends the events past the request's cursor and registers it, or drops the request (which
    /// sends it back to paging) when the backlog does not fit its buffer. Runs between commits,
    /// so no event can fall between the backlog and the live feed.
    /// `version` is the connection's count of foreign commits (see `notice_foreign_writes`).
    pub(crate) fn go_live(
        &mut self,
        db: Db<'_>,
        version: Option<i64>,
        request: LiveRequest,
    ) -> Result<()> {
        self.notice_foreign_writes(version);
        if self.live.is_empty() {
            self.data_version = version;
        }
        self.live.retain(|subscriber| subscriber.alive.strong_count() > 0);
        let limit = request.capacity + 1;
        let backlog =
            events::read_filtered(db, &request.tenant, &request.filter, request.after, limit)?;
        if backlog.len() > request.capacity {
            return Ok(());
        }
        for event in backlog {
            if request.sender.try_send(event).is_err() {
                return Ok(());
            }
        }
        self.live.push(request);
        Ok(())
    }

    /// Drops every subscriber; their channels close and their next read reports the store closed.
    pub(crate) fn clear(&mut self) {
        self.live.clear();
    }
}

/// Sends the events `subscriber` wants; false when it must be dropped.
fn deliver_all(subscriber: &LiveRequest, events: &[Published]) -> bool {
    let wanted = events.iter().filter(|published| {
        published.tenant == subscriber.tenant && subscriber.filter.matches(&published.event)
    });
    for published in wanted {
        match subscriber.sender.try_send(published.event.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => return false,
        }
    }
    true
}
