//! What the process registry and workflows cost over the event log they write to, measured in
//! the same run (these machines are shared and noisy: compare ratios, not absolute figures).
//!
//! ```text
//! cargo bench --bench registry                 # every configuration, 3 s each
//! cargo bench --bench registry -- --secs 5     # longer runs
//! cargo bench --bench registry -- --smoke      # a moment each: does it still run?
//! ```
//!
//! Each configuration runs 16 threads, each on its own stream, under `Durability::Full`:
//! - baseline: `events().append_idempotent` with a fresh key per event (one keyed append);
//! - `processes().append_event` with a replay key, of a declared type with a payload schema
//!   and a wake (the record read, the schema checked, the wake worked out, the record saved);
//! - `workflows().patch_state` (the execution read, patched and written back) and
//!   `workflows().append_event` (the execution checked, one append).

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spindle::process::{Selector, WakeSpec};
use spindle::{AppendRequest, EventType, Options, Registration, SessionScope, Store, Stream};

const THREADS: usize = 16;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|arg| arg == "--smoke");
    let secs = args
        .iter()
        .position(|arg| arg == "--secs")
        .and_then(|at| args.get(at + 1))
        .and_then(|text| text.parse().ok())
        .unwrap_or(3.0);
    let run_for = if smoke { Duration::from_millis(100) } else { Duration::from_secs_f64(secs) };
    println!("registry: {THREADS} threads, Durability::Full, {:.1} s each", run_for.as_secs_f64());
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open_with(dir.path().join("bench.db"), Options::default()).expect("open");
    prepare(&store);
    let baseline = measure(&store, run_for, |store, thread, i| {
        let stream = Stream::custom(format!("log-{thread}"));
        store.events().append_idempotent(&stream, "progress", line(i), &format!("k{i}")).map(drop)
    });
    report("events().append_idempotent (baseline)", baseline, None);
    let process = measure(&store, run_for, |store, thread, i| {
        let request = AppendRequest::new("progress", line(i)).replay_key(format!("k{i}"));
        store.processes().append_event(&format!("p{thread}"), request).map(drop)
    });
    report("processes().append_event, keyed, schema+wake", process, Some(baseline));
    let ids = executions(&store);
    let patch_ids = Arc::clone(&ids);
    let patch = measure(&store, run_for, move |store, thread, i| {
        store.workflows().patch_state(&patch_ids[thread], json!({ "step": i })).map(drop)
    });
    report("workflows().patch_state", patch, Some(baseline));
    let event = measure(&store, run_for, move |store, thread, i| {
        store.workflows().append_event(&ids[thread], "progress", line(i)).map(drop)
    });
    report("workflows().append_event", event, Some(baseline));
    store.close().expect("close");
}

fn line(i: u64) -> serde_json::Value {
    json!({ "line": format!("step {i} done"), "n": i })
}

/// One process per thread, with a `progress` type that has a schema and a wake.
fn prepare(store: &Store) {
    let wake = WakeSpec::new(Selector::Pointer("/line".into()));
    let schema = json!({
        "type": "object",
        "required": ["line", "n"],
        "properties": { "line": { "type": "string" }, "n": { "type": "integer", "minimum": 0 } }
    });
    for thread in 0..THREADS {
        let progress = EventType::new("progress").schema(schema.clone()).wake(wake.clone());
        let registration = Registration::new(format!("p{thread}"), "bench", json!({}))
            .event_type(progress)
            .wake_target(SessionScope::new("bench"));
        store.processes().register(registration).expect("register");
    }
    store.workflows().put_definition("bench", "v1", json!({})).expect("definition");
}

/// One running execution per thread.
fn executions(store: &Store) -> Arc<Vec<String>> {
    let ids = (0..THREADS)
        .map(|_| {
            let id =
                store.workflows().create_execution("bench", "v1", json!({})).expect("create").id;
            store.workflows().set_status(&id, spindle::WorkflowStatus::Running).expect("run");
            id
        })
        .collect();
    Arc::new(ids)
}

/// Operations per second of `op` on `THREADS` threads for `run_for`.
fn measure<F>(store: &Store, run_for: Duration, op: F) -> f64
where
    F: Fn(&Store, usize, u64) -> spindle::Result<()> + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let start = Arc::new(Barrier::new(THREADS + 1));
    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (store, op, start) = (store.clone(), Arc::clone(&op), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let began = Instant::now();
                let mut done = 0_u64;
                while began.elapsed() < run_for {
                    op(&store, thread, done).expect("operation");
                    done += 1;
                }
                done
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let total: u64 = workers.into_iter().map(|worker| worker.join().expect("worker")).sum();
    total as f64 / began.elapsed().as_secs_f64()
}

fn report(label: &str, per_sec: f64, baseline: Option<f64>) {
    let ratio = baseline.map_or(String::new(), |base| format!("{:>7.2}x", per_sec / base));
    println!("{label:<48} {per_sec:>10.0}/s {ratio}");
}
