//! `spindle ui`: the dashboard's HTTP server. It serves the pages (`assets.rs`), the JSON
//! API (`api.rs`), live updates by Server-Sent Events (`live.rs`) and, with
//! `--allow-actions`, the queue actions of a signed-in session (`session.rs`), from a view of
//! any store (another process may be running work in it).
//!
//! The HTTP server is our own (`http.rs`: bounded connections, deadlines and sizes against
//! hostile clients); this file routes requests. Every request's `Host` must name this server (a
//! page of another site cannot reach it by renaming itself, "DNS rebinding"), checked before a
//! body is read. No answer ever holds a stack trace.
//!
//! The folder: this file (routing), `http.rs` and `http/` (the server: connections, the gate
//! that bounds them), `state.rs` (what the handlers share: options, the store view, sessions,
//! samples, common headers), `api.rs`, `live.rs` and `streams.rs` (the open live streams and
//! their bounds), `session.rs`, and `assets.rs` with `assets/` (the pages, scripts and styles).

mod api;
mod assets;
mod http;
mod live;
mod session;
mod state;
mod streams;

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use spindle::Store;

use crate::common::{CliError, Output, now_ms};
use crate::ui::api::Reply;
use crate::ui::http::{Answer, Site, Weight};
pub use crate::ui::state::Settings;
use crate::ui::state::{Head, Sample, Sessions, Ui};
use crate::ui::streams::Streams;

/// How often the overview's queue chart samples the queues.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept: ten minutes.
const SAMPLES_MAX: usize = 120;

/// Serves until the process is stopped; prints the address it listens on first.
pub fn serve(store: &Store, settings: Settings, out: &Output) -> Result<(), CliError> {
    let addr = listen_address(&settings)?;
    let listener = TcpListener::bind(addr)
        .map_err(|error| CliError::Internal(format!("cannot listen on {addr}: {error}")))?;
    let bound = listener.local_addr().unwrap_or(addr);
    println!("spindle ui: http://{bound}/");
    let mode = if settings.allow_actions { "queue actions allowed" } else { "read-only" };
    out.note(&format!("serving the store ({mode}); Ctrl-C stops it"));
    let ui = Arc::new(Ui {
        store: store.clone(),
        hosts: hosts_of(bound, &settings.hosts),
        settings,
        sessions: Mutex::new(Sessions::default()),
        samples: Mutex::new(VecDeque::new()),
        streams: Arc::new(Streams::default()),
    });
    let _sampler = spawn("spindle-ui-sampler", {
        let ui = Arc::clone(&ui);
        move || sample_all(&ui)
    })?;
    let accept = spawn("spindle-ui-accept", move || http::accept_all(&listener, ui))?;
    // The accept loop never ends by itself; should a bug end it, the process stops (a
    // dashboard that no longer listens must not look alive).
    accept.join().map_err(|_| CliError::Internal("the dashboard's listener failed".into()))?;
    Err(CliError::Internal("the dashboard's listener stopped".into()))
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

/// The dashboard, as the HTTP server asks of it.
impl Site for Ui {
    fn refused(&self, head: &Head) -> Result<(), Reply> {
        refused(self, head)
    }

    fn reads_body(&self, head: &Head) -> bool {
        reads_body(self, head)
    }

    fn weight(&self, head: &Head) -> Weight {
        weight(head)
    }

    fn respond(&self, head: &Head, allowed: usize) -> Answer {
        respond(self, head, allowed)
    }
}

/// Answers a request that passed [`refused`] (its body read if [`reads_body`]), in at most
/// `allowed` bytes where it is a page; a bug in a handler answers 500.
fn respond(ui: &Ui, head: &Head, allowed: usize) -> Answer {
    let live = head.path == "/api/live" && head.method == "GET";
    let answered = std::panic::catch_unwind(AssertUnwindSafe(|| {
        if live {
            return live::open(ui, head).map(Answer::Live);
        }
        let (reply, cookie) = answer(ui, head, allowed);
        Ok(Answer::Now(reply, cookie))
    }));
    match answered {
        Ok(Ok(answer)) => answer,
        Ok(Err(reply)) => Answer::Now(reply, None),
        Err(_) => Answer::Now(Reply::error(500, "the dashboard failed on this request"), None),
    }
}

/// Where a Prometheus scraper reads the store's metrics (the view's tenant's counts and the
/// store's work), in the text format: the same Host and token rules as every API read.
const METRICS: &str = "/metrics";

/// The API paths whose answers are bounded by the code, not by the store's records.
const LIGHT: [&str; 6] = [
    "/api/overview",
    "/api/session",
    "/api/session/logout",
    "/api/tenants",
    "/api/tokens",
    "/api/live",
];

/// What making the answer to a request may cost: heavy when it reads the store's records (a
/// page of them, a run, a node, a workflow, the queues) or acts on a queue; light otherwise.
fn weight(head: &Head) -> Weight {
    let path = head.path.trim_end_matches('/');
    let reads_store = (path.starts_with("/api/") && !LIGHT.contains(&path)) || path == METRICS;
    if reads_store { Weight::Heavy } else { Weight::Light }
}

/// Whether a request's body is worth reading: only a POST's with a live session, and then
/// only a sign-in's (its token) or, with actions allowed, a signed-in session's action.
/// Otherwise the answer is a refusal that does not look at the body, which is left unread.
fn reads_body(ui: &Ui, head: &Head) -> bool {
    let Some(id) = head.session.as_deref().filter(|_| head.method == "POST") else {
        return false;
    };
    let mut sessions = ui.sessions.lock();
    let Some(session) = sessions.live(id) else { return false };
    let acts = ui.settings.allow_actions && head.path.starts_with("/api/queues/");
    head.path == "/api/session" || (acts && session.signed_in.is_some())
}

/// Refuses a request that names another host (a page of another site that renamed itself to
/// this address: "DNS rebinding"), and an API request a browser says another site made. Runs
/// before a body is read.
fn refused(ui: &Ui, head: &Head) -> Result<(), Reply> {
    if !ui.host_allowed(head.host.as_deref()) {
        return Err(Reply::error(421, "this server answers to its own names only (see --host)"));
    }
    let reads_data = head.path.starts_with("/api/") || head.path == METRICS;
    if reads_data && head.fetch_site.as_deref() == Some("cross-site") {
        return Err(Reply::error(403, "cross-site requests are refused"));
    }
    Ok(())
}

/// The answer to one request (a page of at most `allowed` bytes), and a session cookie to set.
fn answer(ui: &Ui, head: &Head, allowed: usize) -> (Reply, Option<String>) {
    if head.path == METRICS {
        return (metrics(ui, head), None);
    }
    if !head.path.starts_with("/api/") {
        return (assets::page_or_asset(&head.method, &head.path), None);
    }
    if head.path == "/api/session" || head.path == "/api/session/logout" {
        return session::session(ui, head);
    }
    if head.method == "POST" {
        return (session::action(ui, head), None);
    }
    if let Err(reply) = session::may_read(ui, head) {
        return (reply, None);
    }
    let samples: Vec<Sample> = ui.samples.lock().iter().copied().collect();
    let request = api::Request { method: &head.method, path: &head.path, query: &head.query };
    (api::route(&ui.store, &request, &samples, allowed), None)
}

/// `GET /metrics`: the store's metrics in the Prometheus text format.
fn metrics(ui: &Ui, head: &Head) -> Reply {
    if head.method != "GET" {
        return Reply::error(405, format!("{} is not allowed on {METRICS}", head.method));
    }
    if let Err(reply) = session::may_read(ui, head) {
        return reply;
    }
    match ui.store.metrics() {
        Ok(metrics) => Reply::text(metrics.prometheus()),
        Err(error) => api::store_error(error),
    }
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
