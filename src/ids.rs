//! Generated ids: UUID v7, time-ordered from the batch's timestamp, so new rows land at the end
//! of their indexes (about 7x faster inserts than random keys in large transactions).
//!
//! Caller-chosen ids are checked by [`Limits::check_id`](crate::Limits::check_id).

use uuid::{ContextV7, Timestamp, Uuid};

/// Makes UUID v7 ids that sort in the order they were made, within a millisecond too.
/// Owned by the actor thread (the counter is not shared between threads).
#[derive(Debug, Default)]
pub(crate) struct IdGen {
    context: ContextV7,
}

impl IdGen {
    /// A new id stamped with `now_ms`, as lowercase hyphenated text.
    pub(crate) fn next(&self, now_ms: i64) -> String {
        let ms = u64::try_from(now_ms).unwrap_or(0);
        let subsec_nanos = u32::try_from((ms % 1000) * 1_000_000).unwrap_or(0);
        let stamp = Timestamp::from_unix(&self.context, ms / 1000, subsec_nanos);
        Uuid::new_v7(stamp).hyphenated().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v7_and_sorted_within_and_across_milliseconds() {
        let ids = IdGen::default();
        let made: Vec<String> = (0..100).map(|i| ids.next(1_700_000_000_000 + i / 10)).collect();
        let mut sorted = made.clone();
        sorted.sort();
        assert_eq!(made, sorted);
        let parsed = Uuid::parse_str(&made[0]).expect("a uuid");
        assert_eq!(parsed.get_version_num(), 7);
        let (secs, _) = parsed.get_timestamp().expect("v7 has a timestamp").to_unix();
        assert_eq!(secs, 1_700_000_000);
    }
}
