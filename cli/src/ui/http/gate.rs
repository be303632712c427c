//! Who may make an answer now, and how big it may be.
//!
//! At most `MAKING_MAX` requests make their answers at once (they share the store's thread and
//! the machine's cores: more at once only makes each slower), of which at most `HEAVY_MAX`
//! heavy ones (pages of the store's records, whose size the records decide), so that a light
//! request (a page's shell, the overview, the session) never waits behind heavy ones. A
//! request waits for its turn at most until a deadline, then is answered 503.
//!
//! The answers made and not yet written (a slow client reads them) hold at most
//! `HELD_BYTES_MAX` between them: a heavy request waits until at least `ROOM_MIN` of it is
//! free, and is allowed what is free, at most `ANSWER_BYTES_MAX` (a page stops there and
//! gives its cursor). What a turn was allowed is held from the start of the turn; once the
//! answer is made, what it really takes is held until it is written.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Requests making their answers at once, at most.
const MAKING_MAX: usize = 6;
/// Heavy requests making their answers at once, at most.
const HEAVY_MAX: usize = 4;
/// The most bytes one answer is allowed.
pub const ANSWER_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The most bytes of answers made and not yet written, between them (an answer of one record
/// bigger than its allowance may pass it by that record).
const HELD_BYTES_MAX: usize = 24 * 1024 * 1024;
/// The least room a heavy request waits for.
const ROOM_MIN: usize = 256 * 1024;
/// How often a waiting request looks whether its client is still there.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// What making an answer may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Bounded by the code (a page's shell, the overview, the session).
    Light,
    /// Bounded by the store's records (their pages, a run, a node's attempts, an action).
    Heavy,
}

/// The turns to make answers, and the bytes held by answers.
#[derive(Default)]
pub struct Gate {
    state: Mutex<State>,
    freed: Condvar,
}

/// Requests making answers now, the heavy ones among them, and the bytes answers hold.
#[derive(Default)]
struct State {
    making: usize,
    heavy: usize,
    held: usize,
}

impl State {
    /// Whether a request of `weight` may start now.
    fn may_start(&self, weight: Weight) -> bool {
        self.making < MAKING_MAX
            && (weight == Weight::Light
                || (self.heavy < HEAVY_MAX && HELD_BYTES_MAX.saturating_sub(self.held) >= ROOM_MIN))
    }
}

impl Gate {
    /// Waits for a turn until `until`, or until `gone()` says the client went away; `None`
    /// when there was none in time.
    pub fn turn(
        &self,
        weight: Weight,
        until: Instant,
        gone: impl Fn() -> bool,
    ) -> Option<Turn<'_>> {
        let mut state = self.state.lock();
        while !state.may_start(weight) {
            let now = Instant::now();
            if now >= until || gone() {
                return None;
            }
            let _ = self.freed.wait_until(&mut state, until.min(now + LOOK_EVERY));
        }
        // A light answer is small by its code: nothing is set aside for it.
        let (allowed, reserved) = match weight {
            Weight::Light => (ANSWER_BYTES_MAX, 0),
            Weight::Heavy => {
                let free = HELD_BYTES_MAX.saturating_sub(state.held).min(ANSWER_BYTES_MAX);
                (free, free)
            }
        };
        state.making += 1;
        state.heavy += usize::from(weight == Weight::Heavy);
        state.held += reserved;
        Some(Turn { gate: self, weight, allowed, reserved })
    }

    /// Changes the counts, and wakes the requests waiting for a turn.
    fn change(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock());
        self.freed.notify_all();
    }
}

/// A request's turn to make its answer, given back when dropped.
pub struct Turn<'g> {
    gate: &'g Gate,
    weight: Weight,
    /// The most bytes its answer may take.
    pub allowed: usize,
    /// What is held for it meanwhile.
    reserved: usize,
}

impl<'g> Turn<'g> {
    /// Ends the turn; its answer takes `bytes`, held until the returned guard is dropped (once
    /// the answer is written).
    pub fn made(mut self, bytes: usize) -> Held<'g> {
        let reserved = std::mem::take(&mut self.reserved);
        self.gate.change(|state| state.held = state.held.saturating_sub(reserved) + bytes);
        Held { gate: self.gate, bytes }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let (heavy, reserved) = (usize::from(self.weight == Weight::Heavy), self.reserved);
        self.gate.change(|state| {
            state.making -= 1;
            state.heavy -= heavy;
            state.held = state.held.saturating_sub(reserved);
        });
    }
}

/// Bytes an answer holds until it is written, given back when dropped.
pub struct Held<'g> {
    gate: &'g Gate,
    bytes: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let bytes = self.bytes;
        self.gate.change(|state| state.held = state.held.saturating_sub(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now_or_never(gate: &Gate, weight: Weight) -> Option<Turn<'_>> {
        gate.turn(weight, Instant::now(), || false)
    }

    #[test]
    fn heavy_turns_leave_room_for_light_ones_and_held_bytes_bound_them() {
        let gate = Gate::default();
        let heavy: Vec<_> =
            (0..HEAVY_MAX).filter_map(|_| now_or_never(&gate, Weight::Heavy)).collect();
        assert_eq!(heavy.len(), HEAVY_MAX);
        assert!(now_or_never(&gate, Weight::Heavy).is_none(), "no more heavy ones");
        let light: Vec<_> =
            (HEAVY_MAX..MAKING_MAX).filter_map(|_| now_or_never(&gate, Weight::Light)).collect();
        assert_eq!(light.len(), MAKING_MAX - HEAVY_MAX, "light ones still start");
        assert!(now_or_never(&gate, Weight::Light).is_none(), "the bound holds");
        // Answers made: what they take is held until written, and bounds new heavy turns.
        let held: Vec<_> = heavy.into_iter().map(|turn| turn.made(HELD_BYTES_MAX / 4)).collect();
        drop(light);
        assert!(now_or_never(&gate, Weight::Heavy).is_none(), "no room left");
        assert!(now_or_never(&gate, Weight::Light).is_some(), "light ones do not wait for room");
        drop(held);
        let turn = now_or_never(&gate, Weight::Heavy).expect("room again");
        assert_eq!(turn.allowed, ANSWER_BYTES_MAX);
    }

    #[test]
    fn a_waiting_request_gives_up_when_its_client_is_gone() {
        let gate = Gate::default();
        let _all: Vec<_> =
            (0..MAKING_MAX).filter_map(|_| now_or_never(&gate, Weight::Light)).collect();
        let began = Instant::now();
        let turn = gate.turn(Weight::Light, began + Duration::from_secs(5), || true);
        assert!(turn.is_none() && began.elapsed() < Duration::from_secs(1));
    }
}
