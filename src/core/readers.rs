//! Reader threads: the calls that only read run here, on read-only connections of their own,
//! so that a read never waits for the writer's batch and a write never waits behind a read.
//!
//! Each reader owns one connection opened read-only (SQLite: `SQLITE_OPEN_READ_ONLY` and
//! `query_only`, so a statement that would write fails instead; PostgreSQL: a session of its
//! own whose transactions are read-only) and takes one call at a time from a channel the
//! readers share. A call runs in a transaction of its own, begun after the call was sent: on
//! SQLite in WAL mode that is a snapshot taken then, so it sees every write whose reply was
//! sent before it (a reply leaves only after its commit), and nothing of a batch that has not
//! committed. Readers never publish, ring the bell or set alarms: what only reads has none of
//! that to do.
//!
//! What stays on the writer: every call that may write, a transaction closure, the calls that
//! must run on the writer's own connection (`Op::on_writer`: a session lock), and a read sent
//! by a thread whose submitted writes are not answered yet (it must see them: see
//! `store::InFlight`). An in-memory store, an inline one, and a store opened with
//! `Options::readers` at 0 read on the writer as well.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, bounded};
use parking_lot::Mutex;

use crate::core::actor::EngineHooks;
use crate::core::clock::Stamp;
use crate::core::conn::Conn;
use crate::core::msg::Call;
use crate::core::schema::Location;
use crate::core::state::{Acting, ActorState};
use crate::core::tx::{Engine, Tx, forbidden};
use crate::error::{Error, Result};
use crate::ids::IdGen;
use crate::limits::Limits;
use crate::options::Options;

/// The store's reader threads and the channel that feeds them.
pub(crate) struct Readers {
    inbox: Sender<Message>,
    /// Taken by the first `close`.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What a reader is sent.
enum Message {
    /// Run this call.
    Run(Call),
    /// Stop (after the calls sent before).
    Stop,
}

impl Readers {
    /// Starts `options.readers` readers on `location` (none for a store that reads on its
    /// writer: in memory, inline, or `readers` at 0); returns once every one has opened its
    /// connection, or the first error.
    pub(crate) fn start(
        location: &Location,
        options: &Options,
        state: &Arc<ActorState>,
        hooks: &'static EngineHooks,
    ) -> Result<Option<Readers>> {
        if !reads_apart(location, options) {
            return Ok(None);
        }
        let (inbox, calls) = bounded(options.mailbox_capacity);
        let readers = Readers { inbox, threads: Mutex::new(Vec::with_capacity(options.readers)) };
        for index in 0..options.readers {
            match spawn_reader(index, location, options, state, hooks, calls.clone()) {
                Ok(thread) => readers.threads.lock().push(thread),
                Err(error) => {
                    readers.close();
                    return Err(error);
                }
            }
        }
        Ok(Some(readers))
    }

    /// Hands `call` to the next free reader (blocking while `mailbox_capacity` calls wait).
    ///
    /// # Errors
    /// `Closed` once the readers have stopped.
    pub(crate) fn send(&self, call: Call) -> Result<()> {
        self.inbox.send(Message::Run(call)).map_err(|_| Error::Closed)
    }

    /// Lets the readers finish the calls sent so far, then stops them and closes their
    /// connections. Closing again does nothing.
    pub(crate) fn close(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        for _ in &threads {
            // Each reader takes one and stops.
            let _ = self.inbox.send(Message::Stop);
        }
        for thread in threads {
            // A reader that panicked left nothing open: its connection closed as it unwound.
            let _ = thread.join();
        }
    }
}

/// Whether a store at `location` with `options` reads on reader threads: not in memory (a
/// private database per connection), not inline, and not on a VFS of the caller's own (it
/// need not serve several connections at once, nor their shared memory).
fn reads_apart(location: &Location, options: &Options) -> bool {
    options.readers > 0
        && !options.inline
        && options.vfs.is_none()
        && !matches!(location, Location::Memory)
}

/// Opens one reader's connection on a thread of its own, then serves `calls` there.
fn spawn_reader(
    index: usize,
    location: &Location,
    options: &Options,
    state: &Arc<ActorState>,
    hooks: &'static EngineHooks,
    calls: Receiver<Message>,
) -> Result<JoinHandle<()>> {
    let (location, options, state) = (location.clone(), options.clone(), Arc::clone(state));
    let (opened_tx, opened_rx) = bounded::<Result<()>>(1);
    let thread =
        std::thread::Builder::new().name(format!("spindle-reader-{index}")).spawn(move || {
            match Reader::open(&location, options, state, hooks) {
                Ok(reader) => {
                    let _ = opened_tx.send(Ok(()));
                    reader.serve(&calls);
                }
                Err(error) => {
                    let _ = opened_tx.send(Err(error));
                }
            }
        })?;
    match opened_rx.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(error)) => {
            let _ = thread.join();
            Err(error)
        }
        Err(_) => {
            let _ = thread.join();
            Err(Error::Poisoned("a reader thread stopped while opening".into()))
        }
    }
}

/// One reader: its connection and what its calls' `Tx` lends them.
struct Reader {
    conn: Conn,
    stamp: Stamp,
    limits: Limits,
    ids: IdGen,
    hooks: &'static EngineHooks,
    state: Arc<ActorState>,
}

impl Reader {
    fn open(
        location: &Location,
        options: Options,
        state: Arc<ActorState>,
        hooks: &'static EngineHooks,
    ) -> Result<Self> {
        let conn = Conn::open_reader(location, &options)?;
        let ids = IdGen::new(None)?;
        let stamp = Stamp::new(options.clock);
        Ok(Self { conn, stamp, limits: options.limits, ids, hooks, state })
    }

    /// Answers calls until told to stop (or the store is gone), then closes the connection.
    fn serve(mut self, calls: &Receiver<Message>) {
        {
            // A call that calls back into its own store would wait for itself: refused.
            let _acting = Acting::enter(&self.state);
            for message in calls {
                match message {
                    Message::Run(call) => self.answer(call),
                    Message::Stop => break,
                }
            }
        }
        let _ = self.conn.close(false);
    }

    /// Runs one call in a read transaction of its own and answers it.
    fn answer(&mut self, call: Call) {
        if self.state.poisoned.load(Ordering::SeqCst) {
            return call.refuse(
                Error::Poisoned("the store's writer stopped: reopen it".into()),
                &self.state.meter,
            );
        }
        if self.state.exited.load(Ordering::SeqCst) {
            return call.refuse(Error::Closed, &self.state.meter);
        }
        if !call.scope.role.allows(call.access) {
            let error = forbidden(call.label, call.scope.role);
            return call.refuse(error, &self.state.meter);
        }
        // On PostgreSQL the start goes with the read's first statement (`PgConn::begin_ahead`).
        if let Err(error) = self.conn.begin_ahead(false, &[], &[]) {
            return call.refuse(error, &self.state.meter);
        }
        let scope = call.scope.clone();
        let engine = Engine {
            db: self.conn.db(),
            sqlite: self.conn.sqlite_parts(),
            limits: &self.limits,
            ids: &self.ids,
            owned_streams: self.hooks.owned_streams,
        };
        // Never earlier than the batch of a write this read can see.
        let now_ms = self.stamp.next_ms().max(self.state.stamp_ms.load(Ordering::SeqCst));
        let mut tx = Tx::new(engine, now_ms, &scope);
        tx.set_publishing(false);
        tx.set_read_only();
        self.conn.enter_call(call.internal, call.scope.bound);
        // Only what SQLite reports while this call runs counts against the file.
        crate::error::take_sqlite_corruption();
        let applied = call.run(&mut tx);
        drop(tx.finish());
        self.conn.leave_call();
        if crate::error::take_sqlite_corruption() {
            let found = match &applied.failure {
                Some(Error::Corrupt(found)) => found.clone(),
                _ => "SQLite reported the file corrupt".to_owned(),
            };
            self.state.corrupt.lock().get_or_insert(found);
        }
        // Nothing to keep: a read's transaction only ends.
        match self.conn.rollback() {
            Ok(()) => applied.deliver(None, &self.state.meter),
            Err(error) => applied.deliver(Some(error), &self.state.meter),
        }
    }
}
