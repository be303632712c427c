//! What a store's threads and its handles share about the writer's life (`ActorState`), and
//! which store's threads the current thread is (`Acting`). Below the actor, the readers and
//! the connections, which all read it: none of them names the actor for it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize};

use parking_lot::Mutex;

use crate::core::bell::Bell;
use crate::core::meter::Meter;

/// What the actor and the handles share about the actor's life.
#[derive(Debug, Default)]
pub(crate) struct ActorState {
    /// Callers waiting for a reply; spinning helps only when there is at most one.
    pub(crate) waiting: AtomicUsize,
    /// How many writer actors share the callers (see `core::writers`).
    pub(crate) writers: AtomicUsize,
    /// Set when the actor has stopped: nobody will answer any more.
    pub(crate) exited: AtomicBool,
    /// Set when the writer poisoned itself: the readers refuse their calls too.
    pub(crate) poisoned: AtomicBool,
    /// The writer's newest batch stamp: a reader's time is never earlier than the batch of a
    /// write it can see.
    pub(crate) stamp_ms: AtomicI64,
    /// What SQLite reported when a reader found the file corrupt: the writer then refuses
    /// writes, as when it finds it so itself.
    pub(crate) corrupt: Mutex<Option<String>>,
    /// Open subscriptions, held under `Limits::subscriptions_max`.
    pub(crate) subscriptions: AtomicUsize,
    /// Rung after a commit that made work available, for callers blocked waiting for some.
    pub(crate) bell: Bell,
    /// What the store counts about its work (`Store::metrics`).
    pub(crate) meter: Meter,
}

thread_local! {
    /// The addresses of the `ActorState`s whose actors this thread is running right now,
    /// innermost last (an inline store's op may call another store). A call from there into one
    /// of them (an op calling back into its own store) would wait for itself forever, so it is
    /// refused.
    static ACTING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

impl ActorState {
    /// Whether the current thread is running this store's actor (at any depth).
    pub(crate) fn on_actor_thread(&self) -> bool {
        ACTING.with(|acting| acting.borrow().contains(&self.address()))
    }

    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

/// Marks the current thread as running an actor (or a reader of its store) while it lives.
pub(crate) struct Acting;

impl Acting {
    pub(crate) fn enter(state: &ActorState) -> Self {
        ACTING.with(|acting| acting.borrow_mut().push(state.address()));
        Acting
    }
}

impl Drop for Acting {
    fn drop(&mut self) {
        ACTING.with(|acting| acting.borrow_mut().pop());
    }
}
