//! The `spindle` binary on PostgreSQL (`--db postgres://...`, `SPINDLE_DB`) and `spindle
//! migrate`: a pipeline runs and is inspected there, its outputs under the runs directory; a
//! store file is copied there and reads the same; a location without a store is refused and
//! left alone. Built without the `postgres` feature, a PostgreSQL location is a clear error.
//!
//! The PostgreSQL tests need a server: they run only when `SPINDLE_TEST_PG` names one, each in
//! schemas of its own, reached by URL (`postgres://USER@HOST/DB?options=-csearch_path%3DNAME`).

mod cli_common;

use std::process::Command;

use cli_common::{BIN, Scratch, stderr};

/// Runs the binary with `args` in the scratch directory, on no store of its own.
fn spindle_in(scratch: &Scratch, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(BIN);
    command.args(args).current_dir(scratch.dir.path()).env("NO_COLOR", "1");
    command.env("SPINDLE_LEASE_MS", "1000").env_remove("SPINDLE_DB").env_remove("SPINDLE_RUNS_DIR");
    command.output().expect("run spindle")
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_postgres_location_needs_the_feature_and_says_so() {
    let scratch = Scratch::new();
    scratch.write("p.json", r#"{ "name": "p", "nodes": { "a": { "run": "true" } } }"#);
    let commands: [&[&str]; 3] = [
        &["--db", "postgres://app@db.internal/app", "runs"],
        &["--db", "postgresql://app@db.internal/app", "run", "p.json"],
        &["migrate", "--from", "spindle.db", "--to", "postgres://app@db.internal/app"],
    ];
    for args in commands {
        let output = spindle_in(&scratch, args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("--features postgres"), "{}", stderr(&output));
    }
    let mut command = Command::new(BIN);
    command.arg("graphs").current_dir(scratch.dir.path());
    let output = command.env("SPINDLE_DB", "postgres://app@db.internal/app").output().expect("run");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(!scratch.path("spindle.db").exists(), "no store file was made");
}

#[cfg(feature = "postgres")]
mod on_postgres {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    use serde_json::Value;

    use super::cli_common::stdout;
    use super::{BIN, Scratch, spindle_in, stderr};

    /// The test server's connection string, if there is one (else the test says it skips).
    fn server() -> Option<String> {
        let server = std::env::var("SPINDLE_TEST_PG").ok();
        if server.is_none() {
            eprintln!("skipped: SPINDLE_TEST_PG names no PostgreSQL server");
        }
        server
    }

    /// A URL of the test server with a new schema of its own on the search path.
    fn new_url(server: &str) -> (String, String) {
        let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
        let field = |key: &str| {
            server.split_whitespace().find_map(|pair| pair.strip_prefix(&format!("{key}=")))
        };
        let host = field("host").unwrap_or("localhost").replace('/', "%2F");
        let port = field("port").map(|port| format!(":{port}")).unwrap_or_default();
        let user = field("user").map(|user| format!("{user}@")).unwrap_or_default();
        let dbname = field("dbname").unwrap_or("postgres");
        let url =
            format!("postgres://{user}{host}{port}/{dbname}?options=-csearch_path%3D{schema}");
        (url, schema)
    }

    /// Whether the server has a schema named `schema`.
    fn schema_exists(server: &str, schema: &str) -> bool {
        let mut client =
            spindle::postgres::Client::connect(server, spindle::postgres::NoTls).expect("connect");
        let sql = "SELECT count(*) FROM pg_namespace WHERE nspname = $1";
        client.query_one(sql, &[&schema]).expect("count").get::<_, i64>(0) == 1
    }

    fn json(output: &std::process::Output) -> Value {
        assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
        serde_json::from_slice(&output.stdout).expect("JSON on stdout")
    }

    const PIPELINE: &str = r#"{ "name": "demo", "nodes": {
        "a": { "run": "echo made-by-a" },
        "b": { "run": "cat \"$SPINDLE_OUTPUT_A\" >> log.txt", "after": ["a"] } } }"#;

    #[test]
    fn check_reports_a_kept_count_that_differs_from_a_recount_on_postgres() {
        let Some(server) = server() else { return };
        let (url, schema) = new_url(&server);
        let scratch = Scratch::new();
        scratch.write("p.json", PIPELINE);
        let ran = spindle_in(&scratch, &["--db", &url, "-q", "run", "p.json"]);
        assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
        let healthy = json(&spindle_in(&scratch, &["--db", &url, "--json", "check"]));
        assert_eq!(healthy["count_problems"], serde_json::json!([]), "{healthy}");
        let mut raw = spindle::postgres::Client::connect(
            &format!("{server} options='-csearch_path={schema}'"),
            spindle::postgres::NoTls,
        )
        .expect("a raw connection");
        raw.batch_execute(
            "UPDATE queue_counts SET total = total - 1 WHERE status = 'completed';
             INSERT INTO process_counts VALUES ('default', 'failed', 2)",
        )
        .expect("damage the counts");
        let damaged = spindle_in(&scratch, &["--db", &url, "--json", "check"]);
        assert_eq!(damaged.status.code(), Some(3), "{}", stderr(&damaged));
        let report: Value = serde_json::from_slice(&damaged.stdout).expect("JSON");
        assert_eq!(report["ok"], false);
        let problems = report["count_problems"].as_array().expect("a list");
        let queue = problems[0].as_str().expect("a line");
        assert!(queue.starts_with("queue run:"), "{report}");
        assert!(queue.ends_with(" completed: kept 1, counted 2"), "{report}");
        assert_eq!(problems[1], "processes failed: kept 2, counted 0", "{report}");
        assert_eq!(problems.len(), 2, "{report}");
    }

    #[test]
    fn a_pipeline_runs_and_is_inspected_on_postgres() {
        let Some(server) = server() else { return };
        let (url, _) = new_url(&server);
        let scratch = Scratch::new();
        scratch.write("p.json", PIPELINE);
        let ran = spindle_in(&scratch, &["--db", &url, "-q", "run", "p.json"]);
        assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
        assert_eq!(scratch.lines(), ["made-by-a"]);
        let runs = json(&spindle_in(&scratch, &["--db", &url, "--json", "runs"]));
        let run = runs[0]["run"].as_str().expect("a run id").to_owned();
        assert_eq!(runs[0]["status"], "complete");
        let outputs = scratch.path("spindle.runs").join(&run);
        assert!(outputs.join("a.out").is_file(), "outputs in ./spindle.runs");
        let logs = spindle_in(&scratch, &["--db", &url, "logs", "demo", "a"]);
        assert!(stdout(&logs).contains("made-by-a"), "{}", stdout(&logs));
        let check = json(&spindle_in(&scratch, &["--db", &url, "--json", "check"]));
        assert_eq!(
            (check["engine"].clone(), check["ok"].clone()),
            ("postgres".into(), true.into())
        );
        assert_eq!(check["meta"]["schema_version"], 7);
        let mut by_env = Command::new(BIN);
        by_env.args(["--json", "graphs"]).current_dir(scratch.dir.path()).env("SPINDLE_DB", &url);
        let graphs = json(&by_env.output().expect("run spindle"));
        assert_eq!(graphs[0]["id"], run.as_str());
        let elsewhere = scratch.path("elsewhere");
        let dir = elsewhere.to_str().expect("a UTF-8 path");
        let fresh = spindle_in(
            &scratch,
            &["--db", &url, "--runs-dir", dir, "-q", "run", "--fresh", "p.json"],
        );
        assert_eq!(fresh.status.code(), Some(0), "{}", stderr(&fresh));
        assert_eq!(std::fs::read_dir(&elsewhere).expect("the runs directory").count(), 1);
        let pruned =
            json(&spindle_in(&scratch, &["--db", &url, "--json", "prune", "--older-than", "0ms"]));
        assert_eq!(pruned["output_dirs"], 1, "{pruned}");
        assert!(!outputs.exists(), "the finished run's outputs are pruned");
    }

    #[test]
    fn events_follow_hears_another_process() {
        let Some(server) = server() else { return };
        let (url, _) = new_url(&server);
        let store = spindle::Store::connect(&url).expect("connect");
        let scratch = Scratch::new();
        let mut follower = Command::new(BIN)
            .args(["--db", &url, "--json", "events", "--follow"])
            .current_dir(scratch.dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the follower");
        let lines = BufReader::new(follower.stdout.take().expect("stdout"));
        let (sender, received) = mpsc::channel();
        std::thread::spawn(move || {
            lines.lines().map_while(Result::ok).for_each(|line| drop(sender.send(line)))
        });
        let stream = spindle::Stream::custom("heard");
        store.events().append(&stream, "first", serde_json::json!(1)).expect("append");
        let first = received.recv_timeout(Duration::from_secs(60)).expect("the first event");
        std::thread::sleep(Duration::from_millis(300));
        store.events().append(&stream, "second", serde_json::json!(2)).expect("append");
        let second = received.recv_timeout(Duration::from_secs(60)).expect("the second event");
        follower.kill().expect("kill the follower");
        let _ = follower.wait();
        let types: Vec<Value> = [first, second]
            .iter()
            .map(|line| serde_json::from_str::<Value>(line).expect("JSON")["type"].clone())
            .collect();
        assert_eq!(types, ["first", "second"]);
        store.close().expect("close");
    }

    #[test]
    fn migrate_copies_a_store_file_that_then_reads_the_same() {
        let Some(server) = server() else { return };
        let (url, _) = new_url(&server);
        let scratch = Scratch::new();
        scratch.write("p.json", PIPELINE);
        let db = scratch.db();
        let ran = spindle_in(
            &scratch,
            &["--db", db.to_str().expect("a UTF-8 path"), "-q", "run", "p.json"],
        );
        assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
        let db = db.to_str().expect("a UTF-8 path");
        let report =
            json(&spindle_in(&scratch, &["--json", "migrate", "--from", db, "--to", &url]));
        let tables = report["tables"].as_array().expect("tables");
        assert!(tables.iter().any(|table| table["name"] == "graph_nodes" && table["rows"] == 2));
        for listing in
            [&["--json", "graphs"][..], &["--json", "events"], &["--json", "queue", "stats"]]
        {
            let on_file = spindle_in(&scratch, &[&["--db", db][..], listing].concat());
            let on_postgres = spindle_in(&scratch, &[&["--db", &url][..], listing].concat());
            assert_eq!(on_file.status.code(), Some(0), "{}", stderr(&on_file));
            let (on_file, on_postgres) = (stdout(&on_file), stdout(&on_postgres));
            assert_eq!(on_postgres, on_file, "{listing:?}");
        }
        let table = spindle_in(&scratch, &["migrate", "--from", db, "--to", &url]);
        assert_eq!(table.status.code(), Some(2), "a second copy is refused");
        assert!(stderr(&table).contains("not empty"), "{}", stderr(&table));
        let missing = spindle_in(&scratch, &["migrate", "--from", "missing.db", "--to", &url]);
        assert_eq!(missing.status.code(), Some(2));
        assert!(stderr(&missing).contains("no store file at missing.db"), "{}", stderr(&missing));
        let (fresh, _) = new_url(&server);
        let printed = spindle_in(&scratch, &["migrate", "--from", db, "--to", &fresh]);
        assert!(stdout(&printed).contains("verified"), "{}", stdout(&printed));
    }

    #[test]
    fn a_location_without_a_store_is_refused_and_left_alone() {
        let Some(server) = server() else { return };
        let (url, schema) = new_url(&server);
        let scratch = Scratch::new();
        for args in
            [&["runs"][..], &["tokens", "list"], &["queue", "requeue", "--all", "q"], &["check"]]
        {
            let output = spindle_in(&scratch, &[&["--db", &url][..], args].concat());
            assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
            assert!(stderr(&output).contains("no store at postgres://"), "{}", stderr(&output));
        }
        assert!(!schema_exists(&server, &schema), "nothing was created");
        let bad = spindle_in(&scratch, &["migrate", "--from", "x.db", "--to", "x.db"]);
        assert_eq!(bad.status.code(), Some(2));
        assert!(stderr(&bad).contains("--to names a PostgreSQL database"), "{}", stderr(&bad));
    }
}
