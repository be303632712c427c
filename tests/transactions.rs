//! Guarantees 1, 2 and 9 through the public API: replies after commit, all-or-nothing
//! operations and transactions, panics caught and rolled back.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::json;
use spindle::{Error, Store, Stream, TxOutcome};

#[test]
fn an_acknowledged_append_is_visible_to_another_connection_at_once() {
    let shared = common::SharedStore::new();
    let store = shared.open();
    let stream = Stream::custom("acked");
    for expected in 1..=5 {
        store.events().append(&stream, "e", json!(expected)).expect("append");
        // The reply came back: the row must already be committed, so a second connection sees it.
        assert_eq!(shared.raw_count("SELECT count(*) FROM events"), expected);
    }
}

#[test]
fn commit_keeps_every_write_of_a_transaction() -> spindle::Result<()> {
    let store = common::new_store();
    let stream = Stream::custom("t");
    let s = stream.clone();
    let seqs = store.transaction(move |tx| {
        let a = tx.append_event(&s, "a", json!(1))?;
        let b = tx.append_event(&s, "b", json!(2))?;
        Ok(TxOutcome::Commit((a.seq, b.seq)))
    })?;
    assert_eq!(seqs, (1, 2));
    assert_eq!(store.events().head(&stream)?, 2);
    Ok(())
}

#[test]
fn rollback_and_err_leave_no_rows_and_publish_nothing() -> spindle::Result<()> {
    let store = common::new_store();
    let stream = Stream::custom("t");
    let mut follower = store.subscribe(&stream, 0)?;
    assert!(follower.try_recv()?.is_none(), "nothing yet; now live");

    let s = stream.clone();
    let value = store.transaction(move |tx| {
        tx.append_event(&s, "rolled-back", json!(1))?;
        Ok(TxOutcome::Rollback("kept value"))
    })?;
    assert_eq!(value, "kept value");

    let s = stream.clone();
    let failed = store.transaction(move |tx| -> spindle::Result<TxOutcome<()>> {
        tx.append_event(&s, "failed", json!(2))?;
        Err(Error::Conflict("the caller changed its mind".into()))
    });
    assert!(matches!(failed, Err(Error::Conflict(_))));

    assert_eq!(store.events().head(&stream)?, 0);
    assert!(store.events().read_all(0, 100)?.is_empty());

    store.events().append(&stream, "committed", json!(3))?;
    let event = follower.recv_timeout(Duration::from_secs(10))?.expect("the committed event");
    assert_eq!((event.seq, event.event_type.as_str()), (1, "committed"));
    assert!(follower.try_recv()?.is_none());
    Ok(())
}

#[test]
fn a_failed_inner_op_rolls_back_only_its_own_writes() -> spindle::Result<()> {
    let store = common::new_store();
    let stream = Stream::custom("t");
    let s = stream.clone();
    let outcome = store.transaction(move |tx| {
        tx.append_event(&s, "first", json!(1))?;
        let bad = spindle::log::Append {
            stream: s.clone(),
            event_type: String::new(), // invalid: rolled back alone
            payload: json!(2),
            idem_key: None,
        };
        let inner = tx.exec(bad);
        tx.append_event(&s, "third", json!(3))?;
        Ok(TxOutcome::Commit(inner.is_err()))
    })?;
    assert!(outcome);
    let types: Vec<String> =
        store.events().read(&stream, 0, 10)?.into_iter().map(|e| e.event_type).collect();
    assert_eq!(types, ["first", "third"]);
    Ok(())
}

#[test]
fn a_panicking_transaction_is_rolled_back_and_the_store_stays_usable() -> spindle::Result<()> {
    let store = common::new_store();
    let stream = Stream::custom("t");
    let s = stream.clone();
    let result = store.transaction(move |tx| -> spindle::Result<TxOutcome<()>> {
        tx.append_event(&s, "before-panic", json!(1))?;
        panic!("deliberate panic inside a transaction");
    });
    match result {
        Err(Error::OpPanicked(message)) => assert!(message.contains("deliberate panic")),
        other => panic!("expected OpPanicked, got {other:?}"),
    }
    assert_eq!(store.events().head(&stream)?, 0);
    store.events().append(&stream, "after", json!(2))?;
    assert_eq!(store.events().head(&stream)?, 1);
    Ok(())
}

#[test]
fn a_panic_among_concurrent_transactions_costs_only_itself() -> spindle::Result<()> {
    let store = common::new_store();
    let stream = Stream::custom("t");
    let barrier = Arc::new(Barrier::new(20));
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let (store, stream, barrier) = (store.clone(), stream.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                store.transaction(move |tx| {
                    tx.append_event(&stream, "e", json!(i))?;
                    assert!(i != 7, "job 7 panics");
                    Ok(TxOutcome::Commit(()))
                })
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("thread")).collect();
    let panicked = results.iter().filter(|r| matches!(r, Err(Error::OpPanicked(_)))).count();
    assert_eq!(panicked, 1);
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 19);
    let kept = common::read_stream(&store, &stream);
    common::assert_dense(&kept);
    assert_eq!(kept.len(), 19);
    assert!(kept.iter().all(|event| event.payload != json!(7)));
    Ok(())
}

#[test]
fn a_commit_through_raw_sql_keeps_nothing_and_the_store_carries_on() -> spindle::Result<()> {
    if common::sqlite_only("raw SQL through Tx::sqlite") {
        return Ok(());
    }
    let store = common::new_store();
    let stream = Stream::custom("t");
    let mut follower = store.subscribe(&stream, 0)?;
    assert!(follower.try_recv()?.is_none());
    let s = stream.clone();
    let result = store.transaction(move |tx| {
        tx.append_event(&s, "sneaky", json!(1))?;
        tx.sqlite()?.execute_batch("COMMIT")?;
        Ok(TxOutcome::Commit(()))
    });
    assert!(result.is_err());
    assert_eq!(store.events().head(&stream)?, 0, "the early commit was turned into a rollback");
    store.events().append(&stream, "after", json!(2))?;
    let event = follower.recv()?;
    assert_eq!((event.seq, event.event_type.as_str()), (1, "after"));
    Ok(())
}

#[test]
fn a_call_back_into_the_store_from_inside_an_op_is_refused_not_hung() -> spindle::Result<()> {
    let store = common::new_store();
    let inner = store.clone();
    let inner_result = store.transaction(move |_tx| {
        let head = inner.events().head(Stream::custom("x"));
        let subscribe = inner.subscribe(Stream::custom("x"), 0).map(|_| ());
        let close = inner.close();
        Ok(TxOutcome::Commit((head, subscribe, close)))
    })?;
    assert!(matches!(inner_result.0, Err(Error::InvalidInput(_))));
    assert!(matches!(inner_result.1, Err(Error::InvalidInput(_))));
    assert!(matches!(inner_result.2, Err(Error::InvalidInput(_))));
    // The refused close changed nothing: the store still works and closes properly.
    store.events().append(Stream::custom("x"), "after", json!(1))?;
    store.close()?;
    assert!(matches!(store.events().head(Stream::custom("x")), Err(Error::Closed)));
    Ok(())
}

#[test]
fn a_subscription_read_inside_an_op_is_refused_not_hung() -> spindle::Result<()> {
    let store = common::new_store();
    let mut follower = store.subscribe(Stream::custom("s"), 0)?;
    let refused = store.transaction(move |_tx| {
        Ok(TxOutcome::Commit(matches!(follower.recv(), Err(Error::InvalidInput(_)))))
    })?;
    assert!(refused);
    Ok(())
}

/// Runs `sql` in a closure that appends to `stream` first and swallows the SQL's error: the
/// whole closure must still be refused (`Forbidden`) with nothing written.
fn assert_refused_whole(store: &Store, stream: &Stream, sql: &'static str) {
    let s = stream.clone();
    let before = store.events().head(stream).expect("head");
    let result = store.transaction(move |tx| {
        tx.append_event(&s, "swallowed", json!(1))?;
        let refused = tx.sqlite()?.execute_batch(sql).is_err();
        Ok(TxOutcome::Commit(refused))
    });
    assert!(matches!(result, Err(Error::Forbidden(_))), "{sql}: {result:?}");
    assert_eq!(store.events().head(stream).expect("head"), before, "{sql} kept a write");
}

#[test]
fn transaction_and_savepoint_statements_through_raw_sql_are_refused() -> spindle::Result<()> {
    if common::sqlite_only("raw SQL through Tx::sqlite") {
        return Ok(());
    }
    let store = common::new_store();
    let stream = Stream::custom("t");
    for sql in ["SAVEPOINT mine", "ROLLBACK", "RELEASE op", "BEGIN", "COMMIT"] {
        assert_refused_whole(&store, &stream, sql);
    }
    // Ordinary statements on the caller's own tables still work, with the store's ops.
    let s = stream.clone();
    store.transaction(move |tx| {
        tx.append_event(&s, "kept", json!(1))?;
        tx.sqlite()?
            .execute_batch("CREATE TABLE mine (x INTEGER); INSERT INTO mine VALUES (1);")?;
        Ok(TxOutcome::Commit(()))
    })?;
    assert_eq!(store.events().head(&stream)?, 1);
    Ok(())
}

#[test]
fn raw_sql_may_read_the_stores_tables_but_not_write_or_reshape_them() -> spindle::Result<()> {
    if common::sqlite_only("raw SQL through Tx::sqlite") {
        return Ok(());
    }
    let store = common::new_store();
    let stream = Stream::custom("guarded");
    store.events().append(&stream, "kept", json!(1))?;
    for sql in [
        "DELETE FROM events",
        "UPDATE events SET payload = '0'",
        "INSERT INTO stream_heads VALUES ('default', 'custom', 'guarded', 0)",
        "DELETE FROM queue_items",
        "CREATE TRIGGER mine AFTER INSERT ON events BEGIN SELECT 1; END",
        "CREATE TEMP TRIGGER mine AFTER INSERT ON events BEGIN SELECT 1; END",
        "DROP TABLE event_keys",
        "ALTER TABLE events ADD COLUMN extra TEXT",
    ] {
        assert_refused_whole(&store, &stream, sql);
    }
    let count = store.transaction(|tx| {
        let count: i64 = tx.sqlite()?.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        // Its own tables are the caller's to shape and write, and ops still work in between.
        tx.sqlite()?.execute_batch(
            "CREATE TABLE projection (seq INTEGER);
             CREATE TRIGGER feed AFTER INSERT ON projection BEGIN SELECT 1; END;
             INSERT INTO projection VALUES (1);",
        )?;
        tx.append_event(Stream::custom("guarded"), "from closure", json!(2))?;
        tx.exec(spindle::queue::Enqueue { item: spindle::NewItem::new("q", json!(3)) })?;
        Ok(TxOutcome::Commit(count))
    })?;
    assert_eq!(count, 1, "reads are allowed");
    assert_eq!(store.events().head(&stream)?, 2);
    assert_eq!(store.queue().stats()?[0].pending, 1);
    Ok(())
}

#[test]
fn raw_sql_is_the_engines_own_and_the_other_engine_refuses_it_writing_nothing()
-> spindle::Result<()> {
    let store = common::new_store();
    let stream = Stream::custom("raw");
    let s = stream.clone();
    let result = store.transaction(move |tx| {
        tx.append_event(&s, "before", json!(1))?;
        let sql = tx.sqlite()?;
        let one: i64 = sql.query_row("SELECT 1", [], |row| row.get(0))?;
        Ok(TxOutcome::Commit(one))
    });
    if common::on_postgres() {
        assert!(matches!(result, Err(Error::WrongEngine(_))), "{result:?}");
        assert!(store.events().read(&stream, 0, 10)?.is_empty(), "nothing was written");
    } else {
        assert_eq!(result?, 1);
        assert_eq!(store.events().read(&stream, 0, 10)?.len(), 1);
    }
    Ok(())
}

/// A closure's own SQL on a PostgreSQL store: it commits with the ops, a failed statement is
/// rolled back alone, and transaction control is refused with nothing written.
#[cfg(feature = "postgres")]
#[test]
fn raw_sql_on_postgres_commits_with_the_ops_and_refuses_transaction_control() -> spindle::Result<()>
{
    let store = common::new_store();
    if !common::on_postgres() {
        let refused = store.transaction(|tx| Ok(TxOutcome::Commit(tx.postgres().map(drop))))?;
        assert!(matches!(refused, Err(Error::WrongEngine(_))), "{refused:?}");
        return Ok(());
    }
    let stream = Stream::custom("pg-raw");
    let s = stream.clone();
    store.transaction(move |tx| {
        tx.append_event(&s, "made", json!(1))?;
        let sql = tx.postgres()?;
        sql.execute("CREATE TABLE mine (x BIGINT)", &[])?;
        sql.execute("INSERT INTO mine VALUES ($1)", &[&1_i64])?;
        assert!(sql.execute("INSERT INTO nowhere VALUES (1)", &[]).is_err());
        sql.execute("INSERT INTO mine VALUES ($1)", &[&2_i64])?;
        Ok(TxOutcome::Commit(()))
    })?;
    let s = stream.clone();
    let refused = store.transaction(move |tx| {
        tx.append_event(&s, "lost", json!(2))?;
        tx.postgres()?.execute("COMMIT", &[])?;
        Ok(TxOutcome::Commit(()))
    });
    assert!(matches!(refused, Err(Error::Forbidden(_))), "{refused:?}");
    let rows: i64 = store.transaction(|tx| {
        let row = tx.postgres()?.query("SELECT count(*) FROM mine", &[])?;
        Ok(TxOutcome::Rollback(row[0].get(0)))
    })?;
    assert_eq!(rows, 2, "both inserts committed, the failed one alone rolled back");
    let events = store.events().read(&stream, 0, 10)?;
    assert_eq!(events.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>(), ["made"]);
    Ok(())
}
