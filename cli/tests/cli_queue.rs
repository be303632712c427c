//! The queue's controls from the built `spindle` binary: `queue pause`, `queue resume`,
//! `queue concurrency` and `queue snooze` change what the library then does (a paused queue is
//! not claimed, a limited one no further than its limit, a snoozed item is pending later with
//! its attempt refunded); `queue stats` shows the state; `queue items` lists a page by status,
//! tag and metadata (`--meta KEY=VALUE`, the value JSON if it parses, else text). Bad input (a
//! run's queue, a limit of 0, a bad duration, an item not held, a stale fence, a malformed
//! metadata condition) exits 2 and writes nothing.

mod cli_common;

use cli_common::{Scratch, stderr, stdout};
use serde_json::{Value, json};
use spindle::{ItemStatus, NewItem, Store};

const LEASE_MS: i64 = 60_000;

/// What only these tests ask of a scratch store.
impl Scratch {
    /// The store through the library.
    fn library(&self) -> Store {
        Store::open(self.db()).expect("open the store")
    }

    /// `spindle ARGS --json`, which must succeed; its JSON.
    fn json(&self, args: &[&str]) -> Value {
        let output = self.command_with(args).arg("--json").output().expect("run spindle");
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        serde_json::from_slice(&output.stdout).expect("JSON")
    }

    /// `spindle ARGS`, which must exit 2 (bad input) saying `said`.
    fn refused(&self, args: &[&str], said: &str) {
        let output = self.spindle(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(said), "{args:?}: {}", stderr(&output));
    }

    /// The stats of `queue` as `queue stats --json` prints them.
    fn stats_of(&self, queue: &str) -> Value {
        let stats = self.json(&["queue", "stats"]);
        let all = stats.as_array().expect("a list").clone();
        all.into_iter().find(|s| s["queue"] == queue).unwrap_or(Value::Null)
    }
}

/// A store with `count` items in `queue`.
fn with_items(s: &Scratch, queue: &str, count: usize) {
    let store = s.library();
    for n in 0..count {
        store.queue().enqueue(NewItem::new(queue, json!({ "n": n }))).expect("enqueue");
    }
    store.close().expect("close");
}

#[test]
fn a_paused_queue_is_not_claimed_until_it_is_resumed() {
    let s = Scratch::new();
    with_items(&s, "mail", 2);
    let paused = s.json(&["queue", "pause", "mail"]);
    assert_eq!(paused, json!({ "queue": "mail", "paused": true }));
    assert_eq!(s.stats_of("mail")["paused"], true);
    let table = stdout(&s.spindle(&["queue", "stats"]));
    assert!(table.lines().any(|l| l.starts_with("mail") && l.ends_with("paused")), "{table}");

    let store = s.library();
    let claimed = store.queue().claim("w", &["mail"], LEASE_MS).expect("claim");
    assert!(claimed.is_none(), "a paused queue's item was claimed: {claimed:?}");
    store.close().expect("close");

    let resumed = s.json(&["queue", "resume", "mail"]);
    assert_eq!(resumed, json!({ "queue": "mail", "paused": false }));
    assert_eq!(s.stats_of("mail")["paused"], false);
    let store = s.library();
    assert!(store.queue().claim("w", &["mail"], LEASE_MS).expect("claim").is_some());
    store.close().expect("close");
}

#[test]
fn a_limit_set_by_the_command_caps_claims_and_none_lifts_it() {
    let s = Scratch::new();
    with_items(&s, "serial", 3);
    let set = s.json(&["queue", "concurrency", "serial", "1"]);
    assert_eq!(set, json!({ "queue": "serial", "concurrency_max": 1 }));
    assert_eq!(s.stats_of("serial")["concurrency_max"], 1);
    let table = stdout(&s.spindle(&["queue", "stats"]));
    assert!(table.lines().any(|l| l.starts_with("serial") && l.ends_with("running, limit 1")));

    let store = s.library();
    let batch = store.queue().claim_batch("w", &["serial"], LEASE_MS, 3).expect("claim");
    assert_eq!(batch.len(), 1, "one at a time under a limit of 1");
    store.close().expect("close");

    let lifted = s.json(&["queue", "concurrency", "serial", "none"]);
    assert_eq!(lifted, json!({ "queue": "serial", "concurrency_max": null }));
    let store = s.library();
    let rest = store.queue().claim_batch("w", &["serial"], LEASE_MS, 3).expect("claim");
    assert_eq!(rest.len(), 2, "the rest, once the limit is lifted");
    store.close().expect("close");
}

#[test]
fn bad_settings_and_a_runs_queue_are_refused_and_write_nothing() {
    let s = Scratch::new();
    with_items(&s, "mail", 1);
    s.json(&["queue", "concurrency", "mail", "2"]);
    for bad in ["0", "-1", "many", "4294967296", ""] {
        let args = ["queue", "concurrency", "mail", "--", bad];
        s.refused(&args, "a limit is a number from 1, or none");
    }
    assert_eq!(s.stats_of("mail")["concurrency_max"], 2, "the limit is as it was");
    let run_queue = "run:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    for args in [
        vec!["queue", "pause", run_queue],
        vec!["queue", "resume", run_queue],
        vec!["queue", "concurrency", run_queue, "1"],
    ] {
        s.refused(&args, "belong to run 0190a1b2");
    }
    s.refused(&["queue", "pause", ""], "queue");
    assert_eq!(s.stats_of(run_queue), Value::Null, "no settings row for the run's queue");
    assert_eq!(s.stats_of("mail")["paused"], false);
}

#[test]
fn snooze_puts_a_claimed_item_off_with_its_attempt_refunded() {
    let s = Scratch::new();
    with_items(&s, "mail", 1);
    let store = s.library();
    let claimed = store.queue().claim("w", &["mail"], LEASE_MS).expect("claim").expect("an item");
    let id = claimed.item.id.clone();
    assert_eq!(claimed.item.attempt, 1);
    store.close().expect("close");

    let snoozed = s.json(&["queue", "snooze", &id, "10m"]);
    assert_eq!(snoozed["id"], json!(id));
    assert_eq!(snoozed["fence"], json!(claimed.fence));
    let run_at_ms = snoozed["run_at_ms"].as_i64().expect("run_at_ms");

    let store = s.library();
    let item = store.queue().get(&id).expect("get");
    assert_eq!(item.status, ItemStatus::Pending);
    assert_eq!(item.attempt, 0, "the attempt is refunded");
    assert_eq!(item.run_at_ms, run_at_ms);
    assert!(run_at_ms >= claimed.lease_expires_at_ms - LEASE_MS + 600_000, "ten minutes on");
    assert!(store.queue().claim("w", &["mail"], LEASE_MS).expect("claim").is_none(), "not due");
    store.close().expect("close");
}

#[test]
fn snooze_refuses_what_is_not_held_and_writes_nothing() {
    let s = Scratch::new();
    with_items(&s, "mail", 1);
    let store = s.library();
    let claimed = store.queue().claim("w", &["mail"], LEASE_MS).expect("claim").expect("an item");
    let id = claimed.item.id.clone();
    store.close().expect("close");
    let stale = (claimed.fence + 1).to_string();
    s.refused(&["queue", "snooze", &id, "ten"], "a duration is");
    s.refused(&["queue", "snooze", &id, "400d"], "a snooze is");
    s.refused(&["queue", "snooze", &id, "1m", "--fence", &stale], "not held under fence");
    s.refused(&["queue", "snooze", "no-such-item", "1m"], "no queue item no-such-item");
    let store = s.library();
    let item = store.queue().get(&id).expect("get");
    assert_eq!((item.status, item.attempt, item.fence), (ItemStatus::Claimed, 1, claimed.fence));
    store.queue().complete(&id, claimed.fence, json!(null)).expect("still held: complete");
    store.close().expect("close");
    s.refused(&["queue", "snooze", &id, "1m"], "is completed: only a claimed item is snoozed");
}

#[test]
fn cancel_cancels_a_running_item_and_refuses_a_finished_or_a_runs_one() {
    let s = Scratch::new();
    with_items(&s, "mail", 2);
    let run_queue = "run:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    with_items(&s, run_queue, 1);
    let store = s.library();
    let claimed = store.queue().claim("w", &["mail"], LEASE_MS).expect("claim").expect("an item");
    let pending = store.queue().items("mail", spindle::ItemFilter::due(), spindle::Page::first(5));
    let pending = pending.expect("items").remove(0).id;
    let runs_item = store.queue().claim("w", &[run_queue], LEASE_MS).expect("claim");
    let runs_item = runs_item.expect("the run's item").item.id;
    store.close().expect("close");

    let id = claimed.item.id.clone();
    let cancelled = s.json(&["queue", "cancel", &id]);
    assert_eq!(cancelled, json!({ "id": id, "cancelled": true, "was": "claimed" }));
    let cancelled = s.json(&["queue", "cancel", &pending]);
    assert_eq!(cancelled["was"], "pending");
    s.refused(&["queue", "cancel", &id], "is cancelled, not pending or claimed");
    s.refused(&["queue", "cancel", &runs_item], "belong to run 0190a1b2");

    let store = s.library();
    let fence = claimed.fence;
    let refused = store.queue().complete(&id, fence, json!(null));
    assert!(matches!(refused, Err(spindle::Error::LeaseLost(_))), "{refused:?}");
    assert_eq!(store.queue().get(&id).expect("get").status, ItemStatus::Cancelled);
    assert_eq!(store.queue().get(&runs_item).expect("get").status, ItemStatus::Claimed);
    store.close().expect("close");
}

#[test]
fn items_lists_a_page_of_a_status_and_a_tag_filters_it() {
    let s = Scratch::new();
    let store = s.library();
    let mut ids = Vec::new();
    for (n, tag) in ["red", "blue", "red"].iter().enumerate() {
        let item = NewItem::new("paint", json!({ "n": n })).tag(*tag).metadata(json!({ "n": n }));
        ids.push(store.queue().enqueue(item).expect("enqueue").id);
    }
    store.close().expect("close");
    let listed = s.json(&["queue", "items", "paint", "--tag", "red"]);
    let listed_ids: Vec<&str> =
        listed.as_array().expect("a list").iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(listed_ids, [ids[0].as_str(), ids[2].as_str()]);
    assert_eq!(listed[0]["tags"], json!(["red"]));
    assert_eq!(listed[0]["metadata"], json!({ "n": 0 }));
    let second = s.json(&["queue", "items", "paint", "--limit", "1", "--after", &ids[0]]);
    assert_eq!(second[0]["id"], json!(ids[1]));
    let none = s.json(&["queue", "items", "paint", "--status", "claimed", "--tag", "red"]);
    assert_eq!(none, json!([]));
    let table = stdout(&s.spindle(&["queue", "items", "paint", "--tag", "blue"]));
    assert!(table.lines().any(|l| l.starts_with(&ids[1]) && l.contains("blue")), "{table}");
    s.refused(&["queue", "items", "paint", "--status", "sideways"], "a status is");
    s.refused(&["queue", "items", "paint", "--limit", "0"], "--limit is 1 to 1000");
    s.refused(&["queue", "items", "paint", "--tag", ""], "tag");
}

/// The ids of a listing as `--json` prints it.
fn ids_in(listing: &Value) -> Vec<String> {
    let items = listing.as_array().expect("a list");
    items.iter().filter_map(|item| item["id"].as_str().map(str::to_owned)).collect()
}

#[test]
fn meta_filters_items_by_metadata_with_values_read_as_json_or_else_as_text() {
    let s = Scratch::new();
    let store = s.library();
    let metadata = [
        json!({ "n": 1, "plan": "pro" }),
        json!({ "n": "1", "plan": "free" }),
        json!({ "n": true, "plan": "pro" }),
        json!({ "n": null, "plan": "a=b" }),
        json!({ "n": 1, "plan": "free" }),
    ];
    let mut ids = Vec::new();
    for (n, metadata) in metadata.into_iter().enumerate() {
        let item = NewItem::new("jobs", json!(n)).metadata(metadata).tag(["even", "odd"][n % 2]);
        ids.push(store.queue().enqueue(item).expect("enqueue").id);
    }
    store.close().expect("close");
    let listed = |args: &[&str]| ids_in(&s.json(&[&["queue", "items", "jobs"], args].concat()));
    assert_eq!(listed(&["--meta", "n=1"]), [ids[0].clone(), ids[4].clone()], "the number");
    assert_eq!(listed(&["--meta", "n=\"1\""]), [ids[1].clone()], "quoted: the string");
    assert_eq!(listed(&["--meta", "n=true"]), [ids[2].clone()]);
    assert_eq!(listed(&["--meta", "n=null"]), [ids[3].clone()]);
    assert_eq!(listed(&["--meta", "plan=pro"]), [ids[0].clone(), ids[2].clone()], "text");
    assert_eq!(listed(&["--meta", "plan=a=b"]), [ids[3].clone()], "split at the first =");
    let both = listed(&["--meta", "n=1", "--meta", "plan=free"]);
    assert_eq!(both, [ids[4].clone()], "every condition holds");
    assert_eq!(listed(&["--meta", "plan=free", "--tag", "odd"]), [ids[1].clone()]);
    let paged = listed(&["--meta", "n=1", "--limit", "1", "--after", &ids[0]]);
    assert_eq!(paged, [ids[4].clone()]);
    let table = stdout(&s.spindle(&["queue", "items", "jobs", "--meta", "plan=a=b"]));
    assert!(table.lines().any(|l| l.starts_with(&ids[3])), "{table}");

    let before = s.json(&["queue", "items", "jobs", "--limit", "1000"]);
    s.refused(&["queue", "items", "jobs", "--meta", "plan"], "KEY=VALUE");
    s.refused(&["queue", "items", "jobs", "--meta", "=1"], "metadata key");
    s.refused(&["queue", "items", "jobs", "--meta", "n=[1]"], "a metadata condition");
    s.refused(&["queue", "items", "jobs", "--meta", "n={\"a\":1}"], "a metadata condition");
    let long = format!("n={}", "x".repeat(spindle::queue::METADATA_VALUE_BYTES_MAX));
    s.refused(&["queue", "items", "jobs", "--meta", &long], "metadata value bytes");
    let many: Vec<String> = (0..=spindle::queue::METADATA_CONDITIONS_MAX)
        .flat_map(|n| ["--meta".to_owned(), format!("k{n}=1")])
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    s.refused(&[&["queue", "items", "jobs"], &many[..]].concat(), "metadata conditions");
    let after = s.json(&["queue", "items", "jobs", "--limit", "1000"]);
    assert_eq!(after, before, "the items are as they were");
    assert_eq!(s.stats_of("jobs")["pending"], 5);
}
