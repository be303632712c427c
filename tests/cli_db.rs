//! The store file as users and other processes meet it, through the built `spindle` binary:
//!
//! - a `--db` that cannot hold a store (a device, a directory, a path in a missing directory,
//!   a file this user may not read) is refused with exit 2 and a message that says which, and
//!   nothing is made beside it (no `/dev/null-journal`);
//! - another user's read of a store nobody has open is refused before SQLite makes `-wal` and
//!   `-shm` the owner could not write, and the owner's next run works; root's read gives them
//!   to the owner; `-wal`/`-shm` of another user are named, with their owner, when the owner's
//!   run cannot write;
//! - a second runner on a file leaves the node a live runner is running alone (its open
//!   recovers only when it is alone), and a store opening once that runner is dead recovers it.
//!
//! The tests with two users run the binary as other uids (`setpriv`), so they need root; they
//! print why and check nothing elsewhere.
#![cfg(feature = "cli")]

mod cli_common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli_common::{BIN, Scratch, stderr};
use serde_json::json;
use spindle::{ItemFilter, ItemStatus, NodeStatus, Options, Page, Store};

/// The owner of the stores in the two-user tests, and another user: ids no one else uses (they
/// need no entry in `/etc/passwd`).
const OWNER: u32 = 64_101;
const OTHER: u32 = 64_102;

/// A pipeline of one quick node, named `name`, in the scratch directory.
fn quick(s: &Scratch, name: &str) -> PathBuf {
    let pipeline = json!({ "name": name, "nodes": { "a": { "run": "true" } } });
    s.write(&format!("{name}.json"), &pipeline.to_string())
}

/// The binary with `--db db` and `args`, to its end.
fn spindle_on(db: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run spindle")
}

/// Asserts exit 2 and a message on stderr holding every one of `words`.
fn assert_refused(output: &Output, words: &[&str]) {
    let said = stderr(output);
    assert_eq!(output.status.code(), Some(2), "exit 2 for bad input: {said}");
    for word in words {
        assert!(said.contains(word), "the message says {word:?}: {said}");
    }
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_device_is_refused_with_exit_2_and_nothing_is_made_beside_it() {
    let s = Scratch::new();
    let pipeline = quick(&s, "p");
    let beside =
        ["-journal", "-wal", "-shm", "-presence"].map(|suffix| format!("/dev/null{suffix}"));
    let there_before: Vec<bool> = beside.iter().map(|path| Path::new(path).exists()).collect();
    let device = Path::new("/dev/null");
    let read = spindle_on(device, &["runs"]);
    assert_refused(&read, &["/dev/null is a character device", "not a regular file"]);
    let run = spindle_on(device, &["run", &pipeline.display().to_string()]);
    assert_refused(&run, &["/dev/null is a character device"]);
    for (path, before) in beside.iter().zip(there_before) {
        if before {
            println!("{path} was there before the test (made by an older spindle?): not checked");
        } else {
            assert!(!Path::new(path).exists(), "{path} was made");
        }
    }
}

#[test]
fn a_directory_is_refused_with_exit_2_and_nothing_is_made_in_it() {
    let s = Scratch::new();
    let pipeline = quick(&s, "p");
    let dir = s.path("stores");
    std::fs::create_dir(&dir).expect("mkdir");
    for args in [vec!["runs"], vec!["run", &pipeline.display().to_string()]] {
        let output = spindle_on(&dir, &args);
        assert_refused(&output, &[&format!("{} is a directory", dir.display())]);
    }
    assert!(listing(&dir).is_empty(), "nothing in it");
    assert_eq!(listing(s.dir.path()), ["p.json", "stores"], "nothing beside it");
}

#[test]
fn a_path_in_a_missing_directory_names_the_directory_with_exit_2_and_makes_none() {
    let s = Scratch::new();
    let pipeline = quick(&s, "p");
    let missing = s.path("nowhere");
    let db = missing.join("spindle.db");
    let run = spindle_on(&db, &["run", &pipeline.display().to_string()]);
    assert_refused(&run, &[&format!("the directory {} does not exist", missing.display())]);
    let read = spindle_on(&db, &["runs"]);
    assert_refused(&read, &[&format!("the directory {} does not exist", missing.display())]);
    assert!(!missing.exists(), "no directory made");
    assert_eq!(listing(s.dir.path()), ["p.json"]);
}

/// Whether the tests with two users can run here: as root, with `setpriv`. Says why not.
fn two_users(test: &str) -> bool {
    let root = std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !root || !setpriv {
        println!("{test}: needs root and setpriv to run spindle as other users; not checked");
    }
    root && setpriv
}

/// The binary as user `uid` (group `uid`, no other groups) on `db`, to its end.
fn as_user(uid: u32, db: &Path, args: &[&str]) -> Output {
    let id = uid.to_string();
    Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups", BIN, "--db"])
        .arg(db)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run spindle as another user")
}

/// A scratch directory everyone may use, as `/tmp` is (sticky, world-writable), holding a
/// store that `OWNER` made with a run of `quick`; returns the store's path and the pipeline.
fn shared_store(s: &Scratch) -> (PathBuf, String) {
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod the scratch directory");
    let pipeline = quick(s, "p").display().to_string();
    let db = s.db();
    let made = as_user(OWNER, &db, &["run", &pipeline]);
    assert_eq!(made.status.code(), Some(0), "the owner's first run: {}", stderr(&made));
    assert_eq!(std::fs::metadata(&db).expect("the store").uid(), OWNER);
    (db, pipeline)
}

fn side(db: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", db.display()))
}

#[test]
fn an_unreadable_store_says_permission_denied_and_names_it_with_exit_2() {
    let s = Scratch::new();
    let pipeline = quick(&s, "p").display().to_string();
    let ran = s.spindle(&["run", &pipeline]);
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let db = s.db();
    let shown = db.display().to_string();
    if two_users("an_unreadable_store_says_permission_denied") {
        // Root's store, readable by its owner only; the directory may be passed through.
        std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the directory");
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        for args in [vec!["runs"], vec!["queue", "requeue", "--all", "q"]] {
            let output = as_user(OTHER, &db, &args);
            assert_refused(&output, &["permission denied", &shown, "may not read"]);
        }
        assert!(!side(&db, "-wal").exists() && !side(&db, "-shm").exists(), "nothing made");
        // Readable, not writable: a runner is told so, before it runs anything.
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let run = as_user(OTHER, &db, &["run", &pipeline]);
        assert_refused(&run, &["permission denied", &shown, "may not write", "mode 0644"]);
    } else {
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        let output = s.spindle(&["runs"]);
        assert_refused(&output, &["permission denied", &shown, "may not read"]);
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let run = s.spindle(&["run", &pipeline]);
        assert_refused(&run, &["permission denied", &shown, "may not write", "mode 0444"]);
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
}

#[test]
fn another_users_read_of_a_store_nobody_has_open_is_refused_and_the_owner_still_writes() {
    if !two_users("another_users_read_of_a_store_nobody_has_open_is_refused") {
        return;
    }
    let s = Scratch::new();
    let (db, pipeline) = shared_store(&s);
    assert!(!side(&db, "-wal").exists() && !side(&db, "-shm").exists(), "closed: none left");
    for command in ["runs", "check"] {
        let read = as_user(OTHER, &db, &[command]);
        assert_refused(
            &read,
            &[
                &format!("{} belongs to uid {OWNER}", db.display()),
                "no process has it open",
                "Read it as its owner",
            ],
        );
        for suffix in ["-wal", "-shm"] {
            assert!(!side(&db, suffix).exists(), "the refused {command} made {suffix}");
        }
    }
    let again = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(again.status.code(), Some(0), "the owner writes: {}", stderr(&again));
    // Root's read is no harm: SQLite gives what it makes to the store file's owner.
    let by_root = spindle_on(&db, &["runs"]);
    assert_eq!(by_root.status.code(), Some(0), "{}", stderr(&by_root));
    for suffix in ["-wal", "-shm"] {
        if let Ok(meta) = std::fs::metadata(side(&db, suffix)) {
            assert_eq!(meta.uid(), OWNER, "{suffix} left by root's read is the owner's");
        }
    }
    let after_root = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(after_root.status.code(), Some(0), "{}", stderr(&after_root));
    // Root writing makes the presence file the owner's too, with the store file's mode.
    let presence = side(&db, "-presence");
    assert_eq!(std::fs::metadata(&presence).expect("made by the owner's run").uid(), OWNER);
    std::fs::remove_file(&presence).expect("remove it, for the test");
    let writer = Options { recover_on_open: false, ..Options::default() };
    Store::open_with(&db, writer).expect("root opens to write").close().expect("close");
    let made = std::fs::metadata(&presence).expect("made by root's open");
    assert_eq!((made.uid(), made.gid(), made.mode() & 0o777), (OWNER, OWNER, 0o644));
    let last = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(last.status.code(), Some(0), "{}", stderr(&last));
}

#[test]
fn the_owners_run_names_another_users_wal_and_shm_and_works_once_they_are_gone() {
    if !two_users("the_owners_run_names_another_users_wal_and_shm") {
        return;
    }
    let s = Scratch::new();
    let (db, pipeline) = shared_store(&s);
    // What another user's read left behind with an older spindle: an empty WAL and its index,
    // the other user's, mode 0644.
    for (suffix, bytes) in [("-wal", 0), ("-shm", 32_768)] {
        let path = side(&db, suffix);
        std::fs::write(&path, vec![0_u8; bytes]).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::chown(&path, Some(OTHER), Some(OTHER)).expect("chown");
    }
    let refused = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    let wal = side(&db, "-wal").display().to_string();
    let shm = side(&db, "-shm").display().to_string();
    assert_refused(
        &refused,
        &[&wal, &shm, &format!("owner uid {OTHER}"), &format!("uid {OWNER}"), "rm "],
    );
    assert!(!stderr(&refused).contains("database is read-only"), "{}", stderr(&refused));
    // Doing what it says: nobody has the store open.
    std::fs::remove_file(&wal).expect("rm -wal");
    std::fs::remove_file(&shm).expect("rm -shm");
    let works = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(works.status.code(), Some(0), "{}", stderr(&works));
}

#[test]
fn a_second_runner_leaves_a_live_runners_node_running_and_a_later_open_recovers_it() {
    let s = Scratch::new();
    let started = s.path("started");
    let slow = json!({ "name": "slow", "nodes": { "wait": {
        "run": format!("touch '{}'; sleep 60", started.display()) } } });
    let slow = s.write("slow.json", &slow.to_string());
    let mut first = s
        .command()
        .arg("run")
        .arg(&slow)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the first runner");
    let begun = Instant::now();
    while !started.exists() {
        assert!(begun.elapsed() < Duration::from_secs(60), "the slow node never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A second runner, of another pipeline, on the same file: its open recovers by default.
    let second = s.run(&quick(&s, "other"));
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));

    let reader = Options { read_only: true, ..Options::default() };
    let store = Store::open_with(s.db(), reader.clone()).expect("read the store");
    let runs = store.graphs().list(Page::first(10)).expect("graphs");
    let graph = runs
        .iter()
        .find(|graph| store.graphs().node(&graph.id, "wait").is_ok())
        .expect("the slow run")
        .id
        .clone();
    let node = store.graphs().node(&graph, "wait").expect("node");
    assert_eq!(node.status, NodeStatus::Running, "the live runner's node stays running");
    let queue = format!("run:{graph}");
    let filter = ItemFilter::status(ItemStatus::Claimed);
    let claimed = store.queue().items(&queue, filter, Page::first(10)).expect("items");
    assert_eq!(claimed.len(), 1, "and its item claimed");
    store.close().expect("close");

    first.kill().expect("kill -9 the first runner");
    first.wait().expect("reaped");
    // Alone now: the dead runner's node is interrupted work.
    let alone = Store::open(s.db()).expect("open alone");
    assert_eq!(alone.graphs().node(&graph, "wait").expect("node").status, NodeStatus::Ready);
    alone.close().expect("close");
}
