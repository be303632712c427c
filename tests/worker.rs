//! The queue's worker pool and its one-round-trip calls (`complete_and_claim`,
//! `fail_and_claim`, the pool's `Cycle`), through the public API. Time comes from a
//! `ManualClock`: leases lapse and renew when the test moves the clock, never by waiting.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, bounded, unbounded};
use serde_json::{Value, json};
use spindle::queue::{
    Claim, Completion, Cycle, Fail, Lease, Outcome, Settled, Settlement, WorkerReport,
};
use spindle::{Error, FailOutcome, ItemStatus, ManualClock, NewItem, Options, Store, Stream};

const T0: i64 = 1_700_000_000_000;

fn setup() -> (Store, ManualClock) {
    let clock = ManualClock::new(T0);
    let options = Options::default().clock(Arc::new(clock.clone()));
    (common::new_store_with(options), clock)
}

fn enqueue_n(store: &Store, queue: &str, n: usize) -> Vec<String> {
    let items = (0..n).map(|i| NewItem::new(queue, json!({ "n": i }))).collect();
    let enqueued = store.queue().enqueue_batch(items).expect("enqueue");
    enqueued.into_iter().map(|e| e.id).collect()
}

/// Waits (on real time, bounded) until `done` holds: for the pool's threads to act, never for
/// the store's clock to move.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A gate a handler waits at until the test opens it.
fn gate() -> (crossbeam_channel::Sender<()>, Receiver<()>) {
    bounded(0)
}

#[test]
fn a_pool_completes_every_item_exactly_once() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let ids = enqueue_n(&store, "mail", 300);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (all_done, done) = bounded(1);
    let seen_by_handlers = Arc::clone(&seen);
    let pool = store.queue().worker(&["mail"]).threads(4).lease_ms(30_000).run(move |job| {
        let mut seen = seen_by_handlers.lock().expect("lock");
        seen.push(job.item().id.clone());
        if seen.len() == 300 {
            let _ = all_done.send(());
        }
        Outcome::Complete(json!({ "n": job.payload()["n"] }))
    })?;
    done.recv_timeout(Duration::from_secs(30)).expect("every item handled");
    pool.stop();
    let report = pool.join()?;
    assert_eq!(report.claimed, 300);
    assert_eq!(report.completed, 300);
    assert_eq!(report.lease_lost + report.released + report.retried, 0);
    let seen: BTreeSet<String> = seen.lock().expect("lock").iter().cloned().collect();
    assert_eq!(seen, ids.iter().cloned().collect(), "each item ran once");
    let stats = &store.queue().stats()?[0];
    assert_eq!((stats.completed, stats.claimed, stats.pending), (300, 0, 0));
    let item = store.queue().get(&ids[7])?;
    assert_eq!(item.result, Some(json!({ "n": 7 })));
    assert_eq!(item.attempt, 1);
    Ok(())
}

/// A result nested deeper than the store keeps is refused for its item alone: the item is
/// dead-lettered with the reason, and the round's other settlements go through (a round with
/// it would fail its shape check whole, and every round after it).
#[test]
fn a_result_nested_too_deep_dead_letters_its_item_and_the_pool_goes_on() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let items = ["deep", "ok"].iter().map(|kind| NewItem::new("q", json!({ "kind": kind })));
    let ids: Vec<String> =
        store.queue().enqueue_batch(items.collect())?.into_iter().map(|e| e.id).collect();
    let mut deep = json!(0);
    for _ in 0..=store.limits().json_depth_max {
        deep = json!([deep]);
    }
    let pool =
        store.queue().worker(&["q"]).threads(1).run(move |job| {
            match job.payload()["kind"].as_str().unwrap_or_default() {
                "deep" => Outcome::Complete(deep.clone()),
                _ => Outcome::Complete(json!("done")),
            }
        })?;
    eventually("both settled", || {
        let report = pool.report();
        report.completed + report.dead_lettered >= 2
    });
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.completed, report.dead_lettered, report.retried), (1, 1, 0));
    let deep_item = store.queue().get(&ids[0])?;
    assert_eq!(deep_item.status, ItemStatus::Dead);
    assert_eq!(deep_item.result, None, "nothing of the refused result is kept");
    assert!(deep_item.last_error.unwrap_or_default().contains("JSON nesting depth"));
    let ok_item = store.queue().get(&ids[1])?;
    assert_eq!((ok_item.status, ok_item.result), (ItemStatus::Completed, Some(json!("done"))));
    Ok(())
}

#[test]
fn outcomes_complete_retry_fail_release_and_panic_each_do_what_they_say() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let kinds = ["ok", "retry", "fail", "release", "panic", "too_large", "result_ok", "result_err"];
    let items = kinds.iter().map(|kind| NewItem::new("q", json!({ "kind": kind }))).collect();
    let ids: Vec<String> = store.queue().enqueue_batch(items)?.into_iter().map(|e| e.id).collect();
    let released_once = Arc::new(AtomicBool::new(false));
    let released = Arc::clone(&released_once);
    let big = "x".repeat(store.limits().payload_bytes_max + 1);
    let pool =
        store.queue().worker(&["q"]).threads(3).run(move |job| {
            match job.payload()["kind"].as_str().unwrap_or_default() {
                "ok" => Outcome::Complete(json!("done")),
                "retry" => Outcome::Retry("flaky".into()),
                "fail" => Outcome::Fail("hopeless".into()),
                "release" if !released.swap(true, Ordering::SeqCst) => Outcome::Release,
                "release" => Outcome::Complete(json!("second time")),
                "panic" => panic!("boom"),
                "too_large" => Outcome::Complete(json!(big)),
                "result_ok" => Ok::<Value, String>(json!(1)).into(),
                _ => Err::<Value, String>("via result".into()).into(),
            }
        })?;
    // 8 items, one of them released and run again: 9 claims.
    eventually("every outcome recorded", || {
        let report = pool.report();
        report.completed + report.retried + report.dead_lettered >= 8
    });
    pool.stop();
    let report = pool.join()?;
    let item = |n: usize| store.queue().get(&ids[n]).expect("item");
    assert_eq!(item(0).status, ItemStatus::Completed);
    assert_eq!(
        (item(1).status, item(1).last_error.as_deref()),
        (ItemStatus::Pending, Some("flaky"))
    );
    assert_eq!(
        (item(2).status, item(2).last_error.as_deref()),
        (ItemStatus::Dead, Some("hopeless"))
    );
    assert_eq!(item(3).status, ItemStatus::Completed);
    assert_eq!(item(3).attempt, 1, "the release refunded its attempt");
    assert_eq!(item(4).status, ItemStatus::Pending, "a panic is a retryable failure");
    assert!(item(4).last_error.unwrap_or_default().contains("panicked: boom"));
    assert_eq!(item(5).status, ItemStatus::Dead, "a result too large cannot be kept");
    assert!(item(5).last_error.unwrap_or_default().contains("result bytes"));
    assert_eq!((item(6).status, item(6).result), (ItemStatus::Completed, Some(json!(1))));
    assert_eq!(item(7).last_error.as_deref(), Some("via result"));
    // Every other count zero.
    let mut expected = WorkerReport::default();
    expected.claimed = 9;
    expected.completed = 3;
    expected.retried = 3;
    expected.dead_lettered = 2;
    expected.released = 1;
    expected.panicked = 1;
    assert_eq!(report, expected);
    Ok(())
}

#[test]
fn leases_are_renewed_while_a_handler_runs() -> spindle::Result<()> {
    let (store, clock) = setup();
    let id = enqueue_n(&store, "q", 1).remove(0);
    let (started_tx, started) = bounded::<()>(1);
    let (open, wait_for_gate) = gate();
    let pool =
        store.queue().worker(&["q"]).lease_ms(10_000).poll_interval(Duration::from_millis(5)).run(
            move |_job| {
                let _ = started_tx.send(());
                let _ = wait_for_gate.recv();
                Outcome::Complete(json!("finished late"))
            },
        )?;
    started.recv_timeout(Duration::from_secs(10)).expect("handler started");
    assert_eq!(store.queue().get(&id)?.lease_expires_at_ms, Some(T0 + 10_000));
    for step in 1..=3 {
        clock.advance_ms(6_000);
        let renewed_to = T0 + step * 6_000 + 10_000;
        eventually("the lease renewed", || {
            store.queue().get(&id).expect("item").lease_expires_at_ms == Some(renewed_to)
        });
    }
    open.send(()).expect("open the gate");
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.completed, report.lease_lost), (1, 0));
    let item = store.queue().get(&id)?;
    assert_eq!((item.status, item.attempt), (ItemStatus::Completed, 1));
    Ok(())
}

#[test]
fn renew_after_ms_renews_sooner_than_half_the_lease() -> spindle::Result<()> {
    let (store, clock) = setup();
    let id = enqueue_n(&store, "q", 1).remove(0);
    let (started_tx, started) = bounded::<()>(1);
    let (open, wait_for_gate) = gate();
    let pool = store
        .queue()
        .worker(&["q"])
        .lease_ms(10_000)
        .renew_after_ms(2_000)
        .poll_interval(Duration::from_millis(5))
        .run(move |_job| {
            let _ = started_tx.send(());
            let _ = wait_for_gate.recv();
            Outcome::Complete(json!("finished late"))
        })?;
    started.recv_timeout(Duration::from_secs(10)).expect("handler started");
    // A fifth of the lease and a little more passes each step: long before half of it.
    for step in 1..=3 {
        clock.advance_ms(2_500);
        let renewed_to = T0 + step * 2_500 + 10_000;
        eventually("the lease renewed", || {
            store.queue().get(&id).expect("item").lease_expires_at_ms == Some(renewed_to)
        });
    }
    open.send(()).expect("open the gate");
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.completed, report.lease_lost), (1, 0));
    Ok(())
}

#[test]
fn a_lost_lease_is_reported_to_the_handler_and_its_outcome_refused() -> spindle::Result<()> {
    let (store, clock) = setup();
    let id = enqueue_n(&store, "q", 1).remove(0);
    let (started_tx, started) = bounded::<()>(1);
    let (saw_tx, saw_lost) = bounded::<bool>(1);
    let pool =
        store.queue().worker(&["q"]).lease_ms(10_000).poll_interval(Duration::from_millis(5)).run(
            move |job| {
                let _ = started_tx.send(());
                let deadline = Instant::now() + Duration::from_secs(20);
                while !job.lease_lost() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = saw_tx.send(job.lease_lost());
                Outcome::Complete(json!("too late"))
            },
        )?;
    started.recv_timeout(Duration::from_secs(10)).expect("handler started");
    // The worker stalls past its lease (as a paused process would): the lease lapses.
    clock.advance_ms(20_000);
    store.queue().reclaim_expired()?;
    assert!(saw_lost.recv_timeout(Duration::from_secs(20)).expect("handler told"));
    eventually("the refused completion counted", || pool.report().lease_lost == 1);
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.completed, report.lease_lost), (0, 1));
    let item = store.queue().get(&id)?;
    assert_eq!(item.status, ItemStatus::Pending, "retried after the lapse, not completed");
    assert_eq!(item.last_error.as_deref(), Some("lease expired"));
    Ok(())
}

#[test]
fn stopping_releases_unstarted_items_and_lets_running_handlers_finish() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let ids = enqueue_n(&store, "q", 5);
    let (started_tx, started) = bounded::<String>(5);
    let (open, wait_for_gate) = gate();
    let pool = store.queue().worker(&["q"]).threads(1).prefetch(3).run(move |job| {
        let _ = started_tx.send(job.item().id.clone());
        let _ = wait_for_gate.recv();
        assert!(job.stopping());
        Outcome::Complete(json!("finished"))
    })?;
    let running = started.recv_timeout(Duration::from_secs(10)).expect("handler started");
    eventually("items prefetched", || pool.report().claimed >= 2);
    pool.stop();
    eventually("unstarted items released", || {
        let report = pool.report();
        report.released + 1 == report.claimed
    });
    open.send(()).expect("open the gate");
    let report = pool.join()?;
    assert_eq!((report.completed, report.released + 1), (1, report.claimed));
    assert!(report.claimed <= 4, "at most one handler plus a prefetch of 3");
    assert_eq!(store.queue().get(&running)?.status, ItemStatus::Completed);
    for id in ids.iter().filter(|id| **id != running) {
        let item = store.queue().get(id)?;
        assert_eq!((item.status, item.attempt), (ItemStatus::Pending, 0), "refunded");
    }
    assert!(started.try_recv().is_err(), "no other item was started");
    Ok(())
}

#[test]
fn a_handler_may_settle_its_item_itself() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let id = enqueue_n(&store, "q", 1).remove(0);
    let own = store.clone();
    let pool = store.queue().worker(&["q"]).run(move |job| {
        let item = job.item().id.clone();
        let fence = job.fence();
        own.transaction(move |tx| {
            tx.append_event(Stream::custom("audit"), "done", json!({ "item": item }))?;
            tx.exec(spindle::queue::Complete { id: item, fence, result: json!("mine") })?;
            Ok(spindle::TxOutcome::Commit(()))
        })
        .map(|()| Outcome::Settled)
        .unwrap_or_else(|error| Outcome::Retry(error.to_string()))
    })?;
    eventually("settled", || pool.report().settled_by_handler == 1);
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.settled_by_handler, report.completed), (1, 0));
    assert_eq!(store.queue().get(&id)?.result, Some(json!("mine")));
    assert_eq!(store.events().head(Stream::custom("audit"))?, 1);
    Ok(())
}

#[test]
fn an_idle_pool_wakes_for_new_and_newly_due_items() -> spindle::Result<()> {
    let (store, clock) = setup();
    let (done_tx, done) = unbounded::<String>();
    let pool =
        store.queue().worker(&["q"]).threads(2).poll_interval(Duration::from_millis(5)).run(
            move |job| {
                let _ = done_tx.send(job.item().id.clone());
                Outcome::Complete(Value::Null)
            },
        )?;
    let now = store.queue().enqueue(NewItem::new("q", json!(1)))?.id;
    assert_eq!(done.recv_timeout(Duration::from_secs(10)).expect("woken"), now);
    let later = store.queue().enqueue(NewItem::new("q", json!(2)).run_at_ms(T0 + 60_000))?.id;
    assert!(done.recv_timeout(Duration::from_millis(50)).is_err(), "not due yet");
    clock.advance_ms(60_000);
    assert_eq!(done.recv_timeout(Duration::from_secs(10)).expect("due"), later);
    pool.stop();
    assert_eq!(pool.join()?.completed, 2);
    Ok(())
}

#[test]
fn a_pool_on_a_closed_store_stops_with_closed() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let pool = store
        .queue()
        .worker(&["q"])
        .poll_interval(Duration::from_millis(5))
        .run(|_job| Outcome::Complete(Value::Null))?;
    assert!(!pool.is_finished());
    store.close()?;
    eventually("the pool stopped on its own", || pool.is_finished());
    assert!(matches!(pool.join(), Err(Error::Closed)));
    Ok(())
}

#[test]
fn bad_pool_settings_are_refused_and_write_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let id = enqueue_n(&store, "q", 1).remove(0);
    let position = store.events().read_all(0, 100)?.len();
    let queue = store.queue();
    let handler = |_job: &spindle::queue::Job| Outcome::Complete(Value::Null);
    let refusals = [
        queue.worker(&["q"]).threads(0).run(handler).err(),
        queue.worker(&["q"]).threads(1025).run(handler).err(),
        queue.worker(&["q"]).threads(600).prefetch(401).run(handler).err(),
        queue.worker(&["q"]).threads(2).prefetch(999).run(handler).err(),
        queue.worker(&["q"]).lease_ms(0).run(handler).err(),
        queue.worker(&[]).run(handler).err(),
        queue.worker(&["bad\nqueue"]).run(handler).err(),
        queue.worker(&["q"]).worker_id("").run(handler).err(),
        queue.worker(&["q"]).poll_interval(Duration::ZERO).run(handler).err(),
        queue.worker(&["q"]).lease_ms(1_000).renew_after_ms(0).run(handler).err(),
        queue.worker(&["q"]).lease_ms(1_000).renew_after_ms(1_000).run(handler).err(),
    ];
    for (index, refusal) in refusals.into_iter().enumerate() {
        assert!(
            matches!(refusal, Some(Error::InvalidInput(_) | Error::TooLarge { .. })),
            "setting {index} refused: {refusal:?}"
        );
    }
    let item = store.queue().get(&id)?;
    assert_eq!((item.status, item.attempt), (ItemStatus::Pending, 0), "nothing claimed");
    assert_eq!(store.events().read_all(0, 100)?.len(), position, "nothing written");
    Ok(())
}

#[test]
fn complete_and_claim_finishes_one_item_and_takes_the_next() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let ids = enqueue_n(&store, "q", 2);
    let queue = store.queue();
    let next = Claim::new("w", &["q"], 10_000);
    let first = queue.claim("w", &["q"], 10_000)?.expect("first");
    let second = queue.complete_and_claim(&first.item.id, first.fence, json!("a"), &next)?;
    let second = second.expect("second");
    assert_eq!(second.item.id, ids[1]);
    assert_eq!(queue.get(&ids[0])?.result, Some(json!("a")));
    assert_eq!(queue.complete_and_claim(&second.item.id, second.fence, json!("b"), &next)?, None);
    assert_eq!(queue.get(&ids[1])?.status, ItemStatus::Completed);
    let kinds: Vec<String> = common::read_stream(&store, &Stream::queue("q"))
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(kinds, ["enqueued", "claimed", "completed", "claimed", "completed"]);
    Ok(())
}

#[test]
fn a_refused_completion_claims_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let ids = enqueue_n(&store, "q", 2);
    let queue = store.queue();
    let next = Claim::new("w", &["q"], 10_000);
    let first = queue.claim("w", &["q"], 10_000)?.expect("first");
    let stale = queue.complete_and_claim(&first.item.id, first.fence + 1, json!(1), &next);
    assert!(matches!(stale, Err(Error::LeaseLost(_))));
    let failed = queue.fail_and_claim(&first.item.id, first.fence + 1, "x", true, &next);
    assert!(matches!(failed, Err(Error::LeaseLost(_))));
    let bad_next = Claim::new("w", &[], 10_000);
    let refused = queue.complete_and_claim(&first.item.id, first.fence, json!(1), &bad_next);
    assert!(matches!(refused, Err(Error::InvalidInput(_))));
    assert_eq!(queue.get(&ids[0])?.status, ItemStatus::Claimed, "not completed");
    assert_eq!(queue.get(&ids[1])?.attempt, 0, "nothing claimed");
    Ok(())
}

#[test]
fn fail_and_claim_records_the_failure_and_takes_the_next() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let ids = enqueue_n(&store, "q", 2);
    let queue = store.queue();
    let first = queue.claim("w", &["q"], 10_000)?.expect("first");
    let next = Claim::new("w", &["q"], 10_000);
    let (outcome, claimed) =
        queue.fail_and_claim(&first.item.id, first.fence, "no", true, &next)?;
    assert_eq!(outcome, FailOutcome::Retrying { run_at_ms: T0 + 1_000 });
    assert_eq!(claimed.expect("next").item.id, ids[1]);
    assert_eq!(queue.get(&ids[0])?.last_error.as_deref(), Some("no"));
    Ok(())
}

#[test]
fn a_cycle_settles_renews_and_claims_each_item_on_its_own() -> spindle::Result<()> {
    let (store, clock) = setup();
    let ids = enqueue_n(&store, "q", 6);
    let queue = store.queue();
    let held = queue.claim_batch("w", &["q"], 10_000, 4)?;
    clock.advance_ms(1_000);
    let complete = |n: usize, fence: u64| {
        Settlement::Complete(Completion { id: held[n].item.id.clone(), fence, result: json!(n) })
    };
    let cycle = Cycle {
        worker_id: "w".into(),
        queues: vec!["q".into()],
        lease_ms: 10_000,
        settle: vec![
            complete(0, held[0].fence),
            complete(1, held[1].fence + 7),
            Settlement::Fail(Fail {
                id: held[2].item.id.clone(),
                fence: held[2].fence,
                error: "e".into(),
                retryable: false,
            }),
        ],
        renew: vec![
            Lease { id: held[3].item.id.clone(), fence: held[3].fence },
            Lease { id: held[3].item.id.clone(), fence: 99 },
        ],
        claim_max: 5,
    };
    let cycled = store.exec(cycle)?;
    assert!(matches!(cycled.settled[0], Ok(Settled::Completed)));
    assert!(matches!(cycled.settled[1], Err(Error::LeaseLost(_))));
    assert!(matches!(cycled.settled[2], Ok(Settled::Failed(FailOutcome::DeadLettered))));
    assert_eq!(*cycled.renewed[0].as_ref().expect("renewed"), T0 + 11_000);
    assert!(matches!(cycled.renewed[1], Err(Error::LeaseLost(_))));
    let claimed: Vec<&str> = cycled.claimed.iter().map(|c| c.item.id.as_str()).collect();
    assert_eq!(claimed, [ids[4].as_str(), ids[5].as_str()]);
    assert_eq!(queue.get(&ids[0])?.status, ItemStatus::Completed);
    assert_eq!(queue.get(&ids[1])?.status, ItemStatus::Claimed, "the stale fence wrote nothing");
    assert_eq!(queue.get(&ids[2])?.status, ItemStatus::Dead);
    assert_eq!(queue.get(&ids[3])?.lease_expires_at_ms, Some(T0 + 11_000));
    let completed = common::read_stream(&store, &Stream::queue("q"))
        .into_iter()
        .filter(|event| event.event_type == "completed")
        .collect::<Vec<_>>();
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].payload["items"].as_array().map(Vec::len), Some(1));
    Ok(())
}

#[test]
fn a_bad_cycle_is_refused_and_writes_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let ids = enqueue_n(&store, "q", 1);
    let held = store.queue().claim("w", &["q"], 10_000)?.expect("held");
    let good = Cycle {
        worker_id: "w".into(),
        queues: vec!["q".into()],
        lease_ms: 10_000,
        settle: vec![Settlement::Complete(Completion {
            id: held.item.id.clone(),
            fence: held.fence,
            result: json!(1),
        })],
        renew: Vec::new(),
        claim_max: 1,
    };
    let position = store.events().read_all(0, 100)?.len();
    for bad in [
        Cycle { lease_ms: 0, ..good.clone() },
        Cycle { queues: Vec::new(), ..good.clone() },
        Cycle { worker_id: String::new(), ..good.clone() },
        Cycle { claim_max: 1001, ..good.clone() },
    ] {
        assert!(store.exec(bad).is_err());
    }
    assert_eq!(store.queue().get(&ids[0])?.status, ItemStatus::Claimed);
    assert_eq!(store.events().read_all(0, 100)?.len(), position, "nothing written");
    Ok(())
}

#[test]
fn a_handler_sees_its_item_cancelled_and_its_outcome_is_refused_and_counted() -> spindle::Result<()>
{
    let (store, _clock) = setup();
    let id = enqueue_n(&store, "q", 1).remove(0);
    let (started_tx, started) = bounded::<()>(1);
    let (open, wait_for_gate) = gate();
    let (saw_tx, saw) = bounded::<(bool, bool)>(1);
    let pool =
        store.queue().worker(&["q"]).lease_ms(10_000).poll_interval(Duration::from_millis(5)).run(
            move |job| {
                let before = job.cancelled();
                let _ = started_tx.send(());
                let _ = wait_for_gate.recv();
                let _ = saw_tx.send((before, job.cancelled()));
                Outcome::Complete(json!("finished anyway"))
            },
        )?;
    started.recv_timeout(Duration::from_secs(10)).expect("handler started");
    store.queue().cancel(&id)?;
    open.send(()).expect("open the gate");
    let (before, after) = saw.recv_timeout(Duration::from_secs(20)).expect("handler checked");
    assert!(!before && after, "not cancelled before, cancelled at the next check");
    eventually("the refused outcome counted", || pool.report().cancelled == 1);
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.completed, report.cancelled, report.lease_lost), (0, 1, 0));
    assert_eq!((report.retried, report.dead_lettered), (0, 0));
    let item = store.queue().get(&id)?;
    assert_eq!((item.status, item.result), (ItemStatus::Cancelled, None), "never completed");
    Ok(())
}

#[test]
fn a_cancel_is_seen_at_the_next_lease_renewal_and_never_retried() -> spindle::Result<()> {
    let (store, clock) = setup();
    let id = enqueue_n(&store, "q", 1).remove(0);
    let (started_tx, started) = bounded::<()>(1);
    let (saw_tx, saw) = bounded::<bool>(1);
    let pool =
        store.queue().worker(&["q"]).lease_ms(10_000).poll_interval(Duration::from_millis(5)).run(
            move |job| {
                let _ = started_tx.send(());
                // Only the pool's flag, which a renewal sets: no read of the store here.
                let deadline = Instant::now() + Duration::from_secs(20);
                while !job.lease_lost() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = saw_tx.send(job.lease_lost());
                Outcome::Retry("stopped: cancelled".into())
            },
        )?;
    started.recv_timeout(Duration::from_secs(10)).expect("handler started");
    store.queue().cancel(&id)?;
    clock.advance_ms(6_000);
    assert!(saw.recv_timeout(Duration::from_secs(20)).expect("handler told"), "told");
    eventually("the refused outcome counted", || pool.report().cancelled == 1);
    clock.advance_ms(60_000);
    store.queue().reclaim_expired()?;
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.retried, report.cancelled, report.claimed), (0, 1, 1), "not retried");
    let item = store.queue().get(&id)?;
    assert_eq!((item.status, item.attempt), (ItemStatus::Cancelled, 1));
    assert_eq!(item.last_error, None, "the handler's failure was refused");
    Ok(())
}

#[test]
fn an_attempt_past_its_run_timeout_is_failed_as_retryable_and_its_handler_told()
-> spindle::Result<()> {
    let (store, clock) = setup();
    let item = NewItem::new("q", json!("slow")).run_timeout_ms(5_000).max_attempts(3);
    let id = store.queue().enqueue(item)?.id;
    assert_eq!(store.queue().get(&id)?.run_timeout_ms, Some(5_000));
    let (started_tx, started) = bounded::<()>(1);
    let (saw_tx, saw) = bounded::<(bool, bool)>(1);
    let pool =
        store.queue().worker(&["q"]).lease_ms(60_000).poll_interval(Duration::from_millis(5)).run(
            move |job| {
                let before = job.timed_out();
                let _ = started_tx.send(());
                let deadline = Instant::now() + Duration::from_secs(20);
                while !job.timed_out() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = saw_tx.send((before, job.timed_out() && job.lease_lost()));
                Outcome::Complete(json!("too late"))
            },
        )?;
    started.recv_timeout(Duration::from_secs(10)).expect("handler started");
    clock.advance_ms(4_999);
    assert_eq!(store.queue().get(&id)?.status, ItemStatus::Claimed, "not yet");
    clock.advance_ms(1);
    let (before, after) = saw.recv_timeout(Duration::from_secs(20)).expect("handler told");
    assert!(!before && after, "told once its time was up, not before");
    eventually("the timeout recorded", || pool.report().retried == 1);
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.timed_out, report.retried, report.completed), (1, 1, 0));
    assert_eq!(report.lease_lost, 0, "the handler's late outcome is dropped, not refused");
    let item = store.queue().get(&id)?;
    assert_eq!((item.status, item.attempt, item.result), (ItemStatus::Pending, 1, None));
    assert_eq!(item.last_error.as_deref(), Some("timed out after 5000 ms"));
    Ok(())
}

#[test]
fn an_attempt_within_its_run_timeout_completes_and_a_bad_timeout_writes_nothing()
-> spindle::Result<()> {
    let (store, _clock) = setup();
    let limits = spindle::Limits::default();
    for bad in [0, -1, limits.lease_ms_max + 1] {
        let refused = store.queue().enqueue(NewItem::new("q", json!(1)).run_timeout_ms(bad));
        assert!(matches!(refused, Err(Error::InvalidInput(_))), "{bad}: {refused:?}");
    }
    assert!(store.queue().stats()?.is_empty(), "nothing enqueued");
    let id = store.queue().enqueue(NewItem::new("q", json!(1)).run_timeout_ms(5_000))?.id;
    let pool = store
        .queue()
        .worker(&["q"])
        .poll_interval(Duration::from_millis(5))
        .run(|_job| Outcome::Complete(json!("in time")))?;
    eventually("completed", || pool.report().completed == 1);
    pool.stop();
    let report = pool.join()?;
    assert_eq!((report.completed, report.timed_out), (1, 0));
    assert_eq!(store.queue().get(&id)?.result, Some(json!("in time")));
    Ok(())
}
