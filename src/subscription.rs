//! `Subscription`: the caller's side of following a stream, gap-free and without duplicates.
//!
//! A subscription has a cursor (the last `seq`, or `position` for `subscribe_all`, it has
//! delivered). It reads the backlog in pages through ordinary read ops; when a page comes back
//! empty it asks the actor to go live from the cursor. The actor sends whatever committed since
//! and registers it between two commits, so nothing falls in between. If the actor later drops
//! it (its buffer filled), the channel closes after the events already in it and the
//! subscription quietly goes back to paging. Every event is checked against the cursor, so an
//! event that arrives both ways is delivered once.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError, bounded};

use crate::core::events::{Event, Read, ReadAll};
use crate::core::msg::Msg;
use crate::core::publish::{Filter, LiveRequest};
use crate::core::state::ActorState;
use crate::core::tx::Scope;
use crate::error::{Error, Result};
use crate::store::{LIVENESS_CHECK, Shared};

/// A cursor over a stream (or over all of a tenant's streams): the backlog, then live events,
/// each exactly once, in commit order. Also an `Iterator` that ends when the store closes.
pub struct Subscription {
    shared: Weak<Shared>,
    state: Arc<ActorState>,
    scope: Scope,
    filter: Filter,
    cursor: u64,
    buffer: usize,
    page_size: usize,
    pending: VecDeque<Event>,
    live: Option<Receiver<Event>>,
    /// The actor holds a weak reference to this, to prune a dropped subscription.
    token: Arc<()>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("filter", &self.filter)
            .field("cursor", &self.cursor)
            .field("live", &self.live.is_some())
            .finish_non_exhaustive()
    }
}

/// How long a read may wait.
#[derive(Clone, Copy)]
enum Wait {
    Forever,
    Until(Instant),
    No,
}

impl Subscription {
    /// A subscription counted against `Limits::subscriptions_max`; the caller has already
    /// counted it (its drop uncounts it).
    pub(crate) fn new(
        shared: &Arc<Shared>,
        scope: Scope,
        filter: Filter,
        after: u64,
        buffer: usize,
        page_size: usize,
    ) -> Self {
        Self {
            shared: Arc::downgrade(shared),
            state: Arc::clone(shared.state()),
            scope,
            filter,
            cursor: after,
            buffer,
            page_size,
            pending: VecDeque::new(),
            live: None,
            token: Arc::new(()),
        }
    }

    /// The next event, waiting as long as it takes.
    ///
    /// # Errors
    /// `Closed` once the store is closed; a read error if the backlog cannot be read.
    pub fn recv(&mut self) -> Result<Event> {
        self.next_event(Wait::Forever)?.ok_or(Error::Closed)
    }

    /// The next event, or `None` if none arrives within `timeout`.
    ///
    /// # Errors
    /// As [`Subscription::recv`].
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Event>> {
        // A timeout too long to represent is no timeout.
        let wait = Instant::now().checked_add(timeout).map_or(Wait::Forever, Wait::Until);
        self.next_event(wait)
    }

    /// The next event if one is ready (it may read one page of backlog), or `None`.
    ///
    /// # Errors
    /// As [`Subscription::recv`].
    pub fn try_recv(&mut self) -> Result<Option<Event>> {
        self.next_event(Wait::No)
    }

    /// The cursor: the `seq` (stream subscriptions) or `position` (`subscribe_all`) of the last
    /// event delivered, or the starting point if none was. Subscribing again after it resumes
    /// exactly where this one stopped.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    fn next_event(&mut self, wait: Wait) -> Result<Option<Event>> {
        if self.state.on_actor_thread() {
            // Only the actor can feed this subscription, and this is the actor.
            return Err(Error::InvalidInput(
                "a subscription cannot be read from inside an operation".into(),
            ));
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                if self.advance(&event) {
                    return Ok(Some(event));
                }
                continue;
            }
            let Some(live) = &self.live else {
                self.page_or_go_live()?;
                continue;
            };
            match receive(live, wait, &self.state) {
                Received::Event(event) => self.pending.push_back(event),
                Received::Nothing => return Ok(None),
                Received::Dropped => self.live = None,
            }
        }
    }

    /// Moves the cursor past `event`; false for an event already delivered.
    fn advance(&mut self, event: &Event) -> bool {
        let at = self.filter.cursor_of(event);
        if at <= self.cursor {
            return false;
        }
        self.cursor = at;
        true
    }

    /// Reads the next page of backlog; when there is none, asks the actor to go live.
    fn page_or_go_live(&mut self) -> Result<()> {
        let shared = self.shared.upgrade().ok_or(Error::Closed)?;
        let page = match &self.filter {
            Filter::Stream(stream) => {
                let op =
                    Read { stream: stream.clone(), after_seq: self.cursor, limit: self.page_size };
                shared.exec(&self.scope, op)?
            }
            Filter::All => {
                let op = ReadAll { after_position: self.cursor, limit: self.page_size };
                shared.exec(&self.scope, op)?
            }
        };
        if !page.is_empty() {
            self.pending.extend(page);
            return Ok(());
        }
        let (sender, receiver) = bounded(self.buffer);
        let request = LiveRequest {
            tenant: Arc::clone(&self.scope.tenant),
            filter: self.filter.clone(),
            after: self.cursor,
            sender,
            capacity: self.buffer,
            alive: Arc::downgrade(&self.token),
        };
        shared.send(Msg::GoLive(request))?;
        self.live = Some(receiver);
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.state.subscriptions.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Iterator for Subscription {
    type Item = Event;

    /// The next event; `None` once the store is closed (or a read fails: use
    /// [`Subscription::recv`] to see the error).
    fn next(&mut self) -> Option<Event> {
        self.recv().ok()
    }
}

enum Received {
    Event(Event),
    Nothing,
    Dropped,
}

/// One read from the live feed. A closed feed means the actor dropped us (or stopped).
fn receive(live: &Receiver<Event>, wait: Wait, state: &ActorState) -> Received {
    match wait {
        Wait::No => match live.try_recv() {
            Ok(event) => Received::Event(event),
            Err(TryRecvError::Empty) => Received::Nothing,
            Err(TryRecvError::Disconnected) => Received::Dropped,
        },
        Wait::Until(deadline) => receive_until(live, deadline, state),
        Wait::Forever => loop {
            match receive_until(live, Instant::now() + LIVENESS_CHECK, state) {
                Received::Nothing => continue,
                other => return other,
            }
        },
    }
}

fn receive_until(live: &Receiver<Event>, deadline: Instant, state: &ActorState) -> Received {
    loop {
        let step = deadline.min(Instant::now() + LIVENESS_CHECK);
        match live.recv_deadline(step) {
            Ok(event) => return Received::Event(event),
            Err(RecvTimeoutError::Disconnected) => return Received::Dropped,
            Err(RecvTimeoutError::Timeout) => {
                if state.exited.load(std::sync::atomic::Ordering::SeqCst) {
                    return Received::Dropped;
                }
                if Instant::now() >= deadline {
                    return Received::Nothing;
                }
            }
        }
    }
}
