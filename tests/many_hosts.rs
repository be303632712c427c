//! Many hosts, simulated (issue 15): three real processes with eight workers each share one
//! store (one schema on PostgreSQL, one file on SQLite), work a queue and drive one graph to its
//! end, and one of them is killed with SIGKILL mid-run.
//!
//! The parent (this test) enqueues the items, builds and starts the graph, then runs this same
//! test binary three times as children (`SPINDLE_MANY_HOSTS_CHILD`). Each child opens its own
//! store on the shared location and runs eight workers and one graph dispatcher (with the
//! default `recover_on_open`, which recovers only in a store alone on the schema or the file).
//! Leases are real time (1.5 s): time across processes cannot be a `ManualClock`.
//!
//! - Queue: workers claim items, work a few milliseconds and complete them with their fence; now
//!   and then one abandons an item (its lease lapses), and now and then one writes on purpose
//!   with a fence that is stale (an item it completed already, or one it abandoned that another
//!   worker has claimed since).
//! - Graph: a root, five layers of six nodes (each joining two of the layer before) and a sink.
//!   Its nodes are dispatched through the queue, as the `spindle run` command does it: every
//!   child's dispatcher follows the graph's stream and enqueues each node that is still ready
//!   (one live item per firing, by dedupe key), at a higher priority than the plain items. A
//!   worker that claims a node's item starts the node (or, if it is running already, takes it
//!   over: its last holder's lease lapsed), works 400 ms, then completes the item and the node
//!   and appends the node's effect to a stream of its own, in one transaction under the item's
//!   fence; then it replays that transaction with the same fence, which must be refused.
//!
//! Every child prints one line per call the store acknowledged (`claim`, `done`, `start`,
//! `node-done`, `stale-refused`, ...), and the parent reads them. Mid-run (300 items done, and
//! as many of the graph's nodes as the root and one layer), it SIGKILLs the first child that
//! has completed 50 items, started a node less than 200 ms ago (so it is in the middle of that
//! node's work) and just claimed an item (which it now works on). The other two go on until the
//! queue is empty and the graph has ended, and reclaim the dead child's leases as they lapse.
//!
//! The parent then checks the acknowledgements against the store:
//! - no loss: every item completed, nothing pending, claimed or dead;
//! - no double completion: at most one accepted completion per item, the one the store holds
//!   (its fence, its worker); an item without one was completed by the killed child (killed
//!   before it printed; at most one such claim or completion per worker);
//! - fences: each item's fences issued once each (one attempt per claim, 1, 2, .., its last);
//! - every write with a stale fence refused (and some were tried);
//! - takeover: at least one item and one node the killed child held were completed by a
//!   survivor with a higher fence (the item's last error "lease expired"; the node found
//!   running by the survivor that resumed it);
//! - the graph complete and sound (`audit`), every node's effect applied exactly once and agreeing
//!   with the node's output and its item's result, nodes run in all three processes on
//!   PostgreSQL (on SQLite in two at least: the victim and the survivor that took over; see
//!   `check_graph`).
//!
//! `SPINDLE_HOSTS_ITEMS` sets the number of items (1,500 by default; keep it at 1,000 or more:
//! the queue must outlast the graph's first layers for the kill to come mid-run).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spindle::graph::{CompleteNode, GetNode};
use spindle::queue::{Complete, Enqueue};
use spindle::{
    Backoff, Claimed, Error, GraphEvent, GraphStatus, ItemFilter, ItemStatus, NewItem, NodeOptions,
    NodeOutput, NodeSpec, NodeStatus, Options, Page, Store, Stream, TxOutcome,
};

const CHILD_ENV: &str = "SPINDLE_MANY_HOSTS_CHILD";
const TEST_NAME: &str = "three_processes_of_eight_workers_share_one_store_and_survive_a_sigkill";
const PROCESSES: usize = 3;
const WORKERS: u64 = 8;
/// Completions the victim must have acknowledged before it is killed.
const KILL_AFTER_DONES: u64 = 50;
/// Nodes done in all before the victim is killed: as many as the root and one layer (not
/// necessarily those: a node of the second layer may finish before one of the first).
const KILL_AFTER_NODES: u64 = 1 + WIDTH as u64;
const LEASE_MS: i64 = 1_500;
/// How long an idle worker waits for an item before it looks whether everything is done.
const POLL: Duration = Duration::from_millis(100);
/// How long a worker works on a node (the window in which the victim is killed).
const NODE_WORK: Duration = Duration::from_millis(400);
/// The graph: a root, `LAYERS` layers of `WIDTH` nodes, a sink.
const LAYERS: usize = 5;
const WIDTH: usize = 6;
/// The whole run, generously; past it the test fails and says where it stood.
const RUN_DEADLINE: Duration = Duration::from_secs(240);
const STRESS: &str = "stress";
const NODES: &str = "graph";

fn items() -> usize {
    std::env::var("SPINDLE_HOSTS_ITEMS").map_or(1_500, |n| n.parse().expect("a number"))
}

/// Completions acknowledged in all before the victim is killed: 300, or a fifth of the items if
/// fewer.
fn kill_after_total_dones() -> usize {
    (items() / 5).min(300)
}

fn options() -> Options {
    Options::default()
}

fn effects() -> Stream {
    Stream::custom("effects")
}

#[test]
fn three_processes_of_eight_workers_share_one_store_and_survive_a_sigkill() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let began = Instant::now();
    let shared = common::SharedStore::new();
    let store = shared.open_with(options());
    let ids = enqueue_items(&store);
    let graph = build_graph(&store);
    let heard = run_children(shared.location(), &graph);
    let queue = check_queue(&store, &ids, &heard);
    let nodes = check_graph(&store, &graph, &heard);
    let engine = if common::on_postgres() { "PostgreSQL" } else { "SQLite" };
    println!(
        "many_hosts on {engine}: {} items, {} claims, {} completions acknowledged (per process \
         {:?}), {} stale writes refused, {} leases reclaimed ({} of the killed process's items \
         taken over); graph of {} nodes complete, started per process {:?}, {} node leases \
         reclaimed ({} of the killed process's nodes taken over); {} busy retries; process {} \
         killed after {:.1} s, run {:.1} s",
        ids.len(),
        queue.claims,
        queue.dones,
        heard.dones_per_child(),
        heard.stale_refused(),
        queue.reclaimed,
        queue.taken_over,
        nodes.nodes,
        nodes.started_per_child,
        nodes.reclaimed,
        nodes.taken_over,
        heard.count(|ack| matches!(ack, Ack::Busy)),
        heard.victim(),
        heard.killed.map_or(0.0, |(_, after)| after.as_secs_f64()),
        began.elapsed().as_secs_f64(),
    );
    store.close().expect("close");
}

// ---------------------------------------------------------------------------------------------
// The parent: set-up, children, and what they printed.

fn enqueue_items(store: &Store) -> Vec<String> {
    let mut ids = Vec::new();
    for chunk in (0..items()).collect::<Vec<_>>().chunks(500) {
        let batch = chunk.iter().map(|n| new_item(STRESS, json!({ "n": n }))).collect();
        let enqueued = store.queue().enqueue_batch(batch).expect("enqueue");
        ids.extend(enqueued.into_iter().map(|e| e.id));
    }
    ids
}

/// An item of `queue`: attempts enough that none dies of the lapses, short backoffs.
fn new_item(queue: &str, payload: Value) -> NewItem {
    NewItem::new(queue, payload).max_attempts(100).backoff(Backoff::new(200, 1_000))
}

fn node_name(layer: usize, j: usize) -> String {
    format!("l{layer}n{j}")
}

/// Builds and starts the graph: `root`, then each node of a layer joins (`All`) two nodes of the
/// layer before, then `sink` joins the last layer.
fn build_graph(store: &Store) -> String {
    let graphs = store.graphs();
    let graph = graphs.create(json!({ "test": "many_hosts" })).expect("create graph");
    let add = |id: &str| {
        graphs.add_node(&graph, NodeSpec::task(json!({})), NodeOptions::new().id(id)).expect("node")
    };
    let edge = |from: &str, to: &str| {
        graphs.add_edge(&graph, from, to, None).expect("edge");
    };
    add("root");
    for layer in 1..=LAYERS {
        for j in 0..WIDTH {
            let id = node_name(layer, j);
            add(&id);
            if layer == 1 {
                edge("root", &id);
            } else {
                edge(&node_name(layer - 1, j), &id);
                edge(&node_name(layer - 1, (j + 1) % WIDTH), &id);
            }
        }
    }
    add("sink");
    for j in 0..WIDTH {
        edge(&node_name(LAYERS, j), "sink");
    }
    assert_eq!(graphs.start(&graph).expect("start"), GraphStatus::Running);
    graph
}

/// One acknowledgement a child printed.
#[derive(Debug, Clone, PartialEq)]
enum Ack {
    Claim { queue: String, item: String, fence: u64 },
    Done { item: String, fence: u64 },
    Abandon { item: String, fence: u64 },
    Lost { item: String, fence: u64 },
    StaleRefused { item: String, fence: u64 },
    StaleAccepted { item: String, fence: u64 },
    Start { node: String, item: String, fence: u64, resumed: bool },
    NodeDone { node: String, item: String, fence: u64 },
    Busy,
    Panic(String),
    Exit,
}

impl Ack {
    /// The line as printed, or `None` for what is not an acknowledgement (the test harness's
    /// own lines).
    fn parse(line: &str) -> Option<Self> {
        if let Some(message) = line.strip_prefix("panic ") {
            return Some(Ack::Panic(message.to_owned()));
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let fence = |word: &str| word.parse::<u64>().ok();
        Some(match words[..] {
            ["claim", queue, id, f] => {
                Ack::Claim { queue: queue.into(), item: id.into(), fence: fence(f)? }
            }
            ["done", id, f] => Ack::Done { item: id.into(), fence: fence(f)? },
            ["abandon", id, f] => Ack::Abandon { item: id.into(), fence: fence(f)? },
            ["lost", id, f] => Ack::Lost { item: id.into(), fence: fence(f)? },
            ["stale-refused", id, f] => Ack::StaleRefused { item: id.into(), fence: fence(f)? },
            ["stale-accepted", id, f] => Ack::StaleAccepted { item: id.into(), fence: fence(f)? },
            ["start", n, id, f, how] => Ack::Start {
                node: n.into(),
                item: id.into(),
                fence: fence(f)?,
                resumed: how == "resumed",
            },
            ["node-done", n, id, f] => {
                Ack::NodeDone { node: n.into(), item: id.into(), fence: fence(f)? }
            }
            ["busy"] => Ack::Busy,
            ["exit"] => Ack::Exit,
            _ => return None,
        })
    }
}

/// What the parent heard from the children, and how they ended.
#[derive(Default)]
struct Heard {
    /// Every acknowledgement, with the child that printed it, in the order each child printed.
    acks: Vec<(usize, Ack)>,
    /// The child killed (the victim), and when, into the run.
    killed: Option<(usize, Duration)>,
    statuses: Vec<ExitStatus>,
}

impl Heard {
    fn count(&self, matching: impl Fn(&Ack) -> bool) -> usize {
        self.acks.iter().filter(|(_, ack)| matching(ack)).count()
    }

    fn dones_per_child(&self) -> Vec<usize> {
        let mut per = vec![0; PROCESSES];
        for (child, ack) in &self.acks {
            if matches!(ack, Ack::Done { .. }) {
                per[*child] += 1;
            }
        }
        per
    }

    /// The child that was killed.
    fn victim(&self) -> usize {
        self.killed.expect("a child was killed").0
    }

    /// What the children's panics said.
    fn panics(&self) -> Vec<&(usize, Ack)> {
        self.acks.iter().filter(|(_, ack)| matches!(ack, Ack::Panic(_))).collect()
    }

    fn stale_refused(&self) -> usize {
        self.count(|ack| matches!(ack, Ack::StaleRefused { .. }))
    }
}

/// What a child has done and holds, as far as its acknowledgements tell: whether to kill it.
#[derive(Debug, Default)]
struct Tally {
    dones: u64,
    nodes_done: u64,
    /// Node items whose node it started and has not finished: when the parent read the start.
    running: BTreeMap<String, Instant>,
}

impl Tally {
    fn take(&mut self, ack: &Ack) {
        match ack {
            Ack::Done { .. } => self.dones += 1,
            Ack::Lost { item, .. } => {
                self.running.remove(item);
            }
            Ack::Start { item, .. } => {
                self.running.insert(item.clone(), Instant::now());
            }
            Ack::NodeDone { item, .. } => {
                self.nodes_done += 1;
                self.running.remove(item);
            }
            _ => {}
        }
    }

    /// Kill now: it has completed enough, started a node so recently that the node has half
    /// its work ahead of it, and has just claimed an item it now works on for a while.
    fn ripe(&self, last: &Ack) -> bool {
        let just_claimed = matches!(last, Ack::Claim { queue, .. } if queue == STRESS);
        let mid_node = self.running.values().any(|at| at.elapsed() < NODE_WORK / 2);
        just_claimed && self.dones >= KILL_AFTER_DONES && mid_node
    }
}

/// The children; any still running when this is dropped (a failed test) are killed.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Runs the three children on the store at `location`, kills the victim mid-run, and returns
/// what they printed and how they ended.
fn run_children(location: &str, graph: &str) -> Heard {
    let deadline = Instant::now() + RUN_DEADLINE;
    let mut children = Children(Vec::new());
    let (lines, heard_lines) = mpsc::channel();
    for index in 0..PROCESSES {
        let spec = format!("{index}\n{graph}\n{location}");
        let mut child = common::spawn_child_test(TEST_NAME, CHILD_ENV, spec);
        let stdout = child.stdout.take().expect("child stdout");
        let lines = lines.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines.send((index, Some(line))).is_err() {
                    return;
                }
            }
            let _ = lines.send((index, None));
        });
        children.0.push(child);
    }
    drop(lines);
    let mut heard = listen(&mut children, &heard_lines, deadline);
    heard.statuses = reap(&mut children, deadline);
    check_processes(&heard);
    heard
}

/// Reads the children's lines until every child has closed its output; kills the victim when
/// it is ripe.
fn listen(
    children: &mut Children,
    lines: &Receiver<(usize, Option<String>)>,
    deadline: Instant,
) -> Heard {
    let began = Instant::now();
    let mut heard = Heard::default();
    let mut tallies: Vec<Tally> = (0..PROCESSES).map(|_| Tally::default()).collect();
    let mut open = PROCESSES;
    while open > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok((child, Some(line))) => {
                let Some(ack) = Ack::parse(&line) else { continue };
                if heard.killed.is_none() {
                    tallies[child].take(&ack);
                    let dones: u64 = tallies.iter().map(|tally| tally.dones).sum();
                    let nodes: u64 = tallies.iter().map(|tally| tally.nodes_done).sum();
                    let mid_run =
                        dones as usize >= kill_after_total_dones() && nodes >= KILL_AFTER_NODES;
                    if mid_run && tallies[child].ripe(&ack) {
                        children.0[child].kill().expect("SIGKILL the victim");
                        heard.killed = Some((child, began.elapsed()));
                    }
                }
                heard.acks.push((child, ack));
            }
            Ok((_, None)) => open -= 1,
            Err(RecvTimeoutError::Timeout) => panic!(
                "the run did not end within {RUN_DEADLINE:?}: {} acknowledgements, done per \
                 process {:?}, killed {:?}, tallies {tallies:?}",
                heard.acks.len(),
                heard.dones_per_child(),
                heard.killed
            ),
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    assert!(
        heard.killed.is_some(),
        "no child was ever ripe to kill ({} items and {KILL_AFTER_NODES} nodes done in all, \
         then a child with {KILL_AFTER_DONES} done, a node just started and an item just \
         claimed): {tallies:?}; panics: {:?}",
        kill_after_total_dones(),
        heard.panics()
    );
    heard
}

/// Waits (until `deadline`) for every child to exit; their output is closed already.
fn reap(children: &mut Children, deadline: Instant) -> Vec<ExitStatus> {
    let mut statuses = Vec::new();
    for (index, child) in children.0.iter_mut().enumerate() {
        loop {
            if let Some(status) = child.try_wait().expect("wait for a child") {
                statuses.push(status);
                break;
            }
            assert!(Instant::now() < deadline, "child {index} closed its output but runs on");
            thread::sleep(Duration::from_millis(20));
        }
    }
    statuses
}

/// The victim died of SIGKILL; the others finished their work and exited cleanly; nobody
/// panicked.
fn check_processes(heard: &Heard) {
    use std::os::unix::process::ExitStatusExt;
    let panics = heard.panics();
    assert!(panics.is_empty(), "children panicked: {panics:?}");
    for (index, status) in heard.statuses.iter().enumerate() {
        if index == heard.victim() {
            assert_eq!(status.signal(), Some(9), "the victim died of SIGKILL: {status:?}");
            continue;
        }
        assert!(status.success(), "child {index} failed: {status:?}");
        let exited = heard.acks.iter().any(|(child, ack)| *child == index && *ack == Ack::Exit);
        assert!(exited, "child {index} exited without finishing its run");
    }
}

// ---------------------------------------------------------------------------------------------
// The checks against the store.

/// What the queue check counted.
struct QueueFigures {
    claims: usize,
    dones: usize,
    /// Claims that ended by their lease lapsing (a later claim has a higher fence).
    reclaimed: usize,
    /// Items the victim worked on when it died, completed by a survivor.
    taken_over: usize,
}

/// The acknowledgements about one item, by child.
#[derive(Default)]
struct ItemAcks {
    claims: Vec<(usize, u64)>,
    dones: Vec<(usize, u64)>,
    /// Claims its holder gave up on purpose, or whose completion came too late.
    dropped: BTreeSet<u64>,
}

fn acks_by_item(heard: &Heard, queue_name: &str) -> BTreeMap<String, ItemAcks> {
    let mut by_item: BTreeMap<String, ItemAcks> = BTreeMap::new();
    let mut queue_of: BTreeMap<String, String> = BTreeMap::new();
    for (child, ack) in &heard.acks {
        match ack {
            Ack::Claim { queue, item, fence } => {
                queue_of.insert(item.clone(), queue.clone());
                by_item.entry(item.clone()).or_default().claims.push((*child, *fence));
            }
            Ack::Done { item, fence } | Ack::NodeDone { item, fence, .. } => {
                by_item.entry(item.clone()).or_default().dones.push((*child, *fence));
            }
            Ack::Abandon { item, fence } | Ack::Lost { item, fence } => {
                by_item.entry(item.clone()).or_default().dropped.insert(*fence);
            }
            _ => {}
        }
    }
    by_item.retain(|item, _| queue_of.get(item).is_some_and(|queue| queue == queue_name));
    by_item
}

/// The child whose worker wrote `result` (`{"by": "p<child>-w<n>", ..}`).
fn child_of(result: &Value) -> usize {
    let by = result["by"].as_str().expect("a result names its worker");
    let digits = by.trim_start_matches('p').split('-').next().expect("p<child>-w<n>");
    digits.parse().expect("a child's number")
}

fn check_queue(store: &Store, ids: &[String], heard: &Heard) -> QueueFigures {
    let stats = store.queue().stats().expect("stats");
    let stress = stats.iter().find(|s| s.queue == STRESS).expect("the stress queue");
    let live = (stress.pending, stress.scheduled, stress.claimed, stress.dead);
    assert_eq!(live, (0, 0, 0, 0), "nothing left pending, claimed or dead: {stress:?}");
    assert_eq!(stress.completed, ids.len() as u64, "no item lost: {stress:?}");

    let acks = acks_by_item(heard, STRESS);
    let victim = heard.victim();
    let mut figures = QueueFigures { claims: 0, dones: 0, reclaimed: 0, taken_over: 0 };
    let mut unprinted = 0;
    for id in ids {
        let item = store.queue().get(id).expect("item");
        assert_eq!(item.status, ItemStatus::Completed, "{id} completed");
        let result = item.result.clone().expect("a completed item has its result");
        assert_eq!(result["fence"], json!(item.fence), "{id} completed under its last fence");
        let by = child_of(&result);
        let empty = ItemAcks::default();
        let seen = acks.get(id).unwrap_or(&empty);
        unprinted += check_fences(id, &item, (by, victim), seen);
        figures.claims += seen.claims.len();
        figures.dones += seen.dones.len();
        figures.reclaimed += seen.claims.iter().filter(|(_, f)| *f < item.fence).count();
        let victim_held = seen
            .claims
            .iter()
            .filter(|(child, f)| *child == victim && !seen.dropped.contains(f))
            .filter(|(_, f)| !seen.dones.contains(&(victim, *f)))
            .map(|(_, f)| *f)
            .max();
        if let Some(fence) = victim_held.filter(|_| by != victim) {
            assert!(item.fence > fence, "{id}: taken over with a higher fence than {fence}");
            assert_eq!(item.last_error.as_deref(), Some("lease expired"), "{id}: reclaimed");
            figures.taken_over += 1;
        }
    }
    assert!(unprinted <= WORKERS as usize, "{unprinted} claims no process printed");
    let accepted: Vec<&(usize, Ack)> =
        heard.acks.iter().filter(|(_, ack)| matches!(ack, Ack::StaleAccepted { .. })).collect();
    assert!(accepted.is_empty(), "writes with a stale fence were accepted: {accepted:?}");
    assert!(heard.stale_refused() > 0, "no stale write was attempted");
    assert!(figures.taken_over > 0, "no item the killed process held was taken over");
    figures
}

/// Checks one finished item's acknowledgements against the store: at most one accepted
/// completion, the one the store holds (or, unprinted, the victim's), and each fence up to the
/// item's last issued once (one attempt per claim). Returns how many of its claims no process
/// printed (only the victim, killed between a claim and its line, may have left one).
fn check_fences(
    id: &str,
    item: &spindle::QueueItem,
    (by, victim): (usize, usize),
    seen: &ItemAcks,
) -> usize {
    assert!(seen.dones.len() <= 1, "{id} completed more than once: {:?}", seen.dones);
    match seen.dones.first() {
        Some(&(child, fence)) => {
            assert_eq!((child, fence), (by, item.fence), "{id}: the acknowledged completion");
        }
        None => assert_eq!(by, victim, "{id}: only the killed process may leave one unprinted"),
    }
    assert_eq!(u64::from(item.attempt), item.fence, "{id}: one attempt per fence");
    let mut fences: Vec<u64> = seen.claims.iter().map(|(_, fence)| *fence).collect();
    fences.sort_unstable();
    let issued = fences.len();
    fences.dedup();
    assert_eq!(fences.len(), issued, "{id}: a fence was issued twice: {:?}", seen.claims);
    assert!(fences.iter().all(|&fence| (1..=item.fence).contains(&fence)), "{id}: {fences:?}");
    if by != victim {
        assert_eq!(fences.last(), Some(&item.fence), "{id}: its last claim was printed");
    }
    (item.fence as usize) - fences.len()
}

/// What the graph check counted.
struct NodeFigures {
    nodes: usize,
    /// Node claims that ended by their lease lapsing.
    reclaimed: usize,
    /// Nodes the victim was running when it died, finished by a survivor.
    taken_over: usize,
    started_per_child: Vec<usize>,
}

fn check_graph(store: &Store, graph: &str, heard: &Heard) -> NodeFigures {
    let graphs = store.graphs();
    let ended = graphs.get(graph).expect("graph");
    assert_eq!(ended.status, GraphStatus::Complete, "the graph ran to its end: {ended:?}");
    assert_eq!(graphs.audit(graph).expect("audit"), Vec::<String>::new(), "counters sound");
    let nodes = graphs.nodes(graph).expect("nodes");
    assert_eq!(nodes.len(), LAYERS * WIDTH + 2);
    let applied = node_effects(store);
    let items = node_items(store);
    let acks = acks_by_item(heard, NODES);
    let (mut unprinted, mut reclaimed) = (0, 0);
    for node in &nodes {
        assert_eq!(node.status, NodeStatus::Complete, "{} ran", node.id);
        let effects = applied.get(&node.id).map_or(&[][..], Vec::as_slice);
        assert_eq!(effects.len(), 1, "{}: its effect applied exactly once: {effects:?}", node.id);
        let effect = &effects[0];
        let Some(NodeOutput::Single(token)) = &node.output else { panic!("{}: output", node.id) };
        assert_eq!(token.data.as_ref(), Some(effect), "{}: output and effect agree", node.id);
        let item = items.get(&node.id).unwrap_or_else(|| panic!("{}: one item", node.id));
        assert_eq!(item.result.as_ref(), Some(effect), "{}: item and effect agree", node.id);
        let seen = acks.get(&item.id).unwrap_or_else(|| panic!("{}: claimed", node.id));
        unprinted += check_fences(&item.id, item, (child_of(effect), heard.victim()), seen);
        reclaimed += seen.claims.iter().filter(|(_, f)| *f < item.fence).count();
    }
    assert!(unprinted <= WORKERS as usize, "{unprinted} node claims no process printed");
    let taken_over = check_node_takeover(heard, &applied);
    let mut started_per_child = vec![0; PROCESSES];
    for (child, ack) in &heard.acks {
        if matches!(ack, Ack::Start { .. }) {
            started_per_child[*child] += 1;
        }
    }
    // The victim ran nodes (it was killed in one) and a survivor took it over. On PostgreSQL
    // every process's claims are woken by another's enqueue (NOTIFY), so all three run nodes;
    // on SQLite nothing wakes another process's claims (they poll) and the process that has just
    // committed tends to take the write lock again, so the process that finishes a node often
    // runs the next ones, and one survivor may run none.
    let ran = started_per_child.iter().filter(|&&n| n > 0).count();
    let expected = if common::on_postgres() { PROCESSES } else { 2 };
    assert!(ran >= expected, "nodes ran in {ran} processes: {started_per_child:?}");
    NodeFigures { nodes: nodes.len(), reclaimed, taken_over, started_per_child }
}

/// Every node the victim had started and not finished when it died was resumed by a survivor
/// (which found it running) and finished with a higher fence; returns how many.
fn check_node_takeover(heard: &Heard, applied: &BTreeMap<String, Vec<Value>>) -> usize {
    let mut running: BTreeMap<String, u64> = BTreeMap::new();
    let victim = heard.victim();
    for ack in heard.acks.iter().filter(|(child, _)| *child == victim).map(|(_, ack)| ack) {
        match ack {
            Ack::Start { node, fence, .. } => {
                running.insert(node.clone(), *fence);
            }
            Ack::NodeDone { node, .. } => {
                running.remove(node);
            }
            _ => {}
        }
    }
    assert!(!running.is_empty(), "the victim was running no node when it died");
    let mut taken_over = 0;
    for (node, fence) in &running {
        let effect = &applied[node][0];
        if child_of(effect) == victim {
            continue; // finished just before the kill, its line unprinted
        }
        assert!(effect["fence"].as_u64() > Some(*fence), "{node}: finished with a higher fence");
        let resumed = heard.acks.iter().any(|(child, ack)| {
            *child != victim
                && matches!(ack, Ack::Start { node: n, resumed: true, .. } if n == node)
        });
        assert!(resumed, "{node}: a survivor found it running and took it over");
        taken_over += 1;
    }
    assert!(taken_over > 0, "no node the killed process ran was taken over: {running:?}");
    taken_over
}

/// The effects stream: each node's effects, in order.
fn node_effects(store: &Store) -> BTreeMap<String, Vec<Value>> {
    let mut applied: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for event in common::read_stream(store, &effects()) {
        let node = event.payload["node"].as_str().expect("an effect names its node").to_owned();
        let mut effect = event.payload.clone();
        effect.as_object_mut().expect("an object").remove("node");
        applied.entry(node).or_default().push(effect);
    }
    applied
}

/// The nodes' items, all completed, one per node.
fn node_items(store: &Store) -> BTreeMap<String, spindle::QueueItem> {
    let stats = store.queue().stats().expect("stats");
    let queue = stats.iter().find(|s| s.queue == NODES).expect("the node queue");
    let live = (queue.pending, queue.scheduled, queue.claimed, queue.dead);
    assert_eq!(live, (0, 0, 0, 0), "no node item left: {queue:?}");
    let filter = ItemFilter::status(ItemStatus::Completed);
    let items = store.queue().items(NODES, filter, Page::first(1000)).expect("items");
    let mut by_node = BTreeMap::new();
    for item in items {
        let node = item.node_id.clone().expect("a node's item names it");
        let id = item.id.clone();
        if let Some(other) = by_node.insert(node.clone(), item) {
            panic!("{node} has two completed items: {} and {id}", other.id);
        }
    }
    by_node
}

// ---------------------------------------------------------------------------------------------
// A child: eight workers and a dispatcher on a store of its own.

fn child(spec: &str) {
    std::panic::set_hook(Box::new(|info| ack(&format!("panic {}", info).replace('\n', " "))));
    // The test harness has printed `test <name> ... ` without a line break: end its line.
    ack("");
    let mut parts = spec.splitn(3, '\n');
    let index: usize = parts.next().and_then(|i| i.parse().ok()).expect("the child's number");
    let graph = parts.next().expect("the graph").to_owned();
    let location = parts.next().expect("the store's location");
    let store = common::open_at(location, options());
    let dispatcher = {
        let (store, graph) = (store.clone(), graph.clone());
        thread::spawn(move || dispatch(&store, &graph))
    };
    let workers: Vec<_> = (1..=WORKERS)
        .map(|w| {
            let (store, graph) = (store.clone(), graph.clone());
            let me = format!("p{index}-w{w}");
            thread::spawn(move || work(&store, &me, &graph, index as u64 * 1_000 + w))
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker panicked");
    }
    dispatcher.join().expect("the dispatcher panicked");
    store.close().expect("close");
    ack("exit");
}

/// Prints one line and flushes it: the parent reads it at once.
fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("print");
    out.flush().expect("flush");
}

/// `call`, again while the store answers `Busy` (nothing was written then).
fn patient<T>(mut call: impl FnMut() -> spindle::Result<T>) -> spindle::Result<T> {
    for _ in 0..100 {
        match call() {
            Err(Error::Busy) => ack("busy"),
            other => return other,
        }
    }
    call()
}

/// Follows the graph's stream and enqueues each node still ready, once per firing, until the
/// graph ends.
fn dispatch(store: &Store, graph: &str) {
    let began = Instant::now();
    let mut events = store.subscribe(Stream::graph(graph), 0).expect("subscribe");
    loop {
        assert!(began.elapsed() < RUN_DEADLINE, "the graph did not end in time");
        let Some(event) = events.recv_timeout(POLL).expect("graph events") else { continue };
        match GraphEvent::from_event(&event).expect("a graph event") {
            GraphEvent::NodeReady { node_id, .. } => {
                patient(|| enqueue_node(store, graph, &node_id)).expect("enqueue a node");
            }
            event if event.is_terminal() => return,
            _ => {}
        }
    }
}

/// Enqueues `node` if it is still ready: one live item per firing (its dedupe key), whichever
/// process enqueues it.
fn enqueue_node(store: &Store, graph: &str, node: &str) -> spindle::Result<()> {
    let (graph, node) = (graph.to_owned(), node.to_owned());
    store.transaction(move |tx| {
        let state = tx.exec(GetNode { graph: graph.clone(), node: node.clone() })?;
        if state.status == NodeStatus::Ready {
            let item = new_item(NODES, json!({ "node": node, "fires": state.fires }))
                .priority(10)
                .dedupe_key(format!("{node}#{}", state.fires))
                .execution_id(graph)
                .node_id(node);
            tx.exec(Enqueue { item })?;
        }
        Ok(TxOutcome::Commit(()))
    })
}

/// What a worker keeps to write with stale fences later.
#[derive(Default)]
struct Zombie {
    last_done: Option<(String, u64)>,
    abandoned: Vec<(String, u64)>,
}

fn work(store: &Store, me: &str, graph: &str, seed: u64) {
    let began = Instant::now();
    let mut dice = common::Dice::new(seed);
    let mut zombie = Zombie::default();
    loop {
        assert!(began.elapsed() < RUN_DEADLINE, "{me}: the run did not end in time");
        let claim = patient(|| store.queue().claim_wait(me, &[NODES, STRESS], LEASE_MS, POLL));
        let Some(claimed) = claim.expect("claim") else {
            if everything_done(store, graph) {
                return;
            }
            continue;
        };
        ack(&format!("claim {} {} {}", claimed.item.queue, claimed.item.id, claimed.fence));
        if claimed.item.queue == NODES {
            run_node(store, me, graph, &claimed);
        } else {
            run_item(store, me, &claimed, &mut dice, &mut zombie);
        }
        if dice.below(4) == 0 {
            stale_writes(store, &mut zombie);
        }
    }
}

/// Nothing is left to claim or running anywhere, and the graph has ended.
fn everything_done(store: &Store, graph: &str) -> bool {
    let stats = store.queue().stats().expect("stats");
    let live: u64 = stats.iter().map(|s| s.pending + s.scheduled + s.claimed).sum();
    live == 0 && store.graphs().get(graph).expect("graph").status.is_terminal()
}

/// Works a plain item for a few milliseconds and completes it; one in fifty is abandoned
/// instead (the worker "dies": its lease lapses and the item is redelivered).
fn run_item(
    store: &Store,
    me: &str,
    claimed: &Claimed,
    dice: &mut common::Dice,
    zombie: &mut Zombie,
) {
    let (id, fence) = (claimed.item.id.clone(), claimed.fence);
    if dice.below(50) == 0 {
        ack(&format!("abandon {id} {fence}"));
        zombie.abandoned.push((id, fence));
        return;
    }
    thread::sleep(Duration::from_millis(10 + dice.below(10))); // the work
    let result = json!({ "by": me, "fence": fence });
    match patient(|| store.queue().complete(&id, fence, result.clone())) {
        Ok(()) => {
            ack(&format!("done {id} {fence}"));
            zombie.last_done = Some((id, fence));
        }
        Err(Error::LeaseLost(_)) => ack(&format!("lost {id} {fence}")),
        Err(other) => panic!("{me}: complete {id}: {other}"),
    }
}

/// Writes with fences that are stale by now: the item this worker completed last, and an item
/// it abandoned that another claim has since taken. Each must be refused.
fn stale_writes(store: &Store, zombie: &mut Zombie) {
    let queue = store.queue();
    if let Some((id, fence)) = zombie.last_done.take() {
        stale_complete(store, &id, fence);
    }
    let superseded = zombie
        .abandoned
        .iter()
        .position(|(id, fence)| queue.get(id).expect("an abandoned item").fence > *fence);
    if let Some(at) = superseded {
        let (id, fence) = zombie.abandoned.swap_remove(at);
        stale_complete(store, &id, fence);
    }
}

fn stale_complete(store: &Store, id: &str, fence: u64) {
    match patient(|| store.queue().complete(id, fence, json!("stale"))) {
        Err(Error::LeaseLost(_)) => ack(&format!("stale-refused {id} {fence}")),
        Ok(()) => ack(&format!("stale-accepted {id} {fence}")),
        Err(other) => panic!("a stale complete of {id}: {other}"),
    }
}

/// Runs a node's item: starts the node (or resumes it, running after its last holder's lease
/// lapsed), works, then finishes the node under the item's fence; then replays that finish,
/// which must be refused.
fn run_node(store: &Store, me: &str, graph: &str, claimed: &Claimed) {
    let (id, fence) = (claimed.item.id.as_str(), claimed.fence);
    let node = claimed.item.payload["node"].as_str().expect("a node item names its node");
    let resumed = start_node(store, graph, node);
    let how = if resumed { "resumed" } else { "fresh" };
    ack(&format!("start {node} {id} {fence} {how}"));
    thread::sleep(NODE_WORK); // the work
    match patient(|| finish_node(store, graph, node, id, fence, me)) {
        Ok(()) => ack(&format!("node-done {node} {id} {fence}")),
        Err(Error::LeaseLost(_)) => return ack(&format!("lost {id} {fence}")),
        Err(other) => panic!("{me}: finish {node}: {other}"),
    }
    match patient(|| finish_node(store, graph, node, id, fence, me)) {
        Err(Error::LeaseLost(_)) => ack(&format!("stale-refused {id} {fence}")),
        Ok(()) => ack(&format!("stale-accepted {id} {fence}")),
        Err(other) => panic!("{me}: finish {node} again: {other}"),
    }
}

/// Starts a claimed node; true if it was running already (taken over).
fn start_node(store: &Store, graph: &str, node: &str) -> bool {
    match patient(|| store.graphs().start_node(graph, node)) {
        Ok(()) => false,
        Err(Error::Conflict(why)) => {
            let state = store.graphs().node(graph, node).expect("node");
            let status = state.status;
            assert_eq!(status, NodeStatus::Running, "{node} claimed, not ready ({why})");
            true
        }
        Err(other) => panic!("start {node}: {other}"),
    }
}

/// Completes the item and the node and applies the node's effect, in one transaction under
/// the item's fence.
fn finish_node(
    store: &Store,
    graph: &str,
    node: &str,
    id: &str,
    fence: u64,
    me: &str,
) -> spindle::Result<()> {
    let (graph, node, id) = (graph.to_owned(), node.to_owned(), id.to_owned());
    let effect = json!({ "by": me, "fence": fence });
    store.transaction(move |tx| {
        tx.exec(Complete { id, fence, result: effect.clone() })?;
        let output = Some(NodeOutput::ok(effect.clone()));
        tx.exec(CompleteNode { graph, node: node.clone(), output })?;
        let mut applied = effect;
        applied["node"] = json!(node);
        tx.append_event(effects(), "effect", applied)?;
        Ok(TxOutcome::Commit(()))
    })
}
