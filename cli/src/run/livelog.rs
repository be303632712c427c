//! A run's live log: what its commands print, streamed into the store while they run, so that
//! `spindle logs --follow` (in any process) shows it as it comes.
//!
//! Each node's attempts go to a stream of the node's own, `custom:log:RUN:NODE` ([`names::node_stream`](crate::names::node_stream);
//! a name past the store's id limit keeps a prefix of the node's name and a digest of it). An
//! attempt appends `output` events (`node`, `attempt`, `text`: the output since the last one,
//! stdout and stderr together) about four times a second while it prints, then one `ended`
//! event (`node`, `attempt`, `how`: `exit 0`, `exit 2`, `timed out after 5 s`, ..). An attempt
//! streams at most `LIVE_BYTES_MAX`; past it a last line says so, and the node still keeps the
//! last 64 KiB (`TAIL_BYTES`) of all of it.
//!
//! The run's stream `custom:log:RUN` ([`names::log_stream`](crate::names::log_stream)) is the index of those, in the order things
//! happened: `started` (`node`, `attempt`, `after`: the node stream's last seq before the
//! attempt's first event), appended before the attempt's first event, and `ended` (`node`,
//! `attempt`, `how`, `after`, `seq`: its `ended` event's seq in the node's stream), appended
//! after it. So one node's log is read from its stream alone, and the whole run's an attempt at
//! a time through the index (`log_reader.rs`).
//!
//! Runs logged before there were node streams hold every node's `output` and `ended` events in
//! the run's stream itself (such an `ended` has no `after`); the readers take those too, also
//! in a run begun before and resumed after. `spindle prune` deletes a run's stream and the
//! streams its `started` events name ([`delete`]).

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use spindle::{Store, Stream};

use crate::log_reader::{PAGE_EVENTS, TAIL_BYTES};
use crate::names::{log_stream, node_stream};

/// The most output an attempt streams live.
pub const LIVE_BYTES_MAX: usize = 1024 * 1024;
/// The most output one `output` event holds (escaped as JSON it stays far below the store's
/// payload limit).
const EVENT_BYTES_MAX: usize = 64 * 1024;
/// How often a running command's new output is streamed.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Deletes the live log of `run`: its index (or old-layout log) and every node stream the index
/// names; returns how many events went.
pub fn delete(store: &Store, run: &str) -> spindle::Result<u64> {
    let index = log_stream(run);
    let mut nodes = BTreeSet::new();
    let mut after = 0;
    loop {
        let page = store.events().read(&index, after, PAGE_EVENTS * 4)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        let started = page.iter().filter(|event| event.event_type == "started");
        nodes.extend(started.filter_map(|event| event.payload["node"].as_str().map(str::to_owned)));
    }
    let mut deleted = 0;
    for node in nodes {
        deleted += delete_stream(store, &node_stream(run, &node))?;
    }
    Ok(deleted + delete_stream(store, &index)?)
}

/// Deletes every event of `stream` (its numbering goes on if it is written again).
fn delete_stream(store: &Store, stream: &Stream) -> spindle::Result<u64> {
    let head = store.events().head(stream)?;
    if head == 0 {
        return Ok(0);
    }
    store.events().truncate(stream, head + 1)
}

/// What a command printed: its last `TAIL_BYTES` (kept with the node), and what has not been
/// streamed yet.
#[derive(Default)]
pub struct Captured {
    kept: Vec<u8>,
    fresh: Vec<u8>,
    streamed_bytes: usize,
    /// Output went past `LIVE_BYTES_MAX`; `noted` once the stream says so.
    cut: bool,
    noted: bool,
}

impl Captured {
    /// Takes in what the command printed.
    pub fn push(&mut self, bytes: &[u8]) {
        self.kept.extend_from_slice(bytes);
        if self.kept.len() > TAIL_BYTES {
            let cut = self.kept.len() - TAIL_BYTES;
            self.kept.drain(..cut);
        }
        let room =
            LIVE_BYTES_MAX.saturating_sub(self.streamed_bytes.saturating_add(self.fresh.len()));
        self.fresh.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.cut |= bytes.len() > room;
    }

    /// The kept tail, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }

    /// What has not been streamed yet, at most `EVENT_BYTES_MAX` of it (cut at a character
    /// boundary: the rest waits).
    fn take_fresh(&mut self) -> Option<String> {
        let part = &self.fresh[..self.fresh.len().min(EVENT_BYTES_MAX)];
        let whole = match std::str::from_utf8(part) {
            Ok(_) => part.len(),
            // An incomplete character at the end waits for its other bytes.
            Err(error) if error.error_len().is_none() => error.valid_up_to(),
            Err(_) => part.len(),
        };
        if whole == 0 {
            return self.take_cut_note();
        }
        let taken: Vec<u8> = self.fresh.drain(..whole).collect();
        self.streamed_bytes += taken.len();
        Some(String::from_utf8_lossy(&taken).into_owned())
    }

    fn take_cut_note(&mut self) -> Option<String> {
        if !self.cut || self.noted {
            return None;
        }
        self.noted = true;
        Some(format!(
            "\n[spindle: output past {} MiB is not streamed; the node keeps its last 64 KiB]\n",
            LIVE_BYTES_MAX >> 20
        ))
    }
}

/// Streams one attempt's output into its node's stream, and notes its start and end in the
/// run's index.
pub struct LiveLog {
    store: Store,
    index: Stream,
    stream: Stream,
    node: String,
    attempt: u32,
    captured: Arc<Mutex<Captured>>,
    flushed_at: Cell<Instant>,
    /// The node stream's last seq before this attempt, once `started` is in the index.
    after: Cell<Option<u64>>,
}

impl LiveLog {
    /// The live log of attempt `attempt` of `node` in `run`, reading from `captured`.
    pub fn new(
        store: &Store,
        run: &str,
        node: &str,
        attempt: u32,
        captured: &Arc<Mutex<Captured>>,
    ) -> Self {
        Self {
            store: store.clone(),
            index: log_stream(run),
            stream: node_stream(run, node),
            node: node.to_owned(),
            attempt,
            captured: Arc::clone(captured),
            flushed_at: Cell::new(Instant::now()),
            after: Cell::new(None),
        }
    }

    /// Streams the new output if the last flush was a while ago.
    pub fn flush_if_due(&self) -> spindle::Result<()> {
        if self.flushed_at.get().elapsed() < FLUSH_EVERY {
            return Ok(());
        }
        self.flush()
    }

    /// Streams whatever output is new.
    pub fn flush(&self) -> spindle::Result<()> {
        self.flushed_at.set(Instant::now());
        loop {
            let Some(text) = self.captured.lock().take_fresh() else { return Ok(()) };
            let payload = json!({ "node": self.node, "attempt": self.attempt, "text": text });
            self.append("output", payload)?;
        }
    }

    /// Streams the rest of the output, then says how the attempt ended, in the node's stream
    /// and in the index.
    pub fn ended(&self, how: &str) -> spindle::Result<()> {
        self.flush()?;
        let (node, attempt) = (&self.node, self.attempt);
        let seq = self.append("ended", json!({ "node": node, "attempt": attempt, "how": how }))?;
        let after = self.after.get().unwrap_or(0);
        let payload =
            json!({ "node": node, "attempt": attempt, "how": how, "after": after, "seq": seq });
        self.store.events().append(&self.index, "ended", payload)?;
        Ok(())
    }

    /// Appends to the node's stream (the first time, after noting the start in the index);
    /// returns the event's seq.
    fn append(&self, event_type: &str, payload: Value) -> spindle::Result<u64> {
        if self.after.get().is_none() {
            let after = self.store.events().head(&self.stream)?;
            let (node, attempt) = (&self.node, self.attempt);
            let started = json!({ "node": node, "attempt": attempt, "after": after });
            self.store.events().append(&self.index, "started", started)?;
            self.after.set(Some(after));
        }
        Ok(self.store.events().append(&self.stream, event_type, payload)?.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes one attempt of `node` in `run` that printed `text` and ended `how`.
    fn attempt(store: &Store, run: &str, node: &str, number: u32, text: &[u8], how: &str) {
        let captured = Arc::new(Mutex::new(Captured::default()));
        let live = LiveLog::new(store, run, node, number, &captured);
        captured.lock().push(text);
        live.ended(how).expect("log the attempt");
    }

    #[test]
    fn an_attempt_goes_to_its_nodes_stream_and_the_index_says_where() {
        let store = Store::open_in_memory().expect("a store");
        attempt(&store, "r", "a", 1, b"one\n", "exit 1");
        attempt(&store, "r", "a", 2, b"two\n", "exit 0");
        let node = store.events().read(node_stream("r", "a"), 0, 100).expect("read");
        let types: Vec<&str> = node.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(types, ["output", "ended", "output", "ended"]);
        assert_eq!(node[2].payload, json!({ "node": "a", "attempt": 2, "text": "two\n" }));
        let index = store.events().read(log_stream("r"), 0, 100).expect("read");
        let payloads: Vec<&Value> = index.iter().map(|e| &e.payload).collect();
        assert_eq!(
            payloads,
            [
                &json!({ "node": "a", "attempt": 1, "after": 0 }),
                &json!({ "node": "a", "attempt": 1, "how": "exit 1", "after": 0, "seq": 2 }),
                &json!({ "node": "a", "attempt": 2, "after": 2 }),
                &json!({ "node": "a", "attempt": 2, "how": "exit 0", "after": 2, "seq": 4 }),
            ]
        );
        assert!(index.iter().all(|e| e.payload.get("text").is_none()), "no output in the index");
    }

    #[test]
    fn a_long_node_name_gets_a_stream_within_the_id_limit_of_its_own() {
        let run = "0195e3c2-7a1b-7c3d-8e4f-a0b1c2d3e4f5";
        let limit = spindle::Limits::default().id_len_max;
        assert_eq!(node_stream(run, "build[x86]").id(), format!("log:{run}:build[x86]"));
        let (long, other) = ("é".repeat(120), format!("{}x", "é".repeat(119)));
        let (a, b) = (node_stream(run, &long), node_stream(run, &other));
        assert!(a.id().len() <= limit && b.id().len() <= limit, "{a} {b}");
        assert_ne!(a, b, "the digest tells them apart");
        assert!(a.id().starts_with(&format!("log:{run}:éé")), "{a}");
        let store = Store::open_in_memory().expect("a store");
        attempt(&store, run, &long, 1, b"x", "exit 0");
        assert_eq!(store.events().head(&a).expect("head"), 2, "the store takes the name");
        // A node named as another's shortened stream gets a stream of its own.
        let posing = a.id().strip_prefix(&format!("log:{run}:")).expect("a node part");
        let own = node_stream(run, posing);
        assert_ne!(own, a, "{posing:?} is not {long:?}");
        assert!(own.id().len() <= limit, "{own}");
    }

    #[test]
    fn delete_removes_the_index_and_every_node_stream_it_names() {
        let store = Store::open_in_memory().expect("a store");
        attempt(&store, "r", "a", 1, b"a\n", "exit 0");
        attempt(&store, "r", "b", 1, b"b\n", "exit 0");
        attempt(&store, "other", "a", 1, b"kept\n", "exit 0");
        assert_eq!(delete(&store, "r").expect("delete"), 8);
        for stream in [log_stream("r"), node_stream("r", "a"), node_stream("r", "b")] {
            assert!(store.events().read(&stream, 0, 10).expect("read").is_empty(), "{stream}");
        }
        let kept = store.events().read(node_stream("other", "a"), 0, 10).expect("read");
        assert_eq!(kept.len(), 2, "another run's log stays");
    }

    #[test]
    fn the_tail_keeps_the_end_and_the_stream_stops_at_its_cap_with_a_note() {
        let mut captured = Captured::default();
        let chunk = vec![b'x'; 300 * 1024];
        for _ in 0..4 {
            captured.push(&chunk);
        }
        assert_eq!(captured.text().len(), TAIL_BYTES);
        let mut streamed = 0;
        let mut notes = 0;
        while let Some(text) = captured.take_fresh() {
            assert!(text.len() <= EVENT_BYTES_MAX, "one event holds a part: {}", text.len());
            streamed += text.len();
            notes += usize::from(text.contains("not streamed"));
        }
        assert_eq!(notes, 1);
        assert!(streamed > LIVE_BYTES_MAX && streamed < LIVE_BYTES_MAX + 200, "{streamed}");
        captured.push(b"more");
        assert_eq!(captured.take_fresh(), None, "nothing more streams");
    }

    #[test]
    fn a_character_split_between_reads_waits_for_its_other_bytes() {
        let mut captured = Captured::default();
        let text = "é".as_bytes();
        captured.push(&text[..1]);
        assert_eq!(captured.take_fresh(), None);
        captured.push(&text[1..]);
        assert_eq!(captured.take_fresh().as_deref(), Some("é"));
    }
}
