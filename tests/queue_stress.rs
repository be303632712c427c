//! A concurrency stress test of the queue with a checker (reliability plan T6, CI size):
//! 8 workers on one store, and 3 stores of 8 on one database (as 3 processes on 3 hosts would
//! be), 20,000 items, random failures, abandoned leases, stale writes attempted on purpose, and
//! a clock that jumps past leases and backoffs while they work.
//!
//! The checker proves from what the workers saw and what the store holds: no item lost (each
//! ends completed or dead), no item completed twice, every claim of an item carried a fence
//! higher than the one before (fences 1, 2, 3, ... with no repeat), and no write with a stale
//! fence was accepted.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spindle::{Error, ItemStatus, ManualClock, NewItem, Options, Store};

/// Items per run: `SPINDLE_STRESS_ITEMS`, default 20,000 (CI runs fewer on PostgreSQL, where
/// every statement is a round trip to the server).
fn items() -> usize {
    std::env::var("SPINDLE_STRESS_ITEMS").map_or(20_000, |n| n.parse().expect("a number"))
}
const WORKERS: u64 = 8;
const LEASE_MS: i64 = 10_000;

/// What one worker saw: every claim, and every write the store accepted.
#[derive(Default)]
struct Seen {
    claims: Vec<(String, u64)>,
    completed: Vec<(String, u64)>,
    stale_accepted: Vec<(String, u64)>,
    lease_lost: u64,
}

/// A small deterministic generator (xorshift), seeded per worker.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides
    }
}

fn work(store: Store, seed: u64, ops: Arc<AtomicU64>, done: Arc<AtomicBool>) -> Seen {
    let queue = store.queue();
    let mut dice = Dice(seed);
    let mut seen = Seen::default();
    let mut abandoned: Vec<(String, u64)> = Vec::new();
    while !done.load(Ordering::SeqCst) {
        ops.fetch_add(1, Ordering::SeqCst);
        let Some(claimed) = queue.claim(&format!("w{seed}"), &["stress"], LEASE_MS).expect("claim")
        else {
            thread::yield_now();
            continue;
        };
        let (id, fence) = (claimed.item.id.clone(), claimed.fence);
        seen.claims.push((id.clone(), fence));
        match dice.roll(10) {
            0 => abandoned.push((id, fence)), // the worker "dies": its lease must lapse
            1 | 2 => match queue.fail(&id, fence, "random failure", dice.roll(4) != 0) {
                Ok(_) => {}
                Err(Error::LeaseLost(_)) => seen.lease_lost += 1,
                Err(other) => panic!("fail: {other}"),
            },
            _ => match queue.complete(&id, fence, json!({ "by": seed })) {
                Ok(()) => seen.completed.push((id, fence)),
                Err(Error::LeaseLost(_)) => seen.lease_lost += 1,
                Err(other) => panic!("complete: {other}"),
            },
        }
        // Now and then a zombie wakes up and writes with its old fence.
        if dice.roll(5) == 0 {
            if let Some((id, fence)) = abandoned.pop() {
                match queue.complete(&id, fence, json!("zombie")) {
                    Ok(()) => seen.completed.push((id, fence)),
                    Err(Error::LeaseLost(_)) => seen.lease_lost += 1,
                    Err(other) => panic!("zombie complete: {other}"),
                }
            }
            if let Some((id, fence)) = seen.completed.last().cloned()
                && queue.complete(&id, fence, json!("twice")).is_ok()
            {
                seen.stale_accepted.push((id, fence));
            }
        }
    }
    seen
}

#[test]
fn eight_workers_twenty_thousand_items_nothing_lost_or_doubled() {
    let clock = ManualClock::new(1_700_000_000_000);
    let shared = common::SharedStore::new();
    let store = shared.open_with(options(&clock));
    run_and_check(&store, std::slice::from_ref(&store), &clock);
}

/// Three stores opened on one database, as three processes on three hosts would, with eight
/// workers each: claims from every store compete for the same items.
#[test]
fn three_stores_of_eight_workers_on_one_database_nothing_lost_or_doubled() {
    let clock = ManualClock::new(1_700_000_000_000);
    let shared = common::SharedStore::new();
    let stores: Vec<Store> = (0..3).map(|_| shared.open_with(options(&clock))).collect();
    run_and_check(&stores[0], &stores, &clock);
}

fn options(clock: &ManualClock) -> Options {
    Options::default().clock(Arc::new(clock.clone())).durability(spindle::Durability::Normal)
}

/// Enqueues the items through `store`, runs eight workers on each of `stores` until nothing is
/// live, and checks what they saw against what the store holds.
fn run_and_check(store: &Store, stores: &[Store], clock: &ManualClock) {
    for chunk in (0..items()).collect::<Vec<_>>().chunks(1000) {
        let items =
            chunk.iter().map(|n| NewItem::new("stress", json!(n)).max_attempts(6)).collect();
        store.queue().enqueue_batch(items).expect("enqueue");
    }

    let ops = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = stores
        .iter()
        .enumerate()
        .flat_map(|(n, store)| (1..=WORKERS).map(move |w| (store.clone(), n as u64 * WORKERS + w)))
        .map(|(store, seed)| {
            let (ops, done) = (Arc::clone(&ops), Arc::clone(&done));
            thread::spawn(move || work(store, seed * 7919, ops, done))
        })
        .collect();
    // The clock jumps 3 s for every 40 worker operations: leases lapse and backoffs pass
    // while the workers run, paced by their progress rather than by wall time.
    let mut paced = 0;
    let mut last_check = Instant::now();
    loop {
        let now_ops = ops.load(Ordering::SeqCst);
        if now_ops >= paced + 40 {
            paced = now_ops;
            clock.advance_ms(3_000);
        }
        if last_check.elapsed() >= Duration::from_millis(50) {
            last_check = Instant::now();
            let stats = store.queue().stats().expect("stats");
            let live: u64 = stats.iter().map(|s| s.pending + s.scheduled + s.claimed).sum();
            if live == 0 {
                break;
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    done.store(true, Ordering::SeqCst);
    let seen: Vec<Seen> = workers.into_iter().map(|w| w.join().expect("worker")).collect();
    check(store, &seen);
}

fn check(store: &Store, seen: &[Seen]) {
    // Every item ends completed or dead.
    let mut final_state: BTreeMap<String, (ItemStatus, u64)> = BTreeMap::new();
    let stats = store.queue().stats().expect("stats");
    let stress = stats.iter().find(|s| s.queue == "stress").expect("the queue");
    assert_eq!(stress.completed + stress.dead, items() as u64, "no item lost");

    let all_claims: Vec<&(String, u64)> = seen.iter().flat_map(|s| &s.claims).collect();
    let claimed_ids: BTreeSet<&String> = all_claims.iter().map(|(id, _)| id).collect();
    for id in &claimed_ids {
        let item = store.queue().get(id).expect("item");
        assert!(
            matches!(item.status, ItemStatus::Completed | ItemStatus::Dead),
            "{id} is finished"
        );
        final_state.insert((*id).clone(), (item.status, item.fence));
    }
    assert_eq!(claimed_ids.len(), items(), "every item was worked on");

    // Fences per item: exactly 1, 2, ..., final fence, each issued once.
    let mut fences: BTreeMap<&String, Vec<u64>> = BTreeMap::new();
    for (id, fence) in &all_claims {
        fences.entry(id).or_default().push(*fence);
    }
    for (id, mut issued) in fences {
        issued.sort_unstable();
        let final_fence = final_state[id].1;
        assert_eq!(issued, (1..=final_fence).collect::<Vec<_>>(), "fences of {id}");
    }

    // At most one accepted completion per item, with the item's last fence, and only on
    // completed items.
    let mut completions: BTreeMap<&String, Vec<u64>> = BTreeMap::new();
    for (id, fence) in seen.iter().flat_map(|s| &s.completed) {
        completions.entry(id).or_default().push(*fence);
    }
    for (id, accepted) in &completions {
        assert_eq!(accepted.len(), 1, "{id} completed more than once: {accepted:?}");
        let (status, final_fence) = final_state[*id];
        assert_eq!(status, ItemStatus::Completed);
        assert_eq!(accepted[0], final_fence, "{id} completed with a stale fence");
    }
    let completed_items = final_state.values().filter(|(s, _)| *s == ItemStatus::Completed).count();
    assert_eq!(completions.len(), completed_items, "every completed item has its one completion");
    let stale: usize = seen.iter().map(|s| s.stale_accepted.len()).sum();
    assert_eq!(stale, 0, "no write with a stale fence was accepted");

    // The run exercised what it claims to: redeliveries, refused holders, dead letters.
    let redelivered = final_state.values().filter(|(_, fence)| *fence > 1).count();
    let refused: u64 = seen.iter().map(|s| s.lease_lost).sum();
    // At least one in 200 items (100 of the default 20,000): about one in ten is abandoned.
    let enough = items() / 200;
    assert!(redelivered > enough, "only {redelivered} redeliveries");
    assert!(refused as usize > enough, "only {refused} refused writes");
    assert!(stress.dead > 0, "no dead letters");
}
