//! What the counts cost at the size a store reaches (issue 28): `queue().stats()` with a
//! million completed items, the dashboard overview's graph reads (the runs by status, the
//! newest failed runs) among 100,000 finished runs, and what a caller's append waits while
//! another thread calls `stats()` in a loop (a dashboard, a metrics scrape), against appends
//! alone.
//!
//! ```text
//! cargo bench --bench stats                        # 1,000,000 items, 100,000 runs
//! cargo bench --bench stats -- --items 100000 --graphs 1000   # other sizes
//! cargo bench --bench stats -- --from-v4           # the file made at schema version 4: the
//!                                                  # open migrates it (and says how long)
//! cargo bench --bench stats -- --smoke             # 10,000 items, 1,000 runs, a moment each
//! ```
//!
//! The store file is filled past the API, in one raw transaction: the items as `complete`
//! leaves them, in 4 queues, with a few pending, scheduled and claimed ones beside; the runs
//! as `spindle run` leaves them (kind `spindle-run`, roots), complete but for the 10 oldest,
//! failed; and, where the schema has them, their counts as the ops keep them. Then it is
//! opened as a store. `Durability::Normal`: the figures are the store thread's work, not
//! fsyncs. The same source runs against schema version 4 (it fills no counts there), so the
//! figures before and after can come from one run of each build.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spindle::{Durability, GraphFilter, GraphStatus, Options, Page, Store, Stream};

/// Items of each kind beside the completed ones: pending due, pending scheduled, claimed.
const LIVE: i64 = 100;
/// The oldest runs, failed (the rest completed).
const FAILED_RUNS: i64 = 10;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let number = |flag: &str, full: i64, small: i64| -> i64 {
        let given = args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
        given.and_then(|v| v.parse().ok()).unwrap_or(if smoke { small } else { full })
    };
    let (items, graphs) =
        (number("--items", 1_000_000, 10_000), number("--graphs", 100_000, 1_000));
    let from_v4 = args.iter().any(|a| a == "--from-v4");
    let run = if smoke { Duration::from_millis(300) } else { Duration::from_secs(3) };
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("stats.db");
    let started = Instant::now();
    fill(&path, items, graphs, from_v4);
    println!(
        "filled {items} completed items and {graphs} runs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let options = Options::default().durability(Durability::Normal);
    let started = Instant::now();
    let store = Store::open_with(&path, options).expect("open");
    let what = if from_v4 { "opened (migrated from schema version 4)" } else { "opened" };
    println!("{what} in {:.2} s", started.elapsed().as_secs_f64());
    let calls = if smoke { 20 } else { 200 };
    report(
        &format!("stats() with {items} completed items"),
        &latencies(calls, || store.queue().stats().map(drop)),
    );
    overview(&store, calls, graphs);
    let alone = appends(&store, run, false);
    let beside = appends(&store, run, true);
    println!(
        "append alone:               p50 {:>9.1} us  p99 {:>10.1} us  ({} appends)",
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
        alone.len()
    );
    println!(
        "append beside a stats loop: p50 {:>9.1} us  p99 {:>10.1} us  ({} appends)",
        percentile(&beside, 0.5),
        percentile(&beside, 0.99),
        beside.len()
    );
    store.close().expect("close");
}

/// The overview's graph reads: the runs by status, and the newest failed runs.
fn overview(store: &Store, calls: usize, graphs: i64) {
    let runs = GraphFilter::default().metadata("kind", json!("spindle-run")).roots_only(true);
    report(
        &format!("count_by_status(runs) among {graphs} runs"),
        &latencies(calls, || store.graphs().count_by_status(&runs).map(drop)),
    );
    let failed = runs.clone().status(GraphStatus::Failed).newest_first(true);
    report(
        &format!("find(failed runs, newest first, 10) among {graphs} runs"),
        &latencies(calls, || store.graphs().find(&failed, Page::first(10)).map(drop)),
    );
}

fn report(what: &str, latencies: &[f64]) {
    println!(
        "{what}: p50 {:.3} ms  p99 {:.3} ms  ({} calls)",
        percentile(latencies, 0.5) / 1000.0,
        percentile(latencies, 0.99) / 1000.0,
        latencies.len()
    );
}

/// One kind of item the fill writes: how many, and their columns.
struct Kind {
    prefix: &'static str,
    status: &'static str,
    count: i64,
    run_at_ms: i64,
    attempt: i64,
    lease: Option<(&'static str, i64)>,
    finished: bool,
}

/// Creates the store at `path` (at schema version 4 for `from_v4`), then writes `items`
/// completed items and the live ones, and `graphs` runs, with a raw connection, in one
/// transaction.
fn fill(path: &std::path::Path, items: i64, graphs: i64, from_v4: bool) {
    let mut conn = rusqlite::Connection::open(path).expect("raw connection");
    if from_v4 {
        conn.execute_batch(include_str!("../tests/fixtures/schema_v4.sql")).expect("version 4");
    } else {
        Store::open(path).expect("create").close().expect("close");
    }
    let tx = conn.transaction().expect("begin");
    fill_items(&tx, items);
    fill_runs(&tx, graphs);
    let counted: i64 = tx
        .query_row("SELECT count(*) FROM main.sqlite_schema WHERE name = 'queue_counts'", [], |r| {
            r.get(0)
        })
        .expect("schema");
    if counted == 1 {
        fill_counts(&tx);
    }
    tx.commit().expect("commit");
    // Read from the file, as a store that has run for a while is, not from a huge WAL.
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").expect("checkpoint");
}

/// `items` completed items, and the live ones.
fn fill_items(tx: &rusqlite::Transaction<'_>, items: i64) {
    let far_ms = 4_000_000_000_000_i64;
    let kinds = [
        Kind {
            prefix: "c",
            status: "completed",
            count: items,
            run_at_ms: 0,
            attempt: 1,
            lease: None,
            finished: true,
        },
        Kind {
            prefix: "p",
            status: "pending",
            count: LIVE,
            run_at_ms: 0,
            attempt: 0,
            lease: None,
            finished: false,
        },
        Kind {
            prefix: "s",
            status: "pending",
            count: LIVE,
            run_at_ms: far_ms,
            attempt: 0,
            lease: None,
            finished: false,
        },
        Kind {
            prefix: "w",
            status: "claimed",
            count: LIVE,
            run_at_ms: 0,
            attempt: 1,
            lease: Some(("w", far_ms)),
            finished: false,
        },
    ];
    for kind in kinds {
        let (worker, lease_ms) = kind.lease.unzip();
        let (result, finished_ms) = if kind.finished { (Some("1"), Some(0)) } else { (None, None) };
        tx.execute(
            "INSERT INTO main.queue_items (tenant_id, item_id, queue, payload, priority,
                 run_at_ms, attempt, max_attempts, backoff_base_ms, backoff_max_ms, status, fence,
                 worker_id, lease_expires_at_ms, result, created_at_ms, updated_at_ms,
                 finished_at_ms)
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 - 1)
             SELECT 'default', printf('%s%012d', ?2, i), 'q' || (i % 4), '{\"n\":1}', 0, ?4,
                    ?5, 3, 1000, 64000, ?3, ?5, ?6, ?7, ?8, i, i, ?9
             FROM n",
            rusqlite::params![
                kind.count,
                kind.prefix,
                kind.status,
                kind.run_at_ms,
                kind.attempt,
                worker,
                lease_ms,
                result,
                finished_ms
            ],
        )
        .expect("fill");
    }
}

/// `graphs` runs as `spindle run` leaves them, the oldest failed.
fn fill_runs(tx: &rusqlite::Transaction<'_>, graphs: i64) {
    tx.execute(
        "INSERT INTO main.graphs (tenant_id, graph_id, metadata, status, created_at_ms,
             updated_at_ms)
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 - 1)
         SELECT 'default', printf('g%012d', i), '{\"kind\":\"spindle-run\",\"pipeline\":\"p\"}',
                CASE WHEN i < ?2 THEN 'failed' ELSE 'complete' END, i, i
         FROM n",
        rusqlite::params![graphs, FAILED_RUNS],
    )
    .expect("runs");
}

/// The counts the ops keep, as the migration to schema version 5 fills them.
fn fill_counts(tx: &rusqlite::Transaction<'_>) {
    tx.execute_batch(
        "INSERT INTO main.queue_counts (tenant_id, queue, status, total)
         SELECT tenant_id, queue, status, count(*) FROM main.queue_items
         WHERE status = 'completed' OR status = 'dead' OR status = 'cancelled'
         GROUP BY tenant_id, queue, status;
         INSERT INTO main.graph_counts (tenant_id, kind, root, status, total)
         SELECT tenant_id, metadata ->> '$.kind', parent_graph_id IS NULL, status, count(*)
         FROM main.graphs GROUP BY 1, 2, 3, 4;",
    )
    .expect("counts");
}

/// Up to `calls` calls of `read` (fewer if they take more than 20 s together, at least 3),
/// each one's latency in µs.
fn latencies(calls: usize, read: impl Fn() -> spindle::Result<()>) -> Vec<f64> {
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(calls);
    while latencies.len() < calls && (latencies.len() < 3 || started.elapsed().as_secs() < 20) {
        let at = Instant::now();
        read().expect("read");
        latencies.push(at.elapsed().as_secs_f64() * 1e6);
    }
    latencies
}

/// Appends for `run` from this thread, each one's latency in µs; with `beside`, another
/// thread calls `stats()` in a loop meanwhile.
fn appends(store: &Store, run: Duration, beside: bool) -> Vec<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let looping = beside.then(|| {
        let (store, stop, calls) = (store.clone(), Arc::clone(&stop), Arc::clone(&calls));
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                store.queue().stats().expect("stats");
                calls.fetch_add(1, Ordering::Relaxed);
            }
        })
    });
    let stream = Stream::custom("bench");
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < run {
        let at = Instant::now();
        store.events().append(&stream, "tick", json!({ "n": 1 })).expect("append");
        latencies.push(at.elapsed().as_secs_f64() * 1e6);
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(looping) = looping {
        looping.join().expect("stats thread");
        println!("(the stats loop made {} calls meanwhile)", calls.load(Ordering::Relaxed));
    }
    latencies
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
