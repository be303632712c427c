//! The work queue (DESIGN.md §5.3) through the public API, with a `ManualClock` so that leases,
//! retries and delays run instantly and deterministically.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use spindle::queue::{Completion, Cycle, Lease, Settled, Settlement};
use spindle::{
    Clock, Error, FailOutcome, ItemFilter, ItemStatus, ManualClock, NewItem, Options, Page, Store,
    Stream, TxOutcome, Unique,
};

const T0: i64 = 1_700_000_000_000;

fn store_at(clock: &ManualClock) -> Store {
    let options = Options::default().clock(Arc::new(clock.clone()));
    common::new_store_with(options)
}

/// A store whose page size limit is 2, so that bounds show with a handful of items.
fn setup_with_pages_of_two() -> (Store, ManualClock) {
    let clock = ManualClock::new(T0);
    let limits = spindle::Limits::default().page_size_max(2);
    let options = Options::default().clock(Arc::new(clock.clone())).limits(limits);
    (common::new_store_with(options), clock)
}

fn setup() -> (Store, ManualClock) {
    let clock = ManualClock::new(T0);
    (store_at(&clock), clock)
}

#[test]
fn the_seed_cycle_enqueue_claim_complete_then_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let enqueued =
        queue.enqueue(NewItem::new("default", json!({"node": "node-1"})).node_id("node-1"))?;
    assert!(!enqueued.deduplicated);
    let claimed = queue.claim("worker-1", &["default"], 30_000)?.expect("an item");
    assert_eq!(claimed.item.id, enqueued.id);
    assert_eq!(claimed.item.node_id.as_deref(), Some("node-1"));
    assert_eq!(claimed.item.worker_id.as_deref(), Some("worker-1"));
    assert_eq!((claimed.item.attempt, claimed.fence), (1, 1));
    assert_eq!(claimed.lease_expires_at_ms, T0 + 30_000);
    queue.complete(&claimed.item.id, claimed.fence, json!({"ok": true}))?;
    assert!(queue.claim("worker-1", &["default"], 30_000)?.is_none());
    let item = queue.get(&enqueued.id)?;
    assert_eq!(item.status, ItemStatus::Completed);
    assert_eq!(item.result, Some(json!({"ok": true})));
    Ok(())
}

#[test]
fn an_expired_lease_goes_to_the_next_worker_with_a_higher_fence() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)))?.id;
    let first = queue.claim("w1", &["q"], 10_000)?.expect("claimed");
    clock.advance_ms(5_000);
    assert_eq!(queue.heartbeat(&id, first.fence, 10_000)?, T0 + 15_000);
    clock.advance_ms(15_000); // past the renewed lease: the worker is presumed dead
    assert!(queue.claim("w2", &["q"], 10_000)?.is_none(), "a lapsed lease is a failed attempt");
    clock.advance_ms(1_000); // its retry backoff
    let second = queue.claim("w2", &["q"], 10_000)?.expect("reclaimed");
    assert_eq!(second.item.id, id);
    assert!(second.fence > first.fence);
    assert_eq!(second.item.attempt, 2, "the expired lease cost an attempt");
    assert_eq!(second.item.last_error.as_deref(), Some("lease expired"));

    // The first worker lost the item: every write it tries is refused and changes nothing.
    let before = queue.get(&id)?;
    assert!(matches!(queue.complete(&id, first.fence, json!("late")), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.heartbeat(&id, first.fence, 10_000), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.fail(&id, first.fence, "late", true), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.release(&id, first.fence), Err(Error::LeaseLost(_))));
    assert_eq!(queue.get(&id)?, before);

    queue.complete(&id, second.fence, json!("done"))?;
    assert!(matches!(queue.complete(&id, second.fence, json!("again")), Err(Error::LeaseLost(_))));
    Ok(())
}

#[test]
fn a_checkpoint_is_seen_by_the_next_claim_and_only_the_holder_may_write_one() -> spindle::Result<()>
{
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!({ "step": 0 })).dedupe_key("k"))?.id;
    let first = queue.claim("w1", &["q"], 10_000)?.expect("claimed");
    queue.checkpoint(&id, first.fence, json!({ "step": 3 }))?;
    assert_eq!(queue.get(&id)?.payload, json!({ "step": 3 }));
    // The dedupe key still answers for the payload the item was enqueued with.
    let again = queue.enqueue(NewItem::new("q", json!({ "step": 0 })).dedupe_key("k"))?;
    assert!(again.deduplicated && again.id == id);

    // Too large: refused, nothing written.
    let limit = spindle::Limits::default().payload_bytes_max;
    let big = json!("x".repeat(limit));
    assert!(matches!(queue.checkpoint(&id, first.fence, big), Err(Error::TooLarge { .. })));
    assert_eq!(queue.get(&id)?.payload, json!({ "step": 3 }));

    // The lease lapses: the next claim sees the checkpoint, the old holder may not write one.
    clock.advance_ms(11_000);
    assert!(queue.claim("w2", &["q"], 10_000)?.is_none(), "the lapse is a failed attempt");
    clock.advance_ms(1_000);
    let second = queue.claim("w2", &["q"], 10_000)?.expect("reclaimed");
    assert_eq!(second.item.payload, json!({ "step": 3 }));
    let stale = queue.checkpoint(&id, first.fence, json!({ "step": 99 }));
    assert!(matches!(stale, Err(Error::LeaseLost(_))), "{stale:?}");
    assert_eq!(queue.get(&id)?.payload, json!({ "step": 3 }));

    // A retry after a failure sees it too; a finished item takes none.
    queue.checkpoint(&id, second.fence, json!({ "step": 4 }))?;
    queue.fail(&id, second.fence, "boom", true)?;
    clock.advance_ms(60_000);
    let third = queue.claim("w3", &["q"], 10_000)?.expect("retried");
    assert_eq!(third.item.payload, json!({ "step": 4 }));
    queue.complete(&id, third.fence, json!("done"))?;
    let late = queue.checkpoint(&id, third.fence, json!({ "step": 5 }));
    assert!(matches!(late, Err(Error::LeaseLost(_))), "{late:?}");
    assert!(matches!(queue.checkpoint("nope", 1, json!(1)), Err(Error::NotFound { .. })));
    Ok(())
}

#[test]
fn a_lease_that_expired_but_was_not_yet_reclaimed_cannot_complete() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)))?.id;
    let claimed = queue.claim("w1", &["q"], 1_000)?.expect("claimed");
    clock.advance_ms(1_000);
    assert!(matches!(queue.complete(&id, claimed.fence, json!(1)), Err(Error::LeaseLost(_))));
    assert_eq!(queue.get(&id)?.status, ItemStatus::Claimed, "nothing changed");
    assert!(matches!(queue.complete("no-such-item", 1, json!(1)), Err(Error::NotFound { .. })));
    Ok(())
}

#[test]
fn retries_back_off_1_2_4_up_to_64_seconds_and_keep_the_error() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).max_attempts(10))?.id;
    let mut delays = Vec::new();
    for attempt in 1..=9 {
        let claimed = queue.claim("w", &["q"], 60_000)?.expect("due");
        assert_eq!(claimed.item.attempt, attempt);
        let FailOutcome::Retrying { run_at_ms } = queue.fail(&id, claimed.fence, "boom", true)?
        else {
            panic!("attempt {attempt} should retry");
        };
        let delay = run_at_ms - clock.now_ms();
        delays.push(delay / 1_000);
        assert_eq!(queue.get(&id)?.last_error.as_deref(), Some("boom"));
        clock.advance_ms(delay - 1);
        assert!(queue.claim("w", &["q"], 60_000)?.is_none(), "not due before its backoff");
        clock.advance_ms(1);
    }
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
    let last = queue.claim("w", &["q"], 60_000)?.expect("the tenth attempt");
    assert_eq!(queue.fail(&id, last.fence, "final", true)?, FailOutcome::DeadLettered);
    let dead = queue.get(&id)?;
    assert_eq!((dead.status, dead.attempt), (ItemStatus::Dead, 10));
    assert_eq!(dead.last_error.as_deref(), Some("final"));
    Ok(())
}

#[test]
fn dead_letters_come_from_fail_not_retryable_and_from_expired_leases() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let failed = queue.enqueue(NewItem::new("q", json!("a")).max_attempts(5))?.id;
    let claimed = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    assert_eq!(queue.fail(&failed, claimed.fence, "bad input", false)?, FailOutcome::DeadLettered);

    let expiring = queue.enqueue(NewItem::new("q", json!("b")).max_attempts(2))?.id;
    queue.claim("w", &["q"], 1_000)?.expect("claimed");
    clock.advance_ms(1_000); // the worker dies; its lease lapses
    let first_sweep = queue.reclaim_expired()?;
    assert_eq!((first_sweep.retried, first_sweep.dead_lettered), (1, 0));
    clock.advance_ms(1_000); // the retry's backoff
    assert_eq!(queue.claim("w", &["q"], 1_000)?.expect("claimed").item.id, expiring);
    clock.advance_ms(1_000); // and dies again, on its last attempt
    let reclaimed = queue.reclaim_expired()?;
    assert_eq!((reclaimed.retried, reclaimed.dead_lettered), (0, 1));
    let dead: Vec<String> =
        queue.dead_letters("q", Page::first(10))?.into_iter().map(|i| i.id).collect();
    assert_eq!(dead, [failed.clone(), expiring.clone()]);
    assert_eq!(queue.get(&expiring)?.last_error.as_deref(), Some("lease expired"));
    assert_eq!(queue.dead_letters("q", Page::after(&failed, 10))?.len(), 1);
    Ok(())
}

#[test]
fn requeue_gives_fresh_attempts_and_the_fence_keeps_growing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).max_attempts(1))?.id;
    let first = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    assert_eq!(queue.fail(&id, first.fence, "x", true)?, FailOutcome::DeadLettered);
    assert!(matches!(queue.cancel(&id), Err(Error::Conflict(_))));
    queue.requeue(&id)?;
    let item = queue.get(&id)?;
    assert_eq!((item.status, item.attempt), (ItemStatus::Pending, 0));
    let second = queue.claim("w", &["q"], 1_000)?.expect("claimed again");
    assert!(second.fence > first.fence);
    assert!(matches!(queue.requeue(&id), Err(Error::Conflict(_))), "only dead items");

    for n in 0..3 {
        let other = queue.enqueue(NewItem::new("r", json!(n)).max_attempts(1))?.id;
        let c = queue.claim("w", &["r"], 1_000)?.expect("claimed");
        queue.fail(&other, c.fence, "x", false)?;
    }
    assert_eq!(queue.requeue_all("r")?, 3);
    assert_eq!(queue.purge_dead("r")?, 0);
    Ok(())
}

#[test]
fn claims_follow_priority_then_due_time_and_wait_for_delays() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let low = queue.enqueue(NewItem::new("q", json!("low")).priority(1))?.id;
    let high_later =
        queue.enqueue(NewItem::new("q", json!("high-later")).priority(5).run_at_ms(T0 + 10))?.id;
    let high = queue.enqueue(NewItem::new("q", json!("high")).priority(5))?.id;
    let delayed =
        queue.enqueue(NewItem::new("q", json!("delayed")).priority(9).run_at_ms(T0 + 60_000))?.id;
    let other_queue = queue.enqueue(NewItem::new("other", json!("o")).priority(7))?.id;
    clock.advance_ms(10);
    let order: Vec<String> =
        std::iter::from_fn(|| queue.claim("w", &["q", "other"], 1_000).expect("claim"))
            .map(|c| c.item.id)
            .collect();
    assert_eq!(order, [other_queue, high, high_later, low]);
    clock.advance_ms(60_000);
    assert_eq!(queue.claim("w", &["q"], 1_000)?.expect("now due").item.id, delayed);
    Ok(())
}

#[test]
fn a_dedupe_key_is_unique_among_live_items() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let first = queue.enqueue(NewItem::new("q", json!({"a": 1})).dedupe_key("k"))?;
    let again = queue.enqueue(NewItem::new("q", json!({"a": 1})).dedupe_key("k"))?;
    assert_eq!((again.id.as_str(), again.deduplicated), (first.id.as_str(), true));
    let other = queue.enqueue(NewItem::new("q", json!({"a": 2})).dedupe_key("k"));
    assert!(matches!(other, Err(Error::Conflict(_))));
    assert!(
        !queue.enqueue(NewItem::new("other-queue", json!({"a": 2})).dedupe_key("k"))?.deduplicated
    );

    let claimed = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    assert!(queue.enqueue(NewItem::new("q", json!({"a": 1})).dedupe_key("k"))?.deduplicated);
    queue.complete(&claimed.item.id, claimed.fence, json!(null))?;
    let fresh = queue.enqueue(NewItem::new("q", json!({"a": 3})).dedupe_key("k"))?;
    assert!(!fresh.deduplicated && fresh.id != first.id, "a finished item frees its key");
    let stats = queue.stats()?;
    assert_eq!(stats.iter().find(|s| s.queue == "q").map(|s| s.pending), Some(1));
    Ok(())
}

#[test]
fn release_refunds_the_attempt() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).max_attempts(1))?.id;
    for _ in 0..3 {
        let claimed = queue.claim("w", &["q"], 1_000)?.expect("claimed");
        queue.release(&id, claimed.fence)?;
    }
    let item = queue.get(&id)?;
    assert_eq!((item.status, item.attempt, item.fence), (ItemStatus::Pending, 0, 3));
    Ok(())
}

#[test]
fn claim_wait_wakes_on_an_enqueue_from_another_thread_and_times_out_otherwise()
-> spindle::Result<()> {
    let store = common::new_store();
    let waited = Instant::now();
    assert!(store.queue().claim_wait("w", &["q"], 1_000, Duration::from_millis(50))?.is_none());
    assert!(waited.elapsed() >= Duration::from_millis(50));

    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.queue().claim_wait("w", &["q"], 1_000, Duration::from_secs(30))
        })
    };
    let id = store.queue().enqueue(NewItem::new("q", json!("wake up")))?.id;
    let claimed = waiter.join().expect("waiter")?.expect("woken with an item");
    assert_eq!(claimed.item.id, id);
    Ok(())
}

#[test]
fn claim_wait_sleeps_until_a_scheduled_item_is_due() -> spindle::Result<()> {
    let store = common::new_store();
    let now_ms = spindle::SystemClock.now_ms();
    store.queue().enqueue(NewItem::new("q", json!(1)).run_at_ms(now_ms + 200))?;
    let claimed = store.queue().claim_wait("w", &["q"], 1_000, Duration::from_secs(30))?;
    assert!(claimed.is_some());
    assert!(spindle::SystemClock.now_ms() >= now_ms + 200);
    Ok(())
}

#[test]
fn an_enqueue_in_a_rolled_back_transaction_leaves_no_item() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let mine = Stream::custom("mine");
    let s = mine.clone();
    let id = store.transaction(move |tx| {
        tx.append_event(&s, "own row", json!(1))?;
        let enqueued = tx.exec(spindle::queue::Enqueue { item: NewItem::new("q", json!(1)) })?;
        Ok(TxOutcome::Rollback(enqueued.id))
    })?;
    assert!(matches!(store.queue().get(&id), Err(Error::NotFound { .. })));
    assert!(store.queue().claim("w", &["q"], 1_000)?.is_none());

    let s = mine.clone();
    let kept = store.transaction(move |tx| {
        tx.append_event(&s, "own row", json!(1))?;
        Ok(TxOutcome::Commit(
            tx.exec(spindle::queue::Enqueue { item: NewItem::new("q", json!(2)) })?.id,
        ))
    })?;
    assert_eq!(store.queue().get(&kept)?.status, ItemStatus::Pending);
    assert_eq!(store.events().head(&mine)?, 1);
    Ok(())
}

#[test]
fn cancel_and_cancel_execution() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let lone = queue.enqueue(NewItem::new("q", json!(0)))?.id;
    queue.cancel(&lone)?;
    assert_eq!(queue.get(&lone)?.status, ItemStatus::Cancelled);
    assert!(matches!(queue.cancel(&lone), Err(Error::Conflict(_))));

    let a = queue.enqueue(NewItem::new("q", json!(1)).execution_id("exec-1"))?.id;
    queue.enqueue(NewItem::new("q", json!(2)).execution_id("exec-1"))?;
    queue.enqueue(NewItem::new("q", json!(3)).execution_id("exec-2"))?;
    let held = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    assert_eq!(held.item.id, a);
    assert_eq!(queue.cancel_execution("exec-1")?, 2, "the claimed item and the pending one");
    assert!(matches!(queue.complete(&a, held.fence, json!(null)), Err(Error::LeaseLost(_))));
    assert_eq!(queue.claim("w", &["q"], 1_000)?.expect("exec-2's item").item.payload, json!(3));

    clock.advance_ms(10_000);
    assert_eq!(queue.prune_completed(5_000)?, 3, "the three cancelled items");
    assert!(matches!(queue.get(&lone), Err(Error::NotFound { .. })));
    Ok(())
}

#[test]
fn stats_count_every_state_per_queue() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    queue.enqueue(NewItem::new("a", json!(1)))?;
    queue.enqueue(NewItem::new("a", json!(2)).run_at_ms(T0 + 1_000_000))?;
    let claimed_id = queue.enqueue(NewItem::new("a", json!(3)).priority(9))?.id;
    let done = queue.enqueue(NewItem::new("b", json!(4)))?.id;
    let c = queue.claim("w", &["a"], 60_000)?.expect("claimed");
    assert_eq!(c.item.id, claimed_id);
    let d = queue.claim("w", &["b"], 60_000)?.expect("claimed");
    queue.complete(&done, d.fence, json!(null))?;
    clock.advance_ms(2_500);
    let stats = queue.stats()?;
    let a = &stats[0];
    assert_eq!(
        (a.queue.as_str(), a.pending, a.scheduled, a.claimed, a.dead, a.completed),
        ("a", 1, 1, 1, 0, 0)
    );
    assert_eq!(a.oldest_pending_age_ms, Some(2_500));
    assert_eq!(
        (stats[1].queue.as_str(), stats[1].completed, stats[1].oldest_pending_age_ms),
        ("b", 1, None)
    );
    Ok(())
}

#[test]
fn every_change_is_an_event_on_the_queue_stream() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).max_attempts(2))?.id;
    let c = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    queue.fail(&id, c.fence, "x", true)?;
    clock.advance_ms(1_000);
    let c = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    queue.fail(&id, c.fence, "y", true)?;
    let types = queue_event_types(&store, "q");
    assert_eq!(types, ["enqueued", "claimed", "retried", "claimed", "dead_lettered"]);
    Ok(())
}

#[test]
fn another_tenants_items_are_invisible() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let (acme, globex) = (store.tenant("acme")?, store.tenant("globex")?);
    let id = acme.queue().enqueue(NewItem::new("q", json!(1)).dedupe_key("k"))?.id;
    assert!(globex.queue().claim("w", &["q"], 1_000)?.is_none());
    assert!(globex.queue().stats()?.is_empty());
    assert!(matches!(globex.queue().get(&id), Err(Error::NotFound { .. })));
    assert!(matches!(globex.queue().cancel(&id), Err(Error::NotFound { .. })));
    assert!(!globex.queue().enqueue(NewItem::new("q", json!(2)).dedupe_key("k"))?.deduplicated);
    let claimed = acme.queue().claim("w", &["q"], 1_000)?.expect("acme's own item");
    assert!(matches!(
        globex.queue().complete(&id, claimed.fence, json!(1)),
        Err(Error::NotFound { .. })
    ));
    acme.queue().complete(&id, claimed.fence, json!(1))?;
    Ok(())
}

#[test]
fn bad_input_is_refused_and_writes_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let bad_items = [
        NewItem::new("", json!(1)),
        NewItem::new("q", json!(1)).max_attempts(0),
        NewItem::new("q", json!(1)).max_attempts(1001),
        NewItem::new("q", json!(1)).dedupe_key("bad\nkey"),
        NewItem::new("q", json!("x".repeat(1024 * 1024))),
        NewItem::new("q", json!(1)).backoff(spindle::Backoff::new(10, 5)),
    ];
    for item in bad_items {
        assert!(queue.enqueue(item).is_err());
    }
    let batch = vec![NewItem::new("q", json!(1)), NewItem::new("q", json!(1)).max_attempts(0)];
    assert!(queue.enqueue_batch(batch).is_err(), "one bad item fails the batch");
    assert!(queue.stats()?.is_empty(), "nothing written");
    assert!(store.events().read_all(0, 10)?.is_empty());

    queue.enqueue(NewItem::new("q", json!(1)).max_attempts(1000))?;
    assert!(matches!(queue.claim("w", &["q"], 0), Err(Error::InvalidInput(_))));
    assert!(matches!(queue.claim("w", &["q"], 24 * 3_600_000 + 1), Err(Error::InvalidInput(_))));
    assert!(matches!(queue.claim("w", &[], 1_000), Err(Error::InvalidInput(_))));
    assert!(matches!(queue.claim_batch("w", &["q"], 1_000, 1001), Err(Error::TooLarge { .. })));
    assert_eq!(queue.stats()?[0].pending, 1, "the refused claims took nothing");
    assert!(queue.claim("w", &["q"], 24 * 3_600_000)?.is_some());
    Ok(())
}

#[test]
fn batches_enqueue_claim_and_complete_together() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let items = (0..50).map(|n| NewItem::new("q", json!(n))).collect();
    let enqueued = queue.enqueue_batch(items)?;
    assert_eq!(enqueued.len(), 50);
    let claimed = queue.claim_batch("w", &["q"], 10_000, 30)?;
    assert_eq!(claimed.len(), 30);
    let ids: Vec<&str> = claimed.iter().map(|c| c.item.id.as_str()).collect();
    let expected: Vec<&str> = enqueued.iter().take(30).map(|e| e.id.as_str()).collect();
    assert_eq!(ids, expected, "enqueue order within equal priority");

    let mut completions: Vec<Completion> = claimed
        .iter()
        .map(|c| Completion { id: c.item.id.clone(), fence: c.fence, result: json!("ok") })
        .collect();
    completions[29].fence += 1; // one stale fence: the whole batch is refused
    assert!(matches!(queue.complete_batch(completions.clone()), Err(Error::LeaseLost(_))));
    assert_eq!(queue.stats()?[0].claimed, 30);
    completions[29].fence -= 1;
    queue.complete_batch(completions)?;
    assert_eq!(queue.stats()?[0].completed, 30);
    Ok(())
}

#[test]
fn the_job_cycles_events_name_each_item_and_read_back_as_they_were_published() -> spindle::Result<()>
{
    let (store, _clock) = setup();
    let queue = store.queue();
    let mut live = store.subscribe(Stream::queue("q"), 0)?;
    assert!(live.try_recv()?.is_none(), "nothing yet: the subscription is now live");
    let items = vec![NewItem::new("q", json!("a")).priority(5), NewItem::new("q", json!("b"))];
    let ids: Vec<String> = queue.enqueue_batch(items)?.into_iter().map(|e| e.id).collect();
    let claimed = queue.claim_batch("w-1", &["q"], 10_000, 2)?;
    let done = claimed
        .iter()
        .map(|c| Completion { id: c.item.id.clone(), fence: c.fence, result: json!(null) })
        .collect();
    queue.complete_batch(done)?;

    let expires_at_ms = T0 + 10_000;
    let expected = [
        (
            "enqueued",
            json!({ "items": [
            { "id": ids[0], "priority": 5, "run_at_ms": T0 },
            { "id": ids[1], "priority": 0, "run_at_ms": T0 },
        ] }),
        ),
        (
            "claimed",
            json!({ "items": [
            { "id": ids[0], "attempt": 1, "fence": 1, "worker_id": "w-1",
              "lease_expires_at_ms": expires_at_ms },
            { "id": ids[1], "attempt": 1, "fence": 1, "worker_id": "w-1",
              "lease_expires_at_ms": expires_at_ms },
        ] }),
        ),
        (
            "completed",
            json!({ "items": [
            { "id": ids[0], "attempt": 1, "fence": 1 },
            { "id": ids[1], "attempt": 1, "fence": 1 },
        ] }),
        ),
    ];
    let stored = store.events().read(Stream::queue("q"), 0, 10)?;
    assert_eq!(stored.len(), expected.len());
    for (event, (event_type, payload)) in stored.iter().zip(&expected) {
        assert_eq!((event.event_type.as_str(), &event.payload), (*event_type, payload));
        let published = live.recv_timeout(Duration::from_secs(5))?.expect("published live");
        assert_eq!(&published, event, "the live event is the stored one");
    }
    Ok(())
}

#[test]
fn items_scheduled_for_later_do_not_hide_due_ones_at_any_number_of_priority_levels()
-> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    // 70 priority levels (more than a claim seeks level by level) hold only later items.
    let later: Vec<NewItem> = (1..=70)
        .flat_map(|p| {
            (0..3).map(move |n| NewItem::new("q", json!([p, n])).priority(p).run_at_ms(T0 + 60_000))
        })
        .collect();
    queue.enqueue_batch(later)?;
    let due = queue.enqueue(NewItem::new("q", json!("due")).priority(-5))?.id;
    assert_eq!(queue.claim("w", &["q"], 1_000)?.expect("the due item").item.id, due);
    assert!(queue.claim("w", &["q"], 1_000)?.is_none());

    let few = queue.enqueue(NewItem::new("r", json!("low")).priority(-3))?.id;
    queue.enqueue(NewItem::new("r", json!("later")).priority(9).run_at_ms(T0 + 60_000))?;
    let other = queue.enqueue(NewItem::new("s", json!("lowest")).priority(-1_000_000_000))?.id;
    let order: Vec<String> =
        queue.claim_batch("w", &["s", "r"], 1_000, 10)?.into_iter().map(|c| c.item.id).collect();
    assert_eq!(order, [few, other]);
    Ok(())
}

#[test]
fn priorities_outside_the_range_are_refused() -> spindle::Result<()> {
    let (store, _clock) = setup();
    for priority in [i64::MIN, -1_000_000_001, 1_000_000_001, i64::MAX] {
        let refused = store.queue().enqueue(NewItem::new("q", json!(1)).priority(priority));
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "priority {priority}");
    }
    assert!(store.queue().stats()?.is_empty());
    Ok(())
}

#[test]
fn a_claim_reclaims_its_own_queues_leases_whatever_other_queues_hold() -> spindle::Result<()> {
    let (store, clock) = setup_with_pages_of_two();
    let queue = store.queue();
    let zero = spindle::Backoff::new(0, 0);
    for n in 0..3 {
        queue.enqueue(NewItem::new("b", json!(n)).backoff(zero))?;
        queue.claim("w", &["b"], 1_000)?.expect("claimed");
    }
    clock.advance_ms(500);
    let mine = queue.enqueue(NewItem::new("a", json!("mine")).backoff(zero))?.id;
    queue.claim("w", &["a"], 1_000)?.expect("claimed");
    clock.advance_ms(2_000); // every lease has lapsed; b's are older
    let again = queue.claim("w2", &["a"], 1_000)?.expect("a's lapsed item, retried at once");
    assert_eq!((again.item.id, again.fence), (mine, 2));
    Ok(())
}

#[test]
fn claim_wait_wakes_when_a_lease_lapses() -> spindle::Result<()> {
    let store = common::new_store();
    let zero = spindle::Backoff::new(0, 0);
    let id = store.queue().enqueue(NewItem::new("q", json!(1)).backoff(zero))?.id;
    store.queue().claim("dying worker", &["q"], 100)?.expect("claimed");
    let started = Instant::now();
    let claimed = store.queue().claim_wait("w", &["q"], 1_000, Duration::from_secs(20))?;
    assert_eq!(claimed.expect("the lapsed item").item.id, id);
    assert!(started.elapsed() < Duration::from_secs(10), "woken by the lease's expiry");
    // A timeout too long for the clock does not panic.
    store.queue().enqueue(NewItem::new("q", json!(2)))?;
    assert!(store.queue().claim_wait("w", &["q"], 1_000, Duration::MAX)?.is_some());
    Ok(())
}

#[test]
fn bulk_calls_are_bounded_per_call() -> spindle::Result<()> {
    let (store, clock) = setup_with_pages_of_two();
    let queue = store.queue();
    for n in 0..3 {
        queue.enqueue(NewItem::new("q", json!(n)).max_attempts(1).execution_id("e"))?;
        let claimed = queue.claim("w", &["q"], 1_000)?.expect("claimed");
        queue.fail(&claimed.item.id, claimed.fence, "x", false)?;
    }
    assert_eq!(queue.requeue_all("q")?, 2);
    assert_eq!(queue.requeue_all("q")?, 1);
    assert_eq!(queue.requeue_all("q")?, 0);
    assert_eq!(queue.cancel_execution("e")?, 2);
    assert_eq!(queue.cancel_execution("e")?, 1);
    assert_eq!(queue.cancel_execution("e")?, 0);
    clock.advance_ms(10);
    assert_eq!(queue.prune_completed(0)?, 2);
    assert_eq!(queue.prune_completed(0)?, 1);
    assert_eq!(queue.prune_completed(0)?, 0);
    let types: Vec<String> =
        store.events().read(Stream::queue("q"), 0, 2)?.into_iter().map(|e| e.event_type).collect();
    assert_eq!(types.len(), 2);
    Ok(())
}

#[test]
fn a_long_error_is_kept_on_the_item_and_shortened_in_the_event() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)))?.id;
    let claimed = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    let error = "\u{1}é".repeat(200_000);
    assert!(matches!(queue.fail(&id, claimed.fence, &error, true)?, FailOutcome::Retrying { .. }));
    assert_eq!(queue.get(&id)?.last_error.as_deref(), Some(error.as_str()));
    let events = store.events().read(Stream::queue("q"), 0, 10)?;
    let retried = events.iter().find(|e| e.event_type == "retried").expect("retried event");
    let shortened = retried.payload["items"][0]["error"].as_str().expect("error text");
    assert!(shortened.len() <= 1024 && error.starts_with(shortened));
    Ok(())
}

#[test]
fn a_batch_naming_an_item_twice_is_invalid() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    queue.enqueue(NewItem::new("q", json!(1)))?;
    let c = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    let twice = vec![
        Completion { id: c.item.id.clone(), fence: c.fence, result: json!(1) },
        Completion { id: c.item.id.clone(), fence: c.fence, result: json!(2) },
    ];
    assert!(matches!(queue.complete_batch(twice), Err(Error::InvalidInput(_))));
    assert_eq!(queue.get(&c.item.id)?.status, ItemStatus::Claimed);
    Ok(())
}

#[test]
fn fences_keep_growing_across_a_restart() -> spindle::Result<()> {
    let clock = ManualClock::new(T0);
    let options = || Options::default().clock(Arc::new(clock.clone()));
    let shared = common::SharedStore::new();
    let id;
    let before;
    {
        let store = shared.open_with(options());
        let zero = spindle::Backoff::new(0, 0);
        id = store.queue().enqueue(NewItem::new("q", json!(1)).backoff(zero))?.id;
        let first = store.queue().claim("w", &["q"], 1_000)?.expect("claimed");
        store.queue().release(&id, first.fence)?;
        before = store.queue().claim("w", &["q"], 1_000)?.expect("claimed again").fence;
        store.close()?;
    }
    clock.advance_ms(70_000); // the lease lapsed while the store was closed
    let store = shared.open_with(options());
    let after = store.queue().claim("w2", &["q"], 1_000)?.expect("reclaimed after restart");
    assert_eq!(after.item.id, id);
    assert!(after.fence > before, "fence {} after a restart, {} before", after.fence, before);
    assert!(matches!(store.queue().complete(&id, before, json!(1)), Err(Error::LeaseLost(_))));
    store.queue().complete(&id, after.fence, json!(1))?;
    Ok(())
}

/// The event types on `queue`'s stream, in order.
fn queue_event_types(store: &Store, queue: &str) -> Vec<String> {
    let events = common::read_stream(store, &Stream::queue(queue));
    events.into_iter().map(|e| e.event_type).collect()
}

#[test]
fn a_queue_without_item_events_writes_none_and_keeps_every_item_state() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    assert!(queue.item_events("q")?, "on by default");
    queue.set_item_events("q", false)?;
    assert!(!queue.item_events("q")?);
    let done = queue.enqueue(NewItem::new("q", json!(1)))?.id;
    let dead = queue.enqueue(NewItem::new("q", json!(2)).max_attempts(1))?.id;
    let c = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    queue.complete(&done, c.fence, json!("ok"))?;
    let c = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    assert_eq!(queue.fail(&dead, c.fence, "boom", true)?, FailOutcome::DeadLettered);
    // Fences and leases are as strict as ever.
    assert!(matches!(queue.complete(&dead, c.fence, json!(0)), Err(Error::LeaseLost(_))));
    clock.advance_ms(1);
    assert_eq!(queue.get(&done)?.status, ItemStatus::Completed);
    assert_eq!(queue.get(&dead)?.status, ItemStatus::Dead);
    let stats = queue.stats()?;
    assert_eq!((stats[0].completed, stats[0].dead), (1, 1));
    assert_eq!(queue_event_types(&store, "q"), ["item_events"], "only the setting itself");
    let setting = store.events().read(Stream::queue("q"), 0, 1)?;
    assert_eq!(setting[0].payload, json!({ "enabled": false }));
    Ok(())
}

#[test]
fn item_events_come_back_when_turned_on_and_other_queues_keep_theirs() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    queue.set_item_events("quiet", false)?;
    queue.enqueue(NewItem::new("quiet", json!(1)))?;
    queue.enqueue(NewItem::new("loud", json!(1)))?;
    let acme = store.tenant("acme")?;
    acme.queue().enqueue(NewItem::new("quiet", json!(1)))?;
    queue.set_item_events("quiet", true)?;
    queue.enqueue(NewItem::new("quiet", json!(2)))?;
    assert_eq!(queue_event_types(&store, "quiet"), ["item_events", "item_events", "enqueued"]);
    assert_eq!(queue_event_types(&store, "loud"), ["enqueued"]);
    assert_eq!(queue_event_types(&acme, "quiet"), ["enqueued"], "the setting is per tenant");
    Ok(())
}

#[test]
fn an_item_events_setting_is_durable_and_rolls_back_with_its_transaction() -> spindle::Result<()> {
    let shared = common::SharedStore::new();
    let store = shared.open();
    store.queue().set_item_events("kept", false)?;
    let rolled_back = store.transaction(|tx| {
        tx.exec(spindle::queue::SetItemEvents { queue: "undone".into(), enabled: false })?;
        Ok(TxOutcome::Rollback(()))
    });
    assert!(rolled_back.is_ok());
    store.close()?;
    let store = shared.open();
    assert!(!store.queue().item_events("kept")?);
    assert!(store.queue().item_events("undone")?);
    assert!(queue_event_types(&store, "undone").is_empty());
    Ok(())
}

#[test]
fn a_bad_queue_name_for_item_events_is_refused_and_writes_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let long = "q".repeat(store.limits().id_len_max + 1);
    for name in ["", long.as_str()] {
        let refused = store.queue().set_item_events(name, false);
        assert!(matches!(refused, Err(Error::InvalidInput(_) | Error::TooLarge { .. })));
        assert!(matches!(
            store.queue().item_events(name),
            Err(Error::InvalidInput(_) | Error::TooLarge { .. })
        ));
    }
    assert_eq!(store.events().read_all(0, 10)?.len(), 0, "no event was written");
    Ok(())
}

#[test]
fn items_lists_a_queues_items_of_one_status_in_enqueue_order_by_pages() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let ids: Vec<String> = (0..4)
        .map(|n| queue.enqueue(NewItem::new("q", json!(n))).map(|e| e.id))
        .collect::<spindle::Result<_>>()?;
    queue.enqueue(NewItem::new("other", json!("x")))?;
    store.tenant("acme")?.queue().enqueue(NewItem::new("q", json!("theirs")))?;
    let later = queue.enqueue(NewItem::new("q", json!("later")).run_at_ms(T0 + 60_000))?.id;
    let claimed = queue.claim("w", &["q"], 1_000)?.expect("claimed").item.id;
    assert_eq!(claimed, ids[0]);

    let ids_of = |filter, page| -> spindle::Result<Vec<String>> {
        Ok(queue.items("q", filter, page)?.into_iter().map(|i| i.id).collect())
    };
    let pending = ItemFilter::status(ItemStatus::Pending);
    let all = [&ids[1], &ids[2], &ids[3], &later].map(String::clone);
    assert_eq!(ids_of(pending.clone(), Page::first(10))?, all);
    assert_eq!(ids_of(pending.clone(), Page::first(2))?, all[..2]);
    assert_eq!(ids_of(pending.clone(), Page::after(ids[2].clone(), 2))?, all[2..]);
    assert_eq!(ids_of(ItemFilter::due(), Page::first(10))?, all[..3]);
    assert_eq!(ids_of(ItemFilter::scheduled(), Page::first(10))?, std::slice::from_ref(&later));
    clock.advance_ms(60_000);
    assert_eq!(ids_of(ItemFilter::due(), Page::first(10))?, all);
    assert!(ids_of(ItemFilter::scheduled(), Page::first(10))?.is_empty());
    assert_eq!(ids_of(ItemFilter::status(ItemStatus::Claimed), Page::first(10))?, [ids[0].clone()]);
    assert!(ids_of(ItemFilter::status(ItemStatus::Dead), Page::first(10))?.is_empty());

    // Finished items are listed from their own index, one queue and status at a time.
    let done: Vec<String> = (0..3)
        .map(|n| queue.enqueue(NewItem::new("done", json!(n))).map(|e| e.id))
        .collect::<spindle::Result<_>>()?;
    for _ in 0..2 {
        let claim = queue.claim("w", &["done"], 1_000)?.expect("claimed");
        queue.complete(&claim.item.id, claim.fence, json!("ok"))?;
    }
    queue.cancel(&done[2])?;
    let done_of = |status| -> spindle::Result<Vec<String>> {
        let page = Page::first(10);
        Ok(queue
            .items("done", ItemFilter::status(status), page)?
            .into_iter()
            .map(|i| i.id)
            .collect())
    };
    assert_eq!(done_of(ItemStatus::Completed)?, done[..2]);
    assert_eq!(done_of(ItemStatus::Cancelled)?, done[2..]);
    assert!(ids_of(ItemFilter::status(ItemStatus::Completed), Page::first(10))?.is_empty());

    let too_many = queue.items("q", pending.clone(), Page::first(1_000_000));
    assert!(matches!(too_many, Err(Error::TooLarge { .. })), "{too_many:?}");
    let bad_queue = queue.items("", pending, Page::first(1));
    assert!(matches!(bad_queue, Err(Error::InvalidInput(_))), "{bad_queue:?}");
    Ok(())
}

// ---- Pause and resume (issue 31 item 2) ----

/// The types of the events on `queue`'s stream, in order.
fn event_types(store: &Store, queue: &str) -> Vec<String> {
    common::read_stream(store, &Stream::queue(queue)).into_iter().map(|e| e.event_type).collect()
}

/// `queue`'s line of `stats()`, if it has one.
fn stats_of(store: &Store, queue: &str) -> spindle::Result<Option<spindle::QueueStats>> {
    Ok(store.queue().stats()?.into_iter().find(|stats| stats.queue == queue))
}

#[test]
fn a_paused_queue_is_claimed_by_nobody_while_its_claimed_items_run_to_their_end()
-> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let ids: Vec<String> = (0..4)
        .map(|n| queue.enqueue(NewItem::new("q", json!(n))).map(|e| e.id))
        .collect::<spindle::Result<_>>()?;
    let other = queue.enqueue(NewItem::new("other", json!("o")).priority(-5))?.id;
    let held = queue.claim("w", &["q"], 10_000)?.expect("claimed before the pause");
    queue.pause("q")?;

    // Nobody claims its items: one claim, a batch, a claim-and-complete, a wait.
    assert!(queue.claim("w", &["q"], 10_000)?.is_none());
    assert!(queue.claim_batch("w", &["q"], 10_000, 10)?.is_empty());
    let waited = queue.claim_wait("w", &["q"], 10_000, Duration::from_millis(20))?;
    assert!(waited.is_none());
    // A claim of several queues passes over the paused one's better items.
    let next = queue.claim("w", &["q", "other"], 10_000)?.expect("the other queue's item");
    assert_eq!(next.item.id, other);
    queue.complete(&other, next.fence, json!("done"))?;

    // The held item runs to its end: a heartbeat, then a completion that claims nothing.
    clock.advance_ms(5_000);
    queue.heartbeat(&held.item.id, held.fence, 10_000)?;
    let after = spindle::queue::Claim::new("w", &["q"], 10_000);
    assert!(queue.complete_and_claim(&held.item.id, held.fence, json!(1), &after)?.is_none());
    let stats = stats_of(&store, "q")?.expect("q's stats");
    assert!(stats.paused, "{stats:?}");
    assert_eq!((stats.pending, stats.claimed, stats.completed), (3, 0, 1));

    queue.resume("q")?;
    let stats = stats_of(&store, "q")?.expect("q's stats");
    assert!(!stats.paused, "{stats:?}");
    let claimed = queue.claim_batch("w", &["q"], 10_000, 10)?;
    let claimed: Vec<&str> = claimed.iter().map(|c| c.item.id.as_str()).collect();
    assert_eq!(claimed, ids[1..].iter().map(String::as_str).collect::<Vec<_>>());
    let types = event_types(&store, "q");
    let settings: Vec<&String> =
        types.iter().filter(|t| *t == "paused" || *t == "resumed").collect();
    assert_eq!(settings, ["paused", "resumed"]);
    common::assert_queue_counts(&store, "paused and resumed");
    Ok(())
}

#[test]
fn an_expired_lease_of_a_paused_queue_is_retried_but_not_claimed() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)))?.id;
    let held = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    queue.pause("q")?;
    clock.advance_ms(5_000);
    assert!(queue.claim("w", &["q"], 1_000)?.is_none(), "swept, not claimed");
    let item = queue.get(&id)?;
    assert_eq!((item.status, item.attempt), (ItemStatus::Pending, 1));
    assert!(matches!(queue.complete(&id, held.fence, json!(1)), Err(Error::LeaseLost(_))));
    queue.resume("q")?;
    clock.advance_ms(1_000); // the retry's backoff
    assert_eq!(queue.claim("w", &["q"], 1_000)?.expect("claimed").item.attempt, 2);
    Ok(())
}

#[test]
fn a_pause_holds_across_a_reopen_and_for_every_store_on_the_database() -> spindle::Result<()> {
    let shared = common::SharedStore::new();
    let (first, second) = (shared.open(), shared.open());
    first.queue().enqueue(NewItem::new("q", json!(1)))?;
    first.queue().pause("q")?;
    // Another store (another process, on another host) claims through the same statement.
    assert!(second.queue().claim("w2", &["q"], 10_000)?.is_none());
    first.close()?;
    second.close()?;
    let reopened = shared.open();
    assert!(stats_of(&reopened, "q")?.expect("q").paused, "the pause is durable");
    assert!(reopened.queue().claim("w", &["q"], 10_000)?.is_none());
    let other = shared.open();
    other.queue().resume("q")?;
    assert!(reopened.queue().claim("w", &["q"], 10_000)?.is_some(), "resumed by another store");
    reopened.close()?;
    other.close()
}

#[test]
fn a_waiting_claim_is_woken_by_the_resume_and_a_pool_claims_nothing_until_then()
-> spindle::Result<()> {
    const ITEMS: u64 = 200;
    let store = common::new_store();
    let queue = store.queue();
    queue.pause("q")?;
    // More items than the pool can take before the woken waiter claims (under load, the
    // pool's two threads could otherwise drain a handful first and leave the waiter none).
    for n in 0..ITEMS {
        queue.enqueue(NewItem::new("q", json!(n)))?;
    }
    let pool =
        queue.worker(&["q"]).threads(2).run(|_| spindle::queue::Outcome::Complete(json!(1)))?;
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.queue().claim_wait("w", &["q"], 60_000, Duration::from_secs(60))
        })
    };
    // Every round of the pool and the waiter meanwhile finds the queue paused.
    std::thread::sleep(Duration::from_millis(100));
    let stats = stats_of(&store, "q")?.expect("q");
    assert_eq!((stats.pending, stats.claimed, stats.completed), (ITEMS, 0, 0));
    let started = Instant::now();
    queue.resume("q")?;
    let woken = waiter.join().expect("the waiter")?;
    assert!(woken.is_some(), "the resume woke the waiter");
    assert!(started.elapsed() < Duration::from_secs(30));
    let held = woken.expect("claimed");
    queue.complete(&held.item.id, held.fence, json!(1))?;
    while stats_of(&store, "q")?.expect("q").completed < ITEMS {
        assert!(started.elapsed() < Duration::from_secs(60), "the pool went on after the resume");
        std::thread::sleep(Duration::from_millis(5));
    }
    pool.stop();
    let report = pool.join()?;
    assert_eq!(report.completed, ITEMS - 1);
    Ok(())
}

#[test]
fn pausing_a_bad_queue_name_writes_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let long = "q".repeat(spindle::Limits::default().id_len_max + 1);
    for bad in ["", long.as_str()] {
        assert!(matches!(queue.pause(bad), Err(Error::InvalidInput(_) | Error::TooLarge { .. })));
        assert!(matches!(queue.resume(bad), Err(Error::InvalidInput(_) | Error::TooLarge { .. })));
    }
    assert!(queue.stats()?.is_empty(), "no settings row");
    assert_eq!(store.events().read_all(0, 10)?.len(), 0, "no event");
    queue.pause("q")?;
    assert_eq!(queue.stats()?.len(), 1, "an empty paused queue is listed");
    Ok(())
}

#[cfg(feature = "postgres")]
#[test]
fn a_version_five_postgres_store_is_upgraded_with_its_queue_settings_kept() -> spindle::Result<()> {
    if !common::on_postgres() {
        return Ok(());
    }
    let old = common::SharedStore::new();
    let schema = old.location().rsplit("search_path=").next().expect("a schema").trim_matches('\'');
    let server = std::env::var("SPINDLE_TEST_PG").expect("SPINDLE_TEST_PG");
    let mut raw = postgres::Client::connect(&server, postgres::NoTls).expect("connect");
    raw.batch_execute(&format!("CREATE SCHEMA {schema}; SET search_path = {schema};"))
        .expect("a schema");
    raw.batch_execute(include_str!("fixtures/schema_postgres_v5.sql")).expect("version 5");
    raw.batch_execute(
        "INSERT INTO queue_settings (tenant_id, queue, item_events, updated_at_ms)
         VALUES ('default', 'quiet', 0, 1)",
    )
    .expect("a setting");
    drop(raw);
    let store = old.open();
    assert!(!store.queue().item_events("quiet")?, "the setting is kept");
    assert!(store.queue().stats()?.is_empty(), "not paused, not limited");
    store.queue().pause("quiet")?;
    assert!(stats_of(&store, "quiet")?.expect("quiet").paused);
    store.close()?;
    let fresh = common::SharedStore::new();
    fresh.open().close()?;
    assert_eq!(common::store_columns(&old), common::store_columns(&fresh));
    let (migrated, made) =
        (common::postgres_catalogue(old.location()), common::postgres_catalogue(fresh.location()));
    let only = |a: &std::collections::BTreeSet<String>, b: &std::collections::BTreeSet<String>| {
        a.difference(b).cloned().collect::<Vec<_>>()
    };
    assert!(
        migrated == made,
        "migrated only: {:?}\nfresh only: {:?}",
        only(&migrated, &made),
        only(&made, &migrated)
    );
    Ok(())
}

// ---- Snooze (issue 31 item 4) ----

#[test]
fn a_snoozed_item_runs_again_later_without_spending_an_attempt() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).max_attempts(1))?.id;
    let mut fences = Vec::new();
    // One attempt only, snoozed five times: it never runs out of attempts by snoozing.
    for round in 0..5 {
        let held = queue.claim("w", &["q"], 10_000)?.expect("due again");
        assert_eq!((held.item.attempt, held.item.id.as_str()), (1, id.as_str()), "round {round}");
        fences.push(held.fence);
        let due_at = queue.snooze(&id, held.fence, 5_000)?;
        assert_eq!(due_at, clock.now_ms() + 5_000);
        let item = queue.get(&id)?;
        assert_eq!((item.status, item.attempt, item.run_at_ms), (ItemStatus::Pending, 0, due_at));
        assert!(item.worker_id.is_none() && item.lease_expires_at_ms.is_none());
        let stats = stats_of(&store, "q")?.expect("q");
        assert_eq!((stats.pending, stats.scheduled, stats.claimed), (0, 1, 0), "live, not due");
        assert!(queue.claim("w", &["q"], 10_000)?.is_none(), "not before its time");
        common::assert_queue_counts(&store, "snoozed");
        clock.advance_ms(5_000);
    }
    assert!(fences.windows(2).all(|pair| pair[0] < pair[1]), "every claim a new fence");
    let last = queue.claim("w", &["q"], 10_000)?.expect("due");
    queue.complete(&id, last.fence, json!("done"))?;
    let snoozed = event_types(&store, "q").iter().filter(|t| *t == "snoozed").count();
    assert_eq!(snoozed, 5);
    Ok(())
}

#[test]
fn a_snooze_is_fenced_and_a_bad_delay_writes_nothing() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)))?.id;
    let first = queue.claim("w", &["q"], 1_000)?.expect("claimed");
    let before = queue.get(&id)?;
    for delay_ms in [-1, spindle::queue::SNOOZE_MS_MAX + 1] {
        let refused = queue.snooze(&id, first.fence, delay_ms);
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "{refused:?}");
        assert_eq!(queue.get(&id)?, before, "nothing written");
    }
    assert!(matches!(queue.snooze(&id, first.fence + 1, 10), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.snooze("no-such-item", 1, 10), Err(Error::NotFound { .. })));
    assert_eq!(queue.get(&id)?, before, "nothing written");
    clock.advance_ms(1_000); // the lease lapsed
    assert!(matches!(queue.snooze(&id, first.fence, 10), Err(Error::LeaseLost(_))));
    assert_eq!(queue.get(&id)?, before, "nothing written");
    Ok(())
}

#[test]
fn a_pool_handler_snoozes_its_item_and_runs_it_again_once_due() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).max_attempts(1))?.id;
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let pool = queue.worker(&["q"]).poll_interval(Duration::from_millis(5)).run(move |job| {
        assert_eq!(job.attempt(), 1, "the snooze refunded its attempt");
        if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            spindle::queue::Outcome::Snooze(60_000)
        } else {
            spindle::queue::Outcome::Complete(json!("done"))
        }
    })?;
    let started = Instant::now();
    while queue.get(&id)?.run_at_ms != T0 + 60_000 {
        assert!(started.elapsed() < Duration::from_secs(60), "the handler snoozed it");
        std::thread::sleep(Duration::from_millis(2));
    }
    clock.advance_ms(60_000);
    while queue.get(&id)?.status != ItemStatus::Completed {
        assert!(started.elapsed() < Duration::from_secs(60), "it ran again once due");
        std::thread::sleep(Duration::from_millis(2));
    }
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.snoozed, report.completed, report.dead_lettered), (1, 1, 0));
    assert_eq!(queue.get(&id)?.attempt, 1);
    Ok(())
}

// ---- Global concurrency per queue (issue 31 item 3) ----

#[test]
fn a_limited_queue_has_at_most_its_limit_claimed_and_a_lower_limit_waits_for_room()
-> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    for n in 0..6 {
        queue.enqueue(NewItem::new("q", json!(n)))?;
    }
    queue.enqueue(NewItem::new("other", json!("o")).priority(-1))?;
    queue.set_concurrency("q", Some(2))?;
    let held = queue.claim_batch("w", &["q"], 10_000, 10)?;
    assert_eq!(held.len(), 2);
    assert!(queue.claim("w", &["q"], 10_000)?.is_none(), "full");
    // A claim of several queues takes another queue's item past the full one.
    assert_eq!(queue.claim("w", &["q", "other"], 10_000)?.expect("other").item.queue, "other");
    let stats = stats_of(&store, "q")?.expect("q");
    assert_eq!((stats.claimed, stats.pending, stats.concurrency_max), (2, 4, Some(2)));

    // A settlement makes room for exactly one more, also in the same op.
    let next = spindle::queue::Claim::new("w", &["q"], 10_000);
    let third = queue.complete_and_claim(&held[0].item.id, held[0].fence, json!(1), &next)?;
    let third = third.expect("the freed place");
    assert!(queue.claim("w", &["q"], 10_000)?.is_none(), "full again");

    // A lower limit lets the claimed items run to their end, then waits for room.
    queue.set_concurrency("q", Some(1))?;
    queue.complete(&held[1].item.id, held[1].fence, json!(1))?;
    assert!(queue.claim("w", &["q"], 10_000)?.is_none(), "one claimed, the limit is one");
    queue.snooze(&third.item.id, third.fence, 0)?;
    let serial = queue.claim_batch("w", &["q"], 10_000, 10)?;
    assert_eq!(serial.len(), 1, "a serial queue");

    queue.set_concurrency("q", None)?;
    assert_eq!(queue.claim_batch("w", &["q"], 10_000, 10)?.len(), 3, "no limit");
    assert_eq!(stats_of(&store, "q")?.expect("q").concurrency_max, None);
    let types = event_types(&store, "q");
    assert_eq!(types.iter().filter(|t| *t == "concurrency").count(), 3);
    common::assert_queue_counts(&store, "limited");
    Ok(())
}

#[test]
fn a_limit_of_zero_or_a_bad_name_writes_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let refused = queue.set_concurrency("q", Some(0));
    assert!(matches!(refused, Err(Error::InvalidInput(_))), "{refused:?}");
    let refused = queue.set_concurrency("", Some(1));
    assert!(matches!(refused, Err(Error::InvalidInput(_))), "{refused:?}");
    assert!(queue.stats()?.is_empty(), "no settings row");
    assert_eq!(store.events().read_all(0, 10)?.len(), 0, "no event");
    queue.set_concurrency("q", Some(u32::MAX))?;
    assert_eq!(stats_of(&store, "q")?.expect("q").concurrency_max, Some(u32::MAX));
    Ok(())
}

/// Claims and completes every item of `queue` on `threads` threads of each store, counting
/// how many items the callers hold at once (from the claim's reply to just before the
/// completion is sent, so never more than the store has claimed): the highest count seen.
fn hold_at_most(stores: &[Store], threads: usize, queue: &'static str, items: usize) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for t in 0..threads {
            let (store, held, most, done) =
                (store.clone(), held.clone(), most.clone(), done.clone());
            workers.push(std::thread::spawn(move || -> spindle::Result<()> {
                let worker = format!("w{s}-{t}");
                let started = Instant::now();
                while done.load(Ordering::SeqCst) < items {
                    assert!(started.elapsed() < Duration::from_secs(120), "stalled");
                    let wait = Duration::from_millis(20);
                    let Some(job) = store.queue().claim_wait(&worker, &[queue], 60_000, wait)?
                    else {
                        continue;
                    };
                    let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    held.fetch_sub(1, Ordering::SeqCst);
                    store.queue().complete(&job.item.id, job.fence, json!(worker))?;
                    done.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            }));
        }
    }
    // The store's own count, sampled meanwhile, never passes the limit either.
    let sampler = {
        let (store, done) = (stores[0].clone(), done.clone());
        std::thread::spawn(move || -> spindle::Result<u64> {
            let mut most = 0;
            while done.load(Ordering::SeqCst) < items {
                let stats = stats_of(&store, queue)?;
                most = most.max(stats.map_or(0, |s| s.claimed));
            }
            Ok(most)
        })
    };
    for worker in workers {
        worker.join().expect("a worker").expect("its calls");
    }
    let sampled = sampler.join().expect("the sampler").expect("stats") as usize;
    most.load(Ordering::SeqCst).max(sampled)
}

#[test]
fn a_serial_queue_runs_one_item_at_a_time_on_many_threads() -> spindle::Result<()> {
    let store = common::new_store();
    let items = 60;
    store.queue().set_concurrency("serial", Some(1))?;
    store.queue().enqueue_batch((0..items).map(|n| NewItem::new("serial", json!(n))).collect())?;
    assert_eq!(hold_at_most(std::slice::from_ref(&store), 6, "serial", items), 1);
    store.queue().set_concurrency("three", Some(3))?;
    store.queue().enqueue_batch((0..items).map(|n| NewItem::new("three", json!(n))).collect())?;
    assert!(hold_at_most(std::slice::from_ref(&store), 6, "three", items) <= 3);
    let stats = stats_of(&store, "three")?.expect("three");
    assert_eq!((stats.completed, stats.claimed), (items as u64, 0));
    Ok(())
}

#[test]
fn a_limit_holds_across_stores_on_one_database() -> spindle::Result<()> {
    let shared = common::SharedStore::new();
    let stores = [shared.open(), shared.open(), shared.open()];
    let items = 45;
    stores[0].queue().set_concurrency("q", Some(2))?;
    stores[1].queue().enqueue_batch((0..items).map(|n| NewItem::new("q", json!(n))).collect())?;
    assert!(hold_at_most(&stores, 3, "q", items) <= 2);
    let stats = stats_of(&stores[2], "q")?.expect("q");
    assert_eq!((stats.completed, stats.claimed), (items as u64, 0));
    for store in stores {
        store.close()?;
    }
    Ok(())
}

/// Worker pools of three stores on one limited queue: their rounds (`Cycle`) share the
/// tenant's writers' turn on PostgreSQL, and their claims of the gated queue take its order
/// lock, so the limit holds across them all.
#[test]
fn a_limit_holds_across_the_worker_pools_of_stores_on_one_database() -> spindle::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let shared = common::SharedStore::new();
    let stores = [shared.open(), shared.open(), shared.open()];
    let items = 60;
    stores[0].queue().set_concurrency("q", Some(2))?;
    stores[1].queue().enqueue_batch((0..items).map(|n| NewItem::new("q", json!(n))).collect())?;
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut pools = Vec::new();
    for store in &stores {
        let (r, m) = (running.clone(), most.clone());
        let pool = store.queue().worker(&["q"]).threads(3).poll_interval(Duration::from_millis(5));
        pools.push(pool.run(move |_| {
            m.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(200));
            r.fetch_sub(1, Ordering::SeqCst);
            spindle::queue::Outcome::Complete(json!(1))
        })?);
    }
    let started = Instant::now();
    while stats_of(&stores[2], "q")?.expect("q").completed < items as u64 {
        assert!(started.elapsed() < Duration::from_secs(60), "stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut completed = 0;
    for pool in pools {
        pool.stop();
        completed += pool.join()?.completed;
    }
    assert_eq!(completed, items as u64, "every item completed once");
    assert!(most.load(Ordering::SeqCst) <= 2, "{} at once", most.load(Ordering::SeqCst));
    for store in stores {
        store.close()?;
    }
    Ok(())
}

#[test]
fn a_pool_on_a_serial_queue_runs_its_items_one_at_a_time_and_wakes_on_each_settlement()
-> spindle::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let store = common::new_store();
    let queue = store.queue();
    queue.set_concurrency("serial", Some(1))?;
    let items = 30;
    queue.enqueue_batch((0..items).map(|n| NewItem::new("serial", json!(n))).collect())?;
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, m) = (running.clone(), most.clone());
    // A long poll interval: only the bells of the settlements keep it going.
    let pool = queue.worker(&["serial"]).threads(4).poll_interval(Duration::from_secs(30)).run(
        move |_| {
            m.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            std::thread::yield_now();
            r.fetch_sub(1, Ordering::SeqCst);
            spindle::queue::Outcome::Complete(json!(1))
        },
    )?;
    let started = Instant::now();
    while stats_of(&store, "serial")?.expect("serial").completed < items as u64 {
        assert!(started.elapsed() < Duration::from_secs(25), "a settlement woke the next claim");
        std::thread::sleep(Duration::from_millis(2));
    }
    pool.stop();
    assert_eq!(pool.join()?.completed, items as u64);
    assert_eq!(most.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn a_claimed_item_is_cancelled_at_once_and_its_holder_is_refused_and_never_retried()
-> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let stream = Stream::queue("q");
    let id = queue.enqueue(NewItem::new("q", json!(1)).max_attempts(3))?.id;
    let held = queue.claim("w", &["q"], 10_000)?.expect("claimed");
    let events_before = store.events().head(&stream)?;
    queue.cancel(&id)?;
    let item = queue.get(&id)?;
    assert_eq!(item.status, ItemStatus::Cancelled, "cancelled at once, under its holder");
    assert_eq!((item.worker_id, item.lease_expires_at_ms), (None, None));
    let events = store.events().read(&stream, events_before, 10)?;
    let cancelled = events.last().expect("an event");
    assert_eq!(cancelled.event_type, "cancelled");
    assert_eq!(cancelled.payload["items"][0]["running"], json!(true));
    assert_eq!(cancelled.payload["items"][0]["worker_id"], json!("w"));
    // Every write of the holder is refused and changes nothing.
    let fence = held.fence;
    assert!(matches!(queue.heartbeat(&id, fence, 10_000), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.complete(&id, fence, json!("done")), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.fail(&id, fence, "boom", true), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.release(&id, fence), Err(Error::LeaseLost(_))));
    assert!(matches!(queue.snooze(&id, fence, 1_000), Err(Error::LeaseLost(_))));
    // Its lease's end passes: it is not retried, nor claimed again.
    clock.advance_ms(60_000);
    let swept = queue.reclaim_expired()?;
    assert_eq!((swept.retried, swept.dead_lettered), (0, 0));
    assert!(queue.claim("w", &["q"], 10_000)?.is_none());
    let item = queue.get(&id)?;
    assert_eq!((item.status, item.attempt, item.result), (ItemStatus::Cancelled, 1, None));
    assert!(matches!(queue.cancel(&id), Err(Error::Conflict(_))), "a finished item");
    let stats = &queue.stats()?[0];
    assert_eq!((stats.claimed, stats.pending), (0, 0));
    common::assert_queue_counts(&store, "after cancelling a claimed item");
    Ok(())
}

#[test]
fn cancelling_a_running_item_of_a_full_serial_queue_frees_its_place() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    queue.set_concurrency("serial", Some(1))?;
    let first = queue.enqueue(NewItem::new("serial", json!(1)))?.id;
    queue.enqueue(NewItem::new("serial", json!(2)))?;
    assert_eq!(queue.claim("w", &["serial"], 10_000)?.expect("the first").item.id, first);
    assert!(queue.claim("w", &["serial"], 10_000)?.is_none(), "full");
    queue.cancel(&first)?;
    let next = queue.claim("w", &["serial"], 10_000)?.expect("its place is free");
    assert_eq!(next.item.payload, json!(2));
    Ok(())
}

// ---- Tags and metadata (issue 31 item 8) ----

/// How many tag rows the store keeps (read past the ops).
fn tag_rows(store: &Store) -> i64 {
    let sql = "SELECT count(*) FROM queue_item_tags";
    let rows = store
        .transaction(move |tx| Ok(TxOutcome::Commit(common::raw_rows(tx, sql, sql)?)))
        .expect("count tag rows");
    rows[0][0].int()
}

#[test]
fn items_carry_tags_and_metadata_and_a_tag_filters_a_listing_by_key() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let tagged = |n: i64, tags: &[&str]| {
        let mut item = NewItem::new("q", json!(n));
        for tag in tags {
            item = item.tag(*tag);
        }
        item
    };
    let meta = json!({ "customer": "acme", "trace": [1, 2] });
    let a = queue.enqueue(tagged(0, &["billing", "eu"]).metadata(meta.clone()))?.id;
    let b = queue.enqueue(tagged(1, &["eu"]))?.id;
    let c = queue.enqueue(tagged(2, &["billing", "billing"]))?.id;
    let plain = queue.enqueue(tagged(3, &[]))?.id;
    queue.enqueue(NewItem::new("other", json!(4)).tag("billing"))?;
    let item = queue.get(&a)?;
    assert_eq!(
        (item.tags, item.metadata),
        (vec!["billing".to_owned(), "eu".to_owned()], Some(meta))
    );
    let item = queue.get(&c)?;
    assert_eq!((item.tags, item.metadata), (vec!["billing".to_owned()], None), "kept once");
    assert!(queue.get(&plain)?.tags.is_empty());

    let ids_of = |filter: ItemFilter, page| -> spindle::Result<Vec<String>> {
        Ok(queue.items("q", filter, page)?.into_iter().map(|i| i.id).collect())
    };
    let billing = ItemFilter::status(ItemStatus::Pending).tag("billing");
    assert_eq!(
        ids_of(billing.clone(), Page::first(10))?,
        [a.clone(), c.clone()],
        "this queue's only"
    );
    assert_eq!(ids_of(billing.clone(), Page::first(1))?, std::slice::from_ref(&a));
    assert_eq!(ids_of(billing.clone(), Page::after(a.clone(), 10))?, std::slice::from_ref(&c));
    assert_eq!(ids_of(ItemFilter::due().tag("eu"), Page::first(10))?, [a.clone(), b.clone()]);
    assert!(ids_of(ItemFilter::due().tag("nobody"), Page::first(10))?.is_empty());
    // The filter keeps to the status: a claimed tagged item leaves the pending listing.
    let held = queue.claim("w", &["q"], 10_000)?.expect("the first");
    assert_eq!(held.item.id, a);
    assert_eq!(held.item.tags, ["billing", "eu"], "a claim returns the tags");
    assert_eq!(ids_of(billing.clone(), Page::first(10))?, std::slice::from_ref(&c));
    let claimed = ItemFilter::status(ItemStatus::Claimed).tag("billing");
    assert_eq!(ids_of(claimed, Page::first(10))?, std::slice::from_ref(&a));
    queue.complete(&a, held.fence, json!("done"))?;
    let completed = ItemFilter::status(ItemStatus::Completed).tag("eu");
    assert_eq!(ids_of(completed.clone(), Page::first(10))?, std::slice::from_ref(&a));

    // Pruning a tagged item deletes its tags with it.
    assert_eq!(tag_rows(&store), 5);
    clock.advance_ms(10_000);
    assert_eq!(queue.prune_completed(5_000)?, 1);
    assert!(ids_of(completed, Page::first(10))?.is_empty());
    assert_eq!(tag_rows(&store), 3, "a's two tags are gone");
    Ok(())
}

#[test]
fn purging_dead_tagged_items_deletes_their_tags() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).tag("x").max_attempts(1))?.id;
    queue.enqueue(NewItem::new("q", json!(2)).tag("x"))?;
    let held = queue.claim("w", &["q"], 10_000)?.expect("claimed");
    assert_eq!(held.item.id, id);
    queue.fail(&id, held.fence, "no", false)?;
    let dead = ItemFilter::status(ItemStatus::Dead).tag("x");
    assert_eq!(queue.items("q", dead.clone(), Page::first(10))?.len(), 1);
    assert_eq!(tag_rows(&store), 2);
    assert_eq!(queue.purge_dead("q")?, 1);
    assert_eq!(tag_rows(&store), 1, "only the live item's tag is left");
    Ok(())
}

#[test]
fn bad_tags_or_metadata_are_refused_and_write_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let too_many = (0..=spindle::queue::TAGS_MAX)
        .fold(NewItem::new("q", json!(1)), |item, n| item.tag(format!("t{n}")));
    assert!(matches!(queue.enqueue(too_many), Err(Error::TooLarge { .. })));
    let long = "t".repeat(spindle::Limits::default().id_len_max + 1);
    for bad in ["", "a\nb", long.as_str()] {
        let refused = queue.enqueue(NewItem::new("q", json!(1)).tag(bad));
        assert!(matches!(refused, Err(Error::InvalidInput(_) | Error::TooLarge { .. })), "{bad:?}");
    }
    for bad in [json!([1]), json!("text"), json!(null)] {
        let refused = queue.enqueue(NewItem::new("q", json!(1)).metadata(bad.clone()));
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "{bad}: {refused:?}");
    }
    let huge = json!({ "pad": "x".repeat(spindle::Limits::default().payload_bytes_max) });
    let refused = queue.enqueue(NewItem::new("q", json!(1)).metadata(huge));
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    let batch = vec![NewItem::new("q", json!(1)).tag("ok"), NewItem::new("q", json!(2)).tag("")];
    assert!(queue.enqueue_batch(batch).is_err(), "one bad item refuses the batch");
    assert!(queue.stats()?.is_empty(), "no item");
    assert_eq!(tag_rows(&store), 0, "no tag row");
    let bad_filter = queue.items("q", ItemFilter::due().tag(""), Page::first(1));
    assert!(matches!(bad_filter, Err(Error::InvalidInput(_))), "{bad_filter:?}");
    Ok(())
}

/// The ids `items("q", filter, page)` lists.
fn listed(store: &Store, filter: ItemFilter, page: Page) -> spindle::Result<Vec<String>> {
    Ok(store.queue().items("q", filter, page)?.into_iter().map(|i| i.id).collect())
}

#[test]
fn a_metadata_condition_lists_items_whose_key_has_an_equal_value_of_the_same_json_type()
-> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let with = |n: i64, metadata: Option<serde_json::Value>| -> spindle::Result<String> {
        let item = NewItem::new("q", json!(n));
        let item = match metadata {
            Some(metadata) => item.metadata(metadata),
            None => item,
        };
        Ok(queue.enqueue(item)?.id)
    };
    let one = with(0, Some(json!({ "n": 1, "plan": "pro" })))?;
    let text = with(1, Some(json!({ "n": "1" })))?;
    let yes = with(2, Some(json!({ "n": true })))?;
    let real = with(3, Some(json!({ "n": 1.0 })))?;
    let null = with(4, Some(json!({ "n": null })))?;
    let _list = with(5, Some(json!({ "n": [1], "nested": { "n": 1 } })))?;
    let dotted =
        with(6, Some(json!({ "a.b": 1, "$": "x", "who": "O'Brien \"é\"", "q\"k\\é": 2 })))?;
    let one_free = with(7, Some(json!({ "n": 1, "plan": "free" })))?;
    let big = with(8, Some(json!({ "big": u64::MAX, "small": i64::MIN, "x": 0.1 })))?;
    let _none = with(9, None)?;
    queue.enqueue(NewItem::new("other", json!(10)).metadata(json!({ "n": 1 })))?;
    let due = ItemFilter::due;
    let ids = |filter: ItemFilter| listed(&store, filter, Page::first(100));

    assert_eq!(
        ids(due().metadata("n", 1))?,
        [one.clone(), real.clone(), one_free.clone()],
        "1 and 1.0 are one number; \"1\" and true are not it; this queue's only"
    );
    assert_eq!(ids(due().metadata("n", 1.0))?, ids(due().metadata("n", 1))?);
    assert_eq!(ids(due().metadata("n", "1"))?, std::slice::from_ref(&text));
    assert_eq!(ids(due().metadata("n", true))?, std::slice::from_ref(&yes));
    assert!(ids(due().metadata("n", false))?.is_empty(), "true is not false");
    assert!(ids(due().metadata("n", 0))?.is_empty(), "false is not 0 either");
    assert_eq!(
        ids(due().metadata("n", serde_json::Value::Null))?,
        std::slice::from_ref(&null),
        "null matches a key present with null, not a missing key"
    );
    assert!(ids(due().metadata("n", "true"))?.is_empty(), "a string is not a boolean");
    // A key is a member's name as it is: a dot or a dollar sign is no path.
    assert_eq!(ids(due().metadata("a.b", 1))?, std::slice::from_ref(&dotted));
    assert_eq!(ids(due().metadata("$", "x"))?, std::slice::from_ref(&dotted));
    assert_eq!(ids(due().metadata("who", "O'Brien \"é\""))?, std::slice::from_ref(&dotted));
    assert!(ids(due().metadata("a", 1))?.is_empty(), "nor reaches into a member");
    assert_eq!(ids(due().metadata("q\"k\\é", 2))?, std::slice::from_ref(&dotted), "escaped");
    assert!(ids(due().metadata("missing", 1))?.is_empty());
    assert_eq!(ids(due().metadata("big", u64::MAX))?, std::slice::from_ref(&big));
    assert_eq!(ids(due().metadata("small", i64::MIN))?, std::slice::from_ref(&big));
    assert_eq!(ids(due().metadata("x", 0.1))?, std::slice::from_ref(&big));
    assert!(ids(due().metadata("x", 0.2))?.is_empty());
    // Conditions add up, and with a tag and the status.
    let pro = due().metadata("n", 1).metadata("plan", "pro");
    assert_eq!(ids(pro)?, std::slice::from_ref(&one));
    assert!(ids(due().metadata("n", 1).metadata("n", "1"))?.is_empty());

    // Paged by key as any listing.
    let ones = due().metadata("n", 1);
    assert_eq!(listed(&store, ones.clone(), Page::first(2))?, [one.clone(), real.clone()]);
    let rest = listed(&store, ones.clone(), Page::after(real.clone(), 2))?;
    assert_eq!(rest, std::slice::from_ref(&one_free));
    // The status holds: a claimed item leaves the pending listing for the claimed one.
    let held = queue.claim("w", &["q"], 10_000)?.expect("the first");
    assert_eq!(held.item.id, one);
    assert_eq!(ids(ones.clone())?, [real.clone(), one_free.clone()]);
    let claimed = ItemFilter::status(ItemStatus::Claimed).metadata("plan", "pro");
    assert_eq!(ids(claimed)?, std::slice::from_ref(&one));
    store.close()
}

#[test]
fn a_tag_and_metadata_conditions_filter_together_on_every_status() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let item = |n: i64, tag: &str, region: &str| {
        NewItem::new("q", json!(n)).tag(tag).metadata(json!({ "region": region, "n": n }))
    };
    let a = queue.enqueue(item(0, "billing", "eu"))?.id;
    let b = queue.enqueue(item(1, "billing", "us"))?.id;
    let c = queue.enqueue(item(2, "mail", "eu"))?.id;
    let d = queue.enqueue(item(3, "billing", "eu").max_attempts(1))?.id;
    let billing_eu = |status| ItemFilter::status(status).tag("billing").metadata("region", "eu");
    let ids = |filter| listed(&store, filter, Page::first(10));
    assert_eq!(ids(billing_eu(ItemStatus::Pending))?, [a.clone(), d.clone()]);
    assert_eq!(
        listed(&store, billing_eu(ItemStatus::Pending), Page::first(1))?,
        std::slice::from_ref(&a)
    );
    let page = Page::after(a.clone(), 10);
    assert_eq!(listed(&store, billing_eu(ItemStatus::Pending), page)?, std::slice::from_ref(&d));
    let eu = ItemFilter::due().metadata("region", "eu");
    assert_eq!(ids(eu.clone())?, [a.clone(), c.clone(), d.clone()]);
    // Finished items are read through their own indexes, with the same conditions.
    for _ in 0..4 {
        let held = queue.claim("w", &["q"], 10_000)?.expect("an item");
        if held.item.id == d {
            queue.fail(&d, held.fence, "no", false)?;
        } else {
            queue.complete(&held.item.id, held.fence, json!("ok"))?;
        }
    }
    assert_eq!(ids(billing_eu(ItemStatus::Dead))?, std::slice::from_ref(&d));
    assert_eq!(ids(billing_eu(ItemStatus::Completed))?, std::slice::from_ref(&a));
    let us = ItemFilter::status(ItemStatus::Completed).metadata("region", "us");
    assert_eq!(ids(us)?, std::slice::from_ref(&b));
    let numbered = ItemFilter::status(ItemStatus::Completed).metadata("n", 2);
    assert_eq!(ids(numbered)?, [c]);
    assert!(queue.dead_letters("q", Page::first(10))?.iter().all(|i| i.id == d));
    store.close()
}

#[test]
fn bad_metadata_conditions_are_refused_and_nothing_is_written() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let id = queue.enqueue(NewItem::new("q", json!(1)).metadata(json!({ "k": "v" })))?.id;
    let before = (queue.stats()?, store.events().read_all(0, 1000)?.len(), queue.get(&id)?);
    let max = spindle::queue::METADATA_CONDITIONS_MAX;
    let id_max = spindle::Limits::default().id_len_max;
    let value_max = spindle::queue::METADATA_VALUE_BYTES_MAX;
    let conditions = |count: usize| {
        (0..count).fold(ItemFilter::due(), |filter, n| filter.metadata(format!("k{n}"), "v"))
    };
    // At the limits: taken.
    assert!(queue.items("q", conditions(max), Page::first(1))?.is_empty());
    let at_most = ItemFilter::due().metadata("k".repeat(id_max), "x".repeat(value_max - 2));
    assert!(queue.items("q", at_most, Page::first(1))?.is_empty());
    assert_eq!(queue.items("q", ItemFilter::due().metadata("k", "v"), Page::first(1))?.len(), 1);
    // Past them, or malformed: typed errors.
    let refused = queue.items("q", conditions(max + 1), Page::first(1));
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    let long_key = ItemFilter::due().metadata("k".repeat(id_max + 1), "v");
    let long_value = ItemFilter::due().metadata("k", "x".repeat(value_max - 1));
    for too_large in [long_key, long_value] {
        let refused = queue.items("q", too_large, Page::first(1));
        assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    }
    let bad = [
        ItemFilter::due().metadata("", "v"),
        ItemFilter::due().metadata("a\nb", "v"),
        ItemFilter::due().metadata("k", json!(["v"])),
        ItemFilter::due().metadata("k", json!({ "v": 1 })),
        ItemFilter::due().tag("").metadata("k", "v"),
    ];
    for filter in bad {
        let refused = queue.items("q", filter.clone(), Page::first(1));
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "{filter:?}: {refused:?}");
    }
    let after = (queue.stats()?, store.events().read_all(0, 1000)?.len(), queue.get(&id)?);
    assert_eq!(after, before, "no item, event or count changed");
    store.close()
}

// ---- Unique windows (issue 31 item 5) ----

#[test]
fn a_unique_key_holds_within_its_window_and_a_new_window_takes_a_new_item() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    const HOUR: i64 = 3_600_000;
    // T0 is not on an hour: move to the start of one.
    clock.advance_ms(HOUR - T0.rem_euclid(HOUR));
    let hourly =
        || NewItem::new("reports", json!("v1")).unique(Unique::new("daily-report").per(HOUR));
    let first = queue.enqueue(hourly())?;
    assert!(!first.deduplicated);
    clock.advance_ms(HOUR - 1);
    let again = queue.enqueue(hourly().metadata(json!({ "late": true })))?;
    assert_eq!((again.id.clone(), again.deduplicated), (first.id.clone(), true), "same hour");
    assert_eq!(queue.get(&first.id)?.metadata, None, "kept as it was");
    // Completed, it still holds the key in its hour (completed is among the default states).
    let held = queue.claim("w", &["reports"], 10_000)?.expect("claimed");
    queue.complete(&first.id, held.fence, json!(null))?;
    clock.advance_ms(1);
    let next_hour = queue.enqueue(hourly())?;
    assert!(!next_hour.deduplicated && next_hour.id != first.id, "a new window, a new item");
    assert_eq!(queue.stats()?[0].pending, 1);
    Ok(())
}

#[test]
fn a_unique_key_holds_only_in_the_states_it_names() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let live_only = || {
        let unique = Unique::new("sync").states(&[ItemStatus::Pending, ItemStatus::Claimed]);
        NewItem::new("q", json!(1)).unique(unique).max_attempts(1)
    };
    let first = queue.enqueue(live_only())?.id;
    assert_eq!(queue.enqueue(live_only())?.id, first, "pending holds it");
    let held = queue.claim("w", &["q"], 10_000)?.expect("claimed");
    assert_eq!(queue.enqueue(live_only())?.id, first, "claimed holds it");
    queue.fail(&first, held.fence, "boom", false)?;
    let second = queue.enqueue(live_only())?;
    assert!(!second.deduplicated, "a dead item does not hold it");
    assert_eq!(queue.enqueue(live_only())?.id, second.id, "the new item holds it now");
    Ok(())
}

#[test]
fn replace_gives_a_pending_holder_the_new_payload_and_run_time_and_keeps_a_claimed_one()
-> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let item = |payload: i64, run_at_ms: i64| {
        NewItem::new("q", json!(payload)).run_at_ms(run_at_ms).unique(Unique::new("k").replace())
    };
    let first = queue.enqueue(item(1, T0 + 60_000))?.id;
    let replaced = queue.enqueue(item(2, T0 + 5_000))?;
    assert_eq!((replaced.id.clone(), replaced.deduplicated), (first.clone(), true));
    let now = queue.get(&first)?;
    assert_eq!((now.payload, now.run_at_ms), (json!(2), T0 + 5_000), "replaced");
    assert_eq!(event_types(&store, "q").last().map(String::as_str), Some("replaced"));
    clock.advance_ms(5_000);
    let held = queue.claim("w", &["q"], 10_000)?.expect("due at the new time");
    assert_eq!(held.item.payload, json!(2));
    assert_eq!(queue.enqueue(item(3, T0))?.id, first, "a claimed holder is kept");
    let now = queue.get(&first)?;
    assert_eq!((now.payload, now.status), (json!(2), ItemStatus::Claimed), "not replaced");
    assert_eq!(queue.stats()?[0].pending, 0, "no new item");
    Ok(())
}

#[test]
fn bad_unique_settings_are_refused_and_write_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let year = spindle::queue::SNOOZE_MS_MAX;
    for (what, unique) in [
        ("empty key", Unique::new("")),
        ("no period", Unique::new("k").per(0)),
        ("negative period", Unique::new("k").per(-5)),
        ("past a year", Unique::new("k").per(year + 1)),
        ("no state", Unique::new("k").states(&[])),
    ] {
        let refused = queue.enqueue(NewItem::new("q", json!(1)).unique(unique));
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "{what}: {refused:?}");
    }
    let both = NewItem::new("q", json!(1)).dedupe_key("d").unique(Unique::new("k"));
    assert!(matches!(queue.enqueue(both), Err(Error::InvalidInput(_))), "dedupe and unique");
    assert!(queue.stats()?.is_empty(), "nothing enqueued");
    assert!(store.events().read_all(0, 10)?.is_empty(), "no event");
    Ok(())
}

#[test]
fn pruning_a_holder_frees_its_key() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let item = || NewItem::new("q", json!(1)).unique(Unique::new("k"));
    let first = queue.enqueue(item())?.id;
    let held = queue.claim("w", &["q"], 10_000)?.expect("claimed");
    queue.complete(&first, held.fence, json!(null))?;
    assert_eq!(queue.enqueue(item())?.id, first, "completed, it holds the key");
    clock.advance_ms(10_000);
    assert_eq!(queue.prune_completed(5_000)?, 1);
    let sql = "SELECT count(*) FROM queue_unique";
    let rows =
        store.transaction(move |tx| Ok(TxOutcome::Commit(common::raw_rows(tx, sql, sql)?)))?;
    assert_eq!(rows[0][0].int(), 0, "its key row is deleted with it");
    assert!(!queue.enqueue(item())?.deduplicated, "the key is free again");
    Ok(())
}

#[test]
fn a_batch_keeps_each_items_tags_metadata_and_run_timeout() -> spindle::Result<()> {
    let store = common::new_store();
    let plain = NewItem::new("mixed", json!(0));
    let tagged = NewItem::new("mixed", json!(1)).tag("red").metadata(json!({ "by": "batch" }));
    let timed = NewItem::new("mixed", json!(2)).run_timeout_ms(5_000);
    let enqueued = store.queue().enqueue_batch(vec![plain, tagged, timed])?;
    let items: Vec<spindle::QueueItem> =
        enqueued.iter().map(|e| store.queue().get(&e.id)).collect::<spindle::Result<_>>()?;
    assert!(items[0].tags.is_empty() && items[0].metadata.is_none());
    assert_eq!(items[0].run_timeout_ms, None);
    assert_eq!(items[1].tags, ["red"]);
    assert_eq!(items[1].metadata, Some(json!({ "by": "batch" })));
    assert_eq!(items[2].run_timeout_ms, Some(5_000));
    store.close()
}

#[test]
fn a_round_settling_an_item_cancelled_and_pruned_meanwhile_answers_it_alone() -> spindle::Result<()>
{
    let clock = ManualClock::new(T0);
    let options = Options::default().clock(Arc::new(clock.clone()));
    let store = common::new_store_with(options);
    let queue = store.queue();
    for n in 0..2 {
        queue.enqueue(NewItem::new("gone", json!(n)))?;
    }
    let claimed = queue.claim_batch("w", &["gone"], 60_000, 2)?;
    assert_eq!(claimed.len(), 2);
    queue.cancel(&claimed[0].item.id)?;
    clock.advance_ms(1_000);
    assert_eq!(queue.prune_completed(0)?, 1, "the cancelled item");
    let complete = |c: &spindle::Claimed| {
        Settlement::Complete(Completion { id: c.item.id.clone(), fence: c.fence, result: json!(1) })
    };
    let lease = |c: &spindle::Claimed| Lease { id: c.item.id.clone(), fence: c.fence };
    let cycle = Cycle {
        worker_id: "w".into(),
        queues: vec!["gone".into()],
        lease_ms: 60_000,
        settle: vec![complete(&claimed[0]), complete(&claimed[1])],
        renew: vec![lease(&claimed[0])],
        claim_max: 0,
    };
    let cycled = store.exec(cycle)?;
    assert!(matches!(cycled.settled[0], Err(Error::NotFound { .. })), "{:?}", cycled.settled);
    assert!(matches!(cycled.settled[1], Ok(Settled::Completed)), "{:?}", cycled.settled);
    assert!(matches!(cycled.renewed[0], Err(Error::NotFound { .. })), "{:?}", cycled.renewed);
    store.close()
}

#[test]
fn a_metadata_filter_reads_a_bounded_number_of_items_per_page() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    // 10,001 items that do not match, then one that does and one tagged that does.
    for batch in 0..11 {
        let items: Vec<NewItem> = (0..1_000)
            .filter(|n| batch * 1_000 + n < 10_001)
            .map(|n| {
                NewItem::new("big", json!({ "n": batch * 1_000 + n })).metadata(json!({ "k": 0 }))
            })
            .collect();
        queue.enqueue_batch(items)?;
    }
    let wanted = NewItem::new("big", json!("wanted")).metadata(json!({ "k": 1 }));
    let wanted = queue.enqueue(wanted)?.id;
    let tagged = NewItem::new("big", json!("tagged")).metadata(json!({ "k": 1 })).tag("t");
    let tagged = queue.enqueue(tagged)?.id;
    let filter = ItemFilter::due().metadata("k", json!(1));
    let refused = queue.items("big", filter.clone(), Page::first(10));
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    // Narrowed by a tag, the same condition reads one item.
    let found = queue.items("big", filter.clone().tag("t"), Page::first(10))?;
    assert_eq!(found.iter().map(|item| item.id.clone()).collect::<Vec<_>>(), vec![tagged.clone()]);
    // From a later key (9,003 items to read), the same filter fills its page within the bound.
    let first_thousand = queue.items("big", ItemFilter::due(), Page::first(1_000))?;
    let later = Page::after(first_thousand[999].id.clone(), 10);
    let late: Vec<String> = queue.items("big", filter, later)?.into_iter().map(|i| i.id).collect();
    assert_eq!(late, vec![wanted, tagged], "both found once the scan starts near them");
    Ok(())
}
