//! The `raw_sql` fuzz harness: arbitrary SQL text run through `Tx::sql()` inside a transaction
//! closure must never cost an acknowledged write.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/raw_sql.rs`) and by the test that replays
//! the seed corpus on stable (`tests/raw_sql_corpus.rs`), so it uses only `spindle`,
//! `serde_json`, `tempfile` and std. [`run`] panics when an invariant is violated.
//!
//! Input: the first byte is flags ([`ON_TOKEN_VIEW`], [`ROLLBACK`], [`PROPAGATE`],
//! [`OWNER_FIRST`]); the rest is SQL text (lossy UTF-8, at most 4 KiB) split on NUL into at most
//! 16 pieces, each run with `execute_batch`, and each `;`-separated part of a piece that looks
//! like a read also prepared and stepped row by row.
//!
//! One run: open a store file (synchronous=NORMAL), create tenant `acme` and an admin token,
//! make acknowledged writes for the owner's default tenant and for acme (through the token's
//! view), optionally run the same SQL first in an owner's closure, run the closure under test
//! (an event appended through `Tx::append_event`, then the SQL), make more acknowledged writes
//! for both tenants (each must succeed), close, reopen and check:
//!
//! - every stream holds exactly the acknowledged appends, and the closure's event iff the
//!   transaction returned `Ok` with `Commit` (all or nothing);
//! - each tenant's event log has nothing else, and its queue exactly the acknowledged items;
//! - an idempotent append replays (`existed`), the token still authenticates, both tenants can
//!   still write, and `PRAGMA integrity_check` says `ok`;
//! - the store's schema objects are unchanged, and the whole schema is unchanged when the
//!   closure did not commit;
//! - a closure on the token's view never read a value of the owner's tenant (a marker only the
//!   owner's payloads hold).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use spindle::{Durability, NewItem, Options, Role, Store, Stream, Tx, TxOutcome};

/// Flag bit: run the closure on the token view of tenant `acme` (admin) instead of the owner's.
pub const ON_TOKEN_VIEW: u8 = 1;
/// Flag bit: the closure returns `TxOutcome::Rollback` instead of `Commit`.
pub const ROLLBACK: u8 = 2;
/// Flag bit: the closure returns the first SQL error (`?`) instead of ignoring it.
pub const PROPAGATE: u8 = 4;
/// Flag bit: before the closure under test, the same SQL runs in a closure on the owner's view
/// that commits whatever it could do (errors ignored): what the owner leaves on the shared
/// connection (its tables, virtual tables and their cached statements) is there when the
/// closure under test runs.
pub const OWNER_FIRST: u8 = 8;

/// Most bytes of SQL text looked at.
const SQL_BYTES_MAX: usize = 4096;
/// Most NUL-separated pieces run.
const PIECES_MAX: usize = 16;
/// Most rows stepped per read.
const ROWS_MAX: usize = 64;
/// Writes per tenant before and after the closure.
const WRITES: usize = 2;

const LOG: &str = "log";
const IDEM: &str = "idem";
const CLOSURE: &str = "closure";
const QUEUE: &str = "q";
const IDEM_KEY: &str = "once";

/// The decoded input.
#[derive(Debug)]
struct Input {
    on_token_view: bool,
    rollback: bool,
    propagate: bool,
    owner_first: bool,
    pieces: Vec<String>,
}

impl Input {
    fn decode(data: &[u8]) -> Self {
        let (flags, sql) = match data.split_first() {
            Some((flags, sql)) => (*flags, &sql[..sql.len().min(SQL_BYTES_MAX)]),
            None => (0, &[][..]),
        };
        let text = String::from_utf8_lossy(sql);
        let pieces = text.split('\0').take(PIECES_MAX).map(str::to_owned).collect();
        Self {
            on_token_view: flags & ON_TOKEN_VIEW != 0,
            rollback: flags & ROLLBACK != 0,
            propagate: flags & PROPAGATE != 0,
            owner_first: flags & OWNER_FIRST != 0,
            pieces,
        }
    }
}

/// One tenant's view and what was acknowledged to it.
struct Tenant {
    name: &'static str,
    view: Store,
    /// Payloads of the acknowledged appends to `LOG`, in order.
    log: Vec<Value>,
    /// Acknowledged enqueues to `QUEUE`.
    queued: u64,
    /// The seq of the idempotent append under `IDEM_KEY`.
    idem_seq: u64,
}

impl Tenant {
    fn new(name: &'static str, view: Store) -> Self {
        Self { name, view, log: Vec::new(), queued: 0, idem_seq: 0 }
    }

    /// Appends, enqueues and appends idempotently; every call must succeed (`when` and `sql`
    /// say where, for the panic message).
    fn write(&mut self, when: &str, marker: &str, sql: &Input) {
        for _ in 0..WRITES {
            let n = self.log.len() + 1;
            let payload = if self.name == "owner" {
                json!({ "n": n, "tenant": self.name, "marker": marker })
            } else {
                json!({ "n": n, "tenant": self.name })
            };
            let appended = self.view.events().append(Stream::custom(LOG), "write", payload.clone());
            let appended = appended.unwrap_or_else(|error| {
                panic!("{}: append {when} the closure failed: {error:?}; input {sql:?}", self.name)
            });
            assert_eq!(appended.seq, n as u64, "{}: append {when}: seq; input {sql:?}", self.name);
            self.log.push(payload);
            let enqueued = self.view.queue().enqueue(NewItem::new(QUEUE, json!({ "n": n })));
            if let Err(error) = enqueued {
                panic!(
                    "{}: enqueue {when} the closure failed: {error:?}; input {sql:?}",
                    self.name
                );
            }
            self.queued += 1;
        }
        let appended = self
            .view
            .events()
            .append_idempotent(
                Stream::custom(IDEM),
                "once",
                json!({ "tenant": self.name }),
                IDEM_KEY,
            )
            .unwrap_or_else(|error| {
                panic!("{}: idempotent append {when} failed: {error:?}; input {sql:?}", self.name)
            });
        if self.idem_seq == 0 {
            assert!(!appended.existed, "{}: first idempotent append existed", self.name);
            self.idem_seq = appended.seq;
        } else {
            assert!(appended.existed, "{}: replay {when} did not replay; input {sql:?}", self.name);
            assert_eq!(appended.seq, self.idem_seq, "{}: replay {when}: seq", self.name);
        }
    }
}

/// One schema object: type, name, table, SQL.
type Object = (String, String, String, Option<String>);

/// Every object of the `main` schema, read by an owner's closure that rolls back.
fn schema(store: &Store) -> spindle::Result<Vec<Object>> {
    store.transaction(|tx| {
        let sql = tx.sqlite()?;
        let mut stmt = sql.prepare(
            "SELECT type, name, tbl_name, sql FROM main.sqlite_master ORDER BY type, name",
        )?;
        let objects = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
            .collect::<Result<Vec<Object>, _>>()?;
        Ok(TxOutcome::Rollback(objects))
    })
}

/// Whether `line` names `table` whole (`main.e` is not named by `main.events`).
fn names(line: &str, table: &str) -> bool {
    line.match_indices(table).any(|(at, _)| {
        let next = line[at + table.len()..].chars().next();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Every line `PRAGMA integrity_check` reports other than "ok".
fn integrity_problems(store: &Store) -> spindle::Result<Vec<String>> {
    store.transaction(|tx| {
        let sql = tx.sqlite()?;
        let mut stmt = sql.prepare("PRAGMA integrity_check")?;
        let lines = stmt.query_map([], |row| row.get::<_, String>(0))?;
        let problems = lines.filter(|line| !matches!(line.as_deref(), Ok("ok")));
        Ok(TxOutcome::Rollback(problems.collect::<Result<Vec<_>, _>>()?))
    })
}

/// Whether a statement looks like it returns rows.
fn looks_like_read(sql: &str) -> bool {
    let head: String = sql.trim_start().chars().take(8).collect::<String>().to_ascii_uppercase();
    ["SELECT", "PRAGMA", "WITH", "VALUES", "EXPLAIN"].iter().any(|word| head.starts_with(word))
}

/// Runs one piece: the whole of it with `execute_batch`, then each of its `;`-separated parts
/// that looks like a read, stepped row by row. A text value or blob a confined view reads that
/// holds `marker` is recorded in `leak`.
fn run_piece(
    tx: &Tx<'_>,
    piece: &str,
    marker: Option<&str>,
    leak: &Mutex<Option<String>>,
) -> spindle::Result<()> {
    tx.sqlite()?.execute_batch(piece)?;
    for part in piece.split(';').filter(|part| looks_like_read(part)) {
        let sql = tx.sqlite()?;
        let mut stmt = sql.prepare(part)?;
        let columns = stmt.column_count();
        let mut rows = stmt.query([])?;
        let mut seen = 0;
        while let Some(row) = rows.next()? {
            if let Some(marker) = marker {
                for column in 0..columns {
                    let text = row.get::<_, String>(column).ok();
                    let blob = row.get::<_, Vec<u8>>(column).ok();
                    let found = text.as_deref().is_some_and(|text| text.contains(marker))
                        || blob.is_some_and(|blob| {
                            blob.windows(marker.len()).any(|window| window == marker.as_bytes())
                        });
                    if found {
                        let mut leak = leak.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                        leak.get_or_insert_with(|| part.to_owned());
                    }
                }
            }
            seen += 1;
            if seen == ROWS_MAX {
                break;
            }
        }
    }
    Ok(())
}

/// Runs one input; panics if an acknowledged write was lost, or the closure's outcome was not
/// all or nothing, or the store no longer works.
pub fn run(data: &[u8]) {
    let input = Input::decode(data);
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("store.db");
    let marker = format!(
        "owner-only-{}",
        dir.path().file_name().map(|name| name.to_string_lossy()).unwrap_or_default()
    );
    let options = Options::default().durability(Durability::Normal);
    let store = Store::open_with(&path, options).expect("open the store");
    store.auth().create_tenant("acme", "Acme").expect("create tenant acme");
    let acme = store.tenant("acme").expect("acme's view");
    let (secret, _) = acme.auth().create_token("fuzz", Role::Admin, None).expect("admin token");
    let secret = secret.expose().to_owned();
    let token_view = store.authenticate(&secret).expect("authenticate the token");

    let mut tenants =
        [Tenant::new("owner", store.clone()), Tenant::new("acme", token_view.clone())];
    for tenant in &mut tenants {
        tenant.write("before", &marker, &input);
    }
    let store_schema = schema(&store).expect("the store's schema");
    if input.owner_first {
        let pieces = input.pieces.clone();
        let unused = Mutex::new(None);
        // Its outcome does not matter (a refused statement refuses it whole); the writes after
        // the closure under test show whether it broke the store.
        let _ = store.transaction(move |tx| {
            for piece in &pieces {
                let _ = run_piece(tx, piece, None, &unused);
            }
            Ok(TxOutcome::Commit(()))
        });
    }
    let schema_before = schema(&store).expect("schema before the closure");

    // The closure: an event through the store's op, then the caller's SQL.
    let (view, closure_tenant) =
        if input.on_token_view { (token_view.clone(), 1) } else { (store.clone(), 0) };
    let appended = Arc::new(AtomicBool::new(false));
    let sql_error = Arc::new(Mutex::new(None::<String>));
    let leak = Arc::new(Mutex::new(None::<String>));
    let result = {
        let (appended, sql_error, leak) = (appended.clone(), sql_error.clone(), leak.clone());
        let pieces = input.pieces.clone();
        let (rollback, propagate) = (input.rollback, input.propagate);
        let marker = input.on_token_view.then(|| marker.clone());
        view.transaction(move |tx| {
            tx.append_event(Stream::custom(CLOSURE), "inside", json!({ "closure": true }))?;
            appended.store(true, Ordering::SeqCst);
            for piece in &pieces {
                if let Err(error) = run_piece(tx, piece, marker.as_deref(), &leak) {
                    let mut first = sql_error.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert_with(|| format!("{error:?}"));
                    if propagate {
                        return Err(error);
                    }
                }
            }
            Ok(if rollback { TxOutcome::Rollback(()) } else { TxOutcome::Commit(()) })
        })
    };
    assert!(appended.load(Ordering::SeqCst), "append_event inside the closure failed: {result:?}");
    let first_sql_error = sql_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if input.propagate && first_sql_error.is_some() {
        assert!(result.is_err(), "the closure returned {first_sql_error:?}, the store said Ok");
    }
    if let Some(part) = leak.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        panic!("a closure on acme's token view read the owner's data with {part:?}; {input:?}");
    }
    let committed = result.is_ok() && !input.rollback;
    let closure_head = |index: usize| u64::from(committed && index == closure_tenant);
    for (index, tenant) in tenants.iter().enumerate() {
        let head = tenant.view.events().head(Stream::custom(CLOSURE));
        let head = head.unwrap_or_else(|error| panic!("head after the closure: {error:?}"));
        assert_eq!(
            head,
            closure_head(index),
            "{}: the closure's event before reopen; result {result:?}; input {input:?}",
            tenant.name
        );
    }

    for tenant in &mut tenants {
        tenant.write("after", &marker, &input);
    }
    let schema_after = schema(&store)
        .unwrap_or_else(|error| panic!("an owner's read after the closure: {error:?}; {input:?}"));
    drop((view, token_view, acme));
    store.close().unwrap_or_else(|error| panic!("close: {error:?}; input {input:?}"));
    drop(store);

    // Reopen and check every acknowledged write.
    let store = Store::open(&path).expect("reopen the store");
    let token_view = store.authenticate(&secret).expect("the token still authenticates");
    assert_eq!(token_view.tenant_id(), "acme");
    let views = [store.clone(), token_view];
    for ((index, tenant), view) in tenants.iter().enumerate().zip(&views) {
        let name = tenant.name;
        let events = view.events().read(Stream::custom(LOG), 0, 1000).expect("read the log");
        let payloads: Vec<&Value> = events.iter().map(|event| &event.payload).collect();
        let expected: Vec<&Value> = tenant.log.iter().collect();
        assert_eq!(payloads, expected, "{name}: acknowledged appends after reopen; {input:?}");
        let head = view.events().head(Stream::custom(LOG)).expect("head");
        assert_eq!(head, tenant.log.len() as u64, "{name}: head after reopen; {input:?}");
        let closure = view.events().head(Stream::custom(CLOSURE)).expect("closure head");
        assert_eq!(
            closure,
            closure_head(index),
            "{name}: the closure's event after reopen (committed: {committed}); result \
             {result:?}; input {input:?}"
        );
        let idem = view.events().head(Stream::custom(IDEM)).expect("idem head");
        assert_eq!(idem, 1, "{name}: idempotent stream after reopen; {input:?}");
        // The tenant's whole log: the acknowledged appends, one event per enqueue on the
        // queue's stream, and the closure's event iff it committed; nothing else.
        let mut streams: BTreeMap<Stream, u64> = BTreeMap::new();
        for event in view.events().read_all(0, 1000).expect("read all") {
            *streams.entry(event.stream).or_default() += 1;
        }
        let mut expected = BTreeMap::from([
            (Stream::custom(LOG), tenant.log.len() as u64),
            (Stream::custom(IDEM), 1),
            (Stream::queue(QUEUE), tenant.queued),
        ]);
        if closure == 1 {
            expected.insert(Stream::custom(CLOSURE), 1);
        }
        assert_eq!(streams, expected, "{name}: every event of the tenant; {input:?}");

        let stats = view.queue().stats().expect("queue stats");
        let queues: Vec<(&str, u64, u64, u64, u64, u64)> = stats
            .iter()
            .map(|s| (s.queue.as_str(), s.pending, s.scheduled, s.claimed, s.dead, s.completed))
            .collect();
        assert_eq!(queues, [(QUEUE, tenant.queued, 0, 0, 0, 0)], "{name}: queue; {input:?}");

        let replay = view.events().append_idempotent(
            Stream::custom(IDEM),
            "once",
            json!({ "tenant": name }),
            IDEM_KEY,
        );
        let replay = replay.unwrap_or_else(|error| panic!("{name}: replay: {error:?}; {input:?}"));
        assert!(replay.existed, "{name}: the idempotent append did not replay; {input:?}");
        assert_eq!(replay.seq, tenant.idem_seq, "{name}: replayed seq; {input:?}");

        let next = view.events().append(Stream::custom(LOG), "write", json!("after reopen"));
        let next = next.unwrap_or_else(|error| panic!("{name}: write after reopen: {error:?}"));
        assert_eq!(next.seq, tenant.log.len() as u64 + 1, "{name}: seq after reopen; {input:?}");
    }

    let store_tables: Vec<&str> = store_schema.iter().map(|object| object.2.as_str()).collect();
    // A caller's own table may be unsound (an FTS4 table over content it declared wrongly,
    // say): that is the caller's. Every other problem is the store's.
    let callers: Vec<String> = schema_after
        .iter()
        .filter(|object| !store_tables.contains(&object.2.as_str()))
        .map(|object| format!("main.{}", object.2))
        .collect();
    let problems = integrity_problems(&store).expect("integrity check");
    let store_problems: Vec<&String> =
        problems.iter().filter(|line| !callers.iter().any(|table| names(line, table))).collect();
    assert!(store_problems.is_empty(), "integrity: {store_problems:?}; input {input:?}");

    let schema_reopened = schema(&store).expect("schema after reopen");
    assert_eq!(schema_reopened, schema_after, "the schema changed across reopen; {input:?}");
    let own_objects: Vec<&Object> =
        schema_after.iter().filter(|object| store_tables.contains(&object.2.as_str())).collect();
    let expected: Vec<&Object> = store_schema.iter().collect();
    assert_eq!(own_objects, expected, "the store's schema objects changed; input {input:?}");
    if !committed {
        assert_eq!(schema_after, schema_before, "a closure that did not commit changed the schema");
    }
    store.close().expect("close after the checks");
}
