//! The queue's operations: one struct each, run with `store.exec` or composed with `tx.exec`.
//!
//! Branching lives here; statements live in `sql.rs`. Every op checks its input before it
//! writes, so bad input writes nothing.

use serde::Serialize;
use serde_json::{Value, json};

use super::sql::{self, ItemRow};
use super::{
    Claimed, Enqueued, FailOutcome, ItemFilter, ItemStatus, METADATA_CONDITIONS_MAX,
    METADATA_VALUE_BYTES_MAX, NewItem, OnConflict, QueueItem, QueueStats, Reclaimed, TAGS_MAX,
    Unique,
};
use crate::core::counts;
use crate::core::events::{self, Stream};
use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::{Tally, Tx};
use crate::error::{Error, Result};
use crate::hash::content_hash;
use crate::limits::Limits;
use crate::page::Page;

mod notes;
mod schedules;
mod sets;

pub(crate) use schedules::{NextTick, SweepSchedules};
pub use schedules::{PutSchedule, RemoveSchedule, RunSchedules, Schedules};

use notes::{Notes, QueueEvent};

/// Enqueues one item. With a dedupe key held by a live item of the queue, the same payload
/// returns that item (`deduplicated: true`, nothing written) and another payload is
/// `Conflict`.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueue {
    /// The item.
    pub item: NewItem,
}

/// Enqueues items in one operation: all of them, or (on any error) none.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueBatch {
    /// The items, at most `Limits::page_size_max`.
    pub items: Vec<NewItem>,
}

/// Claims the next due item of any of `queues` (priority desc, run_at asc, id asc), after
/// sweeping expired leases. Output `None` when nothing is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Who claims; recorded on the item.
    pub worker_id: String,
    /// The queues to claim from.
    pub queues: Vec<String>,
    /// The lease, within `Limits::lease_ms_min..=lease_ms_max`.
    pub lease_ms: i64,
}

impl Claim {
    /// A claim of the next due item of `queues` by `worker_id`, under a lease of `lease_ms`.
    pub fn new(worker_id: impl Into<String>, queues: &[&str], lease_ms: i64) -> Self {
        let queues = queues.iter().map(|queue| (*queue).to_owned()).collect();
        Self { worker_id: worker_id.into(), queues, lease_ms }
    }
}

/// Claims up to `max_items` due items, in claim order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimBatch {
    /// Who claims.
    pub worker_id: String,
    /// The queues to claim from.
    pub queues: Vec<String>,
    /// The lease of every item claimed.
    pub lease_ms: i64,
    /// Most items to claim, at most `Limits::page_size_max`.
    pub max_items: usize,
}

/// Extends a held item's lease to `lease_ms` from now; output the new expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
    /// The new lease length.
    pub lease_ms: i64,
}

/// Replaces a held item's payload: progress a worker wants the item's next claim to see (a
/// retry, or another worker after this one's lease lapsed). A lease-holder write, fenced like
/// [`Heartbeat`]. The item's dedupe key keeps matching the payload it was enqueued with.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
    /// The new payload, at most `Limits::payload_bytes_max` encoded.
    pub payload: Value,
}

/// Completes a held item.
#[derive(Debug, Clone, PartialEq)]
pub struct Complete {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
    /// What the work produced.
    pub result: Value,
}

/// One item of a [`CompleteBatch`].
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
    /// What the work produced.
    pub result: Value,
}

/// Completes many held items: all of them, or (if any lease is lost) none.
#[derive(Debug, Clone, PartialEq)]
pub struct CompleteBatch {
    /// The completions, at most `Limits::page_size_max`.
    pub items: Vec<Completion>,
}

/// Records a failed attempt of a held item: retry after the backoff, or dead-letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
    /// What went wrong; kept as the item's `last_error`.
    pub error: String,
    /// False dead-letters the item at once.
    pub retryable: bool,
}

/// Returns a held item to pending and refunds its attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
}

/// Puts a held item back to run again `delay_ms` from now without spending an attempt: pending,
/// due then, its attempt refunded (the next claim is the same attempt number again), a
/// lease-holder write fenced like [`Complete`]. Output when it is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snooze {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
    /// How long from now until it is due again, within `0..=SNOOZE_MS_MAX`.
    pub delay_ms: i64,
}

/// Completes a held item and claims the next due one, in one op (one round trip, one commit
/// for both): what a worker does between two items. If the completion is refused (a lost
/// lease, say), nothing is claimed and the error is returned.
#[derive(Debug, Clone, PartialEq)]
pub struct CompleteAndClaim {
    /// The item to complete.
    pub completion: Completion,
    /// The claim to make once it is completed.
    pub next: Claim,
}

/// Records a failed attempt of a held item (as [`Fail`]) and claims the next due item, in one
/// op. If the failure is refused (a lost lease, say), nothing is claimed and the error is
/// returned. Output: what the failure did, and the next item, if one was due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailAndClaim {
    /// The failed attempt.
    pub failure: Fail,
    /// The claim to make once it is recorded.
    pub next: Claim,
}

/// How a worker ends its hold on an item, in a [`Cycle`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Settlement {
    /// Completes it (as [`Complete`]).
    Complete(Completion),
    /// Records a failed attempt (as [`Fail`]).
    Fail(Fail),
    /// Gives it back, its attempt refunded (as [`Release`]).
    Release(Release),
    /// Puts it back to run later, its attempt refunded (as [`Snooze`]).
    Snooze(Snooze),
}

impl Settlement {
    /// The item settled.
    pub fn id(&self) -> &str {
        match self {
            Settlement::Complete(done) => &done.id,
            Settlement::Fail(fail) => &fail.id,
            Settlement::Release(release) => &release.id,
            Settlement::Snooze(snooze) => &snooze.id,
        }
    }

    /// The fence the item was claimed under.
    pub(crate) fn fence(&self) -> u64 {
        match self {
            Settlement::Complete(done) => done.fence,
            Settlement::Fail(fail) => fail.fence,
            Settlement::Release(release) => release.fence,
            Settlement::Snooze(snooze) => snooze.fence,
        }
    }
}

/// What a [`Settlement`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// The item is completed.
    Completed,
    /// The failure was recorded: a retry, or a dead letter.
    Failed(FailOutcome),
    /// The item is pending again.
    Released,
    /// The item is pending again, due at `run_at_ms`.
    Snoozed {
        /// When it is due again.
        run_at_ms: i64,
    },
}

/// A lease to renew in a [`Cycle`]: the item and the fence of its holder's claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The item.
    pub id: String,
    /// The fence of the holder's claim.
    pub fence: u64,
}

/// One round of a worker pool, in one op: settles the items its handlers finished, renews the
/// leases of the items they still hold (to `lease_ms` from now), and claims up to `claim_max`
/// more items of `queues` for the handlers that are free.
///
/// Each settlement and each renewal stands alone: one that is refused (`LeaseLost`, or
/// `NotFound`; also `TooLarge` for a result past the payload limit) is answered with its error
/// in its place and writes nothing, and the others go on. A storage error fails the whole op.
/// The events are those of the single-item ops, one per queue and kind for the whole round.
#[derive(Debug, Clone, PartialEq)]
pub struct Cycle {
    /// Who claims; recorded on the items claimed.
    pub worker_id: String,
    /// The queues to claim from.
    pub queues: Vec<String>,
    /// The lease of every item claimed or renewed.
    pub lease_ms: i64,
    /// The items to settle, at most `Limits::page_size_max`.
    pub settle: Vec<Settlement>,
    /// The leases to renew, at most `Limits::page_size_max`.
    pub renew: Vec<Lease>,
    /// Most items to claim, at most `Limits::page_size_max` (0 claims nothing).
    pub claim_max: usize,
}

/// What a [`Cycle`] did, each list in the order of the op's own.
#[derive(Debug)]
#[non_exhaustive]
pub struct Cycled {
    /// Per settlement: what it did, or why it was refused.
    pub settled: Vec<Result<Settled>>,
    /// Per renewal: the lease's new expiry, or why it was refused.
    pub renewed: Vec<Result<i64>>,
    /// The items claimed, in claim order.
    pub claimed: Vec<Claimed>,
}

/// Treats every expired lease (of `queues`, or of every queue) as a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reclaim {
    /// Limit the sweep to these queues.
    pub queues: Option<Vec<String>>,
}

/// Reads one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    /// The item.
    pub id: String,
}

/// Reads a page of a queue's dead letters, in enqueue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetters {
    /// The queue.
    pub queue: String,
    /// Which page.
    pub page: Page,
}

/// Reads a page of a queue's items with one status, in enqueue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Items {
    /// The queue.
    pub queue: String,
    /// Which items.
    pub filter: ItemFilter,
    /// Which page.
    pub page: Page,
}

/// Gives a dead item fresh attempts, due now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeue {
    /// The item.
    pub id: String,
}

/// Requeues every dead item of a queue; output how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequeueAll {
    /// The queue.
    pub queue: String,
}

/// Deletes every dead item of a queue; output how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeDead {
    /// The queue.
    pub queue: String,
}

/// Cancels a live item: a pending one, or a claimed one while its handler runs (its holder's
/// later writes are refused with `LeaseLost`; it is never retried).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The item.
    pub id: String,
}

/// Cancels every live item linked to a workflow execution; output how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelExecution {
    /// The execution.
    pub execution_id: String,
}

/// The counts of every queue of the tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats;

/// Where the tenant's kept counts of finished items differ from a recount of the items; see
/// [`Queue::audit_counts`](super::Queue::audit_counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCounts;

/// Deletes completed and cancelled items finished more than `older_than_ms` ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneCompleted {
    /// Age in milliseconds, at least 0.
    pub older_than_ms: i64,
}

/// Turns a queue's per-item events on or off; see [`Queue::set_item_events`](super::Queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetItemEvents {
    /// The queue.
    pub queue: String,
    /// True: every item change appends an event to the queue's stream (the default).
    pub enabled: bool,
}

/// Pauses or resumes a queue; see [`Queue::pause`](super::Queue::pause).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetPaused {
    /// The queue.
    pub queue: String,
    /// True pauses it; false resumes it.
    pub paused: bool,
}

/// Sets or lifts a queue's concurrency limit; see
/// [`Queue::set_concurrency`](super::Queue::set_concurrency).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetConcurrency {
    /// The queue.
    pub queue: String,
    /// Most items of the queue claimed at once, at least 1; `None` lifts the limit.
    pub concurrency_max: Option<u32>,
}

/// Whether a queue appends per-item events; output true unless they were turned off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemEvents {
    /// The queue.
    pub queue: String,
}

/// When the earliest pending item of `queues` is (or was) due, if there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextDue {
    /// The queues to look at.
    pub queues: Vec<String>,
}

impl Sealed for Enqueue {}
impl Op for Enqueue {
    type Output = Enqueued;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depths(std::iter::once(&self.item.payload).chain(&self.item.metadata))
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Enqueued> {
        check_callers_key(&self.item)?;
        let mut notes = Notes::default();
        let enqueued = enqueue(tx, self.item, &mut notes)?;
        notes.append(tx)?;
        Ok(enqueued)
    }
}

impl Sealed for EnqueueBatch {
    fn shares_turn(&self) -> bool {
        self.items.iter().all(plain)
    }
}
impl Op for EnqueueBatch {
    type Output = Vec<Enqueued>;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depths(
            self.items.iter().flat_map(|item| std::iter::once(&item.payload).chain(&item.metadata)),
        )
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Enqueued>> {
        check_count(tx, "enqueue batch", self.items.len())?;
        self.items.iter().try_for_each(check_callers_key)?;
        let mut notes = Notes::default();
        if tx.db().is_postgres() && sets::insertable_at_once(&self.items) {
            let enqueued = sets::enqueue_all(tx, &self.items, &mut notes)?;
            notes.append(tx)?;
            return Ok(enqueued);
        }
        let enqueued = self
            .items
            .into_iter()
            .map(|item| enqueue(tx, item, &mut notes))
            .collect::<Result<Vec<_>>>()?;
        notes.append(tx)?;
        Ok(enqueued)
    }
}

impl Sealed for Claim {}
impl Op for Claim {
    type Output = Option<Claimed>;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<Claimed>> {
        let claimed = claim(tx, &self.worker_id, &self.queues, self.lease_ms, 1)?;
        Ok(claimed.into_iter().next())
    }
}

impl Sealed for ClaimBatch {
    fn shares_turn(&self) -> bool {
        true
    }
}
impl Op for ClaimBatch {
    type Output = Vec<Claimed>;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Claimed>> {
        check_count(tx, "claim batch", self.max_items)?;
        claim(tx, &self.worker_id, &self.queues, self.lease_ms, self.max_items)
    }
}

impl Sealed for Heartbeat {}
impl Op for Heartbeat {
    type Output = i64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<i64> {
        tx.limits().check_lease(self.lease_ms)?;
        let expires_at_ms = tx.now_ms().saturating_add(self.lease_ms);
        let held = sql::Held { tenant: tx.tenant(), id: &self.id, fence: self.fence };
        if !sql::renew_lease(tx.db(), &held, tx.now_ms(), expires_at_ms)? {
            return Err(lease_lost(tx, &self.id, self.fence)?);
        }
        Ok(expires_at_ms)
    }
}

impl Sealed for Checkpoint {}
impl Op for Checkpoint {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.payload)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let encoded = serde_json::to_string(&self.payload)?;
        tx.limits().check_payload("payload bytes", &encoded)?;
        let held = sql::Held { tenant: tx.tenant(), id: &self.id, fence: self.fence };
        if !sql::replace_payload(tx.db(), &held, tx.now_ms(), &encoded)? {
            return Err(lease_lost(tx, &self.id, self.fence)?);
        }
        Ok(())
    }
    fn single_write(&self) -> bool {
        true
    }
}

impl Sealed for Complete {}
impl Op for Complete {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.result)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let mut notes = Notes::default();
        complete(
            tx,
            Completion { id: self.id, fence: self.fence, result: self.result },
            &mut notes,
        )?;
        notes.append(tx)
    }
}

impl Sealed for CompleteBatch {
    fn shares_turn(&self) -> bool {
        true
    }
}
impl Op for CompleteBatch {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depths(self.items.iter().map(|done| &done.result))
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        check_count(tx, "complete batch", self.items.len())?;
        let distinct: std::collections::BTreeSet<&str> =
            self.items.iter().map(|completion| completion.id.as_str()).collect();
        if distinct.len() != self.items.len() {
            return Err(Error::InvalidInput("an item appears twice in the batch".into()));
        }
        let mut notes = Notes::default();
        if tx.db().is_postgres() {
            complete_all_or_none(tx, &self.items, &mut notes)?;
            return notes.append(tx);
        }
        for completion in self.items {
            complete(tx, completion, &mut notes)?;
        }
        notes.append(tx)
    }
}

impl Sealed for Fail {}
impl Op for Fail {
    type Output = FailOutcome;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<FailOutcome> {
        fail(tx, &self)
    }
}

impl Sealed for Release {}
impl Op for Release {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        release(tx, &self)
    }
}

impl Sealed for CompleteAndClaim {}
impl Op for CompleteAndClaim {
    type Output = Option<Claimed>;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.completion.result)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<Claimed>> {
        let mut notes = Notes::default();
        complete(tx, self.completion, &mut notes)?;
        // The completion's events go with the claim's (one statement on PostgreSQL).
        let owed = notes.into_events(tx)?;
        let next = self.next;
        let claimed = claim_after(tx, &next.worker_id, &next.queues, next.lease_ms, 1, owed)?;
        Ok(claimed.into_iter().next())
    }
}

impl Sealed for FailAndClaim {}
impl Op for FailAndClaim {
    type Output = (FailOutcome, Option<Claimed>);
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<(FailOutcome, Option<Claimed>)> {
        let outcome = fail(tx, &self.failure)?;
        let next = self.next;
        let claimed = claim(tx, &next.worker_id, &next.queues, next.lease_ms, 1)?;
        Ok((outcome, claimed.into_iter().next()))
    }
}

impl Sealed for Cycle {
    fn shares_turn(&self) -> bool {
        true
    }
}
impl Op for Cycle {
    type Output = Cycled;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depths(self.settle.iter().filter_map(|settlement| match settlement {
            Settlement::Complete(done) => Some(&done.result),
            _ => None,
        }))
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Cycled> {
        tx.limits().check_id("worker id", &self.worker_id)?;
        check_queues(tx, &self.queues)?;
        tx.limits().check_lease(self.lease_ms)?;
        check_count(tx, "settlements", self.settle.len())?;
        check_count(tx, "renewals", self.renew.len())?;
        check_count(tx, "claims", self.claim_max)?;
        // On PostgreSQL the round's events are appended together, after its claims.
        let (settled, owed) = settle_all(tx, self.settle)?;
        let renewed = renew_all(tx, &self.renew, self.lease_ms)?;
        let claimed = match self.claim_max {
            0 => {
                notes::append_events(tx, owed)?;
                Vec::new()
            }
            max => claim_after(tx, &self.worker_id, &self.queues, self.lease_ms, max, owed)?,
        };
        Ok(Cycled { settled, renewed, claimed })
    }
}

impl Sealed for Reclaim {}
impl Op for Reclaim {
    type Output = Reclaimed;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Reclaimed> {
        if let Some(queues) = &self.queues {
            check_queues(tx, queues)?;
        }
        reclaim(tx, self.queues.as_deref())
    }
}

impl Sealed for Get {}
impl Op for Get {
    type Output = QueueItem;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<QueueItem> {
        item(tx, &self.id)?.into_item()
    }
}

impl Sealed for DeadLetters {}
impl Op for DeadLetters {
    type Output = Vec<QueueItem>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<QueueItem>> {
        let filter = ItemFilter::status(ItemStatus::Dead);
        Items { queue: self.queue, filter, page: self.page }.apply(tx)
    }
}

impl Sealed for Items {}
impl Op for Items {
    type Output = Vec<QueueItem>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<QueueItem>> {
        tx.limits().check_id("queue", &self.queue)?;
        tx.limits().check_page(self.page.limit)?;
        let after = self.page.after.as_deref().unwrap_or("");
        let (queue, limit) = (&self.queue, self.page.limit);
        let due_by_ms = self.filter.due.map(|due| (due, tx.now_ms()));
        let (status, tag) = (self.filter.status, self.filter.tag.as_deref());
        if let Some(tag) = tag {
            tx.limits().check_id("tag", tag)?;
        }
        let metadata = encode_metadata_conditions(tx.limits(), &self.filter.metadata)?;
        let (db, tenant) = (tx.db(), tx.tenant());
        let which = sql::Which { status, due_by_ms, tag, metadata: &metadata };
        let rows = sql::select_items(db, tenant, queue, which, (after, limit))?;
        rows.into_iter().map(ItemRow::into_item).collect()
    }
}

impl Sealed for Requeue {}
impl Op for Requeue {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let item = item_in(tx, &self.id, ItemStatus::Dead)?;
        let mut notes = Notes::default();
        if !requeue(tx, &item, &mut notes)? {
            return Err(Error::Conflict(format!(
                "a live item of {} holds its dedupe key",
                item.queue
            )));
        }
        notes.append(tx)
    }
}

impl Sealed for RequeueAll {}
impl Op for RequeueAll {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        tx.limits().check_id("queue", &self.queue)?;
        let limit = tx.limits().page_size_max;
        let which = sql::Which::status(ItemStatus::Dead);
        let dead = sql::select_items(tx.db(), tx.tenant(), &self.queue, which, ("", limit))?;
        let mut notes = Notes::default();
        let mut requeued = 0;
        for item in &dead {
            requeued += u64::from(requeue(tx, item, &mut notes)?);
        }
        notes.append(tx)?;
        Ok(requeued)
    }
}

impl Sealed for PurgeDead {}
impl Op for PurgeDead {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        tx.limits().check_id("queue", &self.queue)?;
        sql::delete_dead(tx.db(), tx.tenant(), &self.queue, tx.limits().page_size_max)
    }
}

impl Sealed for Cancel {}
impl Op for Cancel {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let item = item(tx, &self.id)?;
        let detail = match item.status {
            ItemStatus::Pending => json!({}),
            ItemStatus::Claimed => json!({ "running": true, "worker_id": item.worker_id }),
            status => {
                return Err(Error::Conflict(format!(
                    "item {} is {}, not pending or claimed",
                    item.id,
                    status.as_str()
                )));
            }
        };
        sql::cancel(tx.db(), tx.tenant(), &item, tx.now_ms())?;
        item_event(tx, &item, "cancelled", detail)
    }
}

impl Sealed for CancelExecution {}
impl Op for CancelExecution {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        tx.limits().check_id("execution id", &self.execution_id)?;
        let limit = tx.limits().page_size_max;
        let live = sql::select_live_of_execution(tx.db(), tx.tenant(), &self.execution_id, limit)?;
        let mut notes = Notes::default();
        for item in &live {
            sql::cancel(tx.db(), tx.tenant(), item, tx.now_ms())?;
            notes.note(
                &item.queue,
                "cancelled",
                &entry(item, json!({ "execution_id": self.execution_id })),
            )?;
        }
        notes.append(tx)?;
        Ok(live.len() as u64)
    }
}

impl Sealed for Stats {}
impl Op for Stats {
    type Output = Vec<QueueStats>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<QueueStats>> {
        let mut stats = sql::select_stats(tx.db(), tx.tenant(), tx.now_ms())?;
        let controlled = sql::select_controlled(tx.db(), tx.tenant())?;
        if controlled.is_empty() {
            return Ok(stats);
        }
        for settings in controlled {
            let index = match stats.binary_search_by(|s| s.queue.cmp(&settings.queue)) {
                Ok(index) => index,
                Err(index) => {
                    stats.insert(index, QueueStats::empty(settings.queue.clone()));
                    index
                }
            };
            stats[index].paused = settings.paused;
            stats[index].concurrency_max = settings.concurrency_max;
        }
        Ok(stats)
    }
}

impl Sealed for AuditCounts {}
impl Op for AuditCounts {
    type Output = Vec<String>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<String>> {
        let [kept, counted] = sql::select_counts_and_recount(tx.db(), tx.tenant())?;
        Ok(counts::differences(kept, counted))
    }
}

impl Sealed for PruneCompleted {}
impl Op for PruneCompleted {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        if self.older_than_ms < 0 {
            return Err(Error::InvalidInput("older_than_ms must not be negative".into()));
        }
        let cutoff_ms = tx.now_ms().saturating_sub(self.older_than_ms);
        sql::delete_finished_before(tx.db(), tx.tenant(), cutoff_ms, tx.limits().page_size_max)
    }
}

impl Sealed for SetItemEvents {}
impl Op for SetItemEvents {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.limits().check_id("queue", &self.queue)?;
        sql::set_item_events(tx.db(), tx.tenant(), &self.queue, self.enabled, tx.now_ms())?;
        // Written whatever the setting: a follower sees why the stream goes quiet.
        let payload = json!({ "enabled": self.enabled });
        events::append(tx, &Stream::queue(&self.queue), "item_events", payload, None)?;
        Ok(())
    }
}

impl Sealed for SetPaused {}
impl Op for SetPaused {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.limits().check_id("queue", &self.queue)?;
        sql::set_paused(tx.db(), tx.tenant(), &self.queue, self.paused, tx.now_ms())?;
        let event_type = if self.paused { "paused" } else { "resumed" };
        events::append(tx, &Stream::queue(&self.queue), event_type, json!({}), None)?;
        if !self.paused {
            tx.ring_bell();
        }
        Ok(())
    }
}

impl Sealed for SetConcurrency {}
impl Op for SetConcurrency {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.limits().check_id("queue", &self.queue)?;
        if self.concurrency_max == Some(0) {
            return Err(Error::InvalidInput("a concurrency limit is at least 1".into()));
        }
        let (queue, max) = (&self.queue, self.concurrency_max);
        sql::set_concurrency(tx.db(), tx.tenant(), queue, max, tx.now_ms())?;
        let payload = json!({ "concurrency_max": max });
        events::append(tx, &Stream::queue(queue), "concurrency", payload, None)?;
        tx.ring_bell();
        Ok(())
    }
}

impl Sealed for Snooze {}
impl Op for Snooze {
    type Output = i64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<i64> {
        snooze(tx, &self)
    }
}

impl Sealed for ItemEvents {}
impl Op for ItemEvents {
    type Output = bool;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<bool> {
        tx.limits().check_id("queue", &self.queue)?;
        sql::item_events(tx.db(), tx.tenant(), &self.queue)
    }
}

impl Sealed for NextDue {}
impl Op for NextDue {
    type Output = Option<i64>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<i64>> {
        check_queues(tx, &self.queues)?;
        let mut earliest: Option<i64> = None;
        for queue in &self.queues {
            let due = next_due_in(tx, queue)?;
            earliest = match (earliest, due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(earliest)
    }
}

/// A `claimed` event's entry (fields in the order a JSON object's keys sort, as every entry).
#[derive(Serialize)]
struct ClaimedEntry<'a> {
    attempt: u32,
    fence: u64,
    id: &'a str,
    lease_expires_at_ms: i64,
    worker_id: &'a str,
}

/// A `completed` event's entry.
#[derive(Serialize)]
struct CompletedEntry<'a> {
    attempt: u32,
    fence: u64,
    id: &'a str,
}

/// An `enqueued` event's entry.
#[derive(Serialize)]
struct EnqueuedEntry<'a> {
    id: &'a str,
    priority: i64,
    run_at_ms: i64,
}

/// Checks and inserts one item, or finds its live duplicate.
fn enqueue(tx: &mut Tx<'_>, item: NewItem, notes: &mut Notes) -> Result<Enqueued> {
    let encoded = check_new_item(tx, &item)?;
    let hash = item.dedupe_key.as_ref().map(|_| content_hash(&item.payload));
    if let (Some(key), Some(hash)) = (&item.dedupe_key, &hash)
        && let Some(live) = sql::select_live_by_dedupe(tx.db(), tx.tenant(), &item.queue, key)?
    {
        return deduplicated(live, hash, key);
    }
    let run_at_ms = item.run_at_ms.unwrap_or(tx.now_ms());
    let window = match &item.unique {
        Some(unique) => {
            let window = unique_window(tx, &item, unique)?;
            if let Some(held) = held_key(tx, &item, unique, window, (&encoded, run_at_ms), notes)? {
                return Ok(held);
            }
            Some((unique.key.as_str(), window))
        }
        None => None,
    };
    let id = tx.new_id();
    let (tags, metadata) = encode_extras(tx, &item)?;
    let row = sql::NewRow {
        id: &id,
        item: &item,
        encoded: &encoded,
        tags: tags.as_deref(),
        metadata: metadata.as_deref(),
        hash: hash.as_deref(),
        run_at_ms,
    };
    sql::insert(tx.db(), tx.tenant(), tx.now_ms(), &row)?;
    if let Some(key) = window {
        sql::set_unique_holder(tx.db(), tx.tenant(), &item.queue, key, &id)?;
    }
    let entry = EnqueuedEntry { id: &id, priority: item.priority, run_at_ms };
    notes.note(&item.queue, "enqueued", &entry)?;
    tx.ring_bell();
    Ok(Enqueued { id, deduplicated: false })
}

/// Checks `unique` (beside no dedupe key); returns the start of the window the enqueue falls
/// in (0 without a period).
fn unique_window(tx: &Tx<'_>, item: &NewItem, unique: &Unique) -> Result<i64> {
    tx.limits().check_id("unique key", &unique.key)?;
    if item.dedupe_key.is_some() {
        return Err(Error::InvalidInput(
            "an item is made unique by a dedupe key or by unique, not both".into(),
        ));
    }
    if unique.states.is_empty() {
        return Err(Error::InvalidInput("a unique key holds in at least one status".into()));
    }
    match unique.period_ms {
        None => Ok(0),
        Some(period_ms) if (1..=SNOOZE_MS_MAX).contains(&period_ms) => {
            let now_ms = tx.now_ms();
            Ok(now_ms - now_ms.rem_euclid(period_ms))
        }
        Some(period_ms) => Err(Error::InvalidInput(format!(
            "a unique period is 1..={SNOOZE_MS_MAX} ms, not {period_ms}"
        ))),
    }
}

/// The holder of `unique`'s key in `window`, if one holds it in a status the key names: kept,
/// or (`Replace`, while pending) given the new payload and run time. `None`: the new item is
/// enqueued and holds the key.
fn held_key(
    tx: &mut Tx<'_>,
    item: &NewItem,
    unique: &Unique,
    window: i64,
    (encoded, run_at_ms): (&str, i64),
    notes: &mut Notes,
) -> Result<Option<Enqueued>> {
    let holder = sql::select_unique_holder(tx.db(), tx.tenant(), &item.queue, &unique.key, window)?;
    let Some(holder) = holder.filter(|holder| unique.states.contains(&holder.status)) else {
        return Ok(None);
    };
    let replace = unique.on_conflict == OnConflict::Replace;
    let (db, tenant, now_ms) = (tx.db(), tx.tenant(), tx.now_ms());
    if replace && sql::replace_pending(db, tenant, &holder.id, (encoded, run_at_ms), now_ms)? {
        notes.note(&item.queue, "replaced", &entry(&holder, json!({ "run_at_ms": run_at_ms })))?;
        tx.ring_bell();
    }
    Ok(Some(Enqueued { id: holder.id, deduplicated: true }))
}

fn deduplicated(live: sql::LiveDuplicate, hash: &str, key: &str) -> Result<Enqueued> {
    if live.payload_hash.as_deref() != Some(hash) {
        return Err(Error::Conflict(format!(
            "dedupe key {key:?} is held by live item {} with another payload",
            live.id
        )));
    }
    Ok(Enqueued { id: live.id, deduplicated: true })
}

/// Settles each item on its own: a refused one is answered with its error and writes nothing.
/// Returns the answers, and the events the round still owes (PostgreSQL's set-based form
/// leaves them for the round to append with its claims').
fn settle_all(
    tx: &mut Tx<'_>,
    settle: Vec<Settlement>,
) -> Result<(Vec<Result<Settled>>, Vec<QueueEvent>)> {
    if tx.db().is_postgres() && sets::settles_at_once(&settle) {
        return sets::settle_all(tx, &settle);
    }
    let mut notes = Notes::default();
    let mut settled = Vec::with_capacity(settle.len());
    for settlement in settle {
        let result = match settlement {
            Settlement::Complete(done) => {
                complete(tx, done, &mut notes).map(|()| Settled::Completed)
            }
            Settlement::Fail(failure) => fail(tx, &failure).map(Settled::Failed),
            Settlement::Release(release_) => release(tx, &release_).map(|()| Settled::Released),
            Settlement::Snooze(snooze_) => {
                snooze(tx, &snooze_).map(|run_at_ms| Settled::Snoozed { run_at_ms })
            }
        };
        settled.push(item_level(result)?);
    }
    notes.append(tx)?;
    Ok((settled, Vec::new()))
}

/// Renews each lease on its own: a lost one is answered with its error.
fn renew_all(tx: &mut Tx<'_>, renew: &[Lease], lease_ms: i64) -> Result<Vec<Result<i64>>> {
    if tx.db().is_postgres() {
        return sets::renew_all(tx, renew, lease_ms);
    }
    let expires_at_ms = tx.now_ms().saturating_add(lease_ms);
    let mut renewed = Vec::with_capacity(renew.len());
    for lease in renew {
        let held = sql::Held { tenant: tx.tenant(), id: &lease.id, fence: lease.fence };
        let result = if sql::renew_lease(tx.db(), &held, tx.now_ms(), expires_at_ms)? {
            Ok(expires_at_ms)
        } else {
            lost_answer(tx, &lease.id, lease.fence)?
        };
        renewed.push(result);
    }
    Ok(renewed)
}

/// Keeps an error that refused one item of a round (each is raised before that item writes
/// anything) in its place; any other error fails the round.
fn item_level<T>(result: Result<T>) -> Result<Result<T>> {
    match result {
        Err(
            error @ (Error::LeaseLost(_)
            | Error::NotFound { .. }
            | Error::InvalidInput(_)
            | Error::TooLarge { .. }),
        ) => Ok(Err(error)),
        Err(error) => Err(error),
        Ok(value) => Ok(Ok(value)),
    }
}

/// Records a failed attempt of a held item.
fn fail(tx: &mut Tx<'_>, failure: &Fail) -> Result<FailOutcome> {
    check_text(tx, "error", &failure.error)?;
    let item = held(tx, &failure.id, failure.fence)?;
    settle_failure(tx, &item, &failure.error, failure.retryable)
}

/// Gives a held item back, its attempt refunded.
fn release(tx: &mut Tx<'_>, release: &Release) -> Result<()> {
    let item = held(tx, &release.id, release.fence)?;
    sql::release(tx.db(), tx.tenant(), &item.id, item.fence, tx.now_ms())?;
    item_event(tx, &item, "released", json!({}))?;
    tx.ring_bell();
    Ok(())
}

/// The longest a snooze may put an item off: a year, in milliseconds.
pub const SNOOZE_MS_MAX: i64 = 366 * 24 * 3_600_000;

/// Puts a held item back to run after `delay_ms`, its attempt refunded; returns when it is due.
fn snooze(tx: &mut Tx<'_>, snooze: &Snooze) -> Result<i64> {
    if !(0..=SNOOZE_MS_MAX).contains(&snooze.delay_ms) {
        return Err(Error::InvalidInput(format!(
            "a snooze is 0..={SNOOZE_MS_MAX} ms, not {}",
            snooze.delay_ms
        )));
    }
    let item = held(tx, &snooze.id, snooze.fence)?;
    let run_at_ms = tx.now_ms().saturating_add(snooze.delay_ms);
    let held = sql::Held { tenant: tx.tenant(), id: &snooze.id, fence: snooze.fence };
    if !sql::snooze(tx.db(), &held, tx.now_ms(), run_at_ms)? {
        return Err(lease_lost(tx, &snooze.id, snooze.fence)?);
    }
    item_event(tx, &item, "snoozed", json!({ "run_at_ms": run_at_ms }))?;
    tx.ring_bell();
    Ok(run_at_ms)
}

/// When something of `queue` may next be claimed: never while it is paused; while it is full,
/// when its first lease expires (a settlement before that rings the bell); otherwise its
/// earliest due item or lease expiry.
fn next_due_in(tx: &Tx<'_>, queue: &str) -> Result<Option<i64>> {
    let (db, tenant) = (tx.db(), tx.tenant());
    match sql::select_settings(db, tenant, queue)? {
        Some(settings) if settings.paused => Ok(None),
        Some(sql::Settings { concurrency_max: Some(max), .. })
            if sql::count_claimed(db, tenant, queue)? >= u64::from(max) =>
        {
            sql::select_next_expiry(db, tenant, queue)
        }
        _ => sql::select_next_due(db, tenant, queue),
    }
}

/// Sweeps expired leases, then claims up to `max_items` due items of `queues`.
fn claim(
    tx: &mut Tx<'_>,
    worker_id: &str,
    queues: &[String],
    lease_ms: i64,
    max_items: usize,
) -> Result<Vec<Claimed>> {
    claim_after(tx, worker_id, queues, lease_ms, max_items, Vec::new())
}

/// As `claim`, appending `owed` (events of the op's earlier work) before the claims' events:
/// one statement for all on PostgreSQL, unless expired leases are swept in between (their
/// events then go first, in their own).
fn claim_after(
    tx: &mut Tx<'_>,
    worker_id: &str,
    queues: &[String],
    lease_ms: i64,
    max_items: usize,
    mut owed: Vec<QueueEvent>,
) -> Result<Vec<Claimed>> {
    tx.limits().check_id("worker id", worker_id)?;
    check_queues(tx, queues)?;
    tx.limits().check_lease(lease_ms)?;
    let now_ms = tx.now_ms();
    let expires_at_ms = now_ms.saturating_add(lease_ms);
    let mut claimed = Vec::new();
    let mut notes = Notes::default();
    let held = (worker_id, expires_at_ms);
    let item_by_item = if tx.db().is_postgres() {
        // One statement sweeps expired leases, looks for a gated queue and, if it found
        // neither, claims for all the queues: one round trip. One that swept is followed by
        // the settlements of what it swept and a claim that sweeps nothing (the sweep took a
        // page of each queue, as SQLite's does); a gated queue sends the claim item by item.
        let mut sweep = tx.limits().page_size_max;
        loop {
            let found = sets::claim_rows(tx, worker_id, queues, expires_at_ms, max_items, sweep)?;
            let swept = !found.expired.is_empty();
            settle_expired(tx, &found.expired, &mut owed)?;
            if found.gated {
                break true;
            }
            if swept {
                sweep = 0;
                continue;
            }
            for item in found.claimed {
                note_claimed(item, held, &mut notes, &mut claimed)?;
            }
            break false;
        }
    } else {
        reclaim_after(tx, Some(queues), &mut owed)?;
        true
    };
    if item_by_item {
        // A gated queue's claims count what is claimed: two batches sharing the tenant's turn
        // (`Sealed::shares_turn`) must not count the same free places.
        tx.db().lock_tenant_writes(tx.tenant())?;
        // The queues still open to this claim: one whose settings refused a claim (paused, or
        // full) is left out of the next look, which takes the places its items took in this
        // one.
        let mut open: Vec<String> = queues.to_vec();
        loop {
            let wanted = max_items - claimed.len();
            let due = sql::select_due(tx.db(), tx.tenant(), &open, now_ms, wanted)?;
            let before = open.len();
            claim_rows(tx, due, held, &mut open, &mut notes, &mut claimed)?;
            if open.len() == before || open.is_empty() || claimed.len() == max_items {
                break;
            }
        }
    }
    owed.extend(notes.into_events(tx)?);
    notes::append_events(tx, owed)?;
    Ok(claimed)
}

/// Claims each of `due` (as `worker_id`, until `expires_at_ms`) unless its queue's settings
/// refuse it; a refused queue leaves `open`, and its other items are skipped.
fn claim_rows(
    tx: &mut Tx<'_>,
    due: Vec<ItemRow>,
    held: (&str, i64),
    open: &mut Vec<String>,
    notes: &mut Notes,
    claimed: &mut Vec<Claimed>,
) -> Result<()> {
    let (worker_id, expires_at_ms) = held;
    let now_ms = tx.now_ms();
    for row in due {
        if !open.contains(&row.queue) {
            continue;
        }
        let queue = row.queue.clone();
        let claim = sql::claim(tx.db(), tx.tenant(), row, worker_id, now_ms, expires_at_ms)?;
        let Some(item) = claim else {
            open.retain(|open| *open != queue);
            continue;
        };
        note_claimed(item, held, notes, claimed)?;
    }
    Ok(())
}

/// Notes a claimed item's `claimed` event entry and adds it to `claimed`.
fn note_claimed(
    item: ItemRow,
    (worker_id, expires_at_ms): (&str, i64),
    notes: &mut Notes,
    claimed: &mut Vec<Claimed>,
) -> Result<()> {
    let entry = ClaimedEntry {
        attempt: item.attempt,
        fence: item.fence,
        id: &item.id,
        lease_expires_at_ms: expires_at_ms,
        worker_id,
    };
    notes.note(&item.queue, "claimed", &entry)?;
    let fence = item.fence;
    claimed.push(Claimed { item: item.into_item()?, fence, lease_expires_at_ms: expires_at_ms });
    Ok(())
}

fn complete(tx: &mut Tx<'_>, completion: Completion, notes: &mut Notes) -> Result<()> {
    if tx.db().is_postgres() {
        return complete_all_or_none(tx, std::slice::from_ref(&completion), notes);
    }
    let result = serde_json::to_string(&completion.result)?;
    tx.limits().check_payload("result bytes", &result)?;
    let done = sql::complete(
        tx.db(),
        tx.tenant(),
        &completion.id,
        completion.fence,
        tx.now_ms(),
        &result,
    )?;
    let Some(fields) = done else {
        return Err(lease_lost(tx, &completion.id, completion.fence)?);
    };
    let entry =
        CompletedEntry { attempt: fields.attempt, fence: completion.fence, id: &completion.id };
    notes.note(&fields.queue, "completed", &entry)?;
    notes.completed(&fields.queue);
    Ok(())
}

/// Completes every item in one statement (PostgreSQL), or fails with the error of the first
/// that is refused (in their order): the op's savepoint then takes back the others.
fn complete_all_or_none(
    tx: &mut Tx<'_>,
    completions: &[Completion],
    notes: &mut Notes,
) -> Result<()> {
    let mut encoded = Vec::with_capacity(completions.len());
    for (index, completion) in completions.iter().enumerate() {
        let result = serde_json::to_string(&completion.result)?;
        tx.limits().check_payload("result bytes", &result)?;
        encoded.push((index, completion, result));
    }
    for (_, answer) in sets::complete_all(tx, &encoded, notes)? {
        answer?;
    }
    Ok(())
}

/// Sweeps expired leases (of `queues`, or of every queue), at most a page of them per queue.
fn reclaim(tx: &mut Tx<'_>, queues: Option<&[String]>) -> Result<Reclaimed> {
    reclaim_after(tx, queues, &mut Vec::new())
}

/// As `reclaim`, first appending `owed` (and emptying it) if there is a lease to sweep: its
/// events follow those of the op's earlier work.
fn reclaim_after(
    tx: &mut Tx<'_>,
    queues: Option<&[String]>,
    owed: &mut Vec<QueueEvent>,
) -> Result<Reclaimed> {
    let limit = tx.limits().page_size_max;
    let expired = match queues {
        Some(queues) => {
            let mut expired = Vec::new();
            for queue in queues {
                expired.extend(sql::select_expired_in(
                    tx.db(),
                    tx.tenant(),
                    queue,
                    tx.now_ms(),
                    limit,
                )?);
            }
            expired
        }
        None => sql::select_expired(tx.db(), tx.tenant(), tx.now_ms(), limit)?,
    };
    settle_expired(tx, &expired, owed)
}

/// Settles swept items whose lease expired (a retry, or dead), first appending `owed` (and
/// emptying it) if there is one: their events follow those of the op's earlier work.
fn settle_expired(
    tx: &mut Tx<'_>,
    expired: &[ItemRow],
    owed: &mut Vec<QueueEvent>,
) -> Result<Reclaimed> {
    let mut reclaimed = Reclaimed::default();
    if !expired.is_empty() {
        notes::append_events(tx, std::mem::take(owed))?;
    }
    for item in expired {
        match settle_failure(tx, item, "lease expired", true)? {
            FailOutcome::Retrying { .. } => reclaimed.retried += 1,
            FailOutcome::DeadLettered => reclaimed.dead_lettered += 1,
        }
    }
    Ok(reclaimed)
}

/// Ends a failed attempt of a claimed item: a retry after the backoff, or dead.
fn settle_failure(
    tx: &mut Tx<'_>,
    item: &ItemRow,
    error: &str,
    retryable: bool,
) -> Result<FailOutcome> {
    let now_ms = tx.now_ms();
    let outcome = if retryable && item.attempt < item.max_attempts {
        let run_at_ms = now_ms.saturating_add(item.backoff.delay_ms(item.attempt));
        sql::schedule_retry(tx.db(), tx.tenant(), &item.id, item.fence, now_ms, run_at_ms, error)?;
        FailOutcome::Retrying { run_at_ms }
    } else {
        sql::dead_letter(tx.db(), tx.tenant(), item, now_ms, error)?;
        sql::add_to_count_late(tx, &item.queue, ItemStatus::Dead, 1)?;
        tx.tally(Tally::DeadLettered, 1);
        FailOutcome::DeadLettered
    };
    // The event carries the start of the error; the item keeps all of it.
    let error = shortened(error, EVENT_ERROR_BYTES_MAX);
    let (event_type, detail) = match outcome {
        FailOutcome::Retrying { run_at_ms } => {
            ("retried", json!({ "error": error, "run_at_ms": run_at_ms }))
        }
        FailOutcome::DeadLettered => ("dead_lettered", json!({ "error": error })),
    };
    item_event(tx, item, event_type, detail)?;
    if matches!(outcome, FailOutcome::Retrying { .. }) {
        tx.ring_bell();
    }
    Ok(outcome)
}

/// The longest error text an event carries, in bytes.
const EVENT_ERROR_BYTES_MAX: usize = 1024;

/// `text` cut to at most `max_bytes` bytes, on a character boundary.
fn shortened(text: &str, max_bytes: usize) -> &str {
    let mut end = text.len().min(max_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Requeues a dead item; false when a live item holds its dedupe key.
fn requeue(tx: &mut Tx<'_>, item: &ItemRow, notes: &mut Notes) -> Result<bool> {
    if let Some(key) = &item.dedupe_key
        && sql::select_live_by_dedupe(tx.db(), tx.tenant(), &item.queue, key)?.is_some()
    {
        return Ok(false);
    }
    sql::requeue(tx.db(), tx.tenant(), item, tx.now_ms())?;
    notes.note(&item.queue, "requeued", &entry(item, json!({})))?;
    tx.ring_bell();
    Ok(true)
}

/// The claimed item `id` if `fence` holds its live lease; otherwise the reason it does not.
fn held(tx: &Tx<'_>, id: &str, fence: u64) -> Result<ItemRow> {
    let item = item(tx, id)?;
    let live = item.status == ItemStatus::Claimed
        && item.fence == fence
        && item.lease_expires_at_ms.is_some_and(|at| at > tx.now_ms());
    if !live {
        return Err(lease_lost_reason(&item, fence));
    }
    Ok(item)
}

/// The error for a fenced write that matched nothing: `NotFound`, or `LeaseLost` and why.
/// The answer for one item of a round whose holder's write found no lease: `LeaseLost` with
/// the reason, or `NotFound` when the item is gone (cancelled while held, then pruned), for
/// that item alone; only a storage error fails the round.
fn lost_answer<T>(tx: &Tx<'_>, id: &str, fence: u64) -> Result<Result<T>> {
    let error = lease_lost(tx, id, fence).unwrap_or_else(|error| error);
    item_level(Err(error))
}

fn lease_lost(tx: &Tx<'_>, id: &str, fence: u64) -> Result<Error> {
    let item = item(tx, id)?;
    Ok(lease_lost_reason(&item, fence))
}

fn lease_lost_reason(item: &ItemRow, fence: u64) -> Error {
    let why = if item.status != ItemStatus::Claimed {
        format!("item {} is {}", item.id, item.status.as_str())
    } else if item.fence != fence {
        format!(
            "item {} was claimed again (fence {} is stale, current {})",
            item.id, fence, item.fence
        )
    } else {
        format!("the lease of item {} expired", item.id)
    };
    Error::LeaseLost(why)
}

/// The item `id`, which must be in `status` (`Conflict` otherwise).
fn item_in(tx: &Tx<'_>, id: &str, status: ItemStatus) -> Result<ItemRow> {
    let item = item(tx, id)?;
    if item.status != status {
        return Err(Error::Conflict(format!(
            "item {} is {}, not {}",
            item.id,
            item.status.as_str(),
            status.as_str()
        )));
    }
    Ok(item)
}

/// The item `id` of the tenant (`NotFound` for another tenant's), after checking the id.
fn item(tx: &Tx<'_>, id: &str) -> Result<ItemRow> {
    tx.limits().check_id("item id", id)?;
    let row = sql::select_item(tx.db(), tx.tenant(), id)?;
    row.ok_or_else(|| Error::not_found("queue item", id))
}

/// Appends an event about one item to its queue's stream (`{"items": [entry]}`).
fn item_event(
    tx: &mut Tx<'_>,
    item: &ItemRow,
    event_type: &'static str,
    detail: Value,
) -> Result<()> {
    let mut notes = Notes::default();
    notes.note(&item.queue, event_type, &entry(item, detail))?;
    notes.append(tx)
}

/// An event entry for `item`: `detail` with its id, attempt and fence.
fn entry(item: &ItemRow, mut detail: Value) -> Value {
    if let Value::Object(fields) = &mut detail {
        fields.insert("id".into(), json!(item.id));
        fields.insert("attempt".into(), json!(item.attempt));
        fields.insert("fence".into(), json!(item.fence));
    }
    detail
}

/// The largest priority, either way.
pub(crate) const PRIORITY_MAX: i64 = 1_000_000_000;

/// Checks a new item; returns its encoded payload.
fn check_new_item(tx: &Tx<'_>, item: &NewItem) -> Result<String> {
    let limits = tx.limits();
    limits.check_id("queue", &item.queue)?;
    for (what, id) in [
        ("dedupe key", &item.dedupe_key),
        ("execution id", &item.execution_id),
        ("node id", &item.node_id),
    ] {
        if let Some(id) = id {
            limits.check_id(what, id)?;
        }
    }
    if item.max_attempts == 0 || item.max_attempts > limits.max_attempts_max {
        return Err(Error::InvalidInput(format!(
            "max_attempts must be 1..={}, not {}",
            limits.max_attempts_max, item.max_attempts
        )));
    }
    if !(-PRIORITY_MAX..=PRIORITY_MAX).contains(&item.priority) {
        return Err(Error::InvalidInput(format!(
            "priority must be within -{PRIORITY_MAX}..={PRIORITY_MAX}, not {}",
            item.priority
        )));
    }
    if item.backoff.base_ms < 0 || item.backoff.max_ms < item.backoff.base_ms {
        return Err(Error::InvalidInput("backoff must satisfy 0 <= base_ms <= max_ms".into()));
    }
    if let Some(timeout_ms) = item.run_timeout_ms
        && !(1..=limits.lease_ms_max).contains(&timeout_ms)
    {
        return Err(Error::InvalidInput(format!(
            "run_timeout_ms must be 1..={}, not {timeout_ms}",
            limits.lease_ms_max
        )));
    }
    if item.tags.len() > TAGS_MAX {
        return Err(Error::too_large("tags", TAGS_MAX, item.tags.len()));
    }
    for tag in &item.tags {
        limits.check_id("tag", tag)?;
    }
    if item.metadata.as_ref().is_some_and(|metadata| !metadata.is_object()) {
        return Err(Error::InvalidInput("an item's metadata is a JSON object".into()));
    }
    let encoded = serde_json::to_string(&item.payload)?;
    limits.check_payload("payload bytes", &encoded)?;
    Ok(encoded)
}

/// A filter's metadata conditions checked ([`ItemFilter::metadata`]), each as its key and its
/// value's JSON text.
fn encode_metadata_conditions<'f>(
    limits: &Limits,
    conditions: &'f [(String, Value)],
) -> Result<Vec<(&'f str, String)>> {
    if conditions.len() > METADATA_CONDITIONS_MAX {
        return Err(Error::too_large(
            "metadata conditions",
            METADATA_CONDITIONS_MAX,
            conditions.len(),
        ));
    }
    let mut encoded = Vec::with_capacity(conditions.len());
    for (key, value) in conditions {
        limits.check_id("metadata key", key)?;
        if value.is_array() || value.is_object() {
            return Err(Error::InvalidInput(format!(
                "a metadata condition compares with a string, number, boolean or null, not {}",
                if value.is_array() { "an array" } else { "an object" }
            )));
        }
        let text = serde_json::to_string(value)?;
        if text.len() > METADATA_VALUE_BYTES_MAX {
            return Err(Error::too_large(
                "metadata value bytes",
                METADATA_VALUE_BYTES_MAX,
                text.len(),
            ));
        }
        encoded.push((key.as_str(), text));
    }
    Ok(encoded)
}

/// An item's tags as a JSON array and its metadata as JSON, each `None` when it has none.
fn encode_extras(tx: &Tx<'_>, item: &NewItem) -> Result<(Option<String>, Option<String>)> {
    let tags = match item.tags.is_empty() {
        true => None,
        false => Some(serde_json::to_string(&item.tags)?),
    };
    let metadata = item.metadata.as_ref().map(serde_json::to_string).transpose()?;
    if let Some(metadata) = &metadata {
        tx.limits().check_payload("metadata bytes", metadata)?;
    }
    Ok((tags, metadata))
}

/// Whether `item` is enqueued by its insert alone: no dedupe key or unique key, whose holder
/// an enqueue reads before it writes (such an enqueue keeps its tenant's turn whole).
fn plain(item: &NewItem) -> bool {
    item.dedupe_key.is_none() && item.unique.is_none()
}

/// Refuses a caller's unique key in the schedules' own space (`schedule:`): a caller's item
/// there would stand for a tick the schedule then never enqueues.
fn check_callers_key(item: &NewItem) -> Result<()> {
    let prefix = crate::queue::schedule::TICK_KEY_PREFIX;
    match &item.unique {
        Some(unique) if unique.key.starts_with(prefix) => Err(Error::InvalidInput(format!(
            "unique keys starting with {prefix:?} are the schedules' own"
        ))),
        _ => Ok(()),
    }
}

fn check_queues(tx: &Tx<'_>, queues: &[String]) -> Result<()> {
    if queues.is_empty() {
        return Err(Error::InvalidInput("name at least one queue".into()));
    }
    check_count(tx, "queues", queues.len())?;
    queues.iter().try_for_each(|queue| tx.limits().check_id("queue", queue))
}

fn check_count(tx: &Tx<'_>, what: &'static str, count: usize) -> Result<()> {
    let max = tx.limits().page_size_max;
    if count > max {
        return Err(Error::too_large(what, max, count));
    }
    Ok(())
}

/// Errors are kept as text; they are bounded like payloads.
fn check_text(tx: &Tx<'_>, what: &'static str, text: &str) -> Result<()> {
    tx.limits().check_payload(what, text)
}

#[cfg(test)]
mod tests {
    use super::notes::items_payload;
    use super::*;

    /// An entry struct encodes to the text its JSON value did before (serde_json sorts an
    /// object's keys), so the stored events do not change with the way they are built.
    #[test]
    fn entries_encode_as_their_json_values_did() -> Result<()> {
        let claimed = ClaimedEntry {
            attempt: 2,
            fence: 7,
            id: "i-1",
            lease_expires_at_ms: 1_000,
            worker_id: "w",
        };
        let value = json!({ "id": "i-1", "attempt": 2, "fence": 7, "worker_id": "w",
                            "lease_expires_at_ms": 1_000 });
        assert_eq!(serde_json::to_string(&claimed)?, serde_json::to_string(&value)?);
        let completed = CompletedEntry { attempt: 2, fence: 7, id: "i-1" };
        let value = json!({ "id": "i-1", "attempt": 2, "fence": 7 });
        assert_eq!(serde_json::to_string(&completed)?, serde_json::to_string(&value)?);
        let enqueued = EnqueuedEntry { id: "i-1", priority: -3, run_at_ms: 5 };
        let value = json!({ "id": "i-1", "priority": -3, "run_at_ms": 5 });
        assert_eq!(serde_json::to_string(&enqueued)?, serde_json::to_string(&value)?);
        Ok(())
    }

    #[test]
    fn a_batchs_entries_make_one_items_payload() -> Result<()> {
        let mut notes = Notes::default();
        for id in ["a", "b"] {
            notes.note("q", "completed", &CompletedEntry { attempt: 1, fence: 1, id })?;
        }
        notes.note("p", "completed", &CompletedEntry { attempt: 1, fence: 3, id: "c" })?;
        let q = notes.pending.iter().find(|noted| noted.queue == "q").expect("q noted");
        let payload: Value = serde_json::from_str(&items_payload(&q.entries))?;
        let expected = json!({ "items": [
            { "id": "a", "attempt": 1, "fence": 1 },
            { "id": "b", "attempt": 1, "fence": 1 },
        ] });
        assert_eq!(payload, expected);
        assert_eq!(notes.pending.len(), 2, "one event per queue and kind");
        Ok(())
    }
}
