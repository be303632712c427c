//! Periodic jobs (issue 31 item 1): a schedule enqueues its item once per tick, whoever fires
//! it (the store's alarm, a reopened store, worker pools of several stores, callers), catches up
//! after downtime by its policy, and refuses bad input writing nothing. Every test runs on the
//! engine under test (`SPINDLE_TEST_ENGINE`), time on a `ManualClock`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::SharedStore;
use serde_json::{Value, json};
use spindle::queue::Outcome;
use spindle::{
    Cadence, CatchUp, Error, ItemFilter, ItemStatus, ManualClock, NewItem, Options, Page,
    QueueItem, Schedule, Store, Unique,
};

/// A time between two minutes: 2027-01-15 08:00:00.123 UTC.
const T0: i64 = 1_800_000_000_123;
const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// Long enough that a wait that times out is a missed firing, not a slow machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn options(clock: &ManualClock) -> Options {
    Options::default().clock(Arc::new(clock.clone()))
}

fn setup() -> (Store, ManualClock) {
    let clock = ManualClock::new(T0);
    (common::new_store_with(options(&clock)), clock)
}

/// The first minute tick after `ms`.
fn next_minute(ms: i64) -> i64 {
    (ms / MINUTE_MS + 1) * MINUTE_MS
}

/// Every item of `queue` in any status, by id.
fn items_of(store: &Store, queue: &str) -> spindle::Result<Vec<QueueItem>> {
    let mut all = Vec::new();
    for status in [ItemStatus::Pending, ItemStatus::Claimed, ItemStatus::Completed] {
        all.extend(store.queue().items(queue, ItemFilter::status(status), Page::first(1000))?);
    }
    Ok(all)
}

/// The ticks of `items`, from their metadata, in order.
fn ticks_of(items: &[QueueItem]) -> Vec<i64> {
    let mut ticks: Vec<i64> = items
        .iter()
        .map(|item| {
            let metadata = item.metadata.as_ref().expect("a fired item has metadata");
            metadata["schedule"]["tick_ms"].as_i64().expect("its tick")
        })
        .collect();
    ticks.sort_unstable();
    ticks
}

fn every_minute(name: &str, queue: &str) -> Schedule {
    Schedule::every(name, MINUTE_MS, NewItem::new(queue, json!({ "job": name })))
}

#[test]
fn an_interval_schedule_enqueues_one_item_per_tick_and_no_more() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let item = NewItem::new("q", json!({ "n": 1 })).priority(5).max_attempts(7).tag("nightly");
    let info = queue.put_schedule(Schedule::every("m", MINUTE_MS, item))?;
    let first = next_minute(T0);
    assert_eq!(info.next_tick_ms, Some(first));
    assert_eq!(info.last_tick_ms, None);
    // A call's count is what it enqueued itself: the store's alarm, due in the same batch,
    // may have fired the tick just before it. The items tell what was fired.
    queue.run_schedules()?;
    assert!(items_of(&store, "q")?.is_empty(), "nothing due before the first tick");
    clock.set_ms(first - 1);
    queue.run_schedules()?;
    assert!(items_of(&store, "q")?.is_empty(), "nor a millisecond before it");
    clock.set_ms(first);
    queue.run_schedules()?;
    assert_eq!(queue.run_schedules()?, 0, "a tick fires once");
    let items = items_of(&store, "q")?;
    assert_eq!(items.len(), 1, "the tick's item");
    let fired = &items[0];
    assert_eq!(fired.payload, json!({ "n": 1 }));
    assert_eq!((fired.priority, fired.max_attempts, fired.run_at_ms), (5, 7, first));
    assert_eq!(fired.tags, vec!["nightly".to_owned()]);
    assert_eq!(fired.metadata, Some(json!({ "schedule": { "name": "m", "tick_ms": first } })));
    clock.set_ms(first + MINUTE_MS + 5);
    queue.run_schedules()?;
    assert_eq!(ticks_of(&items_of(&store, "q")?), vec![first, first + MINUTE_MS]);
    let kept = &queue.schedules(Page::first(100))?[0];
    assert_eq!(kept.next_tick_ms, Some(first + 2 * MINUTE_MS));
    assert_eq!(kept.last_tick_ms, Some(first + MINUTE_MS));
    Ok(())
}

#[test]
fn missed_ticks_skip_to_now_or_backfill_the_latest_ones_oldest_first() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    queue.put_schedule(every_minute("skip", "a"))?;
    queue.put_schedule(every_minute("fill", "b").backfill(3))?;
    let first = next_minute(T0);
    // Ten ticks go by while nobody fires them.
    clock.set_ms(first + 9 * MINUTE_MS + 30_000);
    queue.run_schedules()?;
    let latest = first + 9 * MINUTE_MS;
    assert_eq!(ticks_of(&items_of(&store, "a")?), vec![latest], "skip: the latest tick only");
    let filled = vec![latest - 2 * MINUTE_MS, latest - MINUTE_MS, latest];
    assert_eq!(ticks_of(&items_of(&store, "b")?), filled, "backfill: the latest three");
    let claimed = queue.claim("w", &["b"], 1_000)?.expect("an item");
    assert_eq!(claimed.item.run_at_ms, latest - 2 * MINUTE_MS, "the oldest tick runs first");
    for info in queue.schedules(Page::first(100))? {
        assert_eq!(info.next_tick_ms, Some(latest + MINUTE_MS), "{}: on to now", info.name);
    }
    Ok(())
}

#[test]
fn the_store_fires_a_due_tick_by_itself_with_its_next_write() -> spindle::Result<()> {
    let (store, clock) = setup();
    store.queue().put_schedule(every_minute("m", "q"))?;
    clock.set_ms(next_minute(T0));
    // Any write runs the store's due alarm in its batch: no call names the schedule.
    store.events().append(spindle::Stream::custom("other"), "e", json!({}))?;
    assert_eq!(items_of(&store, "q")?.len(), 1, "fired by the alarm");
    assert_eq!(store.queue().run_schedules()?, 0, "and only once");
    Ok(())
}

#[test]
fn the_stores_sweep_fires_every_tenants_schedules_each_in_its_tenant() -> spindle::Result<()> {
    let (store, clock) = setup();
    let acme = store.tenant("acme")?;
    acme.queue().put_schedule(every_minute("theirs", "q"))?;
    store.queue().put_schedule(every_minute("ours", "q"))?;
    clock.set_ms(next_minute(T0));
    store.events().append(spindle::Stream::custom("other"), "e", json!({}))?;
    let (ours, theirs) = (items_of(&store, "q")?, items_of(&acme, "q")?);
    assert_eq!(ours.len(), 1);
    assert_eq!(theirs.len(), 1);
    assert_eq!(
        ours[0].metadata.as_ref().map(|m| m["schedule"]["name"].clone()),
        Some(json!("ours"))
    );
    assert_eq!(
        theirs[0].metadata.as_ref().map(|m| m["schedule"]["name"].clone()),
        Some(json!("theirs"))
    );
    assert_eq!(
        acme.queue().schedules(Page::first(100))?.len(),
        1,
        "a tenant sees its own schedules"
    );
    Ok(())
}

#[test]
fn a_store_reopened_after_downtime_fires_the_missed_ticks_at_open_once() -> spindle::Result<()> {
    let shared = SharedStore::new();
    let clock = ManualClock::new(T0);
    let store = shared.open_with(options(&clock));
    store.queue().put_schedule(every_minute("skip", "a"))?;
    store.queue().put_schedule(every_minute("fill", "b").backfill(4))?;
    store.close()?;
    clock.set_ms(next_minute(T0) + 10 * MINUTE_MS);
    for _ in 0..3 {
        // Opening fires what was missed, by each schedule's policy; no call asks for it.
        let store = shared.open_with(options(&clock));
        assert_eq!(items_of(&store, "a")?.len(), 1);
        assert_eq!(items_of(&store, "b")?.len(), 4);
        store.close()?;
    }
    Ok(())
}

#[test]
fn several_stores_firing_at_once_enqueue_each_tick_once() -> spindle::Result<()> {
    let shared = SharedStore::new();
    let clock = ManualClock::new(T0);
    let stores: Vec<Store> = (0..3).map(|_| shared.open_with(options(&clock))).collect();
    stores[0].queue().put_schedule(every_minute("m", "q"))?;
    let first = next_minute(T0);
    for tick in 0..5 {
        clock.set_ms(first + tick * MINUTE_MS);
        let threads: Vec<_> = stores
            .iter()
            .flat_map(|store| (0..3).map(move |_| store.clone()))
            .map(|store| thread::spawn(move || store.queue().run_schedules()))
            .collect();
        let fired: u64 =
            threads.into_iter().map(|t| t.join().expect("thread")).sum::<spindle::Result<u64>>()?;
        assert!(fired <= 1, "tick {tick}: {fired} items");
    }
    let expected: Vec<i64> = (0..5).map(|tick| first + tick * MINUTE_MS).collect();
    for store in &stores {
        // A firing that found another process firing (PostgreSQL) left it to that one.
        store.queue().run_schedules()?;
    }
    assert_eq!(ticks_of(&items_of(&stores[1], "q")?), expected, "each tick once");
    for store in stores {
        store.close()?;
    }
    Ok(())
}

#[test]
fn worker_pools_of_several_stores_run_each_tick_once() -> spindle::Result<()> {
    let shared = SharedStore::new();
    let clock = ManualClock::new(T0);
    let stores: Vec<Store> = (0..3).map(|_| shared.open_with(options(&clock))).collect();
    // Put by a store that then closes: the pools find the schedule themselves.
    let putter = shared.open_with(options(&clock));
    putter.queue().put_schedule(every_minute("m", "q"))?;
    putter.close()?;
    let runs: Arc<Mutex<BTreeMap<i64, usize>>> = Arc::default();
    let pools = stores
        .iter()
        .map(|store| {
            let runs = Arc::clone(&runs);
            // Leases outlast the test's jumps of the clock: a run is never taken over.
            let pool = store.queue().worker(&["q"]).threads(2).lease_ms(HOUR_MS);
            pool.poll_interval(Duration::from_millis(10)).run(move |job| {
                let tick = job.item().metadata.as_ref().map(|m| m["schedule"]["tick_ms"].clone());
                let tick = tick.and_then(|tick| tick.as_i64()).expect("a tick");
                *runs.lock().expect("lock").entry(tick).or_default() += 1;
                Outcome::Complete(Value::Null)
            })
        })
        .collect::<spindle::Result<Vec<_>>>()?;
    let first = next_minute(T0);
    for tick in 0..4 {
        clock.set_ms(first + tick * MINUTE_MS);
        let deadline = Instant::now() + PATIENCE;
        while runs.lock().expect("lock").len() <= tick as usize {
            assert!(Instant::now() < deadline, "tick {tick} not run: {runs:?}");
            thread::sleep(Duration::from_millis(5));
        }
    }
    for pool in pools {
        pool.stop();
        pool.join()?;
    }
    let runs = runs.lock().expect("lock").clone();
    let expected: BTreeMap<i64, usize> = (0..4).map(|tick| (first + tick * MINUTE_MS, 1)).collect();
    assert_eq!(runs, expected, "each tick run once, by one pool");
    let items = items_of(&stores[0], "q")?;
    assert_eq!(ticks_of(&items), expected.keys().copied().collect::<Vec<_>>(), "one item each");
    for store in stores {
        store.close()?;
    }
    Ok(())
}

#[test]
fn a_blocking_claim_fires_a_due_tick_and_takes_its_item() -> spindle::Result<()> {
    let (store, clock) = setup();
    store.queue().put_schedule(every_minute("m", "q"))?;
    clock.set_ms(next_minute(T0));
    let claimed = store.queue().claim_wait("w", &["q"], 1_000, PATIENCE)?.expect("the tick's item");
    assert_eq!(claimed.item.run_at_ms, next_minute(T0));
    Ok(())
}

#[test]
fn a_cron_schedule_fires_on_its_time_zones_wall_clock() -> spindle::Result<()> {
    // 2027-01-15 00:00 UTC: 03:00 in Paris (UTC+1) is 02:00 UTC.
    let midnight_ms = 1_799_971_200_000;
    let clock = ManualClock::new(midnight_ms);
    let store = common::new_store_with(options(&clock));
    let item = NewItem::new("reports", json!({}));
    let info = store
        .queue()
        .put_schedule(Schedule::cron("nightly", "0 3 * * *", item).time_zone("Europe/Paris"))?;
    let expected =
        Cadence::Cron { expression: "0 3 * * *".into(), time_zone: "Europe/Paris".into() };
    assert_eq!(info.cadence, expected);
    assert_eq!(info.next_tick_ms, Some(midnight_ms + 2 * HOUR_MS));
    clock.set_ms(midnight_ms + 2 * HOUR_MS);
    store.queue().run_schedules()?;
    assert_eq!(ticks_of(&items_of(&store, "reports")?), vec![midnight_ms + 2 * HOUR_MS]);
    let next = store.queue().schedules(Page::first(100))?[0].next_tick_ms;
    assert_eq!(next, Some(midnight_ms + 26 * HOUR_MS), "the next night");
    Ok(())
}

#[test]
fn putting_the_same_cadence_again_keeps_its_ticks_and_a_new_one_starts_from_now()
-> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    let first = next_minute(T0);
    queue.put_schedule(every_minute("m", "q"))?;
    clock.set_ms(first);
    queue.run_schedules()?;
    clock.set_ms(first + 30_000);
    // Put again, as an application does at every start: its ticks stay where they were.
    let again = queue.put_schedule(every_minute("m", "q").backfill(10))?;
    assert_eq!((again.next_tick_ms, again.last_tick_ms), (Some(first + MINUTE_MS), Some(first)));
    assert_eq!(again.catch_up, CatchUp::Backfill(10));
    assert_eq!(again.created_at_ms, T0);
    let hourly = Schedule::every("m", HOUR_MS, NewItem::new("q", json!({})));
    let changed = queue.put_schedule(hourly)?;
    let now = clock.now_ms();
    assert_eq!(changed.next_tick_ms, Some((now / HOUR_MS + 1) * HOUR_MS), "from now on");
    assert_eq!(changed.created_at_ms, T0, "still the schedule put first");
    assert_eq!(queue.schedules(Page::first(100))?.len(), 1);
    assert_eq!(items_of(&store, "q")?.len(), 1, "no tick fired twice or by the put");
    Ok(())
}

#[test]
fn a_removed_schedule_fires_no_more_and_its_items_stay() -> spindle::Result<()> {
    let (store, clock) = setup();
    let queue = store.queue();
    queue.put_schedule(every_minute("m", "q"))?;
    clock.set_ms(next_minute(T0));
    queue.run_schedules()?;
    assert!(queue.remove_schedule("m")?);
    assert!(!queue.remove_schedule("m")?, "gone already");
    clock.advance_ms(10 * MINUTE_MS);
    assert_eq!(queue.run_schedules()?, 0);
    assert!(queue.schedules(Page::first(100))?.is_empty());
    assert_eq!(items_of(&store, "q")?.len(), 1, "what it enqueued stays");
    Ok(())
}

#[test]
fn bad_schedules_are_refused_and_write_nothing() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let item = || NewItem::new("q", json!({}));
    let long_name = "n".repeat(240);
    let bad = vec![
        Schedule::cron("c", "not a cron", item()),
        Schedule::cron("c", "61 * * * *", item()),
        Schedule::cron("c", "0 0 30 2 *", item()),
        Schedule::cron("c", "0 3 * * *", item()).time_zone("Mars/Olympus_Mons"),
        Schedule::every("i", 0, item()),
        Schedule::every("i", 999, item()),
        Schedule::every("i", -MINUTE_MS, item()),
        Schedule::every("i", MINUTE_MS, item()).time_zone("UTC"),
        Schedule::every("i", MINUTE_MS, item()).backfill(0),
        Schedule::every("i", MINUTE_MS, item()).backfill(101),
        Schedule::every("", MINUTE_MS, item()),
        Schedule::every(long_name.as_str(), MINUTE_MS, item()),
        Schedule::every("i", MINUTE_MS, item().dedupe_key("k")),
        Schedule::every("i", MINUTE_MS, item().unique(Unique::new("k"))),
        Schedule::every("i", MINUTE_MS, item().run_at_ms(T0)),
        Schedule::every("i", MINUTE_MS, item().metadata(json!({ "schedule": 1 }))),
        Schedule::every("i", MINUTE_MS, item().metadata(json!([1]))),
        Schedule::every("i", MINUTE_MS, item().max_attempts(0)),
        Schedule::every("i", MINUTE_MS, NewItem::new("", json!({}))),
    ];
    for schedule in bad {
        let refused = queue.put_schedule(schedule.clone());
        assert!(
            matches!(refused, Err(Error::InvalidInput(_) | Error::TooLarge { .. })),
            "{schedule:?}: {refused:?}"
        );
    }
    assert!(queue.schedules(Page::first(100))?.is_empty(), "no schedule kept");
    assert!(store.events().read_all(0, 10)?.is_empty(), "no event");
    assert!(queue.stats()?.is_empty(), "no item");
    Ok(())
}

#[test]
fn a_tenant_keeps_at_most_the_schedules_bound() -> spindle::Result<()> {
    let (store, _clock) = setup();
    let items: Vec<Schedule> = (0..spindle::queue::SCHEDULES_MAX)
        .map(|n| every_minute(&format!("s{n:04}"), "q"))
        .collect();
    store.transaction(move |tx| {
        for schedule in items {
            tx.exec(spindle::queue::PutSchedule { schedule })?;
        }
        Ok(spindle::TxOutcome::Commit(()))
    })?;
    let refused = store.queue().put_schedule(every_minute("one-more", "q"));
    assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    let (first, rest) = (store.queue().schedules(Page::first(600))?, Page::after("s0599", 600));
    assert_eq!(first.len() + store.queue().schedules(rest)?.len(), spindle::queue::SCHEDULES_MAX);
    // Replacing one is no new schedule.
    store.queue().put_schedule(every_minute("s0000", "other"))?;
    Ok(())
}

/// The variable that makes this test binary a child process of the test below.
const CHILD_ENV: &str = "SPINDLE_SCHEDULES_CHILD";
const CHILD_TEST: &str = "three_processes_fire_each_tick_once_and_run_a_serial_queue_one_at_a_time";
const SERIAL_ITEMS: usize = 30;
const TICKS: i64 = 20;

/// Three processes (this test binary run again as children) open one store, each on a clock
/// of its own going through the same twenty minutes, and fire the schedule three times a
/// minute; then each claims from a queue limited to one item at a time until none is left.
/// Every tick makes one item, and no two processes hold a serial item at once.
#[test]
fn three_processes_fire_each_tick_once_and_run_a_serial_queue_one_at_a_time() -> spindle::Result<()>
{
    if let Ok(location) = std::env::var(CHILD_ENV) {
        return schedules_child(&location);
    }
    let shared = SharedStore::new();
    let clock = ManualClock::new(T0);
    let store = shared.open_with(options(&clock));
    store.queue().put_schedule(every_minute("m", "q").backfill(100))?;
    store.queue().set_concurrency("serial", Some(1))?;
    for n in 0..SERIAL_ITEMS {
        store.queue().enqueue(NewItem::new("serial", json!({ "n": n })))?;
    }
    store.close()?;
    let children: Vec<_> = (0..3)
        .map(|_| common::spawn_child_test(CHILD_TEST, CHILD_ENV, shared.location()))
        .collect();
    let mut held: Vec<(u128, u128, String)> = Vec::new();
    for mut child in children {
        let stdout = child.stdout.take().expect("the child's output");
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("a line");
            let words: Vec<&str> = line.split_whitespace().collect();
            if let ["held", id, from, to] = words[..] {
                held.push((from.parse().expect("µs"), to.parse().expect("µs"), id.to_owned()));
            }
        }
        assert!(child.wait().expect("the child ends").success(), "a child failed");
    }
    let store = shared.open_with(options(&clock));
    let first = next_minute(T0);
    let expected: Vec<i64> = (0..TICKS).map(|k| first + k * MINUTE_MS).collect();
    assert_eq!(ticks_of(&items_of(&store, "q")?), expected, "each tick once, by one process");
    held.sort();
    assert_eq!(held.len(), SERIAL_ITEMS, "every serial item held once: {held:?}");
    for pair in held.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "two serial items held at once: {pair:?}");
    }
    let serial = store.queue().stats()?.into_iter().find(|s| s.queue == "serial");
    assert_eq!(serial.map(|s| s.completed), Some(SERIAL_ITEMS as u64));
    store.close()
}

/// A child of the test above: fires the schedule through twenty minutes of its own clock,
/// then works the serial queue, printing `held ID FROM_µs TO_µs` (wall clock) for each item
/// it held.
fn schedules_child(location: &str) -> spindle::Result<()> {
    let clock = ManualClock::new(T0);
    let store = common::open_at(location, options(&clock));
    let first = next_minute(T0);
    for k in 0..TICKS {
        clock.set_ms(first + k * MINUTE_MS);
        for _ in 0..3 {
            store.queue().run_schedules()?;
        }
    }
    let me = format!("child-{}", std::process::id());
    let mut out = std::io::stdout().lock();
    // The harness printed `test NAME ... ` without a line break: end its line.
    writeln!(out).expect("print");
    loop {
        let Some(claimed) = store.queue().claim(&me, &["serial"], HOUR_MS)? else {
            let stats = store.queue().stats()?;
            if stats.iter().any(|s| s.queue == "serial" && s.pending > 0) {
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            break;
        };
        let from = wall_us();
        thread::sleep(Duration::from_millis(2));
        let to = wall_us();
        writeln!(out, "held {} {from} {to}", claimed.item.id).expect("print");
        out.flush().expect("flush");
        store.queue().complete(&claimed.item.id, claimed.fence, Value::Null)?;
    }
    store.close()
}

/// The wall clock in microseconds (the processes' one shared time).
fn wall_us() -> u128 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.expect("after 1970").as_micros()
}

#[test]
fn a_suspended_tenants_schedules_wait_and_catch_up_once_it_is_active() -> spindle::Result<()> {
    let (store, clock) = setup();
    store.auth().create_tenant("acme", "Acme")?;
    let acme = store.tenant("acme")?;
    acme.queue().put_schedule(every_minute("theirs", "q").backfill(5))?;
    let status = |status| spindle::TenantUpdate::default().status(status);
    store.auth().update_tenant("acme", status(spindle::TenantStatus::Suspended))?;
    clock.set_ms(next_minute(T0) + 2 * MINUTE_MS);
    // The store's sweep runs with this write; a suspended tenant's writes are refused.
    store.events().append(spindle::Stream::custom("other"), "e", json!({}))?;
    assert!(items_of(&acme, "q")?.is_empty(), "nothing enqueued while suspended");
    store.auth().update_tenant("acme", status(spindle::TenantStatus::Active))?;
    store.events().append(spindle::Stream::custom("other"), "e", json!({}))?;
    assert_eq!(items_of(&acme, "q")?.len(), 3, "the missed ticks, by its backfill");
    Ok(())
}

#[test]
fn a_schedule_that_cannot_fire_is_skipped_and_the_others_fire() -> spindle::Result<()> {
    let shared = SharedStore::new();
    let clock = ManualClock::new(T0);
    let store = shared.open_with(options(&clock));
    let big = NewItem::new("q", json!({ "blob": "x".repeat(4_000) }));
    store.queue().put_schedule(Schedule::every("big", MINUTE_MS, big))?;
    store.queue().put_schedule(every_minute("small", "q"))?;
    store.close()?;
    // Reopened with a smaller payload bound: the big template no longer enqueues.
    let limits = spindle::Limits::default().payload_bytes_max(1_000);
    let store = shared.open_with(options(&clock).limits(limits));
    for minute in 1..=3 {
        clock.set_ms(next_minute(T0) + (minute - 1) * MINUTE_MS);
        store.queue().run_schedules()?;
        let items = items_of(&store, "q")?;
        assert_eq!(items.len(), minute as usize, "the small one fires each minute");
        assert!(items.iter().all(|item| item.payload == json!({ "job": "small" })));
    }
    let big = store.queue().schedules(Page::first(10))?.remove(0);
    assert_eq!(big.next_tick_ms, Some(next_minute(T0) + 3 * MINUTE_MS), "moved on, no loop");
    store.close()
}

#[test]
fn more_schedules_and_tenants_due_than_one_pass_fires_are_all_fired() -> spindle::Result<()> {
    let (store, clock) = setup();
    for n in 0..40 {
        store.queue().put_schedule(every_minute(&format!("s{n:02}"), "q"))?;
    }
    for n in 0..101 {
        store.tenant(&format!("t{n:03}"))?.queue().put_schedule(every_minute("m", "q"))?;
    }
    clock.set_ms(next_minute(T0));
    // Each write runs the due sweep: a pass that leaves work sets the alarm to go on at once.
    for _ in 0..4 {
        store.events().append(spindle::Stream::custom("other"), "e", json!({}))?;
    }
    assert_eq!(items_of(&store, "q")?.len(), 40, "every schedule of the tenant");
    for n in 0..101 {
        let tenant = store.tenant(&format!("t{n:03}"))?;
        assert_eq!(items_of(&tenant, "q")?.len(), 1, "tenant t{n:03}");
    }
    Ok(())
}

#[test]
fn the_schedules_key_space_and_oversized_cadences_are_refused_writing_nothing()
-> spindle::Result<()> {
    let (store, _clock) = setup();
    let queue = store.queue();
    let theirs = NewItem::new("q", json!({})).unique(Unique::new("schedule:m:1800000060000"));
    assert!(matches!(queue.enqueue(theirs.clone()), Err(Error::InvalidInput(_))));
    assert!(matches!(queue.enqueue_batch(vec![theirs]), Err(Error::InvalidInput(_))));
    let long_cron = format!("0 {} * * *", vec!["1"; 200].join(","));
    let long_zone = "Z".repeat(300);
    let item = || NewItem::new("q", json!({}));
    for schedule in [
        Schedule::cron("c", long_cron.as_str(), item()),
        Schedule::cron("c", "0 3 * * *", item()).time_zone(long_zone.as_str()),
    ] {
        let refused = queue.put_schedule(schedule);
        assert!(matches!(refused, Err(Error::TooLarge { .. })), "{refused:?}");
    }
    assert!(queue.schedules(Page::first(10))?.is_empty());
    assert!(queue.stats()?.is_empty(), "no item");
    assert!(store.events().read_all(0, 10)?.is_empty(), "no event");
    Ok(())
}
