//! Costs at size (issue 28, requirement 3): one file store grown step by step to N events,
//! N completed queue items and N/100 finished graphs, with every cost measured at each step
//! and the comparisons measured in the same run (these machines are shared and noisy: read the
//! ratios).
//!
//! ```text
//! cargo bench --bench scale                    # 10k, 100k, 1M, 10M while ~15 minutes allow
//! cargo bench --bench scale -- --smoke         # 1,000 and 5,000, small samples: does it run?
//! cargo bench --bench scale -- --max 1000000   # stop at 1M
//! cargo bench --bench scale -- --readers 4     # the measured store's reader threads
//! cargo bench --bench scale -- --budget-secs 3600  # the time budget growth stops at (900)
//! ```
//!
//! Growing: each step first fills the store up to N under `Durability::Normal` with batch
//! operations: graphs 100 per transaction (each created, given one node, started and its node
//! completed); queue items 5 × 1,000 per transaction (each `EnqueueBatch` claimed with
//! `ClaimBatch` and completed with `CompleteBatch`) in queue `bulk`, whose item events are off
//! (the measurements are not about them); events as plain appends to 100 custom streams, 512
//! kept in flight (`Store::submit`) and committed up to 1,024 to a batch. The counts are
//! totals: items and events that earlier steps' measurements left count toward N, and so do
//! the graphs' own events. The bytes each added event, item and graph took are the growth of
//! the file's pages in use (less free pages) over that phase. The files are flushed to the
//! disk before measuring.
//!
//! Measuring: the store is then opened again under `Durability::Full` (the default: what a
//! user runs) with `--readers` reader threads (default: `Options::default()`'s), and each cost
//! is measured with the queues a user would have (item events on), in the order printed. The
//! disk's own 4 KiB write + `fdatasync` is timed right before one caller's appends, claims and
//! completes, which are measured again under `Normal` at the end of the step: the store's own
//! cost without an fsync (and the disk's noise) in each. The comparisons with and without two
//! threads looping on reads (`stats`, a page of `items`, a page of `graphs().find`, a stream
//! page and a log page, over and over) alternate in the same step, three times, with a third
//! arm for the machine's own share: the appends while two threads of the process are busy on
//! work that never touches the store (parsing JSON); the worker
//! pool runs three times in turn on an empty store (a fresh file), on the grown one, and on
//! the grown one with the two reader loops, and the medians are compared. Stream pages per
//! second with 1 and 2 reader threads alternate too (1, 2, 2, 1), with the CPU time the
//! process got meanwhile. Last, completed items are pruned (oldest first) back down to N, so
//! that what the measurements added does not count toward the next step.
//!
//! The pool's own rounds are not visible from outside it, so "pool rounds" are timed from the
//! bench as the same `Cycle` op its coordinator runs: settle the 100 items claimed last round,
//! claim 100 more.

#[path = "common/rounds.rs"]
mod rounds;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spindle::graph::{AddNode, CompleteNode, Create, Start};
use spindle::log::Append;
use spindle::queue::{ClaimBatch, CompleteBatch, Completion, Cycle, EnqueueBatch, Outcome};
use spindle::{
    Durability, GraphFilter, GraphStatus, ItemFilter, ItemStatus, NewItem, NodeOptions, NodeSpec,
    Options, Page, Store, Stream, TxOutcome,
};

/// Custom streams the bulk events are spread over.
const STREAMS: u64 = 100;
/// The queue the bulk completed items live in (item events off).
const BULK_QUEUE: &str = "bulk";
const LEASE_MS: i64 = 60_000;
/// Handlers of the worker pool measured.
const POOL_HANDLERS: usize = 16;
/// Items a pool round (a `Cycle` op) settles and claims.
const ROUND_ITEMS: usize = 100;
/// Rows of a listing page, events of an event page.
const LISTING_PAGE: usize = 50;
const EVENT_PAGE: usize = 100;

/// How much of each thing a step measures.
struct Samples {
    appends: usize,
    claims: usize,
    gets: usize,
    pages: usize,
    /// Scans: at least 3 calls, then more while under `scan_secs` and `scan_max`.
    scan_max: usize,
    scan_secs: f64,
    backlog: u64,
    pool_jobs: usize,
    rounds: usize,
    phase: Duration,
    prune: u64,
    rate_phase: Duration,
}

impl Samples {
    fn full() -> Self {
        Samples {
            appends: 2_000,
            claims: 2_000,
            gets: 2_000,
            pages: 1_000,
            scan_max: 20,
            scan_secs: 2.0,
            backlog: 50_000,
            pool_jobs: 10_000,
            rounds: 80,
            phase: Duration::from_millis(1_000),
            prune: 20_000,
            rate_phase: Duration::from_millis(1_500),
        }
    }

    fn smoke() -> Self {
        Samples {
            appends: 50,
            claims: 50,
            gets: 50,
            pages: 50,
            scan_max: 3,
            scan_secs: 0.1,
            backlog: 500,
            pool_jobs: 500,
            rounds: 3,
            phase: Duration::from_millis(100),
            prune: 200,
            rate_phase: Duration::from_millis(100),
        }
    }
}

struct Config {
    steps: Vec<u64>,
    readers: usize,
    budget: Duration,
    samples: Samples,
}

fn arg<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let max: u64 = arg(&args, "--max").unwrap_or(if smoke { 5_000 } else { 10_000_000 });
    let all: &[u64] =
        if smoke { &[1_000, 5_000] } else { &[10_000, 100_000, 1_000_000, 10_000_000] };
    let mut steps: Vec<u64> = all.iter().copied().filter(|n| *n <= max).collect();
    if steps.last() != Some(&max) && !all.contains(&max) {
        steps.push(max);
    }
    let config = Config {
        steps,
        readers: arg(&args, "--readers").unwrap_or(Options::default().readers),
        budget: Duration::from_secs(arg(&args, "--budget-secs").unwrap_or(900)),
        samples: if smoke { Samples::smoke() } else { Samples::full() },
    };
    run(&config);
}

fn run(config: &Config) {
    let began = Instant::now();
    println!(
        "scale: {} cores, load average {}; steps {:?}; measured store: Durability::Full, {} \
         readers; budget {:?}",
        thread::available_parallelism().map_or(1, usize::from),
        load_average(),
        config.steps,
        config.readers,
        config.budget
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("scale.db");
    let mut grown = Grown::default();
    let mut results: Vec<StepFigures> = Vec::new();
    let mut last: Option<(u64, Timing)> = None;
    for &n in &config.steps {
        if let Some((previous, timing)) = &last {
            let estimate = timing.estimate(*previous, n);
            let elapsed = began.elapsed();
            if elapsed + estimate > config.budget {
                println!(
                    "\nstopped before {n}: the step would take about {:.0} s (growth and scans \
                     scaled from the {previous} step), {:.0} s are spent of a {:.0} s budget",
                    estimate.as_secs_f64(),
                    elapsed.as_secs_f64(),
                    config.budget.as_secs_f64()
                );
                break;
            }
        }
        let grow = grow(&path, &mut grown, n);
        let (figures, timing) = measure(&path, &mut grown, n, config, grow);
        figures.print();
        results.push(figures);
        last = Some((n, timing));
        println!("(run so far: {:.0} s)", began.elapsed().as_secs_f64());
    }
    summary(&results);
    println!("\nwhole run: {:.0} s", began.elapsed().as_secs_f64());
}

/// What the store holds, as totals, and samples of its ids for the reads.
#[derive(Default)]
struct Grown {
    /// Events in the log (every stream).
    events: u64,
    /// Completed queue items (every queue).
    completed: u64,
    /// Finished graphs.
    graphs: u64,
    /// Bulk events appended so far (their streams' lengths).
    bulk_events: u64,
    /// Bulk items enqueued so far (payload numbering).
    bulk_items: u64,
    item_ids: Vec<String>,
    graph_ids: Vec<String>,
}

/// How a step's growth went: per kind, how many were added, how fast, and the bytes of the
/// file in use (pages minus free pages) each added.
struct Growth {
    secs: f64,
    events: Added,
    items: Added,
    graphs: Added,
}

#[derive(Default, Clone, Copy)]
struct Added {
    count: u64,
    per_sec: f64,
    bytes_each: f64,
}

impl Added {
    fn of(count: u64, secs: f64, bytes: (u64, u64)) -> Self {
        if count == 0 {
            return Added::default();
        }
        let grew = bytes.1.saturating_sub(bytes.0) as f64;
        Added { count, per_sec: count as f64 / secs, bytes_each: grew / count as f64 }
    }
}

fn options(durability: Durability, readers: usize) -> Options {
    Options::default().durability(durability).readers(readers)
}

/// The bytes of the store's file in use: its pages (WAL included) less the free ones, read
/// through a connection of the bench's own.
fn used_bytes(path: &Path) -> u64 {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let conn = rusqlite::Connection::open_with_flags(path, flags).expect("read-only connection");
    let pragma = |name: &str| -> u64 {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0)).expect(name) as u64
    };
    (pragma("page_count") - pragma("freelist_count")) * pragma("page_size")
}

/// Fills the store up to `n` events, `n` completed items and `n / 100` finished graphs,
/// under `Durability::Normal`, with batch operations; then flushes the files to the disk, so
/// that the kernel's write-back of the growth does not slow the measured commits.
fn grow(path: &Path, grown: &mut Grown, n: u64) -> Growth {
    let started = Instant::now();
    // Batches of up to 1,024 operations: the pipelined appends below fill them.
    let loading = options(Durability::Normal, 2).batch_max(1_024);
    let store = Store::open_with(path, loading).expect("open");
    store.queue().set_item_events(BULK_QUEUE, false).expect("bulk item events off");

    // Graphs first: their events count toward the log's.
    let (at, before) = (Instant::now(), used_bytes(path));
    let graphs_wanted = n / 100;
    let graphs_added = graphs_wanted.saturating_sub(grown.graphs);
    while grown.graphs < graphs_wanted {
        let count = (graphs_wanted - grown.graphs).min(100);
        let ids = store
            .transaction(move |tx| {
                let mut ids = Vec::with_capacity(count as usize);
                for i in 0..count {
                    let graph = tx.exec(Create { metadata: json!({ "n": i }), parent: None })?;
                    let options = NodeOptions::new().id("a");
                    let spec = NodeSpec::task(json!({ "i": i }));
                    tx.exec(AddNode { graph: graph.clone(), spec, options })?;
                    tx.exec(Start { graph: graph.clone() })?;
                    tx.exec(CompleteNode { graph: graph.clone(), node: "a".into(), output: None })?;
                    ids.push(graph);
                }
                Ok(TxOutcome::Commit(ids))
            })
            .expect("graphs");
        grown.graph_ids.extend(ids.into_iter().step_by(7));
        grown.graphs += count;
    }
    let graphs = Added::of(graphs_added, at.elapsed().as_secs_f64(), (before, used_bytes(path)));

    let (at, before) = (Instant::now(), used_bytes(path));
    let items_added = n.saturating_sub(grown.completed);
    while grown.completed < n {
        let count = (n - grown.completed).min(5_000);
        let first = grown.bulk_items;
        let ids = store
            .transaction(move |tx| {
                let mut sampled = Vec::new();
                let mut k = first;
                while k < first + count {
                    let chunk = (first + count - k).min(1_000);
                    let items = (k..k + chunk)
                        .map(|j| NewItem::new(BULK_QUEUE, json!({ "n": j, "pad": "x".repeat(80) })))
                        .collect();
                    tx.exec(EnqueueBatch { items })?;
                    let claimed = tx.exec(ClaimBatch {
                        worker_id: "loader".into(),
                        queues: vec![BULK_QUEUE.into()],
                        lease_ms: LEASE_MS,
                        max_items: chunk as usize,
                    })?;
                    assert_eq!(claimed.len(), chunk as usize, "every bulk item claimed");
                    sampled.extend(claimed.iter().step_by(97).map(|c| c.item.id.clone()));
                    let items = claimed
                        .into_iter()
                        .map(|c| Completion { id: c.item.id, fence: c.fence, result: json!(null) })
                        .collect();
                    tx.exec(CompleteBatch { items })?;
                    k += chunk;
                }
                Ok(TxOutcome::Commit(sampled))
            })
            .expect("items");
        grown.item_ids.extend(ids);
        grown.bulk_items += count;
        grown.completed += count;
    }
    let items = Added::of(items_added, at.elapsed().as_secs_f64(), (before, used_bytes(path)));

    // Events: plain appends kept 512 in flight (`Store::submit`), group-committed.
    let (at, before) = (Instant::now(), used_bytes(path));
    grown.events = store.events().last_position().expect("last position");
    let events_added = n.saturating_sub(grown.events);
    let mut in_flight = std::collections::VecDeque::with_capacity(512);
    for k in grown.bulk_events..grown.bulk_events + events_added {
        if in_flight.len() == 512 {
            let pending: spindle::Pending<_> = in_flight.pop_front().expect("in flight");
            pending.wait().expect("append");
        }
        let append = Append {
            stream: Stream::custom(format!("s{}", k % STREAMS)),
            event_type: "tick".into(),
            payload: json!({ "n": k, "pad": "x".repeat(64) }),
            idem_key: None,
        };
        in_flight.push_back(store.submit(append).expect("submit"));
    }
    for pending in in_flight {
        pending.wait().expect("append");
    }
    grown.bulk_events += events_added;
    grown.events += events_added;
    let events = Added::of(events_added, at.elapsed().as_secs_f64(), (before, used_bytes(path)));
    store.close().expect("close");
    for file in [path.to_owned(), path.with_extension("db-wal")] {
        if let Ok(file) = std::fs::File::open(file) {
            file.sync_all().expect("sync");
        }
    }
    Growth { secs: started.elapsed().as_secs_f64(), events, items, graphs }
}

/// Where a step's time went, to estimate the next one.
#[derive(Clone, Copy)]
struct Timing {
    /// Growing, per unit of N added.
    grow_secs_per_n: f64,
    /// What scans the store (stats, listings that scan, file bytes): grows with N.
    scan_secs: f64,
    /// The rest (fixed sample counts and phases).
    fixed_secs: f64,
}

impl Timing {
    fn estimate(&self, previous: u64, next: u64) -> Duration {
        let scale = next as f64 / previous as f64;
        let grow = self.grow_secs_per_n * (next - previous) as f64;
        Duration::from_secs_f64(grow + self.scan_secs * scale + self.fixed_secs * 1.5)
    }
}

/// Every figure of one step.
#[derive(Default)]
struct StepFigures {
    n: u64,
    at_start: (u64, u64, u64),
    at_end: (u64, u64, u64),
    grow_line: String,
    open_ms: f64,
    close_ms: f64,
    load: String,
    full: OneCaller,
    normal: OneCaller,
    get_item: f64,
    get_graph: f64,
    stats: f64,
    stream_page: f64,
    log_page: f64,
    items_bulk: f64,
    items_new_queue: f64,
    find_newest: f64,
    find_failed: f64,
    count_by_status: f64,
    catch_up: f64,
    pool: f64,
    pool_empty: f64,
    pool_readers: f64,
    append_p99_quiet: f64,
    append_p99_readers: f64,
    /// An append's p50 and p99 while two threads of the process are busy on work of their own.
    append_p50_busy: f64,
    append_p99_busy: f64,
    append_p50_quiet: f64,
    append_p50_readers: f64,
    round_p99_quiet: f64,
    round_p99_readers: f64,
    round_p50_quiet: f64,
    round_p50_readers: f64,
    reader_loops_per_s: f64,
    /// Pages per second, and the cores the process used meanwhile.
    pages_1: (f64, f64),
    pages_2: (f64, f64),
    prune: f64,
    file_bytes: u64,
    per_event: f64,
    per_item: f64,
    per_graph: f64,
    /// p50 of a 4 KiB write and `fdatasync` beside the store, in µs.
    disk_sync: f64,
}

/// The measurements of one step, on the grown store reopened under `Durability::Full`.
fn measure(
    path: &Path,
    grown: &mut Grown,
    n: u64,
    config: &Config,
    growth: Growth,
) -> (StepFigures, Timing) {
    let measuring = Instant::now();
    let samples = &config.samples;
    let mut scan_secs = 0.0;
    let mut f = StepFigures {
        n,
        at_start: (grown.events, grown.completed, grown.graphs),
        grow_line: format!(
            "grown in {:.1} s (Normal, batch operations): +{} events at {:.0}/s, +{} completed \
             items at {:.0}/s, +{} graphs at {:.0}/s",
            growth.secs,
            thousands(growth.events.count),
            growth.events.per_sec,
            thousands(growth.items.count),
            growth.items.per_sec,
            thousands(growth.graphs.count),
            growth.graphs.per_sec,
        ),
        per_event: growth.events.bytes_each,
        per_item: growth.items.bytes_each,
        per_graph: growth.graphs.bytes_each,
        load: load_average(),
        ..StepFigures::default()
    };
    let mut rng = Rng(0x5eed ^ n);

    let at = Instant::now();
    let store = Store::open_with(path, options(Durability::Full, config.readers)).expect("open");
    f.open_ms = ms(at);

    // One caller's appends, claims and completes, on a queue made after the bulk (its items
    // come after every bulk item in id order).
    let new_queue = format!("claims-{n}");
    f.disk_sync = disk_sync(path, samples.appends.min(200));
    f.full = one_caller(&store, &new_queue, samples);
    grown.completed += samples.claims as u64;
    grown.events += samples.appends as u64;

    // Scans: whatever grows with the store is timed here, to estimate the next step.
    let scans = Instant::now();
    let stats = timed_calls(samples, || {
        let stats = store.queue().stats().expect("stats");
        let completed: u64 = stats.iter().map(|q| q.completed).sum();
        assert_eq!(completed, grown.completed, "stats count every completed item");
    });
    f.stats = percentile(&stats, 0.5);
    f.find_failed = percentile(
        &timed_calls(samples, || {
            let failed = GraphFilter::default().status(GraphStatus::Failed).newest_first(true);
            store.graphs().find(&failed, Page::first(10)).expect("find failed");
        }),
        0.5,
    );
    f.count_by_status = percentile(
        &timed_calls(samples, || {
            store.graphs().count_by_status(&GraphFilter::default()).expect("count by status");
        }),
        0.5,
    );
    f.items_new_queue = percentile(
        &timed_calls(samples, || {
            let page = store
                .queue()
                .items(
                    &new_queue,
                    ItemFilter::status(ItemStatus::Completed),
                    Page::first(LISTING_PAGE),
                )
                .expect("items");
            assert_eq!(page.len(), LISTING_PAGE.min(samples.claims));
        }),
        0.5,
    );
    scan_secs += scans.elapsed().as_secs_f64();

    let gets: Vec<u32> = (0..samples.gets)
        .map(|_| {
            let id = rng.pick(&grown.item_ids).clone();
            let at = Instant::now();
            store.queue().get(&id).expect("get");
            us(at)
        })
        .collect();
    f.get_item = percentile(&gets, 0.5);
    let gets: Vec<u32> = (0..samples.gets)
        .map(|_| {
            let id = rng.pick(&grown.graph_ids).clone();
            let at = Instant::now();
            store.graphs().get(&id).expect("graph get");
            us(at)
        })
        .collect();
    f.get_graph = percentile(&gets, 0.5);
    let view = ReadView::of(grown, &store, &new_queue);
    let pages: Vec<u32> = (0..samples.pages)
        .map(|_| {
            let (stream, after) = view.stream_page(&mut rng);
            let at = Instant::now();
            let page = store.events().read(&stream, after, EVENT_PAGE).expect("read");
            let took = us(at);
            assert!(!page.is_empty(), "a page of events");
            took
        })
        .collect();
    f.stream_page = percentile(&pages, 0.5);
    let pages: Vec<u32> = (0..samples.pages)
        .map(|_| {
            let after = rng.below(view.last_position.saturating_sub(EVENT_PAGE as u64));
            let at = Instant::now();
            let page = store.events().read_all(after, EVENT_PAGE).expect("read all");
            let took = us(at);
            assert_eq!(page.len(), EVENT_PAGE.min(view.last_position as usize));
            took
        })
        .collect();
    f.log_page = percentile(&pages, 0.5);
    f.items_bulk = percentile(
        &timed_calls(samples, || {
            let page = Page::first(LISTING_PAGE);
            let filter = ItemFilter::status(ItemStatus::Completed);
            store.queue().items(BULK_QUEUE, filter, page).expect("items");
        }),
        0.5,
    );
    f.find_newest = percentile(
        &timed_calls(samples, || {
            let newest = GraphFilter::default().newest_first(true);
            store.graphs().find(&newest, Page::first(LISTING_PAGE)).expect("find");
        }),
        0.5,
    );

    // Subscription catch-up: the whole log's last `backlog` events through `subscribe_all`.
    let backlog = samples.backlog.min(view.last_position);
    let from = view.last_position - backlog;
    let at = Instant::now();
    let mut subscription = store.subscribe_all(from).expect("subscribe");
    let mut seen = 0u64;
    while seen < backlog {
        let event = subscription.recv_timeout(Duration::from_secs(30)).expect("recv");
        let event = event.expect("an event within 30 s");
        assert!(event.position > from);
        seen += 1;
    }
    f.catch_up = backlog as f64 / at.elapsed().as_secs_f64();
    drop(subscription);

    // With and without two threads looping on reads, and (the machine's own baseline) with
    // two threads busy on work of their own that never touches the store, in turn.
    let mut quiet = Vec::new();
    let mut loud = Vec::new();
    let mut busy = Vec::new();
    let mut rounds_quiet = Vec::new();
    let mut rounds_loud = Vec::new();
    let mut loops = (0u64, 0.0f64);
    let arms = [Beside::Nothing, Beside::ReaderLoops, Beside::BusyLoops];
    for rep in 0..3 {
        for arm in arms.iter().cycle().skip(rep).take(arms.len()) {
            if *arm == Beside::BusyLoops {
                let others = BusyLoops::start(2);
                busy.extend(append_for(&store, samples.phase));
                others.stop();
                continue;
            }
            let with_readers = *arm == Beside::ReaderLoops;
            let readers = with_readers.then(|| ReaderLoops::start(&store, &view, 2));
            let latencies = append_for(&store, samples.phase);
            grown.events += latencies.len() as u64;
            let queue = format!("rounds-{n}-{rep}-{with_readers}");
            let rounds = pool_rounds(&store, &queue, samples.rounds);
            grown.completed += (samples.rounds * ROUND_ITEMS) as u64;
            if let Some(readers) = readers {
                let (count, secs) = readers.stop();
                loops = (loops.0 + count, loops.1 + secs);
                loud.extend(latencies);
                rounds_loud.extend(rounds);
            } else {
                quiet.extend(latencies);
                rounds_quiet.extend(rounds);
            }
        }
    }
    grown.events += busy.len() as u64;
    f.append_p50_busy = percentile(&busy, 0.5);
    f.append_p99_busy = percentile(&busy, 0.99);
    f.append_p50_quiet = percentile(&quiet, 0.5);
    f.append_p99_quiet = percentile(&quiet, 0.99);
    f.append_p50_readers = percentile(&loud, 0.5);
    f.append_p99_readers = percentile(&loud, 0.99);
    f.round_p50_quiet = percentile(&rounds_quiet, 0.5);
    f.round_p99_quiet = percentile(&rounds_quiet, 0.99);
    f.round_p50_readers = percentile(&rounds_loud, 0.5);
    f.round_p99_readers = percentile(&rounds_loud, 0.99);
    f.reader_loops_per_s = loops.0 as f64 / loops.1;

    // The worker pool, three times in turn: on an empty store (a fresh file), on this one, and
    // on this one with two reader loops; the medians.
    let (mut empty, mut quiet, mut loud) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..3 {
        empty.push(pool_on_empty_store(config));
        quiet.push(pool_run(&store, &format!("pool-{n}-{rep}"), samples.pool_jobs));
        let readers = ReaderLoops::start(&store, &view, 2);
        loud.push(pool_run(&store, &format!("pool-{n}-{rep}-readers"), samples.pool_jobs));
        readers.stop();
        grown.completed += 2 * samples.pool_jobs as u64;
    }
    (f.pool_empty, f.pool, f.pool_readers) = (median(empty), median(quiet), median(loud));

    // Pruning: completed items, oldest first, a page (1,000) per call, back down to `n` (at
    // least `samples.prune`): what the measurements added goes, so that the next step's N
    // is mostly its own growth.
    let at = Instant::now();
    let mut pruned = 0;
    while pruned < samples.prune || grown.completed - pruned > n {
        let deleted = store.queue().prune_completed(0).expect("prune");
        assert!(deleted > 0, "something to prune");
        pruned += deleted;
    }
    f.prune = pruned as f64 / at.elapsed().as_secs_f64();
    grown.completed -= pruned;
    forget_pruned(&store, &mut grown.item_ids);

    let at = Instant::now();
    store.close().expect("close");
    f.close_ms = ms(at);

    f.file_bytes = std::fs::metadata(path).map_or(0, |m| m.len());

    // The same caller's appends, claims and completes under `Normal`: the store's own cost
    // without the fsync (and the disk's noise) in every commit.
    let store = Store::open_with(path, options(Durability::Normal, config.readers)).expect("open");
    f.normal = one_caller(&store, &format!("claims-normal-{n}"), samples);
    grown.completed += samples.claims as u64;
    grown.events = store.events().last_position().expect("last position");
    store.close().expect("close");
    f.at_end = (grown.events, grown.completed, grown.graphs);

    // Event pages per second from two client threads, with 1 and with 2 reader threads, and
    // the CPU time the process took meanwhile (in cores: what the machine let it have).
    let mut rates = [(0u64, 0.0f64, 0.0f64); 2];
    for readers in [1, 2, 2, 1] {
        let store = Store::open_with(path, options(Durability::Full, readers)).expect("open");
        let cpu = cpu_secs();
        let (pages, secs) = page_rate(&store, &view, samples.rate_phase);
        let rate = &mut rates[readers - 1];
        (rate.0, rate.1, rate.2) = (rate.0 + pages, rate.1 + secs, rate.2 + cpu_secs() - cpu);
        store.close().expect("close");
    }
    f.pages_1 = (rates[0].0 as f64 / rates[0].1, rates[0].2 / rates[0].1);
    f.pages_2 = (rates[1].0 as f64 / rates[1].1, rates[1].2 / rates[1].1);

    let total = measuring.elapsed().as_secs_f64();
    let timing = Timing {
        grow_secs_per_n: growth.secs / (n - previous_n(config, n)) as f64,
        scan_secs,
        fixed_secs: total - scan_secs,
    };
    (f, timing)
}

/// Drops the sampled item ids that pruning deleted. The samples are in the order their items
/// were completed and pruning deletes the oldest completed items first, so the deleted ones
/// are a prefix, found by bisection (and, for items finished in the same millisecond as the
/// last one pruned, checked one by one just past it).
fn forget_pruned(store: &Store, ids: &mut Vec<String>) {
    let exists = |id: &String| store.queue().get(id).is_ok();
    let (mut low, mut high) = (0, ids.len());
    while low < high {
        let middle = (low + high) / 2;
        if exists(&ids[middle]) { high = middle } else { low = middle + 1 }
    }
    ids.drain(..low);
    let checked = ids.len().min(64);
    let mut kept: Vec<String> = ids.drain(..checked).filter(exists).collect();
    kept.append(ids);
    *ids = kept;
}

/// The step before `n` (0 for the first).
fn previous_n(config: &Config, n: u64) -> u64 {
    config.steps.iter().copied().filter(|s| *s < n).max().unwrap_or(0)
}

/// What the reads need to know of the store: the bulk streams' lengths and the log's end.
#[derive(Clone)]
struct ReadView {
    stream_len: u64,
    last_position: u64,
    queue: String,
}

impl ReadView {
    fn of(grown: &Grown, store: &Store, queue: &str) -> Self {
        ReadView {
            stream_len: grown.bulk_events / STREAMS,
            last_position: store.events().last_position().expect("last position"),
            queue: queue.to_owned(),
        }
    }

    /// A bulk stream and a sequence to read a page after, somewhere along it.
    fn stream_page(&self, rng: &mut Rng) -> (Stream, u64) {
        let stream = Stream::custom(format!("s{}", rng.below(STREAMS)));
        (stream, rng.below(self.stream_len.saturating_sub(EVENT_PAGE as u64)))
    }
}

/// What runs beside the appends and rounds measured (see `measure`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Beside {
    Nothing,
    /// Two `ReaderLoops`.
    ReaderLoops,
    /// Two `BusyLoops`: the machine's own cost of two busy threads, whatever they do.
    BusyLoops,
}

/// Threads busy on work that never touches the store (parsing a JSON text of about 100 KiB,
/// over and over) until stopped.
struct BusyLoops {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl BusyLoops {
    fn start(threads: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let values: Vec<_> = (0..2_000).map(|k| json!({ "k": k, "s": "x".repeat(20) })).collect();
        let text = Arc::new(serde_json::to_string(&values).expect("json"));
        let threads = (0..threads)
            .map(|_| {
                let (stop, text) = (Arc::clone(&stop), Arc::clone(&text));
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let parsed: serde_json::Value = serde_json::from_str(&text).expect("json");
                        std::hint::black_box(parsed);
                    }
                })
            })
            .collect();
        BusyLoops { stop, threads }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().for_each(|t| t.join().expect("busy loop"));
    }
}

/// Two (or more) threads each looping on reads until stopped: `stats`, a page of the newest
/// queue's completed items, a page of graphs (newest first), a stream page and a log page.
struct ReaderLoops {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<u64>>,
    started: Instant,
}

impl ReaderLoops {
    fn start(store: &Store, view: &ReadView, threads: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(threads + 1));
        let threads = (0..threads)
            .map(|t| {
                let (store, view) = (store.clone(), view.clone());
                let (stop, barrier) = (Arc::clone(&stop), Arc::clone(&barrier));
                thread::spawn(move || {
                    let mut rng = Rng(0xbeef + t as u64);
                    let newest = GraphFilter::default().newest_first(true);
                    let completed = ItemFilter::status(ItemStatus::Completed);
                    barrier.wait();
                    let mut loops = 0;
                    while !stop.load(Ordering::Relaxed) {
                        store.queue().stats().expect("stats");
                        let page = Page::first(LISTING_PAGE);
                        store.queue().items(&view.queue, completed.clone(), page).expect("items");
                        store.graphs().find(&newest, Page::first(LISTING_PAGE)).expect("find");
                        let (stream, after) = view.stream_page(&mut rng);
                        store.events().read(&stream, after, EVENT_PAGE).expect("read");
                        let after = rng.below(view.last_position);
                        store.events().read_all(after, EVENT_PAGE).expect("read all");
                        loops += 1;
                    }
                    loops
                })
            })
            .collect();
        barrier.wait();
        ReaderLoops { stop, threads, started: Instant::now() }
    }

    /// Stops the loops; how many they completed, over how many seconds.
    fn stop(self) -> (u64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        (self.threads.into_iter().map(|t| t.join().expect("reader loop")).sum(), secs)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// p50 and p99 of one caller's appends, claims and completes, in µs.
#[derive(Default, Clone, Copy)]
struct OneCaller {
    append: (f64, f64),
    claim: (f64, f64),
    complete: (f64, f64),
}

/// One caller: `samples.appends` appends to stream `probe`, then `samples.claims` items
/// enqueued into `queue` (item events on, as a user has them), each claimed then completed.
fn one_caller(store: &Store, queue: &str, samples: &Samples) -> OneCaller {
    let p50_p99 = |v: &[u32]| (percentile(v, 0.5), percentile(v, 0.99));
    let stream = Stream::custom("probe");
    let appends: Vec<u32> = (0..samples.appends)
        .map(|k| {
            let at = Instant::now();
            store.events().append(&stream, "probe", json!({ "k": k })).expect("append");
            us(at)
        })
        .collect();
    for chunk in (0..samples.claims).collect::<Vec<_>>().chunks(1_000) {
        let items = chunk.iter().map(|j| NewItem::new(queue, json!({ "n": j }))).collect();
        store.queue().enqueue_batch(items).expect("enqueue");
    }
    let (mut claims, mut completes) = (Vec::new(), Vec::new());
    for _ in 0..samples.claims {
        let at = Instant::now();
        let claimed = store.queue().claim("probe", &[queue], LEASE_MS).expect("claim");
        claims.push(us(at));
        let claimed = claimed.expect("an item");
        let at = Instant::now();
        store.queue().complete(&claimed.item.id, claimed.fence, json!(null)).expect("complete");
        completes.push(us(at));
    }
    OneCaller { append: p50_p99(&appends), claim: p50_p99(&claims), complete: p50_p99(&completes) }
}

/// The disk's own commit cost, for reading the `Full` figures: the p50 of `count` writes of
/// 4 KiB to a file beside the store, each followed by `fdatasync`.
fn disk_sync(path: &Path, count: usize) -> f64 {
    use std::io::Write;
    let probe = path.with_extension("sync-probe");
    let mut file = std::fs::File::create(&probe).expect("probe file");
    let block = [7u8; 4096];
    let times: Vec<u32> = (0..count)
        .map(|_| {
            let at = Instant::now();
            file.write_all(&block).expect("write");
            file.sync_data().expect("fdatasync");
            us(at)
        })
        .collect();
    drop(file);
    std::fs::remove_file(probe).expect("remove probe");
    percentile(&times, 0.5)
}

/// CPU time this process has used (user and system), in seconds; 0 where `/proc` is missing.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |at: usize| fields.get(at).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, in clock ticks (100 per second).
    (ticks(11) + ticks(12)) / 100.0
}

/// One caller appending for `run`; each append's latency.
fn append_for(store: &Store, run: Duration) -> Vec<u32> {
    let stream = Stream::custom("contention");
    let started = Instant::now();
    let mut latencies = Vec::new();
    while started.elapsed() < run {
        let at = Instant::now();
        store.events().append(&stream, "tick", json!({ "t": latencies.len() })).expect("append");
        latencies.push(us(at));
    }
    latencies
}

/// `rounds` pool rounds, timed: the `Cycle` op a pool's coordinator runs, settling the items
/// claimed the round before and claiming `ROUND_ITEMS` more, on a queue filled beforehand.
fn pool_rounds(store: &Store, queue: &str, rounds: usize) -> Vec<u32> {
    enqueue(store, queue, rounds * ROUND_ITEMS);
    let mut settle = Vec::new();
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..=rounds {
        let cycle = Cycle {
            worker_id: "rounds".into(),
            queues: vec![queue.to_owned()],
            lease_ms: LEASE_MS,
            settle: std::mem::take(&mut settle),
            renew: Vec::new(),
            claim_max: if round < rounds { ROUND_ITEMS } else { 0 },
        };
        let at = Instant::now();
        let cycled = store.exec(cycle).expect("cycle");
        if round > 0 {
            latencies.push(us(at));
        }
        assert!(cycled.settled.iter().all(Result::is_ok), "every item completed");
        settle = rounds::completions(cycled.claimed);
    }
    latencies
}

/// `count` items of about 100 bytes into `queue`, 1,000 per call.
fn enqueue(store: &Store, queue: &str, count: usize) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(1_000) {
        let items = chunk
            .iter()
            .map(|n| NewItem::new(queue, json!({ "n": n, "pad": "x".repeat(80) })))
            .collect();
        store.queue().enqueue_batch(items).expect("enqueue");
    }
}

/// The worker pool (16 handlers, each completing its item at once) on `jobs` items enqueued
/// beforehand (not timed), until all are completed: jobs per second.
fn pool_run(store: &Store, queue: &str, jobs: usize) -> f64 {
    enqueue(store, queue, jobs);
    let done = Arc::new(AtomicUsize::new(0));
    let (all_done, wait) = crossbeam_channel::bounded::<()>(1);
    let counter = Arc::clone(&done);
    let started = Instant::now();
    let pool = store
        .queue()
        .worker(&[queue])
        .threads(POOL_HANDLERS)
        .lease_ms(LEASE_MS)
        .run(move |_job| {
            if counter.fetch_add(1, Ordering::Relaxed) + 1 == jobs {
                let _ = all_done.send(());
            }
            Outcome::Complete(json!(null))
        })
        .expect("pool");
    wait.recv().expect("every job handled");
    pool.stop();
    let report = pool.join().expect("join");
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    assert_eq!(report.completed, jobs as u64, "every job completed once");
    rate
}

/// The same pool run on a fresh, empty file store.
fn pool_on_empty_store(config: &Config) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Store::open_with(dir.path().join("empty.db"), options(Durability::Full, config.readers))
            .expect("open");
    let rate = pool_run(&store, "pool", config.samples.pool_jobs);
    store.close().expect("close");
    rate
}

/// Two client threads reading stream pages for `run`: pages read, and the seconds taken.
fn page_rate(store: &Store, view: &ReadView, run: Duration) -> (u64, f64) {
    let barrier = Arc::new(Barrier::new(3));
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (store, view, barrier) = (store.clone(), view.clone(), Arc::clone(&barrier));
            thread::spawn(move || {
                let mut rng = Rng(0xfeed + t);
                barrier.wait();
                let started = Instant::now();
                let mut pages = 0;
                while started.elapsed() < run {
                    let (stream, after) = view.stream_page(&mut rng);
                    store.events().read(&stream, after, EVENT_PAGE).expect("read");
                    pages += 1;
                }
                pages
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let pages = threads.into_iter().map(|t| t.join().expect("page reader")).sum();
    (pages, started.elapsed().as_secs_f64())
}

impl StepFigures {
    fn print(&self) {
        let (events, completed, graphs) = self.at_start;
        let (end_events, end_completed, _) = self.at_end;
        println!(
            "\n== step {}: {} events, {} completed items, {} finished graphs (load average {})",
            thousands(self.n),
            thousands(events),
            thousands(completed),
            thousands(graphs),
            self.load
        );
        println!("{}", self.grow_line);
        println!(
            "(the measurements left {} events and {} completed items, after pruning)\n",
            thousands(end_events),
            thousands(end_completed)
        );
        println!("| cost | figure |");
        println!("|---|---:|");
        let row = |name: &str, value: String| println!("| {name} | {value} |");
        let pair = |v: (f64, f64)| format!("{} / {}", t(v.0), t(v.1));
        let (full, normal) = (&self.full, &self.normal);
        row("append, 1 caller, p50 / p99: Full", pair(full.append));
        row("... under Normal", pair(normal.append));
        row("claim, 1 caller, p50 / p99: Full", pair(full.claim));
        row("... under Normal", pair(normal.claim));
        row("complete, 1 caller, p50 / p99: Full", pair(full.complete));
        row("... under Normal", pair(normal.complete));
        row("the disk: 4 KiB write + `fdatasync` p50", t(self.disk_sync));
        row(
            "get p50: a queue item / a graph",
            format!("{} / {}", t(self.get_item), t(self.get_graph)),
        );
        row("`queue().stats()` p50", t(self.stats));
        row(
            "page of 100 events p50: a stream / the whole log",
            format!("{} / {}", t(self.stream_page), t(self.log_page)),
        );
        row(
            "`queue().items` page of 50 completed p50: bulk queue / a queue made after it",
            format!("{} / {}", t(self.items_bulk), t(self.items_new_queue)),
        );
        row(
            "`graphs().find` p50: newest 50 / newest 10 failed (none)",
            format!("{} / {}", t(self.find_newest), t(self.find_failed)),
        );
        row("`graphs().count_by_status` p50", t(self.count_by_status));
        row(
            "subscription catch-up (`subscribe_all`, backlog)",
            format!("{:.0} events/s", self.catch_up),
        );
        row(
            "worker pool, 16 handlers: this store / an empty one",
            format!(
                "{:.0} / {:.0} jobs/s = {:.2}x",
                self.pool,
                self.pool_empty,
                self.pool / self.pool_empty
            ),
        );
        row("open / close", format!("{:.1} / {:.1} ms", self.open_ms, self.close_ms));
        row(
            "file size; bytes added per event / per completed job / per graph",
            format!(
                "{:.1} MiB; {:.0} / {:.0} / {:.0} B",
                self.file_bytes as f64 / 1_048_576.0,
                self.per_event,
                self.per_item,
                self.per_graph
            ),
        );
        row("prune (`prune_completed`, 1,000 per call)", format!("{:.0} items/s", self.prune));
        row(
            "append p99 (p50): 2 reader loops / none",
            format!(
                "{} ({}) / {} ({}) = {:.2}x",
                t(self.append_p99_readers),
                t(self.append_p50_readers),
                t(self.append_p99_quiet),
                t(self.append_p50_quiet),
                self.append_p99_readers / self.append_p99_quiet
            ),
        );
        row(
            "append p99 (p50): 2 busy loops of other work / none",
            format!(
                "{} ({}) / {} ({}) = {:.2}x",
                t(self.append_p99_busy),
                t(self.append_p50_busy),
                t(self.append_p99_quiet),
                t(self.append_p50_quiet),
                self.append_p99_busy / self.append_p99_quiet
            ),
        );
        row(
            "pool round (`Cycle` of 100) p99 (p50): 2 reader loops / none",
            format!(
                "{} ({}) / {} ({}) = {:.2}x",
                t(self.round_p99_readers),
                t(self.round_p50_readers),
                t(self.round_p99_quiet),
                t(self.round_p50_quiet),
                self.round_p99_readers / self.round_p99_quiet
            ),
        );
        row(
            "worker pool, 16 handlers: 2 reader loops / none",
            format!(
                "{:.0} / {:.0} jobs/s = {:.2}x",
                self.pool_readers,
                self.pool,
                self.pool_readers / self.pool
            ),
        );
        row("reader loops completed (2 threads)", format!("{:.1}/s", self.reader_loops_per_s));
        row(
            "stream pages/s, 2 client threads: 2 readers / 1 reader (cores used)",
            format!(
                "{:.0} ({:.1}) / {:.0} ({:.1}) = {:.2}x",
                self.pages_2.0,
                self.pages_2.1,
                self.pages_1.0,
                self.pages_1.1,
                self.pages_2.0 / self.pages_1.0
            ),
        );
    }
}

/// The targets of issue 28 against what was reached.
fn summary(results: &[StepFigures]) {
    let (Some(first), Some(last)) = (results.first(), results.last()) else {
        return;
    };
    println!("\n== targets ({} to {})", thousands(first.n), thousands(last.n));
    println!("| target | measured | met |");
    println!("|---|---|---|");
    let met = |ok: bool| if ok { "yes" } else { "**no**" };
    match results.iter().find(|r| r.n == 1_000_000) {
        Some(at) => {
            println!(
                "| `stats()` p50 ≤ 1 ms at 1,000,000 completed | {} | {} |",
                t(at.stats),
                met(at.stats <= 1_000.0)
            );
            let ratio = at.pool / at.pool_empty;
            println!(
                "| pool at 16 handlers, 1,000,000 completed ≥ 0.8x an empty store | {:.0} / {:.0} jobs/s = {ratio:.2}x | {} |",
                at.pool,
                at.pool_empty,
                met(ratio >= 0.8)
            );
        }
        None => {
            println!("| (no 1,000,000 step: the stats and pool targets are not measured) | | |")
        }
    }
    for r in results {
        let ratio = r.append_p99_readers / r.append_p99_quiet;
        let busy = r.append_p99_busy / r.append_p99_quiet;
        println!(
            "| append p99 with 2 reader loops ≤ 2x none, at {} | {ratio:.2}x (2 busy loops of \
             other work: {busy:.2}x) | {} |",
            thousands(r.n),
            met(ratio <= 2.0)
        );
    }
    for r in results {
        let ratio = r.pages_2.0 / r.pages_1.0;
        println!(
            "| event pages/s with 2 readers ≥ 1.5x 1 reader, at {} | {ratio:.2}x | {} |",
            thousands(r.n),
            met(ratio >= 1.5)
        );
    }
    for (name, at_first, at_last) in [
        ("append (Full)", first.full.append.0, last.full.append.0),
        ("claim (Full)", first.full.claim.0, last.full.claim.0),
        ("complete (Full)", first.full.complete.0, last.full.complete.0),
        ("append (Normal)", first.normal.append.0, last.normal.append.0),
        ("claim (Normal)", first.normal.claim.0, last.normal.claim.0),
        ("complete (Normal)", first.normal.complete.0, last.normal.complete.0),
        ("get (queue item)", first.get_item, last.get_item),
        ("page of a stream", first.stream_page, last.stream_page),
        ("page of the log", first.log_page, last.log_page),
    ] {
        let ratio = at_last / at_first;
        println!(
            "| {name} p50 at {} ≤ 1.5x at {} | {} / {} = {ratio:.2}x | {} |",
            thousands(last.n),
            thousands(first.n),
            t(at_last),
            t(at_first),
            met(ratio <= 1.5)
        );
    }
}

/// Times `call` at least 3 times, then again while under the samples' scan time and count.
fn timed_calls(samples: &Samples, mut call: impl FnMut()) -> Vec<u32> {
    let started = Instant::now();
    let mut times = Vec::new();
    while times.len() < 3
        || (times.len() < samples.scan_max && started.elapsed().as_secs_f64() < samples.scan_secs)
    {
        let at = Instant::now();
        call();
        times.push(us(at));
    }
    times
}

fn us(since: Instant) -> u32 {
    since.elapsed().as_micros().min(u128::from(u32::MAX)) as u32
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1_000.0
}

fn percentile(samples: &[u32], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    f64::from(sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

/// A duration in µs, written in µs or ms.
fn t(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.0} ms", us / 1_000.0)
    } else if us >= 1_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// xorshift64: the bench's own randomness (no dependency), repeatable per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next() % bound }
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len() as u64) as usize]
    }
}
