//! A run's live log read back: each attempt's output as the runner streamed it into the store
//! (`run/livelog.rs` writes it, under the streams `names.rs` names), a page at a time. What
//! `spindle logs` prints (`run/logs.rs`, which also follows a log as it grows) and what the
//! dashboard's log view reads (`ui/api.rs`).
//!
//! Kept apart from both, so that the dashboard names nothing of the runner. Its tests are
//! `run/logs.rs`'s, which write logs with the runner's writer first.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

use spindle::{Event, Store, Stream};

use crate::names::{log_stream, node_stream};

/// The most output a node keeps: the end of what its last attempt printed.
pub const TAIL_BYTES: usize = 64 * 1024;
/// Events read at once from a stream that may hold `output` events (at most 64 KiB of text
/// each): what reading a log holds in memory at a time.
pub const PAGE_EVENTS: usize = 16;
/// Events read at once from a run's index (small events, but a run of the old layout holds
/// outputs there too).
const INDEX_PAGE_EVENTS: usize = 4 * PAGE_EVENTS;

/// One attempt's output as the live log holds it.
#[derive(Debug)]
pub struct Attempt {
    pub node: String,
    pub attempt: u64,
    pub text: String,
    /// How it ended; `None` while it runs (or if its runner was killed).
    pub how: Option<String>,
}

impl Attempt {
    /// Attempt `attempt` of `node`, with no output yet and no end.
    fn new(node: String, attempt: u64) -> Self {
        Attempt { node, attempt, text: String::new(), how: None }
    }
}

/// Reads a run's live log a page at a time, counting the events it reads from each stream.
pub struct LogReader<'a> {
    store: &'a Store,
    run: String,
    index: Stream,
    /// Events read so far, by stream id.
    read: RefCell<BTreeMap<String, u64>>,
}

/// What a scan of a stream does after an event: go on, or stop there.
type Flow = spindle::Result<ControlFlow<()>>;

impl<'a> LogReader<'a> {
    /// A reader of the live log of `run`.
    pub fn new(store: &'a Store, run: &str) -> Self {
        let read = RefCell::new(BTreeMap::new());
        LogReader { store, run: run.to_owned(), index: log_stream(run), read }
    }

    /// The store it reads.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The run whose log it reads.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The run's stream: the index of its attempts (of the old layout, the whole log).
    pub fn index(&self) -> &Stream {
        &self.index
    }

    /// How many events it has read, by stream id.
    #[cfg(test)]
    pub fn events_read(&self) -> BTreeMap<String, u64> {
        self.read.borrow().clone()
    }

    /// Each attempt of `node`, read from its stream (and from the run's stream where that holds
    /// the old layout), to `each`: ended ones in the order they ended, then the others. Returns
    /// how many.
    pub fn node_attempts(
        &self,
        node: &str,
        each: &mut dyn FnMut(Attempt),
    ) -> spindle::Result<usize> {
        let mut attempts = Attempts::default();
        if self.has_old_layout()? {
            self.scan(&self.index, 0, None, INDEX_PAGE_EVENTS, &mut |event| {
                if is_old_layout(event) && node_of(event) == node {
                    attempts.take(event, each);
                }
                Ok(ControlFlow::Continue(()))
            })?;
        }
        let stream = node_stream(&self.run, node);
        self.scan(&stream, 0, None, PAGE_EVENTS, &mut |event| {
            if node_of(event) == node {
                attempts.take(event, each);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(attempts.finish(each))
    }

    /// Each attempt of the run, read through its index one at a time, to `each`: ended ones in
    /// the order they ended, then the others (by node and number). Returns how many.
    pub fn run_attempts(&self, each: &mut dyn FnMut(Attempt)) -> spindle::Result<usize> {
        let mut old = Attempts::default();
        let mut open: BTreeMap<(String, u64), u64> = BTreeMap::new();
        let mut shown = 0;
        self.scan(&self.index, 0, None, INDEX_PAGE_EVENTS, &mut |event| {
            if is_old_layout(event) {
                old.take(event, each);
                return Ok(ControlFlow::Continue(()));
            }
            let (key, after) = (key_of(event), event.payload["after"].as_u64().unwrap_or(0));
            match event.event_type.as_str() {
                "started" => drop(open.insert(key, after)),
                "ended" => {
                    open.remove(&key);
                    each(self.read_attempt(&key, after, event.payload["seq"].as_u64())?);
                    shown += 1;
                }
                _ => {}
            }
            Ok(ControlFlow::Continue(()))
        })?;
        shown += old.shown + old.open.len() + open.len();
        let mut unended: BTreeMap<(String, u64), Unended> =
            old.open.into_iter().map(|(key, attempt)| (key, Unended::Read(attempt))).collect();
        unended.extend(open.into_iter().map(|(key, after)| (key, Unended::After(after))));
        for (key, attempt) in unended {
            each(match attempt {
                Unended::Read(attempt) => attempt,
                Unended::After(after) => self.read_attempt(&key, after, None)?,
            });
        }
        Ok(shown)
    }

    /// Attempt `key` (node, number) read from its node's stream after seq `after`, through seq
    /// `until` (its `ended`), or for one that has not ended, to the stream's end.
    fn read_attempt(
        &self,
        key: &(String, u64),
        after: u64,
        until: Option<u64>,
    ) -> spindle::Result<Attempt> {
        let mut attempt = Attempt::new(key.0.clone(), key.1);
        let stream = node_stream(&self.run, &key.0);
        self.scan(&stream, after, until, PAGE_EVENTS, &mut |event| {
            if key_of(event) != *key {
                return Ok(ControlFlow::Continue(()));
            }
            match event.event_type.as_str() {
                "output" => keep_tail(&mut attempt.text, text_of(event)),
                "ended" => {
                    attempt.how = event.payload["how"].as_str().map(str::to_owned);
                    return Ok(ControlFlow::Break(()));
                }
                _ => {}
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(attempt)
    }

    /// Whether the run's stream holds the old layout (every node's output in it): its first
    /// event says.
    pub fn has_old_layout(&self) -> spindle::Result<bool> {
        Ok(self.page(&self.index, 0, 1)?.first().is_some_and(is_old_layout))
    }

    /// Hands `each` the events of `stream` after seq `after` (through `until`, if given), a
    /// page of at most `limit` at a time, until it says to stop.
    fn scan(
        &self,
        stream: &Stream,
        mut after: u64,
        until: Option<u64>,
        limit: usize,
        each: &mut dyn FnMut(&Event) -> Flow,
    ) -> spindle::Result<()> {
        loop {
            let left = until.map_or(limit, |until| {
                usize::try_from(until.saturating_sub(after)).unwrap_or(limit).min(limit)
            });
            if left == 0 {
                return Ok(());
            }
            let page = self.page(stream, after, left)?;
            let Some(last) = page.last() else { return Ok(()) };
            after = last.seq;
            for event in &page {
                if each(event)?.is_break() {
                    return Ok(());
                }
            }
        }
    }

    /// One page of `stream` after seq `after`, counted.
    pub fn page(&self, stream: &Stream, after: u64, limit: usize) -> spindle::Result<Vec<Event>> {
        let page = self.store.events().read(stream, after, limit)?;
        *self.read.borrow_mut().entry(stream.id().to_owned()).or_default() += page.len() as u64;
        Ok(page)
    }
}

/// An attempt of the run with no end: read already (the old layout), or still to be read from
/// its node's stream after this seq.
enum Unended {
    Read(Attempt),
    After(u64),
}

/// Attempts being read: the open ones with their text so far, and how many were handed on.
#[derive(Default)]
struct Attempts {
    open: BTreeMap<(String, u64), Attempt>,
    shown: usize,
}

impl Attempts {
    /// Takes in an `output` or `ended` event; an attempt that ended goes to `each`.
    fn take(&mut self, event: &Event, each: &mut dyn FnMut(Attempt)) {
        let key = key_of(event);
        match event.event_type.as_str() {
            "output" => {
                let attempt =
                    self.open.entry(key.clone()).or_insert_with(|| Attempt::new(key.0, key.1));
                keep_tail(&mut attempt.text, text_of(event));
            }
            "ended" => {
                let mut attempt =
                    self.open.remove(&key).unwrap_or_else(|| Attempt::new(key.0, key.1));
                attempt.how = event.payload["how"].as_str().map(str::to_owned);
                self.shown += 1;
                each(attempt);
            }
            _ => {}
        }
    }

    /// Hands the attempts that have not ended to `each`; returns how many there were in all.
    fn finish(self, each: &mut dyn FnMut(Attempt)) -> usize {
        let shown = self.shown + self.open.len();
        self.open.into_values().for_each(each);
        shown
    }
}

/// Whether a run stream's event is of the old layout: an attempt's output, or its end without
/// the node stream's place (`after`).
pub fn is_old_layout(event: &Event) -> bool {
    match event.event_type.as_str() {
        "output" => true,
        "ended" => event.payload.get("after").is_none(),
        _ => false,
    }
}

/// The node a live log event is about.
pub fn node_of(event: &Event) -> &str {
    event.payload["node"].as_str().unwrap_or("?")
}

/// The node and attempt a live log event is about.
pub fn key_of(event: &Event) -> (String, u64) {
    (node_of(event).to_owned(), event.payload["attempt"].as_u64().unwrap_or(0))
}

/// The text of an `output` event.
pub fn text_of(event: &Event) -> &str {
    event.payload["text"].as_str().unwrap_or("")
}

/// Appends `more`, keeping the last `TAIL_BYTES` (cut at a character boundary).
pub fn keep_tail(text: &mut String, more: &str) {
    text.push_str(more);
    if text.len() > TAIL_BYTES {
        let mut cut = text.len() - TAIL_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text.drain(..cut);
    }
}
