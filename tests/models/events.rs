//! The model of the event log (DESIGN.md §5.1) for one tenant: streams with a dense head,
//! idempotency keys, truncation and reads.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Expect, Refusal};

/// One stored event as the model sees it: `(seq, event_type, payload, created_at_ms)`.
pub type ModelEvent = (u64, String, Value, i64);

/// One stream: its head (never goes back, even when truncated), the events it still holds and
/// the idempotency keys it has seen, with the event each one wrote.
#[derive(Debug, Clone, Default)]
pub struct ModelStream {
    pub head: u64,
    pub events: BTreeMap<u64, (String, Value, i64)>,
    pub keys: BTreeMap<String, (u64, String, Value)>,
}

/// What an idempotent append answers: the sequence and whether it existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedAppend {
    pub seq: u64,
    pub existed: bool,
}

/// The custom streams of one tenant, by name.
#[derive(Debug, Clone, Default)]
pub struct EventsModel {
    pub streams: BTreeMap<String, ModelStream>,
}

impl EventsModel {
    /// A plain append at the store's time `now_ms`: the next sequence of the stream.
    pub fn append(&mut self, stream: &str, event_type: &str, payload: Value, now_ms: i64) -> u64 {
        let entry = self.streams.entry(stream.to_owned()).or_default();
        entry.head += 1;
        entry.events.insert(entry.head, (event_type.to_owned(), payload, now_ms));
        entry.head
    }

    /// An append with an idempotency key: the first event again for the same content, a
    /// `Conflict` for other content (the replay-hash conflict), else a new event.
    pub fn append_idempotent(
        &mut self,
        stream: &str,
        event_type: &str,
        payload: Value,
        key: &str,
        now_ms: i64,
    ) -> Expect<KeyedAppend> {
        let entry = self.streams.entry(stream.to_owned()).or_default();
        if let Some((seq, t, p)) = entry.keys.get(key) {
            if t == event_type && *p == payload {
                return Ok(KeyedAppend { seq: *seq, existed: true });
            }
            return Err(Refusal::Conflict);
        }
        entry.head += 1;
        let seq = entry.head;
        entry.events.insert(seq, (event_type.to_owned(), payload.clone(), now_ms));
        entry.keys.insert(key.to_owned(), (seq, event_type.to_owned(), payload));
        Ok(KeyedAppend { seq, existed: false })
    }

    /// Whether an idempotent append of this content under `key` would be a replay conflict.
    pub fn conflicts(&self, stream: &str, event_type: &str, payload: &Value, key: &str) -> bool {
        let found = self.streams.get(stream).and_then(|entry| entry.keys.get(key));
        found.is_some_and(|(_, t, p)| t != event_type || p != payload)
    }

    /// Deletes the events before `before_seq`; how many there were.
    pub fn truncate(&mut self, stream: &str, before_seq: u64) -> u64 {
        let Some(entry) = self.streams.get_mut(stream) else { return 0 };
        let doomed: Vec<u64> = entry.events.range(..before_seq).map(|(seq, _)| *seq).collect();
        for seq in &doomed {
            entry.events.remove(seq);
        }
        doomed.len() as u64
    }

    /// The events after `after_seq`, at most `limit`.
    pub fn read(&self, stream: &str, after_seq: u64, limit: usize) -> Vec<ModelEvent> {
        let Some(entry) = self.streams.get(stream) else { return Vec::new() };
        let after = after_seq.saturating_add(1);
        let events = entry.events.range(after..).take(limit);
        events.map(|(seq, (t, p, at))| (*seq, t.clone(), p.clone(), *at)).collect()
    }

    /// The stream's head (0 for a stream never written).
    pub fn head(&self, stream: &str) -> u64 {
        self.streams.get(stream).map_or(0, |entry| entry.head)
    }
}

/// Events as the model compares them.
pub fn plain(events: Vec<spindle::Event>) -> Vec<ModelEvent> {
    events.into_iter().map(|e| (e.seq, e.event_type, e.payload, e.created_at_ms)).collect()
}
