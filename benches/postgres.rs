//! The PostgreSQL engine: the job cycle (enqueue, claim, complete) and appends, with 1, 4 and
//! 16 callers on one store and with 3 stores on one database (each its own connection, as 3
//! processes would have), against the `postgres` crate running the same statements batched 100
//! to a transaction on one connection, measured in the same run (compare ratios: the machine is
//! shared and noisy).
//!
//! ```text
//! SPINDLE_BENCH_PG="host=/tmp/pg user=spindle dbname=postgres" \
//!   cargo bench --features postgres --bench postgres              # 2,000 jobs, 4,000 events
//! ... -- --jobs 5000 --events 10000
//! ... -- --smoke                                                    # a moment each (CI)
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use serde_json::json;
use spindle::{NewItem, Options, Store, Stream};

fn main() {
    let Ok(server) = std::env::var("SPINDLE_BENCH_PG") else {
        println!("SPINDLE_BENCH_PG is not set: no PostgreSQL server to measure against");
        return;
    };
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| {
        args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)?.parse::<u64>().ok())
    };
    let smoke = args.iter().any(|a| a == "--smoke");
    let jobs = if smoke { 100 } else { value_of("--jobs").unwrap_or(2_000) };
    let events = if smoke { 100 } else { value_of("--events").unwrap_or(4_000) };
    let bench = Bench { server };
    println!("server fsync: {}; job cycle: {jobs} jobs; appends: {events} events", bench.fsync());

    println!("\n== job cycle (enqueue, claim, complete)");
    let raw = bench.raw_cycle(jobs);
    raw.print("raw postgres, 100 per transaction", None);
    for (stores, callers) in [(1, 1), (1, 4), (1, 16), (3, 4)] {
        let label = format!("spindle, {stores} store(s) x {callers} callers");
        bench.store_cycle(jobs, stores, callers).print(&label, Some(&raw));
    }

    println!("\n== appends");
    let raw = bench.raw_appends(events);
    raw.print("raw postgres, 100 per transaction", None);
    for (stores, callers) in [(1, 1), (1, 4), (1, 16), (3, 4)] {
        let label = format!("spindle, {stores} store(s) x {callers} callers");
        bench.store_appends(events, stores, callers).print(&label, Some(&raw));
    }
}

/// How many were done, in how long.
struct Measured {
    count: u64,
    elapsed: Duration,
}

impl Measured {
    fn per_second(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }

    fn print(&self, label: &str, baseline: Option<&Measured>) {
        let ratio = baseline.map_or(String::new(), |base| {
            format!("  ({:.2}x raw)", self.per_second() / base.per_second())
        });
        println!("{label:<40} {:>9.0}/s{ratio}", self.per_second());
    }
}

struct Bench {
    server: String,
}

impl Bench {
    /// A fresh schema's connection string, with a store created in it.
    fn fresh(&self) -> String {
        let schema = format!("b_{}", uuid::Uuid::now_v7().simple());
        let location = format!("{} options='-csearch_path={schema}'", self.server);
        Store::connect(&location).expect("create the store").close().expect("close");
        location
    }

    fn fsync(&self) -> String {
        let mut client = Client::connect(&self.server, NoTls).expect("connect");
        client.query_one("SHOW fsync", &[]).expect("show fsync").get(0)
    }

    fn stores(&self, count: usize) -> Vec<Store> {
        let location = self.fresh();
        let options = Options::default;
        (0..count).map(|_| Store::connect_with(&location, options()).expect("connect")).collect()
    }

    fn raw_cycle(&self, jobs: u64) -> Measured {
        let mut client = Client::connect(&self.fresh(), NoTls).expect("connect");
        let insert = client
            .prepare(
                "INSERT INTO queue_items (tenant_id, item_id, queue, payload, priority, run_at_ms,
                     attempt, max_attempts, backoff_base_ms, backoff_max_ms, status, fence,
                     created_at_ms, updated_at_ms)
                 VALUES ('default', $1, 'q', $2, 0, 0, 0, 3, 1000, 64000, 'pending', 0, 0, 0)",
            )
            .expect("prepare");
        let claim = client
            .prepare(
                "UPDATE queue_items SET status = 'claimed', attempt = attempt + 1,
                     fence = fence + 1, worker_id = 'bench', lease_expires_at_ms = 60000,
                     updated_at_ms = 1
                 WHERE tenant_id = 'default' AND item_id = $1 AND status = 'pending'",
            )
            .expect("prepare");
        let complete = client
            .prepare(
                "UPDATE queue_items SET status = 'completed', result = 'null', worker_id = NULL,
                     lease_expires_at_ms = NULL, finished_at_ms = 2, updated_at_ms = 2
                 WHERE tenant_id = 'default' AND item_id = $1 AND fence = 1
                   AND status = 'claimed'",
            )
            .expect("prepare");
        let started = Instant::now();
        for batch in 0..jobs.div_ceil(100) {
            let mut tx = client.transaction().expect("begin");
            let ids: Vec<String> = (0..100).map(|n| format!("{batch:020}-{n:03}")).collect();
            for id in &ids {
                let payload = json!({ "job": id }).to_string();
                tx.execute(&insert, &[id, &payload]).expect("insert");
            }
            for id in &ids {
                assert_eq!(tx.execute(&claim, &[id]).expect("claim"), 1);
                assert_eq!(tx.execute(&complete, &[id]).expect("complete"), 1);
            }
            tx.commit().expect("commit");
        }
        Measured { count: jobs.div_ceil(100) * 100, elapsed: started.elapsed() }
    }

    fn store_cycle(&self, jobs: u64, stores: usize, callers: usize) -> Measured {
        let stores = self.stores(stores);
        let items: Vec<NewItem> =
            (0..jobs).map(|n| NewItem::new("q", json!({ "job": n }))).collect();
        for chunk in items.chunks(500) {
            stores[0].queue().enqueue_batch(chunk.to_vec()).expect("enqueue");
        }
        let done = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&done);
        let elapsed = run_callers(&stores, callers, move |store, _| {
            let queue = store.queue();
            while let Some(claimed) = queue.claim("bench", &["q"], 60_000).expect("claim") {
                queue.complete(&claimed.item.id, claimed.fence, json!(null)).expect("complete");
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert_eq!(done.load(Ordering::Relaxed), jobs, "every job done once");
        Measured { count: jobs, elapsed }
    }

    fn raw_appends(&self, events: u64) -> Measured {
        let mut client = Client::connect(&self.fresh(), NoTls).expect("connect");
        let insert = client
            .prepare(
                "INSERT INTO events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
                     created_at_ms)
                 VALUES ('default', 'custom', 'raw', $1, 'n', $2, 0)",
            )
            .expect("prepare");
        let started = Instant::now();
        for batch in 0..events.div_ceil(100) {
            let mut tx = client.transaction().expect("begin");
            for n in 0..100 {
                let seq = (batch * 100 + n + 1) as i64;
                let payload = json!({ "n": seq }).to_string();
                tx.execute(&insert, &[&seq, &payload]).expect("insert");
            }
            tx.commit().expect("commit");
        }
        Measured { count: events.div_ceil(100) * 100, elapsed: started.elapsed() }
    }

    fn store_appends(&self, events: u64, stores: usize, callers: usize) -> Measured {
        let stores = self.stores(stores);
        let per_caller = events / (stores.len() * callers) as u64;
        let elapsed = run_callers(&stores, callers, move |store, caller| {
            let stream = Stream::custom(format!("s{}", caller % 4));
            for n in 0..per_caller {
                store.events().append(&stream, "n", json!({ "n": n })).expect("append");
            }
        });
        Measured { count: per_caller * (stores.len() * callers) as u64, elapsed }
    }
}

/// Runs `work` on `callers` threads for each store, started together; how long until all end.
fn run_callers(
    stores: &[Store],
    callers: usize,
    work: impl Fn(&Store, usize) + Send + Sync + Clone + 'static,
) -> Duration {
    let barrier = Arc::new(Barrier::new(stores.len() * callers + 1));
    let threads: Vec<_> = stores
        .iter()
        .flat_map(|store| (0..callers).map(move |caller| (store.clone(), caller)))
        .map(|(store, caller)| {
            let (barrier, work) = (Arc::clone(&barrier), work.clone());
            thread::spawn(move || {
                barrier.wait();
                work(&store, caller);
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    for thread in threads {
        thread.join().expect("caller");
    }
    started.elapsed()
}
