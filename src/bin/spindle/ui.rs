//! `spindle ui`: the dashboard's HTTP server. It serves the pages (`ui_assets.rs`), the JSON
//! API (`ui_api.rs`), live updates by Server-Sent Events (`ui_live.rs`) and, with
//! `--allow-actions`, the queue actions of a signed-in session (`ui_session.rs`), from a view of
//! any store (another process may be running work in it).
//!
//! `tiny_http` parses HTTP (synchronous: no async runtime); a small pool of threads answers
//! requests, and each live stream has a thread of its own, at most `ui_live::STREAMS_MAX`.
//! Every request's `Host` must name this server (a page of another site cannot reach it by
//! renaming itself, "DNS rebinding"). No answer ever holds a stack trace.

use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use spindle::Store;

use crate::common::{CliError, Output, now_ms};
use crate::ui_api::{self, Reply};
use crate::ui_assets;
use crate::ui_live;
use crate::ui_session;
use crate::ui_state::{Head, Sample, Sessions, Settings, Ui, add_headers};

/// Threads answering requests at once (live streams aside).
const THREADS: usize = 4;
/// The largest request body read (a sign-in's token, an action's empty body).
const BODY_BYTES_MAX: u64 = 16 * 1024;
/// How often the overview's queue chart samples the queues.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept: ten minutes.
const SAMPLES_MAX: usize = 120;

/// Serves until the process is stopped; prints the address it listens on first.
pub fn serve(store: &Store, settings: Settings, out: &Output) -> Result<(), CliError> {
    let addr = listen_address(&settings)?;
    let server = tiny_http::Server::http(addr)
        .map_err(|error| CliError::Internal(format!("cannot listen on {addr}: {error}")))?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    println!("spindle ui: http://{bound}/");
    let mode = if settings.allow_actions { "queue actions allowed" } else { "read-only" };
    out.note(&format!("serving the store ({mode}); Ctrl-C stops it"));
    let ui = Arc::new(Ui {
        store: store.clone(),
        hosts: hosts_of(bound, &settings.hosts),
        settings,
        sessions: Mutex::new(Sessions::default()),
        samples: Mutex::new(VecDeque::new()),
        streams: Arc::new(AtomicUsize::new(0)),
    });
    let server = Arc::new(server);
    let mut threads = vec![spawn("spindle-ui-sampler", {
        let ui = Arc::clone(&ui);
        move || sample_all(&ui)
    })?];
    for n in 0..THREADS {
        let (server, ui) = (Arc::clone(&server), Arc::clone(&ui));
        threads.push(spawn(&format!("spindle-ui-{n}"), move || answer_all(&server, &ui))?);
    }
    for thread in threads {
        thread.join().map_err(|_| CliError::Internal("a ui thread panicked".into()))?;
    }
    Ok(())
}

/// The address to listen on, refusing what would expose actions without a token.
fn listen_address(settings: &Settings) -> Result<SocketAddr, CliError> {
    let addr: SocketAddr = settings.addr.parse().map_err(|_| {
        CliError::Bad(format!(
            "--addr is an address and port such as 127.0.0.1:7433, not {:?}",
            settings.addr
        ))
    })?;
    if addr.ip().is_loopback() {
        return Ok(addr);
    }
    if settings.allow_actions && !settings.require_token {
        return Err(CliError::Bad(format!(
            "{addr} is reachable from other machines: with --allow-actions it also needs \
             --require-token (every page then asks for an API token)"
        )));
    }
    eprintln!(
        "spindle ui: warning: {addr} is reachable from other machines; {}",
        if settings.require_token {
            "every request needs a session signed in with an API token"
        } else {
            "anyone who can reach it can read the store (--require-token asks for a token)"
        }
    );
    if addr.ip().is_unspecified() && settings.hosts.is_empty() {
        eprintln!(
            "spindle ui: warning: bound to every address and given no --host, it answers to \
             any host name (no defence against DNS rebinding): name it with --host"
        );
    }
    Ok(addr)
}

/// The `Host` values of a server bound to `addr` and named `names` too: each with the port,
/// and without it on port 80. None (no check) for a server bound to every address and named
/// nothing.
fn hosts_of(addr: SocketAddr, names: &[String]) -> Vec<String> {
    let port = addr.port();
    let mut bare: Vec<String> = names.to_vec();
    if !addr.ip().is_unspecified() {
        bare.push(addr.to_string().rsplit_once(':').map_or_else(String::new, |(ip, _)| ip.into()));
    }
    if addr.ip().is_loopback() {
        bare.push("localhost".into());
    }
    let mut hosts: Vec<String> = bare.iter().map(|name| format!("{name}:{port}")).collect();
    if port == 80 {
        hosts.extend(bare);
    }
    hosts
}

fn spawn(
    name: &str,
    work: impl FnOnce() + Send + 'static,
) -> Result<thread::JoinHandle<()>, CliError> {
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(work)
        .map_err(|e| CliError::Internal(format!("cannot start a thread: {e}")))
}

/// Samples the queues every `SAMPLE_EVERY`, keeping the last `SAMPLES_MAX`.
fn sample_all(ui: &Ui) {
    loop {
        if let Ok(stats) = ui.store.queue().stats() {
            let depth = stats.iter().map(|q| q.pending + q.scheduled + q.claimed).sum();
            let completed = stats.iter().map(|q| q.completed).sum();
            let mut samples = ui.samples.lock();
            samples.push_back(Sample { at_ms: now_ms(), depth, completed });
            while samples.len() > SAMPLES_MAX {
                samples.pop_front();
            }
        }
        thread::sleep(SAMPLE_EVERY);
    }
}

/// Answers requests until the server stops.
fn answer_all(server: &tiny_http::Server, ui: &Arc<Ui>) {
    while let Ok(request) = server.recv() {
        handle(ui, request);
    }
}

/// Answers one request; a bug in a handler answers 500 and leaves the thread serving.
fn handle(ui: &Arc<Ui>, mut request: tiny_http::Request) {
    let head = match read_head(&mut request) {
        Ok(head) => head,
        Err(reply) => return drop(request.respond(response(reply, None))),
    };
    let live = head.path == "/api/live" && head.method == "GET";
    let answered = std::panic::catch_unwind(AssertUnwindSafe(|| {
        refused(ui, &head)?;
        if live {
            return ui_live::open(ui, &head).map(Answer::Live);
        }
        Ok(Answer::Now(answer(ui, &head)))
    }));
    // A client that went away is its own business.
    let _ = match answered {
        Ok(Ok(Answer::Live(live))) => return ui_live::spawn(request, live),
        Ok(Ok(Answer::Now((reply, cookie)))) => request.respond(response(reply, cookie.as_deref())),
        Ok(Err(reply)) => request.respond(response(reply, None)),
        Err(_) => {
            let reply = Reply::error(500, "the dashboard failed on this request");
            request.respond(response(reply, None))
        }
    };
}

/// What a request gets: an answer now (with a session cookie to set), or a live stream.
enum Answer {
    Now((Reply, Option<String>)),
    Live(ui_live::Live),
}

/// Refuses a request that names another host (a page of another site that renamed itself to
/// this address: "DNS rebinding"), and an API request a browser says another site made.
fn refused(ui: &Ui, head: &Head) -> Result<(), Reply> {
    if !ui.host_allowed(head.host.as_deref()) {
        return Err(Reply::error(421, "this server answers to its own names only (see --host)"));
    }
    if head.path.starts_with("/api/") && head.fetch_site.as_deref() == Some("cross-site") {
        return Err(Reply::error(403, "cross-site requests are refused"));
    }
    Ok(())
}

/// The answer to one request, and a session cookie to set.
fn answer(ui: &Ui, head: &Head) -> (Reply, Option<String>) {
    if !head.path.starts_with("/api/") {
        return (ui_assets::page_or_asset(&head.method, &head.path), None);
    }
    if head.path == "/api/session" || head.path == "/api/session/logout" {
        return ui_session::session(ui, head);
    }
    if head.method == "POST" {
        return (ui_session::action(ui, head), None);
    }
    if let Err(reply) = ui_session::may_read(ui, head) {
        return (reply, None);
    }
    let samples: Vec<Sample> = ui.samples.lock().iter().copied().collect();
    (ui_api::route(&ui.store, &head.method, &head.path, &head.query, &samples), None)
}

/// The request's method, path, query, the headers the handlers use, and a POST's body (at
/// most `BODY_BYTES_MAX`: a longer one is refused with 413).
fn read_head(request: &mut tiny_http::Request) -> Result<Head, Reply> {
    let header = |name: &str| {
        request
            .headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str().to_owned())
    };
    let (path, query) = request.url().split_once('?').unwrap_or((request.url(), ""));
    let cookie = header("Cookie");
    let mut head = Head {
        method: request.method().as_str().to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        host: header("Host"),
        origin: header("Origin"),
        fetch_site: header("Sec-Fetch-Site"),
        content_type: header("Content-Type"),
        csrf: header("X-Spindle-Csrf"),
        session: cookie.as_deref().and_then(ui_session::session_cookie),
        last_event_id: header("Last-Event-ID"),
        body: String::new(),
    };
    if head.method == "POST" {
        let mut body = Vec::new();
        let read = request.as_reader().take(BODY_BYTES_MAX + 1).read_to_end(&mut body);
        if read.is_err() || body.len() as u64 > BODY_BYTES_MAX {
            return Err(Reply::error(413, format!("a body is at most {BODY_BYTES_MAX} bytes")));
        }
        head.body = String::from_utf8_lossy(&body).into_owned();
    }
    Ok(head)
}

/// An answer as HTTP, with the headers every answer carries.
fn response(reply: Reply, cookie: Option<&str>) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let status = reply.status;
    let (content_type, body) = reply.into_content();
    let mut response = tiny_http::Response::from_data(body).with_status_code(status);
    let mut headers = vec![("Content-Type", content_type)];
    if let Some(cookie) = cookie {
        headers.push(("Set-Cookie", cookie));
    }
    add_headers(&mut response, &headers);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_server_answers_to_its_address_and_localhost_only() {
        let hosts = hosts_of("127.0.0.1:7433".parse().expect("addr"), &[]);
        assert_eq!(hosts, ["127.0.0.1:7433", "localhost:7433"]);
        assert!(hosts_of("0.0.0.0:80".parse().expect("addr"), &[]).is_empty());
        let named = hosts_of("0.0.0.0:80".parse().expect("addr"), &["ops.example".into()]);
        assert_eq!(named, ["ops.example:80", "ops.example"]);
        let v6 = hosts_of("[::1]:7433".parse().expect("addr"), &[]);
        assert_eq!(v6, ["[::1]:7433", "localhost:7433"]);
    }

    #[test]
    fn actions_on_another_machines_reach_need_a_token() {
        let settings = |addr: &str, allow_actions, require_token| Settings {
            addr: addr.into(),
            allow_actions,
            require_token,
            hosts: Vec::new(),
        };
        assert!(listen_address(&settings("0.0.0.0:0", true, false)).is_err());
        assert!(listen_address(&settings("0.0.0.0:0", true, true)).is_ok());
        assert!(listen_address(&settings("0.0.0.0:0", false, false)).is_ok());
        assert!(listen_address(&settings("127.0.0.1:0", true, false)).is_ok());
        assert!(listen_address(&settings("localhost", false, false)).is_err());
    }
}
