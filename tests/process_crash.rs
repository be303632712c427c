//! Crash safety of the process registry by SIGKILL (reliability plan T2, registry part, CI
//! size): a child process (this test binary run again) registers processes, claims and
//! releases their leases and appends events under replay keys from two threads, printing an
//! `ack` line after every call the store acknowledged; the parent kills it with SIGKILL at a
//! varying moment, four rounds on the same file, and after each kill checks that SQLite's
//! integrity check passes and no foreign key dangles, that every acknowledged registration and
//! every acknowledged event is there under its acknowledged seq, that appending an
//! acknowledged replay key again returns that seq and writes nothing, and that the next lease
//! grant's fencing token is greater than every acknowledged one.
//!
//! Each round runs on a `ManualClock` one billion milliseconds past the last round's, so the
//! leases a killed child held have lapsed when the next one starts.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Arc;
use std::thread;

use serde_json::{Value, json};
use spindle::process::{AppendRequest, EventType, LeaseClaim, LeaseOwner, Registration};
use spindle::{Durability, ManualClock, Options, Store, Stream};

const CHILD_ENV: &str = "SPINDLE_PROCESS_CRASH_CHILD";
const THREADS: u64 = 2;
/// Processes each child thread works on, kept across rounds.
const PROCESSES_PER_THREAD: u64 = 3;
const ROUNDS: u64 = 4;
const T0: i64 = 1_700_000_000_000;
const ROUND_MS: i64 = 1_000_000_000;

/// What the parent read from the children, over every round.
#[derive(Default)]
struct Acked {
    /// Process id -> (replay key -> seq).
    events: BTreeMap<String, BTreeMap<String, u64>>,
    /// Process id -> highest acknowledged fencing token.
    fences: BTreeMap<String, u64>,
    registered: Vec<String>,
    releases: u64,
}

#[test]
fn acknowledged_registry_writes_survive_sigkill() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("processes.db");
    let mut acked = Acked::default();
    for round in 0..ROUNDS {
        let kill_after = 30 + round * 47;
        let durability = if round % 2 == 0 { Durability::Full } else { Durability::Normal };
        let read = run_and_kill(&path, round, durability, kill_after, &mut acked);
        assert!(read >= kill_after, "round {round}: the child stopped after {read} acks");
        check(&path, round, &acked);
    }
    assert!(acked.releases > 0, "no lease was released");
    assert!(acked.registered.len() > THREADS as usize, "no process registered past the first");
}

/// Starts the child for `round`, reads acknowledgements until `kill_after` of them, then
/// kills it with SIGKILL; returns how many it read.
fn run_and_kill(
    path: &Path,
    round: u64,
    durability: Durability,
    kill_after: u64,
    acked: &mut Acked,
) -> u64 {
    let full = if durability == Durability::Full { "full" } else { "normal" };
    let spec = format!("{round}|{full}|{}", path.display());
    let mut child =
        common::spawn_child_test("acknowledged_registry_writes_survive_sigkill", CHILD_ENV, spec);
    let stdout = child.stdout.take().expect("child stdout");
    let mut read = 0;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["ack", "register", id] => acked.registered.push(id.to_owned()),
            ["ack", "lease", id, fence] => {
                let fence: u64 = fence.parse().expect("fence");
                let highest = acked.fences.entry(id.to_owned()).or_default();
                *highest = (*highest).max(fence);
            }
            ["ack", "release", _, _] => acked.releases += 1,
            ["ack", "event", id, key, seq] => {
                let seq: u64 = seq.parse().expect("seq");
                let keys = acked.events.entry(id.to_owned()).or_default();
                let first = *keys.entry(key.to_owned()).or_insert(seq);
                assert_eq!(first, seq, "round {round}: the child saw {key} move");
            }
            _ => continue,
        }
        read += 1;
        if read >= kill_after {
            break;
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    read
}

fn payload(key: &str) -> Value {
    json!({ "key": key })
}

fn options(clock: &ManualClock, durability: Durability) -> Options {
    Options::default().clock(Arc::new(clock.clone())).durability(durability)
}

fn check(path: &Path, round: u64, acked: &Acked) {
    // The file as the kill left it, through a raw connection.
    {
        let raw = rusqlite::Connection::open(path).expect("raw connection");
        let integrity: String =
            raw.query_row("PRAGMA integrity_check", [], |row| row.get(0)).expect("integrity");
        assert_eq!(integrity, "ok", "round {round}");
        let mut dangling = raw.prepare("PRAGMA foreign_key_check").expect("foreign_key_check");
        let rows = dangling.query_map([], |row| row.get::<_, String>(0)).expect("query");
        let rows: Vec<String> = rows.collect::<Result<_, _>>().expect("rows");
        assert!(rows.is_empty(), "round {round}: dangling foreign keys in {rows:?}");
    }
    // Half a round later than the child's clock: its leases have lapsed, the next child's
    // clock is later still.
    let clock = ManualClock::new(T0 + round as i64 * ROUND_MS + ROUND_MS / 2);
    let store = Store::open_with(path, options(&clock, Durability::Full)).expect("reopen");
    let processes = store.processes();
    for id in &acked.registered {
        assert!(processes.get(id).expect("get").is_some(), "round {round}: {id} is missing");
    }
    for (id, keys) in &acked.events {
        let stream = Stream::process(id);
        for (key, &seq) in keys {
            let found = processes.events_after(id, seq - 1).expect("events");
            let event = found.first().filter(|event| event.seq == seq);
            let event = event.unwrap_or_else(|| panic!("round {round}: {id} lost event {seq}"));
            assert_eq!(
                (event.replay_key.as_deref(), &event.payload),
                (Some(key.as_str()), &payload(key)),
                "round {round}: {id} event {seq}"
            );
        }
        let head = store.events().head(&stream).expect("head");
        for (key, &seq) in keys {
            let request = AppendRequest::new("note", payload(key)).replay_key(key.clone());
            let again = processes.append_event(id, request).expect("append again");
            assert!(again.replayed, "round {round}: {id} {key} is a replay");
            assert_eq!(again.event.seq, seq, "round {round}: {id} {key} keeps its seq");
        }
        let after = store.events().head(&stream).expect("head");
        assert_eq!(after, head, "round {round}: the replays of {id} wrote nothing");
    }
    for (id, &fence) in &acked.fences {
        let owner = LeaseOwner::new("checker", format!("round{round}"));
        let claim = processes.claim_lease(id, &owner, 1_000).expect("claim");
        let LeaseClaim::Acquired(lease) = claim else {
            panic!("round {round}: {id} is still held after its lease lapsed: {claim:?}");
        };
        assert!(
            lease.fencing_token > fence,
            "round {round}: {id} granted fence {} after acknowledging {fence}",
            lease.fencing_token
        );
        processes.complete_lease(&lease).expect("release");
    }
    store.close().expect("close");
}

fn registration(id: &str) -> Registration {
    Registration::new(id, "crash", json!({ "id": id })).event_type(EventType::new("note"))
}

/// The child: `THREADS` threads, each looping over its own processes, printing each
/// acknowledged call; it runs until it is killed.
fn child(spec: &str) {
    let mut parts = spec.splitn(3, '|');
    let round: u64 = parts.next().and_then(|r| r.parse().ok()).expect("round");
    let durability = match parts.next() {
        Some("full") => Durability::Full,
        _ => Durability::Normal,
    };
    let path = parts.next().expect("path");
    let clock = ManualClock::new(T0 + round as i64 * ROUND_MS);
    let store = Store::open_with(path, options(&clock, durability)).expect("open");
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, clock) = (store.clone(), clock.clone());
            thread::spawn(move || work(&store, &clock, round, t))
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
}

fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ack {line}").expect("print");
    out.flush().expect("flush");
}

fn work(store: &Store, clock: &ManualClock, round: u64, t: u64) {
    let processes = store.processes();
    let ids: Vec<String> = (0..PROCESSES_PER_THREAD).map(|j| format!("t{t}-p{j}")).collect();
    for id in &ids {
        processes.register(registration(id)).expect("register");
        ack(&format!("register {id}"));
    }
    let owner = LeaseOwner::new(format!("child-t{t}"), format!("round{round}"));
    let mut keys: Vec<(String, String, u64)> = Vec::new();
    for i in 0_u64.. {
        clock.advance_ms(1);
        let id = &ids[(i % PROCESSES_PER_THREAD) as usize];
        if i % 25 == 24 {
            let extra = format!("t{t}-r{round}-x{i}");
            processes.register(registration(&extra)).expect("register");
            ack(&format!("register {extra}"));
        }
        let claim = processes.claim_lease(id, &owner, 1_000).expect("claim");
        let LeaseClaim::Acquired(lease) = claim else {
            panic!("the child's own processes are busy: {claim:?}");
        };
        ack(&format!("lease {id} {}", lease.fencing_token));
        let key = format!("r{round}-t{t}-i{i}");
        let request = AppendRequest::new("note", payload(&key)).replay_key(key.clone());
        let appended = processes.append_event(id, request).expect("append");
        assert!(!appended.replayed, "a new key");
        ack(&format!("event {id} {key} {}", appended.event.seq));
        keys.push((id.clone(), key, appended.event.seq));
        // Now and then the same event again: the same seq, nothing written.
        if i % 4 == 3 {
            let (old_id, old_key, old_seq) = &keys[keys.len() - 3];
            let request = AppendRequest::new("note", payload(old_key)).replay_key(old_key.clone());
            let again = processes.append_event(old_id, request).expect("append again");
            assert_eq!((again.event.seq, again.replayed), (*old_seq, true), "a replay");
            ack(&format!("event {old_id} {old_key} {old_seq}"));
        }
        if i % 3 != 2 {
            processes.complete_lease(&lease).expect("release");
            ack(&format!("release {id} {}", lease.fencing_token));
        } else {
            // Left to lapse: the next claim, a millisecond later, re-enters or waits.
            clock.advance_ms(1_000);
        }
    }
}
