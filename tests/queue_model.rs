//! Model-based test of the queue (reliability plan T1, small): random sequences of queue calls
//! and clock moves, run against the store and against a plain in-memory model of the queue's
//! rules; every answer must agree. Each sequence comes from a printed seed, so a failure is
//! reproduced by running that seed again.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::Dice;
use serde_json::json;
use spindle::{Error, FailOutcome, ItemStatus, ManualClock, NewItem, Options, Store};

const T0: i64 = 1_700_000_000_000;
const QUEUES: [&str; 2] = ["a", "b"];
const LEASE_MS: i64 = 2_000;

/// The model's view of one item.
#[derive(Debug, Clone)]
struct Item {
    id: String,
    order: usize,
    queue: &'static str,
    priority: i64,
    run_at_ms: i64,
    attempt: u32,
    max_attempts: u32,
    status: ItemStatus,
    fence: u64,
    lease_expires_at_ms: i64,
}

#[derive(Default)]
struct Model {
    items: Vec<Item>,
}

impl Model {
    fn backoff_ms(attempt: u32) -> i64 {
        (1_000_i64 << attempt.saturating_sub(1).min(62)).min(64_000)
    }

    /// Expired leases of `queues` become retries or dead letters, as a claim does first.
    fn reclaim(&mut self, queues: &[&str], now_ms: i64) {
        for item in &mut self.items {
            let expired = item.status == ItemStatus::Claimed && item.lease_expires_at_ms <= now_ms;
            if expired && queues.contains(&item.queue) {
                Self::settle(item, now_ms, true);
            }
        }
    }

    fn settle(item: &mut Item, now_ms: i64, retryable: bool) -> FailOutcome {
        if retryable && item.attempt < item.max_attempts {
            item.status = ItemStatus::Pending;
            item.run_at_ms = now_ms + Self::backoff_ms(item.attempt);
            FailOutcome::Retrying { run_at_ms: item.run_at_ms }
        } else {
            item.status = ItemStatus::Dead;
            FailOutcome::DeadLettered
        }
    }

    fn claim(&mut self, queues: &[&str], now_ms: i64) -> Option<(String, u64)> {
        self.reclaim(queues, now_ms);
        let next = self
            .items
            .iter_mut()
            .filter(|i| i.status == ItemStatus::Pending && i.run_at_ms <= now_ms)
            .filter(|i| queues.contains(&i.queue))
            .min_by_key(|i| (-i.priority, i.run_at_ms, i.order))?;
        next.status = ItemStatus::Claimed;
        next.attempt += 1;
        next.fence += 1;
        next.lease_expires_at_ms = now_ms + LEASE_MS;
        Some((next.id.clone(), next.fence))
    }

    /// The item if `fence` holds its live lease.
    fn held(&mut self, index: usize, fence: u64, now_ms: i64) -> Option<&mut Item> {
        let item = self.items.get_mut(index)?;
        let live = item.status == ItemStatus::Claimed
            && item.fence == fence
            && item.lease_expires_at_ms > now_ms;
        live.then_some(item)
    }
}

fn store(clock: &ManualClock) -> Store {
    let options = Options { clock: Arc::new(clock.clone()), ..Options::default() };
    Store::open_in_memory_with(options).expect("open")
}

fn lease_lost<T: std::fmt::Debug>(result: &spindle::Result<T>) -> bool {
    matches!(result, Err(Error::LeaseLost(_)))
}

/// Runs one sequence; panics with the seed and step on the first disagreement.
fn run(seed: u64, steps: usize) {
    let mut dice = Dice(seed | 1);
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let queue = store.queue();
    let mut model = Model::default();
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    for step in 0..steps {
        let now_ms = clock.now_ms();
        let context = format!("seed {seed}, step {step}");
        let pick = |dice: &mut Dice, n: usize| dice.below(n.max(1) as u64) as usize;
        match dice.below(9) {
            0 | 1 => {
                let q = QUEUES[pick(&mut dice, 2)];
                let priority = dice.below(3) as i64 - 1;
                let delay_ms = [0, 0, 500, 3_000][pick(&mut dice, 4)];
                let max_attempts = 1 + dice.below(3) as u32;
                let new = NewItem::new(q, json!(step))
                    .priority(priority)
                    .run_at_ms(now_ms + delay_ms)
                    .max_attempts(max_attempts);
                let id = queue.enqueue(new).expect("enqueue").id;
                ids.insert(id.clone(), model.items.len());
                model.items.push(Item {
                    id,
                    order: model.items.len(),
                    queue: q,
                    priority,
                    run_at_ms: now_ms + delay_ms,
                    attempt: 0,
                    max_attempts,
                    status: ItemStatus::Pending,
                    fence: 0,
                    lease_expires_at_ms: 0,
                });
            }
            2 | 3 => {
                let queues: &[&str] = [&QUEUES[..1], &QUEUES[1..], &QUEUES[..]][pick(&mut dice, 3)];
                let got = queue.claim("w", queues, LEASE_MS).expect("claim");
                let expected = model.claim(queues, now_ms);
                let got = got.map(|c| (c.item.id, c.fence));
                assert_eq!(got, expected, "claim of {queues:?} at {context}");
            }
            4 | 5 => {
                // Complete, fail or release with the current fence, or a stale one.
                let index = pick(&mut dice, model.items.len());
                let Some(item) = model.items.get(index) else { continue };
                let (id, stale) = (item.id.clone(), dice.below(4) == 0);
                let fence = if stale { item.fence.saturating_sub(1) } else { item.fence };
                let action = dice.below(3);
                let held = model.held(index, fence, now_ms).is_some();
                match action {
                    0 => {
                        let result = queue.complete(&id, fence, json!(null));
                        assert_eq!(result.is_ok(), held, "complete at {context}: {result:?}");
                        assert!(held || lease_lost(&result), "complete at {context}: {result:?}");
                        if let Some(item) = model.held(index, fence, now_ms) {
                            item.status = ItemStatus::Completed;
                        }
                    }
                    1 => {
                        let retryable = dice.below(3) != 0;
                        let result = queue.fail(&id, fence, "boom", retryable);
                        let expected = model
                            .held(index, fence, now_ms)
                            .map(|i| Model::settle(i, now_ms, retryable));
                        match (result, expected) {
                            (Ok(got), Some(expected)) => {
                                assert_eq!(got, expected, "fail at {context}")
                            }
                            (Err(Error::LeaseLost(_)), None) => {}
                            (got, expected) => panic!("fail at {context}: {got:?} vs {expected:?}"),
                        }
                    }
                    _ => {
                        let result = queue.release(&id, fence);
                        assert_eq!(result.is_ok(), held, "release at {context}: {result:?}");
                        if let Some(item) = model.held(index, fence, now_ms) {
                            item.status = ItemStatus::Pending;
                            item.attempt -= 1;
                        }
                    }
                }
            }
            6 => {
                let index = pick(&mut dice, model.items.len());
                let Some(item) = model.items.get_mut(index) else { continue };
                let result = queue.requeue(&item.id);
                assert_eq!(result.is_ok(), item.status == ItemStatus::Dead, "requeue at {context}");
                if item.status == ItemStatus::Dead {
                    item.status = ItemStatus::Pending;
                    item.attempt = 0;
                    item.run_at_ms = now_ms;
                }
            }
            _ => clock.advance_ms([100, 1_000, 2_500, 10_000][pick(&mut dice, 4)]),
        }
    }
    // Finally every item agrees on status, attempt and fence.
    for item in &model.items {
        let stored = queue.get(&item.id).expect("get");
        let lapsed =
            item.status == ItemStatus::Claimed && item.lease_expires_at_ms <= clock.now_ms();
        if !lapsed {
            assert_eq!(
                (stored.status, stored.attempt, stored.fence),
                (item.status, item.attempt, item.fence),
                "item {} at the end of seed {seed}",
                ids[&item.id]
            );
        }
    }
}

#[test]
fn random_call_sequences_agree_with_the_model() {
    for seed in 1..=300_u64 {
        run(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 60);
    }
}
