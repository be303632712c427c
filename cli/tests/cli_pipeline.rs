//! The `spindle` command's pipeline features, run as a built binary: TOML files, `env` and
//! `cwd`, matrix nodes gathered before their successors, predecessors' outputs (also after a
//! resume), `run --dry-run` and `graph show --format`, and bad input for each (exit 2,
//! nothing written).

mod cli_common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cli_common::{Scratch, text};
use serde_json::Value;

/// A TOML pipeline: `prep` (in `sub/`, with its own env over the pipeline's), a matrix
/// `build` over `x86` and `arm` after it, and `ship`, which reads every build's output.
const MATRIX_TOML: &str = r#"
name = "matrix"
env = { GREETING = "hello", WHO = "pipeline" }

[nodes.prep]
run = "pwd > where.txt; echo \"prep $GREETING $WHO\" >> ../log.txt"
cwd = "sub"
env = { WHO = "node" }

[nodes.build]
run = "echo \"build $SPINDLE_MATRIX_TARGET $SPINDLE_MATRIX\" >> log.txt; echo built-for-$SPINDLE_MATRIX"
after = ["prep"]
matrix = { target = ["x86", "arm"] }

[nodes.ship]
run = "echo ship >> log.txt; cat \"$SPINDLE_OUTPUT_BUILD_X86\" \"$SPINDLE_OUTPUT_BUILD_ARM\" > shipped.txt; ls \"$SPINDLE_OUTPUTS\" > listed.txt"
after = ["build"]
"#;

/// Runs `MATRIX_TOML` from the scratch directory (its `prep` runs in `sub/`).
fn run_matrix(s: &Scratch) -> std::process::Output {
    std::fs::create_dir(s.path("sub")).expect("sub");
    let pipeline = s.write("matrix.toml", MATRIX_TOML);
    let output = s.command().current_dir(s.dir.path()).arg("run").arg(&pipeline).output();
    output.expect("run spindle")
}

#[test]
fn a_toml_matrix_runs_each_instance_and_its_successor_reads_their_outputs() {
    let s = Scratch::new();
    let output = run_matrix(&s);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let log = s.lines();
    assert_eq!(log.first().map(String::as_str), Some("prep hello node"), "{log:?}");
    let builds: BTreeSet<&str> = log[1..3].iter().map(String::as_str).collect();
    assert_eq!(builds, BTreeSet::from(["build x86 x86", "build arm arm"]), "{log:?}");
    assert_eq!(log.get(3).map(String::as_str), Some("ship"), "after every instance: {log:?}");
    let shipped = std::fs::read_to_string(s.path("shipped.txt")).expect("shipped");
    assert_eq!(shipped, "built-for-x86\nbuilt-for-arm\n");
    let listed = std::fs::read_to_string(s.path("listed.txt")).expect("listed");
    assert!(listed.contains("build[x86].out") && listed.contains("prep.out"), "{listed}");
    let cwd = std::fs::read_to_string(s.path("sub/where.txt")).expect("prep ran in sub/");
    let sub = s.path("sub").canonicalize().expect("sub");
    assert_eq!(Path::new(cwd.trim()).canonicalize().expect("its cwd"), sub);
}

#[test]
fn a_failed_instance_fails_the_run_unless_an_error_edge_takes_it() {
    let s = Scratch::new();
    let log = s.path("log.txt");
    let nodes = format!(
        r#"{{"name":"m","nodes":{{
            "t":{{"run":"test $SPINDLE_MATRIX != bad","matrix":{{"v":["good","bad"]}}}},
            "next":{{"run":"echo next >> '{0}'","after":["t"]}},
            "handler":{{"run":"echo handler >> '{0}'","after":[{{"node":"t","on":"error"}}]}},
            "always":{{"run":"echo always >> '{0}'","after":[{{"node":"t","on":"any"}}]}}}}}}"#,
        log.display()
    );
    let output = s.run(&s.write("handled.json", &nodes));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines: BTreeSet<String> = s.lines().into_iter().collect();
    assert_eq!(lines, BTreeSet::from(["handler".into(), "always".into()]), "next is skipped");
    let unhandled = r#"{"name":"u","nodes":{"t":{"run":"test $SPINDLE_MATRIX != bad",
        "matrix":{"v":["good","bad"]}},"next":{"run":"true","after":["t"]}}}"#;
    let output = s.run(&s.write("unhandled.json", unhandled));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(text(&output.stderr).contains("FAILED t[bad]"), "{output:?}");
}

#[test]
fn a_missing_cwd_fails_the_attempt_with_the_reason() {
    let s = Scratch::new();
    let pipeline = s.write(
        "nocwd.json",
        r#"{"name":"c","nodes":{"a":{"run":"true","cwd":"gone","retries":1}}}"#,
    );
    let output = s.run(&pipeline);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(text(&output.stderr).contains("retry  a (attempt 1)"), "{output:?}");
    let graphs: Value =
        serde_json::from_slice(&s.spindle(&["--json", "graphs"]).stdout).expect("graphs as JSON");
    let id = graphs[0]["id"].as_str().expect("the run's id");
    let shown = s.spindle(&["graph", "show", id]);
    assert!(text(&shown.stdout).contains("is not a directory"), "{shown:?}");
}

#[test]
fn a_resumed_run_finds_its_predecessors_output_again() {
    let s = Scratch::new();
    let (marker, got) = (s.path("marker"), s.path("got.txt"));
    let second = format!(
        "if [ -e '{m}' ]; then cat \"$SPINDLE_OUTPUT_FIRST\" > '{g}'; else touch '{m}'; sleep 30; fi",
        m = marker.display(),
        g = got.display()
    );
    let nodes = serde_json::json!({ "name": "resume", "nodes": {
        "first": { "run": "echo from-first" },
        "second": { "run": second, "after": ["first"] },
    }});
    let pipeline = s.write("resume.json", &nodes.to_string());
    let mut runner = s.command();
    let mut child = runner
        .arg("run")
        .arg(&pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a run");
    let began = Instant::now();
    while !marker.exists() {
        assert!(began.elapsed() < Duration::from_secs(30), "the second node never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill -9 the runner");
    child.wait().expect("reap it");
    let runs = PathBuf::from(format!("{}.runs", s.db().display()));
    assert!(runs.is_dir(), "the outputs directory is beside the store");
    std::fs::remove_dir_all(&runs).expect("lose the outputs");
    let output = s.run(&pipeline);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(text(&output.stderr).contains("resuming"), "{output:?}");
    assert_eq!(std::fs::read_to_string(&got).expect("got"), "from-first\n");
}

/// The node and edge lines of a DOT graph as `drawn`: node ids, and (from, to, label).
struct Dot {
    nodes: BTreeSet<String>,
    edges: BTreeSet<(String, String, String)>,
}

/// Reads the quoted strings of each line of `dot`: a node line has one before `[`, an edge
/// line two around `->` and its label.
fn parse_dot(dot: &str) -> Dot {
    let mut parsed = Dot { nodes: BTreeSet::new(), edges: BTreeSet::new() };
    assert!(dot.starts_with("digraph ") && dot.trim_end().ends_with('}'), "{dot}");
    for line in dot.lines().map(str::trim) {
        let quoted = quoted_strings(line);
        if line.contains(" -> ") {
            assert_eq!(quoted.len(), 3, "an edge line: {line}");
            parsed.edges.insert((quoted[0].clone(), quoted[1].clone(), quoted[2].clone()));
        } else if line.starts_with('"') && line.ends_with("];") {
            parsed.nodes.insert(quoted[0].clone());
        }
    }
    parsed
}

/// The `"..."` strings of a line, unescaped.
fn quoted_strings(line: &str) -> Vec<String> {
    let mut strings = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut string = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => string.extend(chars.next()),
                '"' => break,
                c => string.push(c),
            }
        }
        strings.push(string);
    }
    strings
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let s = Scratch::new();
    let pipeline = s.write("matrix.toml", MATRIX_TOML);
    let pipeline = pipeline.to_str().expect("a UTF-8 path");
    let output = s.spindle(&["run", "--dry-run", "--format", "dot", pipeline]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let dot = parse_dot(&text(&output.stdout));
    let nodes: BTreeSet<&str> = dot.nodes.iter().map(String::as_str).collect();
    let want = ["prep", "build", "build[x86]", "build[arm]", "build[*]", "ship"];
    assert_eq!(nodes, BTreeSet::from(want));
    for (from, to, label) in [
        ("prep", "build", "ok"),
        ("build", "build[x86]", "x86"),
        ("build[arm]", "build[*]", "ok"),
        ("build[*]", "ship", "ok"),
    ] {
        let edge = (from.to_owned(), to.to_owned(), label.to_owned());
        assert!(dot.edges.contains(&edge), "{edge:?} in {:?}", dot.edges);
    }
    assert_eq!(dot.edges.len(), 6, "{:?}", dot.edges);
    let table = s.spindle(&["run", "--dry-run", pipeline]);
    assert!(text(&table.stdout).contains("target: x86 arm (2 instances)"), "{table:?}");
    let json = s.spindle(&["--json", "run", "--dry-run", pipeline]);
    let plan: Value = serde_json::from_slice(&json.stdout).expect("the plan as JSON");
    assert_eq!(plan["graph"]["nodes"].as_array().map(Vec::len), Some(6), "{plan}");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/matrix.toml");
    let output = s.spindle(&["run", "--dry-run", example]);
    assert_eq!(output.status.code(), Some(0), "the example is good: {output:?}");
    assert!(!s.db().exists(), "a dry run does not create the store");
    assert!(!s.path("log.txt").exists(), "nor run anything");
}

#[test]
fn graph_show_draws_a_finished_run_with_statuses() {
    let s = Scratch::new();
    assert_eq!(run_matrix(&s).status.code(), Some(0));
    let graphs: Value =
        serde_json::from_slice(&s.spindle(&["--json", "graphs"]).stdout).expect("graphs as JSON");
    let id = graphs[0]["id"].as_str().expect("the run's id");
    let dot = s.spindle(&["graph", "show", id, "--format", "dot"]);
    let drawn = parse_dot(&text(&dot.stdout));
    assert!(drawn.nodes.contains("build[x86]"), "{:?}", drawn.nodes);
    assert!(text(&dot.stdout).contains(r#"label="build[arm]\ncomplete""#), "{dot:?}");
    let mermaid = text(&s.spindle(&["graph", "show", id, "--format", "mermaid"]).stdout);
    assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
    assert!(mermaid.contains("[\"ship<br/>complete\"]") && mermaid.contains("-->|\"x86\"|"));
    let json = s.spindle(&["graph", "show", id, "--format", "json"]);
    let shown: Value = serde_json::from_slice(&json.stdout).expect("the graph as JSON");
    assert_eq!(shown["nodes"].as_array().map(Vec::len), Some(6), "{shown}");
    assert_eq!(shown["edges"].as_array().map(Vec::len), Some(6), "{shown}");
    let same: Value = serde_json::from_slice(&s.spindle(&["--json", "graph", "show", id]).stdout)
        .expect("--json");
    assert_eq!(same["nodes"], shown["nodes"], "--json is --format json");
    let table = text(&s.spindle(&["graph", "show", id]).stdout);
    assert!(table.contains("build[*]") && table.contains("complete"), "{table}");
}

#[test]
fn bad_input_for_each_feature_exits_2_naming_it_and_writes_nothing() {
    let s = Scratch::new();
    let cases = [
        ("bad.toml", "name = \"p\"\n[nodes.a\nrun = \"true\"\n", "line 2"),
        ("bad.yaml", "name: p\n", ".json or .toml"),
        ("env.json", r#"{"name":"p","nodes":{"a":{"run":"true","env":{"A=B":"x"}}}}"#, "\"a\""),
        (
            "reserved.toml",
            "name = \"p\"\n[nodes.a]\nrun = \"true\"\nenv = { SPINDLE_NODE = \"x\" }\n",
            "SPINDLE_",
        ),
        ("matrix.json", r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{"v":[]}}}}"#, "\"m\""),
        (
            "twice.json",
            r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{"v":["a","a"]}}}}"#,
            "twice",
        ),
        ("cwd.json", r#"{"name":"p","nodes":{"a":{"run":"true","cwd":""}}}"#, "cwd"),
    ];
    for (file, contents, reason) in cases {
        let path = s.write(file, contents);
        for dry_run in [false, true] {
            let mut command = s.command();
            command.arg("run").args(dry_run.then_some("--dry-run")).arg(&path);
            let output = command.output().expect("run spindle");
            let stderr = text(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{file}: {stderr}");
            assert!(stderr.contains(file) && stderr.contains(reason), "{file}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        }
    }
    let good = s.write("good.json", r#"{"name":"p","nodes":{"a":{"run":"true"}}}"#);
    let good = good.to_str().expect("a UTF-8 path");
    let output = s.spindle(&["run", "--dry-run", "--format", "svg", good]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let output = s.spindle(&["run", "--format", "dot", good]);
    assert_eq!(output.status.code(), Some(2), "--format needs --dry-run: {output:?}");
    assert!(!s.db().exists(), "nothing was written");
    let output = s.spindle(&["graph", "show", "x", "--format", "png"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}

/// `spindle run [--dry-run] PATH`, killed if it takes more than 20 s, under a 4 GiB address
/// space (a read without limit fails there rather than exit 2).
fn run_bounded(s: &Scratch, path: &Path, dry_run: bool) -> std::process::Output {
    let mut command = std::process::Command::new("sh");
    command.args(["-c", "ulimit -v 4194304; exec \"$@\"", "sh", cli_common::BIN]);
    command.arg("--db").arg(s.db()).arg("run").args(dry_run.then_some("--dry-run")).arg(path);
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
    let mut child = command.spawn().expect("start spindle");
    let began = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if began.elapsed() > Duration::from_secs(20) {
            child.kill().expect("kill");
            panic!("spindle run {} did not end within 20 s", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("its output")
}

/// The store's bytes (file and WAL; empty when missing).
fn store_bytes(s: &Scratch) -> (Vec<u8>, Vec<u8>) {
    let read = |name: &str| std::fs::read(s.path(name)).unwrap_or_default();
    (read("spindle.db"), read("spindle.db-wal"))
}

/// Each of `cases` (a path and what its one-line error says) exits 2 at once, with and
/// without `--dry-run`, and leaves the store as it was.
fn refused_at_once(s: &Scratch, cases: &[(PathBuf, &str)]) {
    let before = store_bytes(s);
    for (path, reason) in cases {
        for dry_run in [true, false] {
            let output = run_bounded(s, path, dry_run);
            let stderr = text(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{}: {output:?}", path.display());
            let name = path.file_name().and_then(|n| n.to_str()).expect("a name");
            assert!(stderr.contains(name) && stderr.contains(reason), "{reason:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
            assert!(!stderr.contains('\u{1b}') && !stderr.contains('\0'), "{stderr:?}");
        }
    }
    assert!(store_bytes(s) == before, "the store is as it was (or still missing)");
}

#[test]
fn hostile_pipeline_paths_are_refused_at_once_without_being_read() {
    let s = Scratch::new();
    let zero = s.path("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("a symlink to /dev/zero");
    let fifo = s.path("fifo.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success(), "mkfifo");
    let dir = s.path("x.json");
    std::fs::create_dir(&dir).expect("a directory named x.json");
    let good = r#"{"name":"p","nodes":{"a":{"run":"true"}}}"#;
    // Valid JSON past the cap: only its size is wrong.
    let big = s.write("big.json", &format!("{good}{}", " ".repeat(16 * 1024 * 1024)));
    let cases = [
        (zero, "a character device, not a regular file"),
        (fifo, "a FIFO, not a regular file"),
        (dir, "a directory, not a regular file"),
        (big, "larger than 16 MiB"),
    ];
    refused_at_once(&s, &cases);
    assert!(!s.db().exists(), "no store was created");
    let link = s.path("link.json");
    std::os::unix::fs::symlink(s.write("good.json", good), &link).expect("a symlink");
    let output = s.run(&link);
    assert_eq!(output.status.code(), Some(0), "a symlink to a regular file runs: {output:?}");
    refused_at_once(&s, &cases);
}

#[test]
fn nul_in_a_command_and_control_characters_in_the_name_exit_2_before_the_store_opens() {
    let s = Scratch::new();
    let nul = s.write(
        "nul.json",
        r#"{"name":"p","nodes":{"a":{"run":"true"},"bad":{"run":"echo a\u0000b"}}}"#,
    );
    let escape = s.write("escape.json", r#"{"name":"p\u001b[2J","nodes":{"a":{"run":"true"}}}"#);
    let newline = s.write("newline.toml", "name = \"a\\nb\"\n[nodes.a]\nrun = \"true\"\n");
    let cases = [
        (nul, "node \"bad\": \"run\" holds NUL"),
        (escape, "control character '\\u{1b}'"),
        (newline, "control character '\\n'"),
    ];
    refused_at_once(&s, &cases);
    assert!(!s.db().exists(), "no store was created");
    assert_eq!(
        s.run(&s.write("good.json", r#"{"name":"p","nodes":{"a":{"run":"true"}}}"#)).status.code(),
        Some(0)
    );
    refused_at_once(&s, &cases);
}
