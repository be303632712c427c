//! A run's live log: what its commands print, streamed into the store while they run, so that
//! `spindle logs --follow` (in any process) shows it as it comes.
//!
//! The stream is `custom:log:RUN`. Each attempt of a node appends `output` events (`node`,
//! `attempt`, `text`: the output since the last one, stdout and stderr together) about four
//! times a second while it prints, then one `ended` event (`node`, `attempt`, `how`: `exit 0`,
//! `exit 2`, `timed out after 5 s`, ..). An attempt streams at most `LIVE_BYTES_MAX`; past it a
//! last line says so, and the node still keeps the last 64 KiB (`TAIL_BYTES`) of all of it.
//! `spindle prune` deletes the live logs of runs that finished before its cutoff (`delete`).

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use spindle::{Store, Stream};

/// The most output a node keeps: the end of what its last attempt printed.
pub const TAIL_BYTES: usize = 64 * 1024;
/// The most output an attempt streams live.
pub const LIVE_BYTES_MAX: usize = 1024 * 1024;
/// The most output one `output` event holds (escaped as JSON it stays far below the store's
/// payload limit).
const EVENT_BYTES_MAX: usize = 64 * 1024;
/// How often a running command's new output is streamed.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// The live log stream of `run`.
pub fn stream(run: &str) -> Stream {
    Stream::custom(format!("log:{run}"))
}

/// Deletes the live log of `run`; returns how many events went.
pub fn delete(store: &Store, run: &str) -> spindle::Result<u64> {
    let stream = stream(run);
    let head = store.events().head(&stream)?;
    if head == 0 {
        return Ok(0);
    }
    store.events().truncate(&stream, head + 1)
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

/// Streams one attempt's output into the run's live log.
pub struct LiveLog {
    store: Store,
    stream: Stream,
    node: String,
    attempt: u32,
    captured: Arc<Mutex<Captured>>,
    flushed_at: Cell<Instant>,
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
            stream: stream(run),
            node: node.to_owned(),
            attempt,
            captured: Arc::clone(captured),
            flushed_at: Cell::new(Instant::now()),
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
            self.store.events().append(&self.stream, "output", payload)?;
        }
    }

    /// Streams the rest of the output, then says how the attempt ended.
    pub fn ended(&self, how: &str) -> spindle::Result<()> {
        self.flush()?;
        let payload = json!({ "node": self.node, "attempt": self.attempt, "how": how });
        self.store.events().append(&self.stream, "ended", payload)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
