//! `spindle ui` over HTTP against the built binary: a store filled by a pipeline run (a failed
//! and a skipped node) and by the library (dead letters, pending and scheduled items, a
//! workflow execution), then every `/api/` route's status code and JSON shape, keyset pages
//! followed to the end, bad input answered as JSON errors; the pages and assets; live events
//! over Server-Sent Events; and the guards of queue actions (the flag, the session, its
//! anti-forgery token, the origin, the token's tenant and role), each refusal writing nothing.

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
    db: std::path::PathBuf,
}

impl Ui {
    fn start(db: &Path) -> Self {
        Self::start_with(db, &[])
    }

    fn start_with(db: &Path, flags: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .arg("--db")
            .arg(db)
            .args(["ui", "--addr", "127.0.0.1:0"])
            .args(flags)
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
        Ui { child, addr, db: db.to_owned() }
    }

    /// The status code and JSON body of `method path`.
    fn call(&self, method: &str, path: &str) -> (u16, Value) {
        let (status, head, body) = self.send(method, path, &[], "");
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
        (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")))
    }

    /// The status, head and body of a request with these extra headers and body.
    fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String, String) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|(name, _)| *name == "Host") {
            request.push_str(&format!("Host: {}\r\n", self.addr));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(request.as_bytes()).expect("send");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
        let (head, body) = answer.split_once("\r\n\r\n").expect("a body");
        (status, head.to_owned(), body.to_owned())
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
    let agent = spindle::process::Registration::new("agent-1", "agent", json!({}));
    store.processes().register(agent).expect("register");
    store.queue().enqueue(NewItem::new("jobs", json!("now"))).expect("enqueue");
    let later = NewItem::new("jobs", json!("later")).run_at_ms(i64::MAX / 2);
    store.queue().enqueue(later).expect("enqueue");
    let workflows = store.workflows();
    workflows.put_definition("deploy", "v1", json!({ "steps": ["a"] })).expect("definition");
    let execution = workflows.create_execution("deploy", "v1", json!({ "to": "prod" })).expect("x");
    let appended = workflows.append_event(&execution.id, "step", json!({ "a": 1 })).expect("event");
    workflows.write_snapshot(&execution.id, appended.seq, json!({ "a": 1 })).expect("snapshot");
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
    assert_eq!(overview["workflows"]["pending"], 1, "{overview}");
    assert_eq!(overview["processes"], json!({ "running": 1 }), "{overview}");
    assert!(overview["samples"].is_array(), "{overview}");

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
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "newest first: {seen:?}");
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
    assert!(node["node"]["error"].as_str().is_some_and(|e| e.contains("broken")), "{node}");
    assert_eq!(node["attempts"][0]["try"], 1, "{node}");
    assert!(node["attempts"][0]["log"].as_str().is_some_and(|l| l.contains("broken")), "{node}");
    // The node's own log stream, which the panel links to, holds what it printed.
    let log_stream = node["log_stream"].as_str().expect("the node's log stream");
    assert_eq!(log_stream, format!("custom:log:{}:test", seen[0]));
    let log = ui.get(&format!("/api/events?stream={}", log_stream.replace(':', "%3A")));
    assert!(log.to_string().contains("broken"), "{log}");
    // The graph leaves outputs to the node's view.
    assert!(run["nodes"].as_array().expect("nodes").iter().all(|n| n.get("output").is_none()));
    node_attempts_are_paged(&ui, &seen[0], &node);

    let queues = ui.get("/api/queues");
    let mail = queues.as_array().expect("stats").iter().find(|q| q["queue"] == "mail").cloned();
    assert_eq!(mail.expect("the mail queue")["dead"], 2);
    let dead = ui.get("/api/queues/mail/dead?limit=1");
    assert_eq!(dead["items"].as_array().map(Vec::len), Some(1));
    let next = dead["next"].as_str().expect("a second page");
    let rest = ui.get(&format!("/api/queues/mail/dead?limit=1&after={next}"));
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(1));
    assert!(rest["items"][0]["last_error"].as_str().is_some_and(|e| e.starts_with("smtp down")));

    let pending = ui.get("/api/queues/jobs/items?status=pending");
    assert_eq!(pending["items"].as_array().map(Vec::len), Some(1), "{pending}");
    assert_eq!(pending["items"][0]["payload"], "now");
    let scheduled = ui.get("/api/queues/jobs/items?status=scheduled");
    assert_eq!(scheduled["items"][0]["payload"], "later", "{scheduled}");
    assert_eq!(ui.get("/api/queues/jobs/items?status=claimed")["items"], json!([]));

    let executions = ui.get("/api/workflows?workflow=deploy");
    let id = executions["items"][0]["id"].as_str().expect("an execution").to_owned();
    assert_eq!(ui.get("/api/workflows?status=completed")["items"], json!([]));
    let execution = ui.get(&format!("/api/workflows/{id}"));
    assert_eq!(execution["execution"]["input"]["to"], "prod", "{execution}");
    assert!(
        execution["events"].as_array().is_some_and(|e| e.iter().any(|e| e["event_type"] == "step"))
    );
    assert_eq!(execution["snapshot"]["state"]["a"], 1, "{execution}");

    let stream = format!("/api/events?stream=graph%3A{}&limit=500", seen[0]);
    let events = ui.get(&stream)["items"].as_array().cloned().expect("events");
    assert!(events.iter().any(|e| e["event_type"] == "graph_failed"), "{events:?}");
    assert!(ui.get("/api/events?limit=2")["next"].is_string(), "more than two events");
    // The latest events, and the cursor to go on from.
    let tail = ui.get(&format!("/api/events?stream=graph%3A{}&tail=2&limit=2", seen[0]));
    let last = tail["last"].as_u64().expect("last");
    let seqs: Vec<u64> =
        tail["items"].as_array().expect("items").iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, [last - 1, last], "{tail}");
    let everything = ui.get("/api/events?tail=3&limit=3");
    let positions: Vec<u64> = everything["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|e| e["position"].as_u64())
        .collect();
    assert_eq!(positions.last().copied(), everything["last"].as_u64(), "{everything}");
    assert!(positions.len() <= 3 && !positions.is_empty(), "{everything}");
    assert!(ui.get("/api/processes?status=any")["items"].is_array());
    assert!(ui.get("/api/tenants").as_array().is_some_and(|t| !t.is_empty()));
    assert!(ui.get("/api/tokens").is_array());
}

/// A node with 25 more attempts: its view shows the latest 10, and the ones before on demand.
fn node_attempts_are_paged(ui: &Ui, run: &str, node: &Value) {
    assert_eq!(
        (node["attempts_total"].clone(), node["attempts_from"].clone()),
        (json!(1), json!(0))
    );
    let db = ui.db.clone();
    let store = Store::open(&db).expect("open");
    let stream = spindle::Stream::custom(format!("log:{run}:test"));
    for attempt in 2..=26 {
        let output =
            json!({ "node": "test", "attempt": attempt, "text": format!("attempt {attempt}\n") });
        store.events().append(&stream, "output", output).expect("append");
        let ended = json!({ "node": "test", "attempt": attempt, "how": "exit 3" });
        store.events().append(&stream, "ended", ended).expect("append");
    }
    store.close().expect("close");
    let path = format!("/api/runs/{run}/nodes/test");
    let tries = |view: &Value| -> Vec<u64> {
        view["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .filter_map(|a| a["try"].as_u64())
            .collect()
    };
    let latest = ui.get(&path);
    assert_eq!(latest["attempts_total"], 26, "{latest}");
    assert_eq!(latest["attempts_from"], 16);
    assert_eq!(tries(&latest), (17..=26).collect::<Vec<_>>());
    let before = ui.get(&format!("{path}?attempts_before=16"));
    assert_eq!((before["attempts_from"].clone(), tries(&before)), (json!(6), (7..=16).collect()));
    let first = ui.get(&format!("{path}?attempts_before=6"));
    assert_eq!((first["attempts_from"].clone(), tries(&first)), (json!(0), (1..=6).collect()));
    assert_eq!(ui.call("GET", &format!("{path}?attempts_before=x")).0, 400);
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
        ("GET", "/api/events?tail=-1", 400),
        ("OPTIONS", "/api/runs", 405),
        ("GET", "/api/runs/%zz", 400),
        ("GET", "/api/queues/jobs/items?status=dead", 400),
        ("GET", "/api/workflows?status=sideways", 400),
        ("GET", "/api/workflows/no-such", 404),
        ("GET", "/api/live?after=x", 400),
        ("GET", "/api/live?stream=nonsense", 400),
        ("POST", "/api/overview", 405),
        ("POST", "/api/queues/mail/purge", 403),
        ("DELETE", "/api/runs", 405),
    ] {
        let (got, body) = ui.call(method, path);
        assert_eq!(got, status, "{method} {path}: {body}");
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{method} {path}: {body}");
    }
    // A HEAD answer has no body; its status says the same.
    assert_eq!(ui.send("HEAD", "/api/runs", &[], "").0, 405);
    assert_eq!(ui.send("HEAD", "/runs", &[], "").0, 200);
}

#[test]
fn actions_on_a_non_loopback_address_without_a_token_or_a_bad_address_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    for flags in [
        &["--addr", "0.0.0.0:0", "--allow-actions"][..],
        &["--addr", "localhost"],
        &["--addr", "127.0.0.1:99999"],
    ] {
        let output = Command::new(BIN)
            .arg("--db")
            .arg(&db)
            .arg("ui")
            .args(flags)
            .output()
            .expect("spindle ui");
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
    }
}

#[test]
fn pages_and_assets_are_served_and_other_hosts_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(&filled(dir.path()));
    for (path, status, content_type) in [
        ("/", 200, "text/html"),
        ("/runs/some-run?node=a", 200, "text/html"),
        ("/queues/mail", 200, "text/html"),
        ("/no/such/page", 404, "text/html"),
        ("/assets/app.js", 200, "text/javascript"),
        ("/assets/dagre.min.js", 200, "text/javascript"),
        ("/assets/app.css", 200, "text/css"),
        ("/assets/nothing.js", 404, "application/json"),
    ] {
        let (got, head, _) = ui.send("GET", path, &[], "");
        assert_eq!(got, status, "{path}");
        let head = head.to_ascii_lowercase();
        assert!(head.contains(&format!("content-type: {content_type}")), "{path}: {head}");
        assert!(head.contains("content-security-policy: default-src 'self'"), "{path}: {head}");
    }
    let (index, _, html) = ui.send("GET", "/", &[], "");
    assert_eq!(index, 200);
    assert!(html.contains("/assets/app.js"), "the shell loads the script: {html}");
    // A page of another site that renamed itself to this address (DNS rebinding) is refused.
    let (got, _, _) = ui.send("GET", "/api/runs", &[("Host", "evil.example:80")], "");
    assert_eq!(got, 421);
}

/// A session: its cookie and anti-forgery token.
struct Session {
    cookie: String,
    csrf: String,
}

/// The session cookie an answer sets, if any.
fn set_cookie(head: &str) -> Option<String> {
    let line = head.lines().find_map(|line| line.strip_prefix("Set-Cookie: "))?;
    assert!(line.contains("HttpOnly") && line.contains("SameSite=Strict"), "{line}");
    line.split(';').next().map(str::to_owned)
}

impl Session {
    fn open(ui: &Ui) -> Self {
        let (status, head, body) = ui.send("GET", "/api/session", &[], "");
        assert_eq!(status, 200, "{body}");
        let cookie = set_cookie(&head).expect("a session cookie");
        let body: Value = serde_json::from_str(&body).expect("json");
        Session { cookie, csrf: body["csrf"].as_str().expect("csrf").to_owned() }
    }

    /// A POST as the page sends it: same origin, the cookie, the token, JSON.
    fn post(&mut self, ui: &Ui, path: &str, body: &str) -> (u16, Value) {
        self.post_with(ui, path, body, &[])
    }

    /// A POST with some headers replaced (an empty value leaves the header out). A new session
    /// the answer sets (signing in or out) is this one's from then on.
    fn post_with(
        &mut self,
        ui: &Ui,
        path: &str,
        body: &str,
        overrides: &[(&str, &str)],
    ) -> (u16, Value) {
        let origin = format!("http://{}", ui.addr);
        let mut headers: Vec<(&str, &str)> = vec![
            ("Origin", origin.as_str()),
            ("Cookie", self.cookie.as_str()),
            ("X-Spindle-Csrf", self.csrf.as_str()),
            ("Content-Type", "application/json"),
        ];
        headers.retain(|(name, _)| !overrides.iter().any(|(o, _)| o == name));
        headers.extend(overrides.iter().filter(|(_, value)| !value.is_empty()));
        let (status, head, answer) = ui.send("POST", path, &headers, body);
        let answer: Value =
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{path}: {e}: {answer}"));
        if let Some(cookie) = set_cookie(&head) {
            self.cookie = cookie;
            self.csrf = answer["csrf"].as_str().expect("the new session's csrf").to_owned();
        }
        (status, answer)
    }
}

fn dead_count(db: &Path) -> usize {
    let store = Store::open_with(db, spindle::Options::default().read_only(true)).expect("open");
    store.queue().dead_letters("mail", spindle::Page::first(10)).expect("dead").len()
}

#[test]
fn queue_actions_need_the_flag_a_session_its_token_this_origin_and_a_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let store = Store::open(&db).expect("open");
    let (writer, writer_info) =
        store.auth().create_token("ops", spindle::Role::Writer, None).expect("token");
    let (reader, _) =
        store.auth().create_token("eyes", spindle::Role::Reader, None).expect("token");
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    let (foreign, _) = store
        .tenant("acme")
        .expect("acme")
        .auth()
        .create_token("x", spindle::Role::Admin, None)
        .expect("t");
    let dead = store.queue().dead_letters("mail", spindle::Page::first(10)).expect("dead");
    let requeue = format!("/api/queues/mail/dead/{}/requeue", dead[0].id);

    let read_only = Ui::start(&db);
    let mut session = Session::open(&read_only);
    let (status, body) = session.post(&read_only, &requeue, "");
    assert_eq!(status, 403, "without --allow-actions: {body}");
    drop(read_only);

    let ui = Ui::start_with(&db, &["--allow-actions"]);
    let mut session = Session::open(&ui);
    let token = |secret: &spindle::TokenSecret| json!({ "token": secret.expose() }).to_string();
    // Signed out, then refused sign-ins.
    assert_eq!(session.post(&ui, &requeue, "").0, 401);
    assert_eq!(session.post(&ui, "/api/session", r#"{"token":"spn_nope"}"#).0, 401);
    assert_eq!(session.post(&ui, "/api/session", &token(&foreign)).0, 403);
    assert_eq!(session.post(&ui, "/api/session", "not json").0, 400);
    let cross_site = [("Origin", "http://evil.example")];
    assert_eq!(session.post_with(&ui, "/api/session", &token(&writer), &cross_site).0, 403);
    // A reader signs in (on a new session: the old cookie is forgotten) but cannot act.
    let before = (session.cookie.clone(), session.csrf.clone());
    let (status, signed) = session.post(&ui, "/api/session", &token(&reader));
    assert_eq!((status, signed["signed_in"]["role"].clone()), (200, json!("reader")));
    assert!(session.cookie != before.0 && session.csrf != before.1, "a new session");
    assert_eq!(session.post(&ui, &requeue, "").0, 403);
    let mut planted = Session { cookie: before.0, csrf: before.1 };
    assert_eq!(planted.post(&ui, &requeue, "").0, 403, "the cookie from before sign-in is dead");
    // A writer: every forged variant is refused with its own status, then the page's own
    // request works; without Origin a browser's Sec-Fetch-Site: same-origin stands for it.
    let (status, signed) = session.post(&ui, "/api/session", &token(&writer));
    assert_eq!((status, signed["signed_in"]["role"].clone()), (200, json!("writer")));
    assert!(!signed.to_string().contains(writer.expose()), "the secret never comes back");
    for (forged, expected) in [
        (&[("Origin", "http://evil.example")][..], 403),
        (&[("Origin", "null")], 403),
        (&[("Origin", ""), ("Sec-Fetch-Site", "same-site")], 403),
        (&[("Origin", ""), ("Sec-Fetch-Site", "cross-site")], 403),
        (&[("X-Spindle-Csrf", "")], 403),
        (&[("X-Spindle-Csrf", "0000")], 403),
        (&[("Cookie", "")], 403),
        (&[("Content-Type", "text/plain")], 415),
        (&[("Content-Type", "")], 415),
    ] {
        let (status, body) = session.post_with(&ui, &requeue, "", forged);
        assert_eq!(status, expected, "{forged:?}: {body}");
    }
    let big = "x".repeat(17 * 1024);
    assert_eq!(session.post(&ui, &requeue, &big).0, 413);
    let elsewhere = format!("/api/queues/jobs/dead/{}/requeue", dead[0].id);
    assert_eq!(session.post(&ui, &elsewhere, "").0, 404, "an item of another queue");
    assert_eq!(dead_count(&db), 2, "no refused request wrote");
    let no_origin = [("Origin", ""), ("Sec-Fetch-Site", "same-origin")];
    let (status, body) = session.post_with(&ui, &requeue, "", &no_origin);
    assert_eq!((status, body), (200, json!({ "requeued": 1 })));
    assert_eq!(dead_count(&db), 1);
    assert_eq!(session.post(&ui, &requeue, "").0, 409, "it is no longer dead");
    let cancel = format!("/api/queues/mail/items/{}/cancel", dead[0].id);
    assert_eq!(session.post(&ui, &cancel, "").1, json!({ "cancelled": 1 }));
    assert_eq!(session.post(&ui, "/api/queues/mail/purge", "").1, json!({ "purged": 1 }));
    assert_eq!(dead_count(&db), 0);
    assert_eq!(session.post(&ui, "/api/queues/mail/requeue-all", "").1, json!({ "requeued": 0 }));
    // The tokens page lists them, never a secret.
    let (_, _, tokens) = ui.send("GET", "/api/tokens", &[], "");
    assert!(tokens.contains("\"ops\"") && tokens.contains("\"eyes\""), "{tokens}");
    for secret in [&writer, &reader] {
        assert!(!tokens.contains(&secret.expose()[4..]), "no secret in {tokens}");
    }
    // Signing out ends the writer's actions; signing in again and revoking the token does too.
    let (status, out) = session.post(&ui, "/api/session/logout", "");
    assert_eq!((status, out["signed_in"].clone()), (200, json!(null)));
    assert_eq!(session.post(&ui, "/api/queues/mail/purge", "").0, 401);
    assert_eq!(session.post(&ui, "/api/session", &token(&writer)).0, 200);
    store.auth().revoke_token(&writer_info.id).expect("revoke");
    assert_eq!(session.post(&ui, "/api/queues/mail/purge", "").0, 401);
    let (_, _, now) = ui.send("GET", "/api/session", &[("Cookie", session.cookie.as_str())], "");
    assert!(now.contains(r#""signed_in":null"#), "{now}");
    store.close().expect("close");
}

#[test]
fn queue_actions_on_a_runs_items_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let store = Store::open(&db).expect("open");
    let (writer, _) = store.auth().create_token("ops", spindle::Role::Writer, None).expect("t");
    let runs = store.graphs().list(spindle::Page::first(10)).expect("runs");
    let queue = format!("run:{}", runs[0].id);
    let dead_of_run = |store: &Store| {
        let page = spindle::Page::first(10);
        store.queue().dead_letters(&queue, page).expect("dead")
    };
    let dead = dead_of_run(&store);
    assert_eq!(dead.len(), 1, "the failed node's item");
    // A pending item of the run's queue (as a retry's next try waiting out its backoff).
    let pending = store.queue().enqueue(NewItem::new(&queue, json!({}))).expect("pending").id;
    let ui = Ui::start_with(&db, &["--allow-actions"]);
    let mut session = Session::open(&ui);
    let token = json!({ "token": writer.expose() }).to_string();
    assert_eq!(session.post(&ui, "/api/session", &token).0, 200);
    let encoded = queue.replace(':', "%3A");
    for path in [
        format!("/api/queues/{encoded}/dead/{}/requeue", dead[0].id),
        format!("/api/queues/{encoded}/requeue-all"),
        format!("/api/queues/{encoded}/purge"),
        format!("/api/queues/{encoded}/items/{pending}/cancel"),
        format!("/api/queues/{encoded}/pause"),
        format!("/api/queues/{encoded}/resume"),
    ] {
        let (status, body) = session.post(&ui, &path, "");
        assert_eq!(status, 409, "{path}: {body}");
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("belong to run {}", runs[0].id)), "{body}");
    }
    assert_eq!(dead_of_run(&store).len(), 1, "no refused action wrote");
    let still = store.queue().get(&pending).expect("the pending item");
    assert_eq!(still.status, spindle::ItemStatus::Pending, "not cancelled");
    let stats = store.queue().stats().expect("stats");
    let run_stats = stats.iter().find(|q| q.queue == queue).expect("the run's queue");
    assert!(!run_stats.paused, "not paused");
    // The same actions on a queue of the application's own still work.
    let (status, body) = session.post(&ui, "/api/queues/mail/purge", "");
    assert_eq!((status, body), (200, json!({ "purged": 2 })));
    store.close().expect("close");
}

#[test]
fn with_require_token_every_read_needs_a_signed_in_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let store = Store::open(&db).expect("open");
    let (reader, reader_info) =
        store.auth().create_token("eyes", spindle::Role::Reader, None).expect("token");
    store.close().expect("close");
    let ui = Ui::start_with(&db, &["--require-token"]);
    assert_eq!(ui.call("GET", "/api/runs").0, 401);
    let mut session = Session::open(&ui);
    let body = json!({ "token": reader.expose() }).to_string();
    assert_eq!(session.post(&ui, "/api/session", &body).0, 200);
    // The status line only: a live stream that is let in stays open.
    let read = |session: &Session, path: &str| {
        let mut stream = TcpStream::connect(&ui.addr).expect("connect");
        let (addr, cookie) = (&ui.addr, &session.cookie);
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\n\r\n");
        stream.write_all(request.as_bytes()).expect("send");
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).expect("status line");
        line.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok()).expect("a status")
    };
    assert_eq!(read(&session, "/api/runs"), 200);
    assert_eq!(read(&session, "/api/live"), 200);
    // A revoked token stops reading at once.
    let store = Store::open(&db).expect("open");
    store.auth().revoke_token(&reader_info.id).expect("revoke");
    assert_eq!(read(&session, "/api/runs"), 401);
    assert_eq!(read(&session, "/api/live"), 401);
    store.close().expect("close");
}

/// Reads SSE messages (`id`, `data`) from a live stream until `count` came.
fn read_messages(reader: &mut impl BufRead, count: usize) -> Vec<(u64, Value)> {
    let mut messages = Vec::new();
    let (mut id, mut line) = (None, String::new());
    while messages.len() < count {
        line.clear();
        assert!(reader.read_line(&mut line).expect("read") > 0, "the stream ended");
        if let Some(text) = line.trim_end().strip_prefix("id: ") {
            id = text.parse().ok();
        } else if let Some(data) = line.trim_end().strip_prefix("data: ") {
            let data = serde_json::from_str(data).expect("json data");
            messages.push((id.take().expect("an id before the data"), data));
        }
    }
    messages
}

fn live(ui: &Ui, path: &str, last_event_id: Option<u64>) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(&ui.addr).expect("connect");
    let resume = last_event_id.map(|id| format!("Last-Event-ID: {id}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n{resume}\r\n", ui.addr);
    stream.write_all(request.as_bytes()).expect("send");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        reader.read_line(&mut line).expect("head");
        if line.trim().is_empty() {
            return reader;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-type: ") {
            assert!(value.starts_with("text/event-stream"), "{line}");
        }
    }
}

#[test]
fn live_streams_send_what_commits_from_now_and_resume_after_the_last_event_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let ui = Ui::start(&db);
    let store = Store::open(&db).expect("open");
    let stream = spindle::Stream::custom("chat");
    store.events().append(&stream, "old", json!(0)).expect("append");
    let mut one = live(&ui, "/api/live?stream=custom%3Achat", None);
    let mut all = live(&ui, "/api/live", None);
    // The subscriptions start at what is there now: only later events come.
    for n in 1..=3 {
        store.events().append(&stream, "said", json!(n)).expect("append");
    }
    let got = read_messages(&mut one, 3);
    assert_eq!(got.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(got[0].1["payload"], 1);
    let everything = read_messages(&mut all, 3);
    assert_eq!(everything[2].1["position"], json!(everything[2].0));
    // A browser that reconnects after seq 2 gets 3 and 4 again, then what comes next.
    let mut again = live(&ui, "/api/live?stream=custom%3Achat", Some(2));
    store.events().append(&stream, "said", json!(4)).expect("append");
    let resumed = read_messages(&mut again, 3);
    assert_eq!(resumed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [3, 4, 5]);
    // Every stream's feed resumes by position the same way.
    let mut all_again = live(&ui, "/api/live", Some(everything[0].0));
    let after = read_messages(&mut all_again, 2);
    assert_eq!(after[0].0, everything[1].0);
    assert_eq!(after[1].0, everything[2].0);
    // Streams are bounded: past eight of one client, a new one ends that client's oldest
    // (a browser reconnects with its Last-Event-ID and loses nothing), never refused.
    let held: Vec<_> = (0..8).map(|_| live(&ui, "/api/live", None)).collect();
    for mut oldest in [one, all, again, all_again] {
        let mut rest = String::new();
        oldest
            .get_mut()
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        assert!(oldest.read_to_string(&mut rest).is_ok(), "the oldest streams ended");
    }
    for mut newer in held {
        store.events().append(&stream, "said", json!("still")).expect("append");
        assert_eq!(read_messages(&mut newer, 1).len(), 1, "the newer streams go on");
    }
    store.close().expect("close");
}

/// The samples of a Prometheus text answer by name and labels, checking every line's form:
/// `# HELP`/`# TYPE` comments, or `name{labels} value` with a number for the value.
fn prometheus_samples(text: &str) -> Vec<(String, f64)> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "a metric name: {line:?}"
        );
        assert!(name_end == series.len() || series.ends_with('}'), "labels closed: {line:?}");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number: {line:?}"));
        samples.push((series.to_owned(), value));
    }
    samples
}

#[test]
fn metrics_are_served_in_the_prometheus_format_under_the_read_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let store = Store::open(&db).expect("open");
    let (reader, _) = store.auth().create_token("scraper", spindle::Role::Reader, None).expect("t");
    store.auth().create_tenant("other", "Other").expect("tenant");
    let other = store.tenant("other").expect("tenant");
    let (foreign, _) = other.auth().create_token("x", spindle::Role::Reader, None).expect("t");
    let graphs = store.graphs().count_by_status(&Default::default()).expect("graph counts");
    let workflows = store.workflows().count_by_status().expect("execution counts");
    store.close().expect("close");

    let ui = Ui::start(&db);
    let (status, head, text) = ui.send("GET", "/metrics", &[], "");
    assert_eq!(status, 200, "{text}");
    assert!(
        head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let samples = prometheus_samples(&text);
    let value = |series: &str| {
        let found = samples.iter().find(|(name, _)| name == series);
        found.unwrap_or_else(|| panic!("no {series} in\n{text}")).1
    };
    let mail = "spindle_queue_items{tenant=\"default\",queue=\"mail\",state=\"dead\"}";
    assert_eq!(value(mail), 2.0, "two dead letters");
    let jobs = "spindle_queue_items{tenant=\"default\",queue=\"jobs\",state=\"scheduled\"}";
    assert_eq!(value(jobs), 1.0);
    assert_eq!(value("spindle_processes{tenant=\"default\",state=\"running\"}"), 1.0);
    assert!(!graphs.is_empty() && !workflows.is_empty());
    for (status, total) in graphs {
        let series = format!("spindle_graphs{{tenant=\"default\",status=\"{}\"}}", status.as_str());
        assert_eq!(value(&series), total as f64, "{series}");
    }
    for (status, total) in workflows {
        let series = format!(
            "spindle_workflow_executions{{tenant=\"default\",status=\"{}\"}}",
            status.as_str()
        );
        assert_eq!(value(&series), total as f64, "{series}");
    }
    let count = value("spindle_op_latency_seconds_count");
    assert!(count >= 1.0, "this very read is counted: {count}");
    assert_eq!(value("spindle_op_latency_seconds_bucket{le=\"+Inf\"}"), count);
    assert!(samples.iter().any(|(series, _)| series == "spindle_wal_bytes"), "a store file");
    // Refused as every other read is: another host, another method.
    let (status, _, _) = ui.send("GET", "/metrics", &[("Host", "evil.example")], "");
    assert_eq!(status, 421);
    assert_eq!(ui.send("POST", "/metrics", &[], "").0, 405);
    drop(ui);

    let ui = Ui::start_with(&db, &["--require-token", "--allow-actions"]);
    assert_eq!(ui.send("GET", "/metrics", &[], "").0, 401, "no token");
    let cross = [("Sec-Fetch-Site", "cross-site")];
    assert_eq!(ui.send("GET", "/metrics", &cross, "").0, 403, "another site's page");
    let bearer = |secret: &str| format!("Bearer {secret}");
    let wrong = bearer("spt_not-a-token");
    assert_eq!(ui.send("GET", "/metrics", &[("Authorization", &wrong)], "").0, 401);
    let foreign = bearer(foreign.expose());
    assert_eq!(ui.send("GET", "/metrics", &[("Authorization", &foreign)], "").0, 403);
    let reader = bearer(reader.expose());
    let (status, _, text) = ui.send("GET", "/metrics", &[("Authorization", &reader)], "");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("spindle_queue_items{tenant=\"default\",queue=\"mail\",state=\"dead\"} 2")
    );
    // A bearer token reads; it never acts, even a writer's on a server that allows actions.
    let store = Store::open(&db).expect("open");
    let (writer, _) = store.auth().create_token("w", spindle::Role::Writer, None).expect("t");
    store.close().expect("close");
    let writer = bearer(writer.expose());
    let (status, _, body) =
        ui.send("POST", "/api/queues/mail/purge", &[("Authorization", &writer)], "");
    assert!(status == 401 || status == 403, "{status} {body}");
    assert_eq!(dead_count(&db), 2, "nothing purged");
}

#[test]
fn a_writer_pauses_and_resumes_a_queue_and_a_forged_pause_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let store = Store::open(&db).expect("open");
    let (writer, _) = store.auth().create_token("ops", spindle::Role::Writer, None).expect("t");
    let paused = |store: &Store| {
        let stats = store.queue().stats().expect("stats");
        stats.iter().find(|q| q.queue == "jobs").expect("jobs").paused
    };
    let ui = Ui::start_with(&db, &["--allow-actions"]);
    let mut session = Session::open(&ui);
    assert_eq!(session.post(&ui, "/api/queues/jobs/pause", "").0, 401, "signed out");
    let token = json!({ "token": writer.expose() }).to_string();
    assert_eq!(session.post(&ui, "/api/session", &token).0, 200);
    for (forged, expected) in [
        (&[("Origin", "http://evil.example")][..], 403),
        (&[("X-Spindle-Csrf", "0000")], 403),
        (&[("Content-Type", "text/plain")], 415),
    ] {
        let (status, body) = session.post_with(&ui, "/api/queues/jobs/pause", "", forged);
        assert_eq!(status, expected, "{forged:?}: {body}");
    }
    assert!(!paused(&store), "no refused request paused it");
    let (status, body) = session.post(&ui, "/api/queues/jobs/pause", "");
    assert_eq!((status, body), (200, json!({ "queue": "jobs", "paused": true })));
    assert!(paused(&store));
    let listed = ui.get("/api/queues");
    let jobs = listed.as_array().and_then(|all| all.iter().find(|q| q["queue"] == "jobs"));
    assert_eq!(jobs.map(|q| q["paused"].clone()), Some(json!(true)), "{listed}");
    assert!(store.queue().claim("w", &["jobs"], 1_000).expect("claim").is_none(), "paused");
    let (status, body) = session.post(&ui, "/api/queues/jobs/resume", "");
    assert_eq!((status, body), (200, json!({ "queue": "jobs", "paused": false })));
    assert!(!paused(&store));
    assert!(store.queue().claim("w", &["jobs"], 1_000).expect("claim").is_some(), "resumed");
    store.close().expect("close");
}

#[test]
fn a_queues_live_items_are_filtered_by_tag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let store = Store::open(&db).expect("open");
    let tagged = NewItem::new("jobs", json!("tagged")).tag("urgent").metadata(json!({ "k": 1 }));
    let id = store.queue().enqueue(tagged).expect("enqueue").id;
    store.close().expect("close");
    let ui = Ui::start(&db);
    let page = ui.get("/api/queues/jobs/items?status=pending&tag=urgent");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!((items[0]["id"].clone(), items[0]["tags"].clone()), (json!(id), json!(["urgent"])));
    assert_eq!(items[0]["metadata"], json!({ "k": 1 }));
    let all = ui.get("/api/queues/jobs/items?status=pending");
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2), "the untagged one too: {all}");
    assert_eq!(ui.call("GET", "/api/queues/jobs/items?status=pending&tag=%0A").0, 400);
}

#[test]
fn the_schedules_page_and_its_route_list_every_schedule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("spindle.db");
    let store = Store::open(&db).expect("open");
    let nightly =
        spindle::Schedule::cron("nightly", "0 3 * * *", NewItem::new("reports", json!({ "k": 1 })))
            .time_zone("Europe/Paris");
    store.queue().put_schedule(nightly).expect("put");
    let every = spindle::Schedule::every("tick", 900_000, NewItem::new("q", json!({})));
    store.queue().put_schedule(every).expect("put");
    store.close().expect("close");
    let ui = Ui::start(&db);
    let first = ui.get("/api/schedules?limit=1");
    assert_eq!(first["items"].as_array().map(Vec::len), Some(1), "{first}");
    let next = first["next"].as_str().expect("a next page");
    let rest = ui.get(&format!("/api/schedules?limit=1&after={next}"));
    let listed: Vec<Value> = [first, rest]
        .iter()
        .flat_map(|page| page["items"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["name"], "nightly");
    assert_eq!(listed[0]["cadence"], json!({ "cron": "0 3 * * *", "time_zone": "Europe/Paris" }));
    assert_eq!(listed[0]["payload"], json!({ "k": 1 }));
    assert_eq!(listed[1]["cadence"], json!({ "every_ms": 900_000 }));
    assert!(listed.iter().all(|s| s["next_tick_ms"].as_i64().is_some()));
    let (status, _, page) = ui.send("GET", "/schedules", &[], "");
    assert_eq!(status, 200, "the page's shell");
    assert!(page.contains("<html") || page.contains("<!doctype"), "{page}");
}

/// The ids of a page of `/api/queues/../items`.
fn page_ids(page: &Value) -> Vec<String> {
    let items = page["items"].as_array().unwrap_or_else(|| panic!("items: {page}"));
    items.iter().filter_map(|item| item["id"].as_str().map(str::to_owned)).collect()
}

#[test]
fn a_queues_live_items_are_filtered_by_metadata_and_bad_conditions_are_400s() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path());
    let store = Store::open(&db).expect("open");
    let mut ids = Vec::new();
    for metadata in [json!({ "n": 1 }), json!({ "n": "1" }), json!({ "n": 1, "to": "a=b c" })] {
        let item = NewItem::new("meta", json!(0)).metadata(metadata).tag("t");
        ids.push(store.queue().enqueue(item).expect("enqueue").id);
    }
    store.close().expect("close");
    let ui = Ui::start(&db);
    let ids_of = |query: &str| page_ids(&ui.get(&format!("/api/queues/meta/items?{query}")));
    assert_eq!(ids_of("status=pending&meta=n%3D1"), [ids[0].clone(), ids[2].clone()]);
    assert_eq!(ids_of("status=pending&meta=n%3D%221%22"), [ids[1].clone()], "the string");
    assert_eq!(ids_of("meta=to%3Da%3Db+c"), [ids[2].clone()], "text, split at the first =");
    assert_eq!(ids_of("meta=n%3D1&meta=to%3Da%3Db%20c&tag=t"), [ids[2].clone()], "all hold");
    assert_eq!(ids_of("meta=n%3D1&limit=1")[..], ids[..1]);
    assert_eq!(ids_of(&format!("meta=n%3D1&after={}", ids[0])), [ids[2].clone()]);
    assert_eq!(ids_of("meta=&status=pending").len(), 3, "an empty condition is none");

    // What the store holds, but for the ages (the clock runs).
    let state = || {
        let mut queues = ui.get("/api/queues");
        for queue in queues.as_array_mut().expect("queues") {
            queue["oldest_pending_age_ms"] = Value::Null;
        }
        (queues, ui.get("/api/queues/meta/items?status=pending"))
    };
    let before = state();
    let long = format!("meta=n%3D{}", "x".repeat(2_000));
    let many: String =
        (0..=spindle::queue::METADATA_CONDITIONS_MAX).map(|n| format!("&meta=k{n}%3D1")).collect();
    let nested = format!("{}{}", "%5B".repeat(100), "%5D".repeat(100));
    for bad in [
        "meta=n".to_owned(),
        "meta=%3D1".to_owned(),
        "meta=n%3D%5B1%5D".to_owned(),
        "meta=n%3D%7B%7D".to_owned(),
        "meta=%0A%3D1".to_owned(),
        format!("meta=n%3D{nested}"),
        long,
        many,
    ] {
        let (status, body) =
            ui.call("GET", &format!("/api/queues/meta/items?status=pending&{bad}"));
        let shown: String = bad.chars().take(40).collect();
        assert_eq!(status, 400, "{shown}: {body}");
        assert!(body["error"].is_string(), "{shown}: {body}");
    }
    assert_eq!(state(), before, "nothing written");
}
