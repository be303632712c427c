//! `GET /api/live[?stream=KIND:ID][&after=N]`: the store's events as Server-Sent Events, fed
//! by a subscription (which also sees what other processes commit).
//!
//! Each event is one message: `id:` its seq (of the stream) or position (of every stream),
//! `data:` the event as JSON. Without `Last-Event-ID` or `after`, the stream starts at the
//! newest event: a page reads what it needs first, then hears of what commits next. A browser
//! that reconnects sends `Last-Event-ID` and misses nothing.
//!
//! Bounded: at most `STREAMS_MAX` streams at once (past it, 503 and the page polls); each ends
//! after `STREAM_FOR` (the browser reconnects by itself), holds a subscription with a small
//! buffer, and writes a comment every `PING_EVERY` so that a closed page is noticed within
//! two of them. Every write times out (`ui_http::Deadlines::live_write`): a client that stays
//! connected but stops reading loses its stream once the socket's buffers are full (or at
//! `STREAM_FOR`, whichever comes first).
//!
//! The server (`ui_http.rs`) writes the answer's head, without a length; the events go
//! straight to the socket, one write each; the body ends when the connection closes.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use spindle::{Event, Store, Subscription};

use crate::common::parse_stream;
use crate::ui_api::{Query, Reply};
use crate::ui_session;
use crate::ui_state::{Head, Ui};

/// Live streams open at once.
pub const STREAMS_MAX: usize = 16;
/// How long one stream lasts before the browser is asked to reconnect.
const STREAM_FOR: Duration = Duration::from_secs(300);
/// How often a quiet stream writes a comment.
const PING_EVERY: Duration = Duration::from_secs(3);
/// Events a subscription holds before it falls back to reading pages.
const BUFFER: usize = 256;
/// What the browser waits before reconnecting.
const RETRY_MS: u64 = 2_000;

/// A live stream about to be answered: its subscription and its place among the open ones.
pub struct Live {
    subscription: Subscription,
    by_stream: bool,
    slot: Slot,
}

/// The live stream the request asks for, or the answer that refuses it.
pub fn open(ui: &Ui, head: &Head) -> Result<Live, Reply> {
    ui_session::may_read(ui, head)?;
    let (subscription, by_stream) = subscribe(&ui.store, head)?;
    let slot = Slot::take(&ui.streams)
        .ok_or_else(|| Reply::error(503, "too many live pages open: poll instead"))?;
    Ok(Live { subscription, by_stream, slot })
}

/// A place among the `STREAMS_MAX`, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>) -> Option<Slot> {
        let taken = open.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < STREAMS_MAX).then_some(n + 1)
        });
        taken.is_ok().then(|| Slot(Arc::clone(open)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
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
    let failed = crate::ui_api::store_error;
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
/// until the client leaves, the store closes or time is up.
pub fn stream(out: &mut impl Write, live: Live) {
    let Live { mut subscription, by_stream, slot: _slot } = live;
    let ends_at = Instant::now() + STREAM_FOR;
    let mut written = out.write_all(format!("retry: {RETRY_MS}\n\n").as_bytes());
    while written.is_ok() && Instant::now() < ends_at {
        written = match subscription.recv_timeout(PING_EVERY) {
            Ok(Some(event)) => write_event(out, &event, by_stream),
            Ok(None) => out.write_all(b": ping\n\n"),
            Err(_) => break,
        };
    }
}

/// One event as an SSE message, in one write.
fn write_event(out: &mut impl Write, event: &Event, by_stream: bool) -> std::io::Result<()> {
    let id = if by_stream { event.seq } else { event.position };
    let data = serde_json::to_string(event).map_err(std::io::Error::other)?;
    out.write_all(format!("id: {id}\ndata: {data}\n\n").as_bytes())
}
