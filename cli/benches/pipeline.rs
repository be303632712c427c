//! The `spindle` command's throughput: a 1,000-node pipeline of `true` commands run with
//! `-j 8`, beside a baseline measured in the same run: the same 1,000 `sh -c true` processes
//! spawned by 8 threads without any store. The difference is the store's share of the wall
//! time (the rest is process spawning).
//!
//! ```text
//! cargo bench --bench pipeline
//! cargo bench --bench pipeline -- --smoke    # 100 nodes: does it still run?
//! ```
//!
//! The pipeline is 10 layers of 100 nodes, each node after the first layer waiting for two
//! nodes of the layer before; it runs under `Durability::Full` (the default).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::{Map, Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_spindle");
const JOBS: usize = 8;
const WIDTH: usize = 100;

fn main() {
    let smoke = std::env::args().any(|arg| arg == "--smoke");
    let nodes = if smoke { 100 } else { 1_000 };
    let dir = tempfile::tempdir().expect("temporary directory");
    let pipeline = dir.path().join("bench.json");
    std::fs::write(&pipeline, pipeline_json(nodes).to_string()).expect("write pipeline");
    let spawn_s = spawn_only(nodes);
    let began = Instant::now();
    let status = Command::new(BIN)
        .arg("--db")
        .arg(dir.path().join("bench.db"))
        .args(["run", "-j", &JOBS.to_string()])
        .arg(&pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run spindle");
    let run_s = began.elapsed().as_secs_f64();
    assert!(status.success(), "the run failed: {status}");
    let store_share = ((run_s - spawn_s) / run_s).max(0.0);
    println!("pipeline: {nodes} nodes of `true`, -j {JOBS}, Durability::Full");
    println!("  baseline, {nodes} x `sh -c true` on {JOBS} threads: {spawn_s:.2} s");
    println!(
        "  spindle run: {run_s:.2} s, {:.0} nodes/s; the store's share of the wall time {:.0} %",
        nodes as f64 / run_s,
        store_share * 100.0
    );
}

fn pipeline_json(nodes: usize) -> Value {
    let mut map = Map::new();
    for index in 0..nodes {
        let after: Vec<String> = if index < WIDTH {
            Vec::new()
        } else {
            let (start, column) = ((index / WIDTH - 1) * WIDTH, index % WIDTH);
            vec![format!("n{}", start + column), format!("n{}", start + (column + 1) % WIDTH)]
        };
        map.insert(format!("n{index}"), json!({ "run": "true", "after": after }));
    }
    json!({ "name": "bench", "nodes": map })
}

/// Seconds to spawn and wait for `count` `sh -c true` processes on `JOBS` threads.
fn spawn_only(count: usize) -> f64 {
    let next = AtomicUsize::new(0);
    let began = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..JOBS {
            scope.spawn(|| {
                while next.fetch_add(1, Ordering::SeqCst) < count {
                    let status = Command::new("sh").args(["-c", "true"]).status();
                    assert!(status.is_ok_and(|s| s.success()));
                }
            });
        }
    });
    began.elapsed().as_secs_f64()
}
