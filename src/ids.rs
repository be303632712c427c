//! Generated ids and the store's randomness: UUID v7 ids, time-ordered from the batch's
//! timestamp, so new rows land at the end of their indexes (about 7x faster inserts than random
//! keys in large transactions); and the random bytes of token secrets.
//!
//! Everything random a store makes comes from one [`Entropy`] stream: SHA-256 of a 32-byte key
//! and a block counter. The key is 32 bytes from the operating system when the store opens, or
//! derived from `Options::seed`: with the same seed, clock and calls, a store makes the same ids
//! and secrets, byte for byte (what a fuzz harness needs to reproduce a run).
//!
//! Caller-chosen ids are checked by [`Limits::check_id`](crate::Limits::check_id).

use std::cell::RefCell;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::{Error, Result};

/// Makes UUID v7 ids that sort in the order they were made, within a millisecond too, and hands
/// out random bytes. Owned by the actor (the state is not shared between threads).
#[derive(Debug)]
pub(crate) struct IdGen {
    state: RefCell<State>,
}

#[derive(Debug)]
struct State {
    entropy: Entropy,
    /// The millisecond of the last id made.
    last_ms: u64,
    /// The counter of the last id made within `last_ms` (42 bits).
    counter: u64,
}

/// Bits of an id's counter: the 12 bits of `rand_a` and the top 30 of `rand_b`.
const COUNTER_BITS: u32 = 42;

impl IdGen {
    /// A generator seeded with `seed`, or keyed from the operating system's randomness.
    ///
    /// # Errors
    /// `Io` if the operating system has no randomness to give.
    pub(crate) fn new(seed: Option<u64>) -> Result<Self> {
        let entropy = match seed {
            Some(seed) => Entropy::seeded(seed),
            None => Entropy::from_os()?,
        };
        Ok(Self { state: RefCell::new(State { entropy, last_ms: 0, counter: 0 }) })
    }

    /// A new id stamped with `now_ms`, as lowercase hyphenated text.
    pub(crate) fn next(&self, now_ms: i64) -> String {
        let mut state = self.state.borrow_mut();
        let mut ms = u64::try_from(now_ms).unwrap_or(0).max(state.last_ms);
        if ms == state.last_ms && state.counter == (1 << COUNTER_BITS) - 1 {
            // The millisecond's counter is spent: the id moves to the next one, still in order.
            ms += 1;
        }
        if ms == state.last_ms {
            state.counter += 1;
        } else {
            // A new millisecond starts the counter at a random point in its lower half, as
            // RFC 9562 suggests, leaving room to count up.
            state.counter = state.entropy.next_u64() >> (64 - COUNTER_BITS + 1);
            state.last_ms = ms;
        }
        let random = state.entropy.next_u64() as u32;
        v7(ms, state.counter, random).hyphenated().to_string()
    }

    /// Fills `out` with random bytes from the store's stream.
    pub(crate) fn fill(&self, out: &mut [u8]) {
        self.state.borrow_mut().entropy.fill(out);
    }
}

/// Lays out a UUID v7: 48 bits of milliseconds, the version, 42 bits of counter, the variant and
/// 32 random bits.
fn v7(ms: u64, counter: u64, random: u32) -> Uuid {
    let rand_a = u128::from((counter >> 30) & 0xFFF);
    let rand_b = u128::from(((counter & 0x3FFF_FFFF) << 32) | u64::from(random));
    let ms = u128::from(ms & 0xFFFF_FFFF_FFFF);
    Uuid::from_u128((ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b)
}

/// A stream of random bytes: SHA-256 of a 32-byte key and a block counter. Unpredictable
/// while the key is secret (a key from the operating system); reproducible from a seed.
#[derive(Debug)]
struct Entropy {
    key: [u8; 32],
    /// The next block to make.
    block: u64,
    /// The current block, and how much of it is used.
    bytes: [u8; 32],
    used: usize,
}

impl Entropy {
    fn from_os() -> Result<Self> {
        let mut key = [0_u8; 32];
        getrandom::fill(&mut key)
            .map_err(|error| Error::Io(std::io::Error::other(error.to_string())))?;
        Ok(Self::keyed(key))
    }

    fn seeded(seed: u64) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"spindle seed\0");
        hasher.update(seed.to_le_bytes());
        Self::keyed(hasher.finalize().into())
    }

    fn keyed(key: [u8; 32]) -> Self {
        Self { key, block: 0, bytes: [0; 32], used: 32 }
    }

    fn fill(&mut self, out: &mut [u8]) {
        for byte in out {
            if self.used == self.bytes.len() {
                self.refill();
            }
            *byte = self.bytes[self.used];
            self.used += 1;
        }
    }

    fn next_u64(&mut self) -> u64 {
        let mut bytes = [0_u8; 8];
        self.fill(&mut bytes);
        u64::from_le_bytes(bytes)
    }

    fn refill(&mut self) {
        let mut hasher = Sha256::new();
        hasher.update(self.key);
        hasher.update(self.block.to_le_bytes());
        self.bytes = hasher.finalize().into();
        self.block += 1;
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;

    #[test]
    fn ids_are_v7_and_sorted_within_and_across_milliseconds() -> Result<()> {
        let ids = IdGen::new(None)?;
        let made: Vec<String> = (0..100).map(|i| ids.next(T0 + i / 10)).collect();
        let mut sorted = made.clone();
        sorted.sort();
        assert_eq!(made, sorted);
        let mut unique = made.clone();
        unique.dedup();
        assert_eq!(unique.len(), made.len());
        let parsed = Uuid::parse_str(&made[0]).expect("a uuid");
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
        let (secs, nanos) = parsed.get_timestamp().expect("v7 has a timestamp").to_unix();
        assert_eq!((secs, nanos), (1_700_000_000, 0));
        Ok(())
    }

    #[test]
    fn a_clock_that_goes_back_still_gives_sorted_ids() -> Result<()> {
        let ids = IdGen::new(Some(1))?;
        let made: Vec<String> = [T0 + 5, T0, T0 + 5, T0 + 3, T0 + 9].map(|t| ids.next(t)).into();
        let mut sorted = made.clone();
        sorted.sort();
        assert_eq!(made, sorted);
        Ok(())
    }

    #[test]
    fn the_same_seed_gives_the_same_ids_and_bytes_and_another_seed_does_not() -> Result<()> {
        let run = |seed| -> Result<(Vec<String>, [u8; 40])> {
            let ids = IdGen::new(Some(seed))?;
            let made = (0..10).map(|i| ids.next(T0 + i / 3)).collect();
            let mut bytes = [0_u8; 40];
            ids.fill(&mut bytes);
            Ok((made, bytes))
        };
        assert_eq!(run(7)?, run(7)?);
        assert_ne!(run(7)?.0, run(8)?.0);
        assert_ne!(run(7)?.1, run(8)?.1);
        // Unseeded generators are keyed by the operating system: they differ.
        let (a, b) = (IdGen::new(None)?, IdGen::new(None)?);
        assert_ne!(a.next(T0), b.next(T0));
        Ok(())
    }
}
