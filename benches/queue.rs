//! Job-cycle throughput (enqueue, claim, complete) and claim latency against queue depth, with
//! baselines measured in the same run (compare ratios: these machines are noisy).
//!
//! ```text
//! cargo bench --bench queue                  # every configuration, 5 s each
//! cargo bench --bench queue -- --secs 3
//! cargo bench --bench queue -- --smoke       # a moment each: does it still run?
//! cargo bench --bench queue -- --depth-only  # claim latency at 10,000 and 1,000,000 pending
//! cargo bench --bench queue -- --batched-only  # the batched cycle alone (for a profiler)
//! cargo bench --bench queue -- --batched-ratio # the raw baseline, then the batched cycle
//! cargo bench --bench queue -- --batched-ratio --normal  # the same without fsyncs (CPU only)
//! cargo bench --bench queue -- --single-only   # the single-item cycle alone
//! cargo bench --bench queue -- --one-caller    # per-call cost with one caller (Normal)
//! cargo bench --bench queue -- --workers       # the worker pool, complete_and_claim and batch
//!                                              # calls (a Cycle op settling and claiming 100) on
//!                                              # 20,000 jobs enqueued beforehand, 1/4/16 workers
//! cargo bench --bench queue -- --workers --jobs 5000 --only-threads 16 --only-normal
//! cargo bench --bench queue -- --workers --only-batch   # raw and batch calls only
//! cargo bench --bench queue -- --workers --no-item-events # the queue's item events off
//! cargo bench --bench queue -- --one pool --threads 16 --normal  # one configuration, one line
//!                                              # (what benches/peers/run.sh runs)
//! cargo bench --bench queue -- --limits-only  # claim p50 on limited and serial queues
//!                                             # against an unlimited one (issue 31)
//! cargo bench --bench queue -- --count-cycles 20000  # 20,000 jobs through the worker pool's
//!                                             # round op on an inline in-memory store, for
//!                                             # instruction counts (valgrind --tool=callgrind)
//! ```
//!
//! Baselines: raw rusqlite on one thread doing the same three statements (insert, claim
//! update, complete update) for 100 jobs per transaction with time-ordered ids, and the store
//! with `batch_max = 1`.

#[path = "common/rounds.rs"]
mod rounds;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use serde_json::json;
use spindle::queue::{Completion, Cycle};
use spindle::{Durability, NewItem, Options, Store};

const SCHEMA_SQL: &str = include_str!("../schema.sql");
/// Worker threads, unless `SPINDLE_BENCH_THREADS` says otherwise.
const THREADS: usize = 16;

fn threads() -> usize {
    std::env::var("SPINDLE_BENCH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(THREADS)
}
const LEASE_MS: i64 = 60_000;

#[derive(Default)]
struct Samples {
    jobs: u64,
    enqueue_us: Vec<u32>,
    claim_us: Vec<u32>,
    complete_us: Vec<u32>,
}

impl Samples {
    fn merge(&mut self, other: Samples) {
        self.jobs += other.jobs;
        self.enqueue_us.extend(other.enqueue_us);
        self.claim_us.extend(other.claim_us);
        self.complete_us.extend(other.complete_us);
    }
}

fn micros(since: Instant) -> u32 {
    since.elapsed().as_micros().min(u128::from(u32::MAX)) as u32
}

fn percentile(samples: &[u32], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    f64::from(sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

fn print(label: &str, samples: &Samples, elapsed: Duration, baseline: Option<f64>) -> f64 {
    let rate = samples.jobs as f64 / elapsed.as_secs_f64();
    let ratio = baseline.map_or(String::new(), |b| format!("{:.2}x raw batched", rate / b));
    println!("{label:<46} {rate:>9.0} jobs/s  {ratio}");
    for (name, values) in [
        ("enqueue", &samples.enqueue_us),
        ("claim", &samples.claim_us),
        ("complete", &samples.complete_us),
    ] {
        if !values.is_empty() {
            println!(
                "    {name:<9} p50 {:>8.1} us  p99 {:>9.1} us",
                percentile(values, 0.5),
                percentile(values, 0.99)
            );
        }
    }
    rate
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs = args
        .iter()
        .position(|a| a == "--secs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    if let Some(mode) = arg::<String>(&args, "--one") {
        return one(&args, &mode);
    }
    if let Some(jobs) = arg::<usize>(&args, "--count-cycles") {
        return counted_cycles(jobs);
    }
    // --smoke: a moment per configuration and small depths, to prove the bench still runs.
    let smoke = args.iter().any(|a| a == "--smoke");
    let run = if smoke { Duration::from_millis(300) } else { Duration::from_secs(secs) };
    println!("machine: {} cores; {} worker threads; {run:?} per configuration", cores(), threads());
    if args.iter().any(|a| a == "--one-caller") {
        return one_caller();
    }
    if args.iter().any(|a| a == "--workers") {
        return workers(&args);
    }
    if args.iter().any(|a| a == "--single-only") {
        let (samples, elapsed) = store_cycles(Durability::Full, 64, run, false);
        print("store, single-item calls", &samples, elapsed, None);
        return;
    }
    if args.iter().any(|a| a == "--batched-ratio") {
        // With --normal: both sides under Normal (no fsync per commit), a CPU-bound comparison.
        let normal = args.iter().any(|a| a == "--normal");
        let durability = if normal { Durability::Normal } else { Durability::Full };
        let cpu = cpu_ms();
        let (raw_jobs, raw_elapsed) = raw_batched(durability, run);
        let raw_cpu_us = (cpu_ms() - cpu) * 1000.0 / raw_jobs as f64;
        let raw_rate = raw_jobs as f64 / raw_elapsed.as_secs_f64();
        println!("{:<46} {raw_rate:>9.0} jobs/s", "raw rusqlite, 1 thread, 100 jobs per tx");
        let cpu = cpu_ms();
        let (samples, elapsed) = store_cycles(durability, 64, run, true);
        let store_cpu_us = (cpu_ms() - cpu) * 1000.0 / samples.jobs as f64;
        let label = "store, batches of 100 (enqueue/claim/complete)";
        print(label, &samples, elapsed, Some(raw_rate));
        println!(
            "    cpu per job: raw {raw_cpu_us:.1} us, store {store_cpu_us:.1} us ({:.2}x raw)",
            raw_cpu_us / store_cpu_us
        );
        return;
    }
    if args.iter().any(|a| a == "--batched-only") {
        let (samples, elapsed) = store_cycles(Durability::Full, 64, run, true);
        print("store, batches of 100 (enqueue/claim/complete)", &samples, elapsed, None);
        return;
    }
    if args.iter().any(|a| a == "--limits-only") {
        return limits(smoke);
    }
    if !args.iter().any(|a| a == "--depth-only") {
        cycles(Durability::Full, run);
    }
    depth(if smoke { [1_000, 10_000] } else { [10_000, 1_000_000] });
    if !args.iter().any(|a| a == "--depth-only") {
        limits(smoke);
    }
}

/// The queues `limits` compares: a name, what it is, its settings (a resume leaves a settings
/// row without a limit; a limit is `SetConcurrency`) and how many of its items another worker
/// holds throughout (a limited claim counts the queue's claimed items).
const LIMITED: [(&str, &str, Option<u32>, bool, usize); 5] = [
    ("plain", "unlimited (no settings row)", None, false, 0),
    ("resumed", "unlimited, paused and resumed (a row)", None, true, 0),
    ("wide", "limit 1,000,000 (never reached)", Some(1_000_000), false, 0),
    ("held", "limit 1,000,000, 1,000 held by another", Some(1_000_000), false, 1_000),
    ("serial", "limit 1 (serial: claim, complete)", Some(1), false, 0),
];

/// Median time of a single `claim` and of a `claim_batch(100)` (Normal, one caller), each
/// followed by completing what it took (not timed), on the queues of `LIMITED`: items enqueued
/// beforehand, the queues called in turns, so that each sees the same store and machine.
/// A serial queue's batch takes one item.
fn limits(smoke: bool) {
    println!("\n== claim with pause and limits checked (Normal, one caller, p50 per call)");
    let (rounds, singles, batches) = if smoke { (1, 50, 5) } else { (5, 1_000, 40) };
    let (_dir, store) = open(Durability::Normal, 64);
    let q = store.queue();
    for (queue, _, limit, resumed, held) in LIMITED {
        for _ in 0..held / 100 {
            let items = (0..100).map(|n| NewItem::new(queue, job_payload(n))).collect();
            q.enqueue_batch(items).expect("enqueue");
            q.claim_batch("other", &[queue], 3_600_000, 100).expect("hold");
        }
        for _ in 0..rounds * (singles / 100 + batches + 1) {
            let items = (0..100).map(|n| NewItem::new(queue, job_payload(n))).collect();
            q.enqueue_batch(items).expect("enqueue");
        }
        if resumed {
            q.pause(queue).expect("pause");
            q.resume(queue).expect("resume");
        }
        q.set_concurrency(queue, limit).expect("limit");
    }
    let mut single_us = vec![Vec::new(); LIMITED.len()];
    let mut batch_us = vec![Vec::new(); LIMITED.len()];
    let mut batch_items = vec![0_usize; LIMITED.len()];
    // In turns, call by call: every queue sees the machine as the others do.
    for _ in 0..rounds {
        for _ in 0..singles {
            for (n, (queue, ..)) in LIMITED.iter().enumerate() {
                let at = Instant::now();
                let claimed = q.claim("bench", &[queue], LEASE_MS).expect("claim").expect("item");
                single_us[n].push(micros(at));
                q.complete(&claimed.item.id, claimed.fence, json!(null)).expect("complete");
            }
        }
        for _ in 0..batches {
            for (n, (queue, ..)) in LIMITED.iter().enumerate() {
                let at = Instant::now();
                let claimed = q.claim_batch("bench", &[queue], LEASE_MS, 100).expect("claim");
                batch_us[n].push(micros(at));
                batch_items[n] += claimed.len();
                let completions = claimed
                    .into_iter()
                    .map(|c| Completion { id: c.item.id, fence: c.fence, result: json!(null) })
                    .collect();
                q.complete_batch(completions).expect("complete");
            }
        }
    }
    let (plain_single, plain_batch) =
        (percentile(&single_us[0], 0.5), percentile(&batch_us[0], 0.5));
    for (n, (_, what, ..)) in LIMITED.iter().enumerate() {
        let (single, batch) = (percentile(&single_us[n], 0.5), percentile(&batch_us[n], 0.5));
        let per_call = batch_items[n] as f64 / batch_us[n].len() as f64;
        println!(
            "{what:<40} claim {single:>6.1} us ({:.2}x)   claim_batch(100) {batch:>7.1} us \
             ({:.2}x, {per_call:.0} items a call)",
            single / plain_single,
            batch / plain_batch,
        );
    }
    store.close().expect("close");
}

/// The value after `flag` in `args`, parsed.
fn arg<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok())
}

/// The worker pool and single-item calls with `complete_and_claim`, on jobs enqueued
/// beforehand (not timed), until every job is completed.
fn workers(args: &[String]) {
    let jobs: usize = arg(args, "--jobs").unwrap_or(20_000);
    let only: Option<usize> = arg(args, "--only-threads");
    let durabilities = if args.iter().any(|a| a == "--only-normal") {
        vec![Durability::Normal]
    } else {
        vec![Durability::Full, Durability::Normal]
    };
    for durability in durabilities {
        println!("\n== {jobs} jobs under {durability:?} (jobs/s; raw measured before and after)");
        for threads in [1, 4, 16].into_iter().filter(|t| only.is_none_or(|o| o == *t)) {
            let raw_before = raw_claim_complete(durability, jobs, RawShape::SameTx);
            let batch = timed_jobs(durability, jobs, |store| run_batch(store, threads));
            let (pool, single) = if args.iter().any(|a| a == "--only-batch") {
                (None, None)
            } else {
                let prefetch = arg(args, "--prefetch");
                let pool =
                    timed_jobs(durability, jobs, |store| run_pool(store, threads, prefetch, jobs));
                (Some(pool), Some(timed_jobs(durability, jobs, |store| run_single(store, threads))))
            };
            let raw = raw_before.mean(raw_claim_complete(durability, jobs, RawShape::SameTx));
            let figure = |name: &str, measured: Option<Measured>| {
                measured.map_or(String::new(), |m| {
                    format!("   {name} {:>7.0} ({:.2}x raw)", m.rate, m.rate / raw.rate)
                })
            };
            println!(
                "{threads:>3} workers: raw {:>7.0}{}{}{}   cpu/job: raw {:.1} us, batch {:.1} us \
                 ({:.2}x raw)",
                raw.rate,
                figure("pool", pool),
                figure("single-item", single),
                figure("batch x100", Some(batch)),
                raw.cpu_us,
                batch.cpu_us,
                raw.cpu_us / batch.cpu_us,
            );
        }
    }
}

/// One configuration of `--workers` in this process, printed as one line for
/// `benches/peers/run.sh`: `--one pool|single|batch|raw|raw-pipelined|raw-store-statements
/// --threads N [--normal] [--jobs N] [--no-item-events]`.
fn one(args: &[String], mode: &str) {
    let jobs: usize = arg(args, "--jobs").unwrap_or(20_000);
    let threads: usize = arg(args, "--threads").unwrap_or(1);
    let normal = args.iter().any(|a| a == "--normal");
    let durability = if normal { Durability::Normal } else { Durability::Full };
    let measured = match mode {
        "pool" => timed_jobs(durability, jobs, |store| run_pool(store, threads, None, jobs)),
        "single" => timed_jobs(durability, jobs, |store| run_single(store, threads)),
        "batch" => timed_jobs(durability, jobs, |store| run_batch(store, threads)),
        "raw" => raw_claim_complete(durability, jobs, RawShape::SameTx),
        "raw-pipelined" => raw_claim_complete(durability, jobs, RawShape::Pipelined),
        "raw-store-statements" => raw_store_statements(durability, jobs),
        other => panic!(
            "--one: pool, single, batch, raw, raw-pipelined or raw-store-statements, not {other}"
        ),
    };
    let durability = if normal { "normal" } else { "full" };
    let quiet = if args.iter().any(|a| a == "--no-item-events") { "-no-events" } else { "" };
    println!(
        "mode=spindle-{mode}-{durability}{quiet} workers={threads} jobs={jobs} \
         cpu_us_per_job={:.1} jobs_per_s={:.0}",
        measured.cpu_us, measured.rate
    );
}

/// Raw rusqlite on `jobs` items inserted beforehand (not timed): per transaction, the search
/// for 100 due items (the store's query for one priority level, on its index), then the claim
/// and complete statements for each; one thread. Jobs per second.
///
/// `Pipelined` is the shape a real worker must have, as the store's `Cycle` has: a claim
/// commits before its job runs, so each transaction completes the items the one before claimed
/// and claims the next ones. `SameTx` claims and completes each item in one transaction (the
/// issue's raw baseline), writing each row's page once per job instead of twice.
fn raw_claim_complete(durability: Durability, jobs: usize, shape: RawShape) -> Measured {
    let (_dir, mut conn) = raw_queue(durability, jobs);
    let (started, cpu) = (Instant::now(), cpu_ms());
    let mut done = 0;
    let mut held: Vec<String> = Vec::new();
    while done < jobs {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        for id in held.drain(..) {
            raw_complete(&tx, &id);
            done += 1;
        }
        for (id, _payload, _attempt) in raw_due(&tx) {
            raw_claim(&tx, &id);
            match shape {
                RawShape::SameTx => {
                    raw_complete(&tx, &id);
                    done += 1;
                }
                RawShape::Pipelined => held.push(id),
            }
        }
        tx.commit().expect("commit");
    }
    Measured::since(started, cpu, jobs)
}

/// A fresh file in WAL mode holding the store's schema and `jobs` pending items (ids as long as
/// the store's UUIDs, payloads of about 100 bytes), for the raw baselines.
fn raw_queue(durability: Durability, jobs: usize) -> (tempfile::TempDir, Connection) {
    let (dir, mut conn) = raw_connection(durability);
    let tx = conn.transaction().expect("begin");
    for n in 0..jobs {
        raw_enqueue(&tx, &format!("{n:036}"), &job_payload(n).to_string());
    }
    tx.commit().expect("commit");
    (dir, conn)
}

/// A fresh file with the store's schema, in WAL mode, synchronous as `durability` says and
/// temporary tables in memory (as the store sets them), for the raw baselines.
fn raw_connection(durability: Durability) -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().expect("tempdir");
    let conn = Connection::open(dir.path().join("raw.db")).expect("open");
    conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
    let sync = if durability == Durability::Full { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", sync).expect("sync");
    conn.pragma_update(None, "temp_store", "MEMORY").expect("temp_store");
    conn.execute_batch(SCHEMA_SQL).expect("schema");
    (dir, conn)
}

/// Raw rusqlite running, in the pipelined shape, the statements the store itself runs for a
/// job (what its guarantees and its API ask of the SQL): a claim's look at expired leases and
/// at the priority levels, every column of a due item (a `QueueItem` is returned whole), bound
/// tenant, worker and clock parameters, a completion fenced and lease-checked in its own
/// `WHERE`, then the read of the item's queue and attempt that its `completed` event names.
/// No JSON, events, replies or savepoints: the floor any implementation of the store's
/// statements stands on.
fn raw_store_statements(durability: Durability, jobs: usize) -> Measured {
    let (_dir, mut conn) = raw_queue(durability, jobs);
    let (started, cpu) = (Instant::now(), cpu_ms());
    let mut done = 0;
    let mut held: Vec<(String, i64)> = Vec::new();
    while done < jobs {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        for (id, fence) in held.drain(..) {
            store_complete(&tx, &id, fence);
            done += 1;
        }
        store_sweep_probes(&tx);
        for (id, fence) in store_due(&tx) {
            store_claim(&tx, &id);
            held.push((id, fence + 1));
        }
        tx.commit().expect("commit");
    }
    Measured::since(started, cpu, jobs)
}

/// What a claim reads before the due items: the queue's expired leases (none here) and its
/// highest priority level with a pending item.
fn store_sweep_probes(conn: &Connection) {
    let expired = conn
        .prepare_cached(
            "SELECT item_id FROM main.queue_items
             WHERE tenant_id = ?1 AND queue = ?2 AND status = 'claimed' AND lease_expires_at_ms <= ?3
             ORDER BY lease_expires_at_ms, item_id LIMIT ?4",
        )
        .expect("prepare")
        .query_map(params!["default", "q", 1, 100], |row| row.get::<_, String>(0))
        .expect("select")
        .count();
    assert_eq!(expired, 0);
    conn.prepare_cached(
        "SELECT priority FROM main.queue_items
         WHERE tenant_id = ?1 AND queue = ?2 AND status = 'pending' AND priority < ?3
         ORDER BY priority DESC LIMIT 1",
    )
    .expect("prepare")
    .query_row(params!["default", "q", i64::MAX], |row| row.get::<_, i64>(0))
    .ok();
}

/// The store's due-item query for one priority level, every column read; (id, fence) of each.
fn store_due(conn: &Connection) -> Vec<(String, i64)> {
    conn.prepare_cached(
        "SELECT item_id, queue, payload, priority, run_at_ms, attempt, max_attempts,
                backoff_base_ms, backoff_max_ms, dedupe_key, execution_id, node_id, status, fence,
                worker_id, lease_expires_at_ms, last_error, result, created_at_ms, updated_at_ms,
                finished_at_ms
         FROM main.queue_items
         WHERE tenant_id = ?1 AND queue = ?2 AND status = 'pending' AND priority = ?3
           AND run_at_ms <= ?4
         ORDER BY run_at_ms, item_id LIMIT ?5",
    )
    .expect("prepare")
    .query_map(params!["default", "q", 0, 1, 100], |row| {
        for column in [1, 2, 9, 10, 11, 12, 14, 16, 17] {
            row.get::<_, Option<String>>(column)?;
        }
        for column in [3, 4, 5, 6, 7, 8, 15, 18, 19, 20] {
            row.get::<_, Option<i64>>(column)?;
        }
        Ok((row.get(0)?, row.get(13)?))
    })
    .expect("select")
    .collect::<rusqlite::Result<_>>()
    .expect("rows")
}

/// The store's claim of one due item.
fn store_claim(conn: &Connection, id: &str) {
    let changed = conn
        .prepare_cached(
            "UPDATE main.queue_items
             SET status = 'claimed', attempt = attempt + 1, fence = fence + 1, worker_id = ?3,
                 lease_expires_at_ms = ?5, updated_at_ms = ?4
             WHERE tenant_id = ?1 AND item_id = ?2 AND status = 'pending'",
        )
        .expect("prepare")
        .execute(params!["default", id, "bench", 1, LEASE_MS])
        .expect("claim");
    assert_eq!(changed, 1);
}

/// The store's completion of one held item, then the read its `completed` event needs.
fn store_complete(conn: &Connection, id: &str, fence: i64) {
    let changed = conn
        .prepare_cached(
            "UPDATE main.queue_items
             SET status = 'completed', result = ?5, worker_id = NULL, lease_expires_at_ms = NULL,
                 updated_at_ms = ?4, finished_at_ms = ?4
             WHERE tenant_id = ?1 AND item_id = ?2 AND fence = ?3 AND status = 'claimed'
               AND lease_expires_at_ms > ?4",
        )
        .expect("prepare")
        .execute(params!["default", id, fence, 2, "null"])
        .expect("complete");
    assert_eq!(changed, 1);
    conn.prepare_cached(
        "SELECT queue, attempt FROM main.queue_items WHERE tenant_id = ?1 AND item_id = ?2",
    )
    .expect("prepare")
    .query_row(params!["default", id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))
    .expect("event fields");
}

/// How raw rusqlite spreads a job's claim and complete over transactions.
#[derive(Clone, Copy)]
enum RawShape {
    SameTx,
    Pipelined,
}

/// The due-item search a claim makes, with what a worker needs of each item: its id, payload
/// and attempt.
fn raw_due(conn: &Connection) -> Vec<(String, String, i64)> {
    conn.prepare_cached(
        "SELECT item_id, payload, attempt FROM queue_items
         WHERE tenant_id = 'default' AND queue = 'q' AND status = 'pending'
           AND priority = 0 AND run_at_ms <= 1
         ORDER BY run_at_ms, item_id LIMIT 100",
    )
    .expect("prepare")
    .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
    .expect("select")
    .collect::<rusqlite::Result<_>>()
    .expect("rows")
}

/// Jobs per second of `work` on a fresh store holding `jobs` items of about 100 bytes.
fn timed_jobs(durability: Durability, jobs: usize, work: impl FnOnce(&Store)) -> Measured {
    let (_dir, store) = open(durability, 64);
    if std::env::args().any(|a| a == "--no-item-events") {
        store.queue().set_item_events("q", false).expect("item events off");
    }
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        let items = chunk.iter().map(|n| NewItem::new("q", job_payload(*n)));
        store.queue().enqueue_batch(items.collect()).expect("enqueue");
    }
    let (started, cpu) = (Instant::now(), cpu_ms());
    work(&store);
    let measured = Measured::since(started, cpu, jobs);
    let stats = store.queue().stats().expect("stats");
    assert_eq!(stats[0].completed, jobs as u64, "every job completed");
    store.close().expect("close");
    measured
}

/// Jobs per second, and CPU time per job (every thread of the process, in µs: less sensitive
/// than the rate to what else the machine runs).
#[derive(Clone, Copy)]
struct Measured {
    rate: f64,
    cpu_us: f64,
}

impl Measured {
    fn since(started: Instant, cpu_ms_then: f64, jobs: usize) -> Self {
        let rate = jobs as f64 / started.elapsed().as_secs_f64();
        Measured { rate, cpu_us: (cpu_ms() - cpu_ms_then) * 1000.0 / jobs as f64 }
    }

    /// Both figures averaged with another measurement's.
    fn mean(self, other: Measured) -> Measured {
        Measured {
            rate: (self.rate + other.rate) / 2.0,
            cpu_us: (self.cpu_us + other.cpu_us) / 2.0,
        }
    }
}

/// The payload of job `n` of the `--workers` runs: about 100 bytes of JSON.
fn job_payload(n: usize) -> serde_json::Value {
    json!({ "n": n, "pad": "x".repeat(80) })
}

fn run_pool(store: &Store, threads: usize, prefetch: Option<usize>, jobs: usize) {
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (all_done, wait) = crossbeam_channel::bounded::<()>(1);
    let counter = Arc::clone(&done);
    let mut worker = store.queue().worker(&["q"]).threads(threads).lease_ms(LEASE_MS);
    if let Some(prefetch) = prefetch {
        worker = worker.prefetch(prefetch);
    }
    let pool = worker
        .run(move |_job| {
            if counter.fetch_add(1, Ordering::Relaxed) + 1 == jobs {
                let _ = all_done.send(());
            }
            spindle::queue::Outcome::Complete(json!(null))
        })
        .expect("pool");
    wait.recv().expect("every job handled");
    pool.stop();
    pool.join().expect("join");
}

fn run_single(store: &Store, threads: usize) {
    on_threads(store, threads, |store, t| {
        let next = spindle::queue::Claim::new(format!("w{t}"), &["q"], LEASE_MS);
        let queue = store.queue();
        let mut held = queue.claim(&next.worker_id, &["q"], LEASE_MS).expect("claim");
        while let Some(job) = held {
            held = queue
                .complete_and_claim(&job.item.id, job.fence, json!(null), &next)
                .expect("complete and claim");
        }
    });
}

/// Batch calls: each thread runs one `Cycle` op per round that completes the 100 items it
/// claimed in the last round and claims up to 100 more, one commit per 100 jobs as raw makes.
fn run_batch(store: &Store, threads: usize) {
    on_threads(store, threads, |store, t| {
        cycle_until_empty(&store, "q", &format!("w{t}"));
    });
}

/// Runs `Cycle` rounds as `worker` on `queue` (complete the 100 items claimed last round,
/// claim up to 100 more) until a round claims nothing; asserts every completion held and
/// returns how many there were.
fn cycle_until_empty(store: &Store, queue: &str, worker: &str) -> usize {
    let (mut settle, mut completed) = (Vec::new(), 0);
    loop {
        let cycle = Cycle {
            worker_id: worker.to_owned(),
            queues: vec![queue.to_owned()],
            lease_ms: LEASE_MS,
            settle: std::mem::take(&mut settle),
            renew: Vec::new(),
            claim_max: 100,
        };
        let cycled = store.exec(cycle).expect("cycle");
        assert!(cycled.settled.iter().all(Result::is_ok), "every item completed");
        completed += cycled.settled.len();
        if cycled.claimed.is_empty() {
            return completed;
        }
        settle = rounds::completions(cycled.claimed);
    }
}

/// Runs `work(store, t)` on `threads` threads, each with its own handle, until all return.
fn on_threads(store: &Store, threads: usize, work: impl Fn(Store, usize) + Copy + Send + 'static) {
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            thread::spawn(move || work(store, t))
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
}

/// CPU time this process has used (user and system), in ms; 0 where `/proc` is missing.
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |at: usize| fields.get(at).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, in clock ticks (100 per second).
    (ticks(11) + ticks(12)) * 10.0
}

fn cores() -> usize {
    thread::available_parallelism().map_or(1, usize::from)
}

fn cycles(durability: Durability, run: Duration) {
    println!("\n== job cycle under {durability:?}");
    let (raw_jobs, raw_elapsed) = raw_batched(durability, run);
    let raw_rate = raw_jobs as f64 / raw_elapsed.as_secs_f64();
    println!("{:<46} {raw_rate:>9.0} jobs/s", "raw rusqlite, 1 thread, 100 jobs per tx");
    let unbatched = store_cycles(durability, 1, run, false);
    let unbatched_rate =
        print("store, batch_max 1, single-item calls", &unbatched.0, unbatched.1, Some(raw_rate));
    let single = store_cycles(durability, 64, run, false);
    let single_rate = print("store, single-item calls", &single.0, single.1, Some(raw_rate));
    println!("    = {:.2}x the batch_max=1 store", single_rate / unbatched_rate);
    let batched = store_cycles(durability, 64, run, true);
    print("store, batches of 100 (enqueue/claim/complete)", &batched.0, batched.1, Some(raw_rate));
}

fn open(durability: Durability, batch_max: usize) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default().durability(durability).batch_max(batch_max);
    let store = Store::open_with(dir.path().join("queue.db"), options).expect("open");
    (dir, store)
}

/// `threads()` workers each running enqueue, claim, complete in a loop for `run`.
fn store_cycles(
    durability: Durability,
    batch_max: usize,
    run: Duration,
    batched: bool,
) -> (Samples, Duration) {
    let (_dir, store) = open(durability, batch_max);
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads() + 1));
    let workers: Vec<_> = (0..threads())
        .map(|t| {
            let (store, stop, barrier) = (store.clone(), Arc::clone(&stop), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                let queue = format!("q{t}");
                let mut samples = Samples::default();
                while !stop.load(Ordering::Relaxed) {
                    if batched {
                        batched_cycle(&store, &queue, &mut samples);
                    } else {
                        single_cycle(&store, &queue, &mut samples);
                    }
                }
                samples
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    let mut all = Samples::default();
    for worker in workers {
        all.merge(worker.join().expect("worker"));
    }
    let elapsed = started.elapsed();
    store.close().expect("close");
    (all, elapsed)
}

fn single_cycle(store: &Store, queue: &str, samples: &mut Samples) {
    let q = store.queue();
    let at = Instant::now();
    q.enqueue(NewItem::new(queue, json!({"job": samples.jobs}))).expect("enqueue");
    samples.enqueue_us.push(micros(at));
    let at = Instant::now();
    let claimed = q.claim("bench", &[queue], LEASE_MS).expect("claim").expect("an item");
    samples.claim_us.push(micros(at));
    let at = Instant::now();
    q.complete(&claimed.item.id, claimed.fence, json!(null)).expect("complete");
    samples.complete_us.push(micros(at));
    samples.jobs += 1;
}

fn batched_cycle(store: &Store, queue: &str, samples: &mut Samples) {
    let q = store.queue();
    let items = (0..100).map(|n| NewItem::new(queue, json!({"job": n}))).collect();
    let at = Instant::now();
    q.enqueue_batch(items).expect("enqueue");
    samples.enqueue_us.push(micros(at));
    let at = Instant::now();
    let claimed = q.claim_batch("bench", &[queue], LEASE_MS, 100).expect("claim");
    samples.claim_us.push(micros(at));
    let completions = claimed
        .into_iter()
        .map(|c| Completion { id: c.item.id, fence: c.fence, result: json!(null) })
        .collect::<Vec<_>>();
    let at = Instant::now();
    let n = completions.len() as u64;
    q.complete_batch(completions).expect("complete");
    samples.complete_us.push(micros(at));
    samples.jobs += n;
}

/// Raw rusqlite: per transaction, insert 100 items, claim them, complete them.
fn raw_batched(durability: Durability, run: Duration) -> (u64, Duration) {
    let (_dir, mut conn) = raw_connection(durability);
    let mut jobs = 0u64;
    let started = Instant::now();
    while started.elapsed() < run {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        let ids: Vec<String> = (0..100).map(|n| format!("{:020}-{n:03}", jobs)).collect();
        for id in &ids {
            raw_enqueue(&tx, id, &json!({"job": jobs}).to_string());
        }
        for id in &ids {
            raw_claim(&tx, id);
            raw_complete(&tx, id);
        }
        tx.commit().expect("commit");
        jobs += 100;
    }
    (jobs, started.elapsed())
}

fn raw_enqueue(conn: &Connection, id: &str, payload: &str) {
    conn.prepare_cached(
        "INSERT INTO queue_items (tenant_id, item_id, queue, payload, priority, run_at_ms, attempt,
             max_attempts, backoff_base_ms, backoff_max_ms, status, fence, created_at_ms,
             updated_at_ms)
         VALUES ('default', ?1, 'q', ?2, 0, 0, 0, 3, 1000, 64000, 'pending', 0, 0, 0)",
    )
    .expect("prepare")
    .execute(params![id, payload])
    .expect("insert");
}

fn raw_claim(conn: &Connection, id: &str) {
    conn.prepare_cached(
        "UPDATE queue_items SET status = 'claimed', attempt = attempt + 1, fence = fence + 1,
             worker_id = 'bench', lease_expires_at_ms = 60000, updated_at_ms = 1
         WHERE tenant_id = 'default' AND item_id = ?1 AND status = 'pending'",
    )
    .expect("prepare")
    .execute(params![id])
    .expect("claim");
}

fn raw_complete(conn: &Connection, id: &str) {
    conn.prepare_cached(
        "UPDATE queue_items SET status = 'completed', result = 'null', worker_id = NULL,
             lease_expires_at_ms = NULL, finished_at_ms = 2, updated_at_ms = 2
         WHERE tenant_id = 'default' AND item_id = ?1 AND fence = 1 AND status = 'claimed'",
    )
    .expect("prepare")
    .execute(params![id])
    .expect("complete");
}

/// Median claim (and complete) time with 10,000 and with 1,000,000 pending items.
fn depth(depths: [u64; 2]) {
    println!("\n== claim latency against queue depth (Normal, one caller)");
    let mut medians = Vec::new();
    for pending in depths {
        let (dir, store) = open(Durability::Normal, 64);
        fill(&dir.path().join("queue.db"), pending);
        let claims = pending.min(5_000);
        let mut claim_us = Vec::with_capacity(claims as usize);
        for _ in 0..claims {
            let at = Instant::now();
            let claimed =
                store.queue().claim("bench", &["deep"], LEASE_MS).expect("claim").expect("item");
            claim_us.push(micros(at));
            store.queue().complete(&claimed.item.id, claimed.fence, json!(null)).expect("complete");
        }
        let median = percentile(&claim_us, 0.5);
        println!(
            "{pending:>9} pending: claim p50 {median:>7.1} us  p99 {:>8.1} us",
            percentile(&claim_us, 0.99)
        );
        medians.push(median);
        store.close().expect("close");
    }
    println!(
        "    = {:.2}x the median at {} (target at most 1.5x)",
        medians[1] / medians[0],
        depths[0]
    );
}

/// One caller, `Normal`: the cost of each call with the store thread otherwise idle, for
/// single items and for batches of 100.
fn one_caller() {
    let (_dir, store) = open(Durability::Normal, 64);
    let mut samples = Samples::default();
    let started = Instant::now();
    for _ in 0..20_000 {
        single_cycle(&store, "one", &mut samples);
    }
    print("one caller, Normal, single-item calls", &samples, started.elapsed(), None);
    let mut samples = Samples::default();
    let started = Instant::now();
    for _ in 0..200 {
        batched_cycle(&store, "one-batched", &mut samples);
    }
    print("one caller, Normal, batches of 100", &samples, started.elapsed(), None);
}

/// Puts `pending` due items in queue `deep`, in bulk through a second connection to the file
/// (the store's own tables are written only by its ops; this is a benchmark's shortcut).
fn fill(path: &std::path::Path, pending: u64) {
    let conn = Connection::open(path).expect("second connection");
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO queue_items (tenant_id, item_id, queue, payload, priority, run_at_ms,
             attempt, max_attempts, backoff_base_ms, backoff_max_ms, status, fence,
             created_at_ms, updated_at_ms)
         SELECT 'default', printf('%020d', i), 'deep', '{}', 0, 0, 0, 3, 1000, 64000,
                'pending', 0, 0, 0
         FROM n",
        params![pending as i64],
    )
    .expect("fill");
}

/// `jobs` items through the rounds a worker pool's coordinator runs (one `Cycle` op: settle
/// the 100 items claimed last round, claim 100 more), enqueued 1,000 per call beforehand, on
/// an inline in-memory store from this thread: no actor thread, no spinning, so an instruction
/// count (valgrind --tool=callgrind) is the store's work per job, the same in every run.
fn counted_cycles(jobs: usize) {
    let store = Store::open_in_memory_with(Options::default().inline(true)).expect("open");
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1_000) {
        let items = chunk.iter().map(|n| NewItem::new("counted", json!({ "n": n }))).collect();
        store.queue().enqueue_batch(items).expect("enqueue");
    }
    let completed = cycle_until_empty(&store, "counted", "counted");
    assert_eq!(completed, jobs, "every job completed once");
    store.close().expect("close");
    println!("{jobs} jobs through Cycle rounds of 100 on an inline in-memory store");
}
