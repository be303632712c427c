//! Every bound the store enforces, in one place, with units last in each name.
//!
//! Nothing is unbounded (guarantee 8): an argument past one of these limits is refused with
//! [`Error::TooLarge`](crate::Error::TooLarge) or [`Error::InvalidInput`](crate::Error::InvalidInput)
//! before anything is written. The defaults are DESIGN.md §6.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::setters::setters;

/// How many SQLite virtual-machine steps pass between two looks at `Limits::sql_steps_max`.
pub(crate) const SQL_STEPS_PER_CHECK: u64 = 1_000;

/// The limits a store enforces. `Limits::default()` gives the documented defaults.
/// `#[non_exhaustive]`: change one with the setter named after its field,
/// `Limits::default().page_size_max(50)`, and hand it to [`Options::limits`](crate::Options::limits).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Longest id or name, in bytes (tenants, streams, queues, caller-chosen ids). Default 256;
    /// at least 64.
    pub id_len_max: usize,
    /// Longest JSON payload, state, result or output, in bytes of compact JSON. Default 1 MiB.
    pub payload_bytes_max: usize,
    /// Most rows one read returns. Default 1000.
    pub page_size_max: usize,
    /// Most events a live subscriber may have waiting before the actor drops it back to paging.
    /// Default 1024.
    pub subscriber_buffer_max: usize,
    /// Most subscriptions open at once on one store. Default 10,000.
    pub subscriptions_max: usize,
    /// Shortest lease, in milliseconds. Default 1.
    pub lease_ms_min: i64,
    /// Longest lease, in milliseconds. Default 24 hours.
    pub lease_ms_max: i64,
    /// Most attempts a queue item may be given. Default 1000.
    pub max_attempts_max: u32,
    /// Most nodes in one graph. Default 10,000.
    pub graph_nodes_max: usize,
    /// Most edges in one graph. Default 100,000.
    pub graph_edges_max: usize,
    /// Most times one graph node may be fired again by a loop. Default 10,000.
    pub loop_refires_max: u32,
    /// Deepest nesting of arrays and objects in a JSON value the store keeps. Default 64; at
    /// most 100 (serde_json refuses to read back values nested past 128).
    pub json_depth_max: usize,
    /// Most SQLite virtual-machine steps a transaction closure's own SQL (`Tx::sqlite`) may take,
    /// counted in thousands: past it the statement is interrupted and the closure refused
    /// with `TooLarge`, so one caller cannot hold the store's thread. Default 100,000,000
    /// (about a second here).
    pub sql_steps_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            id_len_max: 256,
            payload_bytes_max: 1024 * 1024,
            page_size_max: 1000,
            subscriber_buffer_max: 1024,
            subscriptions_max: 10_000,
            lease_ms_min: 1,
            lease_ms_max: 24 * 60 * 60 * 1000,
            max_attempts_max: 1000,
            graph_nodes_max: 10_000,
            graph_edges_max: 100_000,
            loop_refires_max: 10_000,
            json_depth_max: 64,
            sql_steps_max: 100_000_000,
        }
    }
}

impl Limits {
    setters! {
        /// Sets [`id_len_max`](#structfield.id_len_max).
        id_len_max: usize;
        /// Sets [`payload_bytes_max`](#structfield.payload_bytes_max).
        payload_bytes_max: usize;
        /// Sets [`page_size_max`](#structfield.page_size_max).
        page_size_max: usize;
        /// Sets [`subscriber_buffer_max`](#structfield.subscriber_buffer_max).
        subscriber_buffer_max: usize;
        /// Sets [`subscriptions_max`](#structfield.subscriptions_max).
        subscriptions_max: usize;
        /// Sets [`lease_ms_min`](#structfield.lease_ms_min).
        lease_ms_min: i64;
        /// Sets [`lease_ms_max`](#structfield.lease_ms_max).
        lease_ms_max: i64;
        /// Sets [`max_attempts_max`](#structfield.max_attempts_max).
        max_attempts_max: u32;
        /// Sets [`graph_nodes_max`](#structfield.graph_nodes_max).
        graph_nodes_max: usize;
        /// Sets [`graph_edges_max`](#structfield.graph_edges_max).
        graph_edges_max: usize;
        /// Sets [`loop_refires_max`](#structfield.loop_refires_max).
        loop_refires_max: u32;
        /// Sets [`json_depth_max`](#structfield.json_depth_max).
        json_depth_max: usize;
        /// Sets [`sql_steps_max`](#structfield.sql_steps_max).
        sql_steps_max: u64;
    }

    /// Checks a caller-chosen id or name: non-empty, at most `id_len_max` bytes, no control
    /// characters. `what` names it in the error.
    pub fn check_id(&self, what: &'static str, id: &str) -> Result<()> {
        if id.is_empty() {
            return Err(Error::InvalidInput(format!("{what} must not be empty")));
        }
        if id.len() > self.id_len_max {
            return Err(Error::too_large(what, self.id_len_max, id.len()));
        }
        if id.chars().any(char::is_control) {
            return Err(Error::InvalidInput(format!("{what} must not contain control characters")));
        }
        Ok(())
    }

    /// Checks the size of an encoded JSON value against `payload_bytes_max`, and its nesting
    /// against `json_depth_max`.
    pub fn check_payload(&self, what: &'static str, encoded: &str) -> Result<()> {
        self.check_payload_bytes(what, encoded)?;
        let depth = json_depth(encoded);
        if depth > self.json_depth_max {
            return Err(Error::too_large(JSON_DEPTH, self.json_depth_max, depth));
        }
        Ok(())
    }

    /// Checks the size of an encoded JSON value against `payload_bytes_max` only, for text the
    /// store built itself from flat entries (its nesting is fixed by how it was built).
    pub(crate) fn check_payload_bytes(&self, what: &'static str, encoded: &str) -> Result<()> {
        if encoded.len() > self.payload_bytes_max {
            return Err(Error::too_large(what, self.payload_bytes_max, encoded.len()));
        }
        Ok(())
    }

    /// Encodes `value` and checks it as [`check_payload`](Self::check_payload) does, for a
    /// value that is stored later in another form.
    pub(crate) fn check_json(
        &self,
        what: &'static str,
        value: &impl serde::Serialize,
    ) -> Result<()> {
        let encoded = serde_json::to_string(value)?;
        self.check_payload(what, &encoded)
    }

    /// Checks the nesting of a JSON value against `json_depth_max` without recursing (a value
    /// can be nested deeper than any stack); the error names the value's whole depth.
    pub fn check_depth(&self, value: &Value) -> Result<()> {
        self.check_nesting(value_depth(value))
    }

    /// Checks several values at once; the error names the deepest one's depth (so that a
    /// caller can tell how deep a refused value it holds is).
    pub fn check_depths<'v>(&self, values: impl IntoIterator<Item = &'v Value>) -> Result<()> {
        self.check_nesting(values.into_iter().map(value_depth).max().unwrap_or(0))
    }

    /// Checks a nesting depth already measured.
    pub(crate) fn check_nesting(&self, depth: usize) -> Result<()> {
        if depth > self.json_depth_max {
            return Err(Error::too_large(JSON_DEPTH, self.json_depth_max, depth));
        }
        Ok(())
    }

    /// `Ok` if a lease of `lease_ms` is within `lease_ms_min..=lease_ms_max`.
    ///
    /// # Errors
    /// `InvalidInput` otherwise.
    pub fn check_lease(&self, lease_ms: i64) -> Result<()> {
        if lease_ms < self.lease_ms_min || lease_ms > self.lease_ms_max {
            return Err(Error::InvalidInput(format!(
                "lease_ms must be {}..={}, not {lease_ms}",
                self.lease_ms_min, self.lease_ms_max
            )));
        }
        Ok(())
    }

    /// Checks a requested page size against `page_size_max`.
    pub fn check_page(&self, limit: usize) -> Result<()> {
        if limit > self.page_size_max {
            return Err(Error::too_large("page size", self.page_size_max, limit));
        }
        Ok(())
    }

    /// Checks that every limit is usable (non-zero, ranges the right way round).
    pub(crate) fn validate(&self) -> Result<()> {
        let positive = [
            ("id_len_max", self.id_len_max),
            ("payload_bytes_max", self.payload_bytes_max),
            ("page_size_max", self.page_size_max),
            ("subscriber_buffer_max", self.subscriber_buffer_max),
            ("subscriptions_max", self.subscriptions_max),
            ("graph_nodes_max", self.graph_nodes_max),
            ("graph_edges_max", self.graph_edges_max),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, value)| *value == 0) {
            return Err(Error::InvalidInput(format!("limit {name} must be positive")));
        }
        if self.lease_ms_min < 1 || self.lease_ms_min > self.lease_ms_max {
            return Err(Error::InvalidInput("lease limits must satisfy 1 <= min <= max".into()));
        }
        if self.max_attempts_max == 0 || self.loop_refires_max == 0 {
            return Err(Error::InvalidInput("attempt and loop limits must be positive".into()));
        }
        if self.id_len_max < ID_LEN_MIN {
            return Err(Error::InvalidInput(format!(
                "id_len_max must be at least {ID_LEN_MIN}: the store's own ids and keys take up to 40"
            )));
        }
        if self.sql_steps_max < SQL_STEPS_PER_CHECK {
            return Err(Error::InvalidInput(format!(
                "sql_steps_max must be at least {SQL_STEPS_PER_CHECK}"
            )));
        }
        if !(1..=100).contains(&self.json_depth_max) {
            return Err(Error::InvalidInput("json_depth_max must be 1..=100".into()));
        }
        Ok(())
    }
}

/// The smallest `id_len_max`: generated ids (UUIDs, 36 bytes) and the keys the store builds
/// (up to 40 bytes, the CLI's `run:<uuid>` queues) are checked like callers' ids.
const ID_LEN_MIN: usize = 64;

/// What a nesting error names.
pub(crate) const JSON_DEPTH: &str = "JSON nesting depth";

/// The deepest nesting of arrays and objects in a value, walked without recursion.
pub(crate) fn value_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut open: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((value, depth)) = open.pop() {
        match value {
            Value::Array(items) => open.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(fields) => open.extend(fields.values().map(|field| (field, depth + 1))),
            _ => continue,
        }
        deepest = deepest.max(depth);
    }
    deepest
}

/// The deepest nesting of arrays and objects in encoded JSON (brackets inside strings do not
/// count); one pass over the bytes.
fn json_depth(encoded: &str) -> usize {
    let (mut depth, mut deepest) = (0_usize, 0_usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in encoded.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_at_the_limit_pass_and_one_past_fails() {
        let limits = Limits::default();
        assert!(limits.check_id("id", &"a".repeat(256)).is_ok());
        let err = limits.check_id("id", &"a".repeat(257)).expect_err("257 bytes is too long");
        assert!(matches!(err, Error::TooLarge { limit: 256, actual: 257, .. }));
    }

    #[test]
    fn empty_and_control_characters_are_invalid() {
        let limits = Limits::default();
        assert!(matches!(limits.check_id("id", ""), Err(Error::InvalidInput(_))));
        assert!(matches!(limits.check_id("id", "a\nb"), Err(Error::InvalidInput(_))));
        assert!(matches!(limits.check_id("id", "a\u{7f}"), Err(Error::InvalidInput(_))));
        assert!(limits.check_id("id", "ünïcode-ok").is_ok());
    }

    #[test]
    fn json_nested_to_the_depth_limit_passes_and_one_deeper_fails() {
        let limits = Limits::default();
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(limits.check_payload("p", &nested(64)).is_ok());
        let too_deep = limits.check_payload("p", &nested(65));
        assert!(matches!(too_deep, Err(Error::TooLarge { limit: 64, actual: 65, .. })));
        let in_strings = format!("[\"{}\\\"[\"]", "[{".repeat(100));
        assert!(limits.check_payload("p", &in_strings).is_ok(), "brackets in strings");
        assert_eq!(json_depth(r#"{"a":[1,{"b":[]}],"c":{}}"#), 4);
        let value: Value = serde_json::from_str(&nested(64)).unwrap_or_default();
        assert!(limits.check_depth(&value).is_ok());
        let deeper: Value = serde_json::from_str(&nested(65)).unwrap_or_default();
        assert!(matches!(limits.check_depth(&deeper), Err(Error::TooLarge { limit: 64, .. })));
        let mut deep = Value::Null;
        for _ in 0..200_000 {
            deep = Value::Array(vec![deep]);
        }
        let refused = limits.check_depth(&deep);
        assert!(matches!(refused, Err(Error::TooLarge { actual: 200_000, .. })), "no overflow");
        std::mem::forget(deep); // dropping it would recurse 200,000 deep
    }

    #[test]
    fn defaults_validate_and_zero_limits_do_not() {
        assert!(Limits::default().validate().is_ok());
        let zero_page = Limits { page_size_max: 0, ..Limits::default() };
        assert!(matches!(zero_page.validate(), Err(Error::InvalidInput(_))));
        let inverted = Limits { lease_ms_min: 10, lease_ms_max: 5, ..Limits::default() };
        assert!(matches!(inverted.validate(), Err(Error::InvalidInput(_))));
    }
}
