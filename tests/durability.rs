//! Durability and lifecycle: reopen keeps everything, close checkpoints and truncates the WAL,
//! dropping the last handle closes, and every call after close is `Closed` at once.

mod common;

use std::time::Duration;

use common::{append_n, assert_dense, read_stream, temp_store, temp_store_with};
use serde_json::json;
use spindle::{Durability, Error, Options, Store, Stream, TxOutcome};

#[test]
fn reopen_keeps_everything() -> spindle::Result<()> {
    let t = temp_store();
    let (a, b) = (Stream::custom("a"), Stream::graph("g"));
    append_n(&t.store, &a, 50);
    t.store.tenant("other")?.events().append(&b, "x", json!(1))?;
    t.store.events().append_idempotent(&b, "y", json!(2), "key")?;
    t.store.close()?;

    let store = Store::open(&t.path)?;
    let events = read_stream(&store, &a);
    assert_dense(&events);
    assert_eq!(events.len(), 50);
    assert_eq!(common::payload_i(&events[49]), 49);
    assert_eq!(store.tenant("other")?.events().head(&b)?, 1);
    // Idempotency survives the restart, and so does the sequence.
    assert!(store.events().append_idempotent(&b, "y", json!(2), "key")?.existed);
    assert_eq!(store.events().append(&a, "next", json!(null))?.seq, 51);
    Ok(())
}

#[test]
fn close_checkpoints_and_truncates_the_wal() -> spindle::Result<()> {
    let t = temp_store();
    append_n(&t.store, &Stream::custom("w"), 200);
    let wal = t.path.with_file_name("store.db-wal");
    assert!(std::fs::metadata(&wal)?.len() > 0, "writes went to the WAL");
    t.store.close()?;
    let wal_bytes = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(wal_bytes, 0);
    Ok(())
}

#[test]
fn dropping_the_last_handle_closes_the_store() -> spindle::Result<()> {
    let t = temp_store();
    let s = Stream::custom("d");
    let clone = t.store.clone();
    append_n(&clone, &s, 10);
    drop(clone);
    t.store.events().append(&s, "still open", json!(null))?; // a clone's drop closes nothing
    let path = t.path.clone();
    drop(t.store);
    let wal = path.with_file_name("store.db-wal");
    assert_eq!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0), 0);
    let store = Store::open(&path)?;
    assert_eq!(store.events().head(&s)?, 11);
    Ok(())
}

#[test]
fn every_call_after_close_is_closed() -> spindle::Result<()> {
    let store = Store::open_in_memory()?;
    let s = Stream::custom("c");
    let view = store.tenant("acme")?;
    let mut follower = store.subscribe(&s, 0)?;
    assert!(follower.try_recv()?.is_none());
    store.close()?;
    assert!(matches!(store.events().append(&s, "x", json!(1)), Err(Error::Closed)));
    assert!(matches!(view.events().head(&s), Err(Error::Closed)));
    assert!(matches!(store.transaction(|_| Ok(TxOutcome::Commit(()))), Err(Error::Closed)));
    assert!(matches!(store.subscribe(&s, 0), Err(Error::Closed)));
    assert!(matches!(follower.recv_timeout(Duration::from_secs(10)), Err(Error::Closed)));
    assert!(matches!(follower.recv_timeout(Duration::MAX), Err(Error::Closed)), "no overflow");
    assert!(matches!(follower.recv(), Err(Error::Closed)));
    assert!(follower.next().is_none());
    store.close()?; // closing again is fine
    Ok(())
}

#[test]
fn normal_durability_opens_and_keeps_commits_across_reopen() -> spindle::Result<()> {
    let options = Options::default().durability(Durability::Normal);
    let t = temp_store_with(options.clone());
    let s = Stream::custom("n");
    append_n(&t.store, &s, 20);
    t.store.close()?;
    let store = Store::open_with(&t.path, options)?;
    assert_eq!(store.events().head(&s)?, 20);
    Ok(())
}

#[test]
fn another_connection_sees_wal_mode_and_the_schema_version() -> spindle::Result<()> {
    let t = temp_store();
    let conn = rusqlite::Connection::open(&t.path).map_err(Error::from)?;
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    assert_eq!(mode, "wal");
    assert_eq!(version, 7);
    Ok(())
}

#[test]
fn the_actor_keeps_the_wal_under_its_limit() -> spindle::Result<()> {
    let wal_bytes_max = 1024 * 1024;
    let options = Options::default().wal_bytes_max(wal_bytes_max).durability(Durability::Normal);
    let t = temp_store_with(options);
    let wal = t.path.with_file_name("store.db-wal");
    let s = Stream::custom("w");
    let mut wal_max = 0;
    for i in 0..3_000 {
        t.store.events().append(&s, "pad", json!({ "i": i, "pad": "p".repeat(1_000) }))?;
        wal_max = wal_max.max(std::fs::metadata(&wal)?.len());
    }
    // About 3 MB went through a WAL that must never have held more than 1 MiB.
    assert!(wal_max <= wal_bytes_max, "WAL reached {wal_max} bytes");
    assert_eq!(t.store.events().head(&s)?, 3_000);
    Ok(())
}

#[test]
fn default_options_are_the_safe_ones_and_the_pragmas_took() -> spindle::Result<()> {
    let defaults = Options::default();
    assert_eq!(defaults.durability, Durability::Full);
    assert_eq!((defaults.batch_max, defaults.mailbox_capacity), (64, 1024));
    assert_eq!(defaults.busy_timeout, Duration::from_secs(5));
    assert!(!defaults.read_only);

    let pragmas = |store: &Store| {
        store.transaction(|tx| {
            let read = |name: &str| -> spindle::Result<String> {
                let sql = format!("PRAGMA {name}");
                let value: rusqlite::types::Value =
                    tx.sqlite()?.query_row(&sql, [], |r| r.get(0))?;
                Ok(format!("{value:?}"))
            };
            let tenants: String =
                tx.sqlite()?
                    .query_row("SELECT group_concat(tenant_id) FROM tenants", [], |r| r.get(0))?;
            let found =
                [read("journal_mode")?, read("synchronous")?, read("foreign_keys")?, tenants];
            Ok(TxOutcome::Rollback(found))
        })
    };
    let t = temp_store();
    let full = pragmas(&t.store)?;
    assert_eq!(full, ["Text(\"wal\")", "Integer(2)", "Integer(1)", "default"]);
    t.store.close()?;
    let normal = Store::open_with(&t.path, defaults.durability(Durability::Normal))?;
    assert_eq!(pragmas(&normal)?[1], "Integer(1)");
    Ok(())
}

#[test]
fn a_version_three_file_opens_migrated_and_keeps_its_events_items_and_positions()
-> spindle::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v3.db");
    let conn = rusqlite::Connection::open(&path).map_err(Error::from)?;
    conn.execute_batch(include_str!("fixtures/schema_v3.sql")).map_err(Error::from)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         INSERT INTO events (tenant_id, stream_kind, stream_id, seq, event_type, payload,
             created_at_ms)
         VALUES ('default', 'custom', 's', 1, 't', '{}', 0),
                ('default', 'custom', 's', 2, 't', '{}', 0),
                ('default', 'custom', 'gone', 1, 't', '{}', 0);
         DELETE FROM events WHERE stream_id = 'gone';
         INSERT INTO queue_items (tenant_id, item_id, queue, payload, priority, run_at_ms,
             attempt, max_attempts, backoff_base_ms, backoff_max_ms, status, fence,
             created_at_ms, updated_at_ms)
         VALUES ('default', 'old-item', 'q', '{\"kept\":true}', 0, 0, 1, 3, 1000, 64000,
                 'pending', 4, 0, 0);",
    )
    .map_err(Error::from)?;
    drop(conn);
    let store = Store::open(&path)?;
    assert_eq!(store.events().head(Stream::custom("s"))?, 2);
    let appended = store.events().append(Stream::custom("s"), "t", json!({}))?;
    assert_eq!((appended.seq, appended.position), (3, 4), "position 3 was handed out before");
    let claimed = store.queue().claim("w", &["q"], 1_000)?.expect("the old item");
    assert_eq!((claimed.item.id.as_str(), claimed.fence), ("old-item", 5));
    assert_eq!(claimed.item.payload, json!({ "kept": true }));
    assert!(store.queue().item_events("q")?);
    store.close()?;
    Ok(())
}
