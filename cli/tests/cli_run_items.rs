//! A run's queue items belong to the run, tested against the built binary: `spindle queue
//! requeue` refuses them (exit 2, nothing written); an item requeued or cancelled through the
//! library anyway never makes a node's command run twice at once: a stale item (of an earlier
//! firing of its node) is dropped unrun, whether it was requeued before or during a `retry`,
//! and a live run whose pending item is cancelled fails that node instead of waiting forever.
//! Each command writes its own start and end times, so "never twice at once" is read from
//! what the commands saw, not from the store. `spindle prune` drops a finished run's dead
//! items. (The dashboard's refusals are in `ui_api.rs`.)

mod cli_common;

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cli_common::{Scratch, stderr};
use serde_json::{Value, json};
use spindle::{ItemFilter, ItemStatus, Options, Page, QueueItem, Store};

/// What only these tests ask of a scratch store.
impl Scratch {
    /// The pipeline `own`: one node, `work`, that logs its start and end (its shell's pid, its
    /// attempt, the time in nanoseconds), sleeps `sleep_s`, and succeeds once `fixed` exists.
    fn own(&self, sleep_s: &str, retries: u32) -> PathBuf {
        let log = self.path("log.txt").display().to_string();
        let fixed = self.path("fixed").display().to_string();
        let run = format!(
            "echo start $$ $SPINDLE_ATTEMPT $(date +%s%N) >> '{log}'; sleep {sleep_s}; \
             echo end $$ $SPINDLE_ATTEMPT $(date +%s%N) >> '{log}'; test -e '{fixed}'"
        );
        let nodes = json!({ "work": { "run": run, "retries": retries } });
        self.write("own.json", &json!({ "name": "own", "nodes": nodes }).to_string())
    }

    /// The id of the only run.
    fn run_id(&self) -> String {
        let output = self.spindle(&["runs", "--json"]);
        let runs: Value = serde_json::from_slice(&output.stdout).expect("runs --json");
        runs[0]["run"].as_str().expect("a run").to_owned()
    }

    /// The store, opened by a library user beside the runner (no recovery at open: it would
    /// take a live run's running node back to ready).
    fn library(&self) -> Store {
        let options = Options::default().recover_on_open(false);
        Store::open_with(self.db(), options).expect("open the store")
    }

    /// The attempts the commands logged: (attempt, start, end) in nanoseconds, by start.
    fn attempts(&self) -> Vec<(u64, u128, u128)> {
        let lines = self.lines();
        let field = |line: &str, n: usize| line.split(' ').nth(n).unwrap_or_default().to_owned();
        let mut attempts: Vec<(u64, u128, u128)> = lines
            .iter()
            .filter(|line| line.starts_with("start "))
            .map(|start| {
                let pid = field(start, 1);
                let end = lines
                    .iter()
                    .find(|line| line.starts_with("end ") && field(line, 1) == pid)
                    .unwrap_or_else(|| panic!("attempt {pid} never ended: {lines:?}"));
                let number = field(start, 2).parse().expect("an attempt number");
                let time = |line: &str| field(line, 3).parse::<u128>().expect("a time");
                (number, time(start), time(end))
            })
            .collect();
        attempts.sort_by_key(|&(_, start, _)| start);
        attempts
    }
}

/// Asserts that no two attempts overlapped and that they are numbered `numbers`, in order.
fn one_at_a_time(s: &Scratch, numbers: &[u64]) {
    let attempts = s.attempts();
    for pair in attempts.windows(2) {
        assert!(pair[0].2 <= pair[1].1, "two attempts at once: {attempts:?}");
    }
    let seen: Vec<u64> = attempts.iter().map(|&(number, _, _)| number).collect();
    assert_eq!(seen, numbers, "attempts {attempts:?}");
}

/// The items of the run's queue with `status`.
fn items(store: &Store, run: &str, status: ItemStatus) -> Vec<QueueItem> {
    let queue = format!("run:{run}");
    let page = Page::first(100);
    store.queue().items(&queue, ItemFilter::status(status), page).expect("items")
}

/// Waits for `child` at most `limit`; kills it and fails the test past that.
fn wait_at_most(mut child: Child, limit: Duration) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "still running after {limit:?}: {}",
                stderr(&child.wait_with_output().expect("output"))
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// Polls until `ready` holds (another process is doing the work), at most 20 s.
fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_command_refuses_to_requeue_a_runs_items_and_writes_nothing() {
    let s = Scratch::new();
    assert_eq!(s.run(&s.own("0", 0)).status.code(), Some(1));
    let run = s.run_id();
    let store = s.library();
    let dead = items(&store, &run, ItemStatus::Dead);
    assert_eq!(dead.len(), 1, "the failed node's item is dead");
    store.close().expect("close");
    let queue = format!("run:{run}");
    for args in [vec!["queue", "requeue", "--all", &queue], vec!["queue", "requeue", &dead[0].id]] {
        let output = s.spindle(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        let said = stderr(&output);
        assert!(said.contains(&format!("belong to run {run}")), "{said}");
        assert!(said.contains(&format!("spindle retry {run}")), "{said}");
    }
    let store = s.library();
    assert_eq!(items(&store, &run, ItemStatus::Dead).len(), 1, "still dead: nothing written");
    store.close().expect("close");
    // What the message offers for a finished run's items: prune drops them.
    let pruned = s.spindle(&["prune", "--older-than", "0ms", "--json"]);
    let report: Value = serde_json::from_slice(&pruned.stdout).expect("prune --json");
    assert_eq!(report["pruned"], 1, "the dead item: {report}");
    let store = s.library();
    assert!(items(&store, &run, ItemStatus::Dead).is_empty(), "pruned");
    store.close().expect("close");
}

#[test]
fn an_item_requeued_before_a_retry_is_dropped_unrun_and_the_retry_runs_the_node_once() {
    let s = Scratch::new();
    assert_eq!(s.run(&s.own("0.2", 0)).status.code(), Some(1));
    let run = s.run_id();
    let store = s.library();
    assert_eq!(store.queue().requeue_all(&format!("run:{run}")).expect("requeue"), 1);
    let stale = items(&store, &run, ItemStatus::Pending);
    assert_eq!(stale.len(), 1, "the old item is pending again");
    store.close().expect("close");
    std::fs::write(s.path("fixed"), "").expect("fix");
    let retried = s.spindle(&["retry", "own", "-j", "4"]);
    assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
    one_at_a_time(&s, &[1, 2]);
    let store = s.library();
    let dropped = store.queue().get(&stale[0].id).expect("the stale item");
    assert_eq!(dropped.status, ItemStatus::Completed);
    assert_eq!(dropped.result, Some(json!({ "skipped": true })), "settled without a run");
    store.close().expect("close");
}

#[test]
fn an_item_requeued_while_a_retry_runs_the_node_is_dropped_unrun() {
    let s = Scratch::new();
    assert_eq!(s.run(&s.own("1.5", 0)).status.code(), Some(1));
    let run = s.run_id();
    std::fs::write(s.path("fixed"), "").expect("fix");
    let retry = s.command_with(&["retry", "own", "-j", "4"]);
    let retry = { retry }.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("retry");
    until("the retry's attempt starts", || s.attempts_started() == 2);
    let store = s.library();
    let dead = items(&store, &run, ItemStatus::Dead);
    assert_eq!(store.queue().requeue_all(&format!("run:{run}")).expect("requeue"), 1);
    // A free handler of the retry claims it while attempt 2 still runs.
    until("the stale item is settled", || {
        store.queue().get(&dead[0].id).expect("item").status == ItemStatus::Completed
    });
    let settled_ms = store.queue().get(&dead[0].id).expect("item").finished_at_ms;
    store.close().expect("close");
    let output = wait_at_most(retry, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    one_at_a_time(&s, &[1, 2]);
    let attempt_2_ended_ns = s.attempts()[1].2;
    let settled_ns = u128::try_from(settled_ms.expect("finished")).expect("ms") * 1_000_000;
    assert!(settled_ns < attempt_2_ended_ns, "settled while attempt 2 still ran");
}

#[test]
fn a_pending_item_cancelled_under_a_live_run_fails_its_node_and_the_run_ends() {
    let s = Scratch::new();
    // The first try fails; the second waits out a backoff of a second, pending: cancel it.
    let pipeline = s.own("0.1", 3);
    let runner = s.command().arg("run").arg(&pipeline).stderr(Stdio::piped()).spawn();
    let runner = runner.expect("run");
    until("the first try ends", || s.attempts_ended() == 1);
    let store = s.library();
    let run = s.run_id();
    let mut pending = Vec::new();
    until("the next try is queued", || {
        pending = items(&store, &run, ItemStatus::Pending);
        !pending.is_empty()
    });
    store.queue().cancel(&pending[0].id).expect("cancel the pending try");
    store.close().expect("close");
    let output = wait_at_most(runner, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(1), "the node failed: {}", stderr(&output));
    one_at_a_time(&s, &[1]);
    let show = s.spindle(&["graph", "show", &run, "--json"]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("was cancelled before it ran"), "{shown}");
}

#[test]
fn a_running_item_cancelled_with_its_execution_ends_its_attempt_then_fails_its_node() {
    let s = Scratch::new();
    let pipeline = s.own("30", 0);
    let runner = s.command().arg("run").arg(&pipeline).stderr(Stdio::piped()).spawn();
    let runner = runner.expect("run");
    until("the attempt starts", || s.attempts_started() == 1);
    let store = s.library();
    let run = s.run_id();
    assert_eq!(store.queue().cancel_execution(&run).expect("cancel"), 1, "the claimed item");
    store.close().expect("close");
    let output = wait_at_most(runner, Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(1), "the node failed: {}", stderr(&output));
    let shell = s.lines()[0].split(' ').nth(1).expect("the attempt's pid").to_owned();
    assert!(!alive(&shell), "its command was ended first");
    assert_eq!(s.attempts_ended(), 0, "it never finished its sleep");
    let show = s.spindle(&["graph", "show", &run, "--json"]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("was cancelled while it ran"), "{shown}");
}

/// Whether process `pid` lives (a zombie, dead but not yet reaped, does not).
fn alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    state.is_some_and(|state| state != 'Z' && state != 'X')
}

/// How many attempts have started and ended, from the log.
impl Scratch {
    fn attempts_started(&self) -> usize {
        self.lines().iter().filter(|line| line.starts_with("start ")).count()
    }

    fn attempts_ended(&self) -> usize {
        self.lines().iter().filter(|line| line.starts_with("end ")).count()
    }
}
