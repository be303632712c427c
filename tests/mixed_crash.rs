//! Crash safety by SIGKILL at scale (reliability plan T2): 200 kills per run (the default;
//! `SPINDLE_CRASH_KILLS` raises it) of a child process (this test binary run again) driving a
//! seeded mixed workload over every domain on one store file: plain appends, keyed appends
//! and their replays, two-stream transactions, queue enqueues, claims, completions and
//! failures under fences, workflow state pushes, process registrations, fenced process leases
//! and replay-keyed process events, and graphs being run. The child prints `op ...` before
//! each call and `ok ...` once the store acknowledged it; the parent kills it with SIGKILL a
//! random moment after it is ready (one kill in eight while it is still opening, that is,
//! recovering from the last kill), then checks the file:
//!
//! - SQLite's integrity check passes and no foreign key dangles;
//! - every acknowledged effect is there, and the one operation in flight (its `op` line
//!   printed, its `ok` not) is all there or not at all: stream heads, the halves of every
//!   two-stream transaction, queue item statuses, the workflow's state version;
//! - every fence is at least the highest acknowledged one (queue items), and the next process
//!   lease's fencing token is higher than every acknowledged one;
//! - acknowledged replay keys (event log and process events) still deduplicate: the same seq,
//!   nothing written;
//! - reopening recovers the running graphs and announces each interrupted (running) or ready
//!   node exactly once (one `node_ready` event each, none for any other node); acknowledged
//!   completions stay; every graph audits clean;
//! - the child never died of anything but the kill.
//!
//! A file serves `KILLS_PER_FILE` kills, then a fresh one starts. The command's pipeline
//! runner, killed the same way, is `cli/tests/cli_crash.rs`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::Dice;
use serde_json::json;
use spindle::process::{AppendRequest, EventType, LeaseClaim, LeaseOwner, Registration};
use spindle::queue::{FailOutcome, ItemStatus, NewItem};
use spindle::{
    GraphEvent, GraphStatus, ManualClock, NodeOptions, NodeSpec, NodeStatus, Options, Page, Store,
    Stream, TxOutcome,
};

const CHILD_ENV: &str = "SPINDLE_MIXED_CRASH_CHILD";
const TEST_NAME: &str = "acknowledged_effects_of_every_domain_survive_sigkill";
const KILLS_PER_FILE: u64 = 25;
/// Acknowledgements a child makes before its kill, on average (when not killed in its open).
const MEAN_ACKS: u64 = 20;
const STREAMS: u64 = 3;
const PROCESSES: u64 = 3;
const QUEUE: &str = "work";
const T0: i64 = 1_700_000_000_000;
/// Each child's clock starts this much later than the last one's: every lease it finds has
/// lapsed, every retry is due.
const ROUND_MS: i64 = 1_000_000_000;

fn kills() -> u64 {
    std::env::var("SPINDLE_CRASH_KILLS").ok().and_then(|n| n.parse().ok()).unwrap_or(200)
}

fn plain(n: u64) -> Stream {
    Stream::custom(format!("plain-{n}"))
}

fn keyed_stream() -> Stream {
    Stream::custom("keyed")
}

fn pair_streams() -> (Stream, Stream) {
    (Stream::custom("pair-a"), Stream::custom("pair-b"))
}

fn process_id(n: u64) -> String {
    format!("proc-{n}")
}

fn clock_at(round: u64, half: bool) -> ManualClock {
    ManualClock::new(T0 + round as i64 * ROUND_MS + if half { ROUND_MS / 2 } else { 0 })
}

fn options(clock: &ManualClock, recover: bool) -> Options {
    Options::default().clock(Arc::new(clock.clone())).recover_on_open(recover)
}

/// Every graph of the store, page by page.
fn all_graphs(store: &Store) -> Vec<spindle::Graph> {
    let mut all: Vec<spindle::Graph> = Vec::new();
    loop {
        let page = match all.last() {
            Some(last) => Page::after(last.id.clone(), 100),
            None => Page::first(100),
        };
        let graphs = store.graphs().list(page).expect("list graphs");
        if graphs.is_empty() {
            return all;
        }
        all.extend(graphs);
    }
}

#[test]
fn acknowledged_effects_of_every_domain_survive_sigkill() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child::run(&spec);
    }
    let began = std::time::Instant::now();
    let mut dice = Dice::new(0x5EED_0002);
    let (mut acks, mut in_flight) = (0_u64, 0_u64);
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut segment: Option<(tempfile::TempDir, parent::Model)> = None;
    for round in 0..kills() {
        if round % KILLS_PER_FILE == 0 {
            segment = Some(parent::new_file(round));
        }
        let (dir, model) = segment.as_mut().expect("a file");
        let path = dir.path().join("mixed.db");
        let lines = parent::run_and_kill(&path, round, &mut dice, model);
        let run = parent::Run::parse(&lines, round);
        acks += run.acked.len() as u64;
        for (op, ok) in &run.acked {
            let dead = op[0] == "fail" && ok[0] == "dead";
            *kinds.entry(if dead { "fail dead" } else { &op[0] }.to_owned()).or_default() += 1;
        }
        in_flight += u64::from(run.in_flight.is_some());
        *kinds.entry("interrupted nodes".to_owned()).or_default() +=
            parent::check(&path, round, &run, model);
    }
    eprintln!(
        "{} kills, {acks} acknowledged ops, {in_flight} in flight at the kill, {:.1?}: {kinds:?}",
        kills(),
        began.elapsed()
    );
    let every = [
        "append",
        "keyed",
        "pair",
        "enqueue",
        "claim",
        "complete",
        "fail",
        "fail dead",
        "push",
        "lease",
        "pevent",
        "release",
        "graph",
        "start",
        "done",
        "failnode",
        "interrupted nodes",
    ];
    for kind in every {
        assert!(kinds.get(kind).is_some_and(|n| *n > 0), "never reached: {kind}");
    }
    assert!(acks >= kills() * 5, "the children acknowledged too little: {acks}");
    assert!(in_flight >= kills() / 4, "few kills hit an operation in flight: {in_flight}");
}

/// The parent: starts, kills and checks.
mod parent {
    use super::*;

    /// What the parent knows the store holds (over every kill on the current file).
    #[derive(Default)]
    pub struct Model {
        pub execution: String,
        pub heads: BTreeMap<u64, u64>,
        /// Keyed appends: key -> seq.
        pub keys: BTreeMap<String, u64>,
        /// Queue items: id -> (highest acknowledged fence, acknowledged final status).
        pub items: BTreeMap<String, (u64, Option<ItemStatus>)>,
        pub version: u64,
        /// Process id -> highest fencing token acknowledged or granted.
        pub fences: BTreeMap<String, u64>,
        /// (process, replay key) -> seq.
        pub process_events: BTreeMap<(String, String), u64>,
        /// Graph nodes acknowledged finished.
        pub finished: BTreeSet<(String, String)>,
    }

    /// A fresh file with the workflow execution and the processes the children use.
    pub fn new_file(round: u64) -> (tempfile::TempDir, Model) {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = clock_at(round, false);
        let store = Store::open_with(dir.path().join("mixed.db"), options(&clock, true))
            .expect("create the store");
        let workflows = store.workflows();
        workflows.put_definition("mixed", "v1", json!({})).expect("definition");
        let execution = workflows.create_execution("mixed", "v1", json!({})).expect("run").id;
        for n in 0..PROCESSES {
            let registration = Registration::new(process_id(n), "crash", json!({ "n": n }))
                .event_type(EventType::new("note"));
            store.processes().register(registration).expect("register");
        }
        store.close().expect("close");
        (dir, Model { execution, ..Model::default() })
    }

    /// Starts a child for `round`, kills it at a random moment, and returns its lines: one
    /// time in eight while it opens (recovering from the last kill), otherwise a few
    /// milliseconds after a random number of acknowledgements (counted, so that a loaded
    /// machine makes the children no shorter).
    pub fn run_and_kill(path: &Path, round: u64, dice: &mut Dice, model: &Model) -> Vec<String> {
        let spec = format!("{round}|{}|{}|{}", dice.next(), model.execution, path.display());
        let mut child = common::spawn_child_test(TEST_NAME, CHILD_ENV, spec);
        let stdout = child.stdout.take().expect("child stdout");
        let (seen_tx, seen_rx) = crossbeam_channel::unbounded();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness may have begun the first line ("test ... ... ready").
                if line == "ready" || line.ends_with(" ready") || line.starts_with("ok") {
                    let _ = seen_tx.send(());
                }
                lines.push(line);
            }
            lines
        });
        if dice.below(8) == 0 {
            std::thread::sleep(Duration::from_millis(dice.below(40)));
        } else {
            for _ in 0..=dice.below(MEAN_ACKS * 2) {
                if seen_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                    break;
                }
            }
            std::thread::sleep(Duration::from_micros(dice.below(4_000)));
        }
        let _ = child.kill();
        let status = child.wait().expect("reap the child");
        let lines = reader.join().expect("reader");
        let tail = lines.iter().rev().take(3).collect::<Vec<_>>();
        assert_eq!(status.signal(), Some(9), "round {round}: the child died by itself: {tail:?}");
        lines
    }

    /// The child's acknowledged operations and the one in flight.
    pub struct Run {
        pub round: u64,
        pub acked: Vec<(Vec<String>, Vec<String>)>,
        pub in_flight: Option<Vec<String>>,
    }

    impl Run {
        pub fn parse(lines: &[String], round: u64) -> Run {
            let mut run = Run { round, acked: Vec::new(), in_flight: None };
            for line in lines {
                let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
                match words.first().map(String::as_str) {
                    Some("op") => {
                        assert!(run.in_flight.is_none(), "round {round}: an op without ok");
                        run.in_flight = Some(words[1..].to_vec());
                    }
                    Some("ok") => {
                        let op = run.in_flight.take().expect("an ok follows its op");
                        run.acked.push((op, words[1..].to_vec()));
                    }
                    _ => {}
                }
            }
            run
        }

        /// The op in flight, if it is `kind`.
        pub fn in_flight(&self, kind: &str) -> Option<&[String]> {
            self.in_flight.as_deref().filter(|op| op[0] == kind)
        }
    }

    /// Checks the file after a kill; returns how many interrupted (running) nodes recovery
    /// announced.
    pub fn check(path: &Path, round: u64, run: &Run, model: &mut Model) -> u64 {
        check_file(path, round);
        let before = graphs_before_recovery(path, round);
        let clock = clock_at(round, true);
        let store = Store::open_with(path, options(&clock, true)).expect("reopen");
        checks::graphs(&store, run, &before, model);
        checks::events(&store, run, model);
        checks::keyed(&store, run, model);
        checks::pairs(&store, round);
        checks::queue(&store, run, model);
        checks::workflow(&store, run, model);
        checks::processes(&store, run, model);
        store.close().expect("close");
        before.values().map(|graph| graph.running.len() as u64).sum()
    }

    fn check_file(path: &Path, round: u64) {
        let raw = rusqlite::Connection::open(path).expect("raw connection");
        let integrity: String =
            raw.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity");
        assert_eq!(integrity, "ok", "round {round}");
        let mut statement = raw.prepare("PRAGMA foreign_key_check").expect("prepare");
        let dangling = statement.query_map([], |r| r.get::<_, String>(0)).expect("query").count();
        assert_eq!(dangling, 0, "round {round}: dangling foreign keys");
    }

    /// Per running graph: its stream head and the nodes recovery must announce (running or
    /// ready), read with recovery off.
    pub struct GraphBefore {
        pub head: u64,
        pub announce: BTreeSet<String>,
        pub running: BTreeSet<String>,
    }

    fn graphs_before_recovery(path: &Path, round: u64) -> BTreeMap<String, GraphBefore> {
        let clock = clock_at(round, true);
        let store = Store::open_with(path, options(&clock, false)).expect("open, no recovery");
        let mut found = BTreeMap::new();
        for graph in all_graphs(&store) {
            if graph.status != GraphStatus::Running {
                continue;
            }
            let nodes = store.graphs().nodes(&graph.id).expect("nodes");
            let with = |status: NodeStatus| -> BTreeSet<String> {
                nodes.iter().filter(|n| n.status == status).map(|n| n.id.clone()).collect()
            };
            let running = with(NodeStatus::Running);
            let announce = running.union(&with(NodeStatus::Ready)).cloned().collect();
            let head = store.events().head(Stream::graph(&graph.id)).expect("head");
            found.insert(graph.id, GraphBefore { head, announce, running });
        }
        store.close().expect("close");
        found
    }
}

/// The parent's checks after a kill, one domain each.
mod checks {
    use super::parent::{GraphBefore, Model, Run};
    use super::*;

    fn number(word: &str) -> u64 {
        word.parse().expect("a number in an ack")
    }

    /// Heads move only by the acknowledged appends and perhaps the one in flight.
    pub fn events(store: &Store, run: &Run, model: &mut Model) {
        for (op, ok) in run.acked.iter().filter(|(op, _)| op[0] == "append") {
            let (n, seq) = (number(&op[1]), number(&ok[0]));
            let head = model.heads.entry(n).or_default();
            assert_eq!(seq, *head + 1, "round {}: plain-{n} acknowledged seq", run.round);
            *head = seq;
        }
        for n in 0..STREAMS {
            let head = store.events().head(plain(n)).expect("head");
            let known = model.heads.get(&n).copied().unwrap_or(0);
            let maybe = run.in_flight("append").is_some_and(|op| number(&op[1]) == n);
            let allowed = if maybe { known..=known + 1 } else { known..=known };
            assert!(allowed.contains(&head), "round {}: plain-{n} head {head}", run.round);
            if head > 0 {
                let last = store.events().read(plain(n), head - 1, 1).expect("read");
                assert_eq!(last[0].payload["stream"], json!(n), "round {}", run.round);
            }
            model.heads.insert(n, head);
        }
    }

    /// Acknowledged keys return their seq and write nothing; the key in flight, appended
    /// again, is there once.
    pub fn keyed(store: &Store, run: &Run, model: &mut Model) {
        let stream = keyed_stream();
        for (op, ok) in run.acked.iter().filter(|(op, _)| op[0] == "keyed") {
            let first = *model.keys.entry(op[1].clone()).or_insert(number(&ok[0]));
            assert_eq!(first, number(&ok[0]), "round {}: key {} moved", run.round, op[1]);
        }
        let head = store.events().head(&stream).expect("head");
        let recent = run.acked.iter().filter(|(op, _)| op[0] == "keyed").map(|(op, _)| &op[1]);
        let sample: BTreeSet<&String> = recent.chain(model.keys.keys().take(5)).collect();
        for key in sample {
            let again = append_key(store, key);
            assert!(again.existed, "round {}: key {key} no longer deduplicates", run.round);
            assert_eq!(again.seq, model.keys[key], "round {}: key {key}", run.round);
        }
        assert_eq!(store.events().head(&stream).expect("head"), head, "replays wrote nothing");
        if let Some(op) = run.in_flight("keyed") {
            let known = model.keys.get(&op[1]).copied();
            let again = append_key(store, &op[1]);
            // A replay of a known key keeps its seq; a new key that committed was the last
            // write to the stream, and one that did not is written now.
            let expected = match known {
                Some(seq) => seq,
                None if again.existed => head,
                None => head + 1,
            };
            assert_eq!(again.seq, expected, "round {}: in-flight key {}", run.round, op[1]);
            model.keys.insert(op[1].clone(), again.seq);
        }
    }

    pub fn append_key(store: &Store, key: &str) -> spindle::Appended {
        let payload = json!({ "key": key });
        store.events().append_idempotent(keyed_stream(), "keyed", payload, key).expect("append")
    }

    /// Both halves of every two-stream transaction, or neither.
    pub fn pairs(store: &Store, round: u64) {
        let (a, b) = pair_streams();
        let halves = |s: &Stream| -> Vec<u64> {
            let events = common::read_stream(store, s);
            events.iter().map(|e| e.payload["pair"].as_u64().expect("pair")).collect()
        };
        assert_eq!(halves(&a), halves(&b), "round {round}: a transaction was split");
    }

    /// Fences never fall below an acknowledged one and rise only by the claim in flight;
    /// acknowledged completions and dead letters stay.
    pub fn queue(store: &Store, run: &Run, model: &mut Model) {
        let mut touched: BTreeSet<String> = BTreeSet::new();
        for (op, ok) in &run.acked {
            let (id, fence, status) = match (op[0].as_str(), ok.as_slice()) {
                ("enqueue", [id]) => (id.clone(), 0, None),
                ("claim", [id, fence]) => (id.clone(), number(fence), None),
                ("complete", _) => (op[1].clone(), number(&op[2]), Some(ItemStatus::Completed)),
                ("fail", [outcome]) => {
                    let dead = (outcome == "dead").then_some(ItemStatus::Dead);
                    (op[1].clone(), number(&op[2]), dead)
                }
                _ => continue,
            };
            let entry = model.items.entry(id.clone()).or_default();
            if op[0] == "claim" {
                // A lapsed lease is claimed again under a higher fence, never the same one.
                assert!(fence > entry.0, "round {}: {id} claimed at fence {fence}", run.round);
            }
            entry.0 = entry.0.max(fence);
            entry.1 = status.or(entry.1);
            touched.insert(id);
        }
        if let Some(op) = run.in_flight.as_ref().filter(|op| op.len() > 1)
            && (op[0] == "complete" || op[0] == "fail")
        {
            touched.insert(op[1].clone());
        }
        touched.extend(model.items.keys().take(5).cloned());
        for id in touched {
            check_item(store, run, model, &id);
        }
    }

    fn check_item(store: &Store, run: &Run, model: &mut Model, id: &str) {
        let item = store.queue().get(id).expect("an acknowledged item");
        let (fence, status) = model.items.get(id).copied().unwrap_or_default();
        let round = run.round;
        let claiming = u64::from(run.in_flight("claim").is_some());
        assert!(item.fence >= fence, "round {round}: {id} fence {} < {fence}", item.fence);
        assert!(item.fence <= fence + claiming, "round {round}: {id} fence {}", item.fence);
        let settling = run.in_flight.as_ref().is_some_and(|op| op.len() > 1 && op[1] == id);
        match status {
            Some(status) => assert_eq!(item.status, status, "round {round}: {id}"),
            None if !settling => {
                let open = [ItemStatus::Pending, ItemStatus::Claimed, ItemStatus::Dead];
                assert!(open.contains(&item.status), "round {round}: {id} is {:?}", item.status);
            }
            None => {}
        }
        let fixed = matches!(item.status, ItemStatus::Completed | ItemStatus::Dead);
        let known = fixed.then_some(item.status).or(status);
        model.items.insert(id.to_owned(), (item.fence, known));
    }

    /// One state version per acknowledged push, and perhaps the one in flight.
    pub fn workflow(store: &Store, run: &Run, model: &mut Model) {
        for (_, ok) in run.acked.iter().filter(|(op, _)| op[0] == "push") {
            assert_eq!(number(&ok[0]), model.version + 1, "round {}: pushes", run.round);
            model.version += 1;
        }
        let execution = store.workflows().execution(&model.execution).expect("get");
        let execution = execution.expect("the execution");
        let steps = execution.state["steps"].as_array().map_or(0, Vec::len) as u64;
        assert_eq!(steps, execution.state_version, "round {}: one version a push", run.round);
        let maybe = u64::from(run.in_flight("push").is_some());
        let version = execution.state_version;
        assert!(
            (model.version..=model.version + maybe).contains(&version),
            "round {}: version {version}, acknowledged {}",
            run.round,
            model.version
        );
        model.version = version;
    }

    /// Replay-keyed process events still deduplicate; the next lease's fencing token is
    /// higher than every acknowledged one.
    pub fn processes(store: &Store, run: &Run, model: &mut Model) {
        let processes = store.processes();
        for (op, ok) in &run.acked {
            match op[0].as_str() {
                "lease" if ok[0] != "busy" => {
                    let fence = model.fences.entry(op[1].clone()).or_default();
                    *fence = (*fence).max(number(&ok[0]));
                }
                "pevent" => {
                    let key = (op[1].clone(), op[2].clone());
                    let first = *model.process_events.entry(key).or_insert(number(&ok[0]));
                    assert_eq!(first, number(&ok[0]), "round {}: {op:?} moved", run.round);
                }
                _ => {}
            }
        }
        let recent = run.acked.iter().filter(|(op, _)| op[0] == "pevent").map(|(op, _)| op);
        for op in recent.chain(run.in_flight("pevent").map(|op| op.to_vec()).as_ref()) {
            let request = AppendRequest::new("note", json!({ "key": op[2] })).replay_key(&op[2]);
            let again = processes.append_event(&op[1], request).expect("append again");
            let key = (op[1].clone(), op[2].clone());
            let seq = *model.process_events.entry(key).or_insert(again.event.seq);
            assert_eq!(again.event.seq, seq, "round {}: {op:?}", run.round);
        }
        for n in 0..PROCESSES {
            let id = process_id(n);
            let owner = LeaseOwner::new("parent", format!("round-{}", run.round));
            let claim = processes.claim_lease(&id, &owner, 1_000).expect("claim");
            let LeaseClaim::Acquired(lease) = claim else {
                panic!("round {}: {id} still held after its lease lapsed: {claim:?}", run.round);
            };
            let acknowledged = model.fences.get(&id).copied().unwrap_or(0);
            assert!(lease.fencing_token > acknowledged, "round {}: {id} fence", run.round);
            model.fences.insert(id, lease.fencing_token);
            processes.complete_lease(&lease).expect("release");
        }
    }

    /// Recovery announced exactly the running and ready nodes, once each; acknowledged starts
    /// were running, acknowledged completions stay; every graph audits clean.
    pub fn graphs(
        store: &Store,
        run: &Run,
        before: &BTreeMap<String, GraphBefore>,
        model: &mut Model,
    ) {
        let round = run.round;
        for (graph, seen) in before {
            let events = store.events().read(Stream::graph(graph), seen.head, 1000).expect("read");
            let mut announced: Vec<String> = Vec::new();
            for event in &events {
                if let Ok(GraphEvent::NodeReady { node_id, .. }) = GraphEvent::from_event(event) {
                    announced.push(node_id);
                }
            }
            announced.sort();
            let expected: Vec<String> = seen.announce.iter().cloned().collect();
            assert_eq!(announced, expected, "round {round}: {graph} announced");
        }
        let finishing = run.in_flight.as_ref().filter(|op| op[0] == "done" || op[0] == "failnode");
        let mut started: BTreeSet<(String, String)> = BTreeSet::new();
        for (op, _) in &run.acked {
            let node = || (op[1].clone(), op[2].clone());
            match op[0].as_str() {
                "start" => {
                    started.insert(node());
                }
                "done" | "failnode" => {
                    started.remove(&node());
                    model.finished.insert(node());
                }
                _ => {}
            }
        }
        for (graph, node) in &started {
            let in_flight = finishing.is_some_and(|op| op[1] == *graph && op[2] == *node);
            let running = before.get(graph).is_some_and(|seen| seen.running.contains(node));
            let now = store.graphs().node(graph, node).map(|n| n.status);
            assert!(
                running || in_flight,
                "round {round}: {graph}/{node} started, not running: now {now:?}, {:?}",
                before.get(graph).map(|seen| &seen.running)
            );
        }
        for (graph, node) in &model.finished {
            let status = store.graphs().node(graph, node).expect("node").status;
            let done = matches!(status, NodeStatus::Complete | NodeStatus::Failed);
            assert!(done, "round {round}: {graph}/{node} finished, now {status:?}");
        }
        for graph in all_graphs(store) {
            let problems = store.graphs().audit(&graph.id).expect("audit");
            assert!(problems.is_empty(), "round {round}: {problems:?}");
        }
    }
}

/// The child: a seeded mixed workload, one operation at a time, until it is killed.
mod child {
    use super::*;
    use spindle::process::ProcessLease;

    pub fn run(spec: &str) {
        let parts: Vec<&str> = spec.splitn(4, '|').collect();
        let [round, seed, execution, path] = parts[..] else { panic!("bad spec {spec}") };
        let round: u64 = round.parse().expect("round");
        let clock = clock_at(round, false);
        let store = Store::open_with(path, options(&clock, true)).expect("child open");
        say("ready");
        let mut worker = Worker {
            store: &store,
            execution,
            round,
            dice: Dice::new(seed.parse().expect("seed")),
            k: 0,
            held: Vec::new(),
            keys: Vec::new(),
            lease: None,
            graph: None,
            running: None,
        };
        loop {
            clock.advance_ms(1);
            worker.k += 1;
            worker.step();
        }
    }

    fn say(line: &str) {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").expect("print");
        out.flush().expect("flush");
    }

    /// Prints `op`, runs `call`, prints `ok` and what it returned.
    fn acked(op: &str, call: impl FnOnce() -> String) {
        say(&format!("op {op}"));
        let result = call();
        say(&format!("ok {result}"));
    }

    struct Worker<'a> {
        store: &'a Store,
        execution: &'a str,
        round: u64,
        dice: Dice,
        k: u64,
        held: Vec<(String, u64)>,
        keys: Vec<String>,
        lease: Option<ProcessLease>,
        graph: Option<String>,
        running: Option<(String, String)>,
    }

    impl Worker<'_> {
        fn step(&mut self) {
            let (store, k) = (self.store, self.k);
            match self.dice.below(12) {
                0 | 1 => {
                    let n = self.dice.below(STREAMS);
                    acked(&format!("append {n}"), || {
                        let payload = json!({ "stream": n, "k": k });
                        store
                            .events()
                            .append(plain(n), "plain", payload)
                            .expect("append")
                            .seq
                            .to_string()
                    });
                }
                2 => self.keyed(),
                3 => acked(&format!("pair {k}"), || {
                    let (a, b) = store
                        .transaction(move |tx| {
                            let (a, b) = pair_streams();
                            let first = tx.append_event(&a, "pair", json!({ "pair": k }))?.seq;
                            let second = tx.append_event(&b, "pair", json!({ "pair": k }))?.seq;
                            Ok(TxOutcome::Commit((first, second)))
                        })
                        .expect("pair");
                    format!("{a} {b}")
                }),
                4 => acked("enqueue", || {
                    let item = NewItem::new(QUEUE, json!({ "k": k })).max_attempts(2);
                    store.queue().enqueue(item).expect("enqueue").id
                }),
                5 | 6 => self.queue_step(),
                7 => acked("push", || {
                    let execution =
                        store.workflows().append_to_array(self.execution, "steps", json!(k));
                    execution.expect("push").state_version.to_string()
                }),
                8 | 9 => self.process_step(),
                _ => self.graph_step(),
            }
        }

        /// A keyed append under a new key, or (one time in three) an earlier key again.
        fn keyed(&mut self) {
            let old = self.dice.below(3) == 0 && !self.keys.is_empty();
            let key = if old {
                self.keys[self.dice.below(self.keys.len() as u64) as usize].clone()
            } else {
                format!("r{}-k{}", self.round, self.k)
            };
            acked(&format!("keyed {key}"), || {
                let appended = checks::append_key(self.store, &key);
                assert_eq!(appended.existed, old, "a replay exists, a new key does not");
                appended.seq.to_string()
            });
            self.keys.push(key);
        }

        /// Claims an item, or settles one it holds (completes it, or now and then fails it).
        fn queue_step(&mut self) {
            let queue = self.store.queue();
            let settle = self.dice.below(2) == 0;
            let Some((id, fence)) = (if settle { self.held.pop() } else { None }) else {
                let mut claimed = None;
                acked("claim", || match queue.claim("child", &[QUEUE], 60_000).expect("claim") {
                    Some(c) => {
                        claimed = Some((c.item.id.clone(), c.fence));
                        format!("{} {}", c.item.id, c.fence)
                    }
                    None => "none".to_owned(),
                });
                self.held.extend(claimed);
                return;
            };
            if self.dice.below(3) == 0 {
                acked(&format!("fail {id} {fence}"), || {
                    match queue.fail(&id, fence, "crash test", true).expect("fail") {
                        FailOutcome::Retrying { .. } => "retry".to_owned(),
                        FailOutcome::DeadLettered => "dead".to_owned(),
                        other => panic!("fail {id}: {other:?}"),
                    }
                });
            } else {
                acked(&format!("complete {id} {fence}"), || {
                    queue.complete(&id, fence, json!("done")).expect("complete");
                    String::new()
                });
            }
        }

        /// Takes a process lease, or (holding one) appends a keyed event or releases it.
        fn process_step(&mut self) {
            let processes = self.store.processes();
            let Some(lease) = self.lease.clone() else {
                let id = process_id(self.dice.below(PROCESSES));
                let owner = LeaseOwner::new("child", format!("round-{}", self.round));
                let mut got = None;
                acked(&format!("lease {id}"), || match processes.claim_lease(&id, &owner, 1_000) {
                    Ok(LeaseClaim::Acquired(lease)) => {
                        let fence = lease.fencing_token.to_string();
                        got = Some(lease);
                        fence
                    }
                    Ok(LeaseClaim::Busy { .. }) => "busy".to_owned(),
                    Ok(other) => panic!("claim {id}: {other:?}"),
                    Err(e) => panic!("claim {id}: {e}"),
                });
                self.lease = got;
                return;
            };
            let id = lease.process_id.clone();
            if self.dice.below(3) == 0 {
                acked(&format!("release {id} {}", lease.fencing_token), || {
                    processes.complete_lease(&lease).expect("release");
                    String::new()
                });
                self.lease = None;
            } else {
                let key = format!("r{}-e{}", self.round, self.k);
                acked(&format!("pevent {id} {key}"), || {
                    let request =
                        AppendRequest::new("note", json!({ "key": key })).replay_key(&key);
                    let appended = processes.append_event(&id, request).expect("process event");
                    appended.event.seq.to_string()
                });
            }
        }

        /// Finishes the node it runs, or starts a ready one (building a graph when none runs).
        fn graph_step(&mut self) {
            let graphs = self.store.graphs();
            if let Some((graph, node)) = self.running.take() {
                if self.dice.below(6) == 0 {
                    acked(&format!("failnode {graph} {node}"), || {
                        graphs.fail_node(&graph, &node, "crash test").expect("fail node");
                        String::new()
                    });
                } else {
                    acked(&format!("done {graph} {node}"), || {
                        graphs.complete_node(&graph, &node, None).expect("complete node");
                        String::new()
                    });
                }
                return;
            }
            let graph = match self.running_graph() {
                Some(graph) => graph,
                None => {
                    let mut built = String::new();
                    acked("graph", || {
                        built = build(self.store);
                        built.clone()
                    });
                    built
                }
            };
            let nodes = graphs.nodes(&graph).expect("nodes");
            let Some(node) = nodes.into_iter().find(|n| n.status == NodeStatus::Ready) else {
                return;
            };
            acked(&format!("start {graph} {}", node.id), || {
                graphs.start_node(&graph, &node.id).expect("start node");
                String::new()
            });
            self.running = Some((graph.clone(), node.id));
            self.graph = Some(graph);
        }

        fn running_graph(&mut self) -> Option<String> {
            let graphs = self.store.graphs();
            if let Some(graph) = &self.graph
                && graphs.get(graph).expect("get").status == GraphStatus::Running
            {
                return Some(graph.clone());
            }
            let list = all_graphs(self.store);
            self.graph = list.into_iter().find(|g| g.status == GraphStatus::Running).map(|g| g.id);
            self.graph.clone()
        }
    }

    /// Three layers of three nodes, each waiting for two of the layer before.
    fn build(store: &Store) -> String {
        let graphs = store.graphs();
        let graph = graphs.create(json!({ "mixed": true })).expect("create");
        for layer in 0..3 {
            for column in 0..3 {
                let options = NodeOptions::new().id(format!("n{layer}-{column}"));
                graphs.add_node(&graph, NodeSpec::task(json!({})), options).expect("node");
            }
        }
        for layer in 1..3 {
            for column in 0..3 {
                let to = format!("n{layer}-{column}");
                for from in [column, (column + 1) % 3] {
                    let from = format!("n{}-{from}", layer - 1);
                    graphs.add_edge(&graph, &from, &to, None).expect("edge");
                }
            }
        }
        graphs.start(&graph).expect("start");
        graph
    }
}
