//! Raw SQL in a transaction closure (`Tx::sql`) cannot change the store's connection: every
//! statement that would outlive its transaction (pragmas, temporary objects, attached
//! databases, statistics) or go around the store's operations is refused with `Forbidden`,
//! writes nothing, and leaves the store writing durably for every tenant, for the owner's view
//! and for a token's view alike.

mod common;

use common::temp_store;
use serde_json::json;
use spindle::{Error, NewItem, Role, Store, Stream, TxOutcome};

/// A store file with a tenant `acme` whose admin token opens a view bound to it.
struct Fixture {
    t: common::TempStore,
    secret: String,
}

impl Fixture {
    fn new() -> Self {
        let t = temp_store();
        t.store.auth().create_tenant("acme", "Acme").expect("tenant");
        let acme = t.store.tenant("acme").expect("view");
        let (secret, _) = acme.auth().create_token("ops", Role::Admin, None).expect("token");
        let secret = secret.expose().to_owned();
        Self { t, secret }
    }

    /// The owner's view and the token's view, named.
    fn views(&self) -> Vec<(&'static str, Store)> {
        let token = self.t.store.authenticate(&self.secret).expect("authenticate");
        vec![("owner", self.t.store.clone()), ("token", token)]
    }

    /// Every tenant's view, for writing: the owner's default tenant and acme.
    fn writers(&self) -> [Store; 2] {
        [self.t.store.clone(), self.t.store.tenant("acme").expect("view")]
    }
}

/// Runs `sql` in a closure on `view` after appending an event in the same closure: the closure
/// must fail with `Forbidden`, and the event must not be there.
fn assert_refused(view: &Store, who: &str, sql: &str) {
    let stream = Stream::custom("refused");
    let before = view.events().head(&stream).expect("head");
    let owned = sql.to_owned();
    let s = stream.clone();
    let result = view.transaction(move |tx| {
        tx.append_event(&s, "before the sql", json!(1))?;
        tx.sqlite()?.execute_batch(&owned)?;
        Ok(TxOutcome::Commit(()))
    });
    assert!(matches!(result, Err(Error::Forbidden(_))), "{who}: {sql}: got {result:?}");
    assert_eq!(view.events().head(&stream).expect("head"), before, "{who}: {sql} wrote");
}

/// Appends to a stream of every tenant and enqueues an item: every call must succeed.
fn write_everywhere(fixture: &Fixture, round: u64) {
    for store in fixture.writers() {
        let appended = store.events().append(Stream::custom("after"), "n", json!(round));
        assert_eq!(appended.expect("append after the refused sql").seq, round);
        store.queue().enqueue(NewItem::new("q", json!(round))).expect("enqueue");
    }
}

/// Closes, reopens and checks that every acknowledged write of `write_everywhere` is there.
fn assert_durable(fixture: Fixture, rounds: u64) {
    let Fixture { t, .. } = fixture;
    t.store.close().expect("close");
    let store = Store::open(&t.path).expect("reopen");
    for view in [store.clone(), store.tenant("acme").expect("view")] {
        let events = view.events().read(Stream::custom("after"), 0, 1000).expect("read");
        let payloads: Vec<u64> = events.iter().filter_map(|e| e.payload.as_u64()).collect();
        assert_eq!(payloads, (1..=rounds).collect::<Vec<_>>());
        let pending: u64 = view.queue().stats().expect("stats").iter().map(|s| s.pending).sum();
        assert_eq!(pending, rounds);
    }
    let check = store.transaction(|tx| {
        let check: String = tx.sqlite()?.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        Ok(TxOutcome::Rollback(check))
    });
    assert_eq!(check.expect("integrity check"), "ok");
    store.close().expect("close");
}

/// Runs every statement of `attacks` on both views, each refused, then writes everywhere and
/// checks durability across a reopen.
fn assert_all_refused(attacks: &[&str]) {
    let fixture = Fixture::new();
    let mut rounds = 0;
    for (who, view) in fixture.views() {
        for sql in attacks {
            assert_refused(&view, who, sql);
            rounds += 1;
            write_everywhere(&fixture, rounds);
        }
    }
    assert_durable(fixture, rounds);
}

#[test]
fn temporary_tables_cannot_shadow_the_stores_tables_and_acknowledged_appends_survive()
-> spindle::Result<()> {
    let t = temp_store();
    let stream = Stream::custom("st");
    t.store.events().append(&stream, "e", json!(0))?;
    let shadow = t.store.transaction(|tx| {
        tx.sqlite()?.execute_batch(
            "CREATE TEMP TABLE stream_heads AS SELECT * FROM main.stream_heads WHERE 0;
             CREATE TEMP TABLE events AS SELECT * FROM main.events WHERE 0;",
        )?;
        Ok(TxOutcome::Commit(()))
    });
    let Err(Error::Forbidden(message)) = shadow else { panic!("got {shadow:?}") };
    assert!(message.contains("temporary"), "{message}");
    for i in 1..=3 {
        assert_eq!(t.store.events().append(&stream, "e", json!(i))?.seq, i + 1);
    }
    t.store.close()?;
    let store = Store::open(&t.path)?;
    assert_eq!(store.events().head(&stream)?, 4, "every acknowledged append is on disk");
    Ok(())
}

#[test]
fn a_tenants_admin_token_cannot_make_the_store_read_only() -> spindle::Result<()> {
    let fixture = Fixture::new();
    let view = fixture.t.store.authenticate(&fixture.secret)?;
    let result = view.transaction(|tx| {
        tx.sqlite()?.execute_batch("PRAGMA query_only=ON")?;
        Ok(TxOutcome::Commit(()))
    });
    let Err(Error::Forbidden(message)) = result else { panic!("got {result:?}") };
    assert!(message.contains("query_only"), "the error names what was refused: {message}");
    write_everywhere(&fixture, 1);
    view.events().append(Stream::custom("mine"), "e", json!(1))?;
    assert_durable(fixture, 1);
    Ok(())
}

#[test]
fn every_pragma_that_changes_the_connection_is_refused() {
    assert_all_refused(&[
        "PRAGMA query_only = ON",
        "PRAGMA writable_schema = ON",
        "PRAGMA foreign_keys = OFF",
        "PRAGMA ignore_check_constraints = ON",
        "PRAGMA reverse_unordered_selects = ON",
        "PRAGMA cache_size = 1",
        "PRAGMA busy_timeout = 0",
        "PRAGMA recursive_triggers = ON",
        "PRAGMA defer_foreign_keys = ON",
        "PRAGMA synchronous = OFF",
        "PRAGMA journal_mode = DELETE",
        "PRAGMA max_page_count = 1",
        "PRAGMA user_version = 99",
        "PRAGMA application_id = 7",
        "PRAGMA case_sensitive_like = ON",
        "PRAGMA automatic_index = OFF",
        "PRAGMA cell_size_check = ON",
        "PRAGMA trusted_schema = ON",
        "PRAGMA temp_store = MEMORY",
        "PRAGMA mmap_size = 0",
        "PRAGMA soft_heap_limit = 1",
        "PRAGMA threads = 4",
        "PRAGMA optimize",
        "PRAGMA shrink_memory",
        "PRAGMA wal_checkpoint(TRUNCATE)",
        "PRAGMA incremental_vacuum",
        "SELECT * FROM pragma_foreign_key_check",
    ]);
}

#[test]
fn temporary_objects_of_every_kind_are_refused() {
    assert_all_refused(&[
        "CREATE TEMP TABLE events (x)",
        "CREATE TABLE temp.queue_items (x)",
        "CREATE TEMP TABLE scratch (x)",
        "CREATE TEMP VIEW events AS SELECT 1",
        "CREATE TEMP VIEW graphs AS SELECT * FROM main.graphs WHERE 0",
        "CREATE TEMP TRIGGER t AFTER INSERT ON events BEGIN SELECT 1; END",
        "CREATE VIRTUAL TABLE temp.v USING fts5(a)",
    ]);
}

#[test]
fn attaching_analysing_and_reshaping_the_stores_tables_are_refused() {
    assert_all_refused(&[
        "ATTACH DATABASE ':memory:' AS other",
        "ANALYZE",
        "ANALYZE main",
        "UPDATE sqlite_sequence SET seq = 0",
        "DELETE FROM sqlite_sequence",
        "CREATE INDEX mine ON events (event_type)",
        "CREATE INDEX mine ON queue_items (payload)",
        "DROP INDEX events_by_tenant_position",
        "DROP TABLE event_keys",
        "DETACH DATABASE temp",
        "SELECT fts3_tokenizer('simple')",
        "SELECT load_extension('x')",
        "CREATE TRIGGER mine AFTER INSERT ON events BEGIN SELECT 1; END",
        "DELETE FROM events",
        "UPDATE queue_items SET fence = 0",
        "ALTER TABLE events RENAME TO old_events",
        "BEGIN",
        "COMMIT",
        "SAVEPOINT mine",
    ]);
}

#[test]
fn a_foreign_key_from_a_callers_table_into_the_stores_is_refused() {
    assert_all_refused(&[
        "CREATE TABLE pin (item INTEGER REFERENCES queue_items (rowid))",
        "CREATE TABLE mine (x); ALTER TABLE mine ADD COLUMN e INTEGER REFERENCES events (position)",
    ]);
}

#[test]
fn a_closure_that_swallows_a_refusal_is_still_refused_whole_and_writes_nothing()
-> spindle::Result<()> {
    let fixture = Fixture::new();
    for (who, view) in fixture.views() {
        let stream = Stream::custom("swallowed");
        let s = stream.clone();
        let result = view.transaction(move |tx| {
            tx.append_event(&s, "before", json!(1))?;
            let sql = tx.sqlite()?;
            let refused = ["PRAGMA query_only = ON", "CREATE TEMP TABLE events (x)"]
                .map(|statement| matches!(sql.execute_batch(statement), Err(Error::Forbidden(_))));
            tx.sqlite()?.execute_batch(
                "CREATE TABLE IF NOT EXISTS mine (x); INSERT INTO mine VALUES (1)",
            )?;
            Ok(TxOutcome::Commit(refused))
        });
        assert!(matches!(result, Err(Error::Forbidden(_))), "{who}: {result:?}");
        assert_eq!(view.events().head(&stream)?, 0, "{who}: the closure's event");
    }
    write_everywhere(&fixture, 1);
    let state = fixture.t.store.transaction(|tx| {
        let tables: i64 = tx.sqlite()?.query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'mine'",
            [],
            |r| r.get(0),
        )?;
        let query_only: i64 = tx.sqlite()?.query_row("PRAGMA query_only", [], |r| r.get(0))?;
        Ok(TxOutcome::Rollback((tables, query_only)))
    })?;
    assert_eq!(state, (0, 0), "neither the caller's table nor the pragma was kept");
    assert_durable(fixture, 1);
    Ok(())
}

#[test]
fn a_token_view_may_not_plant_triggers_or_virtual_tables() {
    let fixture = Fixture::new();
    fixture
        .t
        .store
        .transaction(|tx| {
            tx.sqlite()?.execute_batch("CREATE TABLE shared (x)")?;
            Ok(TxOutcome::Commit(()))
        })
        .expect("the owner's table");
    let token = fixture.t.store.authenticate(&fixture.secret).expect("authenticate");
    for sql in [
        "CREATE TABLE loot (x); CREATE TRIGGER steal AFTER INSERT ON shared \
         BEGIN INSERT INTO loot SELECT payload FROM main.events; END",
        "CREATE VIRTUAL TABLE pages USING dbstat",
        "CREATE VIRTUAL TABLE copy USING fts5(payload, content='events')",
    ] {
        assert_refused(&token, "token", sql);
    }
    // The owner's own trigger and virtual table are the owner's business.
    fixture
        .t
        .store
        .transaction(|tx| {
            tx.sqlite()?.execute_batch(
                "CREATE TABLE log (x);
                 CREATE TRIGGER audit AFTER INSERT ON shared BEGIN INSERT INTO log VALUES (NEW.x); END;
                 INSERT INTO shared VALUES (1);
                 CREATE VIRTUAL TABLE notes USING fts5(body);
                 INSERT INTO notes (body) VALUES ('hello');
                 REINDEX;",
            )?;
            Ok(TxOutcome::Commit(()))
        })
        .expect("the owner's trigger and virtual table");
    write_everywhere(&fixture, 1);
    assert_durable(fixture, 1);
}

#[test]
fn a_token_views_closure_may_append_to_an_unregistered_process_stream() -> spindle::Result<()> {
    let fixture = Fixture::new();
    let token = fixture.t.store.authenticate(&fixture.secret)?;
    // Deciding whether the stream belongs to the registry reads the store's tables: that is
    // the store's own read, not the confined caller's.
    let appended = token.transaction(|tx| {
        let appended = tx.append_event(Stream::process("not-registered"), "e", json!(1))?;
        Ok(TxOutcome::Commit(appended.seq))
    })?;
    assert_eq!(appended, 1);
    Ok(())
}

#[test]
fn a_foreign_key_made_by_another_connection_is_not_the_closures_fault() -> spindle::Result<()> {
    let fixture = Fixture::new();
    let path = fixture.t.path.clone();
    let other = rusqlite::Connection::open(&path)?;
    other.execute_batch("CREATE TABLE legacy (item INTEGER REFERENCES queue_items (rowid))")?;
    drop(other);
    let ran = fixture.t.store.transaction(|tx| {
        tx.sqlite()?
            .execute_batch("CREATE TABLE IF NOT EXISTS mine (x); INSERT INTO mine VALUES (1)")?;
        Ok(TxOutcome::Commit(true))
    })?;
    assert!(ran);
    write_everywhere(&fixture, 1);
    assert_durable(fixture, 1);
    Ok(())
}

#[test]
fn reads_of_the_schema_and_the_callers_own_tables_are_allowed() -> spindle::Result<()> {
    let fixture = Fixture::new();
    for (who, view) in fixture.views() {
        let read = view.transaction(|tx| {
            let sql = tx.sqlite()?;
            sql.execute_batch("CREATE TABLE IF NOT EXISTS notes (body TEXT)")?;
            sql.execute("INSERT INTO notes (body) VALUES (?1)", ["hello"])?;
            let mut stmt = sql.prepare("SELECT body FROM notes")?;
            let bodies: Vec<String> =
                stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
            let columns: i64 =
                sql.query_row("SELECT count(*) FROM pragma_table_info('events')", [], |r| {
                    r.get(0)
                })?;
            let version: i64 = sql.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            let fk: i64 = sql.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
            Ok(TxOutcome::Commit((bodies.len(), columns > 0, version, fk)))
        })?;
        assert!(read.0 >= 1 && read.1, "{who}: {read:?}");
        assert_eq!((read.2, read.3), (7, 1), "{who}");
    }
    Ok(())
}

#[test]
fn a_token_view_may_not_read_the_stores_tables_or_check_their_integrity() -> spindle::Result<()> {
    let fixture = Fixture::new();
    let view = fixture.t.store.authenticate(&fixture.secret)?;
    for sql in
        ["SELECT count(*) FROM events", "SELECT count(*) FROM dbstat", "PRAGMA integrity_check"]
    {
        let result = view.transaction(move |tx| {
            let value: rusqlite::types::Value = tx.sqlite()?.query_row(sql, [], |r| r.get(0))?;
            Ok(TxOutcome::Rollback(format!("{value:?}")))
        });
        assert!(matches!(result, Err(Error::Forbidden(_))), "{sql}: {result:?}");
    }
    let owner = fixture.t.store.transaction(|tx| {
        let count: i64 =
            tx.sqlite()?.query_row("SELECT count(*) FROM tenants", [], |r| r.get(0))?;
        Ok(TxOutcome::Rollback(count))
    })?;
    assert_eq!(owner, 2, "the owner reads the store's tables (the default tenant and acme)");
    Ok(())
}

#[test]
fn sql_that_would_hold_the_stores_thread_is_cut_off_and_refused() -> spindle::Result<()> {
    let limits = spindle::Limits::default().sql_steps_max(1_000_000);
    let options = spindle::Options::default().limits(limits);
    let store = Store::open_in_memory_with(options)?;
    let stream = Stream::custom("budget");
    // Within the budget: a short recursive count.
    let small = store.transaction(|tx| {
        let n: i64 = tx.sqlite()?.query_row(
            "WITH c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT count(*) FROM c",
            [],
            |r| r.get(0),
        )?;
        Ok(TxOutcome::Commit(n))
    })?;
    assert_eq!(small, 1000);
    // An endless count is cut off at the step budget (the closure is refused even if it
    // swallows the error); a string past the size bound is refused at once.
    for sql in [
        "WITH c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "SELECT length(hex(randomblob(100000000)))",
    ] {
        let s = stream.clone();
        let result = store.transaction(move |tx| {
            tx.append_event(&s, "before", json!(1))?;
            tx.sqlite()?.query_row(sql, [], |r| r.get::<_, i64>(0))?;
            Ok(TxOutcome::Commit(()))
        });
        assert!(matches!(result, Err(Error::TooLarge { .. })), "{sql}: {result:?}");
        assert_eq!(store.events().head(&stream)?, 0, "{sql}: the closure wrote nothing");
    }
    assert_eq!(store.events().append(&stream, "after", json!(2))?.seq, 1, "the store works on");
    Ok(())
}

#[test]
fn a_closure_that_swallows_a_cut_off_is_still_refused() -> spindle::Result<()> {
    let limits = spindle::Limits::default().sql_steps_max(1_000_000);
    let store = Store::open_in_memory_with(spindle::Options::default().limits(limits))?;
    let stream = Stream::custom("swallow");
    let s = stream.clone();
    let result = store.transaction(move |tx| {
        tx.append_event(&s, "before", json!(1))?;
        let endless =
            "WITH c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
        let _ = tx.sqlite()?.query_row(endless, [], |r| r.get::<_, i64>(0));
        Ok(TxOutcome::Commit(()))
    });
    assert!(matches!(result, Err(Error::TooLarge { .. })), "{result:?}");
    assert_eq!(store.events().head(&stream)?, 0);
    Ok(())
}

#[test]
fn the_step_budget_must_allow_one_check() {
    let at = spindle::Limits::default().sql_steps_max(1_000);
    let below = spindle::Limits::default().sql_steps_max(999);
    let open = |limits| Store::open_in_memory_with(spindle::Options::default().limits(limits));
    assert!(open(at).is_ok());
    assert!(matches!(open(below), Err(Error::InvalidInput(_))));
}

#[test]
fn a_closure_may_not_write_the_kept_counts() {
    let fixture = Fixture::new();
    for (who, view) in fixture.views() {
        for sql in [
            "INSERT INTO queue_counts VALUES ('default', 'q', 'completed', 1000000)",
            "UPDATE graph_counts SET total = total + 1",
            "DELETE FROM process_counts",
            "INSERT INTO workflow_counts VALUES ('default', 'failed', 3)",
        ] {
            assert_refused(&view, who, sql);
        }
    }
}
