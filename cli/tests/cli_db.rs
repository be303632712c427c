//! The store file as users and other processes meet it, through the built `spindle` binary:
//!
//! - a `--db` that cannot hold a store (a device, a directory, a path in a missing directory,
//!   a file this user may not read) is refused with exit 2 and a message that says which, and
//!   nothing is made beside it (no `/dev/null-journal`);
//! - another user's read of a store nobody has open is refused before SQLite makes `-wal` and
//!   `-shm` the owner could not write, and the owner's next run works; root's read gives them
//!   to the owner; `-wal`/`-shm` of another user are named, with their owner, when the owner's
//!   run cannot write;
//! - another user's read that leaves `-wal`/`-shm` of its own (the owner's process closed the
//!   store just as the read opened it, or an older spindle left them) is refused after the
//!   open, and they are removed (nobody has the store open), so the owner's next run works;
//! - another user's run on a store it may only read is refused before SQLite makes anything
//!   beside it, and the owner's next run works; a group member's run is refused unless the
//!   files it makes would be the store's group's (a set-group-ID directory);
//! - the presence file is the store's writers' only (0600 beside a 0644 store): another user
//!   cannot open it to hold its lock, and the owner's open takes back one an older spindle made
//!   with the store's mode; held off by it, a run says so, naming it (exit 3);
//! - a new store in a directory this user may not write, and a missing presence file beside a
//!   store in such a directory, are refused with exit 2, saying what to do;
//! - a `--db` starting with `file:` is a file of that name, not an SQLite URI;
//! - a second runner on a file leaves the node a live runner is running alone (its open
//!   recovers only when it is alone), and a store opening once that runner is dead recovers it.
//!
//! The tests with two users run the binary as other uids (`setpriv`), so they need root; they
//! print why and check nothing elsewhere.

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
    let writer = Options::default().recover_on_open(false);
    Store::open_with(&db, writer).expect("root opens to write").close().expect("close");
    let made = std::fs::metadata(&presence).expect("made by root's open");
    assert_eq!((made.uid(), made.gid(), made.mode() & 0o777), (OWNER, OWNER, 0o600));
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

    let reader = Options::default().read_only(true);
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

/// The binary as user `uid` (group `uid`) with the supplementary groups `groups`, on `db`.
fn as_member(uid: u32, groups: &[u32], db: &Path, args: &[&str]) -> Output {
    let id = uid.to_string();
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--groups", &groups.join(","), BIN, "--db"])
        .arg(db)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run spindle as another user")
}

/// The files beside `db` (`-wal`, `-shm`, `-presence`, `-journal`) that are there, with
/// their owners.
fn beside_owners(db: &Path) -> Vec<(String, u32)> {
    ["-wal", "-shm", "-journal", "-presence"]
        .iter()
        .filter_map(|suffix| {
            Some((suffix.to_string(), std::fs::metadata(side(db, suffix)).ok()?.uid()))
        })
        .collect()
}

#[test]
fn another_users_run_on_a_store_it_may_only_read_makes_nothing_and_the_owner_still_runs() {
    if !two_users("another_users_run_on_a_store_it_may_only_read") {
        return;
    }
    let s = Scratch::new();
    let (db, pipeline) = shared_store(&s);
    std::fs::remove_file(side(&db, "-presence")).expect("as before any writable open");
    assert_eq!(beside_owners(&db), [], "closed: nothing beside it");
    for args in [vec!["run", &pipeline], vec!["queue", "requeue", "--all", "q"]] {
        let refused = as_user(OTHER, &db, &args);
        assert_refused(&refused, &["permission denied", "may not write", "mode 0644"]);
        assert_eq!(beside_owners(&db), [], "{args:?} made files beside the store");
    }
    let after = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(after.status.code(), Some(0), "the owner's run: {}", stderr(&after));
}

#[test]
fn a_group_members_run_is_refused_unless_the_owner_could_write_the_files_it_makes() {
    if !two_users("a_group_members_run_is_refused_unless_the_owner_could_write") {
        return;
    }
    let s = Scratch::new();
    let (db, pipeline) = shared_store(&s);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o664)).expect("g+w");
    // The member's files would be its own group's (the directory is not set-group-ID).
    let refused = as_member(OTHER, &[OWNER], &db, &["run", &pipeline, "--fresh"]);
    assert_refused(&refused, &[&format!("belongs to uid {OWNER}"), "its owner could not write"]);
    assert!(beside_owners(&db).iter().all(|(_, uid)| *uid == OWNER), "{:?}", beside_owners(&db));
    // In a set-group-ID directory of the store's group they are the store's group's.
    std::os::unix::fs::chown(s.dir.path(), None, Some(OWNER)).expect("chgrp");
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o3777)).expect("g+s");
    std::fs::remove_file(side(&db, "-presence")).expect("made again by the member");
    // Where runs keep their outputs (`<db>.runs`, the owner's): the member's too.
    let runs = PathBuf::from(format!("{}.runs", db.display()));
    std::fs::set_permissions(&runs, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let member = as_member(OTHER, &[OWNER], &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(member.status.code(), Some(0), "the member's run: {}", stderr(&member));
    let presence = std::fs::metadata(side(&db, "-presence")).expect("made by the member");
    assert_eq!((presence.uid(), presence.gid(), presence.mode() & 0o777), (OTHER, OWNER, 0o660));
    let owner = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(owner.status.code(), Some(0), "the owner's run after: {}", stderr(&owner));
}

#[test]
fn only_users_who_may_write_the_store_may_open_its_presence_file_to_hold_it() {
    if !two_users("only_users_who_may_write_the_store_may_open_its_presence_file") {
        return;
    }
    let s = Scratch::new();
    let (db, pipeline) = shared_store(&s);
    let presence = side(&db, "-presence");
    let made = std::fs::metadata(&presence).expect("made by the owner's run");
    assert_eq!((made.uid(), made.mode() & 0o777), (OWNER, 0o600), "the owner's, its writer's");
    let hold = |uid: u32, mode: &str| {
        let id = uid.to_string();
        Command::new("setpriv")
            .args(["--reuid", &id, "--regid", &id, "--clear-groups", "flock", "--close", mode])
            .arg(&presence)
            .args(["-c", "touch held; while [ -e hold ]; do sleep 0.05; done"])
            .current_dir(s.dir.path())
            .stderr(Stdio::piped())
            .spawn()
            .expect("flock")
    };
    std::fs::write(s.path("hold"), b"").expect("hold");
    let refused = hold(OTHER, "--exclusive").wait_with_output().expect("flock ends");
    assert!(!refused.status.success() && !s.path("held").exists(), "another user locked it");
    // One made by an older spindle, with the store file's mode: another user may hold it,
    // and the owner's run says whose lock held it off, then makes it the writers' only.
    std::fs::set_permissions(&presence, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut holder = hold(OTHER, "--exclusive");
    let begun = Instant::now();
    while !s.path("held").exists() {
        assert!(begun.elapsed() < Duration::from_secs(10), "flock never held it");
        std::thread::sleep(Duration::from_millis(20));
    }
    let held_off = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    let said = stderr(&held_off);
    assert_eq!(held_off.status.code(), Some(3), "{said}");
    assert!(said.contains(&presence.display().to_string()) && said.contains("recovers"), "{said}");
    assert!(!said.contains("another process is writing the store"), "{said}");
    std::fs::remove_file(s.path("hold")).expect("let go");
    holder.wait().expect("flock ends");
    let mode = std::fs::metadata(&presence).expect("presence").mode() & 0o777;
    assert_eq!(mode, 0o600, "the owner's open gave it its writers' mode");
    std::fs::write(s.path("hold"), b"").expect("hold");
    std::fs::remove_file(s.path("held")).expect("again");
    let refused = hold(OTHER, "--shared").wait_with_output().expect("flock ends");
    assert!(!refused.status.success() && !s.path("held").exists(), "another user locked it");
    let after = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(after.status.code(), Some(0), "{}", stderr(&after));
}

#[test]
fn a_directory_this_user_may_not_write_is_named_for_a_new_store_and_for_a_missing_presence() {
    if !two_users("a_directory_this_user_may_not_write_is_named") {
        return;
    }
    let s = Scratch::new();
    let pipeline = quick(&s, "p").display().to_string();
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("root's, others may only pass");
    let new = s.path("new.db");
    let refused = as_user(OWNER, &new, &["run", &pipeline]);
    assert_refused(&refused, &["may not make files in", "no store can be made at"]);
    assert!(!new.exists());
    // An existing store of the owner's there, held open (its -wal and -shm there, the
    // owner's: root's SQLite gives them to the store file's owner), with no presence file.
    let db = s.db();
    Store::open(&db).expect("create").close().expect("close");
    std::os::unix::fs::chown(&db, Some(OWNER), Some(OWNER)).expect("chown");
    std::fs::remove_file(side(&db, "-presence")).expect("as before any writable open");
    let reader = Options::default().read_only(true);
    let open = Store::open_with(&db, reader).expect("root reads");
    // Where runs keep their outputs, the owner's (a directory of its own, made beforehand).
    let runs = PathBuf::from(format!("{}.runs", db.display()));
    std::fs::create_dir(&runs).expect("mkdir");
    std::os::unix::fs::chown(&runs, Some(OWNER), Some(OWNER)).expect("chown");
    let presence = side(&db, "-presence").display().to_string();
    let refused = as_user(OWNER, &db, &["run", &pipeline]);
    let install = format!("install -m 0600 -o {OWNER} -g {OWNER} /dev/null {presence}");
    assert_refused(&refused, &[&presence, &install]);
    // Doing what it says.
    let args: Vec<&str> = install.split(' ').skip(1).collect();
    let made = Command::new("install").args(&args).status().expect("install");
    assert!(made.success());
    let run = as_user(OWNER, &db, &["run", &pipeline]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    open.close().expect("close");
}

#[test]
fn a_db_path_starting_with_file_is_a_file_of_that_name() {
    let s = Scratch::new();
    let pipeline = quick(&s, "p").display().to_string();
    let name = "file:x.db?mode=memory";
    let on = |db: &str, args: &[&str]| {
        Command::new(BIN)
            .current_dir(s.dir.path())
            .args(["--db", db])
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("run spindle")
    };
    let ran = on(name, &["run", &pipeline]);
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    assert!(s.path(name).is_file(), "a file of that name, not a database in memory");
    let runs = on(name, &["runs", "--json"]);
    assert_eq!(runs.status.code(), Some(0), "{}", stderr(&runs));
    assert!(cli_common::stdout(&runs).contains("\"p\""), "{}", cli_common::stdout(&runs));
    // `file:/...` names the directory `file:` here, which is not there.
    let nowhere = on("file:/sub/s.db", &["run", &pipeline]);
    assert_refused(&nowhere, &["the directory file:/sub does not exist"]);
    std::fs::create_dir_all(s.path("file:/sub")).expect("mkdir");
    let there = on("file:/sub/s.db", &["run", &pipeline]);
    assert_eq!(there.status.code(), Some(0), "{}", stderr(&there));
    assert!(s.path("file:").join("sub").join("s.db").is_file());
}

#[test]
fn another_users_read_that_leaves_wal_and_shm_of_its_own_is_refused_and_they_are_removed() {
    if !two_users("another_users_read_that_leaves_wal_and_shm_of_its_own") {
        return;
    }
    let s = Scratch::new();
    let (db, pipeline) = shared_store(&s);
    // What the reader's SQLite makes when the owner's process closes the store between the
    // check (which saw them there) and the open: here, left by an older spindle's read.
    for (suffix, bytes) in [("-wal", 0), ("-shm", 32_768)] {
        let path = side(&db, suffix);
        std::fs::write(&path, vec![0_u8; bytes]).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::chown(&path, Some(OTHER), Some(OTHER)).expect("chown");
    }
    let read = as_user(OTHER, &db, &["runs"]);
    assert_refused(&read, &[&format!("owned by uid {OTHER}"), "were removed"]);
    for suffix in ["-wal", "-shm"] {
        assert!(!side(&db, suffix).exists(), "{suffix} is still there");
    }
    let owner = as_user(OWNER, &db, &["run", &pipeline, "--fresh"]);
    assert_eq!(owner.status.code(), Some(0), "the owner's run: {}", stderr(&owner));
}
