//! `spindle backup DEST` and `spindle restore SRC --db DEST`, run as a built binary: a store
//! backed up (after a run failed, or while a run is live and writing its logs) and restored
//! into another path runs its pipeline on there, resumed, with nothing that finished run
//! twice; a restore refuses a store that is open and writes nothing; a taken path, a bad
//! backup and a PostgreSQL store are refused with exit 2, saying what to do.

mod cli_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

    /// The binary on the store file `name` of this directory with `args`, to its end.
    fn on(&self, name: &str, args: &[&str]) -> std::process::Output {
        let mut command = Command::new(BIN);
        command.arg("--db").arg(self.path(name)).env("SPINDLE_LEASE_MS", "1000");
        command.env("NO_COLOR", "1").args(args).output().expect("run spindle")
    }

    /// `runs --json` of the store file `name`.
    fn runs_of(&self, name: &str) -> Vec<Value> {
        let output = self.on(name, &["runs", "--json"]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let listed: Value = serde_json::from_slice(&output.stdout).expect("runs --json parses");
        listed.as_array().expect("an array").clone()
    }
}

/// Asserts that `output` exited with `code`, showing its stderr otherwise.
fn exits(output: &std::process::Output, code: i32) {
    assert_eq!(output.status.code(), Some(code), "{}", stderr(output));
}

#[test]
fn a_failed_run_backed_up_and_restored_elsewhere_is_retried_there_keeping_what_succeeded() {
    let s = Scratch::new();
    let fixed = s.path("fixed");
    let test = format!("{}; test -e '{}'", s.append("test$SPINDLE_ATTEMPT"), fixed.display());
    let pipeline = s.pipeline(
        "flaky",
        json!({
            "fetch": { "run": s.append("fetch") },
            "test": { "run": test, "after": ["fetch"] },
            "package": { "run": s.append("package"), "after": ["test"] },
        }),
    );
    exits(&s.run(&pipeline), 1);
    let backed_up = s.spindle(&["backup", s.path("copy.db").to_str().expect("path")]);
    exits(&backed_up, 0);
    assert!(stdout(&backed_up).contains("backed up"), "{}", stdout(&backed_up));
    let restored = s.on("restored.db", &["restore", s.path("copy.db").to_str().expect("path")]);
    exits(&restored, 0);
    assert!(stdout(&restored).contains("restored"), "{}", stdout(&restored));

    std::fs::write(&fixed, "").expect("fix");
    exits(&s.on("restored.db", &["retry", "flaky"]), 0);
    assert_eq!(s.lines(), ["fetch", "test1", "test2", "package"], "fetch kept, test retried");
    assert_eq!(s.runs_of("restored.db")[0]["status"], "complete");
    assert_eq!(s.runs_of("spindle.db")[0]["status"], "failed", "the original as it was");
}

#[test]
fn a_live_run_backed_up_and_restored_elsewhere_resumes_there_and_runs_nothing_twice() {
    let s = Scratch::new();
    let once = s.path("once");
    // b stops in the middle of its first attempt (it streams its output meanwhile: the run
    // writes while the copy is taken); the next attempt finishes.
    let b = format!(
        "if test -e '{}'; then {}; else touch '{}'; while true; do echo working; sleep 0.1; done; fi",
        once.display(),
        s.append("b"),
        once.display()
    );
    let pipeline = s.pipeline(
        "live",
        json!({
            "a": { "run": s.append("a") },
            "b": { "run": b, "after": ["a"] },
            "c": { "run": s.append("c"), "after": ["b"] },
        }),
    );
    let mut runner = s.command_with(&["run", pipeline.to_str().expect("path")]);
    let mut runner = runner.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("run");
    let begun = Instant::now();
    while !once.exists() {
        assert!(begun.elapsed() < Duration::from_secs(60), "b never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    exits(&s.spindle(&["backup", s.path("live.bak").to_str().expect("path")]), 0);
    runner.kill().expect("kill -9 the runner");
    runner.wait().expect("reaped");

    exits(&s.on("restored.db", &["restore", s.path("live.bak").to_str().expect("path")]), 0);
    let resumed = s.on("restored.db", &["run", pipeline.to_str().expect("path")]);
    exits(&resumed, 0);
    assert!(stderr(&resumed).contains("resuming"), "{}", stderr(&resumed));
    assert_eq!(s.lines(), ["a", "b", "c"], "a kept from the copy, b run again, c once");
    let runs = s.runs_of("restored.db");
    assert_eq!((runs.len(), &runs[0]["status"]), (1, &json!("complete")), "the same run");
    assert_eq!(s.runs_of("spindle.db")[0]["status"], "running", "the original as it was left");
}

/// Every file of `dir` with its bytes (only the names of the files of the open store `open`):
/// what a refused command must leave as it was.
fn snapshot(dir: &Path, open: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let name = path.file_name().expect("a name").to_string_lossy().into_owned();
            let bytes = if name.starts_with(open) {
                Vec::new()
            } else {
                std::fs::read(&path).expect("read")
            };
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

/// The device and inode of the file at `path`.
fn identity(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).expect("metadata");
    (meta.dev(), meta.ino())
}

#[test]
fn a_restore_refuses_a_store_that_is_open_and_writes_nothing() {
    let s = Scratch::new();
    let pipeline = s.pipeline("one", json!({ "a": { "run": s.append("a") } }));
    exits(&s.run(&pipeline), 0);
    exits(&s.spindle(&["backup", s.path("copy.db").to_str().expect("path")]), 0);
    // Another store file, open to write in this process (as an application keeps it).
    let other = spindle::Store::open(s.path("app.db")).expect("open");
    other.events().append(spindle::Stream::custom("mine"), "x", json!(1)).expect("append");
    // The open store's own files change as it checkpoints; the others must not, nor may a
    // file be added or the store's file replaced.
    let before = snapshot(s.dir.path(), "app.db");
    let inode = identity(&s.path("app.db"));
    let refused = s.on("app.db", &["restore", s.path("copy.db").to_str().expect("path")]);
    exits(&refused, 3);
    assert!(stderr(&refused).contains("a store is open on"), "{}", stderr(&refused));
    assert!(snapshot(s.dir.path(), "app.db") == before, "nothing written");
    assert_eq!(identity(&s.path("app.db")), inode, "the store's file is the same file");
    assert_eq!(other.events().head(spindle::Stream::custom("mine")).expect("head"), 1);
    other.close().expect("close");

    exits(&s.on("app.db", &["restore", s.path("copy.db").to_str().expect("path")]), 0);
    assert_eq!(s.runs_of("app.db").len(), 1, "the backup's run");
}

#[test]
fn taken_paths_bad_backups_and_postgres_stores_are_refused_saying_what_to_do() {
    let s = Scratch::new();
    let pipeline = s.pipeline("one", json!({ "a": { "run": s.append("a") } }));
    let missing = s.spindle(&["backup", s.path("copy.db").to_str().expect("path")]);
    exits(&missing, 2);
    assert!(stderr(&missing).contains("no store"), "{}", stderr(&missing));
    exits(&s.run(&pipeline), 0);

    let taken = s.write("taken.db", "keep me");
    let refused = s.spindle(&["backup", taken.to_str().expect("path")]);
    exits(&refused, 2);
    assert!(stderr(&refused).contains("exists"), "{}", stderr(&refused));
    assert_eq!(std::fs::read_to_string(&taken).expect("read"), "keep me");

    let json = s.spindle(&["--json", "backup", s.path("copy.db").to_str().expect("path")]);
    exits(&json, 0);
    let report: Value = serde_json::from_slice(&json.stdout).expect("the report parses");
    assert!(report["pages"].as_u64().is_some_and(|pages| pages > 0), "{report}");
    let checked = s.on("copy.db", &["--json", "check"]);
    exits(&checked, 0);
    let checked: Value = serde_json::from_slice(&checked.stdout).expect("the check parses");
    assert_eq!(report["schema_version"], checked["user_version"], "the copy's version");

    let notes = s.write("notes.txt", "not a store");
    let bad = s.on("new.db", &["restore", notes.to_str().expect("path")]);
    exits(&bad, 2);
    assert!(stderr(&bad).contains("cannot be restored"), "{}", stderr(&bad));
    assert!(!s.path("new.db").exists());
    let not_a_store = s.on("notes.txt", &["restore", s.path("copy.db").to_str().expect("path")]);
    exits(&not_a_store, 2);
    assert!(stderr(&not_a_store).contains("not a Spindle store"), "{}", stderr(&not_a_store));
    assert_eq!(std::fs::read_to_string(&notes).expect("read"), "not a store");

    let url = "postgres://app@localhost/app";
    let mut postgres = Command::new(BIN);
    let backup = postgres.args(["--db", url, "backup", "x.dump"]).output().expect("run");
    exits(&backup, 2);
    assert!(stderr(&backup).contains("pg_dump"), "{}", stderr(&backup));
    let mut postgres = Command::new(BIN);
    let restore = postgres.args(["--db", url, "restore", "x.dump"]).output().expect("run");
    exits(&restore, 2);
    assert!(stderr(&restore).contains("pg_restore"), "{}", stderr(&restore));
}
