//! What a fuzz harness pays for the store: a fresh in-memory store per input, a few dozen
//! operations, close; and one small operation on an inline store. Each against raw rusqlite
//! measured in the same run (these machines are shared and noisy: compare ratios).
//!
//! ```text
//! cargo bench --bench harness             # 3 s per configuration
//! cargo bench --bench harness -- --smoke  # a moment each: does it still run?
//! cargo bench --bench harness -- --count 200  # exactly 200 runs of each, for callgrind:
//! valgrind --tool=callgrind target/release/deps/harness-<hash> --count 200
//! ```
//!
//! Under callgrind, the inclusive instructions of `store_iteration`, `raw_copy_iteration` and
//! `raw_schema_iteration` divided by the count are each one's cost, repeatable on a noisy
//! machine.
//!
//! - iteration: open in memory, 20 mixed operations over every domain, close. The store inline
//!   and seeded (as a harness runs it), and on its own thread; baselines: raw rusqlite opening an
//!   in-memory database and running `schema.sql` (what a fresh store used to cost), and raw
//!   rusqlite copying the schema in with `deserialize` and running 20 inserts.
//! - small op: one event append on an inline in-memory store, against the same two statements in
//!   one transaction through raw rusqlite on an in-memory connection.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, MAIN_DB, TransactionBehavior, params};
use serde_json::json;
use spindle::{
    ManualClock, NewItem, NodeOptions, NodeSpec, Options, Registration, Role, Store, Stream,
};

const SCHEMA_SQL: &str = include_str!("../schema.sql");
const T0: i64 = 1_700_000_000_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|arg| arg == "--smoke");
    let count = args.iter().position(|arg| arg == "--count").and_then(|i| args.get(i + 1));
    let run = match count.and_then(|count| count.parse().ok()) {
        Some(count) => Run::Count(count),
        None if smoke => Run::For(Duration::from_millis(200)),
        None => Run::For(Duration::from_secs(3)),
    };
    println!("harness iteration (open in memory, 20 mixed operations, close): median, p90");
    let schema = sample("raw rusqlite: open, run schema.sql, close", run, raw_schema_iteration);
    let image = fresh_image();
    let copied = sample("raw rusqlite: deserialize, 20 inserts, close", run, || {
        raw_copy_iteration(&image);
    });
    let mut seed = 0;
    let inline = sample("store, inline and seeded", run, || {
        seed += 1;
        store_iteration(options(true, seed));
    });
    let threaded = sample("store on its own thread", run, || store_iteration(options(false, 1)));
    inline.compare("inline store / raw schema run", &schema);
    inline.compare("inline store / raw deserialize + inserts", &copied);
    threaded.compare("threaded store / inline store", &inline);
    println!();
    println!("small op (one event append, in memory): median, p90");
    let raw = raw_append_figures(run);
    let store = inline_append_figures(run);
    store.compare("inline store / raw rusqlite", &raw);
}

/// Latencies of one measured action, in nanoseconds.
struct Sampled {
    label: &'static str,
    nanos: Vec<u64>,
}

impl Sampled {
    fn percentile_us(&self, p: f64) -> f64 {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        let index = ((sorted.len() - 1) as f64 * p).round() as usize;
        sorted[index] as f64 / 1_000.0
    }

    fn print(&self) {
        let (p50, p90) = (self.percentile_us(0.5), self.percentile_us(0.9));
        let count = self.nanos.len();
        println!("  {:<48} p50 {p50:>9.1} us  p90 {p90:>9.1} us  ({count} runs)", self.label);
    }

    fn compare(&self, label: &str, baseline: &Sampled) {
        let ratio = self.percentile_us(0.5) / baseline.percentile_us(0.5);
        println!("  ratio {label:<42} {ratio:>6.2}x (medians)");
    }
}

/// How long each configuration runs.
#[derive(Clone, Copy)]
enum Run {
    For(Duration),
    Count(usize),
}

impl Run {
    fn more(self, started: Instant, done: usize) -> bool {
        match self {
            Run::For(run) => started.elapsed() < run || done < 5,
            Run::Count(count) => done < count,
        }
    }
}

/// Runs `action` again and again for `run`, timing each.
fn sample(label: &'static str, run: Run, mut action: impl FnMut()) -> Sampled {
    let mut nanos = Vec::new();
    let started = Instant::now();
    while run.more(started, nanos.len()) {
        let one = Instant::now();
        action();
        nanos.push(u64::try_from(one.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    let sampled = Sampled { label, nanos };
    sampled.print();
    sampled
}

fn options(inline: bool, seed: u64) -> Options {
    Options::default().inline(inline).seed(seed).clock(Arc::new(ManualClock::new(T0)))
}

/// Open, 20 operations over every domain, close: what a fuzz harness does per input.
#[inline(never)]
fn store_iteration(options: Options) {
    let store = Store::open_in_memory_with(options).expect("open");
    let events = store.events();
    let stream = Stream::custom("s");
    events.append(&stream, "a", json!({ "n": 1 })).expect("append");
    events.append_idempotent(&stream, "b", json!({ "n": 2 }), "k").expect("append");
    events.append_idempotent(&stream, "b", json!({ "n": 2 }), "k").expect("replay");
    black_box(events.read(&stream, 0, 10).expect("read"));
    let queue = store.queue();
    queue.enqueue(NewItem::new("q", json!({ "job": 1 }))).expect("enqueue");
    queue.enqueue(NewItem::new("q", json!({ "job": 2 })).priority(5)).expect("enqueue");
    let claimed = queue.claim("w", &["q"], 30_000).expect("claim").expect("an item");
    queue.complete(&claimed.item.id, claimed.fence, json!({ "ok": true })).expect("complete");
    let again = queue.claim("w", &["q"], 30_000).expect("claim").expect("an item");
    queue.fail(&again.item.id, again.fence, "boom", true).expect("fail");
    let flows = store.workflows();
    flows.put_definition("build", "v1", json!({ "nodes": ["a"] })).expect("define");
    let execution = flows.create_execution("build", "v1", json!({ "n": 1 })).expect("create");
    flows.patch_state(&execution.id, json!({ "step": "a" })).expect("patch");
    flows.append_event(&execution.id, "started", json!({})).expect("event");
    let process = Registration::new("p1", "tool", json!({ "tool": "grep" }));
    store.processes().register(process).expect("register");
    let graphs = store.graphs();
    let graph = graphs.create(json!({})).expect("graph");
    graphs.add_node(&graph, NodeSpec::task(json!({})), NodeOptions::new().id("a")).expect("node");
    graphs.start(&graph).expect("start");
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    black_box(store.tenant("acme").expect("view").auth().create_token("t", Role::Admin, None))
        .expect("token");
    store.close().expect("close");
}

#[inline(never)]
fn raw_schema_iteration() {
    let conn = Connection::open_in_memory().expect("open");
    conn.execute_batch(SCHEMA_SQL).expect("schema");
    conn.close().expect("close");
}

fn fresh_image() -> Vec<u8> {
    let mut conn = Connection::open_in_memory().expect("open");
    conn.execute_batch(SCHEMA_SQL).expect("schema");
    conn.serialize(MAIN_DB).expect("serialize").to_vec()
}

#[inline(never)]
fn raw_copy_iteration(image: &[u8]) {
    let mut conn = Connection::open_in_memory().expect("open");
    conn.deserialize_read_exact(MAIN_DB, image, image.len(), false).expect("deserialize");
    for n in 0..10 {
        raw_append(&conn, n);
    }
    conn.close().expect("close");
}

fn raw_append_figures(run: Run) -> Sampled {
    let mut conn = Connection::open_in_memory().expect("open");
    conn.execute_batch(SCHEMA_SQL).expect("schema");
    let mut n = 0;
    sample("raw rusqlite: BEGIN, the append's 2 statements, COMMIT", run, || {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).expect("begin");
        raw_append(&tx, n);
        tx.commit().expect("commit");
        n += 1;
    })
}

/// The two statements of an append (as `benches/append.rs` uses them).
fn raw_append(conn: &Connection, n: u64) {
    let seq: i64 = conn
        .prepare_cached(
            "INSERT INTO stream_heads (tenant_id, stream_kind, stream_id, head_seq)
             VALUES ('default', 'custom', 's', 1)
             ON CONFLICT (tenant_id, stream_kind, stream_id)
             DO UPDATE SET head_seq = stream_heads.head_seq + 1 RETURNING head_seq",
        )
        .expect("prepare")
        .query_row([], |r| r.get(0))
        .expect("head");
    let payload = json!({ "n": n }).to_string();
    conn.prepare_cached(
        "INSERT INTO events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                             idem_key, created_at_ms)
         VALUES ('default', 'custom', 's', ?1, 'tick', ?2, NULL, 0)",
    )
    .expect("prepare")
    .execute(params![seq, payload])
    .expect("insert");
}

fn inline_append_figures(run: Run) -> Sampled {
    let store = Store::open_in_memory_with(options(true, 1)).expect("open");
    let stream = Stream::custom("s");
    let mut n = 0;
    let sampled = sample("inline store: events().append", run, || {
        store.events().append(&stream, "tick", json!({ "n": n })).expect("append");
        n += 1;
    });
    store.close().expect("close");
    sampled
}
