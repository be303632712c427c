//! Model-based test of the process registry (reliability plan T1, registry part): seeded random
//! sequences of registrations, appends with and without replay keys, completions, wait states,
//! lease claims, reclaims, renewals and releases, clock moves past lease expiry, and reopens of
//! the same store, run against the store and against a plain in-memory model (`BTreeMap`s) of
//! the registry's rules (DESIGN.md §5.4, seed-semantics.md §2 as Spindle implements them).
//!
//! After every call the store's answer must equal the model's, down to the error variant
//! (`NotFound`, `Conflict`, `InvalidInput`, `LeaseLost`) and `Busy` versus `Acquired`, the
//! touched process's record and event count must equal the model's, `count()` must agree with
//! a recount of the processes by a plain `GROUP BY` (and `audit_counts` find nothing), and
//! these invariants are
//! checked independently of the model: fencing tokens per process grow by one on every new
//! grant and never go back, across reopens too; at most one holder is live per process at any
//! clock value; a new replay key takes the next dense sequence, the same key with the same
//! content returns the first sequence and writes nothing, with other content is `Conflict` and
//! writes nothing; a finished process keeps its first output.
//!
//! The clock also jumps backwards (the store's time then stays where it was until the clock
//! catches up, and starts from the clock again after a reopen: `models::Stamp`). A quarter of
//! the sequences run on a shared store (a file in a tmpfs on SQLite, a schema of its own on
//! PostgreSQL) and reopen it now and then and at the end; the others run on a private one. The
//! model lives in `tests/models/process.rs` (shared with the `ops`
//! fuzz harness). `SPINDLE_MODEL_CASES` sets the number of sequences (default 2,000); every
//! sequence comes from a printed seed, and `PROCESS_MODEL_SEED=<seed>` runs one alone.

mod common;
mod models;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use common::{Dice, SharedStore};
use models::process::{
    ExpectClaim, Model, ModelProcess, PROCESSES, outputs, registration, terminal_request,
};
use models::{Expect, Refusal, Stamp, assert_refused};
use serde_json::json;
use spindle::process::{
    AppendRequest, AwaitOutput, LeaseClaim, LeaseOwner, ProcessLease, ProcessStatus, WaitKind,
};
use spindle::{Durability, ManualClock, Options, Store, Stream};

const T0: i64 = 1_700_000_000_000;
/// Two incarnations of one owner and another owner: all three are different holders.
const OWNERS: [(&str, &str); 3] = [("o1", "i1"), ("o1", "i2"), ("o2", "i1")];
const TTLS: [i64; 3] = [500, 1_000, 3_000];
const ADVANCES: [i64; 4] = [100, 600, 1_500, 4_000];

/// One grant as the invariant checker sees it: from its grant until its last expiry, cut
/// short by a release.
#[derive(Debug, Clone)]
struct Grant {
    fence: u64,
    token: String,
    claimed_at_ms: i64,
    end_ms: i64,
    released: bool,
}

/// What a run exercised, summed over every sequence; the test fails if a path was missed.
#[derive(Debug, Default)]
struct Coverage {
    new_events: u64,
    replays: u64,
    replay_conflicts: u64,
    terminal_conflicts: u64,
    completions: u64,
    grants: u64,
    grants_after_expiry: u64,
    reentries: u64,
    busy: u64,
    reclaims_granted: u64,
    renewals: u64,
    releases: u64,
    lease_lost: u64,
    not_found: u64,
    invalid_input: u64,
    reopens: u64,
    clock_back: u64,
}

/// The store under test with everything the checks keep beside the model.
struct Harness {
    seed: u64,
    step: usize,
    clock: ManualClock,
    /// The store's time as the model sees it.
    stamp: Stamp,
    /// The store of a sequence that reopens it (`None`: a private one, never reopened).
    shared: Option<SharedStore>,
    store: Store,
    model: Model,
    /// Every lease value the store handed out, per process (for renewals, releases and stale
    /// writes).
    known: BTreeMap<usize, Vec<ProcessLease>>,
    /// Every grant per process, in grant order (for fences and overlap).
    grants: BTreeMap<usize, Vec<Grant>>,
    /// The first seq each replay key answered with.
    key_seqs: BTreeMap<(usize, String), u64>,
    /// Every lease token seen, to check that a new grant draws a new one.
    tokens: BTreeSet<String>,
    /// The first output of each finished process.
    first_output: BTreeMap<usize, AwaitOutput>,
}

fn options(clock: &ManualClock) -> Options {
    Options::default().clock(Arc::new(clock.clone())).durability(Durability::Normal).inline(true)
}

fn open(shared: Option<&SharedStore>, clock: &ManualClock) -> Store {
    match shared {
        Some(shared) => shared.open_with(options(clock)),
        None => common::new_store_with(options(clock)),
    }
}

impl Harness {
    fn context(&self, op: &str) -> String {
        format!("seed {} step {} ({op})", self.seed, self.step)
    }

    fn owner(dice: &mut Dice) -> LeaseOwner {
        let (id, incarnation) = OWNERS[dice.below(OWNERS.len() as u64) as usize];
        if dice.below(40) == 0 {
            return LeaseOwner::new("", incarnation);
        }
        LeaseOwner::new(id, incarnation)
    }

    fn ttl(dice: &mut Dice) -> i64 {
        if dice.below(25) == 0 {
            return [0, 24 * 60 * 60 * 1000 + 1][dice.below(2) as usize];
        }
        TTLS[dice.below(TTLS.len() as u64) as usize]
    }

    /// A lease value for `p`: mostly the latest one handed out, sometimes an older one.
    fn pick_lease(&self, dice: &mut Dice, p: usize) -> Option<ProcessLease> {
        let known = self.known.get(&p).filter(|known| !known.is_empty())?;
        let index = if dice.below(3) == 0 {
            dice.below(known.len() as u64) as usize
        } else {
            known.len() - 1
        };
        Some(known[index].clone())
    }

    fn remember_lease(&mut self, p: usize, lease: &ProcessLease) {
        self.known.entry(p).or_default().push(lease.clone());
    }

    /// Checks the touched process against the model: its record and its event count.
    fn check_process(&self, p: usize, context: &str) {
        let stored = self.store.processes().get(PROCESSES[p]).expect("get");
        let model = self.model.processes.get(&p).map(|process| &process.record);
        assert_eq!(stored.as_ref(), model, "{context}: record of {}", PROCESSES[p]);
        let head = self.store.events().head(Stream::process(PROCESSES[p])).expect("head");
        let events = self.model.processes.get(&p).map_or(0, |process| process.events.len());
        assert_eq!(head, events as u64, "{context}: event count of {}", PROCESSES[p]);
        if let Some(first) = self.first_output.get(&p) {
            let status = stored.map(|record| record.status);
            let expected = ProcessStatus::from_output(first.clone());
            assert_eq!(status.as_ref(), Some(&expected), "{context}: kept its first output");
        }
    }

    /// Checks every process in full: record and every event.
    fn check_all(&self, context: &str) {
        for (p, name) in PROCESSES.iter().enumerate() {
            self.check_process(p, context);
            let Some(process) = self.model.processes.get(&p) else {
                let events = self.store.processes().events_after(name, 0);
                assert_refused(context, &events, Refusal::NotFound);
                continue;
            };
            let events = self.store.processes().events_after(name, 0).expect("events");
            assert_eq!(events, process.events, "{context}: events of {name}");
        }
    }

    /// Records a new grant and checks the fencing and single-holder invariants.
    fn new_grant(&mut self, p: usize, lease: &ProcessLease, now_ms: i64, context: &str) {
        let grants = self.grants.entry(p).or_default();
        if let Some(last) = grants.last() {
            assert_eq!(lease.fencing_token, last.fence + 1, "{context}: the next fencing token");
        } else {
            assert_eq!(lease.fencing_token, 1, "{context}: the first fencing token");
        }
        // The grant before it (superseding all before it) is released or lapsed by the
        // store's time (which a reopen may have set back with the clock).
        if let Some(earlier) = grants.last() {
            assert!(
                earlier.released || earlier.end_ms <= now_ms,
                "{context}: fence {} granted while fence {} is live until {}",
                lease.fencing_token,
                earlier.fence,
                earlier.end_ms
            );
        }
        assert!(self.tokens.insert(lease.lease_token.clone()), "{context}: a fresh lease token");
        grants.push(Grant {
            fence: lease.fencing_token,
            token: lease.lease_token.clone(),
            claimed_at_ms: lease.claimed_at_ms,
            end_ms: lease.expires_at_ms,
            released: false,
        });
    }

    /// A renewal or re-entry moved the end of the current grant.
    fn extend_grant(&mut self, p: usize, lease: &ProcessLease, context: &str) {
        let last = self.grants.get_mut(&p).and_then(|grants| grants.last_mut());
        let last = last.unwrap_or_else(|| panic!("{context}: extended a lease never granted"));
        assert_eq!(
            (last.fence, last.token.as_str(), last.claimed_at_ms),
            (lease.fencing_token, lease.lease_token.as_str(), lease.claimed_at_ms),
            "{context}: only the latest grant can be extended"
        );
        last.end_ms = lease.expires_at_ms;
    }

    fn release_grant(&mut self, p: usize, lease: &ProcessLease, now_ms: i64) {
        if let Some(last) = self.grants.get_mut(&p).and_then(|grants| grants.last_mut())
            && last.fence == lease.fencing_token
        {
            last.end_ms = last.end_ms.min(now_ms);
            last.released = true;
        }
    }

    /// Closes and opens the store again (a no-op for a private store).
    fn reopen(&mut self) -> bool {
        if self.shared.is_none() {
            return false;
        }
        self.store.close().expect("close");
        self.store = open(self.shared.as_ref(), &self.clock);
        self.stamp.reopened(self.clock.now_ms());
        true
    }
}

/// Runs one sequence; panics with the seed and step on the first disagreement.
fn run(seed: u64, coverage: &mut Coverage) {
    let mut dice = Dice::new(seed);
    let steps = 1 + dice.below(100) as usize;
    let clock = ManualClock::new(T0);
    let shared = (dice.below(4) == 0).then(SharedStore::in_tmpfs);
    let store = open(shared.as_ref(), &clock);
    let mut h = Harness {
        seed,
        step: 0,
        clock,
        stamp: Stamp::opened(T0),
        shared,
        store,
        model: Model::default(),
        known: BTreeMap::new(),
        grants: BTreeMap::new(),
        key_seqs: BTreeMap::new(),
        tokens: BTreeSet::new(),
        first_output: BTreeMap::new(),
    };
    for step in 0..steps {
        h.step = step;
        step_once(&mut h, &mut dice, coverage);
        // The counts against a recount of the processes, after every step: a call of the
        // store's, whose time is at least the clock's now.
        h.stamp.next(h.clock.now_ms());
        common::assert_process_counts(&h.store, &h.context("counts"));
    }
    let context = h.context("end of sequence");
    h.check_all(&context);
    if h.reopen() {
        coverage.reopens += 1;
        h.check_all(&format!("{context}, reopened"));
    }
    // The next grant of each process still takes the next fencing token.
    for (p, name) in PROCESSES.iter().enumerate() {
        if !h.model.processes.contains_key(&p) {
            continue;
        }
        h.clock.advance_ms(24 * 60 * 60 * 1000 + 1);
        let owner = LeaseOwner::new("final", "1");
        let claim = h.store.processes().claim_lease(name, &owner, 1_000).expect("claim");
        let LeaseClaim::Acquired(lease) = claim else {
            panic!("{context}: every lease has lapsed, yet {claim:?}");
        };
        let last = h.model.leases.get(&p).map_or(0, |row| row.last_fence);
        assert_eq!(lease.fencing_token, last + 1, "{context}: fence after reopen");
    }
    h.store.close().expect("close");
}

/// One random step; whether it called the store.
fn step_once(h: &mut Harness, dice: &mut Dice, coverage: &mut Coverage) -> bool {
    let now_ms = h.stamp.peek(h.clock.now_ms());
    let p = dice.below(PROCESSES.len() as u64) as usize;
    // Registrations are likelier while the process is missing.
    let register_weight = if h.model.processes.contains_key(&p) { 1 } else { 10 };
    match dice.below(24 + register_weight) {
        0..=5 => append(h, dice, p, now_ms, coverage),
        6 => complete_step(h, dice, p, now_ms, coverage),
        7 => wait_step(h, dice, p, now_ms, coverage),
        8 => {
            let context = h.context(&format!("clear_wait {}", PROCESSES[p]));
            let expected = h.model.clear_wait(p, now_ms);
            let actual = h.store.processes().clear_wait(PROCESSES[p]);
            compare(&context, actual, expected, coverage);
            h.check_process(p, &context);
        }
        9..=11 => claim(h, dice, p, now_ms, false, coverage),
        12 => claim(h, dice, p, now_ms, true, coverage),
        13..=14 => return renew_step(h, dice, p, now_ms, coverage),
        15..=16 => return release_step(h, dice, p, now_ms, coverage),
        17..=21 => {
            let delta_ms = ADVANCES[dice.below(ADVANCES.len() as u64) as usize];
            let back = dice.below(6) == 0;
            h.clock.advance_ms(if back { -delta_ms } else { delta_ms });
            coverage.clock_back += u64::from(back);
            return false;
        }
        22 => {
            if dice.below(2) == 0 && h.reopen() {
                coverage.reopens += 1;
                h.check_all(&h.context("reopen"));
            }
            return false;
        }
        _ => register_step(h, dice, p, now_ms, coverage),
    }
    true
}

fn complete_step(h: &mut Harness, dice: &mut Dice, p: usize, now_ms: i64, coverage: &mut Coverage) {
    let output = outputs()[dice.below(4) as usize].clone();
    let context = h.context(&format!("complete {} with {output:?}", PROCESSES[p]));
    let expected = h.model.append(p, &terminal_request(&output), now_ms);
    let actual = h.store.processes().complete(PROCESSES[p], output.clone());
    match expected {
        Ok((event, replayed)) => {
            let record = actual.unwrap_or_else(|e| panic!("{context}: {e}"));
            let model = &h.model.processes[&p];
            assert_eq!(record, model.record, "{context}: the record");
            if !replayed {
                patch_position(h, p, event.seq);
                h.first_output.entry(p).or_insert(output);
                coverage.completions += 1;
            }
        }
        Err(refused) => {
            count_refusal(coverage, refused);
            assert_refused(&context, &actual, refused);
        }
    }
    h.check_process(p, &context);
}

fn wait_step(h: &mut Harness, dice: &mut Dice, p: usize, now_ms: i64, coverage: &mut Coverage) {
    let name = ["go", "stop", "not a name"][dice.below(3) as usize];
    let ordinal = 1 + dice.below(3);
    let wait = WaitKind::Signal {
        name: name.into(),
        event_type: format!("signal.{name}"),
        key: format!("process:{}:signal.{name}:{ordinal}", PROCESSES[p]),
        ordinal,
    };
    let context = h.context(&format!("set_wait {} {name}", PROCESSES[p]));
    let expected = h.model.set_wait(p, &wait, now_ms);
    let actual = h.store.processes().set_wait(PROCESSES[p], wait);
    compare(&context, actual, expected, coverage);
    h.check_process(p, &context);
}

fn renew_step(
    h: &mut Harness,
    dice: &mut Dice,
    p: usize,
    now_ms: i64,
    coverage: &mut Coverage,
) -> bool {
    let Some(lease) = h.pick_lease(dice, p) else { return false };
    let ttl_ms = Harness::ttl(dice);
    let context = h.context(&format!(
        "renew {} fence {} for {ttl_ms} ms at {now_ms}",
        PROCESSES[p], lease.fencing_token
    ));
    let expected = h.model.renew(p, &lease, ttl_ms, now_ms);
    let actual = h.store.processes().renew_lease(&lease, ttl_ms);
    if let (Ok(renewed), Ok(_)) = (&actual, &expected) {
        h.extend_grant(p, renewed, &context);
        h.remember_lease(p, renewed);
        coverage.renewals += 1;
    }
    compare(&context, actual, expected, coverage);
    true
}

fn release_step(
    h: &mut Harness,
    dice: &mut Dice,
    p: usize,
    now_ms: i64,
    coverage: &mut Coverage,
) -> bool {
    let Some(lease) = h.pick_lease(dice, p) else { return false };
    let context = h.context(&format!(
        "complete_lease {} fence {} at {now_ms}",
        PROCESSES[p], lease.fencing_token
    ));
    let expected = h.model.complete_lease(p, &lease);
    let actual = h.store.processes().complete_lease(&lease);
    if let (Ok(()), Ok(())) = (&actual, &expected) {
        h.release_grant(p, &lease, now_ms);
        coverage.releases += 1;
    }
    compare(&context, actual, expected, coverage);
    true
}

fn register_step(h: &mut Harness, dice: &mut Dice, p: usize, now_ms: i64, coverage: &mut Coverage) {
    let variant = u64::from(dice.below(4) == 0);
    let context = h.context(&format!("register {} v{variant}", PROCESSES[p]));
    let expected = h.model.register(p, variant);
    let actual = h.store.processes().register(registration(p, variant));
    match expected {
        Ok(None) => {
            let record = actual.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(
                (record.id.as_str(), &record.status, &record.wait),
                (PROCESSES[p], &ProcessStatus::Running, &None),
                "{context}"
            );
            assert_eq!((record.created_at_ms, record.updated_at_ms), (now_ms, now_ms), "{context}");
            assert_eq!(record.input, json!({ "variant": variant }), "{context}");
            assert_eq!(record.event_types.len(), 7, "{context}: note + 6 defaults");
            let process =
                ModelProcess { variant, record, events: Vec::new(), keys: BTreeMap::new() };
            h.model.processes.insert(p, process);
        }
        Ok(Some(record)) => {
            assert_eq!(actual.expect("register again"), record, "{context}: the first record");
        }
        Err(refused) => {
            count_refusal(coverage, refused);
            assert_refused(&context, &actual, refused);
        }
    }
    h.check_process(p, &context);
}

/// Puts the position the store chose into the model's newest event of `p` (at `seq`).
fn patch_position(h: &mut Harness, p: usize, seq: u64) {
    let stored = h.store.processes().events_after(PROCESSES[p], seq - 1).expect("events");
    let first = stored.first().unwrap_or_else(|| panic!("seed {}: event {seq} is missing", h.seed));
    let model = h.model.processes.get_mut(&p).expect("registered");
    model.events[seq as usize - 1].position = first.position;
}

fn count_refusal(coverage: &mut Coverage, refused: Refusal) {
    match refused {
        Refusal::NotFound => coverage.not_found += 1,
        Refusal::InvalidInput => coverage.invalid_input += 1,
        Refusal::LeaseLost => coverage.lease_lost += 1,
        _ => {}
    }
}

fn compare<T: Debug + PartialEq>(
    context: &str,
    actual: spindle::Result<T>,
    expected: Expect<T>,
    coverage: &mut Coverage,
) {
    match expected {
        Ok(expected) => {
            let actual =
                actual.unwrap_or_else(|e| panic!("{context}: expected {expected:?}, got {e}"));
            assert_eq!(actual, expected, "{context}");
        }
        Err(refused) => {
            count_refusal(coverage, refused);
            assert_refused(context, &actual, refused);
        }
    }
}

fn append(h: &mut Harness, dice: &mut Dice, p: usize, now_ms: i64, coverage: &mut Coverage) {
    let key = (dice.below(4) != 0).then(|| format!("k{}", dice.below(6)));
    let existing = key.as_ref().and_then(|key| {
        let process = h.model.processes.get(&p)?;
        let seq = *process.keys.get(key)?;
        Some(process.events[seq as usize - 1].clone())
    });
    let mut request = match (dice.below(12), existing) {
        // The same content again under a used key.
        (0..=5, Some(existing)) => AppendRequest::new(existing.event_type, existing.payload),
        (0..=6, _) => AppendRequest::new("note", json!({ "n": dice.below(3) })),
        (7, _) => AppendRequest::new("undeclared", json!({})),
        (8, _) => AppendRequest::new("process.cancel_requested", json!({ "reason": "r" })),
        _ => {
            let output = &outputs()[dice.below(4) as usize];
            let terminal = terminal_request(output);
            AppendRequest::new(terminal.event_type, terminal.payload)
        }
    };
    request.replay_key = key;
    let context = h.context(&format!("append {} {request:?}", PROCESSES[p]));
    let expected = h.model.append(p, &request, now_ms);
    let actual = h.store.processes().append_event(PROCESSES[p], request.clone());
    match expected {
        Ok((mut event, replayed)) => {
            let appended = actual.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(appended.replayed, replayed, "{context}: replayed");
            assert!(appended.wake.is_none(), "{context}: no wake without a wake type");
            if !replayed {
                event.position = appended.event.position;
                patch_position(h, p, event.seq);
                coverage.new_events += 1;
                if let Some(terminal) = &event.semantics.terminal {
                    h.first_output.entry(p).or_insert(terminal.await_output.clone());
                }
            } else {
                coverage.replays += 1;
            }
            assert_eq!(appended.event, event, "{context}: the event");
            if let Some(key) = &request.replay_key {
                let first = *h.key_seqs.entry((p, key.clone())).or_insert(event.seq);
                assert_eq!(first, appended.event.seq, "{context}: a replay key keeps its seq");
            }
        }
        Err(refused) => {
            if refused == Refusal::Conflict {
                let keyed = request.replay_key.as_ref().is_some_and(|key| {
                    h.model.processes.get(&p).is_some_and(|process| process.keys.contains_key(key))
                });
                if keyed {
                    coverage.replay_conflicts += 1;
                } else {
                    coverage.terminal_conflicts += 1;
                }
            }
            count_refusal(coverage, refused);
            assert_refused(&context, &actual, refused);
        }
    }
    h.check_process(p, &context);
}

fn claim(
    h: &mut Harness,
    dice: &mut Dice,
    p: usize,
    now_ms: i64,
    reclaim: bool,
    coverage: &mut Coverage,
) {
    let owner = Harness::owner(dice);
    let ttl_ms = Harness::ttl(dice);
    let holder = h.model.leases.get(&p).and_then(|row| row.holder.clone());
    let observed = match (dice.below(3), holder) {
        (0 | 1, Some(holder)) => holder,
        _ => h.pick_lease(dice, p).unwrap_or_else(|| {
            ProcessLease::new(PROCESSES[p], LeaseOwner::new("nobody", "0"), "none", 0, 0, 0)
        }),
    };
    let what = if reclaim { "reclaim" } else { "claim" };
    let context = h.context(&format!(
        "{what} {} by {}/{} for {ttl_ms} ms at {now_ms}",
        PROCESSES[p], owner.owner_id, owner.incarnation_id
    ));
    let lapsed_before = h
        .model
        .leases
        .get(&p)
        .and_then(|row| row.holder.as_ref())
        .is_some_and(|holder| holder.expires_at_ms <= now_ms);
    let expected = h.model.claim(p, &owner, ttl_ms, now_ms, reclaim);
    let actual = if reclaim {
        h.store.processes().reclaim_lease(PROCESSES[p], &owner, &observed, ttl_ms)
    } else {
        h.store.processes().claim_lease(PROCESSES[p], &owner, ttl_ms)
    };
    match expected {
        Ok(ExpectClaim::Granted(expected)) => {
            let claim = actual.unwrap_or_else(|e| panic!("{context}: {e}"));
            let LeaseClaim::Acquired(lease) = claim else {
                panic!("{context}: expected a new grant {expected:?}, got {claim:?}");
            };
            let without_token = lease.clone().lease_token(String::new());
            assert_eq!(without_token, expected, "{context}: the new grant");
            h.new_grant(p, &lease, now_ms, &context);
            h.model.granted(p, lease.clone());
            h.remember_lease(p, &lease);
            coverage.grants += 1;
            coverage.grants_after_expiry += u64::from(lapsed_before);
            coverage.reclaims_granted += u64::from(reclaim);
        }
        Ok(ExpectClaim::Reentered(expected)) => {
            let claim = actual.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(claim, LeaseClaim::Acquired(expected.clone()), "{context}: re-entry");
            h.extend_grant(p, &expected, &context);
            h.remember_lease(p, &expected);
            coverage.reentries += 1;
        }
        Ok(ExpectClaim::Busy(holder)) => {
            let claim = actual.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(claim, LeaseClaim::Busy { holder }, "{context}: busy");
            coverage.busy += 1;
        }
        Err(refused) => {
            count_refusal(coverage, refused);
            assert_refused(&context, &actual, refused);
        }
    }
}

#[test]
fn random_registry_sequences_agree_with_the_model() {
    let mut coverage = Coverage::default();
    if !models::run_cases("PROCESS_MODEL_SEED", |seed| run(seed, &mut coverage)) {
        return;
    }
    let c = &coverage;
    println!("{c:?}");
    models::assert_floors(
        "process registry",
        &[
            ("new events", c.new_events, 8_000),
            ("replays of the same content", c.replays, 1_000),
            ("replay-hash conflicts", c.replay_conflicts, 50),
            ("terminal events on finished processes", c.terminal_conflicts, 50),
            ("completions", c.completions, 300),
            ("grants", c.grants, 2_000),
            ("lease expiries with a new grant (reclaim)", c.grants_after_expiry, 50),
            ("re-entries", c.reentries, 50),
            ("busy", c.busy, 500),
            ("reclaims granted", c.reclaims_granted, 50),
            ("renewals", c.renewals, 500),
            ("releases", c.releases, 300),
            ("stale fences (LeaseLost)", c.lease_lost, 50),
            ("not found", c.not_found, 50),
            ("invalid input", c.invalid_input, 300),
            ("reopens", c.reopens, 50),
            ("clock moves backwards", c.clock_back, 50),
        ],
    );
}
