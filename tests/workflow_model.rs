//! Model-based test of workflows (reliability plan T1, executions part): seeded random
//! sequences of up to 100 calls (definitions put again with the same or other content,
//! executions created, moved through the status machine, their state set with the current or
//! a stale expected version, merge-patched and appended to, caller events appended, snapshots
//! written at any sequence, load and replay, deletion), with clock moves forwards and
//! backwards and reopens of the store, run against the store and against the plain model
//! in `tests/models/workflow.rs` (shared with the `ops` fuzz harness). Every answer must agree
//! down to the error variant; the event stream stays dense from 1 with the lifecycle events in
//! it; a snapshot at k plus the events after k replays to the same state as the model's fold;
//! after every step `count_by_status()` agrees with a recount of the executions by a plain
//! `GROUP BY` (and `audit_counts` finds nothing).
//!
//! A quarter of the sequences run on a shared store (a file in a tmpfs on SQLite, a schema of
//! its own on PostgreSQL) and reopen it now and then; the others run on a private one. `SPINDLE_MODEL_CASES` sets the number of sequences (default 2,000);
//! the test fails when the rare paths (stale versions, snapshot conflicts, moves the status
//! machine refuses, writes to finished executions, deletions, reopens, clock moves back) were
//! not reached often enough. `WORKFLOW_MODEL_SEED=<seed>` runs one sequence alone.

mod common;
mod models;

use std::sync::Arc;

use common::{Dice, SharedStore};
use models::events::plain;
use models::workflow::WorkflowModel;
use models::{Refusal, Stamp, compare};
use serde_json::{Value, json};
use spindle::{
    Durability, Event, Execution, ExecutionFilter, ManualClock, Options, Page, Store,
    WorkflowStatus,
};

const T0: i64 = 1_700_000_000_000;
const STATUSES: [WorkflowStatus; 7] = [
    WorkflowStatus::Pending,
    WorkflowStatus::Running,
    WorkflowStatus::Running,
    WorkflowStatus::Paused,
    WorkflowStatus::Completed,
    WorkflowStatus::Failed,
    WorkflowStatus::Cancelled,
];

#[derive(Debug, Default)]
struct Coverage {
    definitions: u64,
    definition_conflicts: u64,
    executions: u64,
    moves: u64,
    refused_moves: u64,
    state_writes: u64,
    stale_versions: u64,
    finished_refusals: u64,
    invalid_input: u64,
    events: u64,
    snapshots: u64,
    snapshot_conflicts: u64,
    loads_from_snapshot: u64,
    deletes: u64,
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
    store: Store,
    model: WorkflowModel,
    /// Every execution id created, deleted ones too.
    ids: Vec<String>,
}

fn open(shared: Option<&SharedStore>, clock: &ManualClock) -> Store {
    let options = Options::default()
        .clock(Arc::new(clock.clone()))
        .durability(Durability::Normal)
        .inline(true);
    match shared {
        Some(shared) => shared.open_with(options),
        None => common::new_store_with(options),
    }
}

/// The reducer `replay` is checked with: the sequences and types it saw, in order.
fn reduce(mut state: Value, seq: u64, event_type: &str) -> Value {
    if !state.is_object() {
        state = json!({});
    }
    let seen = state.as_object_mut().expect("an object").entry("seen").or_insert(json!([]));
    if let Some(seen) = seen.as_array_mut() {
        seen.push(json!([seq, event_type]));
    }
    state
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
        self.store.close().expect("close");
        self.store = open(Some(shared), &self.clock);
        self.stamp.reopened(self.clock.now_ms());
        true
    }

    /// An execution id: mostly a live one, sometimes a deleted or unknown one.
    fn pick(&self, dice: &mut Dice) -> String {
        let live: Vec<&String> = self.model.executions.keys().collect();
        match dice.below(12) {
            0 => "no-such-execution".into(),
            1 if !self.ids.is_empty() => {
                self.ids[dice.below(self.ids.len() as u64) as usize].clone()
            }
            _ if !live.is_empty() => live[dice.below(live.len() as u64) as usize].clone(),
            _ => "no-such-execution".into(),
        }
    }

    fn put_definition(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let (workflow, version) = (format!("w{}", dice.below(2)), format!("v{}", dice.below(3)));
        let ir = json!({ "steps": dice.below(2) });
        let now_ms = self.now();
        let context = self.context(&format!("put {workflow}@{version} {ir}"));
        let expected = self.model.put_definition(&workflow, &version, &ir, now_ms);
        let got = self.store.workflows().put_definition(&workflow, &version, ir.clone());
        let got = got.map(|d| (d.workflow_id, d.version, d.ir, d.created_at_ms));
        let expected = expected.map(|at| (workflow.clone(), version.clone(), ir, at));
        match compare(&context, got, expected) {
            Some(_) => c.definition_conflicts += 1,
            None => c.definitions += 1,
        }
        let latest = self.store.workflows().latest_definition(&workflow).expect("latest");
        assert_eq!(latest.map(|d| d.version), self.model.latest(&workflow), "{context}: latest");
        let versions = self.store.workflows().versions(&workflow).expect("versions");
        let model_versions = self.model.versions.get(&workflow).cloned().unwrap_or_default();
        assert_eq!(versions, model_versions, "{context}: versions");
    }

    fn create(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let (workflow, version) = (format!("w{}", dice.below(2)), format!("v{}", dice.below(3)));
        let input = json!({ "n": self.step });
        let now_ms = self.now();
        let context = self.context(&format!("create {workflow}@{version}"));
        let got = self.store.workflows().create_execution(&workflow, &version, input.clone());
        if let Err(refused) = self.model.can_create(&workflow, &version) {
            models::assert_refused(&context, &got, refused);
            return;
        }
        let record = got.unwrap_or_else(|e| panic!("{context}: {e}"));
        let expected = WorkflowModel::expected_new(&record.id, &workflow, &version, input, now_ms);
        assert_eq!(record, expected, "{context}");
        self.ids.push(record.id.clone());
        self.model.created(record);
        c.executions += 1;
    }

    fn set_status(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let id = self.pick(dice);
        let current = self.model.executions.get(&id).map(|e| e.record.status);
        let allowed: Vec<WorkflowStatus> =
            STATUSES.into_iter().filter(|s| current.is_some_and(|c| c.can_become(*s))).collect();
        let status = if !allowed.is_empty() && dice.below(3) != 0 {
            allowed[dice.below(allowed.len() as u64) as usize]
        } else {
            STATUSES[dice.below(STATUSES.len() as u64) as usize]
        };
        let now_ms = self.now();
        let context = self.context(&format!("set_status {id} {status:?}"));
        let expected = self.model.set_status(&id, status, now_ms);
        match compare(&context, self.store.workflows().set_status(&id, status), expected) {
            Some(Refusal::Conflict) => c.refused_moves += 1,
            Some(_) => {}
            None => c.moves += 1,
        }
    }

    fn write_state(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let id = self.pick(dice);
        let now_ms = self.now();
        let version = self.model.executions.get(&id).map_or(0, |e| e.record.state_version);
        let (what, got, expected) = match dice.below(4) {
            0 | 1 => {
                let stale = dice.below(3) == 0;
                let expected_version = if stale { version + 1 + dice.below(2) } else { version };
                let expected_version = if stale && version > 0 && dice.below(2) == 0 {
                    version - 1
                } else {
                    expected_version
                };
                let state = json!({ "set": self.step });
                let got = self.store.workflows().set_state(&id, expected_version, state.clone());
                let expected = self.model.set_state(&id, expected_version, state, now_ms);
                let stale = expected_version != version && self.model.executions.contains_key(&id);
                c.stale_versions += u64::from(stale);
                (format!("set_state {id} at {expected_version}"), got, expected)
            }
            2 => {
                let patch = match dice.below(10) {
                    0..=3 => json!({ "a": self.step }),
                    4 | 5 => json!({ "a": null }),
                    6..=8 => json!({ "b": { "c": dice.below(3) } }),
                    _ => json!([1]),
                };
                let got = self.store.workflows().patch_state(&id, patch.clone());
                let expected = self.model.patch_state(&id, &patch, now_ms);
                (format!("patch_state {id} {patch}"), got, expected)
            }
            _ => {
                let key = ["log", "a"][dice.below(2) as usize];
                let got = self.store.workflows().append_to_array(&id, key, json!(self.step));
                let expected = self.model.append_to_array(&id, key, json!(self.step), now_ms);
                (format!("append_to_array {id} {key}"), got, expected)
            }
        };
        let context = self.context(&what);
        match compare(&context, got, expected) {
            Some(Refusal::Conflict) => c.finished_refusals += 1,
            Some(Refusal::InvalidInput) => c.invalid_input += 1,
            Some(_) => {}
            None => c.state_writes += 1,
        }
    }

    fn append_event(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let id = self.pick(dice);
        let event_type = ["note", "note", "other", "workflow.fake"][dice.below(4) as usize];
        let payload = json!({ "i": dice.below(3) });
        let now_ms = self.now();
        let context = self.context(&format!("append_event {id} {event_type}"));
        let expected = self.model.append_event(&id, event_type, payload.clone(), now_ms);
        let got = self.store.workflows().append_event(&id, event_type, payload);
        let got = got.map(|appended| {
            assert!(!appended.existed, "{context}");
            appended.seq
        });
        match compare(&context, got, expected) {
            None => c.events += 1,
            Some(Refusal::InvalidInput) => c.invalid_input += 1,
            Some(_) => c.finished_refusals += 1,
        }
    }

    fn snapshot(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let id = self.pick(dice);
        let execution = self.model.executions.get(&id);
        let head = execution.map_or(0, |e| e.events.len() as u64);
        let taken: Vec<u64> =
            execution.map(|e| e.snapshots.keys().copied().collect()).unwrap_or_default();
        let at_seq = if !taken.is_empty() && dice.below(2) == 0 {
            taken[dice.below(taken.len() as u64) as usize]
        } else {
            dice.below(head + 2)
        };
        let state = json!({ "snap": dice.below(2) });
        let now_ms = self.now();
        let context = self.context(&format!("write_snapshot {id} at {at_seq} {state}"));
        let expected = self.model.write_snapshot(&id, at_seq, state.clone(), now_ms);
        let got = self.store.workflows().write_snapshot(&id, at_seq, state);
        let got = got.map(|s| {
            assert_eq!((s.execution_id.as_str(), s.at_seq), (id.as_str(), at_seq), "{context}");
            (s.state, s.created_at_ms)
        });
        match compare(&context, got, expected) {
            None => c.snapshots += 1,
            Some(Refusal::Conflict) => c.snapshot_conflicts += 1,
            Some(_) => c.invalid_input += 1,
        }
    }

    /// `load`, `replay`, `latest_snapshot`, `events` and `execution` against the model.
    fn read(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let id = self.pick(dice);
        self.now();
        let context = self.context(&format!("load {id}"));
        let workflows = self.store.workflows();
        let snapshot = self.model.latest_snapshot(&id);
        let got =
            workflows.latest_snapshot(&id).map(|s| s.map(|s| (s.at_seq, s.state, s.created_at_ms)));
        if compare(&context, got, snapshot.clone()).is_some() {
            assert_eq!(workflows.execution(&id).expect("execution"), None, "{context}");
            return;
        }
        let model = &self.model.executions[&id];
        let loaded = workflows.load(&id).expect("load");
        assert_eq!(loaded.execution, model.record, "{context}: execution");
        assert_eq!(plain(loaded.events), self.model.load_events(&id).expect("events"), "{context}");
        let all = workflows.events(&id, 0).expect("events");
        assert_eq!(plain(all), model.events, "{context}: every event");
        let snapshot = snapshot.expect("checked");
        c.loads_from_snapshot += u64::from(snapshot.is_some());
        let replayed = workflows
            .replay(&id, json!({}), |state, e: &Event| reduce(state, e.seq, &e.event_type));
        let init = snapshot.map_or(json!({}), |(_, state, _)| state);
        let folded = self
            .model
            .load_events(&id)
            .expect("events")
            .iter()
            .fold(init, |s, e| reduce(s, e.0, &e.1));
        assert_eq!(replayed.expect("replay"), folded, "{context}: replay");
    }

    fn delete(&mut self, dice: &mut Dice, c: &mut Coverage) {
        let id = self.pick(dice);
        self.now();
        let context = self.context(&format!("delete {id}"));
        let existed = self.model.delete(&id);
        assert_eq!(
            self.store.workflows().delete_execution(&id).expect("delete"),
            existed,
            "{context}"
        );
        c.deletes += u64::from(existed);
        let head = self.store.events().head(spindle::Stream::execution(&id)).expect("head");
        assert_eq!(head, 0, "{context}: the stream went with it");
    }

    /// Every execution agrees, and the listing holds exactly the live ones.
    fn check_all(&mut self, context: &str) {
        self.now();
        let listed =
            self.store.workflows().list_executions(ExecutionFilter::default(), Page::first(1_000));
        let mut listed: Vec<Execution> = listed.expect("list");
        listed.sort_by(|a, b| a.id.cmp(&b.id));
        let model: Vec<&Execution> = self.model.executions.values().map(|e| &e.record).collect();
        assert_eq!(listed.iter().collect::<Vec<_>>(), model, "{context}: executions");
    }
}

fn run(seed: u64, c: &mut Coverage) {
    let mut dice = Dice::new(seed);
    let steps = 1 + dice.below(100) as usize;
    let clock = ManualClock::new(T0);
    let shared = (dice.below(4) == 0).then(SharedStore::in_tmpfs);
    let store = open(shared.as_ref(), &clock);
    let stamp = Stamp::opened(T0);
    let model = WorkflowModel::default();
    let mut h = Harness { seed, step: 0, clock, stamp, shared, store, model, ids: Vec::new() };
    for step in 0..steps {
        h.step = step;
        match dice.below(20) {
            0 | 1 => h.put_definition(&mut dice, c),
            2 | 3 => h.create(&mut dice, c),
            4..=6 => h.set_status(&mut dice, c),
            7..=9 => h.write_state(&mut dice, c),
            10 | 11 => h.append_event(&mut dice, c),
            12 => h.snapshot(&mut dice, c),
            13 | 14 => h.read(&mut dice, c),
            15 => h.delete(&mut dice, c),
            16 => {
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
        // The counts against a recount of the executions, after every step: a call of the
        // store's, whose time is at least the clock's now.
        h.stamp.next(h.clock.now_ms());
        common::assert_workflow_counts(&h.store, &h.context("counts"));
    }
    h.check_all(&h.context("end of sequence"));
    h.store.close().expect("close");
}

#[test]
fn random_workflow_sequences_agree_with_the_model() {
    let mut c = Coverage::default();
    if !models::run_cases("WORKFLOW_MODEL_SEED", |seed| run(seed, &mut c)) {
        return;
    }
    println!("{c:?}");
    models::assert_floors(
        "workflows",
        &[
            ("definitions", c.definitions, 2_000),
            ("definition conflicts", c.definition_conflicts, 50),
            ("executions", c.executions, 2_000),
            ("status moves", c.moves, 2_000),
            ("refused status moves", c.refused_moves, 500),
            ("state writes", c.state_writes, 2_000),
            ("stale expected versions", c.stale_versions, 50),
            ("writes to finished executions", c.finished_refusals, 50),
            ("invalid input", c.invalid_input, 50),
            ("events", c.events, 1_000),
            ("snapshots", c.snapshots, 500),
            ("snapshot conflicts", c.snapshot_conflicts, 50),
            ("loads from a snapshot", c.loads_from_snapshot, 50),
            ("deletes", c.deletes, 50),
            ("reopens", c.reopens, 50),
            ("clock moves backwards", c.clock_back, 50),
        ],
    );
}
