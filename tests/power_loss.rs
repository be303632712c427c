//! Simulated power loss (reliability plan T3): the store runs on a crash VFS held in memory
//! (`power_loss/vfs.rs`) that keeps, per file, the last synced image and the writes since; at
//! a random write, truncation or sync the power goes, and each file keeps its synced image plus
//! a random prefix of its later writes, the next one perhaps torn. The store that saw the cut
//! is dropped, the machine "reboots", and the files are checked:
//!
//! - always: `PRAGMA integrity_check` is `ok`, no foreign key dangles, every stream is dense
//!   from 1, the two halves of every paired transaction (the one in flight included) are both
//!   there or both gone, and the store opens and takes a write;
//! - under `Durability::Full`: every acknowledged effect is there (appends, keyed appends whose
//!   keys still deduplicate, enqueues, claims with at least their acknowledged fence,
//!   completions, workflow state versions);
//! - under `Durability::Normal`: the acknowledged effects still there are a prefix of those
//!   acknowledged (what was lost is a suffix of the commits).
//!
//! Each workload (seeded: appends, keyed appends and their replays, paired appends in one
//! transaction, enqueues, claims, completions, workflow array pushes) first runs once without a
//! cut to count its I/O; then it is cut at random I/O numbers: three in four among the
//! operations (the store's open included), the rest anywhere up to the end of the close's
//! checkpoint, or after everything. One case in five cuts the power a second time while the
//! rebooted store recovers (opens and closes, checkpointing), before the checks.
//! `SPINDLE_POWER_CUTS` raises the number of cuts per durability (default 1,000). A failure
//! names the workload seed, the I/O numbers and the cut seed: enough to replay it.

mod common;
#[path = "power_loss/vfs.rs"]
mod vfs;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use common::Dice;
use serde_json::{Value, json};
use spindle::queue::{ItemStatus, NewItem};
use spindle::{Durability, Error, ManualClock, Options, Store, Stream, TxOutcome};
use vfs::CrashVfs;

/// The database's name inside the VFS (no file on disk is touched).
const PATH: &str = "/power-loss/store.db";
const T0: i64 = 1_700_000_000_000;
const STREAMS: u64 = 3;
/// Operations per workload.
const OPS: u64 = 24;
/// Cuts per workload run; the workloads are as many as the cuts need.
const CUTS_PER_WORKLOAD: u64 = 20;
const QUEUE: &str = "jobs";
const WAL_BYTES_MAX: u64 = 48 * 1024;

/// One acknowledged effect, in acknowledgement order.
#[derive(Debug, Clone)]
enum Ack {
    Append { stream: u64, seq: u64, op: u64 },
    Keyed { stream: u64, seq: u64, op: u64, key: String },
    Pair { seqs: (u64, u64), op: u64 },
    Enqueue { id: String },
    Claim { id: String, fence: u64 },
    Complete { id: String },
    Push { version: u64 },
}

/// The store every cut starts from: one execution created, everything synced.
struct Base {
    files: HashMap<String, Vec<u8>>,
    execution: String,
}

fn cuts() -> u64 {
    std::env::var("SPINDLE_POWER_CUTS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000)
}

fn options(vfs: &CrashVfs, durability: Durability) -> Options {
    Options::default()
        .durability(durability)
        .clock(Arc::new(ManualClock::new(T0)))
        .vfs(vfs.name())
        // Small, so that the actor's own checkpoints (and their truncations) fall among the
        // cut points too, not only the one at close.
        .wal_bytes_max(WAL_BYTES_MAX)
}

fn stream(n: u64) -> Stream {
    Stream::custom(format!("power-{n}"))
}

fn pair_streams() -> (Stream, Stream) {
    (Stream::custom("pair-a"), Stream::custom("pair-b"))
}

#[test]
fn full_durability_loses_no_acknowledged_write_at_any_power_cut() {
    cut_many("power-full", Durability::Full);
}

#[test]
fn normal_durability_loses_only_a_suffix_of_the_commits_at_a_power_cut() {
    cut_many("power-normal", Durability::Normal);
}

/// Runs `cuts()` power cuts under `durability`; asserts that the cuts fell at many different
/// moments and that some lost work (the test can fail) and some kept it.
fn cut_many(name: &str, durability: Durability) {
    let vfs = CrashVfs::register(name);
    let base = base(vfs);
    let (mut done, mut workload) = (0, 0);
    let mut stats = Stats::default();
    while done < cuts() {
        let (work, total) = dry_run(vfs, &base, durability, workload);
        let mut dice = Dice::new(workload * 7_919 + 13);
        for i in 0..CUTS_PER_WORKLOAD.min(cuts() - done) {
            // Three in four cuts fall among the operations, the rest anywhere (the close's
            // checkpoint makes many writes, and would take most cuts otherwise).
            let span = if i % 4 == 3 { total } else { work };
            let at = 1 + dice.below(span + 1);
            let cut_seed = dice.next();
            // One time in five the power goes again while the store recovers.
            let again = (i % 5 == 1).then(|| 1 + dice.below(12));
            let case = Case { durability, workload, at, cut_seed, again };
            stats.add(&cut_once(vfs, &base, &case));
            done += 1;
        }
        workload += 1;
    }
    let damage = vfs.damage();
    eprintln!("{name}: {done} cuts over {workload} workloads: {stats:?}, {damage:?}");
    assert!(damage.dropped > 0 && damage.torn > 0 && damage.garbage > 0, "{damage:?}");
    assert!(stats.before_any_ack > 0 && stats.after_an_ack > 0, "{stats:?}");
    assert!(stats.acks_kept > 0 && stats.recovery_cuts > 0, "{stats:?}");
    if durability == Durability::Normal {
        assert!(stats.acks_lost > 0, "a power cut under Normal never lost a commit: {stats:?}");
    }
}

#[derive(Debug, Default)]
struct Stats {
    /// Cuts before the store acknowledged anything (in its open, or the first op).
    before_any_ack: u64,
    after_an_ack: u64,
    /// Second cuts that fell inside the recovery.
    recovery_cuts: u64,
    acks_kept: u64,
    acks_lost: u64,
}

impl Stats {
    fn add(&mut self, outcome: &Outcome) {
        if outcome.kept + outcome.lost == 0 {
            self.before_any_ack += 1;
        } else {
            self.after_an_ack += 1;
        }
        self.recovery_cuts += u64::from(outcome.recovery_cut);
        self.acks_kept += outcome.kept;
        self.acks_lost += outcome.lost;
    }
}

/// One cut: which workload, where, and how the unsynced writes fare.
#[derive(Debug, Clone, Copy)]
struct Case {
    durability: Durability,
    workload: u64,
    at: u64,
    cut_seed: u64,
    /// A second cut, during the recovery after the first (its I/O number there).
    again: Option<u64>,
}

struct Outcome {
    recovery_cut: bool,
    kept: u64,
    lost: u64,
}

/// Creates the base store through the VFS and closes it cleanly.
fn base(vfs: &CrashVfs) -> Base {
    vfs.reset(&HashMap::new());
    let store = Store::open_with(PATH, options(vfs, Durability::Full)).expect("create");
    store.workflows().put_definition("power", "v1", json!({})).expect("definition");
    let execution = store.workflows().create_execution("power", "v1", json!({})).expect("run").id;
    store.close().expect("close");
    Base { files: vfs.files(), execution }
}

/// Runs workload `workload` without a cut; returns how many writes, truncations and syncs it
/// made before its close (the store's open included) and in all.
fn dry_run(vfs: &CrashVfs, base: &Base, durability: Durability, workload: u64) -> (u64, u64) {
    vfs.reset(&base.files);
    let store = Store::open_with(PATH, options(vfs, durability)).expect("open");
    let (_, whole) = Workload::new(&store, &base.execution, workload).run();
    assert!(whole, "workload {workload} runs whole without a cut");
    let work = vfs.io_count();
    store.close().expect("close");
    (work, vfs.io_count())
}

fn cut_once(vfs: &CrashVfs, base: &Base, case: &Case) -> Outcome {
    vfs.reset(&base.files);
    vfs.arm(case.at, case.cut_seed);
    let acks = match Store::open_with(PATH, options(vfs, case.durability)) {
        Ok(store) => {
            let (acks, _) = Workload::new(&store, &base.execution, case.workload).run();
            // The close checkpoints and truncates the WAL: the cut may fall there too.
            let _ = store.close();
            acks
        }
        Err(_) => Vec::new(),
    };
    vfs.cut_now();
    vfs.reboot();
    let mut recovery_cut = false;
    if let Some(at) = case.again {
        vfs.arm(at, case.cut_seed.rotate_left(17));
        if let Ok(store) = Store::open_with(PATH, options(vfs, case.durability)) {
            let _ = store.close();
        }
        recovery_cut = vfs.is_cut();
        vfs.cut_now();
        vfs.reboot();
    }
    check_file(vfs, case);
    let store = Store::open_with(PATH, options(vfs, Durability::Full))
        .unwrap_or_else(|e| panic!("{case:?}: the store does not open after the cut: {e}"));
    check_atomic_pairs(&store, case);
    let present: Vec<bool> = acks.iter().map(|ack| is_present(&store, base, ack, case)).collect();
    check_present(&present, &acks, case);
    check_keys_deduplicate(&store, &acks, &present, case);
    store.events().append(stream(0), "after", json!(null)).expect("a write after the reboot");
    store.close().expect("close after the reboot");
    let kept = present.iter().filter(|p| **p).count() as u64;
    Outcome { kept, lost: present.len() as u64 - kept, recovery_cut }
}

/// SQLite's own checks on the file as the cut left it.
fn check_file(vfs: &CrashVfs, case: &Case) {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE;
    let conn = rusqlite::Connection::open_with_flags_and_vfs(PATH, flags, vfs.name())
        .unwrap_or_else(|e| panic!("{case:?}: open raw: {e}"));
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{case:?}: integrity_check failed: {e}"));
    assert_eq!(integrity, "ok", "{case:?}");
    let mut statement = conn.prepare("PRAGMA foreign_key_check").expect("foreign_key_check");
    let dangling = statement.query_map([], |r| r.get::<_, String>(0)).expect("query").count();
    assert_eq!(dangling, 0, "{case:?}: dangling foreign keys");
}

/// Both halves of every paired transaction, or neither; every stream dense from 1.
fn check_atomic_pairs(store: &Store, case: &Case) {
    let (a, b) = pair_streams();
    let halves = |s: &Stream| -> BTreeSet<u64> {
        let events = common::read_stream(store, s);
        common::assert_dense(&events);
        events.iter().filter_map(|e| e.payload["pair"].as_u64()).collect()
    };
    assert_eq!(halves(&a), halves(&b), "{case:?}: a transaction was split by the cut");
    for n in 0..STREAMS {
        common::assert_dense(&common::read_stream(store, &stream(n)));
    }
}

fn check_present(present: &[bool], acks: &[Ack], case: &Case) {
    match case.durability {
        Durability::Full => {
            for (ack, present) in acks.iter().zip(present) {
                assert!(present, "{case:?}: acknowledged under Full, lost at the cut: {ack:?}");
            }
        }
        Durability::Normal => {
            let kept = present.iter().take_while(|p| **p).count();
            if let Some(hole) = present[kept..].iter().position(|p| *p) {
                panic!(
                    "{case:?}: not a prefix: ack {kept} ({:?}) lost but ack {} ({:?}) kept",
                    acks[kept],
                    kept + hole,
                    acks[kept + hole]
                );
            }
        }
        other => panic!("{case:?}: no rule for {other:?}"),
    }
}

/// Every kept keyed append, appended again under its key: the same seq, nothing written.
fn check_keys_deduplicate(store: &Store, acks: &[Ack], present: &[bool], case: &Case) {
    for (ack, _) in acks.iter().zip(present).filter(|(_, p)| **p) {
        if let Ack::Keyed { stream: n, seq, op, key } = ack {
            let again = store
                .events()
                .append_idempotent(stream(*n), "keyed", json!({ "op": op }), key)
                .expect("append the key again");
            assert!(again.existed && again.seq == *seq, "{case:?}: key {key} after the cut");
        }
    }
}

/// Whether the effect of `ack` is in the rebooted store.
fn is_present(store: &Store, base: &Base, ack: &Ack, case: &Case) -> bool {
    let item = |id: &str| match store.queue().get(id) {
        Ok(item) => Some(item),
        Err(Error::NotFound { .. }) => None,
        Err(e) => panic!("{case:?}: get {id}: {e}"),
    };
    match ack {
        Ack::Append { stream: n, seq, op } | Ack::Keyed { stream: n, seq, op, .. } => {
            event_present(store, &stream(*n), *seq, &json!({ "op": op }), case)
        }
        Ack::Pair { seqs, op } => {
            let payload = json!({ "pair": op });
            event_present(store, &pair_streams().0, seqs.0, &payload, case)
                && event_present(store, &pair_streams().1, seqs.1, &payload, case)
        }
        Ack::Enqueue { id } => item(id).is_some(),
        Ack::Claim { id, fence } => item(id).is_some_and(|item| item.fence >= *fence),
        Ack::Complete { id } => item(id).is_some_and(|item| item.status == ItemStatus::Completed),
        Ack::Push { version } => {
            let execution = store.workflows().execution(&base.execution).expect("get");
            let execution = execution.expect("the base execution");
            let steps = execution.state["steps"].as_array().map_or(0, Vec::len) as u64;
            assert_eq!(steps, execution.state_version, "{case:?}: one version per push");
            execution.state_version >= *version
        }
    }
}

/// Whether event `seq` of `s` is there; if it is, it must be the acknowledged one.
fn event_present(store: &Store, s: &Stream, seq: u64, payload: &Value, case: &Case) -> bool {
    let page = store.events().read(s, seq - 1, 1).expect("read");
    let Some(event) = page.first() else { return false };
    assert_eq!(&event.payload, payload, "{case:?}: {s:?} seq {seq} holds another event");
    true
}

/// A seeded sequence of operations over one store, stopping at the first error (the cut).
struct Workload<'a> {
    store: &'a Store,
    execution: &'a str,
    dice: Dice,
    acks: Vec<Ack>,
    pending: Vec<String>,
    claimed: Vec<(String, u64)>,
    keys: Vec<Ack>,
    pushes: u64,
}

impl<'a> Workload<'a> {
    fn new(store: &'a Store, execution: &'a str, seed: u64) -> Self {
        Workload {
            store,
            execution,
            dice: Dice::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) + 1),
            acks: Vec::new(),
            pending: Vec::new(),
            claimed: Vec::new(),
            keys: Vec::new(),
            pushes: 0,
        }
    }

    /// Runs the operations until the first error; the acknowledged effects, and whether every
    /// operation ran.
    fn run(mut self) -> (Vec<Ack>, bool) {
        for op in 0..OPS {
            match self.step(op) {
                Ok(Some(ack)) => self.acks.push(ack),
                Ok(None) => {}
                Err(_) => return (self.acks, false),
            }
        }
        (self.acks, true)
    }

    /// One operation; its acknowledged effect (None for a replay, which writes nothing).
    fn step(&mut self, op: u64) -> spindle::Result<Option<Ack>> {
        let n = self.dice.below(STREAMS);
        let ack = match self.dice.below(8) {
            0 | 1 => {
                let seq = self.store.events().append(stream(n), "plain", json!({ "op": op }))?.seq;
                Ack::Append { stream: n, seq, op }
            }
            2 => return self.keyed(n, op),
            3 => self.pair(op)?,
            4 => {
                let item = NewItem::new(QUEUE, json!({ "op": op }));
                let id = self.store.queue().enqueue(item)?.id;
                self.pending.push(id.clone());
                Ack::Enqueue { id }
            }
            5 => return self.claim(),
            6 => return self.complete(),
            _ => {
                self.store.workflows().append_to_array(self.execution, "steps", json!(op))?;
                self.pushes += 1;
                Ack::Push { version: self.pushes }
            }
        };
        Ok(Some(ack))
    }

    /// A keyed append under a new key, or (every third time) an old key again.
    fn keyed(&mut self, n: u64, op: u64) -> spindle::Result<Option<Ack>> {
        if op.is_multiple_of(3)
            && let Some(Ack::Keyed { stream: n, seq, op, key }) = self.keys.last().cloned()
        {
            let again = self.store.events().append_idempotent(
                stream(n),
                "keyed",
                json!({ "op": op }),
                &key,
            )?;
            assert!(again.existed && again.seq == seq, "a replay returns the first append");
            return Ok(None);
        }
        let key = format!("key-{op}");
        let appended =
            self.store.events().append_idempotent(stream(n), "keyed", json!({ "op": op }), &key)?;
        let ack = Ack::Keyed { stream: n, seq: appended.seq, op, key };
        self.keys.push(ack.clone());
        Ok(Some(ack))
    }

    /// Two appends in one transaction.
    fn pair(&mut self, op: u64) -> spindle::Result<Ack> {
        let seqs = self.store.transaction(move |tx| {
            let (a, b) = pair_streams();
            let first = tx.append_event(&a, "pair", json!({ "pair": op }))?.seq;
            let second = tx.append_event(&b, "pair", json!({ "pair": op }))?.seq;
            Ok(TxOutcome::Commit((first, second)))
        })?;
        Ok(Ack::Pair { seqs, op })
    }

    fn claim(&mut self) -> spindle::Result<Option<Ack>> {
        let Some(claimed) = self.store.queue().claim("worker", &[QUEUE], 3_600_000)? else {
            return Ok(None);
        };
        self.pending.retain(|id| *id != claimed.item.id);
        self.claimed.push((claimed.item.id.clone(), claimed.fence));
        Ok(Some(Ack::Claim { id: claimed.item.id, fence: claimed.fence }))
    }

    fn complete(&mut self) -> spindle::Result<Option<Ack>> {
        let Some((id, fence)) = self.claimed.pop() else { return Ok(None) };
        self.store.queue().complete(&id, fence, json!("done"))?;
        Ok(Some(Ack::Complete { id }))
    }
}
