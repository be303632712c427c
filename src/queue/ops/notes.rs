//! The events an op owes its queues' streams, gathered so that a batch appends one event per
//! queue and kind (`{"items": [..]}`) instead of one per item, and appended together: on
//! PostgreSQL one `INSERT` for all of an op's events, which also leaves out those of queues
//! whose item events a setting turned off (no read of the settings before it).
//!
//! Each entry is encoded as it is noted; the job cycle's (claimed, completed, enqueued: two per
//! job) are small structs, so no JSON value is built for them. `Notes` also keeps the op's
//! completions per queue: their count in `queue_counts` is written once per queue for the
//! whole op (a batch completing a hundred items of a queue writes it once), with the events.

use serde::Serialize;

use crate::core::events::{self, Encoded, InsertAll, Stream, insert_all_sql};
use crate::core::tx::{Tally, Tx};
use crate::error::Result;
use crate::queue::ItemStatus;
use crate::queue::sql;

/// The events of an op, gathered per queue and kind, and its completions per queue.
#[derive(Default)]
pub(super) struct Notes {
    /// Per queue and event type, the entries so far, encoded and comma-separated.
    pub(super) pending: Vec<Noted>,
    /// Per queue, the items completed so far.
    completed: Vec<(String, i64)>,
}

/// One queue's entries of one event type.
pub(super) struct Noted {
    /// The queue whose stream the event goes to.
    pub(super) queue: String,
    /// The event's type (`claimed`, `completed`, ...).
    pub(super) event_type: &'static str,
    /// The entries so far, each a JSON object, separated by commas.
    pub(super) entries: String,
}

/// An event for a queue's stream, its payload encoded.
pub(super) struct QueueEvent {
    /// The queue.
    pub(super) queue: String,
    /// The event's type.
    pub(super) event_type: &'static str,
    /// `{"items": [..]}` as text.
    pub(super) payload: String,
}

impl QueueEvent {
    /// The event about one item: `entry` is its encoded entry.
    pub(super) fn single(queue: &str, event_type: &'static str, entry: &str) -> Self {
        Self { queue: queue.to_owned(), event_type, payload: items_payload(entry) }
    }
}

impl Notes {
    /// Adds `entry` to the event of `queue` and `event_type`.
    pub(super) fn note(
        &mut self,
        queue: &str,
        event_type: &'static str,
        entry: &impl Serialize,
    ) -> Result<()> {
        let noted = self.noted(queue, event_type);
        if !noted.entries.is_empty() {
            noted.entries.push(',');
        }
        noted.entries.push_str(&serde_json::to_string(entry)?);
        Ok(())
    }

    /// The entries of `queue` and `event_type`, started if there are none yet.
    fn noted(&mut self, queue: &str, event_type: &'static str) -> &mut Noted {
        let found =
            self.pending.iter().position(|n| n.queue == queue && n.event_type == event_type);
        let index = found.unwrap_or_else(|| {
            let queue = queue.to_owned();
            self.pending.push(Noted { queue, event_type, entries: String::new() });
            self.pending.len() - 1
        });
        &mut self.pending[index]
    }

    /// Counts one more completed item of `queue`.
    pub(super) fn completed(&mut self, queue: &str) {
        match self.completed.iter_mut().find(|(noted, _)| noted == queue) {
            Some((_, total)) => *total += 1,
            None => self.completed.push((queue.to_owned(), 1)),
        }
    }

    /// Writes the completions' counts, then appends the gathered events (by queue, then event
    /// type) of the queues whose item events are on; the op's own savepoint makes them atomic
    /// with its changes.
    pub(super) fn append(self, tx: &mut Tx<'_>) -> Result<()> {
        let events = self.into_events(tx)?;
        append_events(tx, events)
    }

    /// Writes the completions' counts; returns the gathered events, by queue, then event type.
    pub(super) fn into_events(mut self, tx: &mut Tx<'_>) -> Result<Vec<QueueEvent>> {
        for (queue, total) in &self.completed {
            sql::add_to_count_late(tx, queue, ItemStatus::Completed, *total)?;
            tx.tally(Tally::Completed, u64::try_from(*total).unwrap_or(0));
        }
        self.pending.sort_by(|a, b| (&a.queue, a.event_type).cmp(&(&b.queue, b.event_type)));
        let events = self.pending.into_iter().map(|noted| QueueEvent {
            payload: items_payload(&noted.entries),
            queue: noted.queue,
            event_type: noted.event_type,
        });
        Ok(events.collect())
    }
}

/// Appends `events` in their order, leaving out those of queues whose item events a setting
/// turned off: one statement on PostgreSQL (the setting read in it), one a queue's settings and
/// one an event on SQLite. An event that frees a limited queue's place (a completion, a dead
/// letter, a cancel) rings the bell for whoever waits to claim; on PostgreSQL any such event
/// rings it without reading the settings (a round trip): a waiter woken for nothing looks once
/// and waits again.
pub(super) fn append_events(tx: &mut Tx<'_>, events: Vec<QueueEvent>) -> Result<()> {
    if tx.db().is_postgres() {
        if events.iter().any(frees_a_place) {
            tx.ring_bell();
        }
        let encoded: Vec<Encoded<'_>> = events
            .iter()
            .map(|event| Encoded {
                stream: Stream::queue(&event.queue),
                event_type: event.event_type,
                encoded: &event.payload,
            })
            .collect();
        return events::append_encoded_all(tx, &encoded, QUEUE_EVENTS_SQL);
    }
    // Per queue: whether its item events are on, and whether it is limited.
    let mut settings: Vec<(String, bool, bool)> = Vec::new();
    for event in events {
        let known = settings.iter().find(|(queue, ..)| *queue == event.queue);
        let (enabled, limited) = match known {
            Some(&(_, enabled, limited)) => (enabled, limited),
            None => {
                let read = sql::select_settings(tx.db(), tx.tenant(), &event.queue)?;
                let enabled = read.as_ref().is_none_or(|settings| settings.item_events);
                let limited = read.is_some_and(|settings| settings.concurrency_max.is_some());
                settings.push((event.queue.clone(), enabled, limited));
                (enabled, limited)
            }
        };
        if limited && frees_a_place(&event) {
            tx.ring_bell();
        }
        if enabled {
            let stream = Stream::queue(&event.queue);
            events::append_encoded(tx, &stream, event.event_type, &event.payload)?;
        }
    }
    Ok(())
}

/// Whether `event` takes items out of the claimed ones (a limited queue has room again).
fn frees_a_place(event: &QueueEvent) -> bool {
    matches!(event.event_type, "completed" | "dead_lettered" | "cancelled")
}

/// The insert of a queue op's events on PostgreSQL: a queue's stream (its id is the queue's
/// name) is left out when its `queue_settings` row turned item events off.
const QUEUE_EVENTS_SQL: InsertAll = insert_all_sql!(
    "AND NOT EXISTS (SELECT 1 FROM main.queue_settings AS qs
                     WHERE qs.tenant_id = ?1 AND qs.queue = e.id AND qs.item_events = 0)"
);

/// `{"items": [entries]}` as text.
pub(super) fn items_payload(entries: &str) -> String {
    format!("{{\"items\":[{entries}]}}")
}
