//! Crash safety by SIGKILL (reliability plan T2, CI size): a child process appends from four
//! threads and prints every append the store acknowledged; the parent kills it at a varying
//! moment, reopens the file, and checks that every acknowledged event is there, every stream
//! is dense from 1, and SQLite's integrity check passes. Under `Full` and under `Normal`
//! (both promise survival of a process crash; only `Full` promises it across power loss).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::thread;

use serde_json::json;
use spindle::{Durability, Options, Store, Stream};

const CHILD_ENV: &str = "SPINDLE_CRASH_CHILD";
const THREADS: u64 = 4;

#[test]
fn acknowledged_appends_survive_sigkill() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    for round in 0..8_u64 {
        let durability = if round % 2 == 0 { Durability::Full } else { Durability::Normal };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("crash.db");
        let kill_after = 40 + round * 53;
        let acked = run_and_kill(&path, durability, kill_after);
        check(&path, &acked, round);
    }
}

/// Starts the child, reads acknowledgements until `kill_after` of them, then kills it.
fn run_and_kill(
    path: &std::path::Path,
    durability: Durability,
    kill_after: u64,
) -> Vec<(u64, u64)> {
    let spec = format!(
        "{}|{}",
        if durability == Durability::Full { "full" } else { "normal" },
        path.display()
    );
    let mut child =
        common::spawn_child_test("acknowledged_appends_survive_sigkill", CHILD_ENV, spec);
    let stdout = child.stdout.take().expect("child stdout");
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        if words.next() != Some("ack") {
            continue;
        }
        let stream: u64 = words.next().and_then(|w| w.parse().ok()).expect("stream");
        let seq: u64 = words.next().and_then(|w| w.parse().ok()).expect("seq");
        acked.push((stream, seq));
        if acked.len() as u64 >= kill_after {
            break;
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    acked
}

fn check(path: &std::path::Path, acked: &[(u64, u64)], round: u64) {
    assert!(!acked.is_empty(), "round {round}: the child acknowledged nothing");
    let store = Store::open(path).expect("reopen after the crash");
    for stream in 0..THREADS {
        let s = Stream::custom(format!("crash-{stream}"));
        let head = store.events().head(&s).expect("head");
        let mut seqs = Vec::new();
        let mut after = 0;
        loop {
            let page = store.events().read(&s, after, 1000).expect("read");
            let Some(last) = page.last() else { break };
            after = last.seq;
            for event in &page {
                assert_eq!(event.payload, json!({ "n": event.seq }), "round {round}: payload");
            }
            seqs.extend(page.iter().map(|e| e.seq));
        }
        assert_eq!(seqs, (1..=head).collect::<Vec<_>>(), "round {round}: stream {stream} dense");
        let max_acked = acked.iter().filter(|(st, _)| *st == stream).map(|(_, seq)| *seq).max();
        if let Some(max_acked) = max_acked {
            assert!(
                head >= max_acked,
                "round {round}: stream {stream} lost acked seq {max_acked} (head {head})"
            );
        }
    }
    let check: String = store
        .transaction(|tx| {
            let result: String =
                tx.sqlite()?.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
            Ok(spindle::TxOutcome::Rollback(result))
        })
        .expect("integrity check");
    assert_eq!(check, "ok", "round {round}");
    store.close().expect("close");
}

/// The child: appends forever from `THREADS` threads, printing each acknowledged append.
fn child(spec: &str) {
    let (durability, path) = spec.split_once('|').expect("spec");
    let durability = if durability == "full" { Durability::Full } else { Durability::Normal };
    let store = Store::open_with(path, Options::default().durability(durability)).expect("open");
    let workers: Vec<_> = (0..THREADS)
        .map(|stream| {
            let store = store.clone();
            thread::spawn(move || {
                let s = Stream::custom(format!("crash-{stream}"));
                let mut out = std::io::stdout();
                for n in 1.. {
                    let appended =
                        store.events().append(&s, "n", json!({ "n": n })).expect("append");
                    assert_eq!(appended.seq, n, "one writer per stream");
                    writeln!(out, "ack {stream} {}", appended.seq).expect("print");
                    out.flush().expect("flush");
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
}
