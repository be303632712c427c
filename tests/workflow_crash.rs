//! Crash safety of workflows by SIGKILL (reliability plan T2, workflow part, CI size): a child
//! process (this test binary run again) drives executions from two threads (each step appends
//! an event, then pushes its seq to the state's `steps` array, and every fifth step writes a
//! snapshot), printing an `ack` line after every call the store acknowledged; the parent kills
//! it with SIGKILL at a varying moment, three rounds on the same file, and after each kill
//! checks that SQLite's integrity check passes, that every acknowledged event, state version
//! and snapshot is there, that each execution's state lists exactly the seqs its acknowledged
//! pushes named (and at most the one push in flight besides), and that the state version
//! counts those pushes.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::thread;

use serde_json::json;
use spindle::{Store, Stream, WorkflowStatus};

const CHILD_ENV: &str = "SPINDLE_WORKFLOW_CRASH_CHILD";
const THREADS: u64 = 2;
const ROUNDS: u64 = 3;

/// What the parent read from the children, over every round: per execution.
#[derive(Default)]
struct Acked {
    /// Execution id -> acknowledged event seqs.
    events: BTreeMap<String, Vec<u64>>,
    /// Execution id -> the highest acknowledged state version and the steps it held.
    states: BTreeMap<String, (u64, Vec<u64>)>,
    /// Execution id -> acknowledged snapshot seqs.
    snapshots: BTreeMap<String, Vec<u64>>,
}

#[test]
fn acknowledged_workflow_writes_survive_sigkill() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return child(Path::new(&path));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("workflows.db");
    let mut acked = Acked::default();
    for round in 0..ROUNDS {
        let kill_after = 40 + round * 53;
        let read = run_and_kill(&path, kill_after, &mut acked);
        assert!(read >= kill_after, "round {round}: the child stopped after {read} acks");
        check(&path, round, &acked);
    }
    assert!(acked.snapshots.values().any(|seqs| !seqs.is_empty()), "no snapshot was written");
}

/// Starts a child, reads acknowledgements until `kill_after` of them, kills it with SIGKILL.
fn run_and_kill(path: &Path, kill_after: u64, acked: &mut Acked) -> u64 {
    let name = "acknowledged_workflow_writes_survive_sigkill";
    let mut child = common::spawn_child_test(name, CHILD_ENV, path);
    let stdout = child.stdout.take().expect("child stdout");
    let mut read = 0;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if note(&line, acked) {
            read += 1;
        }
        if read >= kill_after {
            break;
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    read
}

/// Records one `ack` line; whether it was one.
fn note(line: &str, acked: &mut Acked) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["ack", "event", id, seq] => {
            acked.events.entry((*id).to_owned()).or_default().push(number(seq));
        }
        ["ack", "state", id, version, steps @ ..] => {
            let steps = steps.iter().map(|step| number(step)).collect();
            acked.states.insert((*id).to_owned(), (number(version), steps));
        }
        ["ack", "snapshot", id, seq] => {
            acked.snapshots.entry((*id).to_owned()).or_default().push(number(seq));
        }
        _ => return false,
    }
    true
}

fn number(text: &str) -> u64 {
    text.parse().expect("a number in an ack line")
}

/// Everything acknowledged is there after the kill, and nothing half-done is.
fn check(path: &Path, round: u64, acked: &Acked) {
    let raw = rusqlite::Connection::open(path).expect("raw connection");
    let integrity: String =
        raw.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("check");
    assert_eq!(integrity, "ok", "round {round}");
    drop(raw);
    let store = Store::open(path).expect("reopen");
    for (id, seqs) in &acked.events {
        let head = store.events().head(Stream::execution(id)).expect("head");
        let last = seqs.iter().max().copied().unwrap_or(0);
        assert!(head >= last, "round {round}: {id} lost events: head {head} < acked {last}");
    }
    for (id, (version, steps)) in &acked.states {
        let execution = store.workflows().execution(id).expect("get").expect("the execution");
        let stored: Vec<u64> = execution.state["steps"]
            .as_array()
            .map(|items| items.iter().filter_map(|item| item.as_u64()).collect())
            .unwrap_or_default();
        assert!(stored.starts_with(steps), "round {round}: {id} lost acknowledged steps");
        assert!(stored.len() <= steps.len() + 1, "round {round}: {id} has unacknowledged steps");
        assert_eq!(execution.state_version, stored.len() as u64, "one version per push");
        assert!(execution.state_version >= *version, "round {round}: {id} went back");
    }
    for (id, seqs) in &acked.snapshots {
        let latest = store.workflows().latest_snapshot(id).expect("latest").expect("a snapshot");
        let last = seqs.iter().max().copied().unwrap_or(0);
        assert!(latest.at_seq >= last, "round {round}: {id} lost a snapshot");
    }
    store.close().expect("close");
}

/// The child: two threads, each creating an execution and stepping it until killed.
fn child(path: &Path) {
    let store = Store::open(path).expect("child open");
    store.workflows().put_definition("crash", "v1", json!({})).expect("definition");
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let store = store.clone();
            thread::spawn(move || step_forever(&store))
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
}

fn step_forever(store: &Store) {
    let workflows = store.workflows();
    let id = workflows.create_execution("crash", "v1", json!({})).expect("create").id;
    workflows.set_status(&id, WorkflowStatus::Running).expect("run");
    for step in 1.. {
        let seq = workflows.append_event(&id, "step", json!({ "step": step })).expect("append").seq;
        ack(&format!("ack event {id} {seq}"));
        let state = workflows.append_to_array(&id, "steps", json!(seq)).expect("push");
        let steps: Vec<String> = state.state["steps"]
            .as_array()
            .map(|items| items.iter().map(|item| item.to_string()).collect())
            .unwrap_or_default();
        ack(&format!("ack state {id} {} {}", state.state_version, steps.join(" ")));
        if step % 5 == 0 {
            workflows.write_snapshot(&id, seq, state.state).expect("snapshot");
            ack(&format!("ack snapshot {id} {seq}"));
        }
    }
}

fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("write ack");
    out.flush().expect("flush ack");
}
