//! `spindle ui`: serves the dashboard's JSON API (`ui_api.rs`) over HTTP on loopback, from a
//! read-only view of any store (another process may be running work in it).
//!
//! A small pool of threads takes requests from `tiny_http` (synchronous: no async runtime).
//! Each answer is JSON with `Cache-Control: no-store`; no answer ever holds a stack trace.

use std::net::SocketAddr;
use std::thread;

use spindle::Store;

use crate::common::{CliError, Output};
use crate::ui_api::{self, Reply};

/// Threads answering requests at once.
const THREADS: usize = 4;

/// Serves until the process is stopped; prints the address it listens on first.
pub fn serve(store: &Store, addr: &str, out: &Output) -> Result<(), CliError> {
    let addr: SocketAddr = addr.parse().map_err(|_| {
        CliError::Bad(format!("--addr is an address and port such as 127.0.0.1:7433, not {addr:?}"))
    })?;
    if !addr.ip().is_loopback() {
        return Err(CliError::Bad(format!(
            "{addr} is not a loopback address: the dashboard only listens on this machine for now"
        )));
    }
    let server = tiny_http::Server::http(addr)
        .map_err(|error| CliError::Internal(format!("cannot listen on {addr}: {error}")))?;
    let bound = server.server_addr().to_ip().map_or_else(|| addr.to_string(), |a| a.to_string());
    println!("spindle ui: http://{bound}/api/overview");
    out.note("serving a read-only view of the store; Ctrl-C stops it");
    let server = std::sync::Arc::new(server);
    let mut workers = Vec::with_capacity(THREADS);
    for n in 0..THREADS {
        let (server, store) = (std::sync::Arc::clone(&server), store.clone());
        let worker = thread::Builder::new()
            .name(format!("spindle-ui-{n}"))
            .spawn(move || answer_all(&server, &store))
            .map_err(|e| CliError::Internal(format!("cannot start a thread: {e}")))?;
        workers.push(worker);
    }
    for worker in workers {
        worker.join().map_err(|_| CliError::Internal("a ui thread panicked".into()))?;
    }
    Ok(())
}

/// Answers requests until the server stops.
fn answer_all(server: &tiny_http::Server, store: &Store) {
    while let Ok(request) = server.recv() {
        let reply = ui_api::route(store, request.method().as_str(), request.url());
        // A client that went away is its own business.
        let _ = request.respond(response(&reply));
    }
}

/// An answer as HTTP.
fn response(reply: &Reply) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let body = reply.body.to_string().into_bytes();
    let mut response = tiny_http::Response::from_data(body).with_status_code(reply.status);
    for (name, value) in [
        ("Content-Type", "application/json; charset=utf-8"),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
    ] {
        if let Ok(header) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(header);
        }
    }
    response
}
