//! Crash safety of the command's pipeline runner (reliability plan T2): `spindle run
//! examples/ci.json` killed with SIGKILL a few times in a row and resumed. Every node it
//! reported finished stays finished and never runs again, and the resumed run ends as an
//! uninterrupted one does. (The library's own kills are `tests/mixed_crash.rs`.)

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Dice;
use spindle::{NodeStatus, Options, Page, Store};

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

const BIN: &str = env!("CARGO_BIN_EXE_spindle");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/ci.json");
const CHAINS: u64 = 4;
const KILLS_PER_CHAIN: u64 = 3;
/// How `examples/ci.json` ends when nothing interrupts it.
const FINAL: [(&str, NodeStatus); 9] = [
    ("fetch", NodeStatus::Complete),
    ("lint", NodeStatus::Complete),
    ("unit", NodeStatus::Complete),
    ("integration", NodeStatus::Complete),
    ("docs", NodeStatus::Failed),
    ("docs-report", NodeStatus::Complete),
    ("publish-docs", NodeStatus::Skipped),
    ("package", NodeStatus::Complete),
    ("notify", NodeStatus::Complete),
];

#[test]
fn a_pipeline_run_killed_again_and_again_keeps_what_it_reported_and_ends_as_if_uninterrupted() {
    let mut dice = Dice::new(0x5EED_0003);
    let mut kills = 0;
    for chain in 0..CHAINS {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("runs.db");
        let mut finished: BTreeMap<String, String> = BTreeMap::new();
        let mut ended = false;
        for _ in 0..KILLS_PER_CHAIN {
            let delay = Duration::from_millis(100 + dice.below(900));
            let (lines, killed) = run(&db, "1000", Some(delay));
            note_finished(&lines, &mut finished, chain);
            check_finished(&db, &finished, chain);
            kills += u64::from(killed);
            if !killed {
                ended = true;
                break;
            }
        }
        if !ended {
            let (lines, _) = run(&db, "10000", None);
            note_finished(&lines, &mut finished, chain);
        }
        check_final(&db, chain);
    }
    eprintln!("{kills} pipeline runners killed over {CHAINS} runs");
    assert!(kills >= CHAINS * (KILLS_PER_CHAIN - 1), "only {kills} runs were killed");
}

/// Runs (or resumes) the example on `db`, killing the runner after `kill_after`; its
/// report lines, and whether it was killed (rather than ending with 0).
fn run(db: &Path, lease_ms: &str, kill_after: Option<Duration>) -> (Vec<String>, bool) {
    let mut command = Command::new(BIN);
    command.arg("--db").arg(db).args(["run", EXAMPLE]).env("SPINDLE_LEASE_MS", lease_ms);
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut runner = command.spawn().expect("spawn spindle");
    let stderr = runner.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<String>>()
    });
    if let Some(delay) = kill_after {
        std::thread::sleep(delay);
        let _ = runner.kill();
    }
    let status = runner.wait().expect("wait");
    let lines = reader.join().expect("reader");
    let killed = status.signal() == Some(9);
    assert!(killed || status.code() == Some(0), "the runner failed: {status:?} {lines:?}");
    (lines, killed)
}

/// Records the nodes a runner reported finished; none may finish twice.
fn note_finished(lines: &[String], finished: &mut BTreeMap<String, String>, chain: u64) {
    for line in lines {
        let Some((_, report)) = line.split_once("] ") else { continue };
        let words: Vec<&str> = report.split_whitespace().collect();
        if let [outcome @ ("ok" | "FAILED"), node, ..] = words[..] {
            let again = finished.insert(node.to_owned(), outcome.to_owned());
            assert!(again.is_none(), "chain {chain}: {node} finished twice: {lines:?}");
        }
    }
}

fn graph_nodes(db: &Path) -> BTreeMap<String, NodeStatus> {
    let options = Options::default().read_only(true);
    let store = Store::open_with(db, options).expect("open read-only");
    let graphs = all_graphs(&store);
    assert_eq!(graphs.len(), 1, "one run, resumed");
    let nodes = store.graphs().nodes(&graphs[0].id).expect("nodes");
    nodes.into_iter().map(|node| (node.id, node.status)).collect()
}

/// Every node a runner reported finished is finished so in the store.
fn check_finished(db: &Path, finished: &BTreeMap<String, String>, chain: u64) {
    if finished.is_empty() {
        return;
    }
    let nodes = graph_nodes(db);
    for (node, outcome) in finished {
        let expected = if outcome == "ok" { NodeStatus::Complete } else { NodeStatus::Failed };
        assert_eq!(nodes.get(node), Some(&expected), "chain {chain}: {node} after the kill");
    }
}

fn check_final(db: &Path, chain: u64) {
    let nodes = graph_nodes(db);
    for (node, status) in FINAL {
        assert_eq!(nodes.get(node), Some(&status), "chain {chain}: {node} at the end");
    }
}
