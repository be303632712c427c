//! Event-append throughput and latency through the store, against baselines measured in the
//! same run (these machines are shared and noisy: compare ratios, not absolute figures).
//!
//! ```text
//! cargo bench --bench append                    # every configuration, 3 s each
//! cargo bench --bench append -- --secs 5        # longer runs
//! cargo bench --bench append -- --smoke          # a moment each: does it still run?
//! cargo bench --bench append -- --wal-soak 60   # 60 s at full load, then report the WAL size
//! cargo bench --bench append -- --only-normal 16 # one configuration alone (for a profiler)
//! cargo bench --bench append -- --only-full 1     # likewise, under Durability::Full
//! cargo bench --bench append -- --only-normal 16 --in-flight 8  # 8 appends kept in flight
//!                                                  # per thread (Store::submit)
//! cargo bench --bench append -- --count 20000   # 20,000 appends on an inline in-memory store,
//!                                                  # one thread, no spinning: for callgrind's
//!                                                  # instruction counts
//! ```
//!
//! Baselines: raw rusqlite on one thread (the same two statements per append, one append per
//! transaction and 100 per transaction), and the store with `batch_max = 1` (no group commit).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use serde_json::json;
use spindle::log::Append;
use spindle::{Durability, Options, Store, Stream};

const SCHEMA_SQL: &str = include_str!("../schema.sql");

struct Figures {
    label: String,
    ops: u64,
    elapsed: Duration,
    latencies_us: Vec<u32>,
}

impl Figures {
    fn per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_us(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let index = ((sorted.len() - 1) as f64 * p).round() as usize;
        f64::from(sorted[index])
    }

    fn print(&self, baseline: Option<&Figures>) {
        let ratio =
            baseline.map_or(String::new(), |b| format!("{:>7.2}x", self.per_sec() / b.per_sec()));
        println!(
            "{:<44} {:>10.0}/s  p50 {:>7.1} us  p99 {:>8.1} us  {}",
            self.label,
            self.per_sec(),
            self.percentile_us(0.50),
            self.percentile_us(0.99),
            ratio
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    if let Some(soak_secs) = value_of("--wal-soak") {
        return wal_soak(Duration::from_secs(soak_secs));
    }
    if let Some(count) = value_of("--count") {
        return counted(count);
    }
    // --smoke: every configuration for a moment, to prove the bench still runs (CI does this).
    let smoke = args.iter().any(|a| a == "--smoke");
    let run = if smoke {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(value_of("--secs").unwrap_or(3))
    };
    let in_flight = value_of("--in-flight").unwrap_or(1) as usize;
    if let Some(threads) = value_of("--only-normal") {
        // One configuration alone, for profiling.
        return store_run(Durability::Normal, threads as usize, 64, in_flight, run).print(None);
    }
    if let Some(threads) = value_of("--only-full") {
        return store_run(Durability::Full, threads as usize, 64, in_flight, run).print(None);
    }
    println!("machine: {} cores; each configuration runs {:?}", cores(), run);
    for durability in [Durability::Full, Durability::Normal] {
        println!("\n== {durability:?}");
        let raw1 = raw(durability, 1, run);
        raw1.print(None);
        let raw100 = raw(durability, 100, run);
        raw100.print(Some(&raw1));
        let unbatched = store_run(durability, 16, 1, 1, run);
        unbatched.print(Some(&raw1));
        for threads in [1, 4, 16] {
            let figures = store_run(durability, threads, 64, 1, run);
            figures.print(Some(&raw1));
            if threads == 16 {
                println!(
                    "{:<44} {:>7.2}x the batch_max=1 store, {:.2}x raw 1/tx, {:.2}x raw 100/tx",
                    "  group commit at 16 threads:",
                    figures.per_sec() / unbatched.per_sec(),
                    figures.per_sec() / raw1.per_sec(),
                    figures.per_sec() / raw100.per_sec()
                );
            }
        }
        let pipelined = store_run(durability, 16, 64, 8, run);
        pipelined.print(Some(&raw1));
        println!(
            "{:<44} {:>7.2}x raw 100/tx",
            "  16 threads, 8 in flight each:",
            pipelined.per_sec() / raw100.per_sec()
        );
    }
}

/// `count` appends on an inline in-memory store from this thread: no actor thread, no
/// spinning, so an instruction count (valgrind --tool=callgrind) is the work itself.
fn counted(count: u64) {
    let options = Options::default().inline(true);
    let store = Store::open_in_memory_with(options).expect("open");
    let stream = Stream::custom("counted");
    for n in 0..count {
        store.events().append(&stream, "e", json!({ "n": n })).expect("append");
    }
    store.close().expect("close");
    println!("{count} appends on an inline in-memory store");
}

fn cores() -> usize {
    thread::available_parallelism().map_or(1, usize::from)
}

fn options(durability: Durability, batch_max: usize) -> Options {
    Options::default().durability(durability).batch_max(batch_max)
}

/// Appends from `threads` callers for `run`, each keeping `in_flight` appends sent
/// (`Store::submit`) and waiting for the oldest; times every append from send to reply.
fn store_run(
    durability: Durability,
    threads: usize,
    batch_max: usize,
    in_flight: usize,
    run: Duration,
) -> Figures {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_with(dir.path().join("bench.db"), options(durability, batch_max))
        .expect("open");
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, stop, barrier) = (store.clone(), Arc::clone(&stop), Arc::clone(&barrier));
            thread::spawn(move || {
                let stream = Stream::custom(format!("bench-{}", t % 4));
                barrier.wait();
                appends(&store, &stream, t, in_flight, &stop)
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    let latencies_us: Vec<u32> =
        workers.into_iter().flat_map(|w| w.join().expect("worker")).collect();
    let elapsed = started.elapsed();
    store.close().expect("close");
    let in_flight = if in_flight > 1 { format!(", {in_flight} in flight") } else { String::new() };
    Figures {
        label: format!("store {threads:>2} threads, batch_max {batch_max}{in_flight}"),
        ops: latencies_us.len() as u64,
        elapsed,
        latencies_us,
    }
}

/// One caller's appends until `stop`: one call at a time, or `in_flight` kept sent.
fn appends(
    store: &Store,
    stream: &Stream,
    t: usize,
    in_flight: usize,
    stop: &AtomicBool,
) -> Vec<u32> {
    let micros = |since: Instant| since.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
    let mut latencies = Vec::with_capacity(1 << 16);
    if in_flight <= 1 {
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            store.events().append(stream, "tick", json!({ "t": t })).expect("append");
            latencies.push(micros(started));
        }
        return latencies;
    }
    let mut sent = std::collections::VecDeque::with_capacity(in_flight);
    while !stop.load(Ordering::Relaxed) || !sent.is_empty() {
        if sent.len() == in_flight || stop.load(Ordering::Relaxed) {
            let (started, pending): (Instant, spindle::Pending<_>) =
                sent.pop_front().expect("one in flight");
            pending.wait().expect("append");
            latencies.push(micros(started));
            continue;
        }
        let append = Append {
            stream: stream.clone(),
            event_type: "tick".into(),
            payload: json!({ "t": t }),
            idem_key: None,
        };
        sent.push_back((Instant::now(), store.submit(append).expect("submit")));
    }
    latencies
}

/// The same two statements per append through raw rusqlite, `per_tx` appends per transaction.
fn raw(durability: Durability, per_tx: usize, run: Duration) -> Figures {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conn = raw_connection(&dir.path().join("raw.db"), durability);
    let mut latencies_us = Vec::new();
    let mut ops = 0u64;
    let started = Instant::now();
    while started.elapsed() < run {
        let tx_started = Instant::now();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        for _ in 0..per_tx {
            raw_append(&tx, &format!("bench-{}", ops % 4), ops);
            ops += 1;
        }
        tx.commit().expect("commit");
        latencies_us.push(tx_started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
    }
    Figures {
        label: format!("raw rusqlite, 1 thread, {per_tx} per transaction"),
        ops,
        elapsed: started.elapsed(),
        latencies_us,
    }
}

fn raw_connection(path: &Path, durability: Durability) -> Connection {
    let conn = Connection::open(path).expect("open raw");
    conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
    let sync = if durability == Durability::Full { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", sync).expect("synchronous");
    conn.execute_batch(SCHEMA_SQL).expect("schema");
    conn
}

fn raw_append(conn: &Connection, stream: &str, n: u64) {
    let seq: i64 = conn
        .prepare_cached(
            "INSERT INTO stream_heads (tenant_id, stream_kind, stream_id, head_seq)
             VALUES ('default', 'custom', ?1, 1)
             ON CONFLICT (tenant_id, stream_kind, stream_id)
             DO UPDATE SET head_seq = stream_heads.head_seq + 1 RETURNING head_seq",
        )
        .expect("prepare")
        .query_row(params![stream], |r| r.get(0))
        .expect("head");
    let payload = json!({ "t": n }).to_string();
    conn.prepare_cached(
        "INSERT INTO events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                             idem_key, created_at_ms)
         VALUES ('default', 'custom', ?1, ?2, 'tick', ?3, NULL, 0)",
    )
    .expect("prepare")
    .execute(params![stream, seq, payload])
    .expect("insert");
}

/// Full load for `run` (16 callers, Normal, so the WAL grows as fast as it can), sampling the
/// WAL file's size; the WAL must end under the limit.
fn wal_soak(run: Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("soak.db");
    let wal_path = dir.path().join("soak.db-wal");
    let limit = Options::default().wal_bytes_max;
    let store = Store::open_with(&path, options(Durability::Normal, 64)).expect("open");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..16)
        .map(|t| {
            let (store, stop) = (store.clone(), Arc::clone(&stop));
            thread::spawn(move || {
                let stream = Stream::custom(format!("soak-{}", t % 4));
                let payload = json!({ "t": t, "pad": "x".repeat(200) });
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    store.events().append(&stream, "tick", payload.clone()).expect("append");
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    let started = Instant::now();
    let mut wal_max = 0u64;
    while started.elapsed() < run {
        thread::sleep(Duration::from_millis(100));
        wal_max = wal_max.max(std::fs::metadata(&wal_path).map_or(0, |m| m.len()));
    }
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    let wal_end = std::fs::metadata(&wal_path).map_or(0, |m| m.len());
    let db_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!(
        "wal soak: {:?} at full load, {} appends ({:.0}/s), database {:.1} MiB; WAL max {:.1} MiB, at end {:.1} MiB, limit {:.1} MiB: {}",
        run,
        ops,
        ops as f64 / run.as_secs_f64(),
        db_bytes as f64 / 1048576.0,
        wal_max as f64 / 1048576.0,
        wal_end as f64 / 1048576.0,
        limit as f64 / 1048576.0,
        if wal_max <= limit { "bounded" } else { "OVER THE LIMIT" }
    );
    store.close().expect("close");
}
