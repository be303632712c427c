//! The model of the work queue (DESIGN.md §5.3) for one tenant: items with priorities, delays,
//! attempts, fenced leases, retries with the default backoff, dead letters, requeue and cancel
//! (of pending and claimed items), paused queues, per-queue concurrency limits, snooze.
//! The caller passes the store's time (`Stamp`) to every call.

use spindle::{FailOutcome, ItemStatus};

use super::{Expect, Refusal};

/// The longest lease the store accepts (`Limits::lease_max_ms`, 24 h).
pub const LEASE_MAX_MS: i64 = 24 * 60 * 60 * 1000;

/// The model's view of one item.
#[derive(Debug, Clone)]
pub struct Item {
    pub id: String,
    pub queue: String,
    pub priority: i64,
    pub run_at_ms: i64,
    pub attempt: u32,
    pub max_attempts: u32,
    pub status: ItemStatus,
    pub fence: u64,
    pub lease_expires_at_ms: i64,
    /// When it was completed, dead-lettered or cancelled (what `prune_completed` compares).
    pub finished_at_ms: Option<i64>,
}

/// What a sweep of expired leases did, as `Reclaimed` counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub retried: u64,
    pub dead_lettered: u64,
}

/// A claim's grant: `(id, fence, lease_expires_at_ms)`.
pub type Granted = (String, u64, i64);

/// The items of one tenant, in enqueue order.
#[derive(Debug, Clone, Default)]
pub struct QueueModel {
    pub items: Vec<Item>,
    /// The queues paused: nobody claims their items.
    pub paused: Vec<String>,
    /// The queues' concurrency limits: at most this many of their items claimed at once.
    pub limits: Vec<(String, u32)>,
}

/// The default backoff: 1 s doubling per attempt, at most 64 s.
pub fn backoff_ms(attempt: u32) -> i64 {
    (1_000_i64 << attempt.saturating_sub(1).min(62)).min(64_000)
}

/// Whether the store accepts `lease_ms`.
pub fn valid_lease(lease_ms: i64) -> bool {
    (1..=LEASE_MAX_MS).contains(&lease_ms)
}

impl QueueModel {
    /// Records an item the store enqueued with `id`.
    pub fn enqueue(&mut self, id: String, queue: &str, priority: i64, run_at_ms: i64, max: u32) {
        self.items.push(Item {
            id,
            queue: queue.to_owned(),
            priority,
            run_at_ms,
            attempt: 0,
            max_attempts: max,
            status: ItemStatus::Pending,
            fence: 0,
            lease_expires_at_ms: 0,
            finished_at_ms: None,
        });
    }

    /// The index of item `id`.
    pub fn index(&self, id: &str) -> Option<usize> {
        self.items.iter().position(|item| item.id == id)
    }

    /// Expired leases of `queues` (every queue for `None`) become retries or dead letters.
    pub fn reclaim(&mut self, queues: Option<&[&str]>, now_ms: i64) -> Swept {
        let mut swept = Swept::default();
        for item in &mut self.items {
            let expired = item.status == ItemStatus::Claimed && item.lease_expires_at_ms <= now_ms;
            let named = queues.is_none_or(|queues| queues.contains(&item.queue.as_str()));
            if expired && named {
                match settle(item, now_ms, true) {
                    FailOutcome::DeadLettered => swept.dead_lettered += 1,
                    FailOutcome::Retrying { .. } => swept.retried += 1,
                    other => panic!("the model's settle made {other:?}"),
                }
            }
        }
        swept
    }

    /// A claim of the next due item of `queues`, after sweeping their expired leases:
    /// `(id, fence, lease_expires_at_ms)`, or `None`. The sweep is returned too.
    pub fn claim(
        &mut self,
        queues: &[&str],
        lease_ms: i64,
        now_ms: i64,
    ) -> Expect<(Option<Granted>, Swept)> {
        if !valid_lease(lease_ms) || queues.is_empty() {
            return Err(Refusal::InvalidInput);
        }
        let swept = self.reclaim(Some(queues), now_ms);
        let open: Vec<&str> =
            queues.iter().copied().filter(|queue| self.claimable(queue)).collect();
        let next = self
            .items
            .iter_mut()
            .filter(|i| i.status == ItemStatus::Pending && i.run_at_ms <= now_ms)
            .filter(|i| open.contains(&i.queue.as_str()))
            .min_by(|a, b| {
                let key = |i: &Item| (-i.priority, i.run_at_ms);
                key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id))
            });
        let Some(next) = next else { return Ok((None, swept)) };
        next.status = ItemStatus::Claimed;
        next.attempt += 1;
        next.fence += 1;
        next.lease_expires_at_ms = now_ms + lease_ms;
        Ok((Some((next.id.clone(), next.fence, next.lease_expires_at_ms)), swept))
    }

    /// Whether a claim may take an item of `queue` now: it is not paused, and fewer of its
    /// items are claimed than its limit.
    pub fn claimable(&self, queue: &str) -> bool {
        let paused = self.paused.iter().any(|paused| paused == queue);
        let limit = self.limits.iter().find(|(q, _)| q == queue).map(|(_, max)| *max);
        let claimed = self
            .items
            .iter()
            .filter(|i| i.queue == queue && i.status == ItemStatus::Claimed)
            .count() as u64;
        !paused && limit.is_none_or(|max| claimed < u64::from(max))
    }

    /// Sets or lifts `queue`'s concurrency limit.
    pub fn set_concurrency(&mut self, queue: &str, max: Option<u32>) -> Expect<()> {
        if max == Some(0) {
            return Err(Refusal::InvalidInput);
        }
        self.limits.retain(|(q, _)| q != queue);
        if let Some(max) = max {
            self.limits.push((queue.to_owned(), max));
        }
        Ok(())
    }

    /// Pauses (`true`) or resumes `queue`.
    pub fn set_paused(&mut self, queue: &str, paused: bool) {
        self.paused.retain(|q| q != queue);
        if paused {
            self.paused.push(queue.to_owned());
        }
    }

    /// The item at `index` if `fence` holds its live lease; `LeaseLost` otherwise.
    pub fn held(&mut self, index: usize, fence: u64, now_ms: i64) -> Expect<&mut Item> {
        let item = self.items.get_mut(index).ok_or(Refusal::NotFound)?;
        let live = item.status == ItemStatus::Claimed
            && item.fence == fence
            && item.lease_expires_at_ms > now_ms;
        if live { Ok(item) } else { Err(Refusal::LeaseLost) }
    }

    /// Extends a held lease; the new expiry.
    pub fn heartbeat(
        &mut self,
        index: usize,
        fence: u64,
        lease_ms: i64,
        now_ms: i64,
    ) -> Expect<i64> {
        if !valid_lease(lease_ms) {
            return Err(Refusal::InvalidInput);
        }
        let item = self.held(index, fence, now_ms)?;
        item.lease_expires_at_ms = now_ms + lease_ms;
        Ok(item.lease_expires_at_ms)
    }

    /// Completes a held item.
    pub fn complete(&mut self, index: usize, fence: u64, now_ms: i64) -> Expect<()> {
        let item = self.held(index, fence, now_ms)?;
        item.status = ItemStatus::Completed;
        item.finished_at_ms = Some(now_ms);
        Ok(())
    }

    /// Fails a held item: a retry after the backoff, or a dead letter.
    pub fn fail(
        &mut self,
        index: usize,
        fence: u64,
        retryable: bool,
        now_ms: i64,
    ) -> Expect<FailOutcome> {
        let item = self.held(index, fence, now_ms)?;
        Ok(settle(item, now_ms, retryable))
    }

    /// Releases a held item: pending again, its attempt refunded.
    pub fn release(&mut self, index: usize, fence: u64, now_ms: i64) -> Expect<()> {
        let item = self.held(index, fence, now_ms)?;
        item.status = ItemStatus::Pending;
        item.attempt -= 1;
        Ok(())
    }

    /// Snoozes a held item: pending again, due `delay_ms` from now, its attempt refunded.
    pub fn snooze(&mut self, index: usize, fence: u64, delay_ms: i64, now_ms: i64) -> Expect<i64> {
        if !(0..=spindle::queue::SNOOZE_MS_MAX).contains(&delay_ms) {
            return Err(Refusal::InvalidInput);
        }
        let item = self.held(index, fence, now_ms)?;
        item.status = ItemStatus::Pending;
        item.attempt -= 1;
        item.run_at_ms = now_ms + delay_ms;
        Ok(item.run_at_ms)
    }

    /// Puts a dead item back, with fresh attempts, due now.
    pub fn requeue(&mut self, index: usize, now_ms: i64) -> Expect<()> {
        let item = self.items.get_mut(index).ok_or(Refusal::NotFound)?;
        if item.status != ItemStatus::Dead {
            return Err(Refusal::Conflict);
        }
        item.status = ItemStatus::Pending;
        item.attempt = 0;
        item.run_at_ms = now_ms;
        item.finished_at_ms = None;
        Ok(())
    }

    /// Cancels a live item: pending, or claimed (its holder's later writes are `LeaseLost`:
    /// it is no longer claimed, so `held` refuses them).
    pub fn cancel(&mut self, index: usize, now_ms: i64) -> Expect<()> {
        let item = self.items.get_mut(index).ok_or(Refusal::NotFound)?;
        if !matches!(item.status, ItemStatus::Pending | ItemStatus::Claimed) {
            return Err(Refusal::Conflict);
        }
        item.status = ItemStatus::Cancelled;
        item.finished_at_ms = Some(now_ms);
        Ok(())
    }

    /// Deletes the dead items of `queue` (fewer than a page of them); how many.
    pub fn purge_dead(&mut self, queue: &str) -> u64 {
        let before = self.items.len();
        self.items.retain(|i| !(i.queue == queue && i.status == ItemStatus::Dead));
        (before - self.items.len()) as u64
    }

    /// Deletes the completed and cancelled items finished before `cutoff_ms` (fewer than a
    /// page of them); their ids.
    pub fn prune(&mut self, cutoff_ms: i64) -> Vec<String> {
        let old = |i: &Item| {
            matches!(i.status, ItemStatus::Completed | ItemStatus::Cancelled)
                && i.finished_at_ms.is_some_and(|at| at < cutoff_ms)
        };
        let pruned = self.items.iter().filter(|i| old(i)).map(|i| i.id.clone()).collect();
        self.items.retain(|i| !old(i));
        pruned
    }

    /// The dead items of `queue`, by id.
    pub fn dead(&self, queue: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .items
            .iter()
            .filter(|i| i.queue == queue && i.status == ItemStatus::Dead)
            .map(|i| i.id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// A failed attempt (or an expired lease): a retry while attempts remain and it may be retried,
/// else a dead letter.
pub fn settle(item: &mut Item, now_ms: i64, retryable: bool) -> FailOutcome {
    if retryable && item.attempt < item.max_attempts {
        item.status = ItemStatus::Pending;
        item.run_at_ms = now_ms + backoff_ms(item.attempt);
        FailOutcome::Retrying { run_at_ms: item.run_at_ms }
    } else {
        item.status = ItemStatus::Dead;
        item.finished_at_ms = Some(now_ms);
        FailOutcome::DeadLettered
    }
}

/// Checks a stored item against the model's: status, attempt, fence, and the due time and
/// lease expiry where they mean something.
pub fn check_item(context: &str, stored: &spindle::QueueItem, item: &Item) {
    assert_eq!(
        (stored.status, stored.attempt, stored.fence, stored.max_attempts),
        (item.status, item.attempt, item.fence, item.max_attempts),
        "{context}: item {}",
        item.id
    );
    assert_eq!((stored.priority, stored.queue.as_str()), (item.priority, item.queue.as_str()));
    if item.status == ItemStatus::Pending {
        assert_eq!(stored.run_at_ms, item.run_at_ms, "{context}: run_at of {}", item.id);
    }
    if item.status == ItemStatus::Claimed {
        let expires = stored.lease_expires_at_ms;
        assert_eq!(expires, Some(item.lease_expires_at_ms), "{context}: lease of {}", item.id);
    }
}
