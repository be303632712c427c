//! The PostgreSQL engine: the job cycle (enqueue, claim, complete) and appends, with 1, 4 and
//! 16 callers on one store, with 3 stores in one process (each its own connection) and with 3
//! processes on one schema (4 and 8 callers each), against the `postgres` crate doing the same
//! writes (fewer statements: see BENCHMARKS.md) batched 100 to a transaction on one connection,
//! measured in the same run (compare ratios: the machine is shared and noisy).
//!
//! ```text
//! SPINDLE_BENCH_PG="host=/tmp/pg user=spindle dbname=postgres" \
//!   cargo bench --features postgres --bench postgres              # 2,000 jobs, 4,000 events
//! ... -- --jobs 5000 --events 10000
//! ... -- --smoke                                                    # a moment each (CI)
//! ... -- --trips cycle 200        # round trips: see `count_trips` (run under strace)
//! ... -- --peer pool 16 3 20000    # one row of the peer comparison (benches/peers/postgres)
//! ```
//!
//! The 3-process rows run this binary again as each process: the parent creates a schema (and,
//! for the cycle, enqueues every job into it), then starts 3 children at once with
//! `SPINDLE_BENCH_CHILD` saying what to run (`cycle CALLERS`: claim and complete until the
//! shared queue is empty; `appends CALLERS PER_CALLER`) and `SPINDLE_BENCH_CHILD_AT` the
//! schema's connection string. Each child opens its own store, prints `ready` and waits for `go`
//! on its stdin; once all are ready the parent sends `go` to each; each prints
//! `done COUNT MICROSECONDS`. The row's throughput is the sum of the counts over the longest
//! time (for the cycle, plus the enqueue's); it shows each process's count and time.
//!
//! `--peer MODE HANDLERS PROCESSES JOBS` is one row of `benches/peers/postgres/run.sh`: the
//! parent enqueues JOBS jobs of about 100 bytes (1,000 to an `enqueue_batch`, timed), then
//! PROCESSES children (also for one) each run MODE with HANDLERS handlers until the queue is
//! empty: `pool` (the worker pool, a no-op handler; the parent reads the queue's kept count of
//! completed items every 2 ms and stops the children once it reaches JOBS), `single` (each handler a thread: `claim`, then
//! `complete_and_claim` per job) or `batch` (each handler a thread: one `Cycle` op a round,
//! completing the 100 items it claimed the round before and claiming 100 more). It checks that
//! each job was completed exactly once and prints one line of `key=value` fields. `MODE@N`
//! opens the children's stores with N writer sessions (`Options::writers`; default 1). With
//! `SPINDLE_PEER_ANALYZE` set, the parent runs `ANALYZE queue_items` after the enqueue.
//!
//! Every cycle row times the enqueue too (500 jobs to a call, before the callers start) and
//! fails unless each job was completed exactly once (the callers' count and the schema's rows
//! agree); every append row fails unless the schema holds every event the callers appended.

#[path = "common/rounds.rs"]
mod rounds;

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use serde_json::json;
use spindle::{NewItem, Options, Store, Stream};

/// Marks a child process of this bench and says what it runs (see [`Task`]).
const CHILD_TASK: &str = "SPINDLE_BENCH_CHILD";
/// A child's schema: the connection string its store opens.
const CHILD_AT: &str = "SPINDLE_BENCH_CHILD_AT";
/// A child's writer sessions (`Options::writers`), when a peer row names them (`MODE@N`).
const CHILD_WRITERS: &str = "SPINDLE_BENCH_CHILD_WRITERS";
/// How many processes the multi-process rows run at once.
const PROCESSES: usize = 3;

/// The writer sessions a peer row's children open their stores with (`--peer MODE@N`).
static PEER_WRITERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

fn main() {
    if let Ok(task) = std::env::var(CHILD_TASK) {
        let location = std::env::var(CHILD_AT).expect("a child needs SPINDLE_BENCH_CHILD_AT");
        run_child(&Task::parse(&task), &location);
        return;
    }
    let Ok(server) = std::env::var("SPINDLE_BENCH_PG") else {
        println!("SPINDLE_BENCH_PG is not set: no PostgreSQL server to measure against");
        return;
    };
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--trips") {
        count_trips(&server, &args[at + 1..]);
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--peer") {
        peer_row(&Bench { server }, &args[at + 1..]);
        return;
    }
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
    for callers in [4, 8] {
        let label = format!("spindle, {PROCESSES} processes x {callers} callers");
        bench.process_cycle(jobs, callers).print(&label, Some(&raw));
    }

    println!("\n== appends");
    let raw = bench.raw_appends(events);
    raw.print("raw postgres, 100 per transaction", None);
    for (stores, callers) in [(1, 1), (1, 4), (1, 16), (3, 4)] {
        let label = format!("spindle, {stores} store(s) x {callers} callers");
        bench.store_appends(events, stores, callers).print(&label, Some(&raw));
    }
    for callers in [4, 8] {
        let label = format!("spindle, {PROCESSES} processes x {callers} callers");
        bench.process_appends(events, callers).print(&label, Some(&raw));
    }
}

/// `--trips WHAT N [K]`: runs N operations of one caller on a fresh schema between two marks
/// written to stderr (`trips: begin`, `trips: end`), for counting the round trips between them:
/// `strace -f -e trace=sendto,write -o LOG BENCH --trips cycle 200`, then the `sendto` lines
/// between the marks (every round trip is one `sendto`). WHAT is `cycle` (enqueue, claim,
/// complete: the single-item job cycle), `enqueue` (one item), `append` (one event to a custom
/// stream), `enqueue-batch` (K items a call),
/// `round` (one pool round, a `Cycle` that completes the K items the round before claimed and
/// claims K more), `single` (a `complete_and_claim` of the item the one before claimed).
fn count_trips(server: &str, args: &[String]) {
    const TRIPS_WHAT: &str = "cycle, enqueue, append, enqueue-batch, round or single";
    let number = |i: usize, default: usize| -> usize {
        args.get(i).map_or(default, |word| word.parse().expect("--trips WHAT N [K]: a number"))
    };
    let (what, n, k) = (args.first().map_or("cycle", String::as_str), number(1, 200), number(2, 1));
    let location = Bench { server: server.to_owned() }.fresh();
    let store = Store::connect_with(&location, Options::default()).expect("connect");
    let queue = store.queue();
    let item = |n: usize| NewItem::new("q", json!({ "job": n }));
    if what == "round" || what == "single" {
        for chunk in (0..(n + 1) * k).collect::<Vec<_>>().chunks(500) {
            queue.enqueue_batch(chunk.iter().map(|&n| item(n)).collect()).expect("enqueue");
        }
    }
    let mut held: Vec<(String, u64)> = Vec::new();
    eprintln!("trips: begin");
    for round in 0..n {
        match what {
            "cycle" => {
                queue.enqueue(item(round)).expect("enqueue");
                let claimed = queue.claim("w", &["q"], 60_000).expect("claim").expect("an item");
                queue.complete(&claimed.item.id, claimed.fence, json!(null)).expect("complete");
            }
            "enqueue" => drop(queue.enqueue(item(round)).expect("enqueue")),
            "append" => {
                let stream = Stream::custom("s");
                store.events().append(&stream, "n", json!({ "n": round })).expect("append");
            }
            "enqueue-batch" => {
                drop(queue.enqueue_batch((0..k).map(item).collect()).expect("enqueue"));
            }
            "round" => held = pool_round(&store, &held, k),
            "single" => {
                let next = spindle::queue::Claim::new("w", &["q"], 60_000);
                let claimed = match held.pop() {
                    Some((id, fence)) => queue.complete_and_claim(&id, fence, json!(null), &next),
                    None => queue.claim("w", &["q"], 60_000),
                };
                let claimed = claimed.expect("complete and claim").expect("an item");
                held = vec![(claimed.item.id, claimed.fence)];
            }
            other => panic!("--trips: {TRIPS_WHAT}, not {other}"),
        }
    }
    eprintln!("trips: end");
    store.close().expect("close");
}

/// One pool round: completes `held`, claims up to `k`; returns what it claimed.
fn pool_round(store: &Store, held: &[(String, u64)], k: usize) -> Vec<(String, u64)> {
    use spindle::queue::{Completion, Cycle, Settlement};
    let settle = held
        .iter()
        .map(|(id, fence)| {
            Settlement::Complete(Completion { id: id.clone(), fence: *fence, result: json!(null) })
        })
        .collect();
    let op = Cycle {
        worker_id: "w".into(),
        queues: vec!["q".into()],
        lease_ms: 60_000,
        settle,
        renew: Vec::new(),
        claim_max: k,
    };
    let cycled = store.exec(op).expect("round");
    assert!(cycled.settled.iter().all(Result::is_ok), "a completion was refused");
    cycled.claimed.iter().map(|claimed| (claimed.item.id.clone(), claimed.fence)).collect()
}

/// How many were done, in how long (and, for the process rows, each process's share).
struct Measured {
    count: u64,
    elapsed: Duration,
    note: String,
}

impl Measured {
    fn new(count: u64, elapsed: Duration) -> Measured {
        Measured { count, elapsed, note: String::new() }
    }

    fn per_second(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }

    fn print(&self, label: &str, baseline: Option<&Measured>) {
        let ratio = baseline.map_or(String::new(), |base| {
            format!("  ({:.2}x raw)", self.per_second() / base.per_second())
        });
        println!("{label:<40} {:>9.0}/s{ratio}{}", self.per_second(), self.note);
    }
}

/// What the callers of a store (or of each child's store) do, timed from their common start.
/// A child reads it from `SPINDLE_BENCH_CHILD`: `cycle CALLERS` or `appends CALLERS PER_CALLER`.
enum Task {
    /// Claim and complete until the queue is empty.
    Cycle { callers: usize },
    /// Append `per_caller` events each, caller `c` to stream `s{c % 4}`.
    Appends { callers: usize, per_caller: u64 },
    /// A worker pool of `handlers` until told to stop on stdin (only in a child).
    Pool { handlers: usize },
    /// `callers` threads: `claim`, then `complete_and_claim` until the queue is empty.
    Single { callers: usize },
    /// `callers` threads: a `Cycle` op of 100 a round until the queue is empty.
    Batch { callers: usize },
}

impl Task {
    fn to_env(&self) -> String {
        match self {
            Task::Cycle { callers } => format!("cycle {callers}"),
            Task::Appends { callers, per_caller } => format!("appends {callers} {per_caller}"),
            Task::Pool { handlers } => format!("pool {handlers}"),
            Task::Single { callers } => format!("single {callers}"),
            Task::Batch { callers } => format!("batch {callers}"),
        }
    }

    fn parse(text: &str) -> Task {
        let words: Vec<&str> = text.split_whitespace().collect();
        let number = |i: usize| -> u64 {
            let word = words.get(i).unwrap_or_else(|| panic!("{CHILD_TASK}={text:?}: too short"));
            word.parse().unwrap_or_else(|_| panic!("{CHILD_TASK}={text:?}: {word:?} is no number"))
        };
        match words.first() {
            Some(&"cycle") => Task::Cycle { callers: number(1) as usize },
            Some(&"appends") => {
                Task::Appends { callers: number(1) as usize, per_caller: number(2) }
            }
            Some(&"pool") => Task::Pool { handlers: number(1) as usize },
            Some(&"single") => Task::Single { callers: number(1) as usize },
            Some(&"batch") => Task::Batch { callers: number(1) as usize },
            _ => panic!("{CHILD_TASK}={text:?}: not cycle, appends, pool, single or batch"),
        }
    }

    fn run(&self, stores: &[Store]) -> Measured {
        match *self {
            Task::Cycle { callers } => cycle_callers(stores, callers),
            Task::Appends { callers, per_caller } => append_callers(stores, callers, per_caller),
            Task::Pool { handlers } => pool_until_stopped(&stores[0], handlers),
            Task::Single { callers } => single_callers(stores, callers),
            Task::Batch { callers } => batch_callers(stores, callers),
        }
    }
}

/// Each store's `callers` claim and complete until the queue is empty; how many they completed.
fn cycle_callers(stores: &[Store], callers: usize) -> Measured {
    let done = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&done);
    let elapsed = run_callers(stores, callers, move |store, _| {
        let queue = store.queue();
        while let Some(claimed) = queue.claim("bench", &["q"], 60_000).expect("claim") {
            queue.complete(&claimed.item.id, claimed.fence, json!(null)).expect("complete");
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    Measured::new(done.load(Ordering::Relaxed), elapsed)
}

/// Each store's `callers` append `per_caller` events each.
fn append_callers(stores: &[Store], callers: usize, per_caller: u64) -> Measured {
    let elapsed = run_callers(stores, callers, move |store, caller| {
        let stream = Stream::custom(format!("s{}", caller % 4));
        for n in 0..per_caller {
            store.events().append(&stream, "n", json!({ "n": n })).expect("append");
        }
    });
    Measured::new(per_caller * (stores.len() * callers) as u64, elapsed)
}

/// A worker pool of `handlers` no-op handlers on queue `q` until a line (`stop`) arrives on
/// stdin: the parent sends it once every job is completed (see [`until_completed`]); how many
/// this pool completed, and how long it ran until told to stop.
fn pool_until_stopped(store: &Store, handlers: usize) -> Measured {
    let started = Instant::now();
    let pool = store
        .queue()
        .worker(&["q"])
        .threads(handlers)
        .lease_ms(60_000)
        .run(|_job| spindle::queue::Outcome::Complete(json!(null)))
        .expect("start the pool");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("child: read stdin");
    assert_eq!(line.trim(), "stop", "child: expected `stop` on stdin");
    let elapsed = started.elapsed();
    pool.stop();
    let report = pool.join().expect("join the pool");
    Measured::new(report.completed, elapsed)
}

/// Waits until queue `q` of `location`'s schema has `jobs` completed items, by its kept count
/// (one connection, read every 2 ms, as graphile.mjs reads graphile-worker's jobs table).
fn until_completed(location: &str, jobs: u64) {
    let mut client = Client::connect(location, NoTls).expect("connect");
    loop {
        let row = client
            .query_one(
                "SELECT COALESCE(sum(total), 0)::bigint FROM queue_counts
                 WHERE queue = 'q' AND status = 'completed'",
                &[],
            )
            .expect("read the completed count");
        if row.get::<_, i64>(0) == jobs as i64 {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Each store's `callers` claim one item, then `complete_and_claim` until the queue is empty.
fn single_callers(stores: &[Store], callers: usize) -> Measured {
    let done = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&done);
    let elapsed = run_callers(stores, callers, move |store, _| {
        let queue = store.queue();
        let next = spindle::queue::Claim::new("bench", &["q"], 60_000);
        let mut held = queue.claim("bench", &["q"], 60_000).expect("claim");
        while let Some(claimed) = held {
            let (id, fence) = (&claimed.item.id, claimed.fence);
            held = queue.complete_and_claim(id, fence, json!(null), &next).expect("complete");
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    Measured::new(done.load(Ordering::Relaxed), elapsed)
}

/// Each store's `callers` run one `Cycle` op a round (complete the 100 items claimed the round
/// before, claim 100 more) until a round claims nothing.
fn batch_callers(stores: &[Store], callers: usize) -> Measured {
    use spindle::queue::{Cycle, Settlement};
    let done = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&done);
    let elapsed = run_callers(stores, callers, move |store, caller| {
        let mut settle: Vec<Settlement> = Vec::new();
        loop {
            let finishing = settle.len() as u64;
            let cycle = Cycle {
                worker_id: format!("w{caller}"),
                queues: vec!["q".to_owned()],
                lease_ms: 60_000,
                settle: std::mem::take(&mut settle),
                renew: Vec::new(),
                claim_max: 100,
            };
            let cycled = store.exec(cycle).expect("cycle");
            assert!(cycled.settled.iter().all(Result::is_ok), "every item completed");
            counter.fetch_add(finishing, Ordering::Relaxed);
            if cycled.claimed.is_empty() {
                return;
            }
            settle = rounds::completions(cycled.claimed);
        }
    });
    Measured::new(done.load(Ordering::Relaxed), elapsed)
}

/// `--peer MODE HANDLERS PROCESSES JOBS`: one row of the peer comparison (see the header).
fn peer_row(bench: &Bench, args: &[String]) {
    let usage = "--peer MODE HANDLERS PROCESSES JOBS";
    let number = |i: usize| -> usize {
        let word = args.get(i).unwrap_or_else(|| panic!("{usage}: too few words"));
        word.parse().unwrap_or_else(|_| panic!("{usage}: {word:?} is no number"))
    };
    let named = args.first().map_or("pool", String::as_str);
    let (mode, writers) = match named.split_once('@') {
        Some((mode, writers)) => (mode, Some(writers)),
        None => (named, None),
    };
    if let Some(writers) = writers {
        let writers = writers.parse().unwrap_or_else(|_| panic!("{usage}: {named:?}: MODE@N"));
        PEER_WRITERS.set(writers).expect("set once");
    }
    let (handlers, processes, jobs) = (number(1), number(2), number(3) as u64);
    let task = match mode {
        "pool" => Task::Pool { handlers },
        "single" => Task::Single { callers: handlers },
        "batch" => Task::Batch { callers: handlers },
        other => panic!("{usage}: MODE is pool, single or batch, not {other}"),
    };
    let location = bench.fresh();
    let store = Store::connect_with(&location, Options::default()).expect("connect");
    let items: Vec<NewItem> =
        (0..jobs).map(|n| NewItem::new("q", json!({ "n": n, "pad": "x".repeat(80) }))).collect();
    let started = Instant::now();
    for chunk in items.chunks(1_000) {
        store.queue().enqueue_batch(chunk.to_vec()).expect("enqueue");
    }
    let enqueued = Measured::new(jobs, started.elapsed());
    store.close().expect("close");
    if std::env::var_os("SPINDLE_PEER_ANALYZE").is_some() {
        // The planner's statistics of the filled queue (see BENCHMARKS.md: on a table never
        // analysed, the claim's plan sorts every pending item).
        let mut client = Client::connect(&location, NoTls).expect("connect");
        client.batch_execute("ANALYZE queue_items").expect("analyze");
    }
    let run = match task {
        Task::Pool { .. } => run_pools(&task, &location, processes, jobs),
        _ => run_processes(&task, &location, processes),
    };
    check_cycle(&location, jobs, run.count);
    println!(
        "system=spindle mode={named} handlers={handlers} processes={processes} jobs={jobs} \
         enqueue_per_s={:.0} jobs_per_s={:.0}",
        enqueued.per_second(),
        Measured::new(jobs, run.elapsed).per_second()
    );
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

/// Enqueues `jobs` jobs on queue `q`, 500 to a call; how long that took.
fn enqueue(store: &Store, jobs: u64) -> Duration {
    let items: Vec<NewItem> = (0..jobs).map(|n| NewItem::new("q", json!({ "job": n }))).collect();
    let started = Instant::now();
    for chunk in items.chunks(500) {
        store.queue().enqueue_batch(chunk.to_vec()).expect("enqueue");
    }
    started.elapsed()
}

/// A child process: opens its own store on the parent's schema, prints `ready`, waits for `go`
/// on stdin, runs `task` and prints `done COUNT MICROSECONDS`.
fn run_child(task: &Task, location: &str) {
    let options = match std::env::var(CHILD_WRITERS) {
        Ok(writers) => Options::default().writers(writers.parse().expect("a number")),
        Err(_) => Options::default(),
    };
    let store = Store::connect_with(location, options).expect("child: connect");
    println!("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("child: read stdin");
    assert_eq!(line.trim(), "go", "child: expected `go` on stdin");
    let measured = task.run(std::slice::from_ref(&store));
    store.close().expect("child: close");
    println!("done {} {}", measured.count, measured.elapsed.as_micros());
}

/// One child process of this bench, seen from the parent.
struct Worker {
    process: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    fn spawn(task: &Task, location: &str) -> Worker {
        let bench = std::env::current_exe().expect("this bench's own path");
        let mut command = Command::new(bench);
        if let Some(writers) = PEER_WRITERS.get() {
            command.env(CHILD_WRITERS, writers.to_string());
        }
        let mut process = command
            .env(CHILD_TASK, task.to_env())
            .env(CHILD_AT, location)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a child process");
        let stdin = process.stdin.take().expect("the child's stdin");
        let stdout = BufReader::new(process.stdout.take().expect("the child's stdout")).lines();
        Worker { process, stdin, stdout }
    }

    /// The child's next line of output.
    fn line(&mut self) -> String {
        let line = self.stdout.next().expect("a child ended early (its error is above)");
        line.expect("read a child's output")
    }

    fn expect_ready(&mut self) {
        let line = self.line();
        assert_eq!(line, "ready", "a child said {line:?} instead of `ready`");
    }

    fn go(&mut self) {
        writeln!(self.stdin, "go").expect("tell a child to go");
    }

    /// Waits for the child's `done COUNT MICROSECONDS`, then for its successful exit.
    fn finish(mut self) -> Measured {
        let line = self.line();
        let numbers: Vec<u64> = line
            .strip_prefix("done ")
            .map(|rest| rest.split(' ').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        let [count, micros] = numbers[..] else {
            panic!("a child said {line:?} instead of `done COUNT MICROSECONDS`");
        };
        let status = self.process.wait().expect("wait for a child");
        assert!(status.success(), "a child failed: {status}");
        Measured::new(count, Duration::from_micros(micros))
    }
}

/// Runs `task` in `processes` children on `location`'s schema, told to go together once all
/// have opened their stores: the sum of their counts, and the longest of their times.
fn run_processes(task: &Task, location: &str, processes: usize) -> Measured {
    let mut workers: Vec<Worker> = (0..processes).map(|_| Worker::spawn(task, location)).collect();
    for worker in &mut workers {
        worker.expect_ready();
    }
    for worker in &mut workers {
        worker.go();
    }
    let results: Vec<Measured> = workers.into_iter().map(Worker::finish).collect();
    sum_of(&results)
}

/// As [`run_processes`] for pools, which do not end by themselves: the parent waits until
/// every one of `jobs` is completed (timed from the `go`), then tells each child to stop.
fn run_pools(task: &Task, location: &str, processes: usize, jobs: u64) -> Measured {
    let mut workers: Vec<Worker> = (0..processes).map(|_| Worker::spawn(task, location)).collect();
    for worker in &mut workers {
        worker.expect_ready();
    }
    let started = Instant::now();
    for worker in &mut workers {
        worker.go();
    }
    until_completed(location, jobs);
    let elapsed = started.elapsed();
    for worker in &mut workers {
        writeln!(worker.stdin, "stop").expect("tell a child to stop");
    }
    let results: Vec<Measured> = workers.into_iter().map(Worker::finish).collect();
    Measured { elapsed, ..sum_of(&results) }
}

/// The processes' counts summed, over the longest of their times, each one's in the note.
fn sum_of(results: &[Measured]) -> Measured {
    let each: Vec<String> = results
        .iter()
        .map(|m| format!("{} in {:.2} s", m.count, m.elapsed.as_secs_f64()))
        .collect();
    Measured {
        count: results.iter().map(|m| m.count).sum(),
        elapsed: results.iter().map(|m| m.elapsed).max().expect("at least one process"),
        note: format!("  [each: {}]", each.join(", ")),
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

    fn stores(&self, location: &str, count: usize) -> Vec<Store> {
        let options = Options::default;
        (0..count).map(|_| Store::connect_with(location, options()).expect("connect")).collect()
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
        Measured::new(jobs.div_ceil(100) * 100, started.elapsed())
    }

    fn store_cycle(&self, jobs: u64, stores: usize, callers: usize) -> Measured {
        let location = self.fresh();
        let stores = self.stores(&location, stores);
        let enqueued = enqueue(&stores[0], jobs);
        let run = Task::Cycle { callers }.run(&stores);
        check_cycle(&location, jobs, run.count);
        Measured::new(jobs, enqueued + run.elapsed)
    }

    /// The job cycle in [`PROCESSES`] children on one queue: the parent enqueues every job
    /// first (timed), then the children claim and complete until it is empty.
    fn process_cycle(&self, jobs: u64, callers: usize) -> Measured {
        let location = self.fresh();
        let store = Store::connect_with(&location, Options::default()).expect("connect");
        let enqueued = enqueue(&store, jobs);
        store.close().expect("close");
        let run = run_processes(&Task::Cycle { callers }, &location, PROCESSES);
        check_cycle(&location, jobs, run.count);
        Measured { elapsed: enqueued + run.elapsed, ..run }
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
        Measured::new(events.div_ceil(100) * 100, started.elapsed())
    }

    fn store_appends(&self, events: u64, stores: usize, callers: usize) -> Measured {
        let location = self.fresh();
        let stores = self.stores(&location, stores);
        let per_caller = events / (stores.len() * callers) as u64;
        let run = Task::Appends { callers, per_caller }.run(&stores);
        check_appends(&location, run.count);
        run
    }

    /// Appends in [`PROCESSES`] children on one schema, to the same four streams.
    fn process_appends(&self, events: u64, callers: usize) -> Measured {
        let location = self.fresh();
        let per_caller = events / (PROCESSES * callers) as u64;
        let run = run_processes(&Task::Appends { callers, per_caller }, &location, PROCESSES);
        let expected = per_caller * (PROCESSES * callers) as u64;
        assert_eq!(run.count, expected, "the children report {} appends", run.count);
        check_appends(&location, run.count);
        run
    }
}

/// Fails loudly unless the callers completed each of the `jobs` enqueued exactly once: their
/// own count, and the schema's items (all completed, each claimed once).
fn check_cycle(location: &str, jobs: u64, completed: u64) {
    let mut client = Client::connect(location, NoTls).expect("connect");
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE status = 'completed' AND attempt = 1)
             FROM queue_items",
            &[],
        )
        .expect("count the queue's items");
    let (items, done_once): (i64, i64) = (row.get(0), row.get(1));
    assert!(
        completed == jobs && items == jobs as i64 && done_once == items,
        "job cycle: {jobs} enqueued, the callers completed {completed}; the schema holds \
         {items} items, {done_once} of them completed at the first attempt"
    );
}

/// Fails loudly unless the schema holds the `appended` events the callers report.
fn check_appends(location: &str, appended: u64) {
    let mut client = Client::connect(location, NoTls).expect("connect");
    let row = client
        .query_one("SELECT count(*) FROM events WHERE stream_kind = 'custom'", &[])
        .expect("count the events");
    let stored: i64 = row.get(0);
    assert_eq!(
        stored, appended as i64,
        "the callers appended {appended}, the schema holds {stored}"
    );
}
