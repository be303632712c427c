//! The event log domain: `store.events()`, the callers' way into the event store the engine
//! keeps (`core::events`). Custom streams make Spindle a small event store too; the streams of
//! registered processes and existing executions are written only by their domains.
//!
//! The types and ops live with the engine, which publishes what they write; they are named
//! here too, as `spindle::log::*`.

use std::borrow::Borrow;

use serde_json::Value;

pub use crate::core::events::{
    Append, Appended, Event, Head, LastPosition, Read, ReadAll, Stream, StreamKind, Truncate,
};
use crate::error::Result;
use crate::store::Store;

impl Store {
    /// The event log: append, read, follow (with [`Store::subscribe`]), truncate.
    pub fn events(&self) -> Events<'_> {
        Events::new(self)
    }
}

/// The event log of a store view: `store.events()`. Streams are taken by value or by
/// reference.
#[derive(Debug, Clone, Copy)]
pub struct Events<'a> {
    store: &'a Store,
}

impl<'a> Events<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// Appends an event; see [`Append`].
    ///
    /// # Errors
    /// `InvalidInput` or `TooLarge` for a bad stream id, type or payload, and for the stream
    /// of a registered process or an existing execution (their domains write those); nothing
    /// is written.
    pub fn append(
        &self,
        stream: impl Borrow<Stream>,
        event_type: &str,
        payload: Value,
    ) -> Result<Appended> {
        self.append_with(stream.borrow(), event_type, payload, None)
    }

    /// Appends an event once per `idem_key`; see [`Append`].
    ///
    /// # Errors
    /// `Conflict` when the key was used with a different type or payload; bad input as `append`.
    pub fn append_idempotent(
        &self,
        stream: impl Borrow<Stream>,
        event_type: &str,
        payload: Value,
        idem_key: &str,
    ) -> Result<Appended> {
        self.append_with(stream.borrow(), event_type, payload, Some(idem_key))
    }

    /// Reads a stream after `after_seq`; see [`Read`].
    ///
    /// # Errors
    /// `TooLarge` for a `limit` past the page size limit.
    pub fn read(
        &self,
        stream: impl Borrow<Stream>,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Event>> {
        self.store.exec(Read { stream: stream.borrow().clone(), after_seq, limit })
    }

    /// Reads every stream of the tenant after `after_position`; see [`ReadAll`].
    ///
    /// # Errors
    /// `TooLarge` for a `limit` past the page size limit.
    pub fn read_all(&self, after_position: u64, limit: usize) -> Result<Vec<Event>> {
        self.store.exec(ReadAll { after_position, limit })
    }

    /// The stream's last sequence; see [`Head`].
    ///
    /// # Errors
    /// `InvalidInput` for a bad stream id.
    pub fn head(&self, stream: impl Borrow<Stream>) -> Result<u64> {
        self.store.exec(Head { stream: stream.borrow().clone() })
    }

    /// The position of the tenant's newest event (0: none); see [`LastPosition`].
    ///
    /// # Errors
    /// Only the store's own failures.
    pub fn last_position(&self) -> Result<u64> {
        self.store.exec(LastPosition)
    }

    /// Deletes a stream's events before `before_seq`; see [`Truncate`].
    ///
    /// # Errors
    /// `InvalidInput` for a bad stream id, or the stream of a registered process or an
    /// existing execution (deleted with its owner).
    pub fn truncate(&self, stream: impl Borrow<Stream>, before_seq: u64) -> Result<u64> {
        self.store.exec(Truncate { stream: stream.borrow().clone(), before_seq })
    }

    fn append_with(
        &self,
        stream: &Stream,
        event_type: &str,
        payload: Value,
        idem_key: Option<&str>,
    ) -> Result<Appended> {
        let op = Append {
            stream: stream.clone(),
            event_type: event_type.to_owned(),
            payload,
            idem_key: idem_key.map(str::to_owned),
        };
        self.store.exec(op)
    }
}
