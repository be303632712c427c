//! The work queue: fenced leases, priorities, delays, dedupe, retries with backoff, dead
//! letters, and a blocking claim.
//!
//! An item is `pending` until a worker claims it. A claim consumes one attempt, issues a new
//! fence (one more than the item's last, so strictly greater than any before it, across
//! restarts) and a lease. Every lease-holder write (`heartbeat`, `complete`, `fail`,
//! `release`) names the fence and is checked against it, the `claimed` status and the lease's
//! expiry in the same statement: a stale holder gets `LeaseLost` and changes nothing. A failure
//! (or an expired lease, which counts as one) schedules a retry after an exponential backoff,
//! or moves the item to the dead-letter state once its attempts are spent.
//!
//! Every change appends an event to the queue's stream (`Stream::queue(name)`), so a queue can
//! be followed like any other stream: `enqueued`, `claimed`, `completed`, `retried`,
//! `dead_lettered`, `released`, `requeued`, `cancelled`; and of its settings and schedules:
//! `paused`, `resumed`, `concurrency`, `item_events`, `schedule_put`, `schedule_removed`. An event's payload is
//! `{"items": [{"id", "attempt", "fence", ..}]}`: one entry for a single-item call, one per item
//! for a batch call, which appends one event per queue and kind. A queue nobody follows may
//! turn these events off ([`Queue::set_item_events`]): its item changes then write no event rows
//! (a tenth to a sixth of a batched job cycle's cost, more of a single-item one). Everything is
//! scoped to the view's tenant.
//!
//! Ops live in `ops.rs`, SQL in `sql.rs`; the facade is [`Queue`], reached with
//! `store.queue()`.

mod ops;
mod schedule;
mod schedule_sql;
mod set_sql;
mod sql;
mod worker;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::page::Page;
use crate::store::Store;

pub use ops::{
    AuditCounts, Cancel, CancelExecution, Checkpoint, Claim, ClaimBatch, Complete,
    CompleteAndClaim, CompleteBatch, Completion, Cycle, Cycled, DeadLetters, Enqueue, EnqueueBatch,
    Fail, FailAndClaim, Get, Heartbeat, ItemEvents, Items, Lease, NextDue, PruneCompleted,
    PurgeDead, PutSchedule, Reclaim, Release, RemoveSchedule, Requeue, RequeueAll, RunSchedules,
    SNOOZE_MS_MAX, Schedules, SetConcurrency, SetItemEvents, SetPaused, Settled, Settlement,
    Snooze, Stats,
};
pub(crate) use ops::{NextTick, SweepSchedules};
pub use schedule::{
    BACKFILL_MAX, Cadence, CatchUp, INTERVAL_MS_MIN, SCHEDULES_MAX, Schedule, ScheduleInfo,
};
pub use worker::{Job, Outcome, WORKER_THREADS_MAX, Worker, WorkerPool, WorkerReport};

/// How long a failed attempt waits before its retry: `base_ms` doubled per attempt, at most
/// `max_ms`. The default is 1 s doubling to 64 s. `#[non_exhaustive]`: build it with
/// [`Backoff::new`] (or `Default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Backoff {
    /// The delay after the first failed attempt, in milliseconds.
    pub base_ms: i64,
    /// The longest delay, in milliseconds.
    pub max_ms: i64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { base_ms: 1_000, max_ms: 64_000 }
    }
}

impl Backoff {
    /// Retries `base_ms` after the first failed attempt, doubling per attempt up to `max_ms`
    /// (both checked when an item is enqueued: `0 <= base_ms <= max_ms`).
    pub fn new(base_ms: i64, max_ms: i64) -> Self {
        Self { base_ms, max_ms }
    }

    /// The delay before the retry that follows failed attempt number `attempt` (1-based).
    pub fn delay_ms(&self, attempt: u32) -> i64 {
        let doublings = attempt.saturating_sub(1).min(62);
        self.base_ms.saturating_mul(1_i64 << doublings).min(self.max_ms)
    }
}

/// An item to enqueue; build it with [`NewItem::new`] and the setters (it is
/// `#[non_exhaustive]`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NewItem {
    /// The queue's name.
    pub queue: String,
    /// The work, as JSON.
    pub payload: Value,
    /// Higher is claimed first, within -1,000,000,000..=1,000,000,000. Default 0. A queue is
    /// best served by a few priority levels: a claim looks through at most 64 of them with
    /// index seeks before it falls back to one slower query.
    pub priority: i64,
    /// When the item becomes due (epoch ms); `None` is now.
    pub run_at_ms: Option<i64>,
    /// Attempts before the item is dead-lettered, 1..=`Limits::max_attempts_max`. Default 3.
    pub max_attempts: u32,
    /// The retry delays.
    pub backoff: Backoff,
    /// Unique among the live (pending or claimed) items of the queue: enqueueing the same
    /// payload again returns the live item (its other settings are not compared); a different
    /// payload is `Conflict`.
    pub dedupe_key: Option<String>,
    /// The workflow execution the item belongs to, for `cancel_execution`.
    pub execution_id: Option<String>,
    /// The graph or workflow node the item runs.
    pub node_id: Option<String>,
    /// How long a worker pool lets one attempt run (see [`NewItem::run_timeout_ms`]).
    pub run_timeout_ms: Option<i64>,
    /// Tags to find the item by ([`ItemFilter::tag`]); see [`NewItem::tag`].
    pub tags: Vec<String>,
    /// A JSON object kept with the item for the caller; see [`NewItem::metadata`].
    pub metadata: Option<Value>,
    /// A key unique over a window and chosen states; see [`NewItem::unique`].
    pub unique: Option<Unique>,
}

/// A key an item holds in its queue over a window of time, against later enqueues with the same
/// key (River's unique jobs, Oban's `unique`, graphile-worker's `job_key`); see
/// [`NewItem::unique`]. Beside [`NewItem::dedupe_key`], which holds only while the item is live
/// and compares payloads. `#[non_exhaustive]`: build it with [`Unique::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unique {
    /// The key (id-like: non-empty, at most `Limits::id_len_max` bytes).
    pub key: String,
    /// The window: enqueues at times in the same period (`now - now % period_ms`, on the
    /// store's clock; an hour: one per clock hour) meet the same holder; `None`: one window
    /// for all time. 1 ms to a year.
    pub period_ms: Option<i64>,
    /// The holder's statuses in which it holds the key: a later enqueue meets a holder in one
    /// of these, and makes a new item (the new holder) otherwise. Default: pending, claimed
    /// and completed (a dead or cancelled item does not hold its key).
    pub states: Vec<ItemStatus>,
    /// What an enqueue that meets the holder does.
    pub on_conflict: OnConflict,
}

/// What an enqueue with a held [`Unique`] key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnConflict {
    /// Keeps the holder as it is and returns it (`Enqueued::deduplicated`).
    #[default]
    Keep,
    /// Gives the holder, while it is pending, the new payload and run time (a holder already
    /// claimed or finished is kept as it is); returns it (`Enqueued::deduplicated`).
    Replace,
}

impl Unique {
    /// `key` unique for all time while its holder is pending, claimed or completed; keep on
    /// conflict.
    pub fn new(key: impl Into<String>) -> Self {
        Unique {
            key: key.into(),
            period_ms: None,
            states: vec![ItemStatus::Pending, ItemStatus::Claimed, ItemStatus::Completed],
            on_conflict: OnConflict::Keep,
        }
    }

    /// Unique within each period of `period_ms` only.
    pub fn per(mut self, period_ms: i64) -> Self {
        self.period_ms = Some(period_ms);
        self
    }

    /// Held only while its holder is in one of `states`.
    pub fn states(mut self, states: &[ItemStatus]) -> Self {
        self.states = states.to_vec();
        self
    }

    /// Replaces a pending holder's payload and run time instead of keeping it.
    pub fn replace(mut self) -> Self {
        self.on_conflict = OnConflict::Replace;
        self
    }
}

/// Most tags an item may carry.
pub const TAGS_MAX: usize = 16;

/// Most metadata conditions one [`ItemFilter`] may hold ([`ItemFilter::metadata`]).
pub const METADATA_CONDITIONS_MAX: usize = 8;

/// The longest value a metadata condition may compare with, in bytes of its JSON text
/// ([`ItemFilter::metadata`]).
pub const METADATA_VALUE_BYTES_MAX: usize = 1024;

impl NewItem {
    /// An item for `queue` carrying `payload`, due now, priority 0, 3 attempts.
    pub fn new(queue: impl Into<String>, payload: Value) -> Self {
        Self {
            queue: queue.into(),
            payload,
            priority: 0,
            run_at_ms: None,
            max_attempts: 3,
            backoff: Backoff::default(),
            dedupe_key: None,
            execution_id: None,
            node_id: None,
            run_timeout_ms: None,
            tags: Vec::new(),
            metadata: None,
            unique: None,
        }
    }

    /// Sets the priority (higher first).
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// Delays the item until `run_at_ms`.
    pub fn run_at_ms(mut self, run_at_ms: i64) -> Self {
        self.run_at_ms = Some(run_at_ms);
        self
    }

    /// Sets how many attempts the item gets.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets the retry delays.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Makes the item unique among the queue's live items by `key`.
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// Links the item to a workflow execution.
    pub fn execution_id(mut self, id: impl Into<String>) -> Self {
        self.execution_id = Some(id.into());
        self
    }

    /// Links the item to a node.
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    /// Limits how long one attempt may run in a worker pool: past `run_timeout_ms` (from the
    /// moment its handler starts) the pool tells the handler ([`Job::timed_out`]) and fails
    /// the attempt as retryable ("timed out after N ms"); the handler's own outcome is then
    /// dropped. 1 ms up to `Limits::lease_max_ms`. Callers of `claim` enforce it themselves
    /// (it is on the item they claim). Without it an attempt runs as long as its lease is
    /// renewed.
    pub fn run_timeout_ms(mut self, run_timeout_ms: i64) -> Self {
        self.run_timeout_ms = Some(run_timeout_ms);
        self
    }

    /// Adds a tag (an id-like string: non-empty, at most `Limits::id_len_max` bytes, no
    /// control characters), kept with the item and indexed: `items(..)` with
    /// [`ItemFilter::tag`] lists a queue's items with it. At most [`TAGS_MAX`] distinct tags;
    /// a tag given twice is kept once. Checked at enqueue (`InvalidInput`/`TooLarge`, nothing
    /// written).
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        let tag = tag.into();
        if !self.tags.contains(&tag) {
            self.tags.push(tag);
        }
        self
    }

    /// Makes the item hold `unique.key` in its queue over a window (see [`Unique`]): an
    /// enqueue with the key whose window holds an item in one of `unique.states` returns that
    /// item (`deduplicated: true`), kept or, with [`OnConflict::Replace`] and while it is
    /// pending, given this item's payload and run time; otherwise this item is enqueued and
    /// holds the key. Checked at enqueue: a bad key, period or empty states, or a dedupe key
    /// beside it, is `InvalidInput` with nothing written.
    pub fn unique(mut self, unique: Unique) -> Self {
        self.unique = Some(unique);
        self
    }

    /// Keeps `metadata`, a JSON object, with the item (River's metadata, Oban's meta): returned
    /// in [`QueueItem::metadata`], and [`ItemFilter::metadata`] lists a queue's items by its
    /// top-level keys; the store acts on none of it. Bounded as a payload is
    /// (`Limits::payload_bytes_max`); anything but an object is `InvalidInput` at enqueue.
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// Where an item is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ItemStatus {
    /// Waiting to be claimed (due, or scheduled for `run_at_ms`).
    Pending,
    /// Held by a worker under a lease.
    Claimed,
    /// Finished with a result.
    Completed,
    /// Out of attempts, or failed for good: in the dead-letter state until requeued or purged.
    Dead,
    /// Cancelled before it ran.
    Cancelled,
}

impl ItemStatus {
    /// The status as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::Pending => "pending",
            ItemStatus::Claimed => "claimed",
            ItemStatus::Completed => "completed",
            ItemStatus::Dead => "dead",
            ItemStatus::Cancelled => "cancelled",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self> {
        match text {
            "pending" => Ok(ItemStatus::Pending),
            "claimed" => Ok(ItemStatus::Claimed),
            "completed" => Ok(ItemStatus::Completed),
            "dead" => Ok(ItemStatus::Dead),
            "cancelled" => Ok(ItemStatus::Cancelled),
            other => Err(Error::Corrupt(format!("unknown queue item status {other:?}"))),
        }
    }
}

/// A queue item as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueItem {
    /// The item's id (UUID v7).
    pub id: String,
    /// Its queue.
    pub queue: String,
    /// The work.
    pub payload: Value,
    /// Higher is claimed first.
    pub priority: i64,
    /// When it is (or was) due, in epoch ms.
    pub run_at_ms: i64,
    /// Attempts consumed so far.
    pub attempt: u32,
    /// Attempts it gets.
    pub max_attempts: u32,
    /// Its retry delays.
    pub backoff: Backoff,
    /// Its dedupe key, if any.
    pub dedupe_key: Option<String>,
    /// Its workflow execution, if any.
    pub execution_id: Option<String>,
    /// Its node, if any.
    pub node_id: Option<String>,
    /// Where it is in its life.
    pub status: ItemStatus,
    /// The fence of its latest claim (0 before the first).
    pub fence: u64,
    /// The worker holding it, while claimed.
    pub worker_id: Option<String>,
    /// When the current lease expires, while claimed.
    pub lease_expires_at_ms: Option<i64>,
    /// The error of the latest failed attempt.
    pub last_error: Option<String>,
    /// The result it completed with.
    pub result: Option<Value>,
    /// When it was enqueued.
    pub created_at_ms: i64,
    /// When it last changed.
    pub updated_at_ms: i64,
    /// When it was completed, cancelled or dead-lettered.
    pub finished_at_ms: Option<i64>,
    /// How long a worker pool lets one attempt run ([`NewItem::run_timeout_ms`]).
    #[serde(default)]
    pub run_timeout_ms: Option<i64>,
    /// Its tags ([`NewItem::tag`]), in the order given.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its metadata ([`NewItem::metadata`]), if any.
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// What an enqueue did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Enqueued {
    /// The item's id: the new one, or the live item with the same dedupe key.
    pub id: String,
    /// True when a live item with the same dedupe key and payload was found and nothing written.
    pub deduplicated: bool,
}

/// A claimed item and the lease that goes with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Claimed {
    /// The item, as it stands after the claim.
    pub item: QueueItem,
    /// The fence every write of this holder must name.
    pub fence: u64,
    /// When the lease expires unless renewed by `heartbeat`.
    pub lease_expires_at_ms: i64,
}

/// What a failure did to the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FailOutcome {
    /// It will be due again at `run_at_ms`.
    Retrying {
        /// When the retry becomes due.
        run_at_ms: i64,
    },
    /// It is out of attempts, or the failure was not retryable.
    DeadLettered,
}

/// What a sweep of expired leases did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reclaimed {
    /// Items scheduled for another attempt.
    pub retried: u64,
    /// Items moved to the dead-letter state.
    pub dead_lettered: u64,
}

/// The counts of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// Pending items that are due.
    pub pending: u64,
    /// Pending items not yet due.
    pub scheduled: u64,
    /// Items under a lease.
    pub claimed: u64,
    /// Dead-lettered items.
    pub dead: u64,
    /// Completed items not yet pruned.
    pub completed: u64,
    /// How long the oldest due item has waited, in ms (`None` when none is due).
    pub oldest_pending_age_ms: Option<i64>,
    /// True while the queue is paused ([`Queue::pause`]): nobody claims its items.
    pub paused: bool,
    /// Its concurrency limit ([`Queue::set_concurrency`]), if it has one.
    pub concurrency_max: Option<u32>,
}

impl QueueStats {
    /// The counts of a queue with no item, not paused and without a limit: every count zero
    /// (a start to compare a recount with, say).
    pub fn empty(queue: impl Into<String>) -> Self {
        QueueStats {
            queue: queue.into(),
            pending: 0,
            scheduled: 0,
            claimed: 0,
            dead: 0,
            completed: 0,
            oldest_pending_age_ms: None,
            paused: false,
            concurrency_max: None,
        }
    }
}

/// Which of a queue's items [`Queue::items`] reads: those with a status and, for pending
/// items, those due now or only those due later; with a tag, only the items that carry it;
/// with metadata conditions, only the items whose metadata meets every one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemFilter {
    /// The items' status.
    pub status: ItemStatus,
    /// Pending items due by now (`Some(true)`) or later (`Some(false)`); `None`: either.
    pub due: Option<bool>,
    /// Only the items with this tag ([`NewItem::tag`]); `None`: every item.
    pub tag: Option<String>,
    /// Only the items whose metadata ([`NewItem::metadata`]) has each of these top-level keys
    /// with a value equal to the one given (see [`ItemFilter::metadata`]); empty: every item.
    pub metadata: Vec<(String, Value)>,
}

impl ItemFilter {
    /// Every item with `status`.
    pub fn status(status: ItemStatus) -> Self {
        ItemFilter { status, due: None, tag: None, metadata: Vec::new() }
    }

    /// Pending items due now.
    pub fn due() -> Self {
        ItemFilter { due: Some(true), ..ItemFilter::status(ItemStatus::Pending) }
    }

    /// Pending items due later.
    pub fn scheduled() -> Self {
        ItemFilter { due: Some(false), ..ItemFilter::status(ItemStatus::Pending) }
    }

    /// The same, only the items with `tag`: read through the tag's own index (the queue's
    /// items with the tag, in id order), so a page costs the tagged items it passes over, not
    /// the queue's.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// The same, only the items whose metadata object has the top-level `key` with a value
    /// equal to `value`; called again, the conditions add up (all must hold). `value` is a
    /// JSON scalar and equal keeps to JSON's types: a string equals the same string, a number
    /// the same number (`1` equals `1.0`), `true` only `true` and `null` only a key present
    /// with `null` (not a missing key); so `1`, `"1"` and `true` never match each other. The
    /// same on both engines.
    ///
    /// There is no index on metadata: the items of the status (or of the tag, with
    /// [`ItemFilter::tag`]) are read in id order and each is kept if its metadata matches, so
    /// a page costs the items it passes over, at most 10,000: a page not filled within them
    /// is `TooLarge` (narrow the listing with a tag). Checked by `items(..)`, nothing read
    /// otherwise:
    /// at most [`METADATA_CONDITIONS_MAX`] conditions (else `TooLarge`), an id-like key
    /// (non-empty, at most `Limits::id_len_max` bytes, no control characters: `InvalidInput`
    /// or `TooLarge`), a scalar value (an array or object is `InvalidInput`) of at most
    /// [`METADATA_VALUE_BYTES_MAX`] bytes as JSON (`TooLarge`).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }
}

/// The work queue of a store view: `store.queue()`.
#[derive(Debug, Clone, Copy)]
pub struct Queue<'a> {
    store: &'a Store,
}

impl<'a> Queue<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// A worker pool for `queues`, to set up and [`Worker::run`]: handler threads fed by
    /// claims made in rounds (prefetched for the free handlers), their leases renewed while
    /// they run, their outcomes committed together. See [`Worker`].
    pub fn worker(&self, queues: &[&str]) -> Worker {
        Worker::new(self.store, queues)
    }

    /// Enqueues one item; see [`Enqueue`].
    ///
    /// # Errors
    /// `InvalidInput`/`TooLarge` for a bad item; `Conflict` for a dedupe key whose live item
    /// carries another payload. Nothing is written on error.
    pub fn enqueue(&self, item: NewItem) -> Result<Enqueued> {
        self.store.exec(Enqueue { item })
    }

    /// Enqueues many items in one operation (all or none); see [`EnqueueBatch`].
    ///
    /// # Errors
    /// As `enqueue` for any item, and `TooLarge` past `Limits::page_size_max` items.
    pub fn enqueue_batch(&self, items: Vec<NewItem>) -> Result<Vec<Enqueued>> {
        self.store.exec(EnqueueBatch { items })
    }

    /// Claims the next due item of `queues`, or `None`; see [`Claim`].
    ///
    /// # Errors
    /// `InvalidInput` for a bad worker id, queue name or lease length.
    pub fn claim(
        &self,
        worker_id: &str,
        queues: &[&str],
        lease_ms: i64,
    ) -> Result<Option<Claimed>> {
        self.store.exec(Claim { worker_id: worker_id.into(), queues: owned(queues), lease_ms })
    }

    /// Claims up to `max_items` due items in one operation; see [`ClaimBatch`].
    ///
    /// # Errors
    /// As `claim`, and `TooLarge` past `Limits::page_size_max` items.
    pub fn claim_batch(
        &self,
        worker_id: &str,
        queues: &[&str],
        lease_ms: i64,
        max_items: usize,
    ) -> Result<Vec<Claimed>> {
        let op =
            ClaimBatch { worker_id: worker_id.into(), queues: owned(queues), lease_ms, max_items };
        self.store.exec(op)
    }

    /// Claims the next due item, waiting up to `timeout` for one. The caller's thread sleeps:
    /// it is woken when an item is enqueued, released, retried or requeued in this process,
    /// and when the earliest scheduled item of `queues` falls due.
    ///
    /// # Errors
    /// As `claim`.
    pub fn claim_wait(
        &self,
        worker_id: &str,
        queues: &[&str],
        lease_ms: i64,
        timeout: Duration,
    ) -> Result<Option<Claimed>> {
        // A timeout too long to represent waits without a deadline.
        let deadline = Instant::now().checked_add(timeout);
        let bell = self.store.bell();
        loop {
            let seen = bell.generation();
            if let Some(claimed) = self.claim(worker_id, queues, lease_ms)? {
                return Ok(Some(claimed));
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(None);
            }
            // A schedule that cannot fire now does not fail the claim: it waits as it would.
            let (fired, tick) = match self.fire_due_ticks(&owned(queues)) {
                Ok(answer) => answer,
                Err(error @ (Error::Closed | Error::Poisoned(_))) => return Err(error),
                Err(error) => {
                    tracing::debug!(%error, "spindle: a blocking claim could not fire a tick");
                    (0, None)
                }
            };
            if fired > 0 {
                continue;
            }
            let due = self.store.exec(NextDue { queues: owned(queues) })?;
            let due = due.into_iter().chain(tick).min();
            let due_at =
                due.and_then(|due_ms| Instant::now().checked_add(self.store.until_ms(due_ms)));
            let wake_at = match (deadline, due_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            bell.wait(seen, wake_at);
        }
    }

    /// Extends the lease of a held item to `lease_ms` from now; returns the new expiry.
    ///
    /// # Errors
    /// `LeaseLost` for a stale fence or an expired lease; `NotFound` for an unknown item.
    pub fn heartbeat(&self, id: &str, fence: u64, lease_ms: i64) -> Result<i64> {
        self.store.exec(Heartbeat { id: id.into(), fence, lease_ms })
    }

    /// Replaces a held item's payload with `payload`, for the item's next claim to see (a
    /// retry, or another worker after this one's lease lapsed): how far the work got, say.
    /// The item's dedupe key keeps matching the payload it was enqueued with.
    ///
    /// # Errors
    /// As `heartbeat`; `TooLarge` for a payload past `Limits::payload_bytes_max` (nothing is
    /// written).
    pub fn checkpoint(&self, id: &str, fence: u64, payload: Value) -> Result<()> {
        self.store.exec(Checkpoint { id: id.into(), fence, payload })
    }

    /// Completes a held item with `result`.
    ///
    /// # Errors
    /// As `heartbeat`.
    pub fn complete(&self, id: &str, fence: u64, result: Value) -> Result<()> {
        self.store.exec(Complete { id: id.into(), fence, result })
    }

    /// Completes many held items in one operation (all or none).
    ///
    /// # Errors
    /// As `heartbeat` for any item; then none is completed.
    pub fn complete_batch(&self, items: Vec<Completion>) -> Result<()> {
        self.store.exec(CompleteBatch { items })
    }

    /// Completes a held item and claims the next due item of `next`, in one op and one
    /// commit: a worker's two calls between items in one round trip. See [`CompleteAndClaim`].
    ///
    /// ```
    /// # fn main() -> spindle::Result<()> {
    /// use serde_json::json;
    /// use spindle::{NewItem, Store, queue::Claim};
    /// let store = Store::open_in_memory()?;
    /// let queue = store.queue();
    /// queue.enqueue_batch(vec![NewItem::new("mail", json!(1)), NewItem::new("mail", json!(2))])?;
    /// let next = Claim::new("worker-1", &["mail"], 30_000);
    /// let mut held = queue.claim(&next.worker_id, &["mail"], next.lease_ms)?;
    /// let mut done = 0;
    /// while let Some(job) = held {
    ///     // ... do the work of job.item.payload ...
    ///     held = queue.complete_and_claim(&job.item.id, job.fence, json!("sent"), &next)?;
    ///     done += 1;
    /// }
    /// assert_eq!(done, 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As `complete` (then nothing is claimed), and as `claim` for a bad `next`.
    pub fn complete_and_claim(
        &self,
        id: &str,
        fence: u64,
        result: Value,
        next: &Claim,
    ) -> Result<Option<Claimed>> {
        let completion = Completion { id: id.into(), fence, result };
        self.store.exec(CompleteAndClaim { completion, next: next.clone() })
    }

    /// Records a failed attempt of a held item (as [`Queue::fail`]) and claims the next due
    /// item of `next`, in one op. See [`FailAndClaim`].
    ///
    /// # Errors
    /// As `fail` (then nothing is claimed), and as `claim` for a bad `next`.
    pub fn fail_and_claim(
        &self,
        id: &str,
        fence: u64,
        error: &str,
        retryable: bool,
        next: &Claim,
    ) -> Result<(FailOutcome, Option<Claimed>)> {
        let failure = Fail { id: id.into(), fence, error: error.into(), retryable };
        self.store.exec(FailAndClaim { failure, next: next.clone() })
    }

    /// Records a failed attempt of a held item: a retry after the backoff, or the dead-letter
    /// state when its attempts are spent or `retryable` is false.
    ///
    /// # Errors
    /// As `heartbeat`.
    pub fn fail(&self, id: &str, fence: u64, error: &str, retryable: bool) -> Result<FailOutcome> {
        self.store.exec(Fail { id: id.into(), fence, error: error.into(), retryable })
    }

    /// Gives a held item back: pending again, its attempt refunded.
    ///
    /// # Errors
    /// As `heartbeat`.
    pub fn release(&self, id: &str, fence: u64) -> Result<()> {
        self.store.exec(Release { id: id.into(), fence })
    }

    /// Puts a held item back to run again `delay_ms` from now without spending an attempt
    /// (River's `JobSnooze`, Oban's `{:snooze, s}`): pending and due then, its attempt
    /// refunded, so its next claim is the same attempt again and a snoozing item never runs out
    /// of attempts by snoozing. Fenced like `complete`. Returns when it is due. A pool's
    /// handler returns [`Outcome::Snooze`] instead.
    ///
    /// # Errors
    /// As `heartbeat`; `InvalidInput` for a delay outside `0..=SNOOZE_MS_MAX` (a year).
    /// Nothing is written on error.
    pub fn snooze(&self, id: &str, fence: u64, delay_ms: i64) -> Result<i64> {
        self.store.exec(Snooze { id: id.into(), fence, delay_ms })
    }

    /// Treats every expired lease as a failed attempt ("lease expired").
    ///
    /// # Errors
    /// Storage errors only.
    pub fn reclaim_expired(&self) -> Result<Reclaimed> {
        self.store.exec(Reclaim { queues: None })
    }

    /// One item.
    ///
    /// # Errors
    /// `NotFound` for an unknown item (or another tenant's).
    pub fn get(&self, id: &str) -> Result<QueueItem> {
        self.store.exec(Get { id: id.into() })
    }

    /// A page of a queue's dead letters, in enqueue order.
    ///
    /// # Errors
    /// `TooLarge` for a page past the page size limit.
    pub fn dead_letters(&self, queue: &str, page: Page) -> Result<Vec<QueueItem>> {
        self.store.exec(DeadLetters { queue: queue.into(), page })
    }

    /// A page of a queue's items that `filter` takes, in enqueue order.
    ///
    /// # Errors
    /// `InvalidInput` for a bad queue name, tag or metadata condition; `TooLarge` for a page
    /// past the page size limit, or too many or too long metadata conditions
    /// ([`ItemFilter::metadata`]).
    pub fn items(&self, queue: &str, filter: ItemFilter, page: Page) -> Result<Vec<QueueItem>> {
        self.store.exec(Items { queue: queue.into(), filter, page })
    }

    /// Gives a dead item fresh attempts: pending and due now. Its fence keeps growing.
    ///
    /// # Errors
    /// `NotFound` for an unknown item; `Conflict` if it is not dead, or a live item holds its
    /// dedupe key.
    pub fn requeue(&self, id: &str) -> Result<()> {
        self.store.exec(Requeue { id: id.into() })
    }

    /// Requeues up to `Limits::page_size_max` dead items of `queue` (those whose dedupe key is
    /// held by a live item stay dead); returns how many were requeued. Call again for more.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn requeue_all(&self, queue: &str) -> Result<u64> {
        self.store.exec(RequeueAll { queue: queue.into() })
    }

    /// Deletes up to `Limits::page_size_max` dead items of `queue`; returns how many. Call
    /// again until it returns 0.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn purge_dead(&self, queue: &str) -> Result<u64> {
        self.store.exec(PurgeDead { queue: queue.into() })
    }

    /// Cancels a live item, at once: a pending one is never claimed; a claimed one (its
    /// handler running) is cancelled under its holder, whose later writes (`heartbeat`,
    /// `complete`, `fail`, `release`, `snooze`) are refused with `LeaseLost` and change
    /// nothing: it is never retried. A worker pool's handler sees it through
    /// [`Job::cancelled`] and stops; the pool counts the refused outcome as
    /// [`WorkerReport::cancelled`]. Appends a `cancelled` event (`"running": true` and the
    /// holder's worker id for a claimed item). A limited queue has a place free again.
    ///
    /// # Errors
    /// `NotFound` for an unknown item; `Conflict` if it is finished (completed, dead or
    /// cancelled); nothing is written then.
    pub fn cancel(&self, id: &str) -> Result<()> {
        self.store.exec(Cancel { id: id.into() })
    }

    /// Cancels up to `Limits::page_size_max` live items of a workflow execution (a claimed
    /// one's holder then gets `LeaseLost`); returns how many. Call again until it returns 0.
    ///
    /// # Errors
    /// `InvalidInput` for a bad id.
    pub fn cancel_execution(&self, execution_id: &str) -> Result<u64> {
        self.store.exec(CancelExecution { execution_id: execution_id.into() })
    }

    /// The counts of every queue of the tenant that has an item (in any status), by name. It
    /// reads no finished item: their counts are kept as they change (in the statement that
    /// completes, dead-letters, cancels, requeues, prunes or purges one), and the live items
    /// are counted from their indexes. It costs O(queues + live items), whatever the number
    /// of completed ones.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn stats(&self) -> Result<Vec<QueueStats>> {
        self.store.exec(Stats)
    }

    /// Where the kept counts of the tenant's completed, dead and cancelled items differ from a
    /// recount of the items, one line each (`"queue Q completed: kept 3, counted 4"`); empty
    /// when they agree, as they always should (`spindle check` reports any line). It reads
    /// every finished item of the tenant.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn audit_counts(&self) -> Result<Vec<String>> {
        self.store.exec(AuditCounts)
    }

    /// Turns `queue`'s per-item events on or off. They are on by default: every change to an
    /// item (`enqueued`, `claimed`, `completed`, ...) appends an event to `Stream::queue(queue)`.
    /// Off, the queue's item changes append nothing, and a subscriber to its stream hears
    /// nothing of them; the items themselves, their leases, fences, retries, dead letters and
    /// `stats` are kept exactly as before. Turn them off only for a queue nobody follows: the
    /// event rows cost a tenth to a sixth of a batched job cycle, and more of a single-item
    /// one (`complete_and_claim` writes two per job). The change itself
    /// appends an `item_events` event (`{"enabled": bool}`) whatever the setting, so a follower
    /// sees why the stream goes quiet. The setting is durable and per tenant.
    ///
    /// # Errors
    /// `InvalidInput` for an empty or oversized queue name (nothing is written).
    pub fn set_item_events(&self, queue: &str, enabled: bool) -> Result<()> {
        self.store.exec(SetItemEvents { queue: queue.into(), enabled })
    }

    /// Pauses `queue`: from the commit on, nobody claims its items (`claim`, `claim_wait`,
    /// the worker pool, in this process or any other on the store), while its claimed items
    /// run to their end (they complete, fail, retry and renew their leases as before; an
    /// expired lease is still retried, as pending). Enqueues go on. The setting is durable
    /// (it survives a restart) and per tenant; `stats` shows it. It appends a `paused` event
    /// to the queue's stream. The check is part of the claiming statement itself, so a claim
    /// racing with the pause sees either the queue running or paused, never an item claimed
    /// after the pause committed.
    ///
    /// # Errors
    /// `InvalidInput` for an empty or oversized queue name (nothing is written).
    pub fn pause(&self, queue: &str) -> Result<()> {
        self.store.exec(SetPaused { queue: queue.into(), paused: true })
    }

    /// Resumes a paused `queue`: its due items are claimed again, and waiting claimers of
    /// this process are woken. Appends a `resumed` event to the queue's stream (also for a
    /// queue that was not paused).
    ///
    /// # Errors
    /// As `pause`.
    pub fn resume(&self, queue: &str) -> Result<()> {
        self.store.exec(SetPaused { queue: queue.into(), paused: false })
    }

    /// Limits `queue` to at most `concurrency_max` items claimed at once, by every worker and
    /// process on the store together (`Some(1)`: a serial queue, one item at a time); `None`
    /// lifts the limit. The claiming statement counts the queue's claimed items and claims
    /// only below the limit, so no client can go past it. Items claimed before a lower limit
    /// run to their end; the queue then waits until it is below the new limit. A settlement
    /// that frees a place (complete, fail, release, snooze, cancel) wakes this process's
    /// waiting claimers. Durable, per tenant, shown by `stats`; appends a `concurrency` event
    /// (`{"concurrency_max": n}` or `null`) to the queue's stream.
    ///
    /// # Errors
    /// `InvalidInput` for a limit of 0 or a bad queue name (nothing is written).
    pub fn set_concurrency(&self, queue: &str, concurrency_max: Option<u32>) -> Result<()> {
        self.store.exec(SetConcurrency { queue: queue.into(), concurrency_max })
    }

    /// Whether `queue` appends per-item events: true unless [`Queue::set_item_events`] turned
    /// them off.
    ///
    /// # Errors
    /// `InvalidInput` for an empty or oversized queue name.
    pub fn item_events(&self, queue: &str) -> Result<bool> {
        self.store.exec(ItemEvents { queue: queue.into() })
    }

    /// Deletes up to `Limits::page_size_max` completed and cancelled items finished more than
    /// `older_than_ms` ago; returns how many. Call again until it returns 0.
    ///
    /// # Errors
    /// `InvalidInput` for a negative age.
    pub fn prune_completed(&self, older_than_ms: i64) -> Result<u64> {
        self.store.exec(PruneCompleted { older_than_ms })
    }
}

fn owned(queues: &[&str]) -> Vec<String> {
    queues.iter().map(|queue| (*queue).to_owned()).collect()
}

/// How long a waiter gives another process to fire a tick it found due but could not fire
/// (that process fires it now), in milliseconds.
const TICK_RETRY_MS: i64 = 250;

impl Queue<'_> {
    /// What a waiter for `queues` does about their schedules: fires the view's tenant's due
    /// ticks if one of `queues` has one due; returns how many items that enqueued, and when
    /// to look again (the next tick, or a moment from now while a tick stays due).
    pub(crate) fn fire_due_ticks(&self, queues: &[String]) -> Result<(u64, Option<i64>)> {
        let now_ms = self.store.now_ms();
        let next = self.store.exec(NextTick { queues: queues.to_vec() })?;
        if next.is_none_or(|tick_ms| tick_ms > now_ms) {
            return Ok((0, next));
        }
        let fired = self.store.exec(RunSchedules)?;
        let next = self.store.exec(NextTick { queues: queues.to_vec() })?;
        Ok((fired, next.map(|tick_ms| tick_ms.max(now_ms + TICK_RETRY_MS))))
    }
}

/// What a writable store does with schedules when it opens: fires the ticks missed while it
/// was closed (by each schedule's catch-up) and sets its alarm for the next one. A failure
/// does not keep the store from opening: it is told, and the sweep runs again with the next
/// write (another process holding the write lock, `Busy`, fires them itself).
pub(crate) fn at_open(store: &Store, _recover: bool) -> Result<()> {
    match store.exec(SweepSchedules) {
        Ok(_) | Err(Error::Busy) => {}
        Err(error) => tracing::warn!(%error, "spindle: the schedules' sweep at open failed"),
    }
    Ok(())
}

impl Store {
    /// The work queue: enqueue, claim under fenced leases, complete, fail and retry, dead
    /// letters.
    pub fn queue(&self) -> Queue<'_> {
        Queue::new(self)
    }
}
