//! Model-based test of the work queue (reliability plan T1, queue part): seeded random
//! sequences of up to 100 queue calls (enqueue, claim, heartbeat, complete, fail, release, snooze with
//! the current or a stale fence, reclaim of expired leases, dead letters, requeue, cancel,
//! purge of dead letters, prune of finished items, get, pause and resume of a queue, its
//! concurrency limit), clock
//! moves forwards and backwards,
//! and reopens of the store, run against the store and against the plain model in
//! `tests/models/queue.rs` (shared with the `ops` fuzz harness).
//! Every answer must agree, down to the error variant; after every step `stats()` agrees with a
//! recount of the items by a plain `GROUP BY` (and `audit_counts` finds nothing); at the end
//! every item agrees on status, attempt, fence, due time and lease.
//!
//! A quarter of the sequences run on a shared store (a file in a tmpfs on SQLite, a schema of
//! its own on PostgreSQL) and reopen it now and then; the others run on a private one. `SPINDLE_MODEL_CASES` sets the number of sequences (default 2,000);
//! the test fails when the generators did not reach the rare paths (lease expiry with reclaim,
//! dead-lettering, stale fences, reopen, clock moves back) often enough. Every sequence comes
//! from a printed seed; `QUEUE_MODEL_SEED=<seed>` runs one alone.

mod common;
mod models;

use std::sync::Arc;

use common::{Dice, SharedStore};
use models::queue::{QueueModel, Swept, check_item};
use models::{Expect, Refusal, Stamp, compare};
use serde_json::json;
use spindle::{Durability, FailOutcome, ItemStatus, ManualClock, NewItem, Options, Page, Store};

const T0: i64 = 1_700_000_000_000;
const QUEUES: [&str; 2] = ["a", "b"];
const LEASES: [i64; 4] = [500, 2_000, 2_000, 5_000];
const ADVANCES: [i64; 5] = [100, 1_000, 2_500, 10_000, 70_000];

/// What a run reached, summed over every sequence.
#[derive(Debug, Default)]
struct Coverage {
    claims: u64,
    completions: u64,
    heartbeats: u64,
    retries: u64,
    expiries_reclaimed: u64,
    dead_lettered: u64,
    requeued: u64,
    cancelled: u64,
    stale_fences: u64,
    refusals: u64,
    reopens: u64,
    clock_back: u64,
    purged: u64,
    pruned: u64,
    /// Claims made while a queue they named was paused.
    claims_past_a_pause: u64,
    pauses: u64,
    snoozes: u64,
    limits_set: u64,
    /// Claims made while a queue they named was at its limit.
    claims_at_a_limit: u64,
}

struct Harness {
    seed: u64,
    step: usize,
    clock: ManualClock,
    stamp: Stamp,
    /// The store of a sequence that reopens it (`None`: a private one, never reopened).
    shared: Option<SharedStore>,
    store: Store,
    model: QueueModel,
}

fn open(shared: Option<&SharedStore>, clock: &ManualClock) -> Store {
    let options = Options::default()
        .clock(Arc::new(clock.clone()))
        .durability(Durability::Normal)
        .inline(true);
    match shared {
        Some(shared) => shared.open_with(options),
        None => common::new_store_with(options),
    }
}

impl Harness {
    fn new(seed: u64, dice: &mut Dice) -> Self {
        let clock = ManualClock::new(T0);
        let shared = (dice.below(4) == 0).then(SharedStore::in_tmpfs);
        let store = open(shared.as_ref(), &clock);
        let stamp = Stamp::opened(T0);
        Self { seed, step: 0, clock, stamp, shared, store, model: QueueModel::default() }
    }

    fn context(&self, op: &str) -> String {
        format!("seed {} step {} ({op})", self.seed, self.step)
    }

    /// The store's time for the call about to be made.
    fn now(&mut self) -> i64 {
        self.stamp.next(self.clock.now_ms())
    }

    fn reopen(&mut self) -> bool {
        let Some(shared) = &self.shared else { return false };
        self.store.close().expect("close");
        self.store = open(Some(shared), &self.clock);
        self.stamp.reopened(self.clock.now_ms());
        true
    }

    /// Every item of the model agrees with the store.
    fn check_all(&self, context: &str) {
        for item in &self.model.items {
            let stored = self.store.queue().get(&item.id).expect("get");
            check_item(context, &stored, item);
        }
    }

    fn enqueue(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let queue = QUEUES[dice.below(2) as usize];
        let priority = dice.below(3) as i64 - 1;
        let delay_ms = [0, 0, 500, 3_000][dice.below(4) as usize];
        let max_attempts = if dice.below(30) == 0 { 0 } else { 1 + dice.below(3) as u32 };
        let now_ms = self.now();
        let new = NewItem::new(queue, json!(self.step))
            .priority(priority)
            .run_at_ms(now_ms + delay_ms)
            .max_attempts(max_attempts);
        let context = self.context(&format!("enqueue {queue} max {max_attempts}"));
        let result = self.store.queue().enqueue(new);
        if max_attempts == 0 {
            models::assert_refused(&context, &result, Refusal::InvalidInput);
            c.refusals += 1;
            return;
        }
        let enqueued = result.unwrap_or_else(|e| panic!("{context}: {e}"));
        assert!(!enqueued.deduplicated, "{context}");
        self.model.enqueue(enqueued.id, queue, priority, now_ms + delay_ms, max_attempts);
    }

    fn claim(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let queues: &[&str] = [&QUEUES[..1], &QUEUES[1..], &QUEUES[..]][dice.below(3) as usize];
        let lease_ms = if dice.below(30) == 0 { 0 } else { LEASES[dice.below(4) as usize] };
        let now_ms = self.now();
        let context = self.context(&format!("claim {queues:?} for {lease_ms} at {now_ms}"));
        let got = self.store.queue().claim("w", queues, lease_ms);
        let expected = self.model.claim(queues, lease_ms, now_ms);
        let swept = expected.as_ref().map_or(Swept::default(), |(_, swept)| *swept);
        count_sweep(c, swept);
        let got = got.map(|claimed| {
            claimed.map(|claimed| {
                let index = self.model.index(&claimed.item.id).expect("a known item");
                check_item(&context, &claimed.item, &self.model.items[index]);
                (claimed.item.id, claimed.fence, claimed.lease_expires_at_ms)
            })
        });
        let expected = expected.map(|(claimed, _)| claimed);
        c.claims += u64::from(matches!(expected, Ok(Some(_))));
        let paused = queues.iter().any(|queue| self.model.paused.iter().any(|p| p == queue));
        c.claims_past_a_pause += u64::from(paused && expected.is_ok());
        let model = &self.model;
        let full = queues
            .iter()
            .any(|queue| !model.paused.iter().any(|p| p == queue) && !model.claimable(queue));
        c.claims_at_a_limit += u64::from(full && expected.is_ok());
        c.refusals += u64::from(compare(&context, got, expected).is_some());
    }

    /// A fenced write (heartbeat, complete, fail or release) with the item's fence or a stale
    /// one.
    /// An item: mostly one in status `wanted` (if any), else any.
    fn pick(&self, dice: &mut Dice, wanted: ItemStatus) -> Option<usize> {
        let items = &self.model.items;
        let matching: Vec<usize> =
            (0..items.len()).filter(|&i| items[i].status == wanted).collect();
        if !matching.is_empty() && dice.below(4) != 0 {
            return Some(matching[dice.below(matching.len() as u64) as usize]);
        }
        (!items.is_empty()).then(|| dice.below(items.len() as u64) as usize)
    }

    fn fenced(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let Some(index) = self.pick(dice, ItemStatus::Claimed) else { return };
        let item = &self.model.items[index];
        let (id, fence) = (item.id.clone(), item.fence);
        let fence = match dice.below(5) {
            0 => fence.saturating_sub(1),
            1 => fence + 1,
            _ => fence,
        };
        let now_ms = self.now();
        let action = [0, 1, 1, 2, 3, 2, 4][dice.below(7) as usize];
        let context = self.context(&format!("fenced {action} on {id} fence {fence} at {now_ms}"));
        let refused = match action {
            0 => {
                let lease_ms = LEASES[dice.below(4) as usize];
                let expected = self.model.heartbeat(index, fence, lease_ms, now_ms);
                c.heartbeats += u64::from(expected.is_ok());
                let got = self.store.queue().heartbeat(&id, fence, lease_ms);
                compare(&context, got, expected)
            }
            1 => {
                let expected = self.model.complete(index, fence, now_ms);
                c.completions += u64::from(expected.is_ok());
                compare(&context, self.store.queue().complete(&id, fence, json!(1)), expected)
            }
            2 => self.fail(dice, index, fence, c),
            3 => {
                let delay_ms = [-1, 0, 500, 3_000, 3_000][dice.below(5) as usize];
                let expected = self.model.snooze(index, fence, delay_ms, now_ms);
                c.snoozes += u64::from(expected.is_ok());
                compare(&context, self.store.queue().snooze(&id, fence, delay_ms), expected)
            }
            _ => {
                let expected = self.model.release(index, fence, now_ms);
                compare(&context, self.store.queue().release(&id, fence), expected)
            }
        };
        c.stale_fences += u64::from(refused == Some(Refusal::LeaseLost));
        let stored = self.store.queue().get(&id).expect("get");
        check_item(&context, &stored, &self.model.items[index]);
    }

    fn fail(
        &mut self,
        dice: &mut Dice,
        index: usize,
        fence: u64,
        c: &mut Coverage,
    ) -> Option<Refusal> {
        let retryable = dice.below(3) != 0;
        let now_ms = self.stamp.peek(self.clock.now_ms());
        let id = self.model.items[index].id.clone();
        let context = self.context(&format!("fail {id} fence {fence} retryable {retryable}"));
        let expected: Expect<FailOutcome> = self.model.fail(index, fence, retryable, now_ms);
        match expected {
            Ok(FailOutcome::DeadLettered) => c.dead_lettered += 1,
            Ok(FailOutcome::Retrying { .. }) => c.retries += 1,
            Ok(other) => panic!("{context}: the model answered {other:?}"),
            Err(_) => {}
        }
        compare(&context, self.store.queue().fail(&id, fence, "boom", retryable), expected)
    }

    fn reclaim(&mut self, c: &mut Coverage) {
        let now_ms = self.now();
        let context = self.context(&format!("reclaim_expired at {now_ms}"));
        let swept = self.model.reclaim(None, now_ms);
        count_sweep(c, swept);
        let got = self.store.queue().reclaim_expired().expect("reclaim");
        assert_eq!(
            (got.retried, got.dead_lettered),
            (swept.retried, swept.dead_lettered),
            "{context}"
        );
    }

    fn requeue_or_cancel(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let requeue = dice.below(2) == 0;
        let wanted = match (requeue, dice.below(2)) {
            (true, _) => ItemStatus::Dead,
            (false, 0) => ItemStatus::Pending,
            (false, _) => ItemStatus::Claimed,
        };
        let Some(index) = self.pick(dice, wanted) else { return };
        let id = self.model.items[index].id.clone();
        let now_ms = self.now();
        let refused = if requeue {
            let context = self.context(&format!("requeue {id}"));
            let expected = self.model.requeue(index, now_ms);
            c.requeued += u64::from(expected.is_ok());
            compare(&context, self.store.queue().requeue(&id), expected)
        } else {
            let context = self.context(&format!("cancel {id}"));
            let expected = self.model.cancel(index, now_ms);
            c.cancelled += u64::from(expected.is_ok());
            compare(&context, self.store.queue().cancel(&id), expected)
        };
        c.refusals += u64::from(refused.is_some());
    }

    /// Deletes the dead items of a queue, or the completed and cancelled items finished long
    /// enough ago; the pruned items are gone.
    fn purge_or_prune(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let now_ms = self.now();
        if dice.below(2) == 0 {
            let queue = QUEUES[dice.below(2) as usize];
            let context = self.context(&format!("purge_dead {queue}"));
            let expected = self.model.purge_dead(queue);
            let purged = self.store.queue().purge_dead(queue).expect("purge");
            assert_eq!(purged, expected, "{context}");
            c.purged += purged;
            return;
        }
        let older_than_ms = [0, 1_000, 10_000][dice.below(3) as usize];
        let context = self.context(&format!("prune_completed {older_than_ms}"));
        let pruned = self.model.prune(now_ms - older_than_ms);
        let got = self.store.queue().prune_completed(older_than_ms).expect("prune");
        assert_eq!(got, pruned.len() as u64, "{context}");
        for id in &pruned {
            let gone = self.store.queue().get(id);
            models::assert_refused(&context, &gone, Refusal::NotFound);
        }
        c.pruned += got;
    }

    fn dead_letters(&mut self, dice: &mut Dice) {
        let queue = QUEUES[dice.below(2) as usize];
        self.now();
        let dead = self.store.queue().dead_letters(queue, Page::first(1_000)).expect("dead");
        let mut got: Vec<String> = dead.into_iter().map(|item| item.id).collect();
        got.sort();
        assert_eq!(got, self.model.dead(queue), "{}", self.context("dead_letters"));
    }

    /// Sets or lifts a queue's concurrency limit (or tries 0); `stats` shows it.
    fn limit(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let queue = QUEUES[dice.below(2) as usize];
        let max = [None, None, Some(1), Some(2), Some(0)][dice.below(5) as usize];
        self.now();
        let context = self.context(&format!("concurrency of {queue}: {max:?}"));
        let expected = self.model.set_concurrency(queue, max);
        c.limits_set += u64::from(expected.is_ok() && max.is_some());
        compare(&context, self.store.queue().set_concurrency(queue, max), expected);
        self.now();
        let stats = self.store.queue().stats().expect("stats");
        for queue in QUEUES {
            let shown = stats.iter().find(|s| s.queue == queue).and_then(|s| s.concurrency_max);
            let limit = self.model.limits.iter().find(|(q, _)| q == queue).map(|(_, max)| *max);
            assert_eq!(shown, limit, "{context}: stats of {queue}");
        }
    }

    /// Pauses or resumes a queue; `stats` shows it.
    fn pause_or_resume(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let queue = QUEUES[dice.below(2) as usize];
        // Resumes outnumber pauses: a queue is paused a third of the time or so.
        let paused = dice.below(3) == 0;
        self.now();
        let context = self.context(&format!("paused {queue}: {paused}"));
        let result =
            if paused { self.store.queue().pause(queue) } else { self.store.queue().resume(queue) };
        result.unwrap_or_else(|e| panic!("{context}: {e}"));
        self.model.set_paused(queue, paused);
        c.pauses += u64::from(paused);
        self.now();
        let stats = self.store.queue().stats().expect("stats");
        for queue in QUEUES {
            let shown = stats.iter().find(|s| s.queue == queue).is_some_and(|s| s.paused);
            let paused = self.model.paused.iter().any(|p| p == queue);
            assert_eq!(shown, paused, "{context}: stats of {queue}");
        }
    }

    fn move_clock(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let delta_ms = ADVANCES[dice.below(ADVANCES.len() as u64) as usize];
        if dice.below(5) == 0 {
            self.clock.advance_ms(-delta_ms);
            c.clock_back += 1;
        } else {
            self.clock.advance_ms(delta_ms);
        }
    }
}

fn count_sweep(c: &mut Coverage, swept: Swept) {
    c.expiries_reclaimed += swept.retried + swept.dead_lettered;
    c.dead_lettered += swept.dead_lettered;
}

/// Runs one sequence; panics with the seed and step on the first disagreement.
fn run(seed: u64, c: &mut Coverage) {
    let mut dice = Dice::new(seed);
    let steps = 1 + dice.below(100) as usize;
    let mut h = Harness::new(seed, &mut dice);
    for step in 0..steps {
        h.step = step;
        match dice.below(24) {
            0..=3 => h.enqueue(&mut dice, c),
            4..=7 => h.claim(&mut dice, c),
            8..=12 => h.fenced(&mut dice, c),
            13 => h.reclaim(c),
            14 => h.requeue_or_cancel(&mut dice, c),
            15 => h.dead_letters(&mut dice),
            16 => {
                if dice.below(2) == 0 && h.reopen() {
                    c.reopens += 1;
                    h.check_all(&h.context("reopened"));
                }
            }
            17 => h.purge_or_prune(&mut dice, c),
            18 => h.pause_or_resume(&mut dice, c),
            19 => h.limit(&mut dice, c),
            _ => h.move_clock(&mut dice, c),
        }
        // The counts (stats, audit) against a recount of the items, after every step: the
        // check is a batch of its own, which takes the store's time.
        h.now();
        common::assert_queue_counts(&h.store, &h.context("counts"));
    }
    h.now();
    h.check_all(&h.context("end of sequence"));
    if h.reopen() {
        c.reopens += 1;
        h.check_all(&h.context("end of sequence, reopened"));
    }
    h.store.close().expect("close");
}

#[test]
fn random_call_sequences_agree_with_the_model() {
    let mut c = Coverage::default();
    if !models::run_cases("QUEUE_MODEL_SEED", |seed| run(seed, &mut c)) {
        return;
    }
    println!("{c:?}");
    models::assert_floors(
        "queue",
        &[
            ("claims", c.claims, 5_000),
            ("completions", c.completions, 500),
            ("heartbeats", c.heartbeats, 300),
            ("retries", c.retries, 300),
            ("lease expiries reclaimed", c.expiries_reclaimed, 50),
            ("dead letters", c.dead_lettered, 50),
            ("requeues", c.requeued, 50),
            ("cancels", c.cancelled, 50),
            ("stale fences (LeaseLost)", c.stale_fences, 50),
            ("refusals", c.refusals, 300),
            ("reopens", c.reopens, 50),
            ("clock moves backwards", c.clock_back, 50),
            ("dead items purged", c.purged, 50),
            ("finished items pruned", c.pruned, 200),
            ("pauses", c.pauses, 200),
            ("snoozes", c.snoozes, 200),
            ("limits set", c.limits_set, 200),
            ("claims while a named queue was at its limit", c.claims_at_a_limit, 200),
            ("claims while a named queue was paused", c.claims_past_a_pause, 200),
        ],
    );
}
