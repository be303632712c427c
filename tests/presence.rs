//! Recovery at open leaves alone the work of other live processes on a SQLite file
//! (`Options::recover_on_open`): a child process (this test binary again) opens the store and
//! runs a graph node; another store opening the file while the child lives, recovering by
//! default, leaves the node running, and once the child is killed a store opening alone
//! recovers it. Stores of one process are two stores too (`tests/shared_store.rs` has that
//! one on every engine). A store held off by another's recovery names the presence file; a
//! named pipe or a symbolic link put at the presence file's name is refused at once, naming
//! it, and never followed (`cli/tests/cli_db.rs` has the presence file and other users).

mod common;

use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::json;
use spindle::{Error, NodeOptions, NodeSpec, NodeStatus, Options, Store};

const CHILD_ENV: &str = "SPINDLE_PRESENCE_CHILD";

/// The child: opens the store, starts node `a` of a new graph, says the graph's id, and waits
/// to be killed with the store open.
fn child(path: &str) {
    let store = Store::open(path).expect("the child opens the store");
    let graphs = store.graphs();
    let graph = graphs.create(json!({})).expect("create");
    graphs.add_node(&graph, NodeSpec::task(json!({})), NodeOptions::new().id("a")).expect("node");
    graphs.start(&graph).expect("start");
    graphs.start_node(&graph, "a").expect("start node");
    println!("started {graph}");
    std::thread::park();
}

fn status(store: &Store, graph: &str) -> NodeStatus {
    store.graphs().node(graph, "a").expect("node a").status
}

#[test]
fn a_store_opening_leaves_a_live_processs_running_node_alone_and_recovers_it_once_it_died() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return child(&path);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let name =
        "a_store_opening_leaves_a_live_processs_running_node_alone_and_recovers_it_once_it_died";
    let mut running = common::spawn_child_test(name, CHILD_ENV, &path);
    let stdout = running.stdout.take().expect("the child's stdout");
    let said = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // Libtest's own "test NAME ... " may come first on the line.
        .find_map(|line| line.split_once("started ").map(|(_, graph)| graph.trim().to_owned()));
    let graph = said.expect("the child started its node");

    // Another process's store (recovering at open, the default) while the child runs `a`.
    let second = Store::open(&path).expect("open beside the child");
    assert_eq!(status(&second, &graph), NodeStatus::Running, "the live child's node stays");
    second.close().expect("close");
    // A store that may not recover waits for nothing and changes nothing either.
    let quiet = Options::default().recover_on_open(false);
    let third = Store::open_with(&path, quiet).expect("open without recovery");
    assert_eq!(status(&third, &graph), NodeStatus::Running);
    third.close().expect("close");

    running.kill().expect("SIGKILL the child");
    running.wait().expect("reap the child");
    // Alone now: the dead child's node is interrupted work, made ready again.
    let alone = Store::open(&path).expect("open alone");
    assert_eq!(status(&alone, &graph), NodeStatus::Ready);
    alone.close().expect("close");
}

#[test]
fn a_store_recovering_at_open_holds_others_off_until_it_is_done() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let store = Store::open(&path).expect("create");
    let graphs = store.graphs();
    let graph = graphs.create(json!({})).expect("create");
    graphs.add_node(&graph, NodeSpec::task(json!({})), NodeOptions::new().id("a")).expect("node");
    graphs.start(&graph).expect("start");
    graphs.start_node(&graph, "a").expect("start node");
    // The lock a recovering store holds, held here as long as the test likes: a store of
    // this process that took the presence file exclusively.
    let presence = dir.path().join("store.db-presence");
    assert!(presence.is_file(), "a writable store made its presence file");
    store.close().expect("close");
    let held = std::fs::File::open(&presence).expect("open the presence file");
    held.lock().expect("hold it exclusively, as a recovering store does");
    let patient = Options::default().busy_timeout(Duration::from_millis(200));
    // Held off past its busy timeout, it names the presence file and why it waited.
    match Store::open_with(&path, patient.clone()) {
        Err(Error::StoreFile { path: named, kind: std::io::ErrorKind::WouldBlock, message }) => {
            assert_eq!(named, presence.canonicalize().expect("the presence file"));
            assert!(message.contains("recovers"), "{message}");
        }
        other => panic!("expected StoreFile (WouldBlock), got {:?}", other.map(|_| ())),
    }
    // A read-only store is not held off: it holds nothing, and makes no file.
    let reader = Store::open_with(&path, Options::default().read_only(true))
        .expect("a reader opens while another recovers");
    assert_eq!(status(&reader, &graph), NodeStatus::Running);
    reader.close().expect("close");
    held.unlock().expect("recovery done");
    let after = Store::open_with(&path, patient).expect("open once it is done");
    assert_eq!(status(&after, &graph), NodeStatus::Ready, "alone: recovered");
    after.close().expect("close");
}

#[test]
fn a_read_only_or_in_memory_store_makes_no_presence_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    Store::open(&path).expect("create").close().expect("close");
    let presence = dir.path().join("store.db-presence");
    std::fs::remove_file(&presence).expect("remove it, for the test");
    let reader =
        Store::open_with(&path, Options::default().read_only(true)).expect("open read-only");
    reader.close().expect("close");
    assert!(!presence.exists(), "a reader makes no presence file");
    Store::open_in_memory().expect("in memory").close().expect("close");
}

/// What opening the store at `path` to write answers, within a few seconds (an open that
/// hangs fails the test).
fn open_answer(path: &std::path::Path) -> spindle::Result<Store> {
    let (send, answer) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || send.send(Store::open(&path)));
    answer.recv_timeout(Duration::from_secs(10)).expect("the open hangs")
}

#[test]
fn a_named_pipe_or_a_link_put_at_the_presence_path_is_refused_at_once_and_never_followed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    Store::open(&path).expect("create").close().expect("close");
    let presence = dir.path().join("store.db-presence");
    std::fs::remove_file(&presence).expect("as anyone who may write the directory can");
    let refused = |what: &str| match open_answer(&path) {
        Err(Error::StoreFile { path: named, message, .. }) => {
            let resolved = dir.path().canonicalize().expect("the directory");
            assert_eq!(named, resolved.join("store.db-presence"));
            assert!(message.contains(what) && message.contains("not a regular file"), "{message}");
        }
        other => panic!("expected StoreFile, got {:?}", other.map(|_| ())),
    };
    let fifo = std::process::Command::new("mkfifo").arg(&presence).status();
    if fifo.is_ok_and(|status| status.success()) {
        refused("is a named pipe");
        std::fs::remove_file(&presence).expect("rm");
    } else {
        println!("no mkfifo here: the named pipe is not checked");
    }
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"kept").expect("write");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::os::unix::fs::symlink(&victim, &presence).expect("ln -s");
    refused("is a symbolic link");
    assert_eq!(std::fs::read(&victim).expect("read"), b"kept");
    let mode = std::fs::metadata(&victim).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o644, "the link's target is left as it was");
    std::fs::remove_file(&presence).expect("rm");
    let nowhere = dir.path().join("nowhere");
    std::os::unix::fs::symlink(&nowhere, &presence).expect("ln -s");
    refused("is a symbolic link");
    assert!(!nowhere.exists(), "nothing made through the link");
    std::fs::remove_file(&presence).expect("rm");
    open_answer(&path).expect("made again, a regular file").close().expect("close");
}
