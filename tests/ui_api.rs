//! `spindle ui`'s JSON API, over HTTP against the built binary: a store filled by a pipeline
//! run (a failed and a skipped node) and by the library (dead letters), then every route's
//! status code and JSON shape, keyset pages followed to the end, and bad input (400, 404, 405)
//! answered as JSON errors.
#![cfg(feature = "cli")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use spindle::{NewItem, Store};

const BIN: &str = env!("CARGO_BIN_EXE_spindle");

/// A `spindle ui` on a store, stopped when dropped.
struct Ui {
    child: Child,
    addr: String,
}

impl Ui {
    fn start(db: &Path) -> Self {
        let mut child = Command::new(BIN)
            .arg("--db")
            .arg(db)
            .args(["ui", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spindle ui");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("the address line");
        let addr = line
            .trim()
            .strip_prefix("spindle ui: http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        Ui { child, addr }
    }

    /// The status code and JSON body of `method path`.
    fn call(&self, method: &str, path: &str) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.addr
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
        let (head, body) = answer.split_once("\r\n\r\n").expect("a body");
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
        (status, serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")))
    }

    fn get(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path);
        assert_eq!(status, 200, "{path}: {body}");
        body
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store with three runs of a pipeline (fetch ok, test failing, package skipped) and two
/// dead letters.
fn filled(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("spindle.db");
    let pipeline = dir.join("p.json");
    let nodes = json!({
        "fetch": { "run": "echo fetched" },
        "test": { "run": "echo broken; exit 3", "after": ["fetch"] },
        "package": { "run": "true", "after": ["test"] },
    });
    std::fs::write(&pipeline, json!({ "name": "p", "nodes": nodes }).to_string()).expect("write");
    for fresh in [false, true, true] {
        let mut run = Command::new(BIN);
        run.arg("--db").arg(&db).arg("run").arg(&pipeline).env("SPINDLE_LEASE_MS", "1000");
        if fresh {
            run.arg("--fresh");
        }
        assert_eq!(run.output().expect("run").status.code(), Some(1));
    }
    let store = Store::open(&db).expect("open");
    for n in 0..2 {
        let item = NewItem::new("mail", json!({ "n": n })).max_attempts(1);
        store.queue().enqueue(item).expect("enqueue");
        let claimed = store.queue().claim("w", &["mail"], 60_000).expect("claim").expect("an item");
        let error = format!("smtp down {n}");
        store.queue().fail(&claimed.item.id, claimed.fence, &error, true).expect("fail");
    }
    store.close().expect("close");
    db
}

#[test]
fn every_route_answers_json_and_pages_go_to_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(&filled(dir.path()));

    let overview = ui.get("/api/overview");
    assert_eq!(overview["runs"]["failed"], 3, "{overview}");
    assert_eq!(overview["recent_failures"].as_array().map(Vec::len), Some(3));
    assert_eq!(overview["recent_failures"][0]["failed_node"], "test");

    // Runs, a page of one at a time, followed to the end.
    let mut seen = Vec::new();
    let mut path = "/api/runs?limit=1".to_owned();
    loop {
        let page = ui.get(&path);
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 1);
        seen.extend(items.iter().map(|run| run["id"].as_str().expect("id").to_owned()));
        match page["next"].as_str() {
            Some(next) => path = format!("/api/runs?limit=1&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 3);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in id order: {seen:?}");
    assert_eq!(ui.get("/api/runs?status=failed&name=p")["items"].as_array().map(Vec::len), Some(3));
    assert_eq!(ui.get("/api/runs?status=complete")["items"], json!([]));

    let run = ui.get(&format!("/api/runs/{}", seen[0]));
    assert_eq!(run["run"]["status"], "failed");
    let statuses: Vec<(String, String)> = run["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap_or("").to_owned(),
                n["status"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert!(statuses.contains(&("fetch".into(), "complete".into())), "{statuses:?}");
    assert!(statuses.contains(&("test".into(), "failed".into())), "{statuses:?}");
    assert_eq!(run["edges"].as_array().map(Vec::len), Some(2));
    let node = ui.get(&format!("/api/runs/{}/nodes/test", seen[0]));
    assert!(node["error"].as_str().is_some_and(|e| e.contains("broken")), "{node}");

    let queues = ui.get("/api/queues");
    let mail = queues.as_array().expect("stats").iter().find(|q| q["queue"] == "mail").cloned();
    assert_eq!(mail.expect("the mail queue")["dead"], 2);
    let dead = ui.get("/api/queues/mail/dead?limit=1");
    assert_eq!(dead["items"].as_array().map(Vec::len), Some(1));
    let next = dead["next"].as_str().expect("a second page");
    let rest = ui.get(&format!("/api/queues/mail/dead?limit=1&after={next}"));
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(1));
    assert!(rest["items"][0]["last_error"].as_str().is_some_and(|e| e.starts_with("smtp down")));

    let stream = format!("/api/events?stream=graph%3A{}&limit=500", seen[0]);
    let events = ui.get(&stream)["items"].as_array().cloned().expect("events");
    assert!(events.iter().any(|e| e["event_type"] == "graph_failed"), "{events:?}");
    assert!(ui.get("/api/events?limit=2")["next"].is_string(), "more than two events");
    assert!(ui.get("/api/processes?status=any")["items"].is_array());
    assert!(ui.get("/api/tenants").as_array().is_some_and(|t| !t.is_empty()));
    assert!(ui.get("/api/tokens").is_array());
}

#[test]
fn bad_requests_are_json_errors_with_their_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(&filled(dir.path()));
    for (method, path, status) in [
        ("GET", "/api/nothing", 404),
        ("GET", "/api/runs/no-such-run", 404),
        ("GET", "/api/runs?limit=0", 400),
        ("GET", "/api/runs?limit=501", 400),
        ("GET", "/api/runs?status=sideways", 400),
        ("GET", "/api/processes?status=dead", 400),
        ("GET", "/api/events?stream=nonsense", 400),
        ("GET", "/api/events?after=x", 400),
        ("GET", "/api/runs/%zz", 400),
        ("POST", "/api/overview", 405),
        ("DELETE", "/api/runs", 405),
    ] {
        let (got, body) = ui.call(method, path);
        assert_eq!(got, status, "{method} {path}: {body}");
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{method} {path}: {body}");
    }
}

#[test]
fn a_non_loopback_address_or_a_bad_one_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    for addr in ["0.0.0.0:7433", "localhost", "127.0.0.1:99999"] {
        let output = Command::new(BIN)
            .arg("--db")
            .arg(&db)
            .args(["ui", "--addr", addr])
            .output()
            .expect("spindle ui");
        assert_eq!(output.status.code(), Some(2), "{addr}");
    }
}
