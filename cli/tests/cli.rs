//! The `spindle` command, run as a built binary: pipelines that complete, fail, handle errors,
//! are refused, survive `kill -9` and stop on Ctrl-C; listings as JSON; the process listing;
//! `events --follow` across processes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spindle::Store;
use spindle::process::{AwaitOutput, Registration, WaitKind};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_spindle");

/// A scratch directory with a store path and a log file the pipelines append to.
struct Scratch {
    dir: TempDir,
}

impl Scratch {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temporary directory") }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("spindle.db")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("log.txt")
    }

    /// Writes a pipeline whose nodes are `(name, command, after)`.
    fn pipeline(&self, file: &str, nodes: Value) -> PathBuf {
        let path = self.dir.path().join(file);
        let text = json!({ "name": file, "nodes": nodes }).to_string();
        std::fs::write(&path, text).expect("write pipeline");
        path
    }

    /// A command that appends `line` to the log.
    fn append(&self, line: &str) -> String {
        format!("echo {line} >> '{}'", self.log().display())
    }

    fn lines(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    /// The binary on this scratch store; every process it starts carries the scratch
    /// directory in `SPINDLE_TEST_MARKER`, so that `live_processes` finds them.
    fn command(&self) -> Command {
        let mut command = Command::new(BIN);
        command.arg("--db").arg(self.db()).env("SPINDLE_LEASE_MS", "1000");
        command.env("SPINDLE_TEST_MARKER", self.dir.path());
        command
    }

    /// A run of `pipeline` in the background, its output dropped.
    fn spawn_run(&self, pipeline: &Path) -> Child {
        spawn_quiet(self.command(), pipeline)
    }

    /// The live (not zombie) processes started by this scratch's runs, with their command
    /// lines.
    fn live_processes(&self) -> Vec<(u32, String)> {
        let marker = format!("SPINDLE_TEST_MARKER={}", self.dir.path().display());
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let read =
                |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
            let environ = read("environ");
            let marked = environ.split(|byte| *byte == 0).any(|var| var == marker.as_bytes());
            let stat = String::from_utf8_lossy(&read("stat")).into_owned();
            let zombie = stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with('Z'));
            if marked && !zombie {
                let cmdline = String::from_utf8_lossy(&read("cmdline")).replace('\0', " ");
                found.push((pid, cmdline));
            }
        }
        found
    }

    /// A file of the scratch directory.
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&self, pipeline: &Path) -> Output {
        self.command().arg("run").arg(pipeline).output().expect("run spindle")
    }

    /// A run whose own claims last long enough that a loaded machine cannot make them lapse
    /// (it still takes over a lapsed 1 s lease of an earlier runner): for tests in which a
    /// lapse of the new runner's lease is not the point.
    fn run_steady(&self, pipeline: &Path) -> Output {
        let mut command = self.command();
        command.env("SPINDLE_LEASE_MS", STEADY_LEASE_MS).arg("run").arg(pipeline);
        command.output().expect("run spindle")
    }
}

/// The lease of a runner that must not lose its claims to a slow heartbeat.
const STEADY_LEASE_MS: &str = "10000";

fn count(lines: &[String], line: &str) -> usize {
    lines.iter().filter(|l| *l == line).count()
}

/// Lines of `path` (none if it does not exist).
fn lines_of(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

/// A command that says `start $$` in `log`, beats its shell's pid into `beat` every 50 ms
/// for `beats` beats (a grandchild in the command's group when `in_child`), then says
/// `end $$`.
fn beating(log: &Path, beat: &Path, beats: u32, in_child: bool) -> String {
    let (log, beat) = (log.display(), beat.display());
    let body = format!(
        "i=0; while [ $i -lt {beats} ]; do echo $me >> '{beat}'; sleep 0.05; i=$((i+1)); done"
    );
    let body = if in_child { format!("( {body} ) & wait") } else { body };
    format!("me=$$; echo \"start $me\" >> '{log}'; {body}; echo \"end $me\" >> '{log}'")
}

/// The pids in `lines` (`start PID`, `end PID`) of lines that start with `what`.
fn pids(lines: &[String], what: &str) -> Vec<String> {
    let prefix = format!("{what} ");
    lines.iter().filter_map(|line| line.strip_prefix(&prefix)).map(str::to_owned).collect()
}

/// Asserts that the beats of one attempt all come before the next one's: no two attempts
/// ever ran at the same time.
fn assert_one_at_a_time(beats: &[String]) {
    let mut seen: Vec<&String> = Vec::new();
    for beat in beats {
        if seen.last() != Some(&beat) {
            assert!(!seen.contains(&beat), "two attempts beat at once: {beats:?}");
            seen.push(beat);
        }
    }
}

#[test]
fn a_pipeline_completes_with_its_side_effects_in_order() {
    let s = Scratch::new();
    let nodes = json!({
        "a": { "run": s.append("a") },
        "b": { "run": s.append("b"), "after": ["a"] },
        "c": { "run": s.append("c"), "after": ["a"] },
        "d": { "run": s.append("d"), "after": ["b", "c"] },
    });
    let output = s.run(&s.pipeline("order.json", nodes));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = s.lines();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!((lines[0].as_str(), lines[3].as_str()), ("a", "d"), "{lines:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("complete"), "the summary: {stdout}");
}

#[test]
fn an_error_branch_runs_its_handler_and_the_run_completes() {
    let s = Scratch::new();
    let nodes = json!({
        "work": { "run": "exit 3" },
        "next": { "run": s.append("next"), "after": ["work"] },
        "handler": { "run": s.append("handler"), "after": [{ "node": "work", "on": "error" }] },
    });
    let output = s.run(&s.pipeline("handled.json", nodes));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(s.lines(), ["handler"]);
}

#[test]
fn an_unhandled_failure_exits_1_after_its_retries() {
    let s = Scratch::new();
    let nodes = json!({
        "flaky": { "run": format!("{}; exit 1", s.append("try")), "retries": 1 },
        "after": { "run": s.append("after"), "after": ["flaky"] },
    });
    let output = s.run(&s.pipeline("failing.json", nodes));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(s.lines(), ["try", "try"], "one try and one retry, and nothing after");
}

#[test]
fn a_background_child_does_not_outlive_its_node_or_make_it_run_again() {
    let s = Scratch::new();
    let nodes = json!({ "a": { "run": format!("{}; sleep 30 &", s.append("a")) } });
    let began = Instant::now();
    let output = s.run(&s.pipeline("background.json", nodes));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(began.elapsed() < Duration::from_secs(15), "waited for the background child");
    assert_eq!(s.lines(), ["a"]);
}

#[test]
fn a_process_that_leaves_the_group_does_not_hold_the_node() {
    let s = Scratch::new();
    let nodes = json!({ "a": { "run": format!("setsid sleep 30 & {}", s.append("a")) } });
    let began = Instant::now();
    let output = s.run(&s.pipeline("escaped.json", nodes));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(began.elapsed() < Duration::from_secs(15), "waited for the escaped process");
    assert_eq!(s.lines(), ["a"], "ran once");
}

#[test]
fn a_timeout_kills_the_command_and_a_failed_run_stops_its_siblings() {
    let s = Scratch::new();
    let nodes = json!({
        "slow": { "run": "sleep 30", "timeout_s": 1 },
        "sibling": { "run": format!("sleep 30; {}", s.append("sibling")) },
    });
    let began = Instant::now();
    let output = s.run(&s.pipeline("timeout.json", nodes));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(began.elapsed() < Duration::from_secs(15), "the timeout and the stop took too long");
    let graphs = json_of(s.command().args(["graphs", "--json"]));
    let id = graphs[0]["id"].as_str().expect("an id").to_owned();
    let shown = json_of(s.command().args(["graph", "show", &id, "--json"]));
    let nodes = shown["nodes"].as_array().expect("nodes");
    let slow = nodes.iter().find(|node| node["id"] == "slow").expect("slow");
    assert!(slow["error"].as_str().is_some_and(|e| e.contains("timed out")), "{slow}");
    assert!(s.lines().is_empty(), "the sibling was stopped");
}

#[test]
fn bad_pipelines_exit_2_naming_the_node_and_write_nothing() {
    let s = Scratch::new();
    let cases = [
        (json!({ "a": { "run": "true", "after": ["ghost"] } }), "ghost"),
        (json!({ "a": { "run": "" } }), "empty"),
        (
            json!({ "a": { "run": "true", "after": ["b"] }, "b": { "run": "true", "after": ["a"] } }),
            "cycle",
        ),
        (json!({ "a": { "run": "true", "after": [{ "node": "a", "on": "maybe" }] } }), "\"on\""),
        (
            json!({ "a": { "run": "true" }, "b": { "run": "true", "after": [{ "node": "a", "when": "error" }] } }),
            "\"b\"",
        ),
    ];
    for (nodes, reason) in cases {
        let path = s.pipeline("bad.json", nodes);
        let output = s.run(&path);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("bad.json") && stderr.contains(reason), "{stderr}");
        assert!(stderr.lines().count() == 1, "one line: {stderr}");
    }
    assert!(!s.db().exists(), "nothing was written");
}

#[test]
fn a_run_killed_while_a_node_sleeps_resumes_and_reruns_only_the_interrupted_node() {
    let s = Scratch::new();
    let started = s.dir.path().join("b-started");
    let nodes = json!({
        "a": { "run": s.append("a") },
        "b": { "run": format!("{}; touch '{}'; sleep 3; {}", s.append("b-start"), started.display(), s.append("b")),
               "after": ["a"] },
        "c": { "run": s.append("c"), "after": ["b"] },
    });
    let pipeline = s.pipeline("resume.json", nodes);
    let mut first = s
        .command()
        .arg("run")
        .arg(&pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for(|| started.exists(), Duration::from_secs(30));
    first.kill().expect("kill -9");
    let _ = first.wait();
    let output = s.run_steady(&pipeline);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("resuming"), "{stderr}");
    // The interrupted attempt died with its runner: it never finishes.
    std::thread::sleep(Duration::from_secs(3));
    let lines = s.lines();
    assert_eq!(count(&lines, "a"), 1, "a finished before the kill: {lines:?}");
    assert_eq!(count(&lines, "c"), 1, "{lines:?}");
    assert_eq!(count(&lines, "b-start"), 2, "b was interrupted and ran again: {lines:?}");
    assert_eq!(count(&lines, "b"), 1, "only the second attempt of b finished: {lines:?}");
    let again = s.run(&pipeline);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(count(&s.lines(), "a"), 2, "a finished run is not resumed: a new run starts");
}

/// Runs the node `b` of a pipeline `a -> b` (b beating as `beating` says), kills the runner
/// with SIGKILL once b has started, and resumes the run. Returns
/// the log and the beats.
fn kill_mid_command_then_resume(s: &Scratch, in_child: bool) -> (Vec<String>, Vec<String>) {
    let (log, beat) = (s.file("log"), s.file("beat"));
    let nodes = json!({
        "a": { "run": format!("echo a >> '{}'", log.display()) },
        "b": { "run": beating(&log, &beat, 60, in_child), "after": ["a"] },
    });
    let pipeline = s.pipeline("attempts.json", nodes);
    let mut first = s.spawn_run(&pipeline);
    wait_for(|| lines_of(&beat).len() >= 2, Duration::from_secs(30));
    first.kill().expect("kill -9");
    let _ = first.wait();
    let output = s.run_steady(&pipeline);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(s.live_processes().is_empty(), "left behind: {:?}", s.live_processes());
    (lines_of(&log), lines_of(&beat))
}

/// The log of an interrupted b and its rerun: two starts, and the end of the second only.
fn assert_interrupted_once(log: &[String], beats: &[String]) {
    let (starts, ends) = (pids(log, "start"), pids(log, "end"));
    assert_eq!(starts.len(), 2, "{log:?}");
    assert_eq!(ends, [starts[1].clone()], "the first attempt never finished: {log:?}");
    assert_one_at_a_time(beats);
}

/// Waits until none of the scratch's processes is left, at most `limit`.
fn wait_until_none_left(s: &Scratch, limit: Duration) {
    let began = Instant::now();
    while !s.live_processes().is_empty() {
        assert!(began.elapsed() < limit, "still running: {:?}", s.live_processes());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_runners_command_dies_with_it_and_runs_again_instead_not_as_well() {
    let s = Scratch::new();
    let (log, beats) = kill_mid_command_then_resume(&s, false);
    assert_eq!(log.first().map(String::as_str), Some("a"));
    assert_interrupted_once(&log, &beats);
}

#[test]
fn a_grandchild_in_the_commands_group_dies_with_the_runner_too() {
    let s = Scratch::new();
    let (log, beats) = kill_mid_command_then_resume(&s, true);
    assert_interrupted_once(&log, &beats);
}

#[test]
fn nothing_of_the_attempt_outlives_the_killed_runner() {
    let s = Scratch::new();
    let beat = s.file("beat");
    let nodes = json!({ "b": { "run": beating(&s.file("log"), &beat, 200, true) } });
    let mut runner = s.spawn_run(&s.pipeline("outlive.json", nodes));
    wait_for(|| lines_of(&beat).len() >= 2, Duration::from_secs(30));
    runner.kill().expect("kill -9");
    let _ = runner.wait();
    wait_until_none_left(&s, Duration::from_secs(5));
    let beats = lines_of(&beat).len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(lines_of(&beat).len(), beats, "the command kept running after its runner died");
}

#[test]
fn a_runner_that_takes_over_a_stalled_runners_node_ends_its_attempt_before_running_it() {
    let s = Scratch::new();
    let (log, beat) = (s.file("log"), s.file("beat"));
    let nodes = json!({ "b": { "run": beating(&log, &beat, 80, true) } });
    let pipeline = s.pipeline("stalled.json", nodes);
    let mut stalled = s.spawn_run(&pipeline);
    wait_for(|| lines_of(&beat).len() >= 2, Duration::from_secs(30));
    // The first runner stops between two of its transactions: its command runs on, but its
    // lease lapses, and a second runner takes the node over.
    stop_outside_a_write(&s, stalled.id());
    let output = s.run_steady(&pipeline);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    signal(stalled.id(), "-CONT");
    assert_eq!(stalled.wait().expect("wait").code(), Some(0), "the stale runner sees the end");
    let log = lines_of(&log);
    assert_interrupted_once(&log, &lines_of(&beat));
    assert!(s.live_processes().is_empty(), "left behind: {:?}", s.live_processes());
}

/// Stops process `pid` (SIGSTOP) at a moment it holds no write lock on the scratch store.
fn stop_outside_a_write(s: &Scratch, pid: u32) {
    for _ in 0..100 {
        signal(pid, "-STOP");
        let conn = rusqlite::Connection::open(s.db()).expect("open");
        conn.busy_timeout(Duration::ZERO).expect("busy timeout");
        if conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK").is_ok() {
            return;
        }
        signal(pid, "-CONT");
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the runner always held the write lock");
}

fn signal(pid: u32, which: &str) {
    let sent = Command::new("kill").arg(which).arg(pid.to_string()).status();
    assert!(sent.expect("kill").success(), "kill {which} {pid}");
}

#[test]
fn two_runners_started_together_never_run_a_node_twice_at_once() {
    let s = Scratch::new();
    let log = s.file("log");
    let node = |name: &str| {
        let lock = s.file(&format!("lock-{name}"));
        let (log, lock) = (log.display(), lock.display());
        format!(
            "mkdir '{lock}' || echo \"double {name}\" >> '{log}'; echo \"run {name}\" >> '{log}'; \
             sleep 0.3; rmdir '{lock}'"
        )
    };
    let nodes = json!({
        "a": { "run": node("a") }, "b": { "run": node("b") }, "c": { "run": node("c") },
        "d": { "run": node("d"), "after": ["a", "b"] }, "e": { "run": node("e"), "after": ["c"] },
        "f": { "run": node("f"), "after": ["d", "e"] },
    });
    let pipeline = s.pipeline("together.json", nodes);
    let runners: Vec<Child> = (0..2)
        .map(|_| {
            let mut command = s.command();
            command.env("SPINDLE_LEASE_MS", STEADY_LEASE_MS);
            command.arg("run").arg(&pipeline).stdout(Stdio::null()).stderr(Stdio::piped());
            command.spawn().expect("spawn")
        })
        .collect();
    for runner in runners {
        let output = runner.wait_with_output().expect("wait");
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let lines = lines_of(&log);
    for name in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(count(&lines, &format!("run {name}")), 1, "{lines:?}");
    }
    assert!(!lines.iter().any(|line| line.starts_with("double")), "{lines:?}");
    let graphs = json_of(s.command().args(["--json", "graphs"]));
    assert_eq!(graphs.as_array().map(Vec::len), Some(1), "one run, shared: {graphs}");
}

fn wait_for(condition: impl Fn() -> bool, limit: Duration) {
    let began = Instant::now();
    while !condition() {
        assert!(began.elapsed() < limit, "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn listings_print_json_that_parses() {
    let s = Scratch::new();
    let nodes = json!({ "a": { "run": "true" }, "b": { "run": "exit 1", "after": ["a"] } });
    let output = s.run(&s.pipeline("json.json", nodes));
    assert_eq!(output.status.code(), Some(1));
    let graphs = json_of(s.command().args(["graphs", "--json"]));
    let id = graphs[0]["id"].as_str().expect("an id").to_owned();
    assert_eq!(graphs[0]["status"], "failed");
    let shown = json_of(s.command().args(["graph", "show", &id, "--json"]));
    assert_eq!(shown["nodes"].as_array().map(Vec::len), Some(2));
    let stats = json_of(s.command().args(["queue", "stats", "--json"]));
    assert!(stats.as_array().is_some_and(|queues| !queues.is_empty()), "{stats}");
    let check = json_of(s.command().args(["check", "--json"]));
    assert_eq!(check["ok"], true, "{check}");
    let missing = s.command().args(["graph", "show", "nope"]).output().expect("run");
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn check_reports_a_kept_count_that_differs_from_a_recount() {
    let s = Scratch::new();
    let nodes = json!({ "a": { "run": "true" }, "b": { "run": "true", "after": ["a"] } });
    assert_eq!(s.run(&s.pipeline("counts.json", nodes)).status.code(), Some(0));
    let healthy = json_of(s.command().args(["check", "--json"]));
    assert_eq!(
        (healthy["ok"].clone(), healthy["count_problems"].clone()),
        (json!(true), json!([]))
    );
    // Damage past the store: one more completed item than the queue holds, and the count of
    // the runs gone.
    let raw = rusqlite::Connection::open(s.db()).expect("raw connection");
    raw.execute_batch(
        "UPDATE queue_counts SET total = total + 1 WHERE status = 'completed';
         DELETE FROM graph_counts WHERE kind = 'spindle-run';",
    )
    .expect("damage the counts");
    drop(raw);
    let damaged = s.command().args(["check", "--json"]).output().expect("run spindle check");
    assert_eq!(damaged.status.code(), Some(3), "{}", String::from_utf8_lossy(&damaged.stderr));
    let report: Value = serde_json::from_slice(&damaged.stdout).expect("JSON");
    assert_eq!(report["ok"], false);
    let problems: Vec<String> = report["count_problems"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|line| line.as_str().expect("a line").to_owned())
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("queue run:")
            && problems[0].ends_with("completed: kept 3, counted 2"),
        "{problems:?}"
    );
    assert_eq!(problems[1], "graphs \"spindle-run\" root complete: kept 0, counted 1");
}

#[test]
fn tenants_and_tokens_are_administered_from_the_command_line() {
    let s = Scratch::new();
    let created =
        json_of(s.command().args(["tenants", "create", "acme", "--name", "Acme", "--json"]));
    assert_eq!(created["status"], "active");
    let suspended = json_of(s.command().args(["tenants", "suspend", "acme", "--json"]));
    assert_eq!(suspended["status"], "suspended");
    let tenants = json_of(s.command().args(["tenants", "--json"]));
    let ids: Vec<&str> =
        tenants.as_array().expect("array").iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, ["acme", "default"]);
    let token = json_of(s.command().args([
        "--tenant",
        "acme",
        "tokens",
        "create",
        "ci",
        "--role",
        "writer",
        "--expires-in",
        "30d",
        "--json",
    ]));
    let secret = token["secret"].as_str().expect("a secret");
    assert!(secret.starts_with("spn_"));
    let id = token["token"]["id"].as_str().expect("an id").to_owned();
    let listed = json_of(s.command().args(["--tenant", "acme", "tokens", "list", "--json"]));
    assert_eq!(listed[0]["role"], "writer");
    assert!(!listed.to_string().contains(&secret[4..]), "a listing never shows a secret");
    let revoked =
        s.command().args(["--tenant", "acme", "tokens", "revoke", &id]).output().expect("run");
    assert_eq!(revoked.status.code(), Some(0));
    let bad_role =
        s.command().args(["tokens", "create", "x", "--role", "root"]).output().expect("run");
    assert_eq!(bad_role.status.code(), Some(2));
}

/// Writes three processes with the library: `p-done` completed, `p-run` running, `p-wait`
/// running and waiting for a signal.
fn three_processes(db: &Path) {
    let store = Store::open(db).expect("open the store");
    let processes = store.processes();
    for (id, label) in [("p-done", "done"), ("p-run", "run"), ("p-wait", "wait")] {
        let registration = Registration::new(id, "tool", json!({})).label(label);
        processes.register(registration).expect("register");
    }
    let success = AwaitOutput::Success { value: json!("ok"), control: None };
    processes.complete("p-done", success).expect("complete");
    let signal = WaitKind::Signal {
        name: "go".into(),
        event_type: "signal.go".into(),
        key: "go-1".into(),
        ordinal: 1,
    };
    processes.set_wait("p-wait", signal).expect("wait");
    store.close().expect("close");
}

/// The table's rows (its header left out), each split into its columns.
fn rows_of(command: &mut Command) -> Vec<String> {
    let output = command.output().expect("run spindle");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    let mut lines = stdout.lines();
    assert!(lines.next().is_some_and(|header| header.starts_with("ID")), "{stdout}");
    lines.map(str::to_owned).collect()
}

#[test]
fn processes_lists_the_running_ones_and_every_one_with_all() {
    let s = Scratch::new();
    three_processes(&s.db());
    let running = rows_of(s.command().arg("processes"));
    assert_eq!(running.len(), 2, "{running:?}");
    assert!(running[0].starts_with("p-run ") && running[0].contains(" tool "), "{running:?}");
    assert!(running[0].contains(" run ") && running[0].contains(" running "), "{running:?}");
    assert!(!running[0].contains("waiting"), "{running:?}");
    assert!(running[1].starts_with("p-wait ") && running[1].contains(" running (waiting) "));
    let every = rows_of(s.command().args(["processes", "--all"]));
    assert_eq!(every.len(), 3, "{every:?}");
    assert!(every[0].starts_with("p-done ") && every[0].contains(" completed "), "{every:?}");
    assert_eq!(every[1..], running[..], "the running rows are the same");
    let listed = json_of(s.command().args(["processes", "--all", "--json"]));
    let records = listed.as_array().expect("an array");
    let summary: Vec<(&str, &str, bool)> = records
        .iter()
        .map(|r| {
            let (id, state) = (r["id"].as_str(), r["status"]["state"].as_str());
            (id.unwrap_or("?"), state.unwrap_or("?"), !r["wait"].is_null())
        })
        .collect();
    let expected =
        [("p-done", "completed", false), ("p-run", "running", false), ("p-wait", "running", true)];
    assert_eq!(summary, expected, "{listed}");
    assert_eq!(records[0]["identity"]["label"], "done", "{listed}");
    let pruned = json_of(s.command().args(["prune", "--older-than", "0ms", "--json"]));
    assert_eq!(
        (pruned["processes"].as_u64(), pruned["process_events"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(pruned["pruned"].as_u64(), Some(0), "queue items, as before: {pruned}");
    let left = rows_of(s.command().args(["processes", "--all"]));
    assert_eq!(left, running, "prune removed the finished process only");
}

fn json_of(command: &mut Command) -> Value {
    let output = command.output().expect("run spindle");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn events_follow_in_a_second_process_sees_a_run_of_the_first() {
    let s = Scratch::new();
    let nodes = json!({ "a": { "run": "true" } });
    let pipeline = s.pipeline("follow.json", nodes.clone());
    assert_eq!(s.run(&pipeline).status.code(), Some(0), "creates the store");
    let mut follower: Child = s
        .command()
        .args(["events", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("follower");
    let reader = BufReader::new(follower.stdout.take().expect("stdout"));
    let (second, db) = (s.pipeline("follow-again.json", nodes), s.db());
    let runner = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        Command::new(BIN).arg("--db").arg(db).arg("run").arg(&second).output().expect("run")
    });
    let mut done = 0;
    for line in reader.lines() {
        let event: Value = serde_json::from_str(&line.expect("line")).expect("JSON event");
        if event["type"] == "graph_done" {
            done += 1;
            if done == 2 {
                break;
            }
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert_eq!(runner.join().expect("runner").status.code(), Some(0));
    assert_eq!(done, 2, "the follower saw the first run's end and the second's");
}

#[test]
fn a_guard_started_outside_a_run_refuses_rather_than_kill_its_callers_group() {
    // Not the leader of its process group (the test's is), it must not run, and above all not
    // kill "its" group when its stdin closes: that group is the caller's.
    let output = Command::new(BIN)
        .args(["__guard", "--", "echo ran"])
        .stdin(Stdio::null())
        .output()
        .expect("run the guard");
    assert_eq!(output.status.code(), Some(125), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
}

/// `command` running `pipeline` in the background, its output dropped.
fn spawn_quiet(mut command: Command, pipeline: &Path) -> Child {
    command.arg("run").arg(pipeline).stdout(Stdio::null()).stderr(Stdio::null());
    command.spawn().expect("spawn")
}

/// Sends SIGINT (what Ctrl-C sends) to `child`.
fn interrupt(child: &Child) {
    let status =
        Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill -INT");
    assert!(status.success(), "kill -INT {}", child.id());
}

/// The binary on this store with a lease of a minute: a run that had to wait out a lease
/// would take that long, so a quick resume shows that nothing was left claimed.
fn with_minute_lease(s: &Scratch) -> Command {
    let mut command = s.command();
    command.env("SPINDLE_LEASE_MS", "60000");
    command
}

#[test]
fn one_ctrl_c_lets_the_running_node_finish_and_the_resumed_run_goes_on_at_once() {
    let s = Scratch::new();
    let started = s.file("a-started");
    let nodes = json!({
        "a": { "run": format!("touch '{}'; sleep 3; {}", started.display(), s.append("a")) },
        "b": { "run": s.append("b"), "after": ["a"] },
    });
    let pipeline = s.pipeline("interrupted.json", nodes);
    let mut runner = spawn_quiet(with_minute_lease(&s), &pipeline);
    wait_for(|| started.exists(), Duration::from_secs(30));
    interrupt(&runner);
    let status = runner.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "an interrupted run exits 130");
    assert_eq!(s.lines(), ["a"], "the running node finished; the next one never started");
    let began = Instant::now();
    let output = with_minute_lease(&s).arg("run").arg(&pipeline).output().expect("resume");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(began.elapsed() < Duration::from_secs(30), "the resume waited out a lease");
    assert_eq!(s.lines(), ["a", "b"], "each node ran once");
}

#[test]
fn a_second_ctrl_c_kills_the_running_node_and_gives_its_item_back() {
    let s = Scratch::new();
    let (started, marker) = (s.file("a-started"), s.file("a-tried"));
    // The first attempt sleeps until it is killed; the next one finishes at once.
    let a = format!(
        "if [ -e '{tried}' ]; then {done}; else touch '{tried}' '{began}'; sleep 30; {done}; fi",
        tried = marker.display(),
        began = started.display(),
        done = s.append("a"),
    );
    let nodes = json!({
        "a": { "run": a },
        "b": { "run": s.append("b"), "after": ["a"] },
    });
    let pipeline = s.pipeline("killed.json", nodes);
    let mut runner = spawn_quiet(with_minute_lease(&s), &pipeline);
    wait_for(|| started.exists(), Duration::from_secs(30));
    let began = Instant::now();
    interrupt(&runner);
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&runner);
    let status = runner.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "an interrupted run exits 130");
    assert!(began.elapsed() < Duration::from_secs(20), "the command was not killed");
    assert!(s.lines().is_empty(), "the killed attempt never finished: {:?}", s.lines());
    assert!(s.live_processes().is_empty(), "left behind: {:?}", s.live_processes());
    let began = Instant::now();
    let output = with_minute_lease(&s).arg("run").arg(&pipeline).output().expect("resume");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(began.elapsed() < Duration::from_secs(30), "the resume waited out a lease");
    assert_eq!(s.lines(), ["a", "b"]);
}

#[test]
fn v_and_rust_log_tell_the_stores_work_on_stderr_only() {
    let s = Scratch::new();
    let pipeline = s.pipeline("told.json", json!({ "a": { "run": s.append("a") } }));
    let quiet = s.command().env_remove("RUST_LOG").arg("run").arg(&pipeline).output().expect("run");
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("spindle: op"), "off by default");
    let mut told = s.command();
    told.env_remove("RUST_LOG").args(["-vvv", "run", "--fresh"]).arg(&pipeline);
    let told = told.output().expect("run");
    assert_eq!(told.status.code(), Some(0), "{told:?}");
    let stderr = String::from_utf8_lossy(&told.stderr);
    assert!(stderr.contains("spindle: op") && stderr.contains("TRACE"), "{stderr}");
    // Each batch's span, as it closed: how it ended and how long it took.
    assert!(stderr.contains("spindle.batch") && stderr.contains("outcome="), "{stderr}");
    assert!(stderr.contains("duration_us="), "{stderr}");
    assert!(!String::from_utf8_lossy(&told.stdout).contains("spindle: op"), "stdout stays clean");
    let filtered = s.command().env("RUST_LOG", "spindle=warn").args(["-vvv", "runs"]).output();
    let filtered = filtered.expect("runs");
    assert_eq!(filtered.status.code(), Some(0), "{filtered:?}");
    assert!(!String::from_utf8_lossy(&filtered.stderr).contains("TRACE"), "RUST_LOG wins over -v");
    // A RUST_LOG meant for another program's filter syntax is ignored with a warning: the
    // command still does its work.
    let bad = s.command().env("RUST_LOG", "spindle=loud").arg("runs").output();
    let bad = bad.expect("runs");
    assert_eq!(bad.status.code(), Some(0), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RUST_LOG"), "{bad:?}");
}
