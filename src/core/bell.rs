//! `Bell`: wakes callers that wait for something a commit may bring (a blocking claim).
//!
//! An op rings it through `Tx::ring_bell`; the actor rings it after the commit. A waiter reads
//! the generation before it looks for work, and waits only while the generation is unchanged,
//! so a ring between its look and its wait is never lost.

use std::time::Instant;

/// A generation counter under a mutex, and a condition variable.
#[derive(Debug, Default)]
pub(crate) struct Bell {
    generation: parking_lot::Mutex<u64>,
    rung: parking_lot::Condvar,
}

impl Bell {
    /// The current generation, to pass to `wait`.
    pub(crate) fn generation(&self) -> u64 {
        *self.generation.lock()
    }

    /// Wakes every waiter.
    pub(crate) fn ring(&self) {
        *self.generation.lock() += 1;
        self.rung.notify_all();
    }

    /// Waits until the bell rings after `seen`, or `deadline` (if any) passes; true if it rang.
    pub(crate) fn wait(&self, seen: u64, deadline: Option<Instant>) -> bool {
        let mut generation = self.generation.lock();
        while *generation == seen {
            let Some(deadline) = deadline else {
                self.rung.wait(&mut generation);
                continue;
            };
            if self.rung.wait_until(&mut generation, deadline).timed_out() {
                return *generation != seen;
            }
        }
        true
    }
}
