//! The `ops` fuzz harness: an arbitrary sequence (up to 200 steps) of public operations over
//! every domain, interleaved with clock moves (backwards too), rolled-back transaction closures
//! and reopens, checked after every step against the plain-Rust models of `tests/models/`
//! (shared with the model tests) and against invariants the models do not state.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/ops.rs`) and by the test that replays
//! the seed corpus on stable (`tests/ops_corpus.rs`), so it uses only `spindle`, `serde_json`
//! and std. [`run`] panics when the store and the model disagree or an invariant breaks.
//!
//! Input, decoded by hand: the first byte is flags ([`ON_FILE`]: the store lives in a file in a
//! tmpfs, so that reopen steps close and open it; otherwise in memory and reopen steps do
//! nothing). Then each step takes [`STEP_BYTES`] bytes: an opcode byte (modulo 26: see
//! `Harness::run_step`) and the argument bytes its operation reads, in order (a missing byte
//! reads as 0, unread ones are ignored, so a mutation stays within its step); at most
//! [`STEPS_MAX`] steps.
//!
//! Two tenants (`default`, the owner's, and `t1`, created at the start) each have their own
//! models: event log (custom streams, idempotent appends), queue (claims, heartbeats,
//! completions, failures, expiries, dead letters), workflows, processes (registrations,
//! events with replay keys, leases with fences), graphs (built, started, grown while running,
//! nodes finished in any order). `t1` can be suspended (its writes are `TenantSuspended`),
//! and gets API tokens (reader, writer, admin; expiring or not; revoked) whose views must be
//! authenticated, or refused, exactly as the model says.
//!
//! Invariants checked beside the models: a custom stream's sequence is dense up to its head;
//! a queue item's fence strictly increases at every claim and no item is completed twice; a
//! process's fencing token grows by one per grant, across reopens too; every graph is audited
//! clean after each graph step, and its running nodes are ready again after a reopen; a call
//! refused with a typed error writes nothing, and neither does a transaction closure that
//! returns `TxOutcome::Rollback` (the content of every table of the store is fingerprinted
//! before and after).

#[path = "../../tests/models/mod.rs"]
mod models;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use models::events::{EventsModel, KeyedAppend, plain};
use models::graph::GraphModel;
use models::process::{self, ExpectClaim, PROCESSES};
use models::queue::QueueModel;
use models::workflow::WorkflowModel;
use models::{Expect, Refusal, Scratch, Stamp, compare};
use serde_json::json;
use spindle::process::{LeaseClaim, LeaseOwner, ProcessEvent, ProcessLease};
use spindle::{
    Durability, FailOutcome, GraphStatus, JoinType, ManualClock, NewItem, NodeOptions, NodeOutput,
    NodeSpec, NodeStatus, Options, Role, Store, Stream, TenantStatus, TenantUpdate, Token,
    TxOutcome, WorkflowStatus,
};

/// Flag bit: the store lives in a file, and reopen steps close and open it.
pub const ON_FILE: u8 = 1;
/// Most steps of one input.
pub const STEPS_MAX: usize = 200;

const T0: i64 = 1_700_000_000_000;
const TENANTS: [&str; 2] = ["default", "t1"];
const STREAMS: [&str; 3] = ["s0", "s1", "s2"];
const QUEUES: [&str; 2] = ["a", "b"];
const LEASES: [i64; 4] = [0, 500, 2_000, 24 * 60 * 60 * 1000 + 1];
const MOVES: [i64; 8] = [1, 100, 999, 1_000, 2_500, 10_000, 70_000, 24 * 60 * 60 * 1000 + 1];
const OWNERS: [(&str, &str); 4] = [("o1", "i1"), ("o1", "i2"), ("o2", "i1"), ("", "i1")];

/// Bytes per step: the opcode and at most seven argument bytes.
pub const STEP_BYTES: usize = 8;

/// Runs one input; panics on the first disagreement or broken invariant.
pub fn run(data: &[u8]) {
    let Some((&flags, steps)) = data.split_first() else { return };
    let mut h = Harness::new(flags & ON_FILE != 0);
    for chunk in steps.chunks(STEP_BYTES).take(STEPS_MAX) {
        let mut bytes = Bytes { data: &chunk[1..], pos: 0 };
        h.run_step(chunk[0], &mut bytes);
        h.step += 1;
    }
    h.check_everything("end of input");
    h.owner.close().expect("close");
}

/// The input, read a byte at a time; past the end every byte is 0.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        byte
    }

    /// A number in `0..n` (`n` at least 1).
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }
}

/// One tenant's view of the store and its models.
struct Side {
    view: Store,
    events: EventsModel,
    queue: QueueModel,
    workflows: WorkflowModel,
    processes: process::Model,
    graphs: Vec<GraphModel>,
    /// Executions created (deleted ones too).
    executions: Vec<String>,
    /// Every lease the store handed out, with its process.
    leases: Vec<(usize, ProcessLease)>,
    /// The highest fence each queue item was claimed with.
    fences: BTreeMap<String, u64>,
    /// The queue items completed.
    completed: BTreeSet<String>,
}

impl Side {
    fn new(view: Store) -> Self {
        Self {
            view,
            events: EventsModel::default(),
            queue: QueueModel::default(),
            workflows: WorkflowModel::default(),
            processes: process::Model::default(),
            graphs: Vec::new(),
            executions: Vec::new(),
            leases: Vec::new(),
            fences: BTreeMap::new(),
            completed: BTreeSet::new(),
        }
    }
}

/// An API token of `t1` as the model knows it.
struct Issued {
    id: String,
    secret: String,
    role: Role,
    expires_at_ms: Option<i64>,
    revoked: bool,
}

struct Harness {
    step: usize,
    clock: ManualClock,
    stamp: Stamp,
    scratch: Option<Scratch>,
    owner: Store,
    sides: Vec<Side>,
    /// Whether `t1` is suspended.
    suspended: bool,
    tokens: Vec<Issued>,
    /// The fingerprint of the store's tables, when known to be current.
    fingerprint: Option<u64>,
    /// The query the fingerprint reads (built at the first fingerprint).
    dump_sql: String,
    /// What the last steps did, for failure messages.
    trace: Vec<String>,
}

/// Inline, `synchronous=NORMAL`, the harness's clock, and a seed: generated ids and token
/// secrets repeat from run to run (a reopened file folds what it holds into the seed, so its
/// new ids do not collide with stored ones).
fn options(clock: &ManualClock) -> Options {
    Options::default()
        .clock(Arc::new(clock.clone()))
        .durability(Durability::Normal)
        .inline(true)
        .seed(0x5EED)
}

impl Harness {
    fn new(on_file: bool) -> Self {
        let clock = ManualClock::new(T0);
        let scratch = on_file.then(Scratch::new);
        let owner = match &scratch {
            Some(scratch) => Store::open_with(scratch.file(), options(&clock)),
            None => Store::open_in_memory_with(options(&clock)),
        };
        let owner = owner.expect("open the store");
        owner.auth().create_tenant(TENANTS[1], "tenant one").expect("create t1");
        let sides =
            vec![Side::new(owner.clone()), Side::new(owner.tenant(TENANTS[1]).expect("t1 view"))];
        Self {
            step: 0,
            clock,
            stamp: Stamp::opened(T0),
            scratch,
            owner,
            sides,
            suspended: false,
            tokens: Vec::new(),
            fingerprint: None,
            dump_sql: String::new(),
            trace: Vec::new(),
        }
    }

    /// Names the call for failure messages; keeps the last few.
    fn context(&mut self, what: &str) -> String {
        let line = format!("step {}: {what}", self.step);
        self.trace.push(line);
        if self.trace.len() > 12 {
            self.trace.remove(0);
        }
        format!("{} (recent steps: {:?})", what, self.trace)
    }

    /// The store's time for the call about to be made.
    fn now(&mut self) -> i64 {
        self.stamp.next(self.clock.now_ms())
    }

    fn run_step(&mut self, op: u8, b: &mut Bytes<'_>) {
        let t = b.below(2);
        match op % 26 {
            0 => self.move_clock(b),
            1..=3 => self.events_step(op % 26, t, b),
            4..=7 => self.queue_step(op % 26, t, b),
            8..=13 => self.workflow_step(op % 26, t, b),
            14..=17 => self.process_step(op % 26, t, b),
            18 | 19 => self.graph_step(op % 26, t, b),
            20 => self.suspend_or_resume(),
            21 => self.token_admin(b),
            22 => self.token_use(b),
            23 => self.rolled_back(t, b),
            24 => self.reopen(),
            _ => self.check_everything("check"),
        }
    }

    fn move_clock(&mut self, b: &mut Bytes<'_>) {
        let byte = b.byte();
        let delta_ms = MOVES[usize::from(byte) % MOVES.len()];
        let delta_ms = if byte & 0x80 != 0 { -delta_ms } else { delta_ms };
        self.context(&format!("clock {delta_ms:+} ms"));
        self.clock.advance_ms(delta_ms);
    }

    /// Whether writes of tenant `t` are refused because it is suspended.
    fn frozen(&self, t: usize) -> bool {
        t == 1 && self.suspended
    }

    /// Runs a write: when the tenant is suspended, checks `TenantSuspended` and that nothing
    /// was written, and returns `None`; else the store's answer, with the fingerprint made
    /// stale on success.
    fn write<T: std::fmt::Debug>(
        &mut self,
        t: usize,
        context: &str,
        call: impl FnOnce(&Store) -> spindle::Result<T>,
    ) -> Option<spindle::Result<T>> {
        if self.frozen(t) {
            self.before_write();
            let got = call(&self.sides[t].view);
            self.refused(context, &got, Refusal::TenantSuspended);
            return None;
        }
        let got = call(&self.sides[t].view);
        if got.is_ok() {
            self.fingerprint = None;
        }
        Some(got)
    }

    /// Makes sure the fingerprint before a write is known.
    fn before_write(&mut self) {
        if self.fingerprint.is_none() {
            self.fingerprint = Some(self.fingerprint_now());
        }
    }

    /// Checks that `got` is `refusal` and that nothing was written.
    fn refused<T: std::fmt::Debug>(
        &mut self,
        context: &str,
        got: &spindle::Result<T>,
        refusal: Refusal,
    ) {
        models::assert_refused(context, got, refusal);
        self.nothing_written(context);
    }

    /// Nothing was written since the last fingerprint.
    fn nothing_written(&mut self, context: &str) {
        let before = self.fingerprint.expect("a fingerprint before the call");
        assert_eq!(self.fingerprint_now(), before, "{context}: a refused call wrote");
    }

    /// Compares a write's answer with the model's; a refusal must have written nothing.
    fn settle<T: std::fmt::Debug + PartialEq>(
        &mut self,
        context: &str,
        got: spindle::Result<T>,
        expected: Expect<T>,
    ) -> Option<Refusal> {
        let refusal = compare(context, got, expected);
        if refusal.is_some() {
            self.nothing_written(context);
        }
        refusal
    }

    /// A hash of the content of every table of the store, read in a closure that rolls back
    /// with one statement (built once: every row of every table, quoted).
    fn fingerprint_now(&mut self) -> u64 {
        self.now();
        if self.dump_sql.is_empty() {
            self.dump_sql = dump_sql(&self.owner);
        }
        let sql = self.dump_sql.clone();
        let got = self.owner.transaction(move |tx| {
            let mut hasher = DefaultHasher::new();
            let sql_handle = tx.sqlite()?;
            let mut stmt = sql_handle.prepare(&sql)?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                row.get_ref(0)?.as_bytes().unwrap_or_default().hash(&mut hasher);
            }
            Ok(TxOutcome::Rollback(hasher.finish()))
        });
        got.expect("fingerprint the store")
    }
}

/// One query that reads every row of every table of the store as text: `table:quote(c1),..`.
fn dump_sql(store: &Store) -> String {
    let got = store.transaction(|tx| {
        let sql = tx.sqlite()?;
        let mut tables: Vec<String> = Vec::new();
        let mut stmt =
            sql.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            tables.push(row.get(0)?);
        }
        let mut selects: Vec<String> = Vec::new();
        for table in tables {
            let mut stmt =
                sql.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
            let mut rows = stmt.query([])?;
            let mut columns: Vec<String> = Vec::new();
            while let Some(row) = rows.next()? {
                let column: String = row.get(0)?;
                columns.push(format!("quote(\"{column}\")"));
            }
            selects.push(format!(
                "SELECT '{table}:' || {} FROM \"{table}\"",
                columns.join(" || ',' || ")
            ));
        }
        Ok(TxOutcome::Rollback(selects.join(" UNION ALL ")))
    });
    got.expect("list the store's tables")
}

// ---------------------------------------------------------------------------------------------
// Events.

impl Harness {
    fn events_step(&mut self, op: u8, t: usize, b: &mut Bytes<'_>) {
        let stream = STREAMS[b.below(STREAMS.len())];
        match op {
            1 => self.append(t, stream, b),
            2 => self.append_keyed(t, stream, b),
            _ => self.truncate_and_read(t, stream, b),
        }
        self.check_stream(t, stream);
    }

    fn append(&mut self, t: usize, stream: &str, b: &mut Bytes<'_>) {
        let payload = json!({ "v": b.below(3) });
        let now_ms = self.now();
        let context = self.context(&format!("{} append to {stream}", TENANTS[t]));
        let Some(got) = self.write(t, &context, |v| {
            v.events().append(Stream::custom(stream), "plain", payload.clone())
        }) else {
            return;
        };
        let got = got.unwrap_or_else(|e| panic!("{context}: {e}"));
        let seq = self.sides[t].events.append(stream, "plain", payload, now_ms);
        assert_eq!((got.seq, got.existed), (seq, false), "{context}");
    }

    fn append_keyed(&mut self, t: usize, stream: &str, b: &mut Bytes<'_>) {
        let key = format!("k{}", b.below(4));
        let event_type = ["a", "b"][b.below(2)];
        let payload = json!({ "v": b.below(2) });
        let now_ms = self.now();
        let context = self.context(&format!(
            "{} append {event_type} {payload} under {key} to {stream}",
            TENANTS[t]
        ));
        self.before_write();
        let Some(got) = self.write(t, &context, |v| {
            v.events().append_idempotent(Stream::custom(stream), event_type, payload.clone(), &key)
        }) else {
            return;
        };
        let expected =
            self.sides[t].events.append_idempotent(stream, event_type, payload, &key, now_ms);
        let got = got.map(|a| KeyedAppend { seq: a.seq, existed: a.existed });
        self.settle(&context, got, expected);
    }

    fn truncate_and_read(&mut self, t: usize, stream: &str, b: &mut Bytes<'_>) {
        let head = self.sides[t].events.head(stream);
        let before = b.below(head as usize + 2) as u64;
        self.now();
        if b.byte().is_multiple_of(2) {
            let context =
                self.context(&format!("{} truncate {stream} before {before}", TENANTS[t]));
            let Some(got) =
                self.write(t, &context, |v| v.events().truncate(Stream::custom(stream), before))
            else {
                return;
            };
            let expected = self.sides[t].events.truncate(stream, before);
            assert_eq!(got.unwrap_or_else(|e| panic!("{context}: {e}")), expected, "{context}");
            return;
        }
        let context = self.context(&format!("{} read {stream} after {before}", TENANTS[t]));
        let read =
            self.sides[t].view.events().read(Stream::custom(stream), before, 5).expect("read");
        assert_eq!(plain(read), self.sides[t].events.read(stream, before, 5), "{context}");
    }

    /// The stream holds exactly the model's events, dense up to its head.
    fn check_stream(&mut self, t: usize, stream: &str) {
        self.now();
        let context = format!("{} stream {stream} at step {}", TENANTS[t], self.step);
        let side = &self.sides[t];
        let read = side.view.events().read(Stream::custom(stream), 0, 1000).expect("read");
        let head = side.view.events().head(Stream::custom(stream)).expect("head");
        assert_eq!(head, side.events.head(stream), "{context}: head");
        let seqs: Vec<u64> = read.iter().map(|e| e.seq).collect();
        let first = seqs.first().copied().unwrap_or(head + 1);
        assert_eq!(seqs, (first..=head).collect::<Vec<u64>>(), "{context}: not dense");
        assert_eq!(plain(read), side.events.read(stream, 0, 1000), "{context}");
    }
}

// ---------------------------------------------------------------------------------------------
// Queue.

impl Harness {
    fn queue_step(&mut self, op: u8, t: usize, b: &mut Bytes<'_>) {
        match op {
            4 => self.enqueue(t, b),
            5 => self.claim(t, b),
            6 => self.fenced(t, b),
            _ => self.queue_admin(t, b),
        }
    }

    fn enqueue(&mut self, t: usize, b: &mut Bytes<'_>) {
        let queue = QUEUES[b.below(2)];
        let priority = b.below(3) as i64 - 1;
        let delay_ms = [0, 0, 500, 3_000][b.below(4)];
        let max_attempts = b.below(4) as u32;
        let now_ms = self.now();
        let context = self.context(&format!("{} enqueue {queue} max {max_attempts}", TENANTS[t]));
        self.before_write();
        let new = NewItem::new(queue, json!(self.step))
            .priority(priority)
            .run_at_ms(now_ms + delay_ms)
            .max_attempts(max_attempts);
        let Some(got) = self.write(t, &context, |v| v.queue().enqueue(new)) else { return };
        if max_attempts == 0 {
            self.refused(&context, &got, Refusal::InvalidInput);
            return;
        }
        let id = got.unwrap_or_else(|e| panic!("{context}: {e}")).id;
        self.sides[t].queue.enqueue(id, queue, priority, now_ms + delay_ms, max_attempts);
    }

    fn claim(&mut self, t: usize, b: &mut Bytes<'_>) {
        let queues: &[&str] = [&QUEUES[..1], &QUEUES[1..], &QUEUES[..]][b.below(3)];
        let lease_ms = LEASES[b.below(LEASES.len())];
        let now_ms = self.now();
        let context = self.context(&format!("{} claim {queues:?} for {lease_ms}", TENANTS[t]));
        self.before_write();
        let Some(got) = self.write(t, &context, |v| v.queue().claim("w", queues, lease_ms)) else {
            return;
        };
        let expected = self.sides[t].queue.claim(queues, lease_ms, now_ms).map(|(c, _)| c);
        let got = got.map(|c| c.map(|c| (c.item.id, c.fence, c.lease_expires_at_ms)));
        if self.settle(&context, got, expected.clone()).is_some() {
            return;
        }
        if let Ok(Some((id, fence, _))) = expected {
            let last = self.sides[t].fences.insert(id.clone(), fence).unwrap_or(0);
            assert!(fence > last, "{context}: fence {fence} of {id} after {last}");
        }
    }

    /// An item index: mostly a claimed one.
    fn pick_item(&self, t: usize, b: &mut Bytes<'_>) -> Option<usize> {
        let items = &self.sides[t].queue.items;
        let claimed: Vec<usize> =
            (0..items.len()).filter(|&i| items[i].status == spindle::ItemStatus::Claimed).collect();
        let byte = b.byte();
        if !claimed.is_empty() && byte & 3 != 0 {
            return Some(claimed[usize::from(byte >> 2) % claimed.len()]);
        }
        (!items.is_empty()).then(|| usize::from(byte >> 2) % items.len())
    }

    fn fenced(&mut self, t: usize, b: &mut Bytes<'_>) {
        let Some(index) = self.pick_item(t, b) else { return };
        let item = &self.sides[t].queue.items[index];
        let fence = match b.below(5) {
            0 => item.fence.saturating_sub(1),
            1 => item.fence + 1,
            _ => item.fence,
        };
        let id = item.id.clone();
        let (action, lease_ms, retryable) =
            (b.below(4), LEASES[b.below(LEASES.len())], !b.byte().is_multiple_of(3));
        let now_ms = self.now();
        let context =
            self.context(&format!("{} fenced {action} on {id} fence {fence}", TENANTS[t]));
        self.before_write();
        let Some(got) = self.write(t, &context, |v| {
            let queue = v.queue();
            match action {
                0 => queue.heartbeat(&id, fence, lease_ms).map(|at| at.to_string()),
                1 => queue.complete(&id, fence, json!(1)).map(|()| "done".to_owned()),
                2 => {
                    queue.fail(&id, fence, "boom", retryable).map(|o: FailOutcome| format!("{o:?}"))
                }
                _ => queue.release(&id, fence).map(|()| "released".to_owned()),
            }
        }) else {
            return;
        };
        let q = &mut self.sides[t].queue;
        let expected: Expect<String> = match action {
            0 => q.heartbeat(index, fence, lease_ms, now_ms).map(|at| at.to_string()),
            1 => q.complete(index, fence, now_ms).map(|()| "done".to_owned()),
            2 => q.fail(index, fence, retryable, now_ms).map(|o| format!("{o:?}")),
            _ => q.release(index, fence, now_ms).map(|()| "released".to_owned()),
        };
        let done = expected.as_deref() == Ok("done");
        self.settle(&context, got, expected);
        if done {
            assert!(self.sides[t].completed.insert(id.clone()), "{context}: {id} completed twice");
        }
    }

    fn queue_admin(&mut self, t: usize, b: &mut Bytes<'_>) {
        let action = b.below(3);
        let index = self.pick_item(t, b);
        let now_ms = self.now();
        self.before_write();
        if action == 0 {
            let context = self.context(&format!("{} reclaim_expired", TENANTS[t]));
            let Some(got) = self.write(t, &context, |v| v.queue().reclaim_expired()) else {
                return;
            };
            let swept = self.sides[t].queue.reclaim(None, now_ms);
            let got = got.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(
                (got.retried, got.dead_lettered),
                (swept.retried, swept.dead_lettered),
                "{context}"
            );
            return;
        }
        let Some(index) = index else { return };
        let id = self.sides[t].queue.items[index].id.clone();
        let context = self.context(&format!("{} requeue/cancel {action} {id}", TENANTS[t]));
        let requeue = action == 1;
        let Some(got) = self.write(t, &context, |v| {
            if requeue { v.queue().requeue(&id) } else { v.queue().cancel(&id) }
        }) else {
            return;
        };
        let q = &mut self.sides[t].queue;
        let expected = if requeue { q.requeue(index, now_ms) } else { q.cancel(index, now_ms) };
        self.settle(&context, got, expected);
        let stored = self.sides[t].view.queue().get(&id).expect("get");
        models::queue::check_item(&context, &stored, &self.sides[t].queue.items[index]);
    }

    /// Every queue item of tenant `t` agrees with the model; fences never went back.
    fn check_queue(&mut self, t: usize, context: &str) {
        self.now();
        let side = &self.sides[t];
        for item in &side.queue.items {
            let stored = side.view.queue().get(&item.id).expect("get");
            models::queue::check_item(context, &stored, item);
            let last = side.fences.get(&item.id).copied().unwrap_or(0);
            assert!(stored.fence >= last, "{context}: the fence of {} went back", item.id);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workflows.

impl Harness {
    fn workflow_step(&mut self, op: u8, t: usize, b: &mut Bytes<'_>) {
        match op {
            8 => self.put_definition(t, b),
            9 => self.create_execution(t, b),
            10 => self.set_status(t, b),
            11 => self.write_state(t, b),
            12 => self.execution_event_or_snapshot(t, b),
            _ => self.load_or_delete(t, b),
        }
    }

    fn pick_execution(&self, t: usize, b: &mut Bytes<'_>) -> String {
        let side = &self.sides[t];
        let byte = usize::from(b.byte());
        let live: Vec<&String> = side.workflows.executions.keys().collect();
        if byte.is_multiple_of(8) || live.is_empty() {
            return side
                .executions
                .get(byte / 8 % side.executions.len().max(1))
                .cloned()
                .unwrap_or_else(|| "nothing".into());
        }
        live[byte / 8 % live.len()].clone()
    }

    fn put_definition(&mut self, t: usize, b: &mut Bytes<'_>) {
        let (workflow, version) = (format!("w{}", b.below(2)), format!("v{}", b.below(2)));
        let ir = json!({ "steps": b.below(2) });
        let now_ms = self.now();
        let context = self.context(&format!("{} put {workflow}@{version} {ir}", TENANTS[t]));
        self.before_write();
        let Some(got) = self
            .write(t, &context, |v| v.workflows().put_definition(&workflow, &version, ir.clone()))
        else {
            return;
        };
        let expected = self.sides[t].workflows.put_definition(&workflow, &version, &ir, now_ms);
        self.settle(&context, got.map(|d| d.created_at_ms), expected);
    }

    fn create_execution(&mut self, t: usize, b: &mut Bytes<'_>) {
        let (workflow, version) = (format!("w{}", b.below(2)), format!("v{}", b.below(2)));
        let now_ms = self.now();
        let context = self.context(&format!("{} create {workflow}@{version}", TENANTS[t]));
        self.before_write();
        let input = json!({ "step": self.step });
        let Some(got) = self.write(t, &context, |v| {
            v.workflows().create_execution(&workflow, &version, input.clone())
        }) else {
            return;
        };
        if let Err(refusal) = self.sides[t].workflows.can_create(&workflow, &version) {
            self.refused(&context, &got, refusal);
            return;
        }
        let record = got.unwrap_or_else(|e| panic!("{context}: {e}"));
        let expected = WorkflowModel::expected_new(&record.id, &workflow, &version, input, now_ms);
        assert_eq!(record, expected, "{context}");
        self.sides[t].executions.push(record.id.clone());
        self.sides[t].workflows.created(record);
    }

    fn set_status(&mut self, t: usize, b: &mut Bytes<'_>) {
        let id = self.pick_execution(t, b);
        let status = [
            WorkflowStatus::Pending,
            WorkflowStatus::Running,
            WorkflowStatus::Paused,
            WorkflowStatus::Completed,
            WorkflowStatus::Failed,
            WorkflowStatus::Cancelled,
            WorkflowStatus::LimitExceeded,
        ][b.below(7)];
        let now_ms = self.now();
        let context = self.context(&format!("{} set_status {id} {status:?}", TENANTS[t]));
        self.before_write();
        let Some(got) = self.write(t, &context, |v| v.workflows().set_status(&id, status)) else {
            return;
        };
        let expected = self.sides[t].workflows.set_status(&id, status, now_ms);
        self.settle(&context, got, expected);
    }

    fn write_state(&mut self, t: usize, b: &mut Bytes<'_>) {
        let id = self.pick_execution(t, b);
        let (action, arg) = (b.below(3), b.byte());
        let now_ms = self.now();
        let version =
            self.sides[t].workflows.executions.get(&id).map_or(0, |e| e.record.state_version);
        let context = self.context(&format!("{} state write {action}/{arg} on {id}", TENANTS[t]));
        self.before_write();
        let expected_version =
            version.wrapping_add(u64::from(arg % 3)).wrapping_sub(1).min(version + 1);
        let patch =
            [json!({ "a": arg }), json!({ "a": null }), json!({ "b": { "c": arg } }), json!([arg])]
                [usize::from(arg) % 4]
                .clone();
        let key = ["log", "a"][usize::from(arg) % 2];
        let Some(got) = self.write(t, &context, |v| {
            let workflows = v.workflows();
            match action {
                0 => workflows.set_state(&id, expected_version, json!({ "set": arg })),
                1 => workflows.patch_state(&id, patch.clone()),
                _ => workflows.append_to_array(&id, key, json!(arg)),
            }
        }) else {
            return;
        };
        let model = &mut self.sides[t].workflows;
        let expected = match action {
            0 => model.set_state(&id, expected_version, json!({ "set": arg }), now_ms),
            1 => model.patch_state(&id, &patch, now_ms),
            _ => model.append_to_array(&id, key, json!(arg), now_ms),
        };
        self.settle(&context, got, expected);
    }

    fn execution_event_or_snapshot(&mut self, t: usize, b: &mut Bytes<'_>) {
        let id = self.pick_execution(t, b);
        let (action, arg) = (b.below(2), b.byte());
        let now_ms = self.now();
        self.before_write();
        if action == 0 {
            let event_type = ["note", "other", "workflow.fake"][usize::from(arg) % 3];
            let context = self.context(&format!("{} append_event {id} {event_type}", TENANTS[t]));
            let Some(got) = self
                .write(t, &context, |v| v.workflows().append_event(&id, event_type, json!(arg)))
            else {
                return;
            };
            let expected =
                self.sides[t].workflows.append_event(&id, event_type, json!(arg), now_ms);
            self.settle(&context, got.map(|a| a.seq), expected);
            return;
        }
        let at_seq = u64::from(arg % 8);
        let state = json!({ "snap": arg / 128 });
        let context =
            self.context(&format!("{} write_snapshot {id} at {at_seq} {state}", TENANTS[t]));
        let Some(got) =
            self.write(t, &context, |v| v.workflows().write_snapshot(&id, at_seq, state.clone()))
        else {
            return;
        };
        let expected = self.sides[t].workflows.write_snapshot(&id, at_seq, state, now_ms);
        self.settle(&context, got.map(|s| (s.state, s.created_at_ms)), expected);
    }

    fn load_or_delete(&mut self, t: usize, b: &mut Bytes<'_>) {
        let id = self.pick_execution(t, b);
        let delete = b.byte().is_multiple_of(4);
        self.now();
        let context = self.context(&format!("{} load/delete {delete} {id}", TENANTS[t]));
        if delete {
            let existed = self.sides[t].workflows.executions.contains_key(&id);
            let Some(got) = self.write(t, &context, |v| v.workflows().delete_execution(&id)) else {
                return;
            };
            assert_eq!(got.unwrap_or_else(|e| panic!("{context}: {e}")), existed, "{context}");
            self.sides[t].workflows.delete(&id);
            return;
        }
        self.check_execution(t, &id, &context);
    }

    /// `load` and the whole stream of one execution agree with the model.
    fn check_execution(&self, t: usize, id: &str, context: &str) {
        let side = &self.sides[t];
        let Some(model) = side.workflows.executions.get(id) else {
            assert_eq!(side.view.workflows().execution(id).expect("execution"), None, "{context}");
            return;
        };
        let loaded = side.view.workflows().load(id).unwrap_or_else(|e| panic!("{context}: {e}"));
        assert_eq!(loaded.execution, model.record, "{context}: execution");
        assert_eq!(
            plain(loaded.events),
            side.workflows.load_events(id).expect("events"),
            "{context}"
        );
        let all = side.view.workflows().events(id, 0).expect("events");
        assert_eq!(plain(all), model.events, "{context}: events");
    }
}

// ---------------------------------------------------------------------------------------------
// Processes.

impl Harness {
    fn process_step(&mut self, op: u8, t: usize, b: &mut Bytes<'_>) {
        let p = b.below(PROCESSES.len());
        match op {
            14 => self.register(t, p, b),
            15 => self.process_append(t, p, b),
            16 => self.lease_claim(t, p, b),
            _ => self.lease_renew_or_release(t, p, b),
        }
        self.check_process(t, p);
    }

    fn register(&mut self, t: usize, p: usize, b: &mut Bytes<'_>) {
        let variant = u64::from(b.byte().is_multiple_of(4));
        let now_ms = self.now();
        let context = self.context(&format!("{} register {} v{variant}", TENANTS[t], PROCESSES[p]));
        self.before_write();
        let Some(got) =
            self.write(t, &context, |v| v.processes().register(process::registration(p, variant)))
        else {
            return;
        };
        match self.sides[t].processes.register(p, variant) {
            Ok(None) => {
                let record = got.unwrap_or_else(|e| panic!("{context}: {e}"));
                assert_eq!(
                    (record.created_at_ms, record.updated_at_ms),
                    (now_ms, now_ms),
                    "{context}"
                );
                let model = process::ModelProcess {
                    variant,
                    record,
                    events: Vec::new(),
                    keys: BTreeMap::new(),
                };
                self.sides[t].processes.processes.insert(p, model);
            }
            expected => {
                self.settle(&context, got, expected.map(|r| r.expect("registered")));
            }
        }
    }

    fn process_append(&mut self, t: usize, p: usize, b: &mut Bytes<'_>) {
        let (kind, arg) = (b.below(5), b.byte());
        let key = (arg % 4 != 0).then(|| format!("k{}", arg % 5));
        let now_ms = self.now();
        let output = process::outputs()[usize::from(arg) % 4].clone();
        let mut request = match kind {
            0 | 1 => spindle::AppendRequest::new("note", json!({ "n": arg % 3 })),
            2 => spindle::AppendRequest::new("undeclared", json!({})),
            3 => spindle::AppendRequest::new("process.cancel_requested", json!({ "r": 1 })),
            _ => process::terminal_request(&output),
        };
        if kind != 4 {
            request.replay_key = key;
        }
        let context = self.context(&format!("{} append {} {request:?}", TENANTS[t], PROCESSES[p]));
        self.before_write();
        let Some(got) =
            self.write(t, &context, |v| v.processes().append_event(PROCESSES[p], request.clone()))
        else {
            return;
        };
        let expected = self.sides[t].processes.append(p, &request, now_ms);
        let unplaced = |event: ProcessEvent| ProcessEvent { position: 0, ..event };
        let got = got.map(|a| (unplaced(a.event), a.replayed));
        let expected = expected.map(|(event, replayed)| (unplaced(event), replayed));
        self.settle(&context, got, expected);
    }

    fn owner_of(b: &mut Bytes<'_>) -> LeaseOwner {
        let (id, incarnation) = OWNERS[b.below(OWNERS.len())];
        LeaseOwner::new(id, incarnation)
    }

    fn lease_claim(&mut self, t: usize, p: usize, b: &mut Bytes<'_>) {
        let owner = Self::owner_of(b);
        let ttl_ms = LEASES[b.below(LEASES.len())];
        let reclaim = b.byte().is_multiple_of(4);
        let now_ms = self.now();
        let observed = self.sides[t].processes.leases.get(&p).and_then(|row| row.holder.clone());
        let observed = observed.or_else(|| self.sides[t].leases.last().map(|(_, l)| l.clone()));
        let context = self.context(&format!(
            "{} claim {reclaim} {} by {owner:?} for {ttl_ms}",
            TENANTS[t], PROCESSES[p]
        ));
        self.before_write();
        let name = PROCESSES[p];
        let Some(got) = self.write(t, &context, |v| match (reclaim, &observed) {
            (true, Some(observed)) => v.processes().reclaim_lease(name, &owner, observed, ttl_ms),
            _ => v.processes().claim_lease(name, &owner, ttl_ms),
        }) else {
            return;
        };
        let reclaim = reclaim && observed.is_some();
        match self.sides[t].processes.claim(p, &owner, ttl_ms, now_ms, reclaim) {
            Ok(ExpectClaim::Granted(expected)) => {
                let Ok(LeaseClaim::Acquired(lease)) = got else {
                    panic!("{context}: {got:?}, expected {expected:?}")
                };
                let blank = lease.clone().lease_token(String::new());
                assert_eq!(blank, expected, "{context}: the grant");
                self.sides[t].processes.granted(p, lease.clone());
                self.sides[t].leases.push((p, lease));
            }
            Ok(ExpectClaim::Reentered(lease)) => {
                self.settle(&context, got, Ok(LeaseClaim::Acquired(lease)));
            }
            Ok(ExpectClaim::Busy(holder)) => {
                self.settle(&context, got, Ok(LeaseClaim::Busy { holder }));
            }
            Err(refusal) => self.refused(&context, &got, refusal),
        }
    }

    fn lease_renew_or_release(&mut self, t: usize, p: usize, b: &mut Bytes<'_>) {
        let (byte, ttl_ms) = (usize::from(b.byte()), LEASES[b.below(LEASES.len())]);
        let leases: Vec<ProcessLease> =
            self.sides[t].leases.iter().filter(|(q, _)| *q == p).map(|(_, l)| l.clone()).collect();
        let Some(lease) = leases.get(leases.len().saturating_sub(1 + byte / 2 % 3)).cloned() else {
            return self.ack_wake(t, p, byte);
        };
        let now_ms = self.now();
        let release = byte.is_multiple_of(2);
        let context = self.context(&format!(
            "{} renew/release {release} {} fence {}",
            TENANTS[t], PROCESSES[p], lease.fencing_token
        ));
        self.before_write();
        if release {
            let Some(got) = self.write(t, &context, |v| v.processes().complete_lease(&lease))
            else {
                return;
            };
            let expected = self.sides[t].processes.complete_lease(p, &lease);
            self.settle(&context, got, expected);
            return;
        }
        let Some(got) = self.write(t, &context, |v| v.processes().renew_lease(&lease, ttl_ms))
        else {
            return;
        };
        let expected = self.sides[t].processes.renew(p, &lease, ttl_ms, now_ms);
        if let Ok(renewed) = &expected {
            self.sides[t].leases.push((p, renewed.clone()));
        }
        self.settle(&context, got, expected);
    }

    /// No event type of the model's processes has a wake: none is listed, and acknowledging
    /// one is refused and writes nothing.
    fn ack_wake(&mut self, t: usize, p: usize, byte: usize) {
        let seq = (byte % 4) as u64;
        self.now();
        let context = self.context(&format!("{} ack_wake {} {seq}", TENANTS[t], PROCESSES[p]));
        let wakes = self.sides[t].view.processes().wake_events_after(PROCESSES[p], 0);
        let registered = self.sides[t].processes.processes.contains_key(&p);
        if !registered {
            models::assert_refused(&context, &wakes, Refusal::NotFound);
        } else {
            assert_eq!(wakes.unwrap_or_else(|e| panic!("{context}: {e}")), vec![], "{context}");
        }
        self.before_write();
        let Some(got) = self.write(t, &context, |v| v.processes().ack_wake(PROCESSES[p], seq))
        else {
            return;
        };
        let refusal = if registered { Refusal::InvalidInput } else { Refusal::NotFound };
        self.refused(&context, &got, refusal);
    }

    /// The process's record and events agree with the model.
    fn check_process(&mut self, t: usize, p: usize) {
        self.now();
        let context = format!("{} process {} at step {}", TENANTS[t], PROCESSES[p], self.step);
        let side = &self.sides[t];
        let stored = side.view.processes().get(PROCESSES[p]).expect("get");
        let model = side.processes.processes.get(&p);
        assert_eq!(stored.as_ref(), model.map(|m| &m.record), "{context}: record");
        let Some(model) = model else { return };
        let events = side.view.processes().events_after(PROCESSES[p], 0).expect("events");
        let unplaced: Vec<ProcessEvent> =
            events.into_iter().map(|e| ProcessEvent { position: 0, ..e }).collect();
        let expected: Vec<ProcessEvent> =
            model.events.iter().map(|e| ProcessEvent { position: 0, ..e.clone() }).collect();
        assert_eq!(unplaced, expected, "{context}: events");
    }
}

// ---------------------------------------------------------------------------------------------
// Graphs.

impl Harness {
    fn graph_step(&mut self, op: u8, t: usize, b: &mut Bytes<'_>) {
        let live: Vec<usize> =
            (0..self.sides[t].graphs.len()).filter(|&g| self.sides[t].graphs[g].open()).collect();
        let byte = usize::from(b.byte());
        let g = match live.get(byte % live.len().max(1)) {
            Some(&g) if op == 19 || byte % 4 != 0 => g,
            _ => match self.new_graph(t) {
                Some(g) => g,
                None => return,
            },
        };
        let action = b.below(8);
        match (self.sides[t].graphs[g].status, action) {
            (GraphStatus::Pending, 0..=5) => self.add_node(t, g, b),
            (GraphStatus::Pending, _) => self.start_graph(t, g),
            (_, 0) => self.add_node(t, g, b),
            (_, 1) => self.cancel_graph(t, g),
            (_, 2..=4) => self.node_call(t, g, b, true),
            (_, _) => self.node_call(t, g, b, false),
        }
        self.check_graph(t, g, true);
    }

    fn new_graph(&mut self, t: usize) -> Option<usize> {
        self.now();
        let context = self.context(&format!("{} create graph", TENANTS[t]));
        self.before_write();
        let got = self.write(t, &context, |v| v.graphs().create(json!({})))?;
        let id = got.unwrap_or_else(|e| panic!("{context}: {e}"));
        self.sides[t].graphs.push(GraphModel::new(&id));
        Some(self.sides[t].graphs.len() - 1)
    }

    fn add_node(&mut self, t: usize, g: usize, b: &mut Bytes<'_>) {
        let graph = &self.sides[t].graphs[g];
        let id = format!("n{}", graph.nodes.len() + usize::from(b.byte() % 2));
        let join = if b.byte().is_multiple_of(3) { JoinType::Any } else { JoinType::All };
        let spec = if b.byte().is_multiple_of(5) {
            NodeSpec::Gather { strategy: spindle::GatherStrategy::All }
        } else {
            NodeSpec::task(json!({}))
        };
        let edges = b.byte();
        let graph_id = graph.id.clone();
        self.now();
        let context = self.context(&format!("{} add_node {id} to {graph_id}", TENANTS[t]));
        self.before_write();
        let Some(got) = self.write(t, &context, |v| {
            v.graphs().add_node(&graph_id, spec, NodeOptions::new().id(&id).join(join))
        }) else {
            return;
        };
        let expected = self.sides[t].graphs[g].add_node(&id, join);
        if self.settle(&context, got.map(|_| ()), expected).is_some() {
            return;
        }
        let earlier: Vec<String> =
            self.sides[t].graphs[g].nodes.keys().filter(|n| **n != id).cloned().collect();
        for (i, from) in earlier.iter().enumerate().take(8) {
            if edges >> i & 1 == 1 {
                self.add_edge(t, g, from, &id);
            }
        }
    }

    fn add_edge(&mut self, t: usize, g: usize, from: &str, to: &str) {
        let graph_id = self.sides[t].graphs[g].id.clone();
        let context = self.context(&format!("{} add_edge {from} -> {to}", TENANTS[t]));
        self.before_write();
        let Some(got) = self.write(t, &context, |v| v.graphs().add_edge(&graph_id, from, to, None))
        else {
            return;
        };
        let expected = self.sides[t].graphs[g].add_edge(from, to);
        self.settle(&context, got.map(|_| ()), expected);
    }

    fn start_graph(&mut self, t: usize, g: usize) {
        let graph_id = self.sides[t].graphs[g].id.clone();
        self.now();
        let context = self.context(&format!("{} start {graph_id}", TENANTS[t]));
        let Some(got) = self.write(t, &context, |v| v.graphs().start(&graph_id)) else { return };
        got.unwrap_or_else(|e| panic!("{context}: {e}"));
    }

    fn cancel_graph(&mut self, t: usize, g: usize) {
        let graph_id = self.sides[t].graphs[g].id.clone();
        self.now();
        let context = self.context(&format!("{} cancel {graph_id}", TENANTS[t]));
        self.before_write();
        let expected = self.sides[t].graphs[g].cancel();
        let Some(got) = self.write(t, &context, |v| v.graphs().cancel(&graph_id)) else { return };
        self.settle(&context, got, expected);
    }

    fn node_call(&mut self, t: usize, g: usize, b: &mut Bytes<'_>, start: bool) {
        let graph = &self.sides[t].graphs[g];
        let nodes: Vec<&String> = graph.nodes.keys().collect();
        let byte = usize::from(b.byte());
        let node =
            nodes.get(byte % nodes.len().max(1)).map_or("nothing".to_owned(), |n| (*n).clone());
        let graph_id = graph.id.clone();
        self.now();
        let context =
            self.context(&format!("{} node {start}/{byte} {node} of {graph_id}", TENANTS[t]));
        self.before_write();
        let model = &self.sides[t].graphs[g];
        let expected = if start { model.start_node(&node) } else { model.finish_node(&node) };
        let Some(got) = self.write(t, &context, |v| {
            let graphs = v.graphs();
            match (start, byte / 16 % 4) {
                (true, _) => graphs.start_node(&graph_id, &node),
                (false, 0) => graphs.fail_node(&graph_id, &node, "boom"),
                (false, 1) => graphs.complete_node(
                    &graph_id,
                    &node,
                    Some(NodeOutput::Single(Token::error("bad"))),
                ),
                (false, _) => graphs.complete_node(&graph_id, &node, None),
            }
        }) else {
            return;
        };
        self.settle(&context, got, expected);
    }

    /// The graph agrees with its model; with `deep`, its audit is clean too.
    fn check_graph(&mut self, t: usize, g: usize, deep: bool) {
        self.now();
        let context =
            format!("{} graph {} at step {}", TENANTS[t], self.sides[t].graphs[g].id, self.step);
        let side = &mut self.sides[t];
        side.graphs[g].check(&side.view, &context);
        if deep {
            side.graphs[g].check_deep(&side.view, &context);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tenants, tokens, rolled-back closures and reopen.

impl Harness {
    fn suspend_or_resume(&mut self) {
        let status = if self.suspended { TenantStatus::Active } else { TenantStatus::Suspended };
        self.now();
        self.context(&format!("t1 becomes {status:?}"));
        let update = TenantUpdate::default().status(status);
        let tenant = self.owner.auth().update_tenant(TENANTS[1], update).expect("update tenant");
        assert_eq!(tenant.status, status);
        self.suspended = !self.suspended;
        self.fingerprint = None;
    }

    fn token_admin(&mut self, b: &mut Bytes<'_>) {
        let byte = b.byte();
        let now_ms = self.now();
        if byte.is_multiple_of(4) && !self.tokens.is_empty() {
            let index = usize::from(byte / 4) % self.tokens.len();
            let context = self.context(&format!("revoke token {index}"));
            let id = self.tokens[index].id.clone();
            // The owner's administration of a suspended tenant is not refused.
            let got = self.sides[1].view.auth().revoke_token(&id);
            got.unwrap_or_else(|e| panic!("{context}: {e}"));
            self.tokens[index].revoked = true;
            self.fingerprint = None;
            return;
        }
        let role = [Role::Reader, Role::Writer, Role::Admin][usize::from(byte) % 3];
        let expires_at_ms =
            [None, Some(now_ms + 1_000), Some(now_ms + 60_000)][usize::from(byte / 3) % 3];
        let context = self.context(&format!("create token {role:?} expiring {expires_at_ms:?}"));
        let got = self.sides[1].view.auth().create_token("fuzz", role, expires_at_ms);
        self.fingerprint = None;
        let (secret, info) = got.unwrap_or_else(|e| panic!("{context}: {e}"));
        assert_eq!(
            (info.role, info.expires_at_ms, info.tenant_id.as_str()),
            (role, expires_at_ms, TENANTS[1]),
            "{context}"
        );
        let secret = secret.expose().to_owned();
        self.tokens.push(Issued { id: info.id, secret, role, expires_at_ms, revoked: false });
    }

    /// Authenticates a token (or garbage) and appends through its view.
    fn token_use(&mut self, b: &mut Bytes<'_>) {
        let byte = usize::from(b.byte());
        let now_ms = self.now();
        let issued = self.tokens.get(byte % (self.tokens.len() + 1));
        let (secret, valid, role) = match issued {
            Some(i) => (
                i.secret.clone(),
                !i.revoked && i.expires_at_ms.is_none_or(|at| now_ms < at),
                i.role,
            ),
            None => ("spn_not_a_token".to_owned(), false, Role::Admin),
        };
        let context = self.context(&format!("authenticate token {byte} (valid {valid})"));
        self.before_write();
        let got = self.owner.authenticate(&secret);
        if !valid {
            self.refused(&context, &got, Refusal::Unauthorized);
            return;
        }
        let view = got.unwrap_or_else(|e| panic!("{context}: {e}"));
        self.fingerprint = None;
        assert_eq!((view.tenant_id(), view.role()), (TENANTS[1], role), "{context}");
        self.before_write();
        let payload = json!({ "by": "token" });
        let got = view.events().append(Stream::custom("s0"), "plain", payload.clone());
        match (role, self.suspended) {
            (Role::Reader, _) => self.refused(&context, &got, Refusal::Forbidden),
            (_, true) => self.refused(&context, &got, Refusal::TenantSuspended),
            _ => {
                let seq = self.sides[1].events.append("s0", "plain", payload, now_ms);
                assert_eq!(got.unwrap_or_else(|e| panic!("{context}: {e}")).seq, seq, "{context}");
                self.fingerprint = None;
            }
        }
        self.check_stream(1, "s0");
    }

    /// A closure that writes through several domains and returns `Rollback`: nothing is
    /// written, and the value comes back.
    fn rolled_back(&mut self, t: usize, b: &mut Bytes<'_>) {
        let byte = b.byte();
        self.now();
        let context = self.context(&format!("{} rolled-back closure {byte}", TENANTS[t]));
        self.before_write();
        let got = self.sides[t].view.transaction(move |tx| {
            let append = spindle::log::Append {
                stream: Stream::custom("s0"),
                event_type: "rb".into(),
                payload: json!(byte),
                idem_key: None,
            };
            let appended = tx.exec(append)?;
            tx.exec(spindle::queue::Enqueue { item: NewItem::new("a", json!(byte)) })?;
            if byte.is_multiple_of(2) {
                tx.exec(spindle::workflow::PutDefinition {
                    workflow_id: "rb".into(),
                    version: "1".into(),
                    ir: json!(byte),
                })?;
            }
            Ok(TxOutcome::Rollback(appended.seq))
        });
        match got {
            Err(spindle::Error::TenantSuspended(_)) if self.frozen(t) => {}
            Ok(seq) if !self.frozen(t) => {
                assert_eq!(seq, self.sides[t].events.head("s0") + 1, "{context}")
            }
            other => panic!("{context}: {other:?}"),
        }
        self.nothing_written(&context);
    }

    fn reopen(&mut self) {
        let Some(scratch) = &self.scratch else { return };
        let path = scratch.file();
        self.context("reopen");
        self.owner.close().expect("close");
        self.owner = Store::open_with(path, options(&self.clock)).expect("reopen");
        self.stamp.reopened(self.clock.now_ms());
        self.sides[0].view = self.owner.clone();
        self.sides[1].view = self.owner.tenant(TENANTS[1]).expect("t1 view");
        self.fingerprint = None;
        // Recovery put every running node of an active tenant back to ready (a suspended
        // tenant's graphs are left until it is active again).
        for side in self.sides.iter().take(if self.suspended { 1 } else { 2 }) {
            for graph in side.graphs.iter().filter(|g| g.status == GraphStatus::Running) {
                let nodes = side.view.graphs().nodes(&graph.id).expect("nodes");
                let running = nodes.iter().filter(|n| n.status == NodeStatus::Running).count();
                assert_eq!(running, 0, "step {}: running nodes survived recovery", self.step);
            }
        }
        self.check_everything("reopened");
    }

    /// Every model agrees with the store in full.
    fn check_everything(&mut self, what: &str) {
        let context = format!("{what} at step {}", self.step);
        for t in 0..TENANTS.len() {
            for stream in STREAMS {
                self.check_stream(t, stream);
            }
            self.check_queue(t, &context);
            for p in 0..PROCESSES.len() {
                self.check_process(t, p);
            }
            let ids: Vec<String> = self.sides[t].executions.clone();
            for id in ids {
                self.check_execution(t, &id, &context);
            }
            for g in 0..self.sides[t].graphs.len() {
                self.check_graph(t, g, true);
            }
        }
    }
}
