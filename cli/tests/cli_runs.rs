//! The `spindle` command's daily questions, run as a built binary: `runs` (which runs, how
//! they went), `RUN` arguments (an id prefix or a pipeline's name), `retry` (re-run what
//! failed, keep what succeeded), and `logs` (what a node printed, also followed from a second
//! process while the run is live). Bad input exits 2 and writes nothing.

mod cli_common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use cli_common::{BIN, Scratch, stderr, stdout};
use serde_json::{Value, json};

/// What only these tests ask of a scratch store.
impl Scratch {
    /// Writes the pipeline `name` with `nodes`.
    fn pipeline(&self, name: &str, nodes: Value) -> PathBuf {
        self.write(&format!("{name}.json"), &json!({ "name": name, "nodes": nodes }).to_string())
    }

    /// A command that appends `what` to the log.
    fn append(&self, what: &str) -> String {
        format!("echo {what} >> '{}'", self.path("log.txt").display())
    }

    /// Every byte the store keeps (its file, its WAL) and the outputs directories: what a
    /// refused command must leave as it was.
    fn snapshot(&self) -> (Vec<u8>, Vec<u8>, Vec<String>) {
        let read = |name: &str| std::fs::read(self.path(name)).unwrap_or_default();
        let dirs = std::fs::read_dir(self.path("spindle.db.runs"))
            .map(|entries| entries.flatten().map(|e| e.path().display().to_string()).collect())
            .unwrap_or_default();
        (read("spindle.db"), read("spindle.db-wal"), dirs)
    }

    /// Starts `spindle run PIPELINE` in the background and waits until its run exists (so
    /// that `logs` can name it).
    fn start(&self, pipeline: &std::path::Path) -> std::process::Child {
        let mut runner = self.command_with(&["run", pipeline.to_str().expect("path")]);
        let runner = runner.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("run");
        let begun = std::time::Instant::now();
        while !self.spindle(&["runs"]).status.success() || self.runs(&[]).is_empty() {
            assert!(begun.elapsed().as_secs() < 60, "the run never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        runner
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
    let first = text.find("== test (attempt 1): exit 1").unwrap_or_else(|| panic!("{text}"));
    let second = text.find("== test (attempt 2): exit 0").unwrap_or_else(|| panic!("{text}"));
    assert!(first < second, "attempts in the order they ended: {text}");
    assert!(text.contains("testing attempt 1\n") && text.contains("testing attempt 2\n"), "{text}");
    assert!(!text.contains("fetch"), "only test's output: {text}");

    let all = stdout(&s.spindle(&["logs", "flaky"]));
    for line in
        ["fetch | == attempt 1: exit 0", "test | testing attempt 2", "package | == attempt 1"]
    {
        assert!(all.contains(line), "{line:?} in {all}");
    }
}

#[test]
fn logs_of_a_run_without_a_live_log_show_what_each_node_kept() {
    let s = Scratch::new();
    let pipeline = s.pipeline("old", json!({ "a": { "run": "echo kept; exit 4" } }));
    assert_eq!(s.run(&pipeline).status.code(), Some(1));
    // As a run from before live logs: only the nodes' own outputs.
    let pruned = s.spindle(&["prune", "--older-than", "0s", "--json"]);
    let report: Value = serde_json::from_slice(&pruned.stdout).expect("prune --json");
    assert!(report["log_events"].as_u64().is_some_and(|n| n >= 2), "{report}");
    assert_eq!(report["output_dirs"], 1, "{report}");
    let runs_dir = s.path("spindle.db.runs");
    assert_eq!(std::fs::read_dir(&runs_dir).map(Iterator::count).unwrap_or(0), 0, "removed");
    let text = stdout(&s.spindle(&["logs", "old", "a"]));
    assert!(text.contains("== a (attempt 1): failed"), "{text}");
    assert!(text.contains("kept"), "{text}");
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
    let before = s.snapshot();
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
    assert!(s.snapshot() == before, "nothing written");
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

    let before = s.snapshot();
    for args in [
        vec!["runs", "--status", "sideways"],
        vec!["runs", "--since", "yesterday"],
        vec!["logs", "nothing-like-it"],
        vec!["logs", "good", "no-such-node"],
        vec!["graph", "show", "nothing-like-it"],
    ] {
        let output = s.spindle(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
    }
    assert!(s.snapshot() == before, "nothing written");
}

#[test]
fn logs_follow_in_a_second_process_streams_output_while_the_command_runs() {
    let s = Scratch::new();
    let release = s.path("release");
    let wait = format!("while ! test -e '{}'; do sleep 0.05; done", release.display());
    let pipeline = s.pipeline(
        "live",
        json!({
            "first": { "run": format!("echo tick; {wait}; echo tock") },
            "second": { "run": "echo two; echo oops >&2", "after": ["first"] },
        }),
    );
    let mut runner = s.start(&pipeline);
    let mut follower = s.command_with(&["logs", "live", "--follow"]);
    let mut follower = follower.stdout(Stdio::piped()).spawn().expect("follow");
    let mut lines = BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    assert_eq!(first, "first | tick", "printed while the command still runs");
    std::fs::write(&release, "").expect("release the command");
    let rest: Vec<String> = lines.map(|line| line.expect("utf-8")).collect();
    assert_eq!(runner.wait().expect("runner").code(), Some(0));
    assert_eq!(follower.wait().expect("follower").code(), Some(0), "ends with the run");
    let rest = rest.join("\n");
    let tock = rest.find("first | tock").unwrap_or_else(|| panic!("tock missing: {rest}"));
    let two = rest.find("second | two").unwrap_or_else(|| panic!("two missing: {rest}"));
    assert!(tock < two, "in order: {rest}");
    assert!(rest.contains("second | oops"), "stderr too: {rest}");
    assert!(rest.contains("first | == attempt 1: exit 0"), "{rest}");
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish() {
    let s = Scratch::new();
    for (shell, marker) in
        [("bash", "complete -F"), ("zsh", "#compdef spindle"), ("fish", "complete -c spindle")]
    {
        let output = s.spindle(&["completions", shell]);
        assert_eq!(output.status.code(), Some(0), "{shell}: {}", stderr(&output));
        let script = stdout(&output);
        assert!(script.contains(marker), "{shell}: {marker:?} missing");
        assert!(script.contains("retry") && script.contains("logs"), "{shell}: commands named");
    }
    let bad = s.spindle(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(!s.path("spindle.db").exists(), "completions never open the store");
}

#[test]
fn quiet_prints_nothing_but_the_exit_code_tells() {
    let s = Scratch::new();
    let good = s.pipeline("good", json!({ "a": { "run": "echo hi" } }));
    let output = s.spindle(&["--quiet", "run", good.to_str().expect("path")]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!((stdout(&output), stderr(&output)), (String::new(), String::new()));
    let bad = s.pipeline("bad", json!({ "a": { "run": "exit 1" } }));
    let output = s.spindle(&["-q", "run", bad.to_str().expect("path")]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!((stdout(&output), stderr(&output)), (String::new(), String::new()));
}

/// `spindle ARGS` under a pseudo-terminal (`script`), as a person at a terminal runs it.
fn at_terminal(s: &Scratch, args: &str, no_color: bool) -> String {
    let db = s.path("spindle.db");
    let command = format!("{BIN} --db '{}' {args}", db.display());
    let mut script = Command::new("script");
    script.args(["-qec", &command, "/dev/null"]).env_remove("NO_COLOR");
    if no_color {
        script.env("NO_COLOR", "1");
    }
    let output = script.output().expect("script (util-linux) runs");
    assert!(output.status.success(), "{args}: {}", stderr(&output));
    stdout(&output)
}

#[test]
fn status_words_are_coloured_on_a_terminal_unless_no_color_or_never() {
    let s = Scratch::new();
    let good = s.pipeline("good", json!({ "a": { "run": "true" } }));
    assert_eq!(s.run(&good).status.code(), Some(0));
    let green = "\u{1b}[32m";
    assert!(at_terminal(&s, "runs", false).contains(green), "coloured at a terminal");
    assert!(!at_terminal(&s, "runs", true).contains('\u{1b}'), "NO_COLOR is respected");
    assert!(!at_terminal(&s, "--color never runs", false).contains('\u{1b}'));
    assert!(!stdout(&s.spindle(&["runs"])).contains('\u{1b}'), "not coloured into a pipe");
    assert!(stdout(&s.spindle(&["--color", "always", "runs"])).contains(green));
}

#[test]
fn errors_and_failures_say_what_to_do_next() {
    let s = Scratch::new();
    let missing = s.spindle(&["runs"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("spindle run FILE"), "{}", stderr(&missing));
    let bad = s.pipeline("bad", json!({ "a": { "run": "exit 1" } }));
    let failed = s.run(&bad);
    assert_eq!(failed.status.code(), Some(1));
    let summary = stdout(&failed);
    assert!(summary.contains("spindle logs") && summary.contains("spindle retry"), "{summary}");
    let unknown = s.spindle(&["logs", "nothing-like-it"]);
    assert!(stderr(&unknown).contains("`spindle runs` lists them"), "{}", stderr(&unknown));
    let graph = s.spindle(&["graph", "show", "no-such-graph"]);
    assert_eq!(graph.status.code(), Some(2));
    assert!(stderr(&graph).contains("`spindle runs` lists them"), "{}", stderr(&graph));
    let by_name = s.spindle(&["graph", "show", "bad"]);
    assert_eq!(by_name.status.code(), Some(0), "graph show takes a RUN: {}", stderr(&by_name));
}

#[test]
fn a_retry_killed_mid_node_resumes_with_the_next_retry_and_runs_nothing_twice_that_finished() {
    let s = Scratch::new();
    let (fixed, once) = (s.path("fixed"), s.path("once"));
    let b = format!(
        "test -e '{}' || exit 1; if test -e '{}'; then {}; else touch '{}'; sleep 30; fi",
        fixed.display(),
        once.display(),
        s.append("b"),
        once.display()
    );
    let pipeline = s.pipeline(
        "resumable",
        json!({
            "a": { "run": s.append("a") },
            "b": { "run": b, "after": ["a"] },
            "c": { "run": s.append("c"), "after": ["b"] },
        }),
    );
    assert_eq!(s.run(&pipeline).status.code(), Some(1));
    std::fs::write(&fixed, "").expect("fix");
    let mut retry = s.command_with(&["retry", "resumable"]);
    let mut retry = retry.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("retry");
    let begun = std::time::Instant::now();
    while !once.exists() {
        assert!(begun.elapsed().as_secs() < 60, "b never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    retry.kill().expect("kill -9");
    retry.wait().expect("reaped");
    // Refused before the store is opened to run: not even the recovery of the killed run
    // (which a runner's open does) is written.
    let before = s.snapshot();
    let with_node = s.spindle(&["retry", "resumable", "--node", "b"]);
    assert_eq!(with_node.status.code(), Some(2), "{}", stderr(&with_node));
    assert!(stderr(&with_node).contains("has not finished"), "{}", stderr(&with_node));
    assert!(s.snapshot() == before, "nothing written");

    let resumed = s.spindle(&["retry", "resumable"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(stderr(&resumed).contains("resuming"), "{}", stderr(&resumed));
    assert_eq!(s.lines(), ["a", "b", "c"], "a kept, b run again after the kill, c once");
    assert_eq!(s.runs(&[])[0]["status"], "complete");
}

#[test]
fn retry_of_a_toml_matrix_run_reruns_only_the_failed_instance_then_what_gathers_it() {
    let s = Scratch::new();
    let (log, fixed) = (s.path("log.txt"), s.path("fixed"));
    let toml = format!(
        r#"name = "mx"
env = {{ WHO = "ci" }}

[nodes.build]
run = """
echo built $SPINDLE_MATRIX $WHO >> '{log}'
if [ $SPINDLE_MATRIX = arm ]; then
  while ! test -e "$SPINDLE_OUTPUTS/build[x86].out"; do sleep 0.02; done
  test -e '{fixed}'
fi"""
matrix = {{ target = ["x86", "arm"] }}
timeout_s = 60

[nodes.ship]
run = "echo ship >> '{log}'"
after = ["build"]
"#,
        log = log.display(),
        fixed = fixed.display()
    );
    let pipeline = s.path("mx.toml");
    std::fs::write(&pipeline, toml).expect("write");
    // arm fails once x86 has succeeded (its output file is written after its commit), so x86
    // has finished and is kept.
    assert_eq!(s.run(&pipeline).status.code(), Some(1), "arm fails");
    std::fs::write(&fixed, "").expect("fix");
    // The file is gone: the run kept its pipeline.
    std::fs::remove_file(&pipeline).expect("remove the file");
    let retried = s.spindle(&["retry", "mx"]);
    assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
    let mut lines = s.lines();
    assert_eq!(lines.pop().as_deref(), Some("ship"), "ship after every instance");
    lines.sort();
    assert_eq!(lines, ["built arm ci", "built arm ci", "built x86 ci"], "x86 kept");
    let logs = stdout(&s.spindle(&["logs", "mx", "build[arm]"]));
    assert!(logs.contains("(attempt 1): exit 1") && logs.contains("(attempt 2): exit 0"), "{logs}");
}

#[test]
fn two_retries_started_together_share_the_run_and_run_the_failed_node_once() {
    let s = Scratch::new();
    let fixed = s.path("fixed");
    let test = format!(
        "test -e '{}' && sleep 0.3; {}; test -e '{}'",
        fixed.display(),
        s.append("test"),
        fixed.display()
    );
    let pipeline = s.pipeline("twice", json!({ "test": { "run": test } }));
    assert_eq!(s.run(&pipeline).status.code(), Some(1));
    std::fs::write(&fixed, "").expect("fix");
    let start = || {
        let mut retry = s.command_with(&["retry", "twice"]);
        retry.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("retry")
    };
    let (first, second) = (start(), start());
    let (first, second) = (first.wait_with_output(), second.wait_with_output());
    let (first, second) = (first.expect("first"), second.expect("second"));
    // Each one runs the retry (alone, or joining the other), or, when the other had already
    // finished it before it looked, finds nothing left to retry.
    for output in [&first, &second] {
        let nothing_left = output.status.code() == Some(2)
            && stderr(output).contains("has no failed node to retry");
        assert!(output.status.code() == Some(0) || nothing_left, "{}", stderr(output));
    }
    assert!([&first, &second].iter().any(|o| o.status.code() == Some(0)), "one ran it");
    assert_eq!(s.lines(), ["test", "test"], "once failed, once retried: never twice at once");
    assert_eq!(s.runs(&[])[0]["status"], "complete");
}

/// Every live log event of the store's default tenant (streams `custom:log:*`), read with the
/// library.
fn log_events(s: &Scratch) -> Vec<spindle::Event> {
    let store = spindle::Store::open(s.db()).expect("open the store");
    let mut events = Vec::new();
    loop {
        let after = events.last().map_or(0, |event: &spindle::Event| event.position);
        let page = store.events().read_all(after, 1000).expect("read");
        if page.is_empty() {
            break;
        }
        events.extend(page);
    }
    store.close().expect("close");
    events.retain(|event| {
        event.stream.kind() == spindle::StreamKind::Custom && event.stream.id().starts_with("log:")
    });
    events
}

#[test]
fn each_node_logs_to_a_stream_of_its_own_and_prune_removes_them_all() {
    let s = Scratch::new();
    let long = "n".repeat(200);
    let pipeline = s.pipeline(
        "streams",
        json!({ "a": { "run": "echo from-a" }, long.as_str(): { "run": "echo from-long" } }),
    );
    assert_eq!(s.run(&pipeline).status.code(), Some(0));
    let run = s.runs(&[])[0]["run"].as_str().expect("id").to_owned();
    let events = log_events(&s);
    let streams: std::collections::BTreeSet<&str> =
        events.iter().map(|event| event.stream.id()).collect();
    assert_eq!(streams.len(), 3, "the run's index and a stream per node: {streams:?}");
    assert!(streams.contains(format!("log:{run}:a").as_str()), "{streams:?}");
    assert!(streams.iter().all(|id| id.len() <= 256), "within the id limit: {streams:?}");
    let index: Vec<&spindle::Event> =
        events.iter().filter(|e| e.stream.id() == format!("log:{run}")).collect();
    assert!(index.iter().all(|e| e.payload.get("text").is_none()), "no output in the index");
    let long_log = stdout(&s.spindle(&["logs", "streams", &long]));
    assert!(long_log.contains("from-long") && !long_log.contains("from-a"), "{long_log}");
    let pruned = s.spindle(&["prune", "--older-than", "0s", "--json"]);
    let report: Value = serde_json::from_slice(&pruned.stdout).expect("prune --json");
    assert_eq!(report["log_events"].as_u64(), Some(events.len() as u64), "{report}");
    assert!(log_events(&s).is_empty(), "every live log stream is emptied");
}

#[test]
fn a_run_logged_in_the_old_run_wide_stream_still_shows_its_logs() {
    let s = Scratch::new();
    let pipeline = s.pipeline("old", json!({ "a": { "run": "true" }, "b": { "run": "true" } }));
    assert_eq!(s.run(&pipeline).status.code(), Some(0));
    assert_eq!(s.spindle(&["prune", "--older-than", "0s"]).status.code(), Some(0));
    let run = s.runs(&[])[0]["run"].as_str().expect("id").to_owned();
    // As an older Spindle wrote it: every node's events in custom:log:RUN.
    let store = spindle::Store::open(s.db()).expect("open the store");
    let stream = spindle::Stream::custom(format!("log:{run}"));
    for (event_type, payload) in [
        ("output", json!({ "node": "a", "attempt": 1, "text": "old a line\n" })),
        ("output", json!({ "node": "b", "attempt": 1, "text": "old b line\n" })),
        ("ended", json!({ "node": "b", "attempt": 1, "how": "exit 0" })),
        ("ended", json!({ "node": "a", "attempt": 1, "how": "exit 3" })),
    ] {
        store.events().append(&stream, event_type, payload).expect("append");
    }
    store.close().expect("close");
    let a = stdout(&s.spindle(&["logs", "old", "a"]));
    assert_eq!(a, "== a (attempt 1): exit 3\nold a line\n");
    let all = stdout(&s.spindle(&["logs", "old"]));
    assert_eq!(
        all,
        "b | == attempt 1: exit 0\nb | old b line\na | == attempt 1: exit 3\na | old a line\n"
    );
    let followed = stdout(&s.spindle(&["logs", "old", "--follow"]));
    assert_eq!(
        followed,
        "a | old a line\nb | old b line\nb | == attempt 1: exit 0\na | == attempt 1: exit 3\n"
    );
    let one = stdout(&s.spindle(&["logs", "old", "b", "--follow"]));
    assert_eq!(one, "old b line\n== b (attempt 1): exit 0\n");
}

#[test]
fn logs_follow_of_one_node_prints_only_its_output_while_others_run() {
    let s = Scratch::new();
    let release = s.path("release");
    let wait = format!("while ! test -e '{}'; do sleep 0.05; done", release.display());
    let pipeline = s.pipeline(
        "pair",
        json!({
            "a": { "run": format!("echo a-first; {wait}; echo a-last") },
            "b": { "run": format!("echo b-first; {wait}; echo b-last") },
        }),
    );
    let mut runner = s.start(&pipeline);
    let follow = |args: &[&str]| {
        let mut follower = s.command_with(args).stdout(Stdio::piped()).spawn().expect("follow");
        let lines = BufReader::new(follower.stdout.take().expect("stdout")).lines();
        (follower, lines.map(|line| line.expect("utf-8")))
    };
    let (mut one, mut one_lines) = follow(&["logs", "pair", "b", "--follow"]);
    let (mut all, mut all_lines) = follow(&["logs", "pair", "--follow"]);
    assert_eq!(one_lines.next().as_deref(), Some("b-first"), "while b runs");
    let mut firsts = [all_lines.next(), all_lines.next()].map(Option::unwrap_or_default);
    firsts.sort();
    assert_eq!(firsts, ["a | a-first", "b | b-first"], "both nodes' streams, while they run");
    std::fs::write(&release, "").expect("release the commands");
    let (one_rest, all_rest): (Vec<String>, Vec<String>) =
        (one_lines.collect(), all_lines.collect());
    assert_eq!(runner.wait().expect("runner").code(), Some(0));
    assert_eq!(one.wait().expect("follower").code(), Some(0), "ends with the run");
    assert_eq!(all.wait().expect("follower").code(), Some(0), "ends with the run");
    assert_eq!(one_rest, ["b-last", "== b (attempt 1): exit 0"], "only b's output");
    for node in ["a", "b"] {
        let at = |line: String| all_rest.iter().position(|l| *l == line);
        let (last, header) =
            (at(format!("{node} | {node}-last")), at(format!("{node} | == attempt 1: exit 0")));
        assert!(last.is_some() && last < header, "{node}'s last line, then its end: {all_rest:?}");
    }
    assert_eq!(all_rest.len(), 4, "{all_rest:?}");
}
