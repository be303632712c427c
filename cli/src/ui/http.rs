//! `spindle ui`'s HTTP/1.1 server: `std::net` and a thread per connection (no async runtime),
//! request heads parsed by `httparse` (hyper's parser), made to outlast hostile clients: no
//! client can stop it or hold it for the others.
//!
//! - Connections ([`connections`]): at most `CONNECTIONS_MAX` at once, fewer when file
//!   descriptors are scarce (`bound`), at most half of them from one peer, each on a thread of
//!   its own with a small stack. Past a bound, a connection that holds nothing is shed before
//!   one reading a body or writing an answer; a connection younger than a quarter of a second
//!   is never shed (the new one is answered 503 instead).
//! - Accept errors (out of file descriptors, of memory) never stop the listener: it sheds a
//!   connection, waits a moment for one to close, and goes on.
//! - Making answers ([`gate`]): at most 6 requests at once, at most 4 of them heavy (pages of
//!   records), so a light one never waits behind heavy ones; a request waits for its turn at
//!   most `queue` (then 503). An answer is at most 4 MiB (a page stops there and gives its
//!   cursor), and the answers not yet written hold at most 24 MiB between them.
//! - Deadlines ([`Deadlines`]): a request's first byte within `idle`, its whole head within
//!   `head` of that byte (408), its body within `body` (408), its turn within `queue` (503), a
//!   whole answer within `answer` (each write may block only for what is left of it); a live
//!   stream's each event within `live_write`, and the stream ends after `live_for`.
//!   `SPINDLE_UI_TIMEOUT_MS` sets them all (the tests use short ones).
//! - Sizes: a request line of at most `LINE_BYTES_MAX` (414), a head of at most
//!   `HEAD_BYTES_MAX` bytes and `HEADERS_MAX` headers (431), a body of at most
//!   `BODY_BYTES_MAX`, framed by `Content-Length` only (413; a chunked one 411). A body is read
//!   only once the request passed `Site::refused` (its `Host`), and only when the request can use
//!   it (`Site::reads_body`); otherwise the request is answered with its body unread, and the
//!   connection closes.
//! - Pipelining: one request is read and answered, then the next; at most
//!   `REQUESTS_PER_CONNECTION` on one connection; bytes sent ahead wait in a buffer no bigger
//!   than a head.
//! - Closing: the server stops writing, then drains what the client still sends for at most
//!   `LINGER_FOR`, so that the last answer is not lost to a reset; a 503 for want of room is
//!   drained the same way on a thread of its own (at most `BUSY_LINGERING_MAX` at once).

mod connections;
mod gate;

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::resource::{Resource, getrlimit};

use self::connections::{Conn, Connections, Phase};
use self::gate::Gate;
pub use self::gate::Weight;
use crate::ui::api::Reply;
use crate::ui::live;
use crate::ui::state::{Head, add_headers};
use crate::ui::streams;

/// Connections served at once, at most.
const CONNECTIONS_MAX: usize = 128;
/// Connections served at once, at least, however few file descriptors there are: room for
/// every live stream and as many other connections.
const CONNECTIONS_MIN: usize = 2 * streams::STREAMS_MAX;
/// File descriptors left to the rest of the process (the store's files, the standard streams,
/// the listener, the 503s being drained) when the bound is fitted to the process's limit.
const FDS_KEPT: u64 = 64;
/// A connection thread's stack. Answers are made on it (JSON is encoded recursively, up to the
/// store's nesting bound of 100, in debug builds too), so not tiny; only the pages it touches
/// take memory.
const STACK_BYTES: usize = 512 * 1024;
/// How long the accept loop waits for a shed connection to close.
const SHED_WAIT: Duration = Duration::from_millis(50);
/// The pause after an accept error that shedding did not relieve.
const ACCEPT_PAUSE: Duration = Duration::from_millis(20);
/// How often, at most, the same kind of trouble is written to stderr.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// The longest request line (method, target with its query, version).
const LINE_BYTES_MAX: usize = 8 * 1024;
/// The longest request head (request line and headers).
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Headers of a request, at most.
const HEADERS_MAX: usize = 64;
/// The largest request body read (a sign-in's token, an action's empty body).
const BODY_BYTES_MAX: usize = 16 * 1024;
/// Requests answered on one connection before it is closed.
const REQUESTS_PER_CONNECTION: usize = 100;
/// How long a closing connection drains what its client still sends.
const LINGER_FOR: Duration = Duration::from_secs(1);
/// How much a closing connection drains, at most (a client that sends a head of megabytes
/// still reads its 431).
const LINGER_BYTES_MAX: usize = 16 * 1024 * 1024;
/// 503s for want of room drained at once, each on a small thread of its own.
const BUSY_LINGERING_MAX: usize = 16;
/// How long such a 503 is drained.
const BUSY_LINGER_FOR: Duration = Duration::from_millis(250);
/// The stack of a thread draining a 503.
const BUSY_STACK_BYTES: usize = 64 * 1024;
/// The most one write of an answer hands the socket (so that the deadline is looked at).
const WRITE_CHUNK: usize = 64 * 1024;

/// How long a client may take over each part of a request and its answer.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    /// For the first byte of a request (the connection idles until then).
    idle: Duration,
    /// For a whole head, from its first byte.
    head: Duration,
    /// For a whole body.
    body: Duration,
    /// For a turn to make the answer.
    queue: Duration,
    /// For writing a whole answer.
    answer: Duration,
    /// For writing each event of a live stream.
    live_write: Duration,
    /// For a whole live stream (then the browser reconnects).
    live_for: Duration,
}

impl Deadlines {
    /// The deadlines served with.
    const DEFAULT: Deadlines = Deadlines {
        idle: Duration::from_secs(10),
        head: Duration::from_secs(10),
        body: Duration::from_secs(10),
        queue: Duration::from_secs(2),
        answer: Duration::from_secs(30),
        live_write: Duration::from_secs(10),
        live_for: live::STREAM_FOR,
    };

    /// The default deadlines, or all of them `SPINDLE_UI_TIMEOUT_MS` when it is set.
    fn from_env() -> Self {
        let ms = std::env::var("SPINDLE_UI_TIMEOUT_MS").ok().and_then(|ms| ms.parse().ok());
        match ms.filter(|ms: &u64| *ms > 0).map(Duration::from_millis) {
            Some(all) => Deadlines {
                idle: all,
                head: all,
                body: all,
                queue: all,
                answer: all,
                live_write: all,
                live_for: all,
            },
            None => Self::DEFAULT,
        }
    }
}

/// What the server asks of the site it serves (the dashboard: `ui/mod.rs`), in the order it asks:
/// whether a request is refused before its body is read, whether its body is read at all, how
/// heavy its answer is to make, and the answer. A trait, so that the server names nothing
/// above it: the dashboard uses the server, never the other way round.
pub trait Site: Send + Sync {
    /// Refuses a request before its body is read (a `Host` of another site, say).
    fn refused(&self, head: &Head) -> Result<(), Reply>;
    /// Whether the request's body is worth reading (it is left unread otherwise).
    fn reads_body(&self, head: &Head) -> bool;
    /// What making the answer may cost.
    fn weight(&self, head: &Head) -> Weight;
    /// The answer, a page of it at most `allowed` bytes.
    fn respond(&self, head: &Head, allowed: usize) -> Answer;
}

/// What a request gets: an answer now (with a session cookie to set), or a live stream.
pub enum Answer {
    /// An answer to write at once, and the session cookie to set with it.
    Now(Reply, Option<String>),
    /// A live stream of events, written as they come.
    Live(live::Live),
}

/// What every connection's thread shares.
struct Server {
    site: Arc<dyn Site>,
    connections: Arc<Connections>,
    gate: Gate,
    deadlines: Deadlines,
    /// 503s being drained now.
    lingering: AtomicUsize,
}

/// Accepts connections on `listener` and serves each on a thread of its own, forever: no
/// error stops it.
pub fn accept_all(listener: &TcpListener, site: Arc<dyn Site>) {
    let server = Arc::new(Server {
        site,
        connections: Arc::new(Connections::new(bound())),
        gate: Gate::default(),
        deadlines: Deadlines::from_env(),
        lingering: AtomicUsize::new(0),
    });
    let mut warned: Option<Instant> = None;
    loop {
        match listener.accept() {
            Ok((stream, peer)) => take(&server, stream, peer.ip()),
            Err(error) => after_accept_error(&server.connections, &error, &mut warned),
        }
    }
}

/// The bound on connections: `CONNECTIONS_MAX`, lowered to fit the file descriptors the
/// process may open, less `FDS_KEPT`, but not below `CONNECTIONS_MIN`.
fn bound() -> usize {
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map(|(soft, _)| soft);
    let fits = soft.map_or(CONNECTIONS_MAX, |soft| {
        usize::try_from(soft.saturating_sub(FDS_KEPT)).unwrap_or(CONNECTIONS_MAX)
    });
    fits.clamp(CONNECTIONS_MIN, CONNECTIONS_MAX)
}

/// Serves a new connection on a thread of its own, or answers 503 when there is no room.
fn take(server: &Arc<Server>, stream: TcpStream, peer: IpAddr) {
    // Answers go out whole: small segments need not wait for acknowledgements.
    let _ = stream.set_nodelay(true);
    // An IPv4 client of a server on `[::]` counts as its IPv4 address.
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    let conn = match server.connections.admit(stream, peer, SHED_WAIT) {
        Ok(conn) => conn,
        Err(stream) => return busy(server, stream),
    };
    let for_thread = Arc::clone(server);
    let spawned = thread::Builder::new()
        .name("spindle-ui-conn".into())
        .stack_size(STACK_BYTES)
        .spawn(move || serve_connection(&conn, &for_thread));
    if spawned.is_err() {
        // The connection went with the closure, closed; threads are scarce: a moment.
        thread::sleep(ACCEPT_PAUSE);
    }
}

/// The 503 of a server with no room.
fn too_busy() -> Reply {
    Reply::error(503, "the dashboard is busy: try again in a moment")
}

/// Answers 503 without waiting for the client (the socket's buffer takes it), stops writing,
/// and drains what the client sends on a small thread of its own (or only what came already,
/// when `BUSY_LINGERING_MAX` do so), so that closing does not reset the connection before the
/// client reads the 503.
fn busy(server: &Arc<Server>, stream: TcpStream) {
    let reply = too_busy();
    let headers = [("Content-Type", reply.content_type()), ("Retry-After", "1")];
    let mut answer = answer_head(503, &headers, reply.bytes().len(), true).into_bytes();
    answer.extend_from_slice(reply.bytes());
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let _ = (&stream).write(&answer);
    let _ = stream.shutdown(Shutdown::Write);
    let _ = drain(&stream, Instant::now(), LINGER_BYTES_MAX);
    let lingering = &server.lingering;
    if lingering.fetch_add(1, Ordering::SeqCst) >= BUSY_LINGERING_MAX {
        lingering.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let server = Arc::clone(server);
    let spawned = thread::Builder::new()
        .name("spindle-ui-busy".into())
        .stack_size(BUSY_STACK_BYTES)
        .spawn(move || {
            if stream.set_nonblocking(false).is_ok() {
                let _ = drain(&stream, Instant::now() + BUSY_LINGER_FOR, LINGER_BYTES_MAX);
            }
            server.lingering.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        lingering.fetch_sub(1, Ordering::SeqCst);
    }
}

/// After a failed accept: when the process is out of file descriptors or memory, sheds a
/// connection and waits a moment for one to close; other errors (a client that left before
/// it was accepted) pass.
fn after_accept_error(connections: &Connections, error: &io::Error, warned: &mut Option<Instant>) {
    let errno = error.raw_os_error().map(Errno::from_raw);
    match errno {
        Some(Errno::ECONNABORTED | Errno::EINTR | Errno::EPROTO | Errno::EAGAIN) => {}
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM) => {
            warn_now_and_then(warned, &format!("cannot accept a connection ({error}): shedding"));
            connections.shed_one(ACCEPT_PAUSE);
        }
        _ => {
            warn_now_and_then(warned, &format!("cannot accept a connection: {error}"));
            thread::sleep(ACCEPT_PAUSE);
        }
    }
}

/// Writes `message` to stderr, unless something was written less than `WARN_EVERY` ago.
fn warn_now_and_then(warned: &mut Option<Instant>, message: &str) {
    if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
        eprintln!("spindle ui: {message} (said at most once a minute)");
        *warned = Some(Instant::now());
    }
}

/// What comes after a request.
enum Next {
    /// The next request on the same connection.
    Another,
    /// Closing: stop writing, drain, close.
    Close,
    /// The client is gone (or was shed, or idled out): close at once.
    Gone,
}

/// Serves requests on one connection, one at a time, until it closes.
fn serve_connection(conn: &Conn, server: &Server) {
    let mut pending = Vec::new();
    for served in 1..=REQUESTS_PER_CONNECTION {
        let last = served == REQUESTS_PER_CONNECTION;
        match one_request(conn, server, &mut pending, last) {
            Next::Another => {}
            Next::Close => return linger(conn),
            Next::Gone => return,
        }
    }
}

/// Reads one request's head from `pending` and the socket, and answers it.
fn one_request(conn: &Conn, server: &Server, pending: &mut Vec<u8>, last: bool) -> Next {
    let deadlines = server.deadlines;
    let length = match read_head(conn, pending, deadlines) {
        HeadRead::Complete(length) => length,
        HeadRead::Gone => return Next::Gone,
        HeadRead::Refused(reply) => return refuse(conn, reply, deadlines),
    };
    let parsed = parse(&pending[..length]);
    pending.drain(..length);
    match parsed {
        Ok(mut request) => {
            request.head.peer = Some(conn.peer);
            answer(conn, server, pending, request, last)
        }
        Err(reply) => refuse(conn, reply, deadlines),
    }
}

/// Answers a request that will not be read further, and closes.
fn refuse(conn: &Conn, reply: Reply, deadlines: Deadlines) -> Next {
    let written = write_answer(conn, reply, &Extra::default(), true, deadlines);
    if written { Next::Close } else { Next::Gone }
}

/// Answers a parsed request: checks it, reads its body if it can use it, waits for its turn,
/// makes the answer and writes it (or the live stream).
fn answer(
    conn: &Conn,
    server: &Server,
    pending: &mut Vec<u8>,
    request: Request,
    last: bool,
) -> Next {
    let deadlines = server.deadlines;
    let Request { mut head, body_length, close, expects_continue } = request;
    if let Err(reply) = server.site.refused(&head) {
        return refuse(conn, reply, deadlines);
    }
    if body_length > BODY_BYTES_MAX {
        let too_large = Reply::error(413, format!("a body is at most {BODY_BYTES_MAX} bytes"));
        return refuse(conn, too_large, deadlines);
    }
    let mut close = close || last;
    if body_length > 0 {
        if !server.site.reads_body(&head) {
            // Answered without its body, which stays unread: nothing can follow it.
            close = true;
        } else {
            match read_body(conn, pending, body_length, expects_continue, deadlines) {
                BodyRead::Done(body) => head.body = String::from_utf8_lossy(&body).into_owned(),
                BodyRead::Gone => return Next::Gone,
                BodyRead::Late => return refuse(conn, too_slow("body"), deadlines),
            }
        }
    }
    make_and_write(conn, server, &head, close)
}

/// Waits for the request's turn, makes its answer and writes it (or the live stream).
fn make_and_write(conn: &Conn, server: &Server, head: &Head, close: bool) -> Next {
    let deadlines = server.deadlines;
    conn.enter(Phase::Queued);
    let until = Instant::now() + deadlines.queue;
    let weight = server.site.weight(head);
    let Some(turn) = server.gate.turn(weight, until, || conn.is_shed()) else {
        if conn.is_shed() {
            return Next::Gone;
        }
        let extra = Extra { retry_after: true, ..Extra::default() };
        return after_writing(write_answer(conn, too_busy(), &extra, close, deadlines), close);
    };
    conn.enter(Phase::Handling);
    match server.site.respond(head, turn.allowed) {
        Answer::Now(reply, cookie) => {
            let _held = turn.made(reply.held_bytes());
            let head_only = head.method == "HEAD";
            let extra = Extra { cookie: cookie.as_deref(), head_only, retry_after: false };
            after_writing(write_answer(conn, reply, &extra, close, deadlines), close)
        }
        Answer::Live(live) => {
            drop(turn);
            live_stream(conn, live, deadlines)
        }
    }
}

/// What follows an answer written (or not) on a connection closing after it (or not).
fn after_writing(written: bool, close: bool) -> Next {
    match (written, close) {
        (false, _) => Next::Gone,
        (true, true) => Next::Close,
        (true, false) => Next::Another,
    }
}

/// The 408 of a request whose `part` came too slowly.
fn too_slow(part: &str) -> Reply {
    Reply::error(408, format!("the request's {part} came too slowly"))
}

/// How reading a head ended.
enum HeadRead {
    /// A whole head: its length in the buffer.
    Complete(usize),
    /// The client left (or idled out, or was shed) before a whole head.
    Gone,
    /// The head breaks a bound; answer this and close.
    Refused(Reply),
}

/// Reads until `pending` holds a whole head, within the deadlines and the size bounds.
fn read_head(conn: &Conn, pending: &mut Vec<u8>, deadlines: Deadlines) -> HeadRead {
    let mut started = !pending.is_empty();
    conn.enter(if started { Phase::Head } else { Phase::Waiting });
    let mut until = Instant::now() + if started { deadlines.head } else { deadlines.idle };
    let mut scan = Scan::default();
    let mut chunk = [0_u8; 4096];
    loop {
        match scan.look(pending) {
            Ok(Some(length)) => return HeadRead::Complete(length),
            Ok(None) => {}
            Err(reply) => return HeadRead::Refused(reply),
        }
        let room = (HEAD_BYTES_MAX + 1).saturating_sub(pending.len()).min(chunk.len());
        match read_within(&conn.stream, &mut chunk[..room], until) {
            Ok(0) => return HeadRead::Gone,
            Ok(read) => pending.extend_from_slice(&chunk[..read]),
            Err(error) if started && timed_out(&error) => {
                return HeadRead::Refused(too_slow("head"));
            }
            Err(_) => return HeadRead::Gone,
        }
        if !started {
            started = true;
            until = Instant::now() + deadlines.head;
            conn.enter(Phase::Head);
        }
    }
}

/// Looks for the end of a head in a growing buffer, each byte once, and checks its bounds.
#[derive(Default)]
struct Scan {
    /// Bytes looked at already.
    seen: usize,
    /// Where the request line ends (its `\n`), once seen.
    line_end: Option<usize>,
}

impl Scan {
    /// The length of the head in `buf` once it is whole, or the answer refusing it: 414 for a
    /// request line over `LINE_BYTES_MAX`, 431 for a head over `HEAD_BYTES_MAX`.
    fn look(&mut self, buf: &[u8]) -> Result<Option<usize>, Reply> {
        let from = self.seen;
        self.seen = buf.len();
        let mut end = None;
        for at in (from..buf.len()).filter(|&at| buf[at] == b'\n') {
            self.line_end.get_or_insert(at);
            // A blank line ends the head: "\n\n", or "\n\r\n".
            let blank = (at >= 1 && buf[at - 1] == b'\n')
                || (at >= 2 && buf[at - 1] == b'\r' && buf[at - 2] == b'\n');
            if blank && self.line_end != Some(at) {
                end = Some(at + 1);
                break;
            }
        }
        if self.line_end.unwrap_or(buf.len()) > LINE_BYTES_MAX {
            return Err(Reply::error(
                414,
                format!("a request line (its path and query) is at most {LINE_BYTES_MAX} bytes"),
            ));
        }
        if end.unwrap_or(buf.len()) > HEAD_BYTES_MAX {
            return Err(Reply::error(
                431,
                format!("a request's head (its headers) is at most {HEAD_BYTES_MAX} bytes"),
            ));
        }
        Ok(end)
    }
}

/// A parsed request head: what the handlers look at, and how the request is framed.
struct Request {
    head: Head,
    /// Its `Content-Length` (0 without one).
    body_length: usize,
    /// Whether the connection closes after the answer (`Connection: close`, HTTP/1.0).
    close: bool,
    /// Whether the client waits for `100 Continue` before its body.
    expects_continue: bool,
}

/// Parses a whole head: 400 when it is not HTTP/1.x, 431 for too many headers, 411 for a
/// body without a `Content-Length`.
fn parse(bytes: &[u8]) -> Result<Request, Reply> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Reply::error(431, format!("a request has at most {HEADERS_MAX} headers")));
        }
        Ok(httparse::Status::Partial) | Err(_) => {
            return Err(Reply::error(400, "a malformed request: this server speaks HTTP/1.1"));
        }
    }
    let (Some(method), Some(target), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(Reply::error(400, "a malformed request line"));
    };
    if !target.starts_with('/') {
        return Err(Reply::error(400, "a request's target is a path: /..."));
    }
    let fields = Fields(parsed.headers);
    let body_length = fields.body_length()?;
    let close = version == 0 || fields.has_token("Connection", "close");
    let expects_continue =
        fields.get("Expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
    Ok(Request { head: fields.head(method, target)?, body_length, close, expects_continue })
}

/// A request's headers.
struct Fields<'h, 'b>(&'h [httparse::Header<'b>]);

impl Fields<'_, '_> {
    /// Every value of header `name`, as text.
    fn all(&self, name: &str) -> impl Iterator<Item = String> {
        let named = self.0.iter().filter(move |h| h.name.eq_ignore_ascii_case(name));
        named.map(|h| String::from_utf8_lossy(h.value).trim().to_owned())
    }

    /// The first value of header `name`.
    fn get(&self, name: &str) -> Option<String> {
        self.all(name).next()
    }

    /// Whether header `name` lists `token` (`Connection: keep-alive, close`).
    fn has_token(&self, name: &str, token: &str) -> bool {
        self.all(name).any(|value| value.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    }

    /// The body's length: its `Content-Length` (each copy the same), 0 without one; a
    /// `Transfer-Encoding` is refused.
    fn body_length(&self) -> Result<usize, Reply> {
        if self.get("Transfer-Encoding").is_some() {
            return Err(Reply::error(411, "send a body with a Content-Length (not chunked)"));
        }
        let mut lengths = self.all("Content-Length");
        let Some(first) = lengths.next() else {
            return Ok(0);
        };
        let valid = !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit());
        if !valid || lengths.any(|other| other != first) {
            return Err(Reply::error(400, "a bad Content-Length"));
        }
        // A number too long for usize is over the bound all the same.
        Ok(first.parse().unwrap_or(usize::MAX))
    }

    /// The parts the handlers look at (the body comes later); one `Host` at most.
    fn head(&self, method: &str, target: &str) -> Result<Head, Reply> {
        if self.all("Host").nth(1).is_some() {
            return Err(Reply::error(400, "a request names one Host"));
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let cookie = self.get("Cookie");
        Ok(Head {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            host: self.get("Host"),
            origin: self.get("Origin"),
            fetch_site: self.get("Sec-Fetch-Site"),
            content_type: self.get("Content-Type"),
            csrf: self.get("X-Spindle-Csrf"),
            session: cookie.as_deref().and_then(crate::ui::session::session_cookie),
            bearer: self.get("Authorization").as_deref().and_then(bearer_token),
            last_event_id: self.get("Last-Event-ID"),
            peer: None,
            body: String::new(),
        })
    }
}

/// The token of an `Authorization` header's value `Bearer TOKEN` (the scheme in any case).
fn bearer_token(value: &str) -> Option<String> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// How reading a body ended.
enum BodyRead {
    Done(Vec<u8>),
    /// The client left.
    Gone,
    /// Not whole by the deadline.
    Late,
}

/// Reads a body of `length` bytes (the first of them may be in `pending`) within the body's
/// deadline, after a `100 Continue` when the client waits for one.
fn read_body(
    conn: &Conn,
    pending: &mut Vec<u8>,
    length: usize,
    expects_continue: bool,
    deadlines: Deadlines,
) -> BodyRead {
    conn.enter(Phase::Body);
    let until = Instant::now() + deadlines.body;
    let mut body: Vec<u8> = pending.drain(..length.min(pending.len())).collect();
    let continued = b"HTTP/1.1 100 Continue\r\n\r\n";
    if body.len() < length
        && expects_continue
        && write_within(&conn.stream, continued, until).is_err()
    {
        return BodyRead::Gone;
    }
    let mut at = body.len();
    body.resize(length, 0);
    while at < length {
        match read_within(&conn.stream, &mut body[at..], until) {
            Ok(0) => return BodyRead::Gone,
            Ok(read) => at += read,
            Err(error) if timed_out(&error) => return BodyRead::Late,
            Err(_) => return BodyRead::Gone,
        }
    }
    BodyRead::Done(body)
}

/// What an answer carries beside its reply.
#[derive(Default)]
struct Extra<'a> {
    /// A session cookie to set.
    cookie: Option<&'a str>,
    /// Only the head is written (a HEAD request).
    head_only: bool,
    /// A 503 says when to try again.
    retry_after: bool,
}

/// Writes an answer within the answer's deadline; false if it could not.
fn write_answer(
    conn: &Conn,
    reply: Reply,
    extra: &Extra<'_>,
    close: bool,
    deadlines: Deadlines,
) -> bool {
    conn.enter(Phase::Writing);
    let until = Instant::now() + deadlines.answer;
    let mut headers = vec![("Content-Type", reply.content_type())];
    if let Some(cookie) = extra.cookie {
        headers.push(("Set-Cookie", cookie));
    }
    if extra.retry_after {
        headers.push(("Retry-After", "1"));
    }
    let body = reply.bytes();
    let head = answer_head(reply.status, &headers, body.len(), close);
    let written = write_within(&conn.stream, head.as_bytes(), until);
    let body = if extra.head_only { &[][..] } else { body };
    written.and_then(|()| write_within(&conn.stream, body, until)).is_ok()
}

/// Answers a live stream: its head, then its events until it ends; the connection then closes.
fn live_stream(conn: &Conn, mut live: live::Live, deadlines: Deadlines) -> Next {
    conn.enter(Phase::Live);
    live.attach(&conn.stream);
    let content_type = [("Content-Type", "text/event-stream; charset=utf-8")];
    // No Content-Length: the body ends when the connection closes.
    let mut head = status_line(200);
    head.push_str("Connection: close\r\n");
    add_headers(&mut head, &content_type);
    head.push_str("\r\n");
    let until = Instant::now() + deadlines.live_write;
    if write_within(&conn.stream, head.as_bytes(), until).is_ok() {
        let mut socket = Socket(&conn.stream);
        live::stream(&mut socket, live, deadlines.live_write, deadlines.live_for);
    }
    Next::Gone
}

/// A live stream's socket: each write by its deadline.
struct Socket<'s>(&'s TcpStream);

impl live::Sink for Socket<'_> {
    fn send(&mut self, bytes: &[u8], until: Instant) -> io::Result<()> {
        write_within(self.0, bytes, until)
    }
}

/// An answer's head: the status line, `Date`, `Content-Length`, `Connection: close` when the
/// connection closes after it, `headers` and the security headers every answer carries.
fn answer_head(status: u16, headers: &[(&str, &str)], length: usize, close: bool) -> String {
    let mut head = status_line(status);
    let _ = write!(head, "Content-Length: {length}\r\n");
    if close {
        head.push_str("Connection: close\r\n");
    }
    add_headers(&mut head, headers);
    head.push_str("\r\n");
    head
}

/// `HTTP/1.1 STATUS REASON` and the `Date` header.
fn status_line(status: u16) -> String {
    let date = http_date(SystemTime::now());
    format!("HTTP/1.1 {status} {}\r\nDate: {date}\r\n", reason(status))
}

/// The reason phrase of the statuses this server answers with.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// An HTTP date: `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(at: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let (days, time) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let (weekday, month) = (DAYS[(days % 7) as usize], MONTHS[month - 1]);
    let (hour, minute, second) = (time / 3_600, time / 60 % 60, time % 60);
    format!("{weekday}, {day:02} {month} {year} {hour:02}:{minute:02}:{second:02} GMT")
}

/// The date `days` after 1970-01-01: year, month (1 to 12), day (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, usize, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month as usize, day)
}

/// Stops writing, then drains what the client still sends (at most `LINGER_BYTES_MAX`, for
/// at most `LINGER_FOR`), so that closing does not reset the connection before the client
/// read the last answer.
fn linger(conn: &Conn) {
    conn.enter(Phase::Closing);
    if conn.stream.shutdown(Shutdown::Write).is_ok() {
        let _ = drain(&conn.stream, Instant::now() + LINGER_FOR, LINGER_BYTES_MAX);
    }
}

/// Reads and drops what the client sends, at most `max` bytes, until it stops or `until`
/// (a nonblocking socket: only what came already). Returns the bytes drained.
fn drain(stream: &TcpStream, until: Instant, max: usize) -> usize {
    let mut sink = [0_u8; 8192];
    let mut drained = 0;
    while drained < max {
        let read = if until <= Instant::now() {
            (&*stream).read(&mut sink)
        } else {
            read_within(stream, &mut sink, until)
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(read) => drained += read,
        }
    }
    drained
}

/// One read that waits at most until `until`.
fn read_within(stream: &TcpStream, buf: &mut [u8], until: Instant) -> io::Result<usize> {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match (&*stream).read(buf) {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            done => return done,
        }
    }
}

/// Writes all of `bytes` by `until`: each write waits only for what is left.
fn write_within(stream: &TcpStream, bytes: &[u8], until: Instant) -> io::Result<()> {
    let mut at = 0;
    while at < bytes.len() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        let end = bytes.len().min(at + WRITE_CHUNK);
        match (&*stream).write(&bytes[at..end]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => at += written,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Whether an error is a read or write timing out.
fn timed_out(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(text: &[u8]) -> Result<Option<usize>, u16> {
        Scan::default().look(text).map_err(|reply| reply.status)
    }

    #[test]
    fn a_head_ends_at_its_blank_line_and_its_bounds_hold() {
        assert_eq!(look(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nrest"), Ok(Some(27)));
        assert_eq!(look(b"GET / HTTP/1.1\nHost: a\n\n"), Ok(Some(24)));
        assert_eq!(look(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        let long_line = [b"GET /?q=".as_slice(), &[b'a'; LINE_BYTES_MAX]].concat();
        assert_eq!(look(&long_line), Err(414));
        let long_head = [b"GET / HTTP/1.1\r\nX: ".as_slice(), &[b'a'; HEAD_BYTES_MAX]].concat();
        assert_eq!(look(&long_head), Err(431));
        // Fed a byte at a time, the same end is found (each byte looked at once).
        let text = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut scan = Scan::default();
        let ends: Vec<_> = (1..=text.len()).filter_map(|n| scan.look(&text[..n]).ok()?).collect();
        assert_eq!(ends, [text.len()]);
    }

    #[test]
    fn heads_parse_into_what_the_handlers_read() {
        let text = "POST /api/session?x=1 HTTP/1.1\r\nHost: h:1\r\nCookie: a=1; spindle_ui=s\r\n\
                    Content-Length: 5\r\nExpect: 100-continue\r\nConnection: keep-alive, close\r\n\r\n";
        let request = parse(text.as_bytes()).map_err(|r| r.status).expect("parses");
        assert_eq!(
            (request.head.path.as_str(), request.head.query.as_str()),
            ("/api/session", "x=1")
        );
        assert_eq!(request.head.session.as_deref(), Some("s"));
        assert_eq!(request.head.host.as_deref(), Some("h:1"));
        assert!(request.close && request.expects_continue && request.body_length == 5);
        let status = |text: &str| parse(text.as_bytes()).err().map(|reply| reply.status);
        assert_eq!(status("GET / HTTP/1.0\r\n\r\n"), None);
        assert!(parse(b"GET / HTTP/1.0\r\n\r\n").is_ok_and(|r| r.close));
        assert_eq!(status("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), Some(411));
        assert_eq!(
            status("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Some(400)
        );
        assert_eq!(status("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), Some(400));
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), Some(400));
        assert_eq!(status("GET http://a/ HTTP/1.1\r\n\r\n"), Some(400));
        assert_eq!(status("NONSENSE\r\n\r\n"), Some(400));
        let many: String = (0..=HEADERS_MAX).map(|n| format!("X-{n}: 1\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Some(431));
        let huge = "GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert!(parse(huge.as_bytes()).is_ok_and(|r| r.body_length > BODY_BYTES_MAX));
    }

    #[test]
    fn dates_are_http_dates() {
        let at = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(at), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(http_date(leap), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn the_connection_bound_fits_the_file_limit() {
        let bound = bound();
        assert!((CONNECTIONS_MIN..=CONNECTIONS_MAX).contains(&bound));
    }
}
