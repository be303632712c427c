//! The actor: one thread that owns the connection and runs every call, in batches.
//!
//! Loop: take one message; for a call, drain up to `batch_max - 1` more calls without waiting;
//! run them in one transaction (`BEGIN IMMEDIATE`, or deferred when every call only reads), one
//! savepoint per call (none for a call that only reads or writes with one statement, which is
//! atomic by itself, or that is the only one in its transaction, which a rollback undoes); one
//! `COMMIT`; then every reply; then every event to the subscribers. Subscribe requests and
//! close are handled between batches, never inside one.
//!
//! Failure handling, from the smallest scope out:
//! - a call that returns `Err`, returns `Rollback` or panics is rolled back to its savepoint and
//!   the rest of the batch goes on;
//! - an op that lost to another transaction (a deadlock or a serialisation failure, PostgreSQL
//!   only) is not answered: it runs again in the next transaction, with the calls after it in
//!   its batch (so one caller's ops keep their order), at most `CONFLICT_RETRIES` more times;
//! - if SQLite ends the whole transaction under a call (disk full, I/O error), every call of the
//!   batch so far is answered with that error and the remaining calls start a new transaction;
//! - a failed `COMMIT` answers every call of the batch with the error and publishes nothing;
//! - only when the connection cannot be brought back to "no transaction open" does the store
//!   poison itself: every later call is answered `Poisoned`.
//!
//! The actor also schedules WAL checkpoints (auto-checkpoint is off): a passive one when the
//! mailbox is idle or the WAL passes a quarter of its limit, a truncating one past the limit.
//!
//! An inline store (`Options::inline`) has no thread: [`Inline`] runs the same batch for each
//! call on the caller's thread, under a lock.

use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, bounded};
use parking_lot::Mutex;

use crate::core::clock::Stamp;
use crate::core::conn::Conn;
use crate::core::db::args;
use crate::core::db::{RELEASE_OP, ROLLBACK_TO_OP, SAVEPOINT_OP};
use crate::core::events::OwnedStreams;
use crate::core::meter::{Meter, Tallies};
use crate::core::msg::{Applied, Call, Msg};
use crate::core::op::{Access, Op, Role, sealed::Sealed};
use crate::core::publish::{LiveRequest, Published, Publisher};
use crate::core::schema::Location;
use crate::core::state::{Acting, ActorState};
use crate::core::tx::{Engine, Finished, LateWrite, Scope, Tx, forbidden};
use crate::error::{Error, Result};
use crate::ids::IdGen;
use crate::limits::Limits;
use crate::options::Options;

/// How long the actor spins for the next message before parking, when at most one caller is
/// waiting (a free core); waking a parked thread costs about 50 µs here.
const ACTOR_SPIN: Duration = Duration::from_micros(50);

/// Shortest wait for more callers worth making; below it (commits without an fsync) the
/// batch runs at once.
const LINGER_MIN: Duration = Duration::from_micros(20);

/// How long the mailbox must stay empty before an idle passive checkpoint (and, while
/// subscribers are live, how often another process's writes are looked for).
const IDLE_CHECKPOINT_AFTER: Duration = Duration::from_millis(100);

/// A running actor: its mailbox and its thread.
pub(crate) struct Spawned {
    pub(crate) mailbox: Sender<Msg>,
    pub(crate) thread: JoinHandle<()>,
}

/// Opens the database on a new thread and starts the actor there; returns once the open has
/// succeeded or failed. `first`: the store's first writer, whose end is the store's (another
/// writer's ends it only by a panic; see `core::writers`).
pub(crate) fn spawn(
    location: Location,
    options: Options,
    state: Arc<ActorState>,
    hooks: &'static EngineHooks,
    first: bool,
) -> Result<Spawned> {
    let (mailbox, inbox) = bounded(options.mailbox_capacity);
    let (opened_tx, opened_rx) = bounded::<Result<()>>(1);
    let thread = std::thread::Builder::new().name("spindle-store".into()).spawn(move || {
        let _acting = Acting::enter(&state);
        let exited = ExitFlag { state: Arc::clone(&state), first };
        match Conn::open(&location, &options, &state) {
            Ok(conn) => match Actor::new(conn, inbox, &location, options, state, hooks) {
                Ok(actor) => {
                    let _ = opened_tx.send(Ok(()));
                    actor.run();
                }
                Err(error) => {
                    let _ = opened_tx.send(Err(error));
                }
            },
            Err(error) => {
                let _ = opened_tx.send(Err(error));
            }
        }
        drop(exited);
    })?;
    match opened_rx.recv() {
        Ok(Ok(())) => Ok(Spawned { mailbox, thread }),
        Ok(Err(error)) => {
            let _ = thread.join();
            Err(error)
        }
        Err(_) => {
            let _ = thread.join();
            Err(Error::Poisoned("the store thread stopped while opening".into()))
        }
    }
}

/// An actor run on its callers' threads (`Options::inline`): each message is handled at once,
/// under a lock, by the thread that sends it. There is no mailbox and no thread of its own.
pub(crate) struct Inline {
    actor: Mutex<Option<Actor>>,
    state: Arc<ActorState>,
}

impl Inline {
    /// Opens the database on the calling thread.
    pub(crate) fn open(
        location: &Location,
        options: Options,
        state: Arc<ActorState>,
        hooks: &'static EngineHooks,
    ) -> Result<Self> {
        let conn = Conn::open(location, &options, &state)?;
        // A mailbox whose sender is gone: the loop's helpers find it empty and never wait.
        let (_, inbox) = bounded(0);
        let actor = Actor::new(conn, inbox, location, options, Arc::clone(&state), hooks)?;
        Ok(Self { actor: Mutex::new(Some(actor)), state })
    }

    /// Handles `message` on this thread: runs a call (replying on its channel before this
    /// returns) or registers a subscriber. A panic of the store's own code (not an op's: those
    /// are answered as `OpPanicked`) closes the store, as it would stop the store's thread.
    ///
    /// # Errors
    /// `Closed` after close; `Poisoned` if the store's code panicked.
    pub(crate) fn handle(&self, message: Msg) -> Result<()> {
        let mut slot = self.actor.lock();
        let Some(actor) = slot.as_mut() else {
            return Err(Error::Closed);
        };
        let _acting = Acting::enter(&self.state);
        let handled = catch_unwind(AssertUnwindSafe(|| actor.handle_inline(message)));
        if handled.is_err() {
            // Dropping the connection rolls back whatever transaction the panic left open.
            slot.take();
            self.state.exited.store(true, Ordering::SeqCst);
            return Err(Error::Poisoned("the store panicked".into()));
        }
        Ok(())
    }

    /// Closes the store: commits, checkpoints and closes the connection. Closing again is `Ok`.
    ///
    /// # Errors
    /// The first error met while closing.
    pub(crate) fn close(&self) -> Result<()> {
        let Some(actor) = self.actor.lock().take() else {
            return Ok(());
        };
        let _acting = Acting::enter(&self.state);
        let closed = actor.shutdown();
        self.state.exited.store(true, Ordering::SeqCst);
        closed
    }
}

/// Marks the store's actor as exited when the first writer's thread ends, however it ends.
/// Another writer's ending by a panic poisons the store (every later call is refused); its
/// callers' replies went with its mailbox, so they are answered `Closed`.
struct ExitFlag {
    /// What the store's threads share.
    state: Arc<ActorState>,
    /// Whether this is the store's first writer.
    first: bool,
}

impl Drop for ExitFlag {
    fn drop(&mut self) {
        if self.first {
            self.state.exited.store(true, Ordering::SeqCst);
        } else if std::thread::panicking() {
            self.state.poisoned.store(true, Ordering::SeqCst);
        }
    }
}

struct Actor {
    conn: Conn,
    inbox: Receiver<Msg>,
    stamp: Stamp,
    limits: Limits,
    ids: IdGen,
    batch_max: usize,
    read_only: bool,
    publisher: Publisher,
    poisoned: Option<String>,
    state: Arc<ActorState>,
    /// Recent cost of a write commit, in microseconds (moving average).
    commit_us: u64,
    /// A batch longer than this is told and counted (`Options::slow_batch`).
    slow_batch: Duration,
    /// When the alarm call is next due (set by committed calls through `Tx::set_alarm`).
    alarm_ms: Option<i64>,
    /// Builds the call that runs when the alarm is due.
    alarm: Option<AlarmOp>,
    /// Streams only their domain may write.
    owned_streams: &'static [OwnedStreams],
    /// Which tenants may write, as read in this batch (a suspended or archived one may not).
    writable: HashMap<Arc<str>, bool>,
    /// The tenants a transaction's start took whose statuses it has not answered yet (see
    /// `Conn::begin_ahead`): a call of theirs runs as if they may write, and is checked once
    /// the start has answered.
    unread_start: Vec<Arc<str>>,
    /// Calls that lost to another transaction (on PostgreSQL) and run again, each in the next
    /// transaction (their own batch has let go of its locks by then).
    retries: Vec<Call>,
    /// Why writes are refused after SQLite found the file corrupt (reads go on: what is
    /// undamaged still reads).
    corrupt: Option<String>,
}

/// How long after a failed alarm call it runs again, in milliseconds.
const ALARM_RETRY_MS: i64 = 1_000;

/// What the actor runs when an alarm set through `Tx::set_alarm` is due: the work of an op, as
/// the store's admin in `tenant`. A domain supplies it (the engine does not know what it does);
/// the actor runs it as an op of its own, whose answer nobody waits for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AlarmOp {
    /// The tenant it runs in (the sweeps reach every tenant from there).
    pub(crate) tenant: &'static str,
    /// The op's work: it sets the alarm again for its own next time.
    pub(crate) apply: fn(&mut Tx<'_>) -> Result<()>,
}

impl Sealed for AlarmOp {}
impl Op for AlarmOp {
    type Output = ();
    fn access(&self) -> Access {
        Access::Admin
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        (self.apply)(tx)
    }
}

impl AlarmOp {
    /// The call that runs it now.
    fn call(self) -> Call {
        let scope = Scope { tenant: Arc::from(self.tenant), role: Role::Admin, bound: false };
        let (reply, _) = bounded(1);
        Call::op(self, scope, reply)
    }
}

/// What the engine needs from the domains, which it does not name: built in one place
/// (`crate::domains`) and handed to `spawn`.
#[derive(Debug)]
pub(crate) struct EngineHooks {
    /// The op to run when an alarm is due (the domains' sweeps: the graphs' deadlines, the
    /// queue's schedules).
    pub(crate) alarm: Option<AlarmOp>,
    /// Streams only their domain may write (a registered process's, an execution's): the
    /// event log refuses callers' writes to them.
    pub(crate) owned_streams: &'static [OwnedStreams],
}

/// The earlier of two optional times.
fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The calls of the open transaction, waiting for its `COMMIT`.
#[derive(Default)]
struct Batch {
    open: bool,
    applied: Vec<Applied>,
    events: Vec<Published>,
    /// What the kept calls tallied for the metrics.
    tallies: Tallies,
    /// Whether a kept call asked for the waiters to be woken after commit.
    rang: bool,
    /// The earliest alarm a kept call set.
    alarm_ms: Option<i64>,
    /// The writes kept calls left for the batch's end (`Tx::write_late`), not sent yet.
    late: Vec<LateWrite>,
}

impl Actor {
    fn new(
        conn: Conn,
        inbox: Receiver<Msg>,
        location: &Location,
        options: Options,
        state: Arc<ActorState>,
        hooks: &'static EngineHooks,
    ) -> Result<Self> {
        let ids = IdGen::new(conn.seed(location, &options)?)?;
        Ok(Self {
            conn,
            inbox,
            stamp: Stamp::new(options.clock),
            limits: options.limits,
            ids,
            batch_max: options.batch_max,
            read_only: options.read_only,
            publisher: Publisher::default(),
            poisoned: None,
            state,
            commit_us: 0,
            slow_batch: options.slow_batch,
            alarm_ms: None,
            alarm: hooks.alarm,
            owned_streams: hooks.owned_streams,
            writable: HashMap::new(),
            unread_start: Vec::new(),
            retries: Vec::new(),
            corrupt: None,
        })
    }

    /// One message of an inline store: a call runs in a batch of its own (after a due alarm, which
    /// an idle store's thread would have run by now); a subscriber goes live.
    fn handle_inline(&mut self, message: Msg) {
        match message {
            Msg::Run(call) => {
                if !call.writes && self.alarm_wait().is_some_and(|w| w.is_zero()) {
                    self.run_batch(Vec::new());
                }
                self.run_batch(vec![call]);
                self.conn.schedule_checkpoint();
            }
            Msg::GoLive(request) => self.go_live(request),
            // `Inline::close` closes; a close message has nobody else to come from.
            Msg::Close(reply) => {
                let _ =
                    reply.send(Err(Error::InvalidInput("close an inline store directly".into())));
            }
        }
    }

    fn run(mut self) {
        let mut held = None;
        loop {
            let message = match held.take() {
                Some(message) => message,
                None => match self.next_message() {
                    Some(message) => message,
                    None => break,
                },
            };
            match message {
                Msg::Run(call) => {
                    let (calls, stopped_at) = self.gather(call);
                    self.run_batch(calls);
                    self.conn.schedule_checkpoint();
                    held = stopped_at;
                }
                Msg::GoLive(request) => self.go_live(request),
                Msg::Close(reply) => {
                    let result = self.shutdown();
                    let _ = reply.send(result);
                    return;
                }
            }
        }
        // Every handle is gone without a close: still finish properly.
        let _ = self.shutdown();
    }

    /// Waits for the next message: spin briefly when a core is free, checkpoint when idle.
    fn next_message(&mut self) -> Option<Msg> {
        match self.inbox.try_recv() {
            Ok(message) => return Some(message),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        if self.state.waiting.load(Ordering::Relaxed) <= 1
            && let Some(message) = spin_recv(&self.inbox, ACTOR_SPIN)
        {
            return Some(message);
        }
        loop {
            let idle = (self.conn.idle_work() || self.publisher.has_live())
                .then_some(IDLE_CHECKPOINT_AFTER);
            let Some(wait) = [idle, self.alarm_wait()].into_iter().flatten().min() else {
                return self.inbox.recv().ok();
            };
            match self.inbox.recv_timeout(wait) {
                Ok(message) => return Some(message),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => self.idle_turn(),
            }
        }
    }

    /// How long until the alarm is due by the store's clock (zero if it is), if one is set.
    fn alarm_wait(&self) -> Option<Duration> {
        let alarm_ms = self.alarm_ms.filter(|_| self.alarm.is_some())?;
        // At most a second: the clock may jump (a test's, or the system's after a suspend).
        let wait_ms = alarm_ms.saturating_sub(self.stamp.peek_ms()).clamp(0, 1_000);
        Some(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)))
    }

    /// The alarm call, if the alarm is due at `now_ms`; the alarm is then cleared (the call sets
    /// the next one).
    fn take_due_alarm(&mut self, now_ms: i64) -> Option<Call> {
        if self.alarm_ms.is_none_or(|alarm_ms| alarm_ms > now_ms) {
            return None;
        }
        self.alarm_ms = None;
        self.alarm.map(AlarmOp::call)
    }

    /// What an idle moment is used for: a checkpoint, noticing another process's writes (live
    /// subscribers cannot have seen them, so they go back to paging), and a due alarm.
    fn idle_turn(&mut self) {
        self.conn.idle();
        self.conn.notice_foreign_writes(&mut self.publisher);
        if self.alarm_wait().is_some_and(|wait| wait.is_zero()) {
            self.run_batch(Vec::new());
            self.conn.schedule_checkpoint();
        }
    }

    /// Takes up to `batch_max` calls; a message of another kind ends the batch and is returned.
    fn gather(&mut self, first: Call) -> (Vec<Call>, Option<Msg>) {
        let mut calls = vec![first];
        while calls.len() < self.batch_max {
            match self.inbox.try_recv() {
                Ok(Msg::Run(call)) => calls.push(call),
                Ok(other) => return (calls, Some(other)),
                Err(_) => break,
            }
        }
        let stopped_at = self.linger(&mut calls);
        (calls, stopped_at)
    }

    /// Waits a little for the callers that are about to send (they were answered a moment
    /// ago and are waking up), when a commit costs much more than the wait: one fsync for
    /// all of them instead of one for each half. Waits at most a quarter of a recent commit.
    fn linger(&mut self, calls: &mut Vec<Call>) -> Option<Msg> {
        // The callers waiting are spread over the store's writers.
        let writers = self.state.writers.load(Ordering::Relaxed).max(1);
        let waiting = self.state.waiting.load(Ordering::Relaxed);
        let callers = waiting.div_ceil(writers).min(self.batch_max);
        let linger = Duration::from_micros(self.commit_us / 4);
        if calls.len() >= callers || linger < LINGER_MIN {
            return None;
        }
        let deadline = Instant::now() + linger;
        while calls.len() < callers {
            match self.inbox.recv_deadline(deadline) {
                Ok(Msg::Run(call)) => calls.push(call),
                Ok(other) => return Some(other),
                Err(_) => break,
            }
        }
        None
    }

    /// Runs `calls` in one transaction, then a call of it that lost to another transaction (and
    /// may run again, at most `CONFLICT_RETRIES` more times) with the calls after it, in the
    /// next.
    fn run_batch(&mut self, calls: Vec<Call>) {
        self.run_one_batch(calls);
        while !self.retries.is_empty() {
            let again = std::mem::take(&mut self.retries);
            self.run_one_batch(again);
        }
    }

    /// Runs `calls` in one transaction (or, after one is lost midway, the rest in another) under
    /// a `tracing` span of the batch: its ops, whether its last transaction committed, and how
    /// long it took; a slow one is told and counted.
    fn run_one_batch(&mut self, calls: Vec<Call>) {
        let started = Instant::now();
        let ops = calls.len();
        let span = tracing::debug_span!(
            "spindle.batch",
            ops,
            outcome = tracing::field::Empty,
            duration_us = tracing::field::Empty
        );
        let committed = span.in_scope(|| self.run_calls(calls));
        let spent = started.elapsed();
        let outcome = if committed { "committed" } else { "not committed" };
        span.record("outcome", outcome);
        span.record("duration_us", u64::try_from(spent.as_micros()).unwrap_or(u64::MAX));
        if spent > self.slow_batch {
            Meter::count(&self.state.meter.slow_batches);
            let spent_ms = spent.as_millis();
            tracing::warn!(ops, outcome, spent_ms, "spindle: a slow batch");
        }
    }

    /// The work of `run_one_batch`; returns whether the batch committed.
    fn run_calls(&mut self, calls: Vec<Call>) -> bool {
        // Never before the newest batch of the store's other writers either.
        let now_ms = self.stamp.next_ms().max(self.state.stamp_ms.load(Ordering::SeqCst));
        self.state.stamp_ms.fetch_max(now_ms, Ordering::SeqCst);
        // A due alarm joins a batch that writes anyway (or runs by itself when idle): a batch of
        // reads stays a deferred transaction that another process's writer cannot block.
        let writing = calls.iter().any(|call| call.writes);
        let alarm = (writing || calls.is_empty()).then(|| self.take_due_alarm(now_ms)).flatten();
        let carried = alarm.is_some();
        let calls = alarm.into_iter().chain(calls);
        let mut calls: VecDeque<Call> = calls.filter_map(|call| self.admit(call)).collect();
        let writes = calls.iter().any(|call| call.writes);
        let mut batch = Batch::default();
        // Another process may have changed a tenant since the last batch.
        self.writable.clear();
        self.unread_start.clear();
        // Whether the alarm call's work is in the transaction about to commit.
        let mut alarm_kept = false;
        // Whether a transaction with the alarm call's work committed (a batch may commit
        // before its last call: see `Tx::write_late`).
        let mut alarm_committed = false;
        let mut index = 0;
        while let Some(call) = calls.pop_front() {
            if !batch.open {
                let (tenants, shared) = if self.conn.locks_tenants() {
                    writing_tenants(std::iter::once(&call).chain(&calls))
                } else {
                    (Vec::new(), Vec::new())
                };
                // A batch that starts with the crate's own op: its transaction's start goes to
                // the server with the op's first statement, in the same round trip, and is
                // checked after it (`read_start`). A caller's closure holds its tenants'
                // writers from its start, as promised (see `run_call`).
                let started = if call.internal {
                    self.conn.begin_ahead(writes, &tenants, &shared)
                } else {
                    self.conn.begin(writes, &tenants, &shared).map(Some)
                };
                match started {
                    Ok(Some(statuses)) => {
                        self.unread_start.clear();
                        self.note_statuses(&tenants, statuses);
                    }
                    Ok(None) => self.unread_start = tenants,
                    Err(error) => {
                        // Another connection holds the lock: the rest would only wait again.
                        for call in std::iter::once(call).chain(calls.drain(..)) {
                            call.refuse(error.replicate(), &self.state.meter);
                        }
                        self.retry_alarm(carried, now_ms);
                        return false;
                    }
                }
                batch.open = true;
                self.conn.notice_foreign_writes(&mut self.publisher);
            }
            if batch.open && !call.shares_turn && !batch.late.is_empty() {
                // What the calls before it left for the batch's end (`Tx::write_late`) is
                // written at a commit, and it may read or change those rows: the calls
                // before it commit first, and it starts the next transaction.
                let before = std::mem::take(&mut batch);
                alarm_committed |= self.commit(before, writes) && alarm_kept;
                alarm_kept = false;
                if !self.retries.is_empty() {
                    // Those calls lost at their commit and run again: the rest wait for them
                    // there, in their order.
                    self.retries.push(call);
                    self.retries.extend(calls.drain(..));
                    break;
                }
                calls.push_front(call);
                continue;
            }
            let is_alarm = carried && index == 0;
            index += 1;
            // The only call of its transaction needs no savepoint: rolling back the transaction
            // undoes it (what an inline store's every call, and a lone caller's, saves).
            let only_call = batch.applied.is_empty() && calls.is_empty();
            self.run_call(call, now_ms, &mut batch, only_call);
            if let Some(error) = self.conn.take_start_failure() {
                // The transaction's start, sent with the call's first statement, failed (another
                // connection holds a tenant's lock): the rest would only wait again.
                for call in calls.drain(..) {
                    call.refuse(error.replicate(), &self.state.meter);
                }
            }
            if !self.retries.is_empty() {
                // A call lost to another transaction and runs again in the next one: the calls
                // after it wait for it there, in their order (one caller's submitted ops run
                // in the order it sent them).
                self.retries.extend(calls.drain(..));
            }
            if let Some(reason) = &self.poisoned {
                // Nothing more runs on a connection the store cannot trust.
                for call in calls.drain(..) {
                    call.refuse(Error::Poisoned(reason.clone()), &self.state.meter);
                }
            }
            if is_alarm {
                alarm_kept = batch.applied.last().is_some_and(|applied| applied.keep);
            }
            // An abandoned transaction took the alarm call's work with it.
            alarm_kept &= batch.open;
        }
        let committed = batch.open && self.commit(batch, writes);
        alarm_committed |= committed && alarm_kept;
        if !alarm_committed {
            self.retry_alarm(carried, now_ms);
        }
        committed
    }

    /// Once a start sent ahead (`Conn::begin_ahead`) has answered, keeps the statuses it read,
    /// and returns why the call that just ran must be undone: its start failed, or `checked`, the
    /// tenant it ran for as if it might write, may not (suspended or archived since the last
    /// batch: the call's writes are rolled back and it is answered `TenantSuspended`, as it would
    /// have been before running). A start not sent yet (the call sent nothing) is sent now only
    /// to check.
    fn read_start(&mut self, checked: Option<&Arc<str>>) -> Option<Error> {
        if !self.unread_start.is_empty() {
            match self.conn.start_statuses(checked.is_some()) {
                Ok(Some(statuses)) => {
                    let tenants = std::mem::take(&mut self.unread_start);
                    self.note_statuses(&tenants, statuses);
                }
                Ok(None) if checked.is_none() => return None,
                // Not expected (a start sent has answered): the status is read below.
                Ok(None) => self.unread_start.clear(),
                Err(error) => return Some(error),
            }
        }
        let tenant = checked?;
        match self.tenant_writable(tenant) {
            Ok(true) => None,
            Ok(false) => Some(Error::TenantSuspended(tenant.to_string())),
            Err(error) => Some(error),
        }
    }

    /// Keeps the statuses the batch's start read of `tenants` (in their order), for
    /// `tenant_writable`.
    fn note_statuses(&mut self, tenants: &[Arc<str>], statuses: Vec<Option<String>>) {
        for (tenant, status) in tenants.iter().zip(statuses) {
            let writable = status.is_none_or(|status| status == "active");
            self.writable.insert(Arc::clone(tenant), writable);
        }
    }

    /// Whether `tenant` may write: not suspended or archived. A tenant without a row (a view
    /// made with `Store::tenant` before any administration) may. Read once per batch.
    fn tenant_writable(&mut self, tenant: &Arc<str>) -> Result<bool> {
        if let Some(writable) = self.writable.get(tenant) {
            return Ok(*writable);
        }
        let status: Option<String> = self.conn.db().query_value(
            "SELECT status FROM main.tenants WHERE tenant_id = ?1",
            args![tenant.as_ref()],
        )?;
        let writable = status.is_none_or(|status| status == "active");
        self.writable.insert(Arc::clone(tenant), writable);
        Ok(writable)
    }

    /// An alarm call whose work did not commit runs again a little later.
    fn retry_alarm(&mut self, carried: bool, now_ms: i64) {
        if carried {
            let retry_ms = now_ms.saturating_add(ALARM_RETRY_MS);
            self.alarm_ms = earliest(self.alarm_ms, Some(retry_ms));
        }
    }

    /// Refuses a call that must not run (poisoned store, role, read-only) and passes the rest.
    fn admit(&self, call: Call) -> Option<Call> {
        if let Some(reason) = &self.poisoned {
            call.refuse(Error::Poisoned(reason.clone()), &self.state.meter);
            return None;
        }
        if self.state.poisoned.load(Ordering::SeqCst) {
            let reason = "another writer of the store poisoned itself".to_owned();
            call.refuse(Error::Poisoned(reason), &self.state.meter);
            return None;
        }
        if !call.scope.role.allows(call.access) {
            let error = forbidden(call.label, call.scope.role);
            call.refuse(error, &self.state.meter);
            return None;
        }
        if self.read_only && call.writes {
            call.refuse(Error::ReadOnly, &self.state.meter);
            return None;
        }
        // A reader may have found it corrupt too.
        let corrupt = || self.corrupt.clone().or_else(|| self.state.corrupt.lock().clone());
        if call.writes
            && let Some(found) = corrupt()
        {
            let refused = format!("writes are refused since the file was found corrupt: {found}");
            call.refuse(Error::Corrupt(refused), &self.state.meter);
            return None;
        }
        Some(call)
    }

    /// Runs one call (under its own savepoint unless it needs none) and keeps or rolls back its
    /// work.
    fn run_call(&mut self, call: Call, now_ms: i64, batch: &mut Batch, only_call: bool) {
        // A caller's closure holds its tenants' writers from its start: a batch's start still
        // waiting to go ahead of a statement goes now.
        if !call.internal
            && let Some(error) = self.conn.send_ahead().err().or_else(|| self.read_start(None))
        {
            call.refuse(error.replicate(), &self.state.meter);
            return self.abandon(batch, &error);
        }
        // Every write of a suspended tenant is refused, and so is the administration of a view
        // bound to it by a token (the store owner's administration is not: it reactivates).
        let checked =
            call.access == Access::Write || (call.access == Access::Admin && call.scope.bound);
        // Its batch's start, still to be sent, reads the status: the call runs, and is
        // overruled if it may not write (see `read_start`).
        let check_after = checked && self.unread_start.contains(&call.scope.tenant);
        if checked && !check_after {
            match self.tenant_writable(&call.scope.tenant) {
                Ok(true) => {}
                Ok(false) => {
                    let tenant = call.scope.tenant.to_string();
                    return call.refuse(Error::TenantSuspended(tenant), &self.state.meter);
                }
                Err(error) => return call.refuse(error, &self.state.meter),
            }
        }
        tracing::trace!(op = call.label, writes = call.writes, "spindle: op");
        let needs_savepoint = call.savepoint || self.conn.needs_savepoints();
        let savepoint = needs_savepoint && !only_call;
        let undo_by_rollback = needs_savepoint && only_call;
        if savepoint && let Err(error) = self.conn.statement(SAVEPOINT_OP) {
            call.refuse(error.replicate(), &self.state.meter);
            return self.abandon(batch, &error);
        }
        let scope = call.scope.clone();
        // Only what SQLite reports while this call runs counts against the file.
        crate::error::take_sqlite_corruption();
        let engine = Engine {
            db: self.conn.db(),
            sqlite: self.conn.sqlite_parts(),
            limits: &self.limits,
            ids: &self.ids,
            owned_streams: self.owned_streams,
        };
        let mut tx = Tx::new(engine, now_ms, &scope);
        tx.set_publishing(self.publisher.has_live());
        if call.shares_turn && self.conn.locks_tenants() {
            tx.set_writes_late();
        }
        if !call.writes {
            // A call that only reads (a `Store::read` closure among them) stays so.
            tx.set_read_only();
        }
        self.conn.enter_call(call.internal, call.scope.bound);
        self.conn.set_only_call(undo_by_rollback);
        self.conn.take_conflict();
        let applied = call.run(&mut tx);
        let finished = tx.finish();
        self.conn.set_only_call(false);
        self.conn.leave_call();
        // Rolled back (to its savepoint, or with the transaction when it is the only call) and answered so.
        let applied = match self.read_start(check_after.then_some(&scope.tenant)) {
            Some(refused) => applied.overrule(refused),
            None => applied,
        };
        let (mut applied, problem) = self.conn.vet(applied, finished.caller_sql);
        if self.conn.take_conflict()
            && let Some(again) = applied.take_retry()
        {
            Meter::count(&self.state.meter.conflict_retries);
            tracing::debug!(
                op = again.label,
                "spindle: an op lost to another transaction; it runs again"
            );
            self.retries.push(again);
        }
        self.settle(applied, finished, (savepoint, undo_by_rollback), batch);
        if let Some(problem) = problem
            && let Err(unrepaired) = self.conn.restore_connection()
        {
            self.poison(batch, &format!("after {problem}: {unrepaired}"));
        }
    }

    /// Keeps a call's work in the batch (releasing its savepoint) or rolls it back; abandons the
    /// batch if its transaction was lost.
    /// `undo` is `(savepoint, by_rollback)`: whether the call ran under a savepoint of its own,
    /// and whether, as the only call of its transaction and without one, it is undone by rolling that back.
    fn settle(
        &mut self,
        applied: Applied,
        finished: Finished,
        undo: (bool, bool),
        batch: &mut Batch,
    ) {
        let (savepoint, by_rollback) = undo;
        self.notice_corruption(applied.failure.as_ref());
        if by_rollback && !applied.keep && self.conn.in_transaction() {
            // Answered with its own result: `abandon` delivers work it did not keep that way.
            batch.applied.push(applied);
            return self.abandon(batch, &Error::InvalidInput("the call was rolled back".into()));
        }
        if !self.conn.in_transaction() {
            let cause = applied.failure.as_ref().map_or_else(
                || Error::InvalidInput("an operation ended the batch's transaction".into()),
                Error::replicate,
            );
            batch.applied.push(applied);
            return self.abandon(batch, &cause);
        }
        let ended = match (savepoint, applied.keep) {
            // Without a savepoint there is nothing to release, and a failed call wrote nothing.
            (false, _) => Ok(()),
            (true, true) => self.conn.statement(RELEASE_OP),
            (true, false) => {
                self.conn.statement(ROLLBACK_TO_OP).and_then(|()| self.conn.statement(RELEASE_OP))
            }
        };
        let keep = applied.keep;
        batch.applied.push(applied);
        match ended {
            Ok(()) if keep => {
                batch.events.extend(finished.published);
                batch.tallies.merge(finished.tallies);
                batch.late.extend(finished.late);
                batch.rang |= finished.rang;
                batch.alarm_ms = earliest(batch.alarm_ms, finished.alarm_ms);
                if finished.tenants_changed {
                    self.writable.clear();
                }
            }
            Ok(()) => {}
            Err(error) => self.abandon(batch, &error),
        }
    }

    /// The store can no longer trust its connection: nothing of this batch commits, and every
    /// later call is refused until the store is opened again.
    fn poison(&mut self, batch: &mut Batch, reason: &str) {
        let reason = format!("the connection could not be restored {reason}");
        tracing::error!(%reason, "spindle: the store poisoned itself; every later call is refused");
        self.abandon(batch, &Error::Poisoned(reason.clone()));
        self.poisoned = Some(reason);
        self.state.poisoned.store(true, Ordering::SeqCst);
    }

    /// After SQLite itself reports the file corrupt (not an op or a closure returning
    /// `Error::Corrupt`), writes are refused: writing into damaged pages could spread the
    /// damage.
    fn notice_corruption(&mut self, error: Option<&Error>) {
        if crate::error::take_sqlite_corruption() {
            let found = match error {
                Some(Error::Corrupt(found)) => found.clone(),
                _ => "SQLite reported the file corrupt".to_owned(),
            };
            tracing::error!(%found, "spindle: SQLite found the file corrupt; writes are refused");
            self.corrupt.get_or_insert(found);
        }
    }

    /// Commits the batch (a writing one only while the store's file is still at its path);
    /// returns whether it committed.
    fn commit(&mut self, mut batch: Batch, writes: bool) -> bool {
        if let Err(gone) = self.write_late(&mut batch) {
            self.abandon(&mut batch, &gone);
            return false;
        }
        if let Err(gone) = self.conn.check_before_commit(writes) {
            self.abandon(&mut batch, &gone);
            return false;
        }
        let started = Instant::now();
        let committed = self.conn.commit(writes, batch.rang);
        if writes {
            // A moving average of what a write commit costs (an fsync, under Full).
            let spent_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.commit_us = (self.commit_us * 7 + spent_us) / 8;
        }
        match committed {
            Ok(()) => {
                self.conn.committed(writes);
                // Counted before any reply: a caller answered sees its batch counted.
                self.state.meter.transaction(batch.applied.len(), true);
                self.state.meter.tallied(batch.tallies);
                for applied in batch.applied {
                    applied.deliver(None, &self.state.meter);
                }
                self.conn.notice_foreign_writes_at_commit(&mut self.publisher);
                self.publisher.publish(&batch.events);
                if batch.rang {
                    self.state.bell.ring();
                }
                self.alarm_ms = earliest(self.alarm_ms, batch.alarm_ms);
                true
            }
            Err(error) => {
                if self.conn.take_conflict() {
                    self.rerun_kept(&mut batch);
                }
                self.abandon(&mut batch, &error);
                false
            }
        }
    }

    /// The batch's transaction lost to another at its commit (a deadlock or a serialisation
    /// failure met by a write left for the batch's end, `Tx::write_late`): its kept calls run
    /// again in the next transaction, in their order, as a call whose own statement lost
    /// does, and before the calls already waiting to run again (they came after them).
    fn rerun_kept(&mut self, batch: &mut Batch) {
        let mut again = Vec::new();
        for applied in batch.applied.iter_mut().filter(|applied| applied.keep) {
            if let Some(call) = applied.take_rerun() {
                Meter::count(&self.state.meter.conflict_retries);
                again.push(call);
            }
        }
        again.append(&mut self.retries);
        self.retries = again;
    }

    /// Sends the writes the batch's kept calls left for its end (`Tx::write_late`), sorted by
    /// the rows they lock, ahead of the commit, in its round trip: a failure among them fails
    /// the commit.
    fn write_late(&mut self, batch: &mut Batch) -> Result<()> {
        if batch.late.is_empty() {
            return Ok(());
        }
        let mut late = std::mem::take(&mut batch.late);
        late.sort_by(|a, b| a.key.cmp(&b.key));
        self.conn.write_ahead(&late)
    }

    /// The transaction is lost: roll back whatever is left of it, answer every call of the
    /// batch (kept work with `cause`, rolled-back work with its own result), publish nothing.
    fn abandon(&mut self, batch: &mut Batch, cause: &Error) {
        self.notice_corruption(Some(cause));
        if self.conn.in_transaction()
            && let Err(error) = self.conn.rollback()
        {
            let reason = format!("rollback after {cause} failed: {error}");
            tracing::error!(%reason, "spindle: the store poisoned itself; every later call is refused");
            self.poisoned = Some(reason);
            self.state.poisoned.store(true, Ordering::SeqCst);
        }
        if batch.open {
            // Once per transaction: a second call (poisoning after a lost one) has none left.
            self.state.meter.transaction(batch.applied.len(), false);
        }
        for applied in batch.applied.drain(..) {
            let commit_error = applied.keep.then(|| cause.replicate());
            applied.deliver(commit_error, &self.state.meter);
        }
        batch.events.clear();
        batch.late.clear();
        batch.tallies = Tallies::default();
        batch.rang = false;
        batch.alarm_ms = None;
        batch.open = false;
        // What this transaction read of tenants may have been rolled back with it.
        self.writable.clear();
        self.unread_start.clear();
    }

    fn go_live(&mut self, request: LiveRequest) {
        // A failed read drops the request; the subscriber goes back to paging and sees the
        // error there.
        let _ = self.conn.go_live(&mut self.publisher, request);
    }

    /// Finishes what is queued, drops the subscribers, checkpoints and closes the connection.
    fn shutdown(mut self) -> Result<()> {
        while let Ok(message) = self.inbox.try_recv() {
            match message {
                Msg::Run(call) => {
                    let (calls, stopped_at) = self.gather(call);
                    self.run_batch(calls);
                    if let Some(Msg::Close(reply)) = stopped_at {
                        let _ = reply.send(Ok(()));
                    }
                }
                Msg::GoLive(_) => {}
                Msg::Close(reply) => {
                    let _ = reply.send(Ok(()));
                }
            }
        }
        self.publisher.clear();
        self.conn.close(self.poisoned.is_some())
    }
}

/// The tenants the writing calls among `calls` run for, sorted and each once (locked in this
/// order by an engine that serialises a tenant's writers across processes), and those among
/// them all of whose writing calls share the turn (`Sealed::shares_turn`).
fn writing_tenants<'a>(calls: impl Iterator<Item = &'a Call>) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
    let writing: Vec<&Call> = calls.filter(|call| call.writes).collect();
    let mut tenants: Vec<Arc<str>> =
        writing.iter().map(|call| Arc::clone(&call.scope.tenant)).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let whole: Vec<&Arc<str>> =
        writing.iter().filter(|call| !call.shares_turn).map(|call| &call.scope.tenant).collect();
    let shared = tenants.iter().filter(|tenant| !whole.contains(tenant)).cloned().collect();
    (tenants, shared)
}

/// Tries to receive for up to `spin`, without parking.
pub(crate) fn spin_recv<T>(inbox: &Receiver<T>, spin: Duration) -> Option<T> {
    let deadline = Instant::now() + spin;
    while Instant::now() < deadline {
        match inbox.try_recv() {
            Ok(message) => return Some(message),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    //! Batches built by hand, so that "these calls share one transaction" is certain rather
    //! than likely.

    use super::*;
    use crate::core::db::args;
    use crate::core::events::{Append, Appended, Stream};
    use crate::core::op::{Op, Role, TxOutcome};
    use crate::core::tx::Scope;
    use serde_json::json;

    fn actor() -> Actor {
        let options = Options::default();
        let (_mailbox, inbox) = bounded(1);
        let state = Arc::new(ActorState::default());
        let conn = Conn::open(&Location::Memory, &options, &state).expect("open");
        static NO_HOOKS: EngineHooks = EngineHooks { alarm: None, owned_streams: &[] };
        Actor::new(conn, inbox, &Location::Memory, options, state, &NO_HOOKS).expect("actor")
    }

    /// The actor's SQLite connection.
    fn sqlite(actor: &Actor) -> &rusqlite::Connection {
        match &actor.conn {
            Conn::Sqlite(lite) => lite.connection(),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => unreachable!("the tests' actor runs on SQLite"),
        }
    }

    fn scope() -> Scope {
        Scope { tenant: Arc::from("default"), role: Role::Admin, bound: false }
    }

    fn append(i: i64) -> (Call, Receiver<Result<Appended>>) {
        let (reply, answer) = bounded(1);
        let op = Append {
            stream: Stream::custom("batch"),
            event_type: "e".into(),
            payload: json!({ "i": i, "pad": "p".repeat(10_000) }),
            idem_key: None,
        };
        (Call::op(op, scope(), reply), answer)
    }

    fn transaction<F>(f: F) -> (Call, Receiver<Result<()>>)
    where
        F: FnOnce(&mut Tx<'_>) -> Result<TxOutcome<()>> + Send + 'static,
    {
        let (reply, answer) = bounded(1);
        (Call::transaction(f, scope(), reply), answer)
    }

    fn events_in(actor: &Actor) -> i64 {
        sqlite(actor)
            .query_row("SELECT count(*) FROM main.events", [], |r| r.get(0))
            .expect("count")
    }

    /// A live subscriber to every event, and the token that keeps it alive.
    fn live_subscriber(actor: &mut Actor) -> (Receiver<crate::core::events::Event>, Arc<()>) {
        let (receiver, token) = go_live(actor, 0, 1024);
        assert!(actor.publisher.has_live());
        (receiver, token)
    }

    fn go_live(
        actor: &mut Actor,
        after: u64,
        capacity: usize,
    ) -> (Receiver<crate::core::events::Event>, Arc<()>) {
        let (sender, receiver) = bounded(capacity);
        let token = Arc::new(());
        let request = LiveRequest {
            tenant: Arc::from("default"),
            filter: crate::core::publish::Filter::All,
            after,
            sender,
            capacity,
            alive: Arc::downgrade(&token),
        };
        actor.conn.go_live(&mut actor.publisher, request).expect("go live");
        (receiver, token)
    }

    fn commit_appends(actor: &mut Actor, n: i64) {
        let (calls, answers): (Vec<_>, Vec<_>) = (0..n).map(append).unzip();
        actor.run_batch(calls);
        for answer in answers {
            answer.recv().expect("reply").expect("appended");
        }
    }

    #[test]
    fn going_live_sends_the_backlog_past_the_cursor_then_live_events() {
        let mut actor = actor();
        commit_appends(&mut actor, 5);
        let (feed, _token) = go_live(&mut actor, 2, 8);
        let backlog: Vec<u64> = feed.try_iter().map(|e| e.position).collect();
        assert_eq!(backlog, [3, 4, 5]);
        commit_appends(&mut actor, 2);
        let live: Vec<u64> = feed.try_iter().map(|e| e.position).collect();
        assert_eq!(live, [6, 7]);
    }

    #[test]
    fn a_backlog_larger_than_the_buffer_is_declined_back_to_paging() {
        let mut actor = actor();
        commit_appends(&mut actor, 5);
        let (feed, _token) = go_live(&mut actor, 0, 4);
        assert!(!actor.publisher.has_live());
        assert_eq!(feed.try_iter().count(), 0);
        assert!(feed.recv().is_err(), "the feed is closed: the subscriber pages instead");
    }

    #[test]
    fn a_full_buffer_drops_the_subscriber_after_what_it_holds() {
        let mut actor = actor();
        let (feed, _token) = go_live(&mut actor, 0, 2);
        commit_appends(&mut actor, 3);
        assert!(!actor.publisher.has_live());
        let held: Vec<u64> = feed.try_iter().map(|e| e.position).collect();
        assert_eq!(held, [1, 2]);
        assert!(feed.recv().is_err());
    }

    #[test]
    fn a_dropped_subscription_is_pruned_even_when_its_stream_is_quiet() {
        let mut actor = actor();
        let (_feed, token) = go_live(&mut actor, 0, 8);
        drop(token);
        let (reply, answer) = bounded(1);
        actor.run_batch(vec![Call::op(
            crate::core::events::Head { stream: Stream::custom("q") },
            scope(),
            reply,
        )]);
        answer.recv().expect("reply").expect("head");
        assert!(!actor.publisher.has_live());
    }

    #[test]
    fn a_commit_through_raw_sql_is_refused_and_costs_only_its_call() {
        let mut actor = actor();
        let (feed, _token) = live_subscriber(&mut actor);
        let (first, first_answer) = append(1);
        let (sneaky, sneaky_answer) = transaction(|tx| {
            tx.append_event(Stream::custom("batch"), "sneaky", json!(null))?;
            tx.db().execute("COMMIT", args![])?;
            Ok(TxOutcome::Commit(()))
        });
        let (last, last_answer) = append(2);
        actor.run_batch(vec![first, sneaky, last]);
        assert!(sneaky_answer.recv().expect("reply").is_err());
        assert_eq!(first_answer.recv().expect("reply").expect("kept").seq, 1);
        assert_eq!(last_answer.recv().expect("reply").expect("kept").seq, 2);
        assert_eq!(events_in(&actor), 2);
        let published: Vec<u64> = feed.try_iter().map(|e| e.seq).collect();
        assert_eq!(published, [1, 2]);
    }

    fn pragma(actor: &Actor, name: &str) -> i64 {
        let sql = format!("PRAGMA {name}");
        sqlite(actor).query_row(&sql, [], |r| r.get(0)).expect("pragma")
    }

    fn temp_objects(actor: &Actor) -> i64 {
        let sql = "SELECT count(*) FROM temp.sqlite_master";
        sqlite(actor).query_row(sql, [], |r| r.get(0)).expect("count")
    }

    #[test]
    fn a_closure_that_changed_the_connection_past_the_guard_is_refused_and_it_is_restored() {
        let mut actor = actor();
        let (first, first_answer) = append(1);
        let (sneaky, sneaky_answer) = transaction(|tx| {
            tx.append_event(Stream::custom("batch"), "sneaky", json!(null))?;
            tx.sql_past_the_guard(
                "CREATE TEMP TABLE events AS SELECT * FROM main.events WHERE 0;
                 PRAGMA recursive_triggers = ON; PRAGMA query_only = ON;",
            )?;
            Ok(TxOutcome::Commit(()))
        });
        let (last, last_answer) = append(2);
        actor.run_batch(vec![first, sneaky, last]);
        let refused = sneaky_answer.recv().expect("reply");
        assert!(matches!(refused, Err(Error::Forbidden(_))), "{refused:?}");
        assert_eq!(first_answer.recv().expect("reply").expect("kept").seq, 1);
        assert_eq!(last_answer.recv().expect("reply").expect("kept").seq, 2);
        assert_eq!(events_in(&actor), 2, "the later append went to the store's table");
        assert_eq!((pragma(&actor, "query_only"), pragma(&actor, "recursive_triggers")), (0, 0));
        assert_eq!(temp_objects(&actor), 0);
        assert!(actor.poisoned.is_none());
    }

    #[test]
    fn foreign_keys_turned_off_outside_the_transaction_are_turned_back_on() {
        let mut actor = actor();
        let (sneaky, sneaky_answer) = transaction(|tx| {
            // The commit is vetoed into a rollback; the pragma then runs outside any
            // transaction, where it takes.
            let _ = tx.sql_past_the_guard("COMMIT");
            tx.sql_past_the_guard("PRAGMA foreign_keys = OFF")?;
            Ok(TxOutcome::Commit(()))
        });
        actor.run_batch(vec![sneaky]);
        assert!(matches!(sneaky_answer.recv().expect("reply"), Err(Error::Forbidden(_))));
        assert_eq!(pragma(&actor, "foreign_keys"), 1);
        let (next, next_answer) = append(1);
        actor.run_batch(vec![next]);
        assert_eq!(next_answer.recv().expect("reply").expect("kept").seq, 1);
    }

    #[test]
    fn a_commit_outside_the_actor_is_vetoed_while_a_call_runs() {
        let actor = actor();
        sqlite(&actor).execute_batch("CREATE TABLE t (x INTEGER)").expect("table");
        // Simulate a call whose transaction SQLite already ended: a statement now autocommits.
        actor.conn.enter_call(true, false);
        let vetoed = sqlite(&actor).execute("INSERT INTO t VALUES (1)", []);
        actor.conn.leave_call();
        assert!(vetoed.is_err(), "the commit hook turned the autocommit into a rollback");
        let rows: i64 =
            sqlite(&actor).query_row("SELECT count(*) FROM t", [], |r| r.get(0)).expect("count");
        assert_eq!(rows, 0);
    }

    #[test]
    fn a_caller_that_dropped_its_reply_costs_nobody_else_anything() {
        let mut actor = actor();
        let (gone, dropped) = append(0);
        drop(dropped);
        let (kept, answer) = append(1);
        actor.run_batch(vec![gone, kept]);
        assert_eq!(answer.recv().expect("reply").expect("appended").seq, 2);
        assert_eq!(events_in(&actor), 2, "the abandoned call's write committed too");
        commit_appends(&mut actor, 1);
        assert_eq!(events_in(&actor), 3, "the actor goes on");
    }

    #[test]
    fn a_panicking_call_in_a_batch_of_20_leaves_the_other_19_committed() {
        let mut actor = actor();
        let (panicker, panic_answer) = transaction(|tx| {
            tx.append_event(Stream::custom("batch"), "doomed", json!(null))?;
            panic!("call 9 panics");
        });
        let (mut calls, answers): (Vec<_>, Vec<_>) = (0..19).map(append).unzip();
        calls.insert(9, panicker);
        let (feed, _token) = live_subscriber(&mut actor);
        actor.run_batch(calls);
        let seqs: Vec<u64> =
            answers.iter().map(|a| a.recv().expect("reply").expect("ok").seq).collect();
        assert_eq!(seqs, (1..=19).collect::<Vec<_>>());
        assert!(matches!(panic_answer.recv().expect("reply"), Err(Error::OpPanicked(_))));
        assert_eq!(events_in(&actor), 19);
        assert_eq!(feed.try_iter().count(), 19, "the panicked call published nothing");
    }

    #[test]
    fn a_full_disk_fails_every_call_of_the_batch_and_the_next_batch_recovers() {
        let mut actor = actor();
        let pages: i64 =
            sqlite(&actor).query_row("PRAGMA page_count", [], |r| r.get(0)).expect("pages");
        sqlite(&actor).pragma_update(None, "max_page_count", pages).expect("cap");
        let (calls, answers): (Vec<_>, Vec<_>) = (0..10).map(append).unzip();
        let (feed, _token) = live_subscriber(&mut actor);
        actor.run_batch(calls);
        for answer in answers {
            let reply = answer.recv().expect("reply");
            assert!(matches!(reply, Err(Error::DiskFull)), "got {reply:?}");
        }
        assert_eq!(events_in(&actor), 0);
        assert_eq!(feed.try_iter().count(), 0);
        assert!(actor.poisoned.is_none());

        sqlite(&actor).pragma_update(None, "max_page_count", 1_000_000).expect("uncap");
        let (call, answer) = append(99);
        actor.run_batch(vec![call]);
        assert_eq!(answer.recv().expect("reply").expect("ok").seq, 1);
        assert_eq!(feed.try_iter().count(), 1);
    }

    #[test]
    fn a_failed_commit_answers_every_call_with_the_error_and_publishes_nothing() {
        let mut actor = actor();
        sqlite(&actor)
            .execute_batch(
                "CREATE TABLE parent (id INTEGER PRIMARY KEY);
                 CREATE TABLE child (p INTEGER REFERENCES parent (id)
                                     DEFERRABLE INITIALLY DEFERRED);",
            )
            .expect("tables");
        let (feed, _token) = live_subscriber(&mut actor);
        let (first, first_answer) = append(1);
        let (orphan, orphan_answer) = transaction(|tx| {
            tx.db().execute("INSERT INTO child (p) VALUES (7)", args![])?;
            Ok(TxOutcome::Commit(()))
        });
        let (rolled_back, rolled_back_answer) = transaction(|_| Ok(TxOutcome::Rollback(())));
        let (last, last_answer) = append(2);
        actor.run_batch(vec![first, orphan, rolled_back, last]);
        assert!(matches!(first_answer.recv().expect("reply"), Err(Error::Sqlite(_))));
        assert!(matches!(orphan_answer.recv().expect("reply"), Err(Error::Sqlite(_))));
        assert!(matches!(last_answer.recv().expect("reply"), Err(Error::Sqlite(_))));
        // It kept nothing, so the batch's failure takes nothing from it.
        assert!(rolled_back_answer.recv().expect("reply").is_ok());
        assert_eq!(events_in(&actor), 0);
        assert_eq!(feed.try_iter().count(), 0);
        assert!(sqlite(&actor).is_autocommit(), "no transaction left open");

        let (call, answer) = append(3);
        actor.run_batch(vec![call]);
        assert_eq!(answer.recv().expect("reply").expect("ok").seq, 1);
    }

    #[test]
    fn a_single_write_op_without_savepoint_that_fails_leaves_nothing_and_costs_only_itself() {
        let mut actor = actor();
        sqlite(&actor)
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.event_type = 'refused'
                 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
            )
            .expect("trigger");
        let (feed, _token) = live_subscriber(&mut actor);
        let refused_op = Append {
            stream: Stream::custom("batch"),
            event_type: "refused".into(),
            payload: json!(null),
            idem_key: None,
        };
        assert!(refused_op.single_write(), "a plain append runs without a savepoint");
        let (reply, refused_answer) = bounded(1);
        let refused = Call::op(refused_op, scope(), reply);
        let (first, first_answer) = append(1);
        let (last, last_answer) = append(2);
        actor.run_batch(vec![first, refused, last]);
        assert!(matches!(refused_answer.recv().expect("reply"), Err(Error::Sqlite(_))));
        assert_eq!(first_answer.recv().expect("reply").expect("kept").seq, 1);
        assert_eq!(last_answer.recv().expect("reply").expect("kept").seq, 2);
        assert_eq!(events_in(&actor), 2);
        assert_eq!(feed.try_iter().count(), 2);
    }

    #[test]
    fn a_read_only_batch_runs_deferred_and_a_poisoned_actor_refuses_work() {
        let mut actor = actor();
        let (reply, answer) = bounded(1);
        let read = crate::core::events::Head { stream: Stream::custom("x") };
        actor.run_batch(vec![Call::op(read, scope(), reply)]);
        assert_eq!(answer.recv().expect("reply").expect("ok"), 0);

        actor.poisoned = Some("simulated".into());
        let (call, answer) = append(1);
        actor.run_batch(vec![call]);
        assert!(matches!(answer.recv().expect("reply"), Err(Error::Poisoned(_))));
        assert_eq!(events_in(&actor), 0);
    }
}
