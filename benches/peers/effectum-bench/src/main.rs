//! effectum's job cycle (claim, no-op, complete) on jobs added beforehand, timed until none is
//! pending or running; one line of results for `benches/peers/run.sh`.
//!
//! ```text
//! effectum-bench --mode shipped|wal --workers N --jobs N --file PATH
//! ```
//!
//! `shipped` opens the file as effectum does: its `PRAGMA journal = wal` is not a pragma SQLite
//! knows, so the file stays in rollback-journal mode (with `synchronous = NORMAL`). `wal` sets
//! `journal_mode = WAL` on the empty file first (the mode is stored in the file), so effectum's
//! own connections then run in WAL with the `synchronous = NORMAL` it sets.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use effectum::{Job, JobRunner, Queue, RunningJob, Worker};

struct Args {
    mode: String,
    workers: u16,
    jobs: usize,
    file: PathBuf,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = parse_args();
    if args.mode == "wal" {
        let conn = rusqlite::Connection::open(&args.file).expect("open the file");
        let mode: String =
            conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)).expect("wal");
        assert_eq!(mode, "wal", "the file is in WAL mode");
    }
    let queue = Queue::new(&args.file).await.expect("open the queue");
    add_jobs(&queue, args.jobs).await;
    let started = Instant::now();
    let runner = JobRunner::builder("bench", no_op).build();
    let worker = Worker::builder(&queue, ())
        .min_concurrency(args.workers)
        .max_concurrency(args.workers)
        .jobs([runner])
        .build()
        .await
        .expect("worker");
    wait_until_done(&queue).await;
    let secs = started.elapsed().as_secs_f64();
    worker.unregister(Some(Duration::from_secs(10))).await.expect("unregister");
    queue.close(Duration::from_secs(10)).await.expect("close");
    println!(
        "mode=effectum-{} workers={} jobs={} secs={secs:.3} jobs_per_s={:.0}",
        args.mode,
        args.workers,
        args.jobs,
        args.jobs as f64 / secs
    );
}

async fn no_op(_job: RunningJob, _context: ()) -> Result<(), String> {
    Ok(())
}

/// Adds `jobs` jobs of about 100 bytes of JSON, a thousand per call.
async fn add_jobs(queue: &Queue, jobs: usize) {
    let numbers: Vec<usize> = (0..jobs).collect();
    for chunk in numbers.chunks(1000) {
        let batch = chunk
            .iter()
            .map(|n| {
                let payload = serde_json::json!({ "n": n, "pad": "x".repeat(80) });
                Job::builder("bench").json_payload(&payload).expect("payload").build()
            })
            .collect();
        queue.add_jobs(batch).await.expect("add jobs");
    }
}

/// Returns once no job is pending or running (every completion committed).
async fn wait_until_done(queue: &Queue) {
    loop {
        let active = queue.num_active_jobs().await.expect("active jobs");
        if active.pending == 0 && active.running == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn parse_args() -> Args {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        let at = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("{flag} is needed"));
        args.get(at + 1).cloned().unwrap_or_else(|| panic!("{flag} needs a value"))
    };
    Args {
        mode: value("--mode"),
        workers: value("--workers").parse().expect("--workers: a number"),
        jobs: value("--jobs").parse().expect("--jobs: a number"),
        file: PathBuf::from(value("--file")),
    }
}
