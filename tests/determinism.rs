//! Determinism: with the same seed (`Options::seed`), a `ManualClock` and the same calls, two
//! runs of a store return byte-identical results, ids and token secrets included; what a fuzz
//! harness needs to reproduce an input. A 1,000-step mixed sequence over every domain runs
//! twice and every returned value is compared.

mod common;

use std::sync::Arc;

use common::Dice;
use serde_json::json;
use spindle::{
    AppendRequest, LeaseOwner, ManualClock, NewItem, NodeOptions, NodeSpec, Options, Registration,
    Role, Store, Stream,
};

const T0: i64 = 1_700_000_000_000;
const STEPS: usize = 1_000;

/// What the sequence remembers between steps (ids the store returned).
#[derive(Default)]
struct Seen {
    claims: Vec<(String, u64)>,
    executions: Vec<String>,
    graphs: Vec<String>,
    secrets: Vec<String>,
    processes: usize,
}

/// Runs the sequence of `dice_seed` on a store opened with `options`; every step's result, as
/// text.
fn run(inline: bool, seed: u64, dice_seed: u64) -> Vec<String> {
    let clock = ManualClock::new(T0);
    let options = Options::default().inline(inline).seed(seed).clock(Arc::new(clock.clone()));
    let store = common::new_store_with(options);
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    let mut dice = Dice::new(dice_seed);
    let mut seen = Seen::default();
    let mut log = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let entry = match dice.below(10) {
            0 => events(&store, &mut dice),
            1 => enqueue(&store, &mut dice),
            2 => claim(&store, &mut seen),
            3 => settle(&store, &mut dice, &mut seen),
            4 => move_clock(&clock, &mut dice),
            5 => workflow(&store, &mut dice, &mut seen),
            6 => graph(&store, &mut dice, &mut seen),
            7 => process(&store, &mut dice, &mut seen),
            8 => token(&store, &mut dice, &mut seen),
            _ => format!("{:?}", store.events().read_all(0, 1_000)),
        };
        log.push(format!("{step}: {entry}"));
    }
    store.close().expect("close");
    log
}

fn events(store: &Store, dice: &mut Dice) -> String {
    let stream = Stream::custom(format!("s{}", dice.below(3)));
    let payload = json!({ "n": dice.below(4) });
    if dice.below(2) == 0 {
        format!("{:?}", store.events().append(&stream, "e", payload))
    } else {
        let key = format!("k{}", dice.below(5));
        format!("{:?}", store.events().append_idempotent(&stream, "e", payload, &key))
    }
}

fn enqueue(store: &Store, dice: &mut Dice) -> String {
    let mut item = NewItem::new("q", json!({ "n": dice.below(100) })).max_attempts(2);
    if dice.below(3) == 0 {
        item = item.dedupe_key(format!("d{}", dice.below(4)));
    }
    format!("{:?}", store.queue().enqueue(item))
}

fn claim(store: &Store, seen: &mut Seen) -> String {
    let claimed = store.queue().claim("w", &["q"], 5_000);
    if let Ok(Some(claim)) = &claimed {
        seen.claims.push((claim.item.id.clone(), claim.fence));
    }
    format!("{claimed:?}")
}

fn settle(store: &Store, dice: &mut Dice, seen: &mut Seen) -> String {
    if seen.claims.is_empty() {
        return "no claim".into();
    }
    let (id, fence) = seen.claims.remove(dice.below(seen.claims.len() as u64) as usize);
    match dice.below(3) {
        0 => format!("{:?}", store.queue().complete(&id, fence, json!({ "ok": true }))),
        1 => format!("{:?}", store.queue().fail(&id, fence, "boom", true)),
        _ => format!("{:?}", store.queue().heartbeat(&id, fence, 5_000)),
    }
}

fn move_clock(clock: &ManualClock, dice: &mut Dice) -> String {
    let delta_ms = dice.below(10_000) as i64 - 1_000;
    clock.advance_ms(delta_ms);
    format!("clock {delta_ms}")
}

fn workflow(store: &Store, dice: &mut Dice, seen: &mut Seen) -> String {
    let flows = store.workflows();
    if seen.executions.is_empty() || dice.below(4) == 0 {
        let _ = flows.put_definition("w", "v1", json!({ "nodes": ["a"] }));
        let created = flows.create_execution("w", "v1", json!({ "n": dice.below(9) }));
        if let Ok(execution) = &created {
            seen.executions.push(execution.id.clone());
        }
        return format!("{created:?}");
    }
    let id = &seen.executions[dice.below(seen.executions.len() as u64) as usize];
    match dice.below(3) {
        0 => format!("{:?}", flows.patch_state(id, json!({ "k": dice.below(5) }))),
        1 => format!("{:?}", flows.append_event(id, "step", json!({ "n": dice.below(5) }))),
        _ => format!("{:?}", flows.load(id)),
    }
}

fn graph(store: &Store, dice: &mut Dice, seen: &mut Seen) -> String {
    let graphs = store.graphs();
    if seen.graphs.is_empty() || dice.below(4) == 0 {
        let graph = graphs.create(json!({ "n": dice.below(9) })).expect("create graph");
        let spec = || NodeSpec::task(json!({}));
        graphs.add_node(&graph, spec(), NodeOptions::new().id("a")).expect("node a");
        graphs.add_node(&graph, spec(), NodeOptions::new().id("b")).expect("node b");
        graphs.add_edge(&graph, "a", "b", None).expect("edge");
        seen.graphs.push(graph.to_string());
        return format!("{:?}", graphs.start(&graph));
    }
    let graph = &seen.graphs[dice.below(seen.graphs.len() as u64) as usize];
    let node = if dice.below(2) == 0 { "a" } else { "b" };
    match dice.below(3) {
        0 => format!("{:?}", graphs.complete_node(graph, node, None)),
        1 => format!("{:?}", graphs.fail_node(graph, node, "no")),
        _ => format!("{:?}", graphs.nodes(graph)),
    }
}

fn process(store: &Store, dice: &mut Dice, seen: &mut Seen) -> String {
    let processes = store.processes();
    if seen.processes == 0 || dice.below(4) == 0 {
        seen.processes += 1;
        let registration = Registration::new(format!("p{}", seen.processes), "tool", json!({}));
        return format!("{:?}", processes.register(registration));
    }
    let id = format!("p{}", 1 + dice.below(seen.processes as u64));
    match dice.below(3) {
        0 => {
            let request = AppendRequest::new("progress", json!({ "n": dice.below(5) }));
            format!("{:?}", processes.append_event(&id, request))
        }
        1 => {
            let owner = LeaseOwner::new(format!("o{}", dice.below(2)), "i");
            format!("{:?}", processes.claim_lease(&id, &owner, 3_000))
        }
        _ => format!("{:?}", processes.events_after(&id, 0)),
    }
}

fn token(store: &Store, dice: &mut Dice, seen: &mut Seen) -> String {
    if seen.secrets.is_empty() || dice.below(3) == 0 {
        let acme = store.tenant("acme").expect("view");
        let (secret, info) = acme.auth().create_token("t", Role::Writer, None).expect("token");
        seen.secrets.push(secret.expose().to_owned());
        return format!("{} {info:?}", secret.expose());
    }
    let secret = &seen.secrets[dice.below(seen.secrets.len() as u64) as usize];
    let view = store.authenticate(secret).expect("an issued secret");
    format!("{} {:?}", view.tenant_id(), view.role())
}

#[test]
fn the_same_seed_clock_and_calls_give_byte_identical_results() {
    let first = run(true, 7, 42);
    let second = run(true, 7, 42);
    assert_eq!(first.len(), STEPS);
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a, b);
    }
    let kinds = ["Enqueued", "Claimed", "Execution", "spn_", "Appended", "Running"];
    for kind in kinds {
        assert!(first.iter().any(|entry| entry.contains(kind)), "the sequence reached {kind}");
    }
}

#[test]
fn a_store_on_its_own_thread_gives_the_same_results_as_an_inline_one() {
    assert_eq!(run(false, 7, 43), run(true, 7, 43));
}

#[test]
fn another_seed_gives_other_ids_and_secrets() {
    let (a, b) = (run(true, 7, 44), run(true, 8, 44));
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert!(differing > 100, "only {differing} steps differ");
}

/// Sessions of a seeded store that each reopen it (a file on SQLite, a schema on PostgreSQL),
/// each enqueueing three items at the same clock time: every id returned.
fn reopened_sessions(shared: &common::SharedStore) -> Vec<String> {
    let clock = ManualClock::new(T0);
    let options = || Options::default().seed(3).clock(Arc::new(clock.clone()));
    let mut ids = Vec::new();
    for _ in 0..3 {
        let store = shared.open_with(options());
        for n in 0..3 {
            let item = NewItem::new("q", json!({ "n": n }));
            ids.push(store.queue().enqueue(item).expect("a new id, not a collision").id);
        }
        store.close().expect("close");
    }
    ids
}

#[test]
fn a_reopened_seeded_file_store_makes_new_ids_and_the_same_ones_every_run() {
    let (first, second) = (common::SharedStore::new(), common::SharedStore::new());
    let ids = reopened_sessions(&first);
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 9, "no session repeated an earlier one's ids: {ids:?}");
    assert_eq!(reopened_sessions(&second), ids, "the same seed, clock and calls");
}
