//! A concurrency stress test of the process registry with a checker (reliability plan T6,
//! registry part, CI size): 8 worker threads contend on 4 processes with a fixed number of
//! calls each: lease claims and reclaims, renewals, releases, restarts that abandon leases,
//! zombie writes with leases they know are stale, and appends under replay keys with
//! deliberate duplicates and conflicting payloads. One more thread moves a shared
//! `ManualClock` in jumps, some past every lease's expiry, paced by the workers' progress.
//!
//! Every acknowledged grant, renewal, release and append is logged; the checker then proves:
//! fencing tokens per process are unique, dense from 1 and increasing in grant order (and in
//! each worker's own order); no two grants of a process overlap in
//! `[claimed_at_ms, expires_at_ms)` unless the later one re-enters the same grant (same token)
//! or the earlier one was released first; every `Busy` answer named an acknowledged grant;
//! every renewal and release that succeeded came from the holder of the latest grant at that
//! moment (stale writes accepted = 0); each process's events are dense `1..=n`, each replay
//! key maps to exactly one seq with one payload, every conflict was for another payload, and
//! the store holds exactly the acknowledged new events.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;

use serde_json::{Value, json};
use spindle::process::{
    AppendRequest, EventType, LeaseClaim, LeaseOwner, ProcessLease, Registration,
};
use spindle::{Durability, Error, ManualClock, Options, Store};

const WORKERS: u64 = 8;
const OPS_PER_WORKER: u64 = 5_000;
const PROCESSES: [&str; 4] = ["p0", "p1", "p2", "p3"];
const KEYS_PER_PROCESS: u64 = 40;
const TTL_MS: i64 = 2_000;
/// The clock moves once per this many worker calls.
const CALLS_PER_TICK: u64 = 16;
/// Every eighth move is past every lease's expiry.
const TICKS: [i64; 8] = [700, 300, 900, 500, 700, 300, 900, 2 * TTL_MS + 1];
const T0: i64 = 1_700_000_000_000;

/// One acknowledged grant (new or re-entered).
#[derive(Debug, Clone)]
struct GrantLog {
    worker: u64,
    p: usize,
    fence: u64,
    token: String,
    owner: (String, String),
    claimed_at_ms: i64,
    expires_at_ms: i64,
    reentry: bool,
}

/// One acknowledged renewal, with the store's time when it ran.
#[derive(Debug, Clone)]
struct RenewLog {
    p: usize,
    fence: u64,
    at_ms: i64,
    expires_at_ms: i64,
}

/// One acknowledged release, with the clock before the call (the store's time was no earlier).
#[derive(Debug, Clone)]
struct ReleaseLog {
    p: usize,
    fence: u64,
    not_before_ms: i64,
}

/// One acknowledged append.
#[derive(Debug, Clone)]
struct AppendLog {
    p: usize,
    key: Option<String>,
    payload: Value,
    seq: u64,
    replayed: bool,
}

/// What one worker saw.
#[derive(Default)]
struct Seen {
    grants: Vec<GrantLog>,
    renewals: Vec<RenewLog>,
    releases: Vec<ReleaseLog>,
    busy_holders: Vec<ProcessLease>,
    appends: Vec<AppendLog>,
    conflicts: Vec<(usize, String, Value)>,
    stale_attempts: u64,
    stale_accepted: Vec<String>,
    lease_lost: u64,
}

/// A small deterministic generator (xorshift64*), seeded per worker.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// A lease the worker no longer holds, and whether it released it itself.
struct Zombie {
    p: usize,
    lease: ProcessLease,
    released: bool,
}

struct Worker {
    id: u64,
    store: Store,
    clock: ManualClock,
    max_fence: Arc<Vec<AtomicU64>>,
    dice: Dice,
    incarnation: u64,
    held: BTreeMap<usize, ProcessLease>,
    zombies: Vec<Zombie>,
    seen: Seen,
}

impl Worker {
    fn owner(&self) -> LeaseOwner {
        LeaseOwner::new(format!("w{}", self.id), format!("run{}", self.incarnation))
    }

    /// The highest fencing token any worker has seen granted for `p` so far.
    fn known_fence(&self, p: usize) -> u64 {
        self.max_fence[p].load(Ordering::SeqCst)
    }

    fn step(&mut self) {
        let p = self.dice.below(PROCESSES.len() as u64) as usize;
        match self.dice.below(40) {
            0..=9 => self.claim(p, false),
            10 => self.claim(p, true),
            11..=15 => self.renew(p),
            16..=18 => self.release(p),
            19..=20 => self.zombie(),
            21 => {
                // A restart: a new incarnation that forgets what the old one held.
                if self.dice.below(4) == 0 {
                    self.incarnation += 1;
                    let held = std::mem::take(&mut self.held);
                    let zombies =
                        held.into_iter().map(|(p, lease)| Zombie { p, lease, released: false });
                    self.zombies.extend(zombies);
                }
            }
            _ => self.append(p),
        }
    }

    fn claim(&mut self, p: usize, reclaim: bool) {
        let owner = self.owner();
        let processes = self.store.processes();
        let claim = if reclaim {
            // Reclaim from whatever this worker last saw, however stale: an opaque claimant
            // never proves a live holder dead, so this only takes lapsed or released leases.
            let observed = self.zombies.last().map(|zombie| zombie.lease.clone());
            let observed = observed.or_else(|| self.held.get(&p).cloned());
            let Some(observed) = observed.filter(|lease| lease.process_id == PROCESSES[p]) else {
                return;
            };
            processes.reclaim_lease(PROCESSES[p], &owner, &observed, TTL_MS)
        } else {
            processes.claim_lease(PROCESSES[p], &owner, TTL_MS)
        };
        match claim.expect("claim") {
            LeaseClaim::Acquired(lease) => {
                let reentry = self.held.get(&p).is_some_and(|held| {
                    held.lease_token == lease.lease_token
                        && held.fencing_token == lease.fencing_token
                });
                self.seen.grants.push(GrantLog {
                    worker: self.id,
                    p,
                    fence: lease.fencing_token,
                    token: lease.lease_token.clone(),
                    owner: (lease.owner.owner_id.clone(), lease.owner.incarnation_id.clone()),
                    claimed_at_ms: lease.claimed_at_ms,
                    expires_at_ms: lease.expires_at_ms,
                    reentry,
                });
                self.max_fence[p].fetch_max(lease.fencing_token, Ordering::SeqCst);
                if let Some(old) = self.held.insert(p, lease)
                    && !reentry
                {
                    self.zombies.push(Zombie { p, lease: old, released: false });
                }
            }
            LeaseClaim::Busy { holder } => {
                assert!(
                    reclaim || !holder.owner.same_incarnation(&owner),
                    "worker {}: busy with its own incarnation's live lease {holder:?}",
                    self.id
                );
                self.seen.busy_holders.push(holder);
            }
            other => panic!("worker {}: a claim answered {other:?}", self.id),
        }
    }

    fn renew(&mut self, p: usize) {
        let Some(lease) = self.held.get(&p).cloned() else { return };
        match self.try_renew(p, &lease, false) {
            Some(renewed) => {
                self.held.insert(p, renewed);
            }
            None => {
                self.held.remove(&p);
                self.zombies.push(Zombie { p, lease, released: false });
            }
        }
    }

    /// Renews `lease`; logs what the store accepted and flags a stale lease it accepted.
    fn try_renew(
        &mut self,
        p: usize,
        lease: &ProcessLease,
        released: bool,
    ) -> Option<ProcessLease> {
        let known_stale = released || self.known_fence(p) > lease.fencing_token;
        self.seen.stale_attempts += u64::from(known_stale);
        match self.store.processes().renew_lease(lease, TTL_MS) {
            Ok(renewed) => {
                if known_stale {
                    self.seen.stale_accepted.push(format!("renew of {lease:?}"));
                }
                self.seen.renewals.push(RenewLog {
                    p,
                    fence: renewed.fencing_token,
                    at_ms: renewed.expires_at_ms - TTL_MS,
                    expires_at_ms: renewed.expires_at_ms,
                });
                Some(renewed)
            }
            Err(Error::LeaseLost(_)) => {
                self.seen.lease_lost += 1;
                None
            }
            Err(other) => panic!("worker {}: renew: {other}", self.id),
        }
    }

    fn release(&mut self, p: usize) {
        let Some(lease) = self.held.remove(&p) else { return };
        let released = self.try_release(p, &lease);
        self.zombies.push(Zombie { p, lease, released });
    }

    /// Releases `lease`; logs what the store accepted and flags a stale lease it accepted.
    fn try_release(&mut self, p: usize, lease: &ProcessLease) -> bool {
        let known_stale = self.known_fence(p) > lease.fencing_token;
        self.seen.stale_attempts += u64::from(known_stale);
        let not_before_ms = self.clock.now_ms();
        match self.store.processes().complete_lease(lease) {
            Ok(()) => {
                if known_stale {
                    self.seen.stale_accepted.push(format!("release of {lease:?}"));
                }
                self.seen.releases.push(ReleaseLog {
                    p,
                    fence: lease.fencing_token,
                    not_before_ms,
                });
                true
            }
            Err(Error::LeaseLost(_)) => {
                self.seen.lease_lost += 1;
                false
            }
            Err(other) => panic!("worker {}: complete_lease: {other}", self.id),
        }
    }

    /// A lease this worker gave up on writes again.
    fn zombie(&mut self) {
        if self.zombies.is_empty() {
            return;
        }
        let index = self.dice.below(self.zombies.len() as u64) as usize;
        let Zombie { p, lease, released } = self.zombies.swap_remove(index);
        if self.dice.below(2) == 0 {
            if let Some(renewed) = self.try_renew(p, &lease, released) {
                // Still the live grant of an old incarnation: it is held again.
                self.zombies.push(Zombie { p, lease: renewed, released: false });
            }
        } else {
            let now_released = self.try_release(p, &lease);
            self.zombies.push(Zombie { p, lease, released: released || now_released });
        }
        if self.zombies.len() > 16 {
            self.zombies.remove(0);
        }
    }

    fn append(&mut self, p: usize) {
        let key_n = self.dice.below(KEYS_PER_PROCESS);
        let (key, payload) = match self.dice.below(10) {
            0 => (None, json!({ "by": self.id, "n": self.dice.below(1_000) })),
            1 | 2 => {
                let payload = json!({ "key": key_n, "by": self.id, "n": self.dice.below(3) });
                (Some(format!("k{key_n}")), payload)
            }
            _ => (Some(format!("k{key_n}")), json!({ "key": key_n })),
        };
        let mut request = AppendRequest::new("note", payload.clone());
        request.replay_key = key.clone();
        match self.store.processes().append_event(PROCESSES[p], request) {
            Ok(appended) => {
                assert_eq!(appended.event.payload, payload, "an acknowledged append's payload");
                self.seen.appends.push(AppendLog {
                    p,
                    key,
                    payload,
                    seq: appended.event.seq,
                    replayed: appended.replayed,
                });
            }
            Err(Error::Conflict(_)) => {
                let key = key.expect("only a replay key conflicts");
                self.seen.conflicts.push((p, key, payload));
            }
            Err(other) => panic!("worker {}: append: {other}", self.id),
        }
    }
}

#[test]
fn eight_contenders_on_four_processes_leases_fenced_and_replay_keys_exact() {
    let clock = ManualClock::new(T0);
    let options = Options::default().clock(Arc::new(clock.clone())).durability(Durability::Normal);
    let dir = tempfile::tempdir().expect("tempdir");
    // A file on SQLite; a schema of its own on PostgreSQL (`SPINDLE_TEST_ENGINE`).
    let store = if common::on_postgres() {
        common::new_store_with(options)
    } else {
        Store::open_with(dir.path().join("stress.db"), options).expect("open")
    };
    for id in PROCESSES {
        let registration =
            Registration::new(id, "stress", json!({ "id": id })).event_type(EventType::new("note"));
        store.processes().register(registration).expect("register");
    }
    let max_fence: Arc<Vec<AtomicU64>> =
        Arc::new(PROCESSES.iter().map(|_| AtomicU64::new(0)).collect());

    let (progress, calls) = mpsc::channel::<()>();
    let ticker = {
        let clock = clock.clone();
        thread::spawn(move || {
            let mut moves = 0_usize;
            for (n, ()) in calls.iter().enumerate() {
                if (n as u64 + 1).is_multiple_of(CALLS_PER_TICK) {
                    clock.advance_ms(TICKS[moves % TICKS.len()]);
                    moves += 1;
                }
            }
            moves
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| {
            let mut worker = Worker {
                id,
                store: store.clone(),
                clock: clock.clone(),
                max_fence: Arc::clone(&max_fence),
                dice: Dice((id + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
                incarnation: 0,
                held: BTreeMap::new(),
                zombies: Vec::new(),
                seen: Seen::default(),
            };
            let progress = progress.clone();
            thread::spawn(move || {
                for _ in 0..OPS_PER_WORKER {
                    worker.step();
                    progress.send(()).expect("the ticker");
                }
                worker.seen
            })
        })
        .collect();
    drop(progress);
    let seen: Vec<Seen> = workers.into_iter().map(|w| w.join().expect("worker")).collect();
    let moves = ticker.join().expect("ticker");
    assert!(moves >= 8 * TICKS.len(), "the clock moved only {moves} times");
    check_leases(&store, &clock, &seen);
    check_events(&store, &seen);
    store.close().expect("close");
}

fn check_leases(store: &Store, clock: &ManualClock, seen: &[Seen]) {
    let grants: Vec<&GrantLog> = seen.iter().flat_map(|s| &s.grants).collect();
    let renewals: Vec<&RenewLog> = seen.iter().flat_map(|s| &s.renewals).collect();
    let releases: Vec<&ReleaseLog> = seen.iter().flat_map(|s| &s.releases).collect();
    for (p, &name) in PROCESSES.iter().enumerate() {
        // One record per fence: the grant, with its re-entries folded in.
        let mut by_fence: BTreeMap<u64, (&GrantLog, i64)> = BTreeMap::new();
        for grant in grants.iter().filter(|g| g.p == p) {
            match by_fence.get_mut(&grant.fence) {
                None => {
                    assert!(
                        !grant.reentry,
                        "{name}: re-entry of fence {} never granted",
                        grant.fence
                    );
                    by_fence.insert(grant.fence, (grant, grant.expires_at_ms));
                }
                Some((first, end)) => {
                    assert!(
                        grant.reentry,
                        "{name}: fencing token {} granted twice: {first:?} and {grant:?}",
                        grant.fence
                    );
                    let same = (&grant.token, &grant.owner, grant.claimed_at_ms)
                        == (&first.token, &first.owner, first.claimed_at_ms);
                    assert!(same, "{name}: a re-entry changed the grant: {first:?} vs {grant:?}");
                    *end = (*end).max(grant.expires_at_ms);
                }
            }
        }
        let fences: Vec<u64> = by_fence.keys().copied().collect();
        let dense: Vec<u64> = (1..=fences.len() as u64).collect();
        assert_eq!(fences, dense, "{name}: fencing tokens are unique and dense from 1");
        // Grant order is the store's order, whose clock never goes back: claimed_at follows
        // the fence.
        let claimed: Vec<i64> = by_fence.values().map(|(g, _)| g.claimed_at_ms).collect();
        assert!(claimed.is_sorted(), "{name}: a later fence was granted at an earlier time");
        for worker in 0..WORKERS {
            let mine: Vec<u64> = grants
                .iter()
                .filter(|g| g.p == p && g.worker == worker && !g.reentry)
                .map(|g| g.fence)
                .collect();
            assert!(mine.is_sorted_by(|a, b| a < b), "{name}: worker {worker} saw fences {mine:?}");
        }
        for renewal in renewals.iter().filter(|r| r.p == p) {
            let entry = by_fence.get_mut(&renewal.fence).expect("a renewed fence was granted");
            entry.1 = entry.1.max(renewal.expires_at_ms);
        }
        let released_from: BTreeMap<u64, i64> =
            releases.iter().filter(|r| r.p == p).fold(BTreeMap::new(), |mut first, r| {
                let at = first.entry(r.fence).or_insert(r.not_before_ms);
                *at = (*at).min(r.not_before_ms);
                first
            });
        // No overlap: a grant starts only once every earlier one has lapsed or been released.
        let grants_in_order: Vec<(u64, i64, i64)> =
            by_fence.iter().map(|(fence, (g, end))| (*fence, g.claimed_at_ms, *end)).collect();
        for (i, &(fence, _, end)) in grants_in_order.iter().enumerate() {
            let gone_at = released_from.get(&fence).map_or(end, |&released| end.min(released));
            for &(later, claimed_at_ms, _) in &grants_in_order[i + 1..] {
                assert!(
                    claimed_at_ms >= gone_at,
                    "{name}: fence {later} granted at {claimed_at_ms} while fence {fence} was \
                     held until {gone_at}"
                );
            }
        }
        // Renewals and releases came from the holder of the latest grant: no later grant
        // happened before them.
        let first_after =
            |fence: u64| by_fence.range(fence + 1..).map(|(_, (g, _))| g.claimed_at_ms).min();
        for renewal in renewals.iter().filter(|r| r.p == p) {
            if let Some(next) = first_after(renewal.fence) {
                assert!(
                    renewal.at_ms <= next,
                    "{name}: fence {} renewed at {} after fence {} was granted at {next}",
                    renewal.fence,
                    renewal.at_ms,
                    renewal.fence + 1
                );
            }
        }
        for release in releases.iter().filter(|r| r.p == p) {
            if let Some(next) = first_after(release.fence) {
                assert!(
                    release.not_before_ms <= next,
                    "{name}: fence {} released at {} or later, after a grant at {next}",
                    release.fence,
                    release.not_before_ms
                );
            }
        }
        // Every busy answer named an acknowledged grant.
        for holder in seen.iter().flat_map(|s| &s.busy_holders).filter(|h| h.process_id == name) {
            let (grant, _) = by_fence.get(&holder.fencing_token).expect("a busy holder's grant");
            let owner = (holder.owner.owner_id.clone(), holder.owner.incarnation_id.clone());
            assert_eq!(
                (&holder.lease_token, &owner, holder.claimed_at_ms),
                (&grant.token, &grant.owner, grant.claimed_at_ms),
                "{name}: a busy holder that was never granted"
            );
        }
        // After every lease has lapsed, the next grant takes the next fencing token.
        clock.advance_ms(2 * TTL_MS);
        let owner = LeaseOwner::new("checker", "1");
        let next = store.processes().claim_lease(name, &owner, TTL_MS).expect("claim");
        let LeaseClaim::Acquired(next) = next else { panic!("{name}: still busy: {next:?}") };
        assert_eq!(next.fencing_token, fences.len() as u64 + 1, "{name}: the next fence");
    }
    let stale: Vec<&String> = seen.iter().flat_map(|s| &s.stale_accepted).collect();
    assert!(stale.is_empty(), "stale lease writes accepted: {stale:?}");
    // The run exercised what it claims to.
    let total = |f: fn(&Seen) -> u64| seen.iter().map(f).sum::<u64>();
    let (attempts, lost) = (total(|s| s.stale_attempts), total(|s| s.lease_lost));
    let busy = total(|s| s.busy_holders.len() as u64);
    let reentries = grants.iter().filter(|g| g.reentry).count();
    let new_grants = grants.len() - reentries;
    println!(
        "stale attempts {attempts}, lease lost {lost}, busy {busy}, re-entries {reentries}, \
         grants {new_grants}, renewals {}, releases {}",
        renewals.len(),
        releases.len()
    );
    assert!(attempts >= 1_000, "only {attempts} writes with leases known to be stale");
    assert!(lost >= 1_000, "only {lost} LeaseLost answers");
    assert!(busy >= 2_000, "only {busy} busy answers");
    assert!(reentries >= 300, "only {reentries} re-entries");
    assert!(new_grants >= 800, "only {new_grants} grants");
    assert!(renewals.len() >= 150, "only {} renewals", renewals.len());
    assert!(releases.len() >= 120, "only {} releases", releases.len());
}

fn check_events(store: &Store, seen: &[Seen]) {
    let appends: Vec<&AppendLog> = seen.iter().flat_map(|s| &s.appends).collect();
    let conflicts: Vec<&(usize, String, Value)> = seen.iter().flat_map(|s| &s.conflicts).collect();
    for (p, &name) in PROCESSES.iter().enumerate() {
        let mut events = Vec::new();
        loop {
            let after = events.last().map_or(0, |e: &spindle::process::ProcessEvent| e.seq);
            let page = store.processes().events_after(name, after).expect("events");
            if page.is_empty() {
                break;
            }
            events.extend(page);
        }
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "{name}: dense from 1");
        let mut stored_keys: BTreeMap<&str, u64> = BTreeMap::new();
        for event in &events {
            if let Some(key) = &event.replay_key {
                let again = stored_keys.insert(key, event.seq);
                assert!(again.is_none(), "{name}: replay key {key} stored twice");
            }
        }
        let mine: Vec<&&AppendLog> = appends.iter().filter(|a| a.p == p).collect();
        let new: Vec<u64> = mine.iter().filter(|a| !a.replayed).map(|a| a.seq).collect();
        let new_set: BTreeSet<u64> = new.iter().copied().collect();
        assert_eq!(new.len(), new_set.len(), "{name}: a seq acknowledged as new twice");
        assert_eq!(new_set.len(), events.len(), "{name}: exactly the acknowledged new events");
        for append in &mine {
            let event = &events[append.seq as usize - 1];
            assert_eq!(
                (&event.payload, &event.replay_key),
                (&append.payload, &append.key),
                "{name}: acknowledged append {append:?}"
            );
            if let Some(key) = &append.key {
                assert_eq!(stored_keys[key.as_str()], append.seq, "{name}: {key} has one seq");
            }
        }
        let mut first_writes: BTreeMap<&str, usize> = BTreeMap::new();
        for append in mine.iter().filter(|a| !a.replayed) {
            if let Some(key) = &append.key {
                *first_writes.entry(key).or_default() += 1;
            }
        }
        assert!(first_writes.values().all(|&n| n == 1), "{name}: a key was written twice");
        for (_, key, payload) in conflicts.iter().filter(|(cp, ..)| *cp == p) {
            let seq = stored_keys.get(key.as_str()).expect("a conflict names a stored key");
            let stored = &events[*seq as usize - 1].payload;
            assert_ne!(stored, payload, "{name}: {key} refused its own payload");
        }
    }
    let replays = appends.iter().filter(|a| a.replayed).count();
    println!("replays {replays}, conflicts {}", conflicts.len());
    assert!(replays >= 3_000, "only {replays} replays");
    assert!(conflicts.len() >= 2_000, "only {} conflicts", conflicts.len());
}
