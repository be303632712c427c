//! Calls kept in flight: `Store::submit` and `Pending`. The reply still comes after the
//! commit; ops submitted by one thread run in order; each stands alone.

mod common;

use std::time::Duration;

use serde_json::json;
use spindle::log::Append;
use spindle::queue::{Complete, Enqueue};
use spindle::{Error, NewItem, Options, Store, Stream, TxOutcome};

fn append(stream: &Stream, n: u64) -> Append {
    Append { stream: stream.clone(), event_type: "n".into(), payload: json!(n), idem_key: None }
}

#[test]
fn submitted_ops_run_in_order_and_answer_after_their_commit() -> spindle::Result<()> {
    let shared = common::SharedStore::new();
    let store = shared.open();
    let stream = Stream::custom("s");
    let pending: Vec<_> =
        (0..200).map(|n| store.submit(append(&stream, n))).collect::<spindle::Result<_>>()?;
    let seqs: Vec<u64> =
        pending.into_iter().map(|p| p.wait().map(|a| a.seq)).collect::<spindle::Result<_>>()?;
    assert_eq!(seqs, (1..=200).collect::<Vec<_>>(), "in submission order");
    // Acknowledged means committed: another connection to the store sees every one.
    let other = shared.open_with(Options::default().recover_on_open(false));
    assert_eq!(other.events().head(&stream)?, 200);
    other.close()?;
    Ok(())
}

#[test]
fn a_failed_op_does_not_stop_the_ones_after_it() -> spindle::Result<()> {
    let store = common::new_store();
    let stream = Stream::custom("s");
    let first = store.submit(append(&stream, 1))?;
    let stale = store.submit(Complete { id: "missing".into(), fence: 1, result: json!(1) })?;
    let last = store.submit(append(&stream, 2))?;
    assert_eq!(first.wait()?.seq, 1);
    assert!(matches!(stale.wait(), Err(Error::NotFound { .. })));
    assert_eq!(last.wait()?.seq, 2);
    Ok(())
}

#[test]
fn bad_shape_is_refused_at_submit_and_writes_nothing() -> spindle::Result<()> {
    let store = common::new_store();
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let refused = store.submit(Enqueue { item: NewItem::new("q", deep) });
    assert!(matches!(refused, Err(Error::TooLarge { .. } | Error::InvalidInput(_))));
    let bad_item = store.submit(Enqueue { item: NewItem::new("", json!(1)) })?;
    assert!(matches!(bad_item.wait(), Err(Error::InvalidInput(_))));
    assert!(store.queue().stats()?.is_empty());
    assert!(store.events().read_all(0, 10)?.is_empty());
    Ok(())
}

#[test]
fn a_reply_is_taken_once() -> spindle::Result<()> {
    let store = common::new_store();
    let mut pending = store.submit(append(&Stream::custom("s"), 1))?;
    let reply = pending.wait_timeout(Duration::from_secs(10)).expect("answered");
    assert_eq!(reply?.seq, 1);
    assert!(!pending.is_ready());
    assert!(matches!(pending.try_wait(), Some(Err(Error::InvalidInput(_)))));
    assert!(matches!(pending.wait(), Err(Error::InvalidInput(_))));
    Ok(())
}

#[test]
fn try_wait_says_none_until_the_reply_comes() -> spindle::Result<()> {
    let store = common::new_store();
    // A transaction holds the store's thread until the test lets it go.
    let (release, hold) = crossbeam_channel::bounded::<()>(0);
    let held = store.submit_transaction_for_test(hold);
    let mut pending = store.submit(append(&Stream::custom("s"), 1))?;
    assert!(pending.try_wait().is_none());
    assert!(pending.wait_timeout(Duration::from_millis(20)).is_none());
    release.send(()).expect("release the store's thread");
    held.join().expect("transaction thread")?;
    assert_eq!(pending.wait()?.seq, 1);
    Ok(())
}

#[test]
fn submit_is_refused_after_close_and_inside_a_transaction() -> spindle::Result<()> {
    let store = common::new_store();
    let queued = store.submit(append(&Stream::custom("s"), 1))?;
    store.close()?;
    assert_eq!(queued.wait()?.seq, 1, "close finishes the queued work");
    assert!(matches!(store.submit(append(&Stream::custom("s"), 2)), Err(Error::Closed)));

    let store = common::new_store();
    let inner = store.clone();
    let refused = store.transaction(move |_tx| {
        let refused = inner.submit(append(&Stream::custom("s"), 1)).err();
        Ok(TxOutcome::Commit(refused))
    })?;
    assert!(matches!(refused, Some(Error::InvalidInput(_))));
    Ok(())
}

#[test]
fn an_inline_store_answers_a_submit_at_once() -> spindle::Result<()> {
    let store = common::new_store_with(Options::default().inline(true));
    let pending = store.submit(append(&Stream::custom("s"), 1))?;
    assert!(pending.is_ready());
    assert_eq!(pending.wait()?.seq, 1);
    Ok(())
}

/// Runs, on a thread of its own, a transaction that waits for `hold` on the store's thread.
trait HoldTheStore {
    fn submit_transaction_for_test(
        &self,
        hold: crossbeam_channel::Receiver<()>,
    ) -> std::thread::JoinHandle<spindle::Result<()>>;
}

impl HoldTheStore for Store {
    fn submit_transaction_for_test(
        &self,
        hold: crossbeam_channel::Receiver<()>,
    ) -> std::thread::JoinHandle<spindle::Result<()>> {
        let store = self.clone();
        let (entered_tx, entered) = crossbeam_channel::bounded::<()>(1);
        let handle = std::thread::spawn(move || {
            store.transaction(move |_tx| {
                let _ = entered_tx.send(());
                let _ = hold.recv();
                Ok(TxOutcome::Commit(()))
            })
        });
        entered.recv().expect("the transaction is running");
        handle
    }
}
