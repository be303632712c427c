//! The `spindle` command's daily questions, run as a built binary: `runs` (which runs, how
//! they went), `RUN` arguments (an id prefix or a pipeline's name), `retry` (re-run what
//! failed, keep what succeeded), and `logs` (what a node printed, also followed from a second
//! process while the run is live). Bad input exits 2 and writes nothing.
#![cfg(feature = "cli")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_spindle");

struct Scratch {
    dir: TempDir,
}

impl Scratch {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temporary directory") }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes the pipeline `name` with `nodes`.
    fn pipeline(&self, name: &str, nodes: Value) -> PathBuf {
        let path = self.path(&format!("{name}.json"));
        std::fs::write(&path, json!({ "name": name, "nodes": nodes }).to_string()).expect("write");
        path
    }

    fn spindle(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run spindle")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command.arg("--db").arg(self.path("spindle.db")).args(args);
        command.env("SPINDLE_LEASE_MS", "1000").env("NO_COLOR", "1");
        command
    }

    fn run(&self, pipeline: &Path) -> Output {
        self.spindle(&["run", pipeline.to_str().expect("utf-8 path")])
    }

    fn lines(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.path("log.txt")).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    /// A command that appends `what` to the log.
    fn append(&self, what: &str) -> String {
        format!("echo {what} >> '{}'", self.path("log.txt").display())
    }

    fn runs(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["runs", "--json"];
        all.extend_from_slice(args);
        let output = self.spindle(&all);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let listed: Value = serde_json::from_slice(&output.stdout).expect("runs --json parses");
        listed.as_array().expect("an array").clone()
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// fetch succeeds; test fails until the file `fixed` exists; package follows test.
fn flaky(s: &Scratch) -> PathBuf {
    let fixed = s.path("fixed");
    let test = format!(
        "echo testing attempt $SPINDLE_ATTEMPT; {}; test -e '{}'",
        s.append("test$SPINDLE_ATTEMPT"),
        fixed.display()
    );
    s.pipeline(
        "flaky",
        json!({
            "fetch": { "run": s.append("fetch") },
            "test": { "run": test, "after": ["fetch"] },
            "package": { "run": s.append("package"), "after": ["test"] },
        }),
    )
}

#[test]
fn retry_reruns_the_failed_node_and_what_it_blocked_and_keeps_what_succeeded() {
    let s = Scratch::new();
    let pipeline = flaky(&s);
    assert_eq!(s.run(&pipeline).status.code(), Some(1), "test fails");
    assert_eq!(s.lines(), ["fetch", "test1"]);
    let runs = s.runs(&[]);
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0]["status"].as_str(), runs[0]["failed_node"].as_str()),
        (Some("failed"), Some("test"))
    );

    std::fs::write(s.path("fixed"), "").expect("fix");
    let retried = s.spindle(&["retry", "flaky"]);
    assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
    assert_eq!(s.lines(), ["fetch", "test1", "test2", "package"], "fetch kept, a new attempt");
    let runs = s.runs(&[]);
    assert_eq!(runs.len(), 1, "the same run");
    assert_eq!(runs[0]["status"], "complete");

    let id = runs[0]["run"].as_str().expect("id");
    let logs = s.spindle(&["logs", &id[..8], "test"]);
    assert_eq!(logs.status.code(), Some(0), "{}", stderr(&logs));
    let text = stdout(&logs);
    assert!(text.contains("== test (attempt 2): complete"), "{text}");
    assert!(text.contains("testing attempt 2"), "{text}");
}

#[test]
fn a_retry_that_fails_again_exits_1_and_can_be_retried_again() {
    let s = Scratch::new();
    let pipeline = flaky(&s);
    assert_eq!(s.run(&pipeline).status.code(), Some(1));
    assert_eq!(s.spindle(&["retry", "flaky", "--node", "test"]).status.code(), Some(1));
    std::fs::write(s.path("fixed"), "").expect("fix");
    assert_eq!(s.spindle(&["retry", "flaky"]).status.code(), Some(0));
    assert_eq!(s.lines(), ["fetch", "test1", "test2", "test3", "package"]);
}

#[test]
fn bad_retries_exit_2_and_write_nothing() {
    let s = Scratch::new();
    let pipeline = flaky(&s);
    assert_eq!(s.run(&pipeline).status.code(), Some(1));
    let before = s.spindle(&["events", "--json"]).stdout;
    for (args, says) in [
        (vec!["retry", "no-such-run"], "no run"),
        (vec!["retry", "flaky", "--node", "fetch"], "only a failed node"),
        (vec!["retry", "flaky", "--node", "nope"], "no node"),
        (vec!["retry", "flaky", "--node", "package"], "only a failed node"),
    ] {
        let output = s.spindle(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(says), "{args:?}: {}", stderr(&output));
    }
    assert_eq!(s.spindle(&["events", "--json"]).stdout, before, "nothing written");
    assert_eq!(s.lines(), ["fetch", "test1"], "nothing ran");

    std::fs::write(s.path("fixed"), "").expect("fix");
    assert_eq!(s.spindle(&["retry", "flaky"]).status.code(), Some(0));
    let nothing_failed = s.spindle(&["retry", "flaky"]);
    assert_eq!(nothing_failed.status.code(), Some(2));
    assert!(stderr(&nothing_failed).contains("no failed node"), "{}", stderr(&nothing_failed));
}

#[test]
fn runs_lists_and_filters_and_run_arguments_take_a_prefix_or_a_name() {
    let s = Scratch::new();
    let good = s.pipeline("good", json!({ "a": { "run": "echo hi" } }));
    let bad = s.pipeline("bad", json!({ "a": { "run": "exit 3" } }));
    assert_eq!(s.run(&good).status.code(), Some(0));
    assert_eq!(s.run(&bad).status.code(), Some(1));
    assert_eq!(s.spindle(&["run", "--fresh", good.to_str().expect("path")]).status.code(), Some(0));

    assert_eq!(s.runs(&[]).len(), 3);
    let failed = s.runs(&["--status", "failed"]);
    assert_eq!(failed.len(), 1);
    assert_eq!(
        (failed[0]["name"].as_str(), failed[0]["failed_node"].as_str()),
        (Some("bad"), Some("a"))
    );
    assert_eq!(s.runs(&["--name", "good"]).len(), 2);
    assert_eq!(s.runs(&["--since", "1d"]).len(), 3);
    assert!(s.runs(&["--name", "good"]).iter().all(|run| run["duration_ms"].is_i64()));

    let table = stdout(&s.spindle(&["runs"]));
    assert!(table.lines().next().is_some_and(|h| h.contains("DURATION")), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");

    // A name is its latest run; an id prefix its one run.
    let latest = s.runs(&["--name", "good"])[1]["run"].as_str().expect("id").to_owned();
    let logs = stdout(&s.spindle(&["logs", "good"]));
    assert!(logs.contains("a | hi"), "{logs}");
    let by_prefix = s.spindle(&["logs", &latest[..30]]);
    assert_eq!(by_prefix.status.code(), Some(0), "{}", stderr(&by_prefix));
    // The ids begin with their creation time: a short prefix may name several runs.
    let ambiguous = s.spindle(&["logs", &latest[..4]]);
    assert_eq!(ambiguous.status.code(), Some(2));
    assert!(stderr(&ambiguous).contains("give more of the id"), "{}", stderr(&ambiguous));

    for args in [
        vec!["runs", "--status", "sideways"],
        vec!["runs", "--since", "yesterday"],
        vec!["logs", "nothing-like-it"],
        vec!["logs", "good", "no-such-node"],
    ] {
        let output = s.spindle(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
    }
}

#[test]
fn logs_follow_in_a_second_process_prints_each_node_as_it_finishes_until_the_run_ends() {
    let s = Scratch::new();
    let started = s.path("started");
    let pipeline = s.pipeline(
        "live",
        json!({
            "first": { "run": format!("echo one; touch '{}'; sleep 1", started.display()) },
            "second": { "run": "echo two; echo oops >&2", "after": ["first"] },
        }),
    );
    let mut runner = s.command(&["run", pipeline.to_str().expect("path")]);
    let mut runner = runner.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("run");
    let begun = std::time::Instant::now();
    while !started.exists() {
        assert!(begun.elapsed().as_secs() < 60, "the run never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let follower = s.command(&["logs", "live", "--follow"]).output().expect("follow");
    assert_eq!(runner.wait().expect("runner").code(), Some(0));
    assert_eq!(follower.status.code(), Some(0), "{}", stderr(&follower));
    let text = stdout(&follower);
    let first = text.find("first | one").unwrap_or_else(|| panic!("first missing: {text}"));
    let second = text.find("second | two").unwrap_or_else(|| panic!("second missing: {text}"));
    assert!(first < second, "completion order: {text}");
    assert!(text.contains("second | oops"), "stderr too: {text}");
}
