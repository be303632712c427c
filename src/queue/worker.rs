//! The worker pool: handler threads fed by one coordinator thread that talks to the store in
//! rounds.
//!
//! Each round is one [`Cycle`] op: it settles every item the handlers finished since the last
//! round (completions, failures and releases together, as River's batched completer does),
//! renews the leases of the items still held once half their lease has passed (or sooner, see
//! [`Worker::renew_after_ms`]), and claims items for the free handlers plus a prefetch buffer.
//! While a round commits, handlers go on working, so the next round carries everything that
//! finished in the meantime: the busier the pool, the more items share one commit. On a
//! store with several writer sessions (PostgreSQL, `Options::writers`) the coordinator keeps
//! up to one round in flight on each writer, each claiming at most its share of the pool's
//! capacity: one round runs on the server while another commits or comes back.
//!
//! A handler's panic is a failed attempt (retryable); a result the store cannot keep (too
//! large, nested too deep) dead-letters its item with the reason. A lease the pool could not
//! renew is reported to the handler ([`Job::lease_lost`]); its outcome is then refused by the
//! store and counted as lost. An item cancelled while its handler runs ([`Queue::cancel`]) is
//! reported the same way, and more precisely ([`Job::cancelled`]: at the handler's next check,
//! and at the next renewal); its outcome is refused and counted as cancelled, never retried.
//!
//! An item with a run timeout ([`NewItem::run_timeout_ms`]) whose handler runs past it is
//! failed by the pool as retryable ("timed out after N ms"); the handler is told
//! ([`Job::timed_out`], and [`Job::lease_lost`]) and its own outcome is dropped when it comes.
//!
//! Stopping is graceful: claimed items no handler has started are released (their attempt
//! refunded), running handlers finish, and their outcomes are settled before `join` returns.
//! No claimed item is ever left without a lease renewal or a settlement while the pool runs.
//!
//! [`Queue::cancel`]: super::Queue::cancel
//! [`NewItem::run_timeout_ms`]: super::NewItem::run_timeout_ms

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, unbounded};
use serde_json::Value;

use super::ops::{Cycle, Cycled, Fail, Lease, NextDue, Release, Settled, Settlement, Snooze};
use super::{Claimed, Completion, FailOutcome, ItemStatus, QueueItem};
use crate::error::{Error, Result};
use crate::store::{Pending, Store};

/// Most handler threads a pool may have.
pub const WORKER_THREADS_MAX: usize = 1024;

/// The longest a pool's coordinator waits before it looks at the queue again on its own
/// (items enqueued by another process ring no bell here); see [`Worker::poll_interval`].
const POLL_INTERVAL_DEFAULT: Duration = Duration::from_millis(500);

/// The longest the coordinator waits for a round's reply before it looks again whether the
/// store is still there (a reply can be lost only with the store's writer).
const REPLY_CHECK: Duration = Duration::from_millis(100);

/// How long a pool that gives up waits for each round still in flight.
const LAND_PATIENCE: Duration = Duration::from_secs(5);

/// The default bound of a pool's prefetch buffer; see [`Worker::prefetch`].
const PREFETCH_DEFAULT_MAX: usize = 512;

/// The longest the error text of a refused completion (kept on the item) may be, in bytes.
const REFUSED_ERROR_BYTES_MAX: usize = 1024;

/// A worker pool being set up: `store.queue().worker(&["emails"])`, then the setters, then
/// [`Worker::run`].
///
/// ```
/// # fn main() -> spindle::Result<()> {
/// use serde_json::json;
/// use spindle::queue::Outcome;
/// use spindle::{NewItem, Store};
/// let store = Store::open_in_memory()?;
/// store.queue().enqueue(NewItem::new("emails", json!({"to": "ada@example.com"})))?;
/// let pool = store.queue().worker(&["emails"]).threads(4).lease_ms(30_000).run(|job| {
///     let to = job.payload()["to"].as_str().unwrap_or_default().to_owned();
///     // ... send it ...
///     Outcome::Complete(json!({ "sent_to": to }))
/// })?;
/// # while store.queue().stats()?.iter().any(|q| q.completed == 0) {
/// #     std::thread::sleep(std::time::Duration::from_millis(1));
/// # }
/// pool.stop();
/// let report = pool.join()?;
/// assert_eq!(report.completed, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Worker {
    store: Store,
    queues: Vec<String>,
    threads: usize,
    lease_ms: i64,
    renew_after_ms: Option<i64>,
    prefetch: Option<usize>,
    worker_id: Option<String>,
    poll_interval: Duration,
}

/// What a handler made of its item.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// The work is done: complete the item with this result.
    Complete(Value),
    /// The attempt failed and may be tried again: a retry after the item's backoff, or a dead
    /// letter once its attempts are spent.
    Retry(String),
    /// The work can never succeed: dead-letter the item now.
    Fail(String),
    /// Give the item back untouched, its attempt refunded.
    Release,
    /// Run the item again this many milliseconds from now, its attempt refunded (it does not
    /// count against `max_attempts`); see [`Queue::snooze`](super::Queue::snooze). A delay
    /// outside `0..=SNOOZE_MS_MAX` is refused by the store, and the item dead-lettered with
    /// the reason, as any outcome the store refuses for its content.
    Snooze(i64),
    /// The handler settled the item itself, with its fence (completed it in a transaction of
    /// its own with other writes, say): the pool has nothing left to do for it.
    Settled,
}

impl<E: Display> From<std::result::Result<Value, E>> for Outcome {
    /// `Ok` completes the item with its value; `Err` is a retryable failure with its message.
    fn from(result: std::result::Result<Value, E>) -> Self {
        match result {
            Ok(value) => Outcome::Complete(value),
            Err(error) => Outcome::Retry(error.to_string()),
        }
    }
}

/// A claimed item as its handler sees it.
#[derive(Debug)]
pub struct Job {
    claimed: Claimed,
    lost: Arc<AtomicBool>,
    cancelled: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
    /// When its handler started, in the store's ms (`NOT_STARTED` before).
    started_at_ms: Arc<AtomicI64>,
    stopping: Arc<AtomicBool>,
    store: Store,
}

/// `started_at_ms` of a job no handler has started.
const NOT_STARTED: i64 = i64::MIN;

impl Job {
    /// The item, as it stood when it was claimed.
    pub fn item(&self) -> &QueueItem {
        &self.claimed.item
    }

    /// The item's payload.
    pub fn payload(&self) -> &Value {
        &self.claimed.item.payload
    }

    /// The fence of this claim: what a write of the item's holder names (to settle it in a
    /// transaction of the handler's own, then returning [`Outcome::Settled`]).
    pub fn fence(&self) -> u64 {
        self.claimed.fence
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.claimed.item.attempt
    }

    /// The claim as the store returned it.
    pub fn claimed(&self) -> &Claimed {
        &self.claimed
    }

    /// True once the pool failed to renew this item's lease: another worker may hold it now,
    /// and whatever this handler returns will be refused. A long handler should check it and
    /// give up early.
    pub fn lease_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// True once the item has been cancelled ([`Queue::cancel`](super::Queue::cancel)) while
    /// this handler held it: whatever it returns will be refused, and the item is never
    /// retried, so it should stop what it does. Until the pool has seen the cancel (at a lease
    /// renewal), each call reads the item's status from the store (a read on a reader thread,
    /// which also sees a cancel by another process): check between steps of the work, not in
    /// a tight loop. Once true, it stays true without reading. A store error reads as false.
    pub fn cancelled(&self) -> bool {
        if self.cancelled.load(Ordering::Acquire) {
            return true;
        }
        let item = &self.claimed.item;
        let now = self
            .store
            .queue()
            .get(&item.id)
            .is_ok_and(|now| cancelled_under(&now, self.claimed.fence));
        if now {
            self.cancelled.store(true, Ordering::Release);
            self.lost.store(true, Ordering::Release);
        }
        now
    }

    /// True once the pool has failed this attempt for running past the item's run timeout
    /// ([`NewItem::run_timeout_ms`](super::NewItem::run_timeout_ms)): the failure (retryable)
    /// is recorded, whatever this handler returns is dropped, and it should stop.
    pub fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Acquire)
    }

    /// True once the pool is stopping: a long handler may finish early (returning
    /// [`Outcome::Release`] gives the item back with its attempt refunded).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// What a pool did, counted per item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Items claimed.
    pub claimed: u64,
    /// Items completed.
    pub completed: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// Items dead-lettered.
    pub dead_lettered: u64,
    /// Items given back (by their handler, or unstarted when the pool stopped).
    pub released: u64,
    /// Items put back to run later ([`Outcome::Snooze`]), their attempt refunded.
    pub snoozed: u64,
    /// Items their handler settled itself ([`Outcome::Settled`]).
    pub settled_by_handler: u64,
    /// Items whose lease was lost before their outcome could be recorded.
    pub lease_lost: u64,
    /// Items cancelled while their handler ran: their outcome was refused (and not retried).
    pub cancelled: u64,
    /// Attempts the pool failed for running past their item's run timeout (each also counted
    /// as retried or dead-lettered).
    pub timed_out: u64,
    /// Handlers that panicked (each counted as a retryable failure).
    pub panicked: u64,
}

/// A running worker pool; stop it with [`WorkerPool::stop`] and wait for it with
/// [`WorkerPool::join`]. Dropping it stops it and waits.
#[derive(Debug)]
pub struct WorkerPool {
    store: Store,
    stopping: Arc<AtomicBool>,
    events: Sender<Event>,
    counts: Arc<Counts>,
    coordinator: Option<JoinHandle<Result<()>>>,
    handlers: Vec<JoinHandle<()>>,
    bell_watch: Option<JoinHandle<()>>,
}

impl Worker {
    pub(crate) fn new(store: &Store, queues: &[&str]) -> Self {
        Self {
            store: store.clone(),
            queues: queues.iter().map(|queue| (*queue).to_owned()).collect(),
            threads: 1,
            lease_ms: 30_000,
            renew_after_ms: None,
            prefetch: None,
            worker_id: None,
            poll_interval: POLL_INTERVAL_DEFAULT,
        }
    }

    /// How many handlers run at once, each on a thread of its own (1..=1024). Default 1.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// The lease of every claim, renewed while its handler runs. Default 30 s.
    pub fn lease_ms(mut self, lease_ms: i64) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// How much of a held item's lease passes before the pool renews it (counted from the
    /// claim or the last renewal): what is left of the lease then is the margin a renewal has
    /// against a slow round. Default half the lease; a short lease that must survive stalls of
    /// the store (a loaded machine) renews sooner. 1 up to the lease, exclusive.
    pub fn renew_after_ms(mut self, renew_after_ms: i64) -> Self {
        self.renew_after_ms = Some(renew_after_ms);
        self
    }

    /// The most claimed items that may wait for a free handler, beyond one per handler:
    /// claimed early, so that a handler that finishes starts its next item without waiting
    /// for a round, and so that one round settles and claims many items at once. The pool
    /// adapts the buffer within this bound: it doubles while handlers empty it before a round
    /// is back, and halves while items wait in it (so a pool of slow handlers holds about one
    /// spare item, not the whole bound). Default 512 (less if `threads` plus it would pass
    /// `Limits::page_size_max`). 0 claims only for free handlers.
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// The worker id recorded on every item claimed. Default `pool-PID-N`.
    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.worker_id = Some(worker_id.into());
        self
    }

    /// How often an idle pool looks at the queue on its own. Items enqueued in this process
    /// wake it at once; items enqueued by another process, or due later, are seen within this
    /// interval. Default 500 ms.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Starts the pool: `threads` handler threads and one coordinator thread. `handler` runs
    /// once per claimed item and returns what became of it (an [`Outcome`], or a
    /// `Result<Value, E>`: `Ok` completes, `Err` is a retryable failure).
    ///
    /// # Errors
    /// `InvalidInput`/`TooLarge` for a bad setting (no thread is started and nothing is
    /// written); `Closed` for a closed store.
    pub fn run<H, R>(self, handler: H) -> Result<WorkerPool>
    where
        H: Fn(&Job) -> R + Send + Sync + 'static,
        R: Into<Outcome>,
    {
        self.check()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let started = self.start(Arc::new(handler), &stopping);
        if started.is_err() {
            // Threads already started leave: the job channel is gone, the bell watch stops.
            stopping.store(true, Ordering::Release);
        }
        started
    }

    fn start<H, R>(self, handler: Arc<H>, stopping: &Arc<AtomicBool>) -> Result<WorkerPool>
    where
        H: Fn(&Job) -> R + Send + Sync + 'static,
        R: Into<Outcome>,
    {
        let counts = Arc::new(Counts::default());
        let (jobs_tx, jobs_rx) = unbounded::<Job>();
        let (events_tx, events_rx) = unbounded::<Event>();
        let mut handlers = Vec::with_capacity(self.threads);
        for index in 0..self.threads {
            let run = HandlerThread {
                jobs: jobs_rx.clone(),
                events: events_tx.clone(),
                counts: Arc::clone(&counts),
            };
            let handler = Arc::clone(&handler);
            handlers.push(spawn(format!("spindle-handler-{index}"), move || run.serve(&*handler))?);
        }
        let bell_watch = BellWatch { store: self.store.clone(), events: events_tx.clone() };
        let stop_flag = Arc::clone(stopping);
        let bell_watch = spawn("spindle-bell".into(), move || bell_watch.run(&stop_flag))?;
        let coordinator = Coordinator {
            cycle: Cycle {
                worker_id: self.worker_id.clone().unwrap_or_else(default_worker_id),
                queues: self.queues.clone(),
                lease_ms: self.lease_ms,
                settle: Vec::new(),
                renew: Vec::new(),
                claim_max: 0,
            },
            store: self.store.clone(),
            threads: self.threads,
            prefetch_max: self.prefetch_max(),
            prefetch: self.threads.min(self.prefetch_max()),
            poll_interval: self.poll_interval,
            renew_left_ms: self.renew_left_ms(),
            jobs: Some(jobs_tx),
            unstarted: jobs_rx,
            events: events_rx,
            held: HashMap::new(),
            abandoned: HashSet::new(),
            stopping: Arc::clone(stopping),
            counts: Arc::clone(&counts),
            dry: false,
            woken: true,
            in_flight: VecDeque::new(),
            depth: self.store.writer_count(),
            sent: 0,
            dry_from: 0,
        };
        let coordinator = spawn("spindle-pool".into(), move || coordinator.run())?;
        Ok(WorkerPool {
            store: self.store,
            stopping: Arc::clone(stopping),
            events: events_tx,
            counts,
            coordinator: Some(coordinator),
            handlers,
            bell_watch: Some(bell_watch),
        })
    }

    /// What is left of a lease when the pool renews it.
    fn renew_left_ms(&self) -> i64 {
        self.renew_after_ms.map_or(self.lease_ms / 2, |after_ms| self.lease_ms - after_ms)
    }

    /// The bound of the prefetch buffer.
    fn prefetch_max(&self) -> usize {
        let room = self.store.limits().page_size_max.saturating_sub(self.threads);
        self.prefetch.unwrap_or(PREFETCH_DEFAULT_MAX.min(room))
    }

    fn check(&self) -> Result<()> {
        let limits = self.store.limits();
        if self.threads == 0 || self.threads > WORKER_THREADS_MAX {
            return Err(Error::InvalidInput(format!(
                "a pool needs 1..={WORKER_THREADS_MAX} threads, not {}",
                self.threads
            )));
        }
        let capacity = self.threads + self.prefetch_max();
        if capacity > limits.page_size_max {
            return Err(Error::too_large("threads + prefetch", limits.page_size_max, capacity));
        }
        if self.queues.is_empty() {
            return Err(Error::InvalidInput("name at least one queue".into()));
        }
        for queue in &self.queues {
            limits.check_id("queue", queue)?;
        }
        if let Some(worker_id) = &self.worker_id {
            limits.check_id("worker id", worker_id)?;
        }
        if self.poll_interval.is_zero() {
            return Err(Error::InvalidInput("the poll interval must be above zero".into()));
        }
        limits.check_lease(self.lease_ms)?;
        match self.renew_after_ms {
            Some(after_ms) if !(1..self.lease_ms).contains(&after_ms) => Err(Error::InvalidInput(
                format!("renew after 1 to {} ms of the lease, not {after_ms}", self.lease_ms - 1),
            )),
            _ => Ok(()),
        }
    }
}

impl WorkerPool {
    /// Asks the pool to stop: nothing more is claimed, claimed items no handler has started
    /// are released, running handlers finish. Returns at once; [`WorkerPool::join`] waits.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.events.send(Event::Stop);
    }

    /// True once the pool's coordinator has stopped: after [`WorkerPool::stop`], once every
    /// outcome is committed, or on its own, after a store error that [`WorkerPool::join`]
    /// returns. Nothing is claimed or renewed after that.
    pub fn is_finished(&self) -> bool {
        self.coordinator.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// What the pool has done so far.
    pub fn report(&self) -> WorkerReport {
        self.counts.report()
    }

    /// Waits until the pool has stopped (call [`WorkerPool::stop`] first, or it waits for a
    /// stop from another thread) and every outcome is committed; returns what it did.
    ///
    /// # Errors
    /// The store error that stopped the pool (`Closed`, say): the items it held then are
    /// left to their leases. `Poisoned` if a pool thread panicked.
    pub fn join(mut self) -> Result<WorkerReport> {
        self.wait()?;
        Ok(self.counts.report())
    }

    fn wait(&mut self) -> Result<()> {
        let mut outcome = match self.coordinator.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(Error::Poisoned("the pool's coordinator panicked".into())),
            None => Ok(()),
        };
        // The coordinator has dropped the job channel's sender: handlers leave once idle.
        for handle in self.handlers.drain(..) {
            if handle.join().is_err() && outcome.is_ok() {
                outcome = Err(Error::Poisoned("a pool handler thread panicked".into()));
            }
        }
        self.stopping.store(true, Ordering::Release);
        // Wakes the bell watch (and, harmlessly, anyone in `claim_wait`, who looks again).
        self.store.bell().ring();
        if let Some(handle) = self.bell_watch.take() {
            let _ = handle.join();
        }
        outcome
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        if self.coordinator.is_some() {
            self.stop();
            let _ = self.wait();
        }
    }
}

/// What the coordinator hears about.
#[derive(Debug)]
enum Event {
    /// A handler finished an item.
    Done { id: String, fence: u64, outcome: Outcome },
    /// A commit in this process made work available.
    Wake,
    /// `WorkerPool::stop` was called.
    Stop,
}

/// The pool's counts, shared with the handle.
#[derive(Debug, Default)]
struct Counts {
    claimed: AtomicU64,
    completed: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    released: AtomicU64,
    snoozed: AtomicU64,
    settled_by_handler: AtomicU64,
    lease_lost: AtomicU64,
    cancelled: AtomicU64,
    timed_out: AtomicU64,
    panicked: AtomicU64,
}

impl Counts {
    fn report(&self) -> WorkerReport {
        let read = |count: &AtomicU64| count.load(Ordering::Acquire);
        WorkerReport {
            claimed: read(&self.claimed),
            completed: read(&self.completed),
            retried: read(&self.retried),
            dead_lettered: read(&self.dead_lettered),
            released: read(&self.released),
            snoozed: read(&self.snoozed),
            settled_by_handler: read(&self.settled_by_handler),
            lease_lost: read(&self.lease_lost),
            cancelled: read(&self.cancelled),
            timed_out: read(&self.timed_out),
            panicked: read(&self.panicked),
        }
    }

    fn add(count: &AtomicU64, n: u64) {
        count.fetch_add(n, Ordering::AcqRel);
    }
}

/// One handler thread: runs the handler on each job it takes and reports the outcome.
struct HandlerThread {
    jobs: Receiver<Job>,
    events: Sender<Event>,
    counts: Arc<Counts>,
}

impl HandlerThread {
    fn serve<H, R>(&self, handler: &H)
    where
        H: Fn(&Job) -> R,
        R: Into<Outcome>,
    {
        for job in &self.jobs {
            job.started_at_ms.store(job.store.now_ms(), Ordering::Release);
            let outcome = match catch_unwind(AssertUnwindSafe(|| handler(&job).into())) {
                Ok(outcome) => outcome,
                Err(payload) => {
                    Counts::add(&self.counts.panicked, 1);
                    Outcome::Retry(format!("the handler panicked: {}", panic_message(&*payload)))
                }
            };
            let (id, fence) = (job.claimed.item.id, job.claimed.fence);
            if self.events.send(Event::Done { id, fence, outcome }).is_err() {
                return;
            }
        }
    }
}

/// Forwards the store's bell (rung after a commit that made work available) to the
/// coordinator, which also waits for handlers and cannot wait on both.
struct BellWatch {
    store: Store,
    events: Sender<Event>,
}

impl BellWatch {
    fn run(&self, stopping: &AtomicBool) {
        let bell = self.store.bell();
        let mut seen = bell.generation();
        while !stopping.load(Ordering::Acquire) {
            let deadline = Instant::now() + Duration::from_millis(100);
            if bell.wait(seen, Some(deadline)) {
                seen = bell.generation();
                if self.events.send(Event::Wake).is_err() {
                    return;
                }
            }
        }
    }
}

/// An item the pool holds: claimed, and not yet settled.
struct Held {
    fence: u64,
    expires_at_ms: i64,
    lost: Arc<AtomicBool>,
    cancelled: Arc<AtomicBool>,
    /// The item's run timeout, if it has one.
    run_timeout_ms: Option<i64>,
    started_at_ms: Arc<AtomicI64>,
    timed_out: Arc<AtomicBool>,
    /// Its handler has returned (its outcome waits for the next round).
    handler_done: bool,
}

impl Held {
    /// When the attempt times out: its handler started, is still running, and the item has a
    /// run timeout.
    fn times_out_at_ms(&self) -> Option<i64> {
        let started_at_ms = self.started_at_ms.load(Ordering::Acquire);
        let running = started_at_ms != NOT_STARTED && !self.handler_done;
        let live = !self.lost.load(Ordering::Acquire) && !self.timed_out.load(Ordering::Acquire);
        let timeout_ms = self.run_timeout_ms.filter(|_| running && live)?;
        Some(started_at_ms.saturating_add(timeout_ms))
    }
}

/// The coordinator: runs the rounds, hands out jobs, keeps the leases.
struct Coordinator {
    /// The round's settings; its lists are filled for each round.
    cycle: Cycle,
    store: Store,
    /// Handler threads.
    threads: usize,
    /// The bound of the prefetch buffer.
    prefetch_max: usize,
    /// How many claimed items may wait for a handler now (adapted after each round).
    prefetch: usize,
    poll_interval: Duration,
    /// What is left of a lease when it is renewed (half of it by default).
    renew_left_ms: i64,
    /// Where claimed items go to the handlers; dropped when the pool has stopped.
    jobs: Option<Sender<Job>>,
    /// The same channel's receiving end, to take back items no handler started.
    unstarted: Receiver<Job>,
    events: Receiver<Event>,
    held: HashMap<String, Held>,
    /// Claims the pool failed for their run timeout whose handler has not returned yet: their
    /// outcome is dropped, and each keeps a handler busy.
    abandoned: HashSet<(String, u64)>,
    stopping: Arc<AtomicBool>,
    counts: Arc<Counts>,
    /// The last claim found fewer items than it asked for.
    dry: bool,
    /// Something may have become due since the last claim.
    woken: bool,
    /// The rounds sent and not yet answered, oldest first. No two touch the same item: a
    /// settlement waits while its item's renewal is in flight, and an item whose renewal or
    /// settlement is in flight is not renewed again.
    in_flight: VecDeque<Round>,
    /// Most rounds in flight at once: one per writer session of the store, each round sent to
    /// a writer without one, so that one round runs while another commits.
    depth: usize,
    /// Rounds sent so far: the next round's number.
    sent: u64,
    /// The number of the round whose reply last said whether the queue is dry: a reply of an
    /// older round does not say it again.
    dry_from: u64,
}

/// A round sent and not yet answered.
struct Round {
    /// Its number, in sending order.
    number: u64,
    /// Its writer (`Shared::submit_on`'s lane).
    lane: usize,
    /// What it settles, in order.
    settle: Vec<Settlement>,
    /// The leases it renews, in order.
    renew: Vec<Lease>,
    /// The most items it claims.
    claim_max: usize,
    reply: Pending<Cycled>,
}

impl Coordinator {
    fn run(mut self) -> Result<()> {
        let result = self.rounds();
        // Handlers leave once the channel is empty and its sender gone.
        self.jobs = None;
        result
    }

    fn rounds(&mut self) -> Result<()> {
        let mut failures = 0_u32;
        loop {
            self.take_events();
            if self.stopping.load(Ordering::Acquire) {
                self.release_unstarted();
            }
            let sent = if self.in_flight.len() < self.depth { self.send_round() } else { Ok(()) };
            // Replies that came are taken in even when this round could not be sent.
            let landed = self.land_ready();
            match worse(sent.map(|()| false), landed) {
                Ok(true) => failures = 0,
                Ok(false) => {}
                Err(error) if gone(&error) => {
                    self.land_all();
                    return Err(error);
                }
                Err(error) => {
                    failures += 1;
                    if failures > 50 {
                        self.land_all();
                        return Err(error);
                    }
                    std::thread::sleep(Duration::from_millis(u64::from(failures.min(10)) * 10));
                    continue;
                }
            }
            let idle = self.in_flight.is_empty();
            if self.stopping.load(Ordering::Acquire) && self.held.is_empty() && idle {
                return Ok(());
            }
            let wait = if self.in_flight.len() < self.depth { self.idle_wait()? } else { None };
            self.wait(wait);
        }
    }

    /// Waits for what comes first: a round's reply, a handler's event (unless every round
    /// that may be in flight is: then only a reply helps), or the end of `wait` (none: no
    /// wait, unless rounds fill every place, then up to `REPLY_CHECK`); the end of `wait`
    /// wakes the pool (something may have fallen due). Takes every event waiting.
    fn wait(&mut self, wait: Option<Duration>) {
        let full = self.in_flight.len() >= self.depth;
        if let Some(timeout) = if full { Some(REPLY_CHECK) } else { wait } {
            let mut select = Select::new();
            if !full {
                select.recv(&self.events);
            }
            for round in &self.in_flight {
                select.recv(round.reply.receiver());
            }
            if select.ready_timeout(timeout).is_err() && !full {
                self.woken = true;
            }
        }
        self.take_events();
    }

    /// Takes in the replies of the rounds in flight that have come, in any order; returns
    /// whether one of them was done.
    ///
    /// # Errors
    /// The first round's error; its settlements wait for the next round.
    fn land_ready(&mut self) -> Result<bool> {
        let mut result = Ok(false);
        let mut index = 0;
        while index < self.in_flight.len() {
            let Some(reply) = self.in_flight[index].reply.try_wait() else {
                index += 1;
                continue;
            };
            let Some(round) = self.in_flight.remove(index) else { break };
            let landed = self.land(round, reply).map(|()| true);
            result = worse(result, landed);
        }
        result
    }

    /// Takes in one round's reply: what it did, or (on an error) its settlements back for the
    /// next round.
    fn land(&mut self, round: Round, reply: Result<Cycled>) -> Result<()> {
        let Round { number, settle, renew, claim_max, reply: pending, .. } = round;
        // No longer a caller waiting (`record` may read from the store).
        drop(pending);
        match reply {
            Ok(cycled) => {
                self.record(settle, &renew, cycled, claim_max, number);
                Ok(())
            }
            Err(error) => {
                self.put_back(settle, claim_max);
                Err(error)
            }
        }
    }

    /// Gives a round that failed back to the next: its settlements go first, and its claim
    /// (of up to `claim_max` items) is tried again, dry or not.
    fn put_back(&mut self, settle: Vec<Settlement>, claim_max: usize) {
        self.cycle.settle.splice(0..0, settle);
        self.woken |= claim_max > 0;
    }

    /// Waits for every round in flight (a while each) and takes it in, before the pool gives
    /// up: what its rounds settled is counted. No job goes to a handler any more (the pool is
    /// ending): what they claimed is left to its lease.
    fn land_all(&mut self) {
        self.jobs = None;
        while let Some(mut round) = self.in_flight.pop_front() {
            let reply = round.reply.wait_timeout(LAND_PATIENCE).unwrap_or(Err(Error::Closed));
            let _ = self.land(round, reply);
        }
    }

    /// Takes every event waiting.
    fn take_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.take(event);
        }
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::Done { id, fence, outcome } => self.finished(id, fence, outcome),
            Event::Wake => self.woken = true,
            Event::Stop => {}
        }
    }

    /// Turns a handler's outcome into the settlement for the next round.
    fn finished(&mut self, id: String, fence: u64, outcome: Outcome) {
        if self.abandoned.remove(&(id.clone(), fence)) {
            return;
        }
        if let Some(held) = self.held.get_mut(&id).filter(|held| held.fence == fence) {
            held.handler_done = true;
        }
        let settlement = match outcome {
            Outcome::Complete(result) => Settlement::Complete(Completion { id, fence, result }),
            Outcome::Retry(error) => Settlement::Fail(Fail { id, fence, error, retryable: true }),
            Outcome::Fail(error) => Settlement::Fail(Fail { id, fence, error, retryable: false }),
            Outcome::Release => Settlement::Release(Release { id, fence }),
            Outcome::Snooze(delay_ms) => Settlement::Snooze(Snooze { id, fence, delay_ms }),
            Outcome::Settled => {
                if self.held_under(&id, fence).is_some() {
                    self.held.remove(&id);
                }
                Counts::add(&self.counts.settled_by_handler, 1);
                return;
            }
        };
        // A result nested past the limit would fail the whole round's shape check (and every
        // round after it): it is refused here, alone.
        if let Settlement::Complete(done) = &settlement
            && let Err(error) = self.store.limits().check_depths([&done.result])
        {
            return self.refused(&settlement, &error);
        }
        self.cycle.settle.push(settlement);
    }

    /// Takes back the claimed items no handler has started, to release them.
    fn release_unstarted(&mut self) {
        while let Ok(job) = self.unstarted.try_recv() {
            let (id, fence) = (job.claimed.item.id, job.claimed.fence);
            self.cycle.settle.push(Settlement::Release(Release { id, fence }));
        }
    }

    /// Sends one round, if there is anything to do: settle, renew, claim. It goes to a writer
    /// without a round, and is taken in by `land_ready` once answered.
    fn send_round(&mut self) -> Result<()> {
        let now_ms = self.store.now_ms();
        self.time_out(now_ms);
        let renew = self.due_renewals(now_ms);
        let claim_max = if self.stopping.load(Ordering::Acquire) || (self.dry && !self.woken) {
            0
        } else {
            self.free()
        };
        let settle = self.take_settlements();
        if settle.is_empty() && renew.is_empty() && claim_max == 0 {
            return Ok(());
        }
        let cycle = Cycle {
            worker_id: self.cycle.worker_id.clone(),
            queues: self.cycle.queues.clone(),
            lease_ms: self.cycle.lease_ms,
            settle: settle.clone(),
            renew: renew.clone(),
            claim_max,
        };
        if claim_max > 0 {
            self.woken = false;
        }
        // The first writer without a round: a writer held up (by a long transaction of the
        // store's, say) holds up one round, not every other.
        let lane = (0..self.depth)
            .find(|lane| self.in_flight.iter().all(|round| round.lane != *lane))
            .unwrap_or_default();
        match self.store.submit_on(lane, cycle) {
            Ok(reply) => {
                self.sent += 1;
                let number = self.sent;
                self.in_flight.push_back(Round { number, lane, settle, renew, claim_max, reply });
                Ok(())
            }
            Err(error) => {
                self.put_back(settle, claim_max);
                Err(error)
            }
        }
    }

    /// The settlements the next round carries: up to a page of them, but for those whose
    /// item's renewal is in flight (they wait for it, so that no two rounds in flight touch
    /// one item, and lock rows in different orders).
    fn take_settlements(&mut self) -> Vec<Settlement> {
        let page = self.store.limits().page_size_max;
        let renewing = renewing(&self.in_flight);
        let mut settle = Vec::new();
        let mut later = Vec::new();
        for settlement in self.cycle.settle.drain(..) {
            if settle.len() < page && !renewing.contains(settlement.id()) {
                settle.push(settlement);
            } else {
                later.push(settlement);
            }
        }
        self.cycle.settle = later;
        settle
    }

    /// Whether a settlement waits that the next round may carry.
    fn settlement_ready(&self) -> bool {
        let renewing = renewing(&self.in_flight);
        self.cycle.settle.iter().any(|settlement| !renewing.contains(settlement.id()))
    }

    /// The items a round in flight renews or settles.
    fn touched_in_flight(&self) -> HashSet<&str> {
        self.in_flight
            .iter()
            .flat_map(|round| {
                let renewed = round.renew.iter().map(|lease| lease.id.as_str());
                renewed.chain(round.settle.iter().map(Settlement::id))
            })
            .collect()
    }

    /// How many more items the pool may claim now: its capacity less the items it holds and
    /// those the rounds in flight may bring, and at most its share of the capacity for one
    /// round of those that may be in flight (so that they take turns with like loads).
    fn free(&self) -> usize {
        let asked: usize = self.in_flight.iter().map(|round| round.claim_max).sum();
        let busy = self.held.len() + self.abandoned.len() + asked;
        let share = self.capacity().div_ceil(self.depth);
        self.capacity().saturating_sub(busy).min(share)
    }

    /// Fails, as retryable, every attempt whose handler has run past its item's run timeout;
    /// tells the handler, and drops its outcome when it comes.
    fn time_out(&mut self, now_ms: i64) {
        for (id, held) in &self.held {
            let Some(at_ms) = held.times_out_at_ms() else { continue };
            if now_ms < at_ms {
                continue;
            }
            held.timed_out.store(true, Ordering::Release);
            held.lost.store(true, Ordering::Release);
            self.abandoned.insert((id.clone(), held.fence));
            Counts::add(&self.counts.timed_out, 1);
            let timeout_ms = held.run_timeout_ms.unwrap_or_default();
            let error = format!("timed out after {timeout_ms} ms");
            let fail = Fail { id: id.clone(), fence: held.fence, error, retryable: true };
            self.cycle.settle.push(Settlement::Fail(fail));
        }
    }

    /// The held items due for a renewal (and not lost, nor renewed or settled by a round in
    /// flight).
    fn due_renewals(&self, now_ms: i64) -> Vec<Lease> {
        let in_flight = self.touched_in_flight();
        self.held
            .iter()
            .filter(|(id, _)| !in_flight.contains(id.as_str()))
            .filter(|(_, held)| !held.lost.load(Ordering::Acquire))
            .filter(|(_, held)| held.expires_at_ms.saturating_sub(now_ms) <= self.renew_left_ms)
            .map(|(id, held)| Lease { id: id.clone(), fence: held.fence })
            .collect()
    }

    /// Takes in what a round did: counts, renewed leases, new jobs.
    /// Only what the store says of an item under the fence it was sent with touches what the
    /// pool holds: another round may have claimed it again since. A reply of round `number`
    /// says whether the queue is dry unless a later round's reply said it already.
    fn record(
        &mut self,
        finished: Vec<Settlement>,
        renew: &[Lease],
        cycled: Cycled,
        asked: usize,
        number: u64,
    ) {
        for (settlement, result) in finished.into_iter().zip(cycled.settled) {
            self.settled(settlement, result);
        }
        for (lease, result) in renew.iter().zip(cycled.renewed) {
            let Some(held) = self.held_under(&lease.id, lease.fence) else { continue };
            match result {
                Ok(expires_at_ms) => {
                    if let Some(held) = self.held.get_mut(&lease.id) {
                        held.expires_at_ms = expires_at_ms;
                    }
                }
                Err(_) => {
                    if self.was_cancelled(&lease.id, held) {
                        held.cancelled.store(true, Ordering::Release);
                    }
                    held.lost.store(true, Ordering::Release);
                }
            }
        }
        if number >= self.dry_from {
            self.dry = cycled.claimed.len() < asked;
            self.dry_from = number;
        }
        self.adapt_prefetch();
        Counts::add(&self.counts.claimed, cycled.claimed.len() as u64);
        for claimed in cycled.claimed {
            self.dispatch(claimed);
        }
    }

    /// Counts one settlement; a completion refused for its content becomes a failure.
    fn settled(&mut self, settlement: Settlement, result: Result<Settled>) {
        let counts = &self.counts;
        match result {
            Ok(Settled::Completed) => Counts::add(&counts.completed, 1),
            Ok(Settled::Failed(FailOutcome::Retrying { .. })) => Counts::add(&counts.retried, 1),
            Ok(Settled::Failed(FailOutcome::DeadLettered)) => {
                Counts::add(&counts.dead_lettered, 1);
            }
            Ok(Settled::Released) => Counts::add(&counts.released, 1),
            Ok(Settled::Snoozed { .. }) => Counts::add(&counts.snoozed, 1),
            Err(Error::LeaseLost(_) | Error::NotFound { .. }) => {
                let id = settlement.id();
                match self.held_under(id, settlement.fence()) {
                    Some(held) if self.was_cancelled(id, held) => {
                        Counts::add(&counts.cancelled, 1);
                    }
                    _ => Counts::add(&counts.lease_lost, 1),
                }
            }
            Err(error) => return self.refused(&settlement, &error),
        }
        if self.held_under(settlement.id(), settlement.fence()).is_some() {
            self.held.remove(settlement.id());
        }
    }

    /// The item `id` the pool holds, if it holds it under `fence`.
    fn held_under(&self, id: &str, fence: u64) -> Option<&Held> {
        self.held.get(id).filter(|held| held.fence == fence)
    }

    /// Whether the item `held` was refused for was cancelled under its claim: known from an
    /// earlier renewal or from the handler's check, or read from the store (only for a refusal).
    fn was_cancelled(&self, id: &str, held: &Held) -> bool {
        held.cancelled.load(Ordering::Acquire)
            || self.store.queue().get(id).is_ok_and(|item| cancelled_under(&item, held.fence))
    }

    /// A settlement the store refused for its content (a result too large or nested too deep,
    /// an error text too long): the item is dead-lettered with the reason, so that it is not
    /// left claimed.
    fn refused(&mut self, settlement: &Settlement, error: &Error) {
        let (id, fence) = (settlement.id().to_owned(), settlement.fence());
        let mut error = format!("the pool could not record the handler's outcome: {error}");
        let mut end = error.len().min(REFUSED_ERROR_BYTES_MAX);
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error.truncate(end);
        self.cycle.settle.push(Settlement::Fail(Fail { id, fence, error, retryable: false }));
    }

    /// Most items held at once: one per handler, plus the prefetch buffer.
    fn capacity(&self) -> usize {
        self.threads + self.prefetch
    }

    /// Sizes the prefetch buffer to what the handlers take while a round is out: doubled
    /// when they emptied it and more work is there, halved when half of it is still waiting.
    fn adapt_prefetch(&mut self) {
        let waiting = self.unstarted.len();
        if waiting == 0 && !self.dry {
            self.prefetch = (self.prefetch * 2).clamp(1, self.prefetch_max.max(1));
        } else if waiting > self.prefetch / 2 {
            self.prefetch = (self.prefetch / 2).max(1);
        }
        self.prefetch = self.prefetch.min(self.prefetch_max);
    }

    /// Hands a claimed item to the handlers, or, once the pool is stopping, releases it. A
    /// claim older than the one the pool holds of the item (its reply came late) is dropped;
    /// a claim the pool holds under an older fence is told it is lost.
    fn dispatch(&mut self, claimed: Claimed) {
        if let Some(held) = self.held.get(&claimed.item.id) {
            if held.fence > claimed.fence {
                Counts::add(&self.counts.lease_lost, 1);
                return;
            }
            held.lost.store(true, Ordering::Release);
        }
        if self.stopping.load(Ordering::Acquire) {
            let release = Release { id: claimed.item.id.clone(), fence: claimed.fence };
            self.cycle.settle.push(Settlement::Release(release));
        }
        let lost = Arc::new(AtomicBool::new(false));
        let cancelled = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::new(AtomicBool::new(false));
        let started_at_ms = Arc::new(AtomicI64::new(NOT_STARTED));
        let held = Held {
            fence: claimed.fence,
            expires_at_ms: claimed.lease_expires_at_ms,
            lost: Arc::clone(&lost),
            cancelled: Arc::clone(&cancelled),
            run_timeout_ms: claimed.item.run_timeout_ms,
            started_at_ms: Arc::clone(&started_at_ms),
            timed_out: Arc::clone(&timed_out),
            handler_done: false,
        };
        self.held.insert(claimed.item.id.clone(), held);
        let job = Job {
            claimed,
            lost,
            cancelled,
            timed_out,
            started_at_ms,
            stopping: Arc::clone(&self.stopping),
            store: self.store.clone(),
        };
        if let Some(jobs) = self.jobs.as_ref().filter(|_| !self.stopping.load(Ordering::Acquire)) {
            // The coordinator holds a receiver itself, so the channel is never disconnected.
            let _ = jobs.send(job);
        }
    }

    /// How long to wait for a handler before the next round: none when a round is due now;
    /// otherwise until the next lease renewal, the next scheduled item or schedule's tick (when
    /// the queue is dry and nothing is held) or the poll interval, whichever is first. A tick
    /// due is fired here (none when a round is due then: its items are claimed at once).
    fn idle_wait(&mut self) -> Result<Option<Duration>> {
        let stopping = self.stopping.load(Ordering::Acquire);
        let free = self.free() > 0;
        if self.settlement_ready() || (free && !stopping && (!self.dry || self.woken)) {
            return Ok(None);
        }
        let mut wait = self.poll_interval;
        // A renewal or settlement in flight moves its item's lease when its reply comes.
        let in_flight = self.touched_in_flight();
        let renewing = self.held.iter().filter(|(id, _)| !in_flight.contains(id.as_str()));
        let renewing = renewing.filter(|(_, held)| !held.lost.load(Ordering::Acquire));
        if let Some(renew_at_ms) =
            renewing.map(|(_, held)| held.expires_at_ms - self.renew_left_ms).min()
        {
            wait = wait.min(self.store.until_ms(renew_at_ms));
        }
        if let Some(times_out_at_ms) = self.held.values().filter_map(Held::times_out_at_ms).min() {
            wait = wait.min(self.store.until_ms(times_out_at_ms));
        }
        if self.held.is_empty() && self.in_flight.is_empty() && !stopping {
            let next_due = match self.store.exec(NextDue { queues: self.cycle.queues.clone() }) {
                Ok(next_due) => next_due,
                Err(error) if gone(&error) => return Err(error),
                // Another try comes with the next round.
                Err(_) => None,
            };
            if let Some(due_ms) = next_due {
                wait = wait.min(self.store.until_ms(due_ms));
            }
            match self.store.queue().fire_due_ticks(&self.cycle.queues) {
                // The items just enqueued are claimed in the next round.
                Ok((fired, _)) if fired > 0 => {
                    self.woken = true;
                    return Ok(None);
                }
                Ok((_, Some(tick_ms))) => wait = wait.min(self.store.until_ms(tick_ms)),
                Ok((_, None)) => {}
                Err(error) if gone(&error) => return Err(error),
                // Another try comes with the next round.
                Err(_) => {}
            }
        }
        Ok(Some(wait))
    }
}

/// The items the rounds `in_flight` renew.
fn renewing(in_flight: &VecDeque<Round>) -> HashSet<&str> {
    let renew = in_flight.iter().flat_map(|round| &round.renew);
    renew.map(|lease| lease.id.as_str()).collect()
}

/// Of two results, the one to act on: an error that says the store is gone, else the first
/// error, else whether either did something.
fn worse(first: Result<bool>, second: Result<bool>) -> Result<bool> {
    match (first, second) {
        (Err(error), _) | (_, Err(error)) if gone(&error) => Err(error),
        (Err(error), _) | (_, Err(error)) => Err(error),
        (Ok(first), Ok(second)) => Ok(first || second),
    }
}

/// Whether `item` was cancelled while claimed under `fence` (a later claim would have moved
/// its fence on).
fn cancelled_under(item: &QueueItem, fence: u64) -> bool {
    item.status == ItemStatus::Cancelled && item.fence == fence
}

/// Whether an error means the store is gone for good (no round can succeed again).
fn gone(error: &Error) -> bool {
    matches!(error, Error::Closed | Error::Poisoned(_) | Error::ReadOnly | Error::Forbidden(_))
}

/// The default worker id: unique within the machine while the pool runs.
fn default_worker_id() -> String {
    static POOLS: AtomicU64 = AtomicU64::new(0);
    format!("pool-{}-{}", std::process::id(), POOLS.fetch_add(1, Ordering::Relaxed) + 1)
}

fn spawn<T: Send + 'static>(
    name: String,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>> {
    Ok(std::thread::Builder::new().name(name).spawn(work)?)
}

/// The message of a panic, when it has one.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}
