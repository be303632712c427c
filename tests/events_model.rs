//! Model-based test of the event log (reliability plan T1, event part): seeded random
//! sequences of up to 100 appends (plain and idempotent, with the same or other content under
//! a used key), truncations and reads over a few custom streams of two tenants, with clock
//! moves forwards and backwards and reopens of the store, run against the store and
//! against the plain model in `tests/models/events.rs` (shared with the `ops` fuzz harness).
//! Every answer must agree: sequences dense from 1 and never reused after a truncation, an
//! idempotent append with the same content returns the first event and writes nothing, with
//! other content is `Conflict` and writes nothing, timestamps are the store's (never going
//! back while it is open), positions grow.
//!
//! A quarter of the sequences run on a shared store (a file in a tmpfs on SQLite, a schema of
//! its own on PostgreSQL) and reopen it now and then; the others run on a private one. `SPINDLE_MODEL_CASES` sets the number of sequences (default 2,000);
//! the test fails when the rare paths (replay-hash conflicts, replays, truncations, reopens,
//! clock moves back) were not reached often enough. `EVENTS_MODEL_SEED=<seed>` runs one
//! sequence alone.

mod common;
mod models;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{Dice, SharedStore};
use models::events::{EventsModel, KeyedAppend, plain};
use models::{Refusal, Stamp, compare};
use serde_json::json;
use spindle::{Durability, ManualClock, Options, Store, Stream};

const T0: i64 = 1_700_000_000_000;
const TENANTS: [&str; 2] = ["default", "other"];

#[derive(Debug, Default)]
struct Coverage {
    appends: u64,
    keyed_appends: u64,
    replays: u64,
    replay_conflicts: u64,
    truncated: u64,
    reads: u64,
    reopens: u64,
    clock_back: u64,
}

struct Harness {
    seed: u64,
    step: usize,
    clock: ManualClock,
    stamp: Stamp,
    /// The store of a sequence that reopens it (`None`: a private one, never reopened).
    shared: Option<SharedStore>,
    views: Vec<Store>,
    models: BTreeMap<&'static str, EventsModel>,
    /// The highest position seen, per tenant.
    last_position: BTreeMap<usize, u64>,
}

fn open(shared: Option<&SharedStore>, clock: &ManualClock) -> Vec<Store> {
    let options = Options::default()
        .clock(Arc::new(clock.clone()))
        .durability(Durability::Normal)
        .inline(true);
    let store = match shared {
        Some(shared) => shared.open_with(options),
        None => common::new_store_with(options),
    };
    let other = store.tenant(TENANTS[1]).expect("tenant");
    vec![store, other]
}

impl Harness {
    fn context(&self, op: &str) -> String {
        format!("seed {} step {} ({op})", self.seed, self.step)
    }

    fn now(&mut self) -> i64 {
        self.stamp.next(self.clock.now_ms())
    }

    fn reopen(&mut self) -> bool {
        let Some(shared) = &self.shared else { return false };
        self.views[0].close().expect("close");
        self.views = open(Some(shared), &self.clock);
        self.stamp.reopened(self.clock.now_ms());
        true
    }

    fn append(&mut self, t: usize, stream: &str, dice: &mut Dice, c: &mut Coverage) {
        let payload = json!({ "v": dice.below(3) });
        let now_ms = self.now();
        let context = self.context(&format!("append to {stream} of {}", TENANTS[t]));
        let appended =
            self.views[t].events().append(Stream::custom(stream), "plain", payload.clone());
        let appended = appended.unwrap_or_else(|e| panic!("{context}: {e}"));
        let model = self.models.entry(TENANTS[t]).or_default();
        let seq = model.append(stream, "plain", payload, now_ms);
        assert_eq!((appended.seq, appended.existed), (seq, false), "{context}");
        self.check_position(t, appended.position, &context);
        c.appends += 1;
    }

    fn append_keyed(&mut self, t: usize, stream: &str, dice: &mut Dice, c: &mut Coverage) {
        let key = format!("k{}", dice.below(4));
        let event_type = ["a", "b"][dice.below(2) as usize];
        let payload = json!({ "v": dice.below(2) });
        let now_ms = self.now();
        let context =
            self.context(&format!("append {event_type} {payload} under {key} to {stream}"));
        let got = self.views[t].events().append_idempotent(
            Stream::custom(stream),
            event_type,
            payload.clone(),
            &key,
        );
        let model = self.models.entry(TENANTS[t]).or_default();
        let expected = model.append_idempotent(stream, event_type, payload, &key, now_ms);
        if let (Ok(appended), Ok(KeyedAppend { existed: false, .. })) = (&got, &expected) {
            self.check_position(t, appended.position, &context);
        }
        match &expected {
            Ok(KeyedAppend { existed: true, .. }) => c.replays += 1,
            Ok(_) => c.keyed_appends += 1,
            Err(_) => c.replay_conflicts += 1,
        }
        let got = got.map(|appended| KeyedAppend { seq: appended.seq, existed: appended.existed });
        let refused = compare(&context, got, expected);
        assert!(matches!(refused, None | Some(Refusal::Conflict)), "{context}");
    }

    fn check_position(&mut self, t: usize, position: u64, context: &str) {
        let last = self.last_position.entry(t).or_default();
        assert!(position > *last, "{context}: position {position} after {last}");
        *last = position;
    }

    fn truncate(&mut self, t: usize, stream: &str, dice: &mut Dice, c: &mut Coverage) {
        let model = self.models.entry(TENANTS[t]).or_default();
        let before = dice.below(model.head(stream) + 2);
        let expected = model.truncate(stream, before);
        self.now();
        let context = self.context(&format!("truncate {stream} before {before}"));
        let deleted = self.views[t].events().truncate(Stream::custom(stream), before);
        assert_eq!(deleted.unwrap_or_else(|e| panic!("{context}: {e}")), expected, "{context}");
        c.truncated += expected;
    }

    fn read(&mut self, t: usize, stream: &str, dice: &mut Dice, c: &mut Coverage) {
        let model = self.models.entry(TENANTS[t]).or_default().clone();
        let after = dice.below(model.head(stream) + 1);
        let limit = 1 + dice.below(8) as usize;
        self.now();
        let context = self.context(&format!("read {stream} after {after}"));
        let events = self.views[t].events();
        let read = events.read(Stream::custom(stream), after, limit).expect("read");
        assert_eq!(plain(read), model.read(stream, after, limit), "{context}");
        let head = events.head(Stream::custom(stream)).expect("head");
        assert_eq!(head, model.head(stream), "{context}: head");
        c.reads += 1;
    }

    /// Every stream of both tenants agrees in full.
    fn check_all(&mut self, context: &str) {
        self.now();
        for (t, tenant) in TENANTS.iter().enumerate() {
            let model = self.models.get(tenant).cloned().unwrap_or_default();
            for stream in ["s0", "s1", "s2"] {
                let read = self.views[t].events().read(Stream::custom(stream), 0, 1000);
                let read = read.expect("read");
                assert_eq!(plain(read), model.read(stream, 0, 1000), "{context}: {stream}");
            }
        }
    }
}

fn run(seed: u64, c: &mut Coverage) {
    let mut dice = Dice::new(seed);
    let steps = 1 + dice.below(100) as usize;
    let clock = ManualClock::new(T0);
    let shared = (dice.below(4) == 0).then(SharedStore::in_tmpfs);
    let views = open(shared.as_ref(), &clock);
    let mut h = Harness {
        seed,
        step: 0,
        clock,
        stamp: Stamp::opened(T0),
        shared,
        views,
        models: BTreeMap::new(),
        last_position: BTreeMap::new(),
    };
    for step in 0..steps {
        h.step = step;
        let t = dice.below(2) as usize;
        let stream = format!("s{}", dice.below(3));
        match dice.below(12) {
            0..=2 => h.append(t, &stream, &mut dice, c),
            3..=5 => h.append_keyed(t, &stream, &mut dice, c),
            6 => h.truncate(t, &stream, &mut dice, c),
            7 | 8 => h.read(t, &stream, &mut dice, c),
            9 => {
                if h.reopen() {
                    c.reopens += 1;
                    h.check_all(&h.context("reopened"));
                }
            }
            _ => {
                let delta_ms = [10, 500, 5_000][dice.below(3) as usize];
                let back = dice.below(3) == 0;
                h.clock.advance_ms(if back { -delta_ms } else { delta_ms });
                c.clock_back += u64::from(back);
            }
        }
    }
    h.check_all(&h.context("end of sequence"));
    h.views[0].close().expect("close");
}

#[test]
fn random_event_log_sequences_agree_with_the_model() {
    let mut c = Coverage::default();
    if !models::run_cases("EVENTS_MODEL_SEED", |seed| run(seed, &mut c)) {
        return;
    }
    println!("{c:?}");
    models::assert_floors(
        "event log",
        &[
            ("plain appends", c.appends, 5_000),
            ("new keyed appends", c.keyed_appends, 2_000),
            ("replays of the same content", c.replays, 500),
            ("replay-hash conflicts", c.replay_conflicts, 50),
            ("events truncated", c.truncated, 500),
            ("reads", c.reads, 2_000),
            ("reopens", c.reopens, 50),
            ("clock moves backwards", c.clock_back, 50),
        ],
    );
}
