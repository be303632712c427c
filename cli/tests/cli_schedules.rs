//! `spindle queue schedules` from the built binary: a schedule put by the command is kept as
//! the library reads it, listed as a table and as JSON, fired by the store (a tick enqueues its
//! item once) and removed. Bad input (a cron that does not parse, an unknown time zone, a bad
//! interval, a run's queue, both or neither of --cron and --every) exits 2 and writes nothing.

mod cli_common;

use cli_common::{Scratch, stderr, stdout};
use serde_json::{Value, json};
use std::sync::Arc;

use spindle::{Cadence, CatchUp, Clock, ManualClock, NewItem, Options, Page, Schedule, Store};

/// What only these tests ask of a scratch store.
impl Scratch {
    /// The store through the library (made first if there is none).
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
}

/// A scratch store that exists (the command opens stores, it makes none but a run's).
fn scratch() -> Scratch {
    let s = Scratch::new();
    s.library().close().expect("close");
    s
}

#[test]
fn a_schedule_put_by_the_command_is_kept_listed_and_removed() {
    let s = scratch();
    let put = s.json(&[
        "queue",
        "schedules",
        "put",
        "nightly",
        "--queue",
        "reports",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Paris",
        "--backfill",
        "3",
        "--tag",
        "night",
        "--payload",
        r#"{"k":1}"#,
    ]);
    assert_eq!(put["name"], "nightly");
    assert_eq!(put["cadence"], json!({ "cron": "0 3 * * *", "time_zone": "Europe/Paris" }));
    assert_eq!(put["catch_up"], "backfill:3");
    assert!(put["next_tick_ms"].as_i64().is_some(), "{put}");
    s.json(&["queue", "schedules", "put", "tick", "--queue", "q", "--every", "15m"]);

    let store = s.library();
    let kept = store.queue().schedules(Page::first(100)).expect("schedules");
    store.close().expect("close");
    assert_eq!(kept.len(), 2);
    let nightly = &kept[0];
    let cron = Cadence::Cron { expression: "0 3 * * *".into(), time_zone: "Europe/Paris".into() };
    assert_eq!((nightly.name.as_str(), &nightly.cadence), ("nightly", &cron));
    assert_eq!(nightly.catch_up, CatchUp::Backfill(3));
    assert_eq!(nightly.item.payload, json!({ "k": 1 }));
    assert_eq!(nightly.item.tags, vec!["night".to_owned()]);
    assert_eq!(kept[1].cadence, Cadence::Every { interval_ms: 900_000 });

    let table = stdout(&s.spindle(&["queue", "schedules"]));
    assert!(
        table.lines().any(|l| l.starts_with("nightly") && l.contains("Europe/Paris")),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("tick") && l.contains("every 15m")), "{table}");
    let listed = s.json(&["queue", "schedules", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(2));

    assert_eq!(s.json(&["queue", "schedules", "remove", "tick"])["removed"], true);
    assert_eq!(s.json(&["queue", "schedules", "remove", "tick"])["removed"], false);
    assert_eq!(s.json(&["queue", "schedules", "list"]).as_array().map(Vec::len), Some(1));
}

#[test]
fn a_due_tick_is_fired_once_by_the_command() {
    let s = scratch();
    // Put an hour ago (a clock of the library's own): sixty ticks are due for the command.
    let an_hour_ago = spindle::SystemClock.now_ms() - 3_600_000;
    let options = Options::default().clock(Arc::new(ManualClock::new(an_hour_ago)));
    let store = Store::open_with(s.db(), options).expect("open");
    let item = NewItem::new("q", json!({}));
    store.queue().put_schedule(Schedule::every("often", 60_000, item)).expect("put");
    store.close().expect("close");
    // Opening the store fires the missed ticks by itself; `run` finds none left.
    assert_eq!(s.json(&["queue", "schedules", "run"])["enqueued"], 0);
    let store = s.library();
    let stats = store.queue().stats().expect("stats");
    store.close().expect("close");
    let q = stats.iter().find(|stats| stats.queue == "q").expect("q");
    assert_eq!(q.pending + q.scheduled, 1, "skip: the latest of sixty ticks, once");
    let listed = s.json(&["queue", "schedules"]);
    let last = listed[0]["last_tick_ms"].as_i64().expect("a tick fired");
    assert!(listed[0]["next_tick_ms"].as_i64().expect("a next tick") > last);
}

#[test]
fn bad_schedules_exit_2_and_write_nothing() {
    let s = scratch();
    let put = ["queue", "schedules", "put", "bad", "--queue"];
    let cases: [(&[&str], &str); 9] = [
        (&["q", "--cron", "nope"], "cron expression"),
        (&["q", "--cron", "0 3 * * *", "--tz", "Mars/Olympus_Mons"], "time zone"),
        (&["q", "--every", "5x"], "duration"),
        (&["q", "--every", "10ms"], "interval"),
        (&["run:abc", "--every", "5m"], "belong to run abc"),
        (&["q", "--every", "5m", "--cron", "* * * * *"], "cannot be used with"),
        (&["q", "--every", "5m", "--payload", "{"], "not JSON"),
        (&["q", "--every", "5m", "--metadata", "[1]"], "metadata is a JSON object"),
        (&["q", "--every", "5m", "--run-timeout", "soon"], "duration"),
    ];
    for (args, said) in cases {
        let args: Vec<&str> = put.iter().chain(args).copied().collect();
        s.refused(&args, said);
    }
    let output = s.spindle(&["queue", "schedules", "put", "bad", "--queue", "q"]);
    assert_eq!(output.status.code(), Some(2), "neither --cron nor --every");
    let store = s.library();
    assert!(
        store.queue().schedules(Page::first(100)).expect("schedules").is_empty(),
        "nothing kept"
    );
    assert!(store.events().read_all(0, 10).expect("events").is_empty(), "no event");
    store.close().expect("close");
}
