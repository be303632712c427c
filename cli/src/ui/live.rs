//! `GET /api/live[?stream=KIND:ID][&after=N]`: the store's events as Server-Sent Events, fed
//! by a subscription (which also sees what other processes commit).
//!
//! Each event is one message: `id:` its seq (of the stream) or position (of every stream),
//! `data:` the event as JSON. Without `Last-Event-ID` or `after`, the stream starts at the
//! newest event: a page reads what it needs first, then hears of what commits next. A browser
//! that reconnects sends `Last-Event-ID` and misses nothing.
//!
//! Bounded (`streams.rs`): at most `STREAMS_MAX` streams at once, `STREAMS_PER_PEER` of
//! one client (IP address). A new stream past either bound ends the oldest one (of that client, or of the
//! client with the most), whose browser reconnects and misses nothing; it is never refused
//! for want of room. Each stream ends after its `live_for` (`STREAM_FOR` unless the server
//! says otherwise; the browser reconnects by itself), holds a subscription with a small
//! buffer, and writes a comment every `PING_EVERY` so that a closed page is noticed. Each
//! message must be written within the server's `live_write` and before the stream's end
//! (`Sink::send` is given that deadline): a client that stays connected but reads slowly or
//! not at all loses its stream then.
//!
//! The server (`http.rs`) writes the answer's head, without a length; the events go
//! to the socket through a [`Sink`]; the body ends when the connection closes.

use std::io;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle::{Event, Store, Subscription};

use crate::common::parse_stream;
use crate::ui::api::{Query, Reply};
use crate::ui::session;
use crate::ui::state::{Head, Ui};
use crate::ui::streams::Slot;

/// How long one stream lasts before the browser is asked to reconnect.
pub const STREAM_FOR: Duration = Duration::from_secs(300);
/// How often a quiet stream writes a comment.
const PING_EVERY: Duration = Duration::from_secs(3);
/// How often a stream looks whether it was ended to make room.
const TICK: Duration = Duration::from_millis(250);
/// Events a subscription holds before it falls back to reading pages.
const BUFFER: usize = 256;
/// What the browser waits before reconnecting.
const RETRY_MS: u64 = 2_000;

/// Where a stream's messages go: the socket, each message by its deadline.
pub trait Sink {
    /// Writes all of `bytes` by `until`.
    fn send(&mut self, bytes: &[u8], until: Instant) -> io::Result<()>;
}

/// A live stream about to be answered: its subscription and its place among the open ones.
pub struct Live {
    subscription: Subscription,
    by_stream: bool,
    slot: Slot,
}

impl Live {
    /// Names the socket the stream is written to, which is shut down should the stream be
    /// ended to make room (then at once, if it was already).
    pub fn attach(&mut self, socket: &Arc<TcpStream>) {
        self.slot.attach(socket);
    }
}

/// The live stream the request asks for, or the answer that refuses it.
pub fn open(ui: &Ui, head: &Head) -> Result<Live, Reply> {
    session::may_read(ui, head)?;
    let (subscription, by_stream) = subscribe(&ui.store, head)?;
    let slot = ui.streams.take(head.peer);
    Ok(Live { subscription, by_stream, slot })
}

/// The subscription the request asks for, from the event after its cursor, and whether it
/// follows one stream (its ids are seqs) or every stream (positions).
fn subscribe(store: &Store, head: &Head) -> Result<(Subscription, bool), Reply> {
    let query = Query::parse(&head.query).map_err(|message| Reply::error(400, message))?;
    let after = match head.last_event_id.as_deref().or(query.get("after")) {
        Some(text) if !text.is_empty() => Some(text.parse::<u64>().map_err(|_| {
            Reply::error(400, format!("after (or Last-Event-ID) is a number, not {text:?}"))
        })?),
        _ => None,
    };
    let failed = crate::ui::api::store_error;
    match query.get("stream").filter(|s| !s.is_empty()) {
        Some(stream) => {
            let stream = parse_stream(stream).map_err(|message| Reply::error(400, message))?;
            let after = match after {
                Some(after) => after,
                None => store.events().head(&stream).map_err(failed)?,
            };
            Ok((store.subscribe_with_buffer(&stream, after, BUFFER).map_err(failed)?, true))
        }
        None => {
            let after = match after {
                Some(after) => after,
                None => store.events().last_position().map_err(failed)?,
            };
            Ok((store.subscribe_all_with_buffer(after, BUFFER).map_err(failed)?, false))
        }
    }
}

/// Writes the stream's events to `out` (the socket, after the answer's head) as they commit,
/// each within `write_for` and before the stream's end `live_for` from now, until the client
/// leaves, the store closes, the stream is ended to make room, or time is up.
pub fn stream(out: &mut impl Sink, live: Live, write_for: Duration, live_for: Duration) {
    let Live { mut subscription, by_stream, slot } = live;
    let ends_at = Instant::now() + live_for;
    let by = || (Instant::now() + write_for).min(ends_at);
    let mut written = out.send(format!("retry: {RETRY_MS}\n\n").as_bytes(), by());
    let mut quiet_since = Instant::now();
    while written.is_ok() && !slot.ended() {
        let left = ends_at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        written = match subscription.recv_timeout(TICK.min(left)) {
            Ok(Some(event)) => {
                quiet_since = Instant::now();
                message(&event, by_stream).and_then(|text| out.send(text.as_bytes(), by()))
            }
            Ok(None) if quiet_since.elapsed() >= PING_EVERY => {
                quiet_since = Instant::now();
                out.send(b": ping\n\n", by())
            }
            Ok(None) => Ok(()),
            Err(_) => break,
        };
    }
}

/// One event as an SSE message.
fn message(event: &Event, by_stream: bool) -> io::Result<String> {
    let id = if by_stream { event.seq } else { event.position };
    let data = serde_json::to_string(event).map_err(io::Error::other)?;
    Ok(format!("id: {id}\ndata: {data}\n\n"))
}
