//! What a store counts about its own work while it runs, for `Store::metrics`: batches and
//! their sizes, how long each op took from being sent to being answered, retries after a
//! conflict, slow batches. Plain atomic counters shared by the store's threads and its
//! handles: recording costs a few relaxed additions, and nothing is kept per op.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the op latency buckets, in microseconds (the last bucket, above them all,
/// is implied).
pub(crate) const LATENCY_BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// Upper bounds of the batch size buckets, in calls.
pub(crate) const BATCH_BOUNDS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// The counters of one store (every handle, tenant view and thread of it).
#[derive(Debug, Default)]
pub(crate) struct Meter {
    /// Calls per transaction the writer ended (committed or rolled back).
    pub(crate) batch_ops: Buckets<{ BATCH_BOUNDS.len() + 1 }>,
    /// Transactions the writer committed.
    pub(crate) commits: AtomicU64,
    /// Transactions the writer rolled back whole: a failed commit, a transaction SQLite
    /// ended, the only op of its transaction that failed.
    pub(crate) rollbacks: AtomicU64,
    /// From an op's sending to its answer, in microseconds, on the writer and the readers.
    pub(crate) latency_us: Buckets<{ LATENCY_BOUNDS_US.len() + 1 }>,
    /// Ops run again after losing to another transaction (PostgreSQL).
    pub(crate) conflict_retries: AtomicU64,
    /// Writer batches that took longer than `Options::slow_batch`.
    pub(crate) slow_batches: AtomicU64,
    /// What committed ops tallied (`Tx::tally`), by [`Tally`]: counters that only grow while
    /// the store is open, for a rate (the kept counts are gauges, lowered by pruning).
    pub(crate) tallies: [AtomicU64; Tally::COUNT],
}

/// What an op tallies for the metrics, counted once its transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    /// Queue items completed.
    Completed = 0,
    /// Queue items moved to the dead letters.
    DeadLettered = 1,
}

impl Tally {
    /// How many there are.
    pub(crate) const COUNT: usize = 2;
}

/// Tallies not yet committed: what one op, or a batch, added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tallies([u64; Tally::COUNT]);

impl Tallies {
    /// `n` more of `tally`.
    pub(crate) fn add(&mut self, tally: Tally, n: u64) {
        let slot = &mut self.0[tally as usize];
        *slot = slot.saturating_add(n);
    }

    /// Another's, added to these.
    pub(crate) fn merge(&mut self, other: Tallies) {
        for (slot, n) in self.0.iter_mut().zip(other.0) {
            *slot = slot.saturating_add(n);
        }
    }
}

impl Meter {
    /// One transaction of `calls` calls ended, committed or rolled back.
    pub(crate) fn transaction(&self, calls: usize, committed: bool) {
        self.batch_ops.record(&BATCH_BOUNDS, u64::try_from(calls).unwrap_or(u64::MAX));
        let counter = if committed { &self.commits } else { &self.rollbacks };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// One op answered `spent` after it was sent.
    pub(crate) fn answered(&self, spent: Duration) {
        let spent_us = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.record(&LATENCY_BOUNDS_US, spent_us);
    }

    /// One more of `counter`.
    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A committed transaction's tallies.
    pub(crate) fn tallied(&self, tallies: Tallies) {
        for (counter, n) in self.tallies.iter().zip(tallies.0) {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// What has been tallied of `tally` since the store opened.
    pub(crate) fn tally(&self, tally: Tally) -> u64 {
        self.tallies[tally as usize].load(Ordering::Relaxed)
    }
}

/// A histogram's counters: one per bucket (the last one above every bound), and the sum of
/// what was recorded.
#[derive(Debug)]
pub(crate) struct Buckets<const N: usize> {
    counts: [AtomicU64; N],
    sum: AtomicU64,
}

impl<const N: usize> Default for Buckets<N> {
    fn default() -> Self {
        Self { counts: std::array::from_fn(|_| AtomicU64::new(0)), sum: AtomicU64::new(0) }
    }
}

impl<const N: usize> Buckets<N> {
    /// Counts `value` in the first bucket whose bound it does not exceed. `bounds` has `N - 1`
    /// entries, ascending.
    fn record(&self, bounds: &[u64], value: u64) {
        let bucket = bounds.partition_point(|bound| *bound < value);
        if let Some(count) = self.counts.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// The counts per bucket (not cumulative) and the sum, as they are now.
    pub(crate) fn read(&self) -> (Vec<u64>, u64) {
        let counts = self.counts.iter().map(|count| count.load(Ordering::Relaxed)).collect();
        (counts, self.sum.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_lands_in_the_first_bucket_it_does_not_exceed() {
        let buckets = Buckets::<4>::default();
        for value in [0, 1, 2, 3, 10, 11, 500] {
            buckets.record(&[1, 3, 10], value);
        }
        let (counts, sum) = buckets.read();
        assert_eq!(counts, [2, 2, 1, 2], "<=1: 0 and 1; <=3: 2 and 3; <=10: 10; above: 11, 500");
        assert_eq!(sum, 527);
    }

    #[test]
    fn batches_count_commits_and_losses_apart() {
        let meter = Meter::default();
        meter.transaction(1, true);
        meter.transaction(3, true);
        meter.transaction(2000, false);
        assert_eq!(meter.commits.load(Ordering::Relaxed), 2);
        assert_eq!(meter.rollbacks.load(Ordering::Relaxed), 1);
        let (counts, sum) = meter.batch_ops.read();
        assert_eq!(counts[0], 1);
        assert_eq!(counts[2], 1, "3 calls: the bucket up to 4");
        assert_eq!(counts[BATCH_BOUNDS.len()], 1, "above the largest bound");
        assert_eq!(sum, 2004);
    }
}
