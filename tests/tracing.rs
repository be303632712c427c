//! What the store tells `tracing`: a span per batch with its op count, its outcome and its
//! duration; a warning for a transaction closure refused for its SQL; a WAL checkpoint; the
//! recovery of running graphs at open. An inline store runs its batches on the caller's
//! thread, so a subscriber set for the test's thread sees them (and no other test's).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use spindle::{NodeOptions, NodeSpec, Options, Store, Stream, TxOutcome};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every span, recorded field and event, one line each: `span NAME k=v ..`, `record k=v ..`,
/// `event LEVEL k=v ..` (the message as `message=..`).
#[derive(Clone, Default)]
struct Recorder {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn lines(&self) -> Vec<String> {
        self.lines.lock().clone()
    }

    fn push(&self, line: String) {
        self.lines.lock().push(line);
    }
}

/// Writes fields as ` name=value`.
struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut line = format!("span {}", span.metadata().name());
        span.record(&mut Fields(&mut line));
        let mut lines = self.lines.lock();
        lines.push(line);
        Id::from_u64(lines.len() as u64)
    }

    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut line = "record".to_owned();
        values.record(&mut Fields(&mut line));
        self.push(line);
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = format!("event {}", event.metadata().level());
        event.record(&mut Fields(&mut line));
        self.push(line);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Runs `f` with `recorder` as this thread's subscriber. `tracing` caches per call site whether
/// anyone listens, and another test's thread may have filled that cache while no recorder of
/// this test was set: it is rebuilt first.
fn recorded<T>(recorder: &Recorder, f: impl FnOnce() -> T) -> T {
    tracing::subscriber::with_default(recorder.clone(), || {
        tracing::callsite::rebuild_interest_cache();
        f()
    })
}

fn inline_store() -> Store {
    Store::open_in_memory_with(Options::default().inline(true)).expect("open")
}

#[test]
fn each_batch_is_a_span_with_its_ops_outcome_and_duration() -> spindle::Result<()> {
    let recorder = Recorder::default();
    let store = inline_store();
    recorded(&recorder, || store.events().append(Stream::custom("s"), "e", json!(1)).map(drop))?;
    let lines = recorder.lines();
    let batch = lines.iter().position(|line| line == "span spindle.batch ops=1");
    let batch = batch.unwrap_or_else(|| panic!("no batch span in {lines:#?}"));
    let recorded = lines[batch..].iter().find(|line| line.starts_with("record outcome="));
    assert_eq!(recorded.map(String::as_str), Some("record outcome=committed"), "{lines:#?}");
    let duration = lines[batch..].iter().find(|line| line.starts_with("record duration_us="));
    let duration_us: u64 =
        duration.expect("a duration")["record duration_us=".len()..].parse().expect("microseconds");
    assert!(duration_us < 60_000_000, "{duration_us}");
    store.close()
}

#[test]
fn a_batch_slower_than_the_threshold_is_a_warning_and_counted() -> spindle::Result<()> {
    let recorder = Recorder::default();
    // Every batch takes longer than nothing.
    let options = Options::default().inline(true).slow_batch(Duration::ZERO);
    let store = Store::open_in_memory_with(options)?;
    recorded(&recorder, || store.events().append(Stream::custom("s"), "e", json!(1)).map(drop))?;
    let lines = recorder.lines();
    let warned =
        lines.iter().any(|line| line.starts_with("event WARN") && line.contains("slow batch"));
    assert!(warned, "{lines:#?}");
    assert!(store.metrics()?.slow_batches >= 1);
    let normal = inline_store();
    normal.events().append(Stream::custom("s"), "e", json!(1))?;
    assert_eq!(normal.metrics()?.slow_batches, 0, "half a second is far from a batch's cost");
    normal.close()?;
    store.close()
}

#[test]
fn a_refused_transaction_closure_is_a_warning() -> spindle::Result<()> {
    let recorder = Recorder::default();
    let store = inline_store();
    let refused = recorded(&recorder, || {
        store.transaction(|tx| {
            tx.sqlite()?.execute_batch("PRAGMA query_only=ON")?;
            Ok(TxOutcome::Commit(()))
        })
    });
    assert!(matches!(refused, Err(spindle::Error::Forbidden(_))), "{refused:?}");
    let lines = recorder.lines();
    let warned = lines
        .iter()
        .any(|line| line.starts_with("event WARN") && line.contains("transaction closure"));
    assert!(warned, "{lines:#?}");
    let outcome = lines.iter().find(|line| line.starts_with("record outcome="));
    assert!(outcome.is_some(), "the batch ended: {lines:#?}");
    store.close()
}

#[test]
fn running_graphs_recovered_at_open_are_told() -> spindle::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let store = Store::open(&path)?;
    let graph = store.graphs().create(json!({}))?;
    let node =
        store.graphs().add_node(&graph, NodeSpec::task(json!({})), NodeOptions::default())?;
    store.graphs().start(&graph)?;
    store.graphs().start_node(&graph, &node)?;
    store.close()?;
    let recorder = Recorder::default();
    let options = Options::default().inline(true);
    let reopened = recorded(&recorder, || Store::open_with(&path, options))?;
    let lines = recorder.lines();
    let told = lines.iter().find(|line| line.contains("recovered the running graphs"));
    let told = told.unwrap_or_else(|| panic!("no recovery event in {lines:#?}"));
    assert!(told.starts_with("event INFO") && told.contains("reset=1"), "{told}");
    reopened.close()
}

#[test]
fn a_wal_checkpoint_is_told() -> spindle::Result<()> {
    let recorder = Recorder::default();
    let dir = tempfile::tempdir().expect("tempdir");
    // A small WAL limit: a checkpoint is due after a few dozen kilobytes of commits.
    let options = Options::default().inline(true).wal_bytes_max(64 * 1024);
    let store = Store::open_with(dir.path().join("store.db"), options)?;
    recorded(&recorder, || -> spindle::Result<()> {
        for n in 0..200 {
            store.events().append(
                Stream::custom("s"),
                "e",
                json!({ "n": n, "pad": "x".repeat(512) }),
            )?;
        }
        Ok(())
    })?;
    let lines = recorder.lines();
    let told =
        lines.iter().any(|line| line.starts_with("event DEBUG") && line.contains("WAL checkpoint"));
    assert!(told, "{lines:#?}");
    store.close()
}
