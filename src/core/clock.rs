//! Time as an input: the `Clock` trait, the wall clock, and a manual clock for tests.
//!
//! No domain code reads the wall clock. The actor reads the injected clock once per batch and
//! hands every operation of that batch the same stamp through `Tx::now_ms`; `Stamp` makes sure
//! the stamps it hands out never go backwards, even when the clock does.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in epoch milliseconds.
///
/// Implement it to drive a store from simulated time; [`SystemClock`] and [`ManualClock`] cover
/// production and tests.
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// The current time in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to. Clones share one time source, so a test keeps one
/// clone and gives another to the store.
///
/// ```
/// let clock = spindle::ManualClock::new(1_700_000_000_000);
/// let shared = clock.clone();
/// clock.advance_ms(30_000);
/// assert_eq!(shared.now_ms(), 1_700_000_030_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        Self { now_ms: Arc::new(AtomicI64::new(start_ms)) }
    }

    /// The time the clock shows.
    pub fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    /// Moves the clock forward (or, with a negative delta, backward) by `delta_ms`.
    pub fn advance_ms(&self, delta_ms: i64) {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms`.
    pub fn set_ms(&self, now_ms: i64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        ManualClock::now_ms(self)
    }
}

/// Hands out per-batch timestamps that never decrease.
#[derive(Debug)]
pub(crate) struct Stamp {
    clock: Arc<dyn Clock>,
    last_ms: i64,
}

impl Stamp {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, last_ms: i64::MIN }
    }

    /// The stamp for the next batch: the clock's time, or the previous stamp if the clock went
    /// backwards.
    pub(crate) fn next_ms(&mut self) -> i64 {
        self.last_ms = self.last_ms.max(self.clock.now_ms());
        self.last_ms
    }

    /// What the next stamp would be, without taking it.
    pub(crate) fn peek_ms(&self) -> i64 {
        self.last_ms.max(self.clock.now_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_never_go_backwards() {
        let clock = ManualClock::new(1_000);
        let mut stamp = Stamp::new(Arc::new(clock.clone()));
        assert_eq!(stamp.next_ms(), 1_000);
        clock.set_ms(500);
        assert_eq!(stamp.next_ms(), 1_000);
        clock.advance_ms(1_000);
        assert_eq!(stamp.next_ms(), 1_500);
    }

    #[test]
    fn system_clock_is_past_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
