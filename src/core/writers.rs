//! The writer actors of a store that runs on threads: the first, which every such store has,
//! and on PostgreSQL the others (`Options::writers`), each with a session of its own, started
//! once the store is open. Routes each message: a call to the writer of the thread that sends
//! it, a subscriber's going live to the first (which alone feeds subscribers live).
//!
//! A thread always writes through the same writer (its slot, taken once per thread): the ops
//! one thread sends run in the order it sent them, and a read it sends while its writes are
//! unanswered runs after them. The writers are to each other what the stores of two processes
//! are: each takes its tenants' turns at its batches' starts and hears the others' commits on
//! the store's channel.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::core::actor::{self, EngineHooks, Spawned};
use crate::core::msg::Msg;
use crate::core::schema::Location;
use crate::core::state::ActorState;
use crate::error::{Error, Result};
use crate::options::Options;

/// The next thread's slot: threads take writers in turn.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, the same for every store: its writer is the slot's remainder by
    /// the store's count of writers.
    static SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
}

/// A store's writer actors.
pub(crate) struct Writers {
    /// The writer every store has: it alone feeds subscribers live.
    first: Writer,
    /// The other writers, once started (`start_others`); until then the first takes every call.
    others: OnceLock<Vec<Writer>>,
}

/// One writer actor.
struct Writer {
    /// Where its calls go.
    mailbox: Sender<Msg>,
    /// Its thread, taken when it is closed.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writers {
    /// Opens the store on the first writer's thread.
    ///
    /// # Errors
    /// What opening the store fails with.
    pub(crate) fn spawn(
        location: Location,
        options: Options,
        state: &Arc<ActorState>,
        hooks: &'static EngineHooks,
    ) -> Result<Self> {
        let first = Writer::spawn(location, options, state, hooks, true)?;
        state.writers.store(1, Ordering::Relaxed);
        Ok(Self { first, others: OnceLock::new() })
    }

    /// Starts the other writers a writable PostgreSQL store asks for (`Options::writers`), each
    /// opening a session of its own; does nothing for another store, or a seeded one. Called
    /// once the store is open (and has recovered, which it does only while no other session
    /// of it is there).
    ///
    /// # Errors
    /// What opening a session fails with; the writers started before it are closed again.
    pub(crate) fn start_others(
        &self,
        location: &Location,
        options: &Options,
        state: &Arc<ActorState>,
        hooks: &'static EngineHooks,
    ) -> Result<()> {
        // A seeded store's ids and secrets follow from its seed and its calls: with several
        // writers they would also follow from which writer a thread happened to take.
        let seeded = options.seed.is_some();
        if !takes_others(location) || options.read_only || seeded || options.writers <= 1 {
            return Ok(());
        }
        let mut others = Vec::with_capacity(options.writers - 1);
        for _ in 1..options.writers {
            match Writer::spawn(location.clone(), options.clone(), state, hooks, false) {
                Ok(writer) => others.push(writer),
                Err(error) => {
                    others.into_iter().for_each(Writer::stop);
                    return Err(error);
                }
            }
        }
        state.writers.store(options.writers, Ordering::Relaxed);
        // Called once, from the store's opening: nothing else sets it.
        let _ = self.others.set(others);
        Ok(())
    }

    /// Sends `message` to its writer (blocking while that mailbox is full).
    ///
    /// # Errors
    /// `Closed` when that writer has stopped.
    pub(crate) fn send(&self, message: Msg) -> Result<()> {
        let writer = match &message {
            Msg::Run(_) => self.of_this_thread(),
            // Only the first feeds subscribers live; a close is sent to each (`close`).
            Msg::GoLive(_) | Msg::Close(_) => &self.first,
        };
        writer.mailbox.send(message).map_err(|_| Error::Closed)
    }

    /// Sends a call to writer `lane` (taken round the writers: the remainder by their count),
    /// whichever thread sends it (blocking while that mailbox is full). For a caller that keeps
    /// several independent calls in flight and wants them on different sessions (a worker
    /// pool's rounds); its calls then keep no order among themselves.
    ///
    /// # Errors
    /// `Closed` when that writer has stopped.
    pub(crate) fn send_on(&self, lane: usize, message: Msg) -> Result<()> {
        self.writer_at(lane).mailbox.send(message).map_err(|_| Error::Closed)
    }

    /// Closes every writer with `close` (which sends it its close and waits for its thread),
    /// the first last (its session's end ends the store's presence); returns the first error
    /// met.
    ///
    /// # Errors
    /// What `close` returns for a writer.
    pub(crate) fn close(
        &self,
        close: impl Fn(&Sender<Msg>, &Mutex<Option<JoinHandle<()>>>) -> Result<()>,
    ) -> Result<()> {
        let others = self.others.get().map_or(&[][..], Vec::as_slice);
        let closed: Vec<Result<()>> =
            others.iter().map(|writer| close(&writer.mailbox, &writer.thread)).collect();
        let first = close(&self.first.mailbox, &self.first.thread);
        closed.into_iter().chain(std::iter::once(first)).collect()
    }

    /// The writer of the calling thread.
    fn of_this_thread(&self) -> &Writer {
        self.writer_at(SLOT.with(|slot| *slot))
    }

    /// Writer `index`, taken round the writers started (the remainder by their count).
    fn writer_at(&self, index: usize) -> &Writer {
        let Some(others) = self.others.get().filter(|others| !others.is_empty()) else {
            return &self.first;
        };
        match index % (others.len() + 1) {
            0 => &self.first,
            index => &others[index - 1],
        }
    }
}

impl Writer {
    /// Opens a writer's session on a thread of its own (`first`: the store's first writer).
    fn spawn(
        location: Location,
        options: Options,
        state: &Arc<ActorState>,
        hooks: &'static EngineHooks,
        first: bool,
    ) -> Result<Self> {
        let Spawned { mailbox, thread } =
            actor::spawn(location, options, Arc::clone(state), hooks, first)?;
        Ok(Self { mailbox, thread: Mutex::new(Some(thread)) })
    }

    /// Stops a writer nobody has sent a call yet: with its mailbox's only sender gone it
    /// finishes (its session's end lets go of the store's presence) and its thread ends.
    fn stop(self) {
        let Writer { mailbox, thread } = self;
        drop(mailbox);
        if let Some(thread) = thread.into_inner() {
            let _ = thread.join();
        }
    }
}

/// Whether the store at `location` may have more than one writer: a PostgreSQL one (a SQLite
/// file has one writer lock, a memory database one connection).
fn takes_others(location: &Location) -> bool {
    match location {
        #[cfg(feature = "postgres")]
        Location::Postgres(_) => true,
        _ => false,
    }
}
