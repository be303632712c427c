//! `spindle ui` against hostile clients (issue 27), on the built binary started under
//! `ulimit -n 256`: idle connections past the file-descriptor limit, the process run out of
//! file descriptors, slow request bodies, a client that pipelines and never reads, huge header
//! lines and query strings, bodies over the limit, and slow heads. During each attack (its
//! connections still open) a normal request is answered 200 within a second, and again after
//! it; the process's memory stays bounded. The figures are printed (`--nocapture` shows them).
//!
//! The tests take turns (one lock): each measures how fast a normal request is answered, which
//! another test's attack on the same two cores would blur.
#![cfg(feature = "cli")]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spindle::{Store, Stream};

const BIN: &str = env!("CARGO_BIN_EXE_spindle");
/// The file-descriptor limit every server here runs under.
const FD_LIMIT: u32 = 256;
/// A normal request is answered within this, during an attack too.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// The most memory (VmHWM, the peak) a server may reach under any attack here.
const MEMORY_MAX_KB: u64 = 100 * 1024;

/// One test at a time (see the file's header).
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A `spindle ui` under `ulimit -n FD_LIMIT`, stopped when dropped.
struct Ui {
    child: Child,
    addr: String,
    stderr: PathBuf,
}

impl Ui {
    /// A server on a fresh store in `dir`; `timeout_ms` sets every deadline of its requests.
    fn start(dir: &Path, timeout_ms: Option<u64>) -> Self {
        let db = store(dir);
        let stderr = dir.join("stderr.txt");
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {FD_LIMIT} && exec \"$0\" \"$@\""))
            .arg(BIN)
            .arg("--db")
            .arg(&db)
            .args(["ui", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        if let Some(ms) = timeout_ms {
            command.env("SPINDLE_UI_TIMEOUT_MS", ms.to_string());
        }
        let mut child = command.spawn().expect("spindle ui");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("the address line");
        let addr = line
            .trim()
            .strip_prefix("spindle ui: http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        Ui { child, addr, stderr }
    }

    /// The server's resident memory now and at its peak, in KiB.
    fn memory_kb(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        let field = |name: &str| {
            let line = status.lines().find(|line| line.starts_with(name)).expect(name);
            line.split_whitespace().nth(1).and_then(|kb| kb.parse().ok()).expect("a number")
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Asks `GET /api/overview` on a new connection: 200 within `ANSWER_WITHIN`. Returns the
    /// time it took.
    fn probe(&self, when: &str) -> Duration {
        assert!(self.alive(), "the server died ({when})");
        let began = Instant::now();
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let request = format!(
            "GET /api/overview HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap_or_else(|e| panic!("{when}: no answer: {e}"));
        let took = began.elapsed();
        assert!(answer.starts_with("HTTP/1.1 200"), "{when}: {answer:.300}");
        assert!(answer.contains("\"runs\""), "{when}: {answer:.300}");
        assert!(took < ANSWER_WITHIN, "{when}: answered in {took:?}");
        took
    }

    /// Prints the figures of an attack: the normal request's time during it, memory; checks
    /// the peak.
    fn report(&self, attack: &str, during: Duration) {
        let (rss, hwm) = self.memory_kb();
        eprintln!(
            "ui_hostile: {attack}: a normal request answered in {:.1} ms during it; \
             VmRSS {:.1} MB, VmHWM {:.1} MB",
            during.as_secs_f64() * 1e3,
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
        assert!(hwm < MEMORY_MAX_KB, "{attack}: memory reached {hwm} KiB");
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        stream
    }

    /// A request head naming this server, with `extra` header lines.
    fn head(&self, line: &str, extra: &str) -> String {
        format!("{line}\r\nHost: {}\r\n{extra}\r\n", self.addr)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the server runs (not a zombie, not gone).
    fn alive(&self) -> bool {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()));
        status.is_ok_and(|s| s.lines().any(|l| l.starts_with("State:") && !l.contains("zombie")))
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store with an event, closed.
fn store(dir: &Path) -> PathBuf {
    let db = dir.join("spindle.db");
    let store = Store::open(&db).expect("open");
    store.events().append(Stream::custom("chat"), "said", json!("hello")).expect("append");
    store.close().expect("close");
    db
}

/// The status of the answer on `stream`, or None when it closed (or reset) without one.
fn status_of(stream: &TcpStream) -> Option<u16> {
    let mut line = String::new();
    let mut reader = BufReader::new(stream);
    match reader.read_line(&mut line) {
        Ok(_) => line.split(' ').nth(1).and_then(|status| status.parse().ok()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("no answer in time")
        }
        Err(_) => None,
    }
}

/// Whether the server closed `stream` (without waiting).
fn closed_by_server(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0_u8; 1];
    let closed = match (&*stream).read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    stream.set_nonblocking(false).expect("blocking");
    closed
}

#[test]
fn idle_connections_past_the_bound_are_shed_and_the_listener_keeps_accepting() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), None);
    // 300 connections: half idle, half with a request begun, under a limit of 256 files.
    let mut held = Vec::new();
    for n in 0..300 {
        let mut stream = ui.connect();
        if n % 2 == 1 {
            stream.write_all(b"GET /api/overview HTTP/1.1\r\n").expect("send");
        }
        held.push(stream);
    }
    let during = ui.probe("during 300 idle connections");
    // Those past the bound (128) were shed, the oldest first, to let new ones in.
    let began = Instant::now();
    let shed = loop {
        let shed = held.iter().filter(|s| closed_by_server(s)).count();
        if shed >= 300 - 128 || began.elapsed() > Duration::from_secs(5) {
            break shed;
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert!(shed >= 300 - 128, "only {shed} of 300 were shed");
    assert!(!closed_by_server(&held[299]), "the newest is kept");
    ui.report("300 idle connections, ulimit -n 256", during);
    drop(held);
    ui.probe("after the idle connections");
}

#[test]
fn the_listener_survives_running_out_of_file_descriptors() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), None);
    // The bound was fitted to 256 files at start; 64 now leaves room for about 50 sockets, so
    // accepting fails with EMFILE long before the bound is reached.
    let lowered = Command::new("prlimit")
        .arg(format!("--pid={}", ui.pid()))
        .arg("--nofile=64:64")
        .status()
        .expect("prlimit");
    assert!(lowered.success());
    let held: Vec<TcpStream> = (0..200).map(|_| ui.connect()).collect();
    let during = ui.probe("out of file descriptors");
    let warned = std::fs::read_to_string(&ui.stderr).expect("stderr");
    assert!(warned.contains("cannot accept a connection"), "no EMFILE seen: {warned}");
    ui.report("200 connections, 64 file descriptors (EMFILE)", during);
    drop(held);
    for n in 0..3 {
        ui.probe(&format!("after running out of file descriptors ({n})"));
    }
}

#[test]
fn slow_bodies_are_read_only_after_the_host_and_session_checks_and_by_a_deadline() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), Some(2_000));
    let slow_post = |host: &str, cookie: &str| {
        let mut stream = ui.connect();
        let head = format!(
            "POST /api/session HTTP/1.1\r\nHost: {host}\r\n{cookie}Content-Type: application/json\r\n\
             Content-Length: 16000\r\n\r\n{{"
        );
        stream.write_all(head.as_bytes()).expect("send");
        stream
    };
    // A wrong Host is refused at once, its body unread.
    let wrong_host: Vec<_> = (0..40).map(|_| slow_post("evil.example", "")).collect();
    for stream in &wrong_host {
        assert_eq!(status_of(stream), Some(421));
    }
    // So is a POST without a session: every POST needs one.
    let addr = ui.addr.clone();
    let no_session: Vec<_> = (0..40).map(|_| slow_post(&addr, "")).collect();
    for stream in &no_session {
        assert_eq!(status_of(stream), Some(403));
    }
    // With a session the body is read, within its deadline: meanwhile others are answered.
    let mut stream = ui.connect();
    stream.write_all(ui.head("GET /api/session HTTP/1.1", "").as_bytes()).expect("send");
    let mut answer = vec![0_u8; 4096];
    let read = stream.read(&mut answer).expect("the session");
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    let cookie = answer
        .lines()
        .find_map(|line| line.strip_prefix("Set-Cookie: "))
        .and_then(|value| value.split(';').next())
        .expect("a session cookie");
    let began = Instant::now();
    let cookie = format!("Cookie: {cookie}\r\n");
    let slow: Vec<_> = (0..40).map(|_| slow_post(&addr, &cookie)).collect();
    let during = ui.probe("during 40 slow bodies");
    for stream in &slow {
        assert_eq!(status_of(stream), Some(408), "cut at the body's deadline");
    }
    let cut_after = began.elapsed();
    assert!(cut_after < Duration::from_secs(5), "cut after {cut_after:?}");
    eprintln!("ui_hostile: 40 slow bodies cut at the 2 s deadline after {cut_after:?}");
    ui.report("120 slow bodies (40 wrong Host, 40 no session, 40 slow)", during);
    drop((wrong_host, no_session, slow));
    ui.probe("after the slow bodies");
}

#[test]
fn a_client_that_pipelines_and_never_reads_holds_only_its_own_connection() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), None);
    let mut greedy = ui.connect();
    let request = ui.head("GET /assets/dagre.min.js HTTP/1.1", "");
    greedy.write_all(request.repeat(200).as_bytes()).expect("send");
    // What the attack needs: time for its answers to fill the socket's buffers.
    thread::sleep(Duration::from_millis(300));
    let during = (0..3).map(|_| ui.probe("during a pipelining client")).max().expect("3");
    ui.report("one connection pipelining 200 asset requests, never reading", during);
    drop(greedy);
    ui.probe("after the pipelining client");
}

#[test]
fn pipelined_requests_are_answered_in_order_up_to_the_bound_per_connection() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), None);
    let mut stream = ui.connect();
    let request = ui.head("GET /assets/favicon.svg HTTP/1.1", "");
    stream.write_all(request.repeat(150).as_bytes()).expect("send");
    let mut answers = String::new();
    stream.read_to_string(&mut answers).expect("answers until the server closes");
    assert_eq!(answers.matches("HTTP/1.1 200 OK\r\n").count(), 100, "100 per connection");
    assert_eq!(answers.matches("Connection: close\r\n").count(), 1, "the last one says so");
}

#[test]
fn huge_header_lines_and_query_strings_are_refused_with_bounded_memory() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), None);
    // Each sends its bytes from a thread of its own and reads the answer meanwhile.
    let flood = |start: String, bytes: usize| {
        let stream = ui.connect();
        let mut writer = stream.try_clone().expect("clone");
        let sender = thread::spawn(move || {
            let chunk = vec![b'a'; 64 * 1024];
            let mut sent = writer.write_all(start.as_bytes()).is_ok();
            let mut left = bytes;
            while sent && left > 0 {
                let n = left.min(chunk.len());
                sent = writer.write_all(&chunk[..n]).is_ok();
                left -= n;
            }
        });
        (stream, sender)
    };
    let header = ui.head("GET /api/overview HTTP/1.1", "").replace("\r\n\r\n", "\r\nX-Big: ");
    let floods: Vec<_> = (0..8).map(|_| flood(header.clone(), 8 << 20)).collect();
    let during = ui.probe("during 8 huge header lines");
    let mut peak = ui.memory_kb().0;
    for (stream, sender) in floods {
        assert!(matches!(status_of(&stream), Some(431) | None), "431 or closed");
        let _ = stream.shutdown(Shutdown::Both);
        sender.join().expect("sender");
        peak = peak.max(ui.memory_kb().0);
    }
    eprintln!("ui_hostile: 8 x 8 MB header lines: VmRSS at most {:.1} MB", peak as f64 / 1024.0);
    let (query, sender) = flood("GET /api/overview?q=".into(), 10 << 20);
    assert_eq!(status_of(&query), Some(414), "a 10 MB query string");
    let _ = query.shutdown(Shutdown::Both);
    sender.join().expect("sender");
    let many: String = (0..100).map(|n| format!("X-{n}: 1\r\n")).collect();
    let mut stream = ui.connect();
    stream.write_all(ui.head("GET /api/overview HTTP/1.1", &many).as_bytes()).expect("send");
    assert_eq!(status_of(&stream), Some(431), "100 headers");
    ui.report("8 x 8 MB header lines, a 10 MB query string", during);
    ui.probe("after the huge heads");
}

#[test]
fn a_body_over_the_limit_or_chunked_is_refused_before_it_is_read() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), None);
    let mut stream = ui.connect();
    stream.write_all(ui.head("GET /api/session HTTP/1.1", "").as_bytes()).expect("send");
    let mut answer = vec![0_u8; 4096];
    let read = stream.read(&mut answer).expect("the session");
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    let cookie = answer
        .lines()
        .find_map(|line| line.strip_prefix("Set-Cookie: "))
        .and_then(|value| value.split(';').next())
        .expect("a session cookie")
        .to_owned();
    for (extra, status) in [
        ("Content-Length: 1000000\r\n", 413),
        ("Content-Length: 16385\r\n", 413),
        ("Transfer-Encoding: chunked\r\n", 411),
        ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
    ] {
        let mut stream = ui.connect();
        let extra = format!("Cookie: {cookie}\r\nContent-Type: application/json\r\n{extra}");
        let began = Instant::now();
        stream.write_all(ui.head("POST /api/session HTTP/1.1", &extra).as_bytes()).expect("send");
        assert_eq!(status_of(&stream), Some(status), "{extra}");
        assert!(began.elapsed() < ANSWER_WITHIN, "answered without waiting for the body");
    }
    // A body within the limit is read, after a 100 Continue when the client asks for one.
    let mut stream = ui.connect();
    let extra = format!(
        "Cookie: {cookie}\r\nContent-Type: application/json\r\nOrigin: http://{}\r\n\
         Expect: 100-continue\r\nContent-Length: 2\r\n",
        ui.addr
    );
    stream.write_all(ui.head("POST /api/session HTTP/1.1", &extra).as_bytes()).expect("send");
    assert_eq!(status_of(&stream), Some(100));
    stream.write_all(b"{}").expect("the body");
    let mut rest = String::new();
    let _ = stream.read_to_string(&mut rest);
    // The anti-forgery token is missing: refused, after the body was read.
    assert!(rest.contains("HTTP/1.1 403"), "{rest}");
    let during = ui.probe("after the oversized bodies");
    ui.report("bodies over the limit", during);
}

#[test]
fn slow_heads_and_idle_connections_are_cut_at_their_deadlines() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), Some(1_500));
    let idle = ui.connect();
    let slow: Vec<TcpStream> = (0..60)
        .map(|_| {
            let mut stream = ui.connect();
            stream.write_all(b"GET /api/overview HTTP/1.1\r\nX-Slow: ").expect("send");
            stream
        })
        .collect();
    let began = Instant::now();
    // One byte to each every 100 ms: never idle, never done.
    let writers: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().expect("clone")).collect();
    let trickle = thread::spawn(move || {
        let mut writers = writers;
        while !writers.is_empty() && began.elapsed() < Duration::from_secs(10) {
            writers.retain_mut(|w| w.write_all(b"a").is_ok());
            thread::sleep(Duration::from_millis(100));
        }
    });
    let during = ui.probe("during 60 slow heads");
    for stream in &slow {
        assert!(matches!(status_of(stream), Some(408) | None), "cut at the head's deadline");
    }
    let cut_after = began.elapsed();
    assert!(cut_after < Duration::from_secs(5), "cut after {cut_after:?}");
    let mut byte = [0_u8; 1];
    assert_eq!((&idle).read(&mut byte).expect("closed"), 0, "the idle one is closed too");
    eprintln!("ui_hostile: 60 slow heads cut at the 1.5 s deadline after {cut_after:?}");
    ui.report("60 slow heads, one byte every 100 ms", during);
    drop(slow);
    trickle.join().expect("trickle");
    ui.probe("after the slow heads");
}

#[test]
fn a_deeply_nested_event_is_answered_on_a_connection_threads_small_stack() {
    let _turn = turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let ui = Ui::start(dir.path(), None);
    let store = Store::open(dir.path().join("spindle.db")).expect("open");
    let nested = (1..64).fold(json!(0), |inner, _| json!([inner]));
    store.events().append(Stream::custom("deep"), "deep", nested).expect("append");
    store.close().expect("close");
    let mut stream = ui.connect();
    let request = ui.head("GET /api/events?stream=custom%3Adeep HTTP/1.1", "Connection: close\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:.300}");
    assert!(answer.contains("[[[[[[[[0]]]]]]]]"), "{answer:.300}");
    ui.probe("after a deep event");
}
