//! The PostgreSQL side of the engine seam: the connection an actor owns, its prepared-statement
//! cache, the dialect rewrite of the crate's statements, and the mapping of values, rows and
//! errors onto the ones the SQLite side uses.
//!
//! Statements arrive in the conventions `core::db` describes (`?1`, `main.`, `INDEXED BY`); they
//! are rewritten once, when first prepared, and kept prepared for the connection's life. Values
//! cross as [`Arg`]s (encoded for whatever type the server inferred for the parameter) and come
//! back as rusqlite `ValueRef`s, so every domain decodes a row with the same code on both
//! engines.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use postgres::error::SqlState;
use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, NoTls, SimpleQueryMessage, Statement};
use rusqlite::types::ValueRef;

use crate::core::postgres::client::{Answer, PgClient, Request};
use crate::core::postgres::listen::Notices;
use crate::core::schema::{APPLICATION_ID, SCHEMA_VERSION, quoted};
use crate::core::state::ActorState;
use crate::core::value::{Arg, Column, RELEASE_OP, ROLLBACK_TO_OP, SAVEPOINT_OP};
use crate::error::{Error, Result};
use crate::options::{Durability, Options};

/// The classes of the store's advisory locks (their first key; the second is hashed from the
/// schema's name, and from what is locked in it).
/// A tenant's writers (and, keyed by the schema alone, the store's creation).
const LOCK_TENANT: i32 = 1_397_771_844;
/// The sweeps that one process at a time runs.
const LOCK_SWEEP: i32 = 1_397_771_846;
/// A tenant's ordered writes among the batches that share its writers' turn (see
/// `PgConn::begin`): its event positions, and the claims that count a gated queue's places.
const LOCK_ORDER: i32 = 1_397_771_847;
/// The keys of the store's creation lock, and of its presence lock (every writable store of
/// the schema holds it shared; see `PgConn::hold_alone`).
const CREATION_KEY: &str = "1397771844, hashtext(current_schema())";
const PRESENCE_KEY: &str = "1397771845, hashtext(current_schema())";

/// The newest event position of tenant `?1` (0 for none).
const NEWEST_POSITION: &str =
    "SELECT COALESCE(max(position), 0) FROM main.events WHERE tenant_id = ?1";

/// The keys of the advisory lock of `class` on `name` (an SQL expression) in this schema.
fn lock_key(class: i32, name: &str) -> String {
    format!("{class}, hashtext(current_schema() || '/' || {name})")
}

/// Most prepared statements a connection keeps (the crate's own are about 200).
const STATEMENTS_MAX: usize = 1_000;

/// The store's connection to a PostgreSQL database, owned by one actor.
pub(crate) struct PgConn {
    client: RefCell<PgClient>,
    /// Prepared statements by their text as written (before the rewrite).
    statements: RefCell<HashMap<String, Statement>>,
    /// Whether a transaction is open (the client does not say).
    in_transaction: Cell<bool>,
    /// Other processes' commits, heard on the store's channel (set once the store is open).
    notices: Option<Notices>,
    /// The tenants whose writers this transaction holds off, taken at its start (or, for a
    /// tenant it shares, their order: `lock_tenant`).
    locked_tenants: RefCell<Vec<Arc<str>>>,
    /// The tenants whose writers' turn this transaction shares with other batches of calls
    /// that share it (`Sealed::shares_turn`), taken at its start.
    shared_tenants: RefCell<Vec<Arc<str>>>,
    /// How many of `locked_tenants` the transaction's start took; those after them were taken
    /// later (`take_tenant`), under a savepoint the server lets them go with if the
    /// transaction rolls back to it (`forget_later_locks`).
    locked_at_start: Cell<usize>,
    /// The newest event position of each tenant as this store last left it (at its last
    /// commit holding the tenant's writers).
    heads: RefCell<HashMap<Arc<str>, i64>>,
    /// The newest position this transaction appended, by tenant (kept in `heads` at commit).
    appended: RefCell<HashMap<Arc<str>, i64>>,
    /// Other processes' commits found at a writing batch's start (see `begin`).
    foreign_found: Cell<i64>,
    /// Whether a statement lost to another transaction (a deadlock, a serialisation failure)
    /// since `take_conflict` last looked: the call that ran it may run again.
    conflicted: Cell<bool>,
    /// A call's `RELEASE op` not sent yet: it goes with the next call's `SAVEPOINT op`, or the
    /// `COMMIT` (one round trip fewer per call).
    release_pending: Cell<bool>,
    /// Requests that go with the next statement, in its round trip (see `send`): a batch's
    /// start not sent yet (`begin_ahead`), an op's events whose answer nobody waits for
    /// (`defer_events`).
    ahead: RefCell<Vec<Ahead>>,
    /// The error of a request sent ahead that failed: the transaction is aborted, and every
    /// later statement of it, its commit too, answers this error (the one that says why).
    failed_ahead: RefCell<Option<Error>>,
    /// What a batch's start sent ahead read of its tenants' statuses, once its answer came.
    statuses: RefCell<Option<Vec<Option<String>>>>,
    /// Whether the running call is the only one in its transaction, which a rollback undoes whole
    /// (see `defer_events`).
    only_call: Cell<bool>,
    /// The error of the last transaction's start sent ahead, if it failed (`take_start_failure`).
    start_failure: RefCell<Option<Error>>,
    /// Where to connect again after the server dropped the connection.
    url: String,
    /// The session's settings, applied at every connection (see `open`).
    session: String,
}

impl PgConn {
    /// Connects to `url` (a `postgres://` URL or a `key=value` connection string).
    ///
    /// # Errors
    /// `Postgres` when the server cannot be reached or refuses the connection.
    pub(crate) fn connect(url: &str) -> Result<Self> {
        let client = connect_session(url)?;
        Ok(Self {
            client: RefCell::new(client),
            statements: RefCell::new(HashMap::new()),
            in_transaction: Cell::new(false),
            notices: None,
            locked_tenants: RefCell::new(Vec::new()),
            shared_tenants: RefCell::new(Vec::new()),
            locked_at_start: Cell::new(0),
            heads: RefCell::new(HashMap::new()),
            appended: RefCell::new(HashMap::new()),
            foreign_found: Cell::new(0),
            conflicted: Cell::new(false),
            release_pending: Cell::new(false),
            ahead: RefCell::new(Vec::new()),
            failed_ahead: RefCell::new(None),
            statuses: RefCell::new(None),
            only_call: Cell::new(false),
            start_failure: RefCell::new(None),
            url: url.to_owned(),
            session: String::new(),
        })
    }

    /// Connects again after the server dropped the connection (a restart, a fail-over, an
    /// administrator's `pg_terminate_backend`): a new session with the same settings, its
    /// prepared statements forgotten, and every tenant's head unknown (live subscribers page
    /// once). A batch that was open when the connection dropped has already failed; whether
    /// a `COMMIT` in flight landed cannot be known, as with any client.
    ///
    /// The new session replaces the old one only once all its settings are made (the
    /// presence lock too, which waits for a store recovering at open).
    ///
    /// # Errors
    /// `Postgres` when the server cannot be reached, `Busy` when the presence lock was not
    /// granted in time (the next batch tries again either way).
    fn reconnect(&self) -> Result<()> {
        let client = connect_session(&self.url)?;
        client.batch_execute(&self.session).map_err(Error::from_postgres)?;
        *self.client.borrow_mut() = client;
        self.statements.borrow_mut().clear();
        self.ended();
        self.heads.borrow_mut().clear();
        self.foreign_found.set(self.foreign_found.get() + 1);
        Ok(())
    }

    /// Runs a statement and returns how many rows it changed.
    pub(crate) fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<usize> {
        if sql.starts_with("ROLLBACK TO") {
            // A nested call's savepoint (`Tx::nested`).
            self.forget_later_locks();
        }
        match self.send(Some(Main::Execute(sql, args)))? {
            Some(Answer::Count(changed)) => Ok(usize::try_from(changed).unwrap_or(usize::MAX)),
            _ => Err(wrong_answer()),
        }
    }

    /// Runs a query and returns every row.
    pub(crate) fn query(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<postgres::Row>> {
        match self.send(Some(Main::Query(sql, args)))? {
            Some(Answer::Rows(rows)) => Ok(rows),
            _ => Err(wrong_answer()),
        }
    }

    /// Sends `main` (nothing: only what waits to go ahead) after the requests waiting to go
    /// ahead of it, all in one round trip, and returns its answer. A request ahead that fails
    /// fails the call with its own error, and every later one of the transaction (see
    /// `failed_ahead`). A batch's start that finds the session dropped since the last batch
    /// connects again and starts there, as `begin` does.
    fn send(&self, main: Option<Main<'_, '_>>) -> Result<Option<Answer>> {
        self.send_or_reconnect(main, true)
    }

    /// `send`, connecting again (once: `reconnect`) if the transaction's start finds the
    /// session dropped.
    fn send_or_reconnect(
        &self,
        main: Option<Main<'_, '_>>,
        reconnect: bool,
    ) -> Result<Option<Answer>> {
        if let Some(failed) = self.failed_ahead.borrow().as_ref() {
            return Err(failed.replicate());
        }
        let statement = match &main {
            Some(Main::Query(sql, _) | Main::Execute(sql, _)) => {
                // A statement's first use (its preparing costs a round trip anyway) goes after
                // the transaction's start: a start that finds the session dropped connects
                // again before anything is prepared on it.
                if self.start_unsent() && !self.statements.borrow().contains_key(*sql) {
                    self.send(None)?;
                }
                Some(self.prepared(sql)?)
            }
            _ => None,
        };
        let ahead = self.ahead.take();
        let lists: Vec<Vec<Vec<Option<&str>>>> = ahead.iter().map(Ahead::lists).collect();
        let ahead_args: Vec<Vec<Arg<'_>>> =
            ahead.iter().zip(&lists).map(|(ahead, lists)| ahead.args(lists)).collect();
        let mut requests: Vec<Request<'_>> = ahead
            .iter()
            .zip(&ahead_args)
            .map(|(ahead, args)| match ahead {
                Ahead::Begin { sql, .. } | Ahead::Control(sql) => Request::Simple(sql),
                Ahead::Events { statement, .. } => Request::Query(statement, params(args)),
                Ahead::Write { statement, .. } => Request::Execute(statement, params(args)),
            })
            .collect();
        match (&main, &statement) {
            (Some(Main::Simple(sql)), _) => requests.push(Request::Simple(sql)),
            (Some(Main::Query(_, args)), Some(statement)) => {
                requests.push(Request::Query(statement, params(args)));
            }
            (Some(Main::Execute(_, args)), Some(statement)) => {
                requests.push(Request::Execute(statement, params(args)));
            }
            _ => {}
        }
        let mut answers = self.client.borrow().pipeline(&requests);
        drop(requests);
        let answer = if main.is_some() { answers.pop() } else { None };
        // Dropped since the last batch (found only now): connect again and start there.
        if let ([Ahead::Begin { sql, tenants, shared }], [Err(error)]) =
            (ahead.as_slice(), &answers[..])
            && reconnect
            && connection_lost(error)
        {
            self.reconnect()?;
            self.start_ahead(sql.clone(), tenants.clone(), shared.clone());
            return self.send_or_reconnect(main, false);
        }
        drop(ahead_args);
        drop(lists);
        let mut failure = None;
        for (ahead, answer) in ahead.into_iter().zip(answers) {
            let done = match (ahead, answer) {
                (Ahead::Begin { .. }, Err(error)) => {
                    let error = self.failed(error);
                    *self.start_failure.borrow_mut() = Some(error.replicate());
                    Err(error)
                }
                (_, Err(error)) => Err(self.failed(error)),
                (Ahead::Begin { tenants, shared, .. }, Ok(Answer::Messages(messages))) => {
                    self.started(&tenants, &shared, &messages)
                }
                (Ahead::Events { tenant, .. }, Ok(Answer::Rows(rows))) => {
                    self.events_placed(&tenant, &rows)
                }
                (Ahead::Control(_), Ok(Answer::Messages(_)))
                | (Ahead::Write { .. }, Ok(Answer::Count(_))) => Ok(()),
                _ => Err(wrong_answer()),
            };
            if let Err(error) = done {
                failure.get_or_insert(error);
            }
        }
        if let Some(error) = failure {
            *self.failed_ahead.borrow_mut() = Some(error.replicate());
            return Err(error);
        }
        answer.map(|answer| answer.map_err(|error| self.failed(error))).transpose()
    }

    /// Runs a statement of a caller's own (see `PgSql`) under a savepoint of its own: a failed
    /// one is rolled back alone and leaves the batch's transaction usable.
    pub(crate) fn caller_statement<T>(
        &self,
        statement: impl FnOnce(&PgClient) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        self.batch("SAVEPOINT caller")?;
        let result = statement(&self.client.borrow());
        let result = result.map_err(|error| self.failed(error));
        let ended = match &result {
            Ok(_) => self.batch("RELEASE caller"),
            Err(_) => self.batch("ROLLBACK TO caller").and_then(|()| self.batch("RELEASE caller")),
        };
        let output = result?;
        ended?;
        Ok(output)
    }

    /// Runs one of the actor's savepoint statements (`SAVEPOINT op`, `RELEASE op`,
    /// `ROLLBACK TO op`). A release is held back and sent with the next of them, or with the
    /// commit: the work it keeps is the transaction's either way. A savepoint goes ahead of
    /// the call's first statement, in its round trip (see `send`): should it fail, that
    /// statement answers its error. A call's savepoint then costs no round trip of its own.
    pub(crate) fn savepoint_statement(&self, sql: &str) -> Result<()> {
        if sql == RELEASE_OP {
            self.release_pending.set(true);
            return Ok(());
        }
        let sql = if self.release_pending.replace(false) {
            format!("{RELEASE_OP}; {sql}")
        } else {
            sql.to_owned()
        };
        if sql.ends_with(SAVEPOINT_OP) {
            if let Some(failed) = self.failed_ahead.borrow().as_ref() {
                return Err(failed.replicate());
            }
            self.ahead.borrow_mut().push(Ahead::Control(sql));
            return Ok(());
        }
        if sql.ends_with(ROLLBACK_TO_OP) {
            self.forget_later_locks();
        }
        self.batch(&sql)
    }

    /// Runs statements as they are written (no parameters, no rewrite): the schema, and
    /// transaction control.
    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        self.send(Some(Main::Simple(sql))).map(drop)
    }

    /// The store's error for a statement's `error`, noting a lost conflict (see
    /// `take_conflict`).
    fn failed(&self, error: postgres::Error) -> Error {
        let lost = error.code().is_some_and(|code| {
            *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
        });
        self.conflicted.set(self.conflicted.get() || lost);
        Error::from_postgres(error)
    }

    /// Whether a statement lost to another transaction since the last look (a deadlock, a
    /// serialisation failure): what the actor asks after a call, to run it again.
    pub(crate) fn take_conflict(&self) -> bool {
        self.conflicted.replace(false)
    }

    /// Opens a transaction, in one round trip; a writing one first holds off the other
    /// processes' writers of `tenants` (sorted, so two processes always take them in the same
    /// order) until it ends.
    ///
    /// A tenant's writers take turns so that its event positions commit in the order they are
    /// taken (a subscriber to its whole log never pages past one still to commit) and no two
    /// transactions wait for each other's rows: SQLite's single-writer discipline, per tenant.
    ///
    /// The tenants among them in `shared` are the ones all of whose calls in the batch share
    /// the turn (`Sealed::shares_turn`: batch-shaped queue calls, each write checked by its own
    /// statement): such batches hold the tenant's lock shared, so they run beside each other,
    /// and take the tenant's order lock only from their first event (or gated claim) to their
    /// commit (`lock_tenant`). A batch holding the turn whole still waits for them all, and
    /// they for it. ARCHITECTURE.md ("PostgreSQL writers") has the argument.
    ///
    /// Returns each tenant's status as its row says (`None` without a row), read with its
    /// head: the batch's check that its tenants may write costs no round trip of its own.
    pub(crate) fn begin(
        &self,
        writes: bool,
        tenants: &[Arc<str>],
        shared: &[Arc<str>],
    ) -> Result<Vec<Option<String>>> {
        self.begin_ahead(writes, tenants, shared)?;
        let started = self.send(None).and_then(|_| {
            self.statuses.take().ok_or_else(|| {
                Error::Postgres("a batch's start did not read every tenant's head".into())
            })
        });
        if started.is_err() {
            let _ = self.rollback();
        }
        started
    }

    /// Opens a transaction as `begin` does, without a round trip of its own: its start goes
    /// to the server with the transaction's first statement, in the same round trip (the
    /// server runs it first), and what it read is known once that statement has answered
    /// (`start_statuses`). A start that fails (a tenant's lock not granted in time) fails that
    /// first statement with its own error, and leaves the transaction to be rolled back; a
    /// transaction that sends nothing costs no round trip at all.
    pub(crate) fn begin_ahead(
        &self,
        writes: bool,
        tenants: &[Arc<str>],
        shared: &[Arc<str>],
    ) -> Result<()> {
        if self.client.borrow().is_closed() {
            self.reconnect()?;
        }
        let shared = if writes { shared.to_vec() } else { Vec::new() };
        self.start_ahead(begin_sql(writes, tenants, &shared), tenants.to_vec(), shared);
        Ok(())
    }

    /// Notes a transaction whose start `sql` (taking `tenants`, those in `shared` shared)
    /// waits to go ahead of its first statement. The tenants count as held from now: the
    /// start is the first thing the server runs of the transaction.
    fn start_ahead(&self, sql: String, tenants: Vec<Arc<str>>, shared: Vec<Arc<str>>) {
        self.start_failure.borrow_mut().take();
        self.in_transaction.set(true);
        let whole = tenants.iter().filter(|tenant| !shared.contains(tenant)).cloned();
        let mut locked = self.locked_tenants.borrow_mut();
        locked.extend(whole);
        self.locked_at_start.set(locked.len());
        drop(locked);
        self.shared_tenants.borrow_mut().extend(shared.iter().cloned());
        self.ahead.borrow_mut().push(Ahead::Begin { sql, tenants, shared });
    }

    /// What the batch's start read (`messages`, see `begin_sql`) once it answered: each
    /// tenant's head, for `notice_foreign_appends`, and its status, for `start_statuses`.
    /// A tenant it shares (in `shared`) has no head read: others append to it meanwhile.
    fn started(
        &self,
        tenants: &[Arc<str>],
        shared: &[Arc<str>],
        messages: &[SimpleQueryMessage],
    ) -> Result<()> {
        let heads = heads_of(messages)?;
        if heads.len() != tenants.len() {
            return Err(Error::Postgres("a batch's start did not read every tenant's head".into()));
        }
        let mut statuses = Vec::with_capacity(heads.len());
        for (tenant, (newest, status)) in tenants.iter().zip(heads) {
            if !shared.contains(tenant) {
                self.notice_foreign_appends(tenant, newest);
            }
            statuses.push(status);
        }
        *self.statuses.borrow_mut() = Some(statuses);
        Ok(())
    }

    /// The statuses the start of a transaction opened by `begin_ahead` read of its tenants, in
    /// their order, once it has gone to the server; if it has not (nothing was sent yet), it
    /// is sent now when `send_now`, else `None`. Taken once.
    ///
    /// # Errors
    /// The start's own, when it is sent now and fails.
    pub(crate) fn start_statuses(&self, send_now: bool) -> Result<Option<Vec<Option<String>>>> {
        if send_now && self.start_unsent() {
            self.send(None)?;
        }
        Ok(self.statuses.take())
    }

    /// Sends what waits to go ahead of the next statement, now, in one round trip (nothing when
    /// nothing waits).
    ///
    /// # Errors
    /// The error of the first of them that failed.
    pub(crate) fn send_ahead(&self) -> Result<()> {
        if self.ahead.borrow().is_empty() {
            return Ok(());
        }
        self.send(None).map(drop)
    }

    /// Why the last transaction's start, sent ahead of a statement, failed (a tenant's lock
    /// not granted in time, say), if it did; taken once.
    pub(crate) fn take_start_failure(&self) -> Option<Error> {
        self.start_failure.borrow_mut().take()
    }

    /// Whether the open transaction's start has not gone to the server yet.
    fn start_unsent(&self) -> bool {
        matches!(self.ahead.borrow().first(), Some(Ahead::Begin { .. }))
    }

    /// Sends an op's events (an `insert_all_sql!` statement and its arguments, appended to
    /// `tenant`'s log) with the transaction's next statement, or its commit, instead of in a
    /// round trip of their own; returns whether it will (else the caller runs it now).
    ///
    /// Only for the only call of its transaction (`set_only_call`) whose events nobody reads
    /// back: the server runs the statement in its place in the order, so the call's later
    /// statements see it, and should it fail, the transaction fails with it: the statement
    /// after it (the commit at the latest) answers its error, and the whole transaction, the
    /// one call, is rolled back, as a failure of the call's own statement would roll it back.
    /// In a batch of several, a call's failure must undo that call alone: there, the events go
    /// at once.
    pub(crate) fn defer_events(&self, sql: &str, args: &[Arg<'_>], tenant: &str) -> Result<bool> {
        if !self.only_call.get() {
            return Ok(false);
        }
        let (statement, args) = self.held_statement(sql, args)?;
        self.ahead.borrow_mut().push(Ahead::Events { statement, args, tenant: Arc::from(tenant) });
        Ok(true)
    }

    /// A statement to send ahead of the next one, prepared, with its arguments held; the
    /// error of a request sent ahead before it that failed (the transaction is aborted).
    fn held_statement(&self, sql: &str, args: &[Arg<'_>]) -> Result<(Statement, Vec<HeldArg>)> {
        if let Some(failed) = self.failed_ahead.borrow().as_ref() {
            return Err(failed.replicate());
        }
        let statement = self.prepared(sql)?;
        Ok((statement, args.iter().map(HeldArg::of).collect()))
    }

    /// Sends a write a call left for its batch's end (`Tx::write_late`) with the transaction's
    /// next statement, or its commit, in that round trip. Should it fail, the transaction
    /// fails with it: the statement after it answers its error.
    pub(crate) fn write_ahead(&self, sql: &str, args: &[Arg<'_>]) -> Result<()> {
        let (statement, args) = self.held_statement(sql, args)?;
        self.ahead.borrow_mut().push(Ahead::Write { statement, args });
        Ok(())
    }

    /// Notes where deferred events were placed (`defer_events`): their tenant's newest
    /// position, the fourth column of the rows `insert_all_sql!` returns.
    fn events_placed(&self, tenant: &str, rows: &[postgres::Row]) -> Result<()> {
        let mut newest = None;
        for row in rows {
            newest = newest.max(Some(column::<i64>(row, 3)?));
        }
        if let Some(newest) = newest {
            self.event_appended(tenant, newest);
        }
        Ok(())
    }

    /// Whether the call about to run is the only one in its transaction (see `defer_events`).
    pub(crate) fn set_only_call(&self, only: bool) {
        self.only_call.set(only);
    }

    /// Counts a foreign commit if `tenant`'s newest event is not the one this store left (or
    /// this store has not held the tenant before). Read while holding the tenant's writers, it
    /// is exact: nobody else appends to the tenant until this transaction ends, so live
    /// subscribers are dropped (and page) before this batch's events are published, and never
    /// skip another process's.
    fn notice_foreign_appends(&self, tenant: &Arc<str>, newest: i64) {
        if self.heads.borrow_mut().insert(Arc::clone(tenant), newest) != Some(newest) {
            self.foreign_found.set(self.foreign_found.get() + 1);
        }
    }

    /// The newest event position of `tenant`, 0 for none.
    fn newest_position(&self, tenant: &str) -> Result<i64> {
        Ok(self.value(NEWEST_POSITION, &[Arg::Text(tenant)])?.unwrap_or(0))
    }

    /// Notes an event this transaction appended to `tenant` at `position`.
    pub(crate) fn event_appended(&self, tenant: &str, position: i64) {
        let mut appended = self.appended.borrow_mut();
        match appended.get_mut(tenant) {
            Some(newest) => *newest = (*newest).max(position),
            None => drop(appended.insert(Arc::from(tenant), position)),
        }
    }

    /// Where this store left the tenants it held from the start and appended to, once its
    /// commit succeeded (an append a savepoint rolled back only makes the next batch drop live
    /// subscribers once more).
    fn keep_heads(&self) {
        let locked = self.locked_tenants.borrow();
        let mut heads = self.heads.borrow_mut();
        for (tenant, position) in self.appended.borrow_mut().drain() {
            if let (true, Some(head)) = (locked.contains(&tenant), heads.get_mut(&tenant)) {
                *head = (*head).max(position);
            }
        }
    }

    /// The first column of the first row of `sql`, if there is a row.
    fn value<T: Column>(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<T>> {
        let rows = self.query(sql, args)?;
        rows.first().map(|row| column(row, 0)).transpose()
    }

    /// Holds off the other processes' writers of `tenant` until this transaction ends,
    /// waiting for them (a no-op for a tenant already held). A batch takes its tenants at its
    /// start, before it holds anything else; later, only `try_lock_tenant` is deadlock-free,
    /// and the order of a tenant whose turn the batch shares (see `take_tenant`): every
    /// holder of that order holds the turn shared already, and none waits for the turn.
    pub(crate) fn lock_tenant(&self, tenant: &str) -> Result<()> {
        self.take_tenant(tenant, true).map(drop)
    }

    /// Holds off the other processes' writers of `tenant` until this transaction ends if
    /// none holds them now (see `Db::try_lock_tenant_writes`).
    pub(crate) fn try_lock_tenant(&self, tenant: &str) -> Result<bool> {
        self.take_tenant(tenant, false)
    }

    /// Takes `tenant`'s writers for this transaction (waiting for them if `wait`); returns
    /// whether it holds them. A tenant taken is checked for other processes' appends, as one
    /// taken at a batch's start is (see `notice_foreign_appends`).
    ///
    /// A tenant whose turn the transaction shares (`begin`): waiting, it takes the tenant's
    /// order instead, its head read once it is granted, in one round trip; not waiting, it
    /// tries for the turn whole (granted only while no other transaction holds it, shared or
    /// not).
    fn take_tenant(&self, tenant: &str, wait: bool) -> Result<bool> {
        if self.holds_tenant(tenant) {
            return Ok(true);
        }
        if wait && self.shares_tenant(tenant) {
            if let Some(failed) = self.failed_ahead.borrow().as_ref() {
                return Err(failed.replicate());
            }
            // In a round trip of its own: sent ahead of the next statement, a wait for the lock
            // stalled the session (the next statement never ran; seen in
            // `a_limit_holds_across_stores_on_one_database`).
            let newest = match self.send(Some(Main::Simple(&take_order_sql(tenant))))? {
                Some(Answer::Messages(messages)) => newest_of(&messages)?,
                _ => return Err(wrong_answer()),
            };
            self.held(tenant, newest);
            return Ok(true);
        }
        let key = lock_key(LOCK_TENANT, "?1");
        let taken = if wait {
            self.execute(&format!("SELECT pg_advisory_xact_lock({key})"), &[Arg::Text(tenant)])?;
            true
        } else {
            let sql = format!("SELECT pg_try_advisory_xact_lock({key})");
            self.value(&sql, &[Arg::Text(tenant)])?.unwrap_or(false)
        };
        if taken {
            let newest = self.newest_position(tenant)?;
            self.held(tenant, newest);
        }
        Ok(taken)
    }

    /// Forgets the tenants taken since the transaction's start (see `locked_at_start`): after
    /// a rollback to a savepoint the server may have let their locks go. The next call that
    /// needs one takes it again (a lock still held is granted again at once).
    fn forget_later_locks(&self) {
        self.locked_tenants.borrow_mut().truncate(self.locked_at_start.get());
    }

    /// Whether this transaction holds `tenant`'s writers (or, sharing them, its order).
    fn holds_tenant(&self, tenant: &str) -> bool {
        self.locked_tenants.borrow().iter().any(|locked| locked.as_ref() == tenant)
    }

    /// Whether this transaction shares `tenant`'s writers' turn (see `begin`).
    fn shares_tenant(&self, tenant: &str) -> bool {
        self.shared_tenants.borrow().iter().any(|shared| shared.as_ref() == tenant)
    }

    /// Notes that this transaction has just taken `tenant`'s writers, its newest event then
    /// at `newest`, and notices what other processes appended to it since this store last
    /// held it.
    fn held(&self, tenant: &str, newest: i64) {
        let tenant: Arc<str> = Arc::from(tenant);
        self.notice_foreign_appends(&tenant, newest);
        self.locked_tenants.borrow_mut().push(tenant);
    }

    /// Makes this transaction the only one running the sweep `name` (see
    /// `Db::try_lock_sweep`).
    pub(crate) fn try_lock_sweep(&self, name: &str) -> Result<bool> {
        let sql = format!("SELECT pg_try_advisory_xact_lock({})", lock_key(LOCK_SWEEP, "?1"));
        Ok(self.value(&sql, &[Arg::Text(name)])?.unwrap_or(false))
    }

    /// Whether no other writable store has the schema open; if so, keeps others from opening
    /// until `release_alone` (see `Db::hold_alone`). Every writable store holds the schema's
    /// presence lock shared for as long as its session lasts; this one's own share does not
    /// count against it.
    pub(crate) fn hold_alone(&self) -> Result<bool> {
        let sql = format!("SELECT pg_try_advisory_lock({PRESENCE_KEY})");
        Ok(self.value(&sql, &[])?.unwrap_or(false))
    }

    /// Lets other stores open again (the exclusive hold of `hold_alone` ends; the shared one
    /// of this store's session stays).
    pub(crate) fn release_alone(&self) -> Result<()> {
        let sql = format!("SELECT pg_advisory_unlock({PRESENCE_KEY})");
        self.execute(&sql, &[]).map(drop)
    }

    /// Commits the open transaction; a writing one first sends the store's notice (delivered
    /// only if the commit succeeds) so that other processes look again: `rang` says it made
    /// work available. A failed commit leaves no transaction open (the server rolls back).
    ///
    /// The statements before `COMMIT` also make sure the transaction is not aborted: the
    /// server answers `COMMIT` of an aborted one with a rollback, not an error.
    pub(crate) fn commit(&self, writes: bool, rang: bool) -> Result<()> {
        if self.start_unsent() && self.ahead.borrow().len() == 1 {
            // Nothing was sent: there is no transaction on the server to end.
            self.ended();
            return Ok(());
        }
        // One round trip: a statement that fails (in an aborted transaction) skips the COMMIT.
        let release = if self.release_pending.replace(false) {
            format!("{RELEASE_OP}; ")
        } else {
            String::new()
        };
        let sql = match (&self.notices, writes) {
            (Some(notices), true) => format!(
                "{release}SELECT pg_notify({}, {}); COMMIT",
                quote_literal(notices.channel()),
                quote_literal(&notices.payload(rang))
            ),
            (None, true) => format!("{release}SELECT 1; COMMIT"),
            // What a reading batch answered was read; whether it commits changes nothing.
            (_, false) => format!("{release}COMMIT"),
        };
        let committed = self.batch(&sql);
        match committed {
            Ok(()) => self.keep_heads(),
            Err(_) if self.in_transaction.get() => drop(self.rollback()),
            Err(_) => {}
        }
        self.ended();
        committed
    }

    /// How many other processes' commits this store has heard of: a number that moves when
    /// another commits.
    pub(crate) fn foreign_commits(&self) -> Option<i64> {
        let heard = self.notices.as_ref().map(Notices::foreign_commits)?;
        Some(heard + self.foreign_found.get())
    }

    /// Rolls back the open transaction, if any.
    pub(crate) fn rollback(&self) -> Result<()> {
        let unsent = self.start_unsent();

        self.ended();
        if unsent {
            // Its start never went: the server has no transaction of it.
            return Ok(());
        }
        let rolled_back = self.client.borrow().batch_execute("ROLLBACK");
        match rolled_back {
            // The server ended the session, and the transaction with it: the next batch
            // connects again.
            Err(error) if connection_lost(&error) => Ok(()),
            rolled_back => rolled_back.map_err(Error::from_postgres),
        }
    }

    /// The transaction is over, and its locks with it.
    fn ended(&self) {
        self.in_transaction.set(false);
        self.release_pending.set(false);
        self.locked_tenants.borrow_mut().clear();
        self.shared_tenants.borrow_mut().clear();
        self.locked_at_start.set(0);
        self.appended.borrow_mut().clear();
        self.ahead.borrow_mut().clear();
        self.failed_ahead.borrow_mut().take();
        self.statuses.borrow_mut().take();
    }

    /// Ends the session's presence before the connection goes (see `hold_alone`): a store
    /// opened right after this one closed is then alone, even before the server has noticed
    /// the connection ended.
    ///
    /// # Errors
    /// `Postgres` when the server cannot be reached (the session's end releases it then).
    pub(crate) fn close(&self) -> Result<()> {
        if self.client.borrow().is_closed() {
            return Ok(());
        }
        self.batch("SELECT pg_advisory_unlock_all()")
    }

    /// Whether a transaction is open.
    pub(crate) fn in_transaction(&self) -> bool {
        self.in_transaction.get()
    }

    /// Counts one more opening of the store (a writable one) and returns its number: distinct
    /// for every opening, by whichever process, and the same in every run of the same history.
    pub(crate) fn next_opening(&self) -> Result<i64> {
        let opening = self.value(
            "INSERT INTO main.spindle_meta AS meta (key, value) VALUES ('openings', 1)
             ON CONFLICT (key) DO UPDATE SET value = meta.value + 1 RETURNING value",
            &[],
        )?;
        opening.ok_or_else(|| Error::Corrupt("the store's count of openings did not return".into()))
    }

    /// The statement for `sql`, prepared on first use.
    fn prepared(&self, sql: &str) -> Result<Statement> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let rewritten = rewrite(sql);
        let statement = self.client.borrow().prepare(&rewritten).map_err(Error::from_postgres)?;
        let mut statements = self.statements.borrow_mut();
        // Statements built at run time (filters) are many: the cache stays bounded.
        if statements.len() >= STATEMENTS_MAX {
            statements.clear();
        }
        statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// The PostgreSQL schema, applied to an empty database schema in one transaction.
const SCHEMA_SQL: &str = include_str!("../../../schema_postgres.sql");

/// Opens the store in the connection's current schema (a URL's `options=-csearch_path=NAME`
/// chooses it): creates it there if the schema holds no store yet, checks its version if it
/// does, and sets the session up as the actor needs it.
///
/// # Errors
/// `Postgres` when the server cannot be reached; `NotADatabase` when the schema holds tables
/// that are not a store's; `SchemaTooNew` for a store of a newer Spindle.
pub(crate) fn open(url: &str, options: &Options, state: Weak<ActorState>) -> Result<PgConn> {
    let mut conn = open_session(url, options)?;
    let schema = current_schema(&conn, false)?;
    conn.notices = Some(Notices::start(url, &schema, state)?);
    Ok(conn)
}

/// Opens a reader's session (see `readers.rs`): read-only (`options.read_only`), without a
/// listener of its own.
pub(crate) fn open_reader(url: &str, options: &Options) -> Result<PgConn> {
    open_session(url, options)
}

/// Connects, sets the session up, creates the store's schema if it is missing (unless
/// read-only) and checks its version.
fn open_session(url: &str, options: &Options) -> Result<PgConn> {
    let mut conn = PgConn::connect(url)?;
    let schema = current_schema(&conn, !options.read_only)?;
    // At least 1 ms: PostgreSQL reads 0 as "wait for ever".
    let lock_timeout_ms = options.busy_timeout.as_millis().max(1);
    // Temporary tables (searched first otherwise) cannot take the place of the store's.
    let mut setup = format!(
        "SET search_path = {}, pg_catalog, pg_temp; SET lock_timeout = {lock_timeout_ms};",
        quoted(&schema)
    );
    // The store's statements read and write a few rows each, through indexes: compiling one
    // (JIT, for a plan whose estimated cost passes jit_above_cost, as a generic plan's guesses
    // over a large table do: a claim's, about 30 ms) costs more than running it ever does.
    setup.push_str(" SET jit = off;");
    if options.durability == Durability::Normal {
        setup.push_str(" SET synchronous_commit = off;");
    }
    if options.read_only {
        setup.push_str(" SET default_transaction_read_only = on;");
    }
    // A dead host's session ends within about a minute (see `hold_alone`), not the system's
    // two hours; a Unix socket ignores these.
    setup.push_str(
        " SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; \
         SET tcp_keepalives_count = 3;",
    );
    // Named after the schema: an administrator sees whose session it is.
    setup.push_str(&format!(" SET application_name = {};", quote_literal(&app_name(&schema))));
    conn.batch(&setup)?;
    if !options.read_only {
        create_if_missing(&conn)?;
        // Present for as long as the session lasts (see `hold_alone`); a store recovering at
        // open holds this off until it is done.
        let present = format!(" SELECT pg_advisory_lock_shared({PRESENCE_KEY});");
        conn.batch(&present)?;
        setup.push_str(&present);
    }
    conn.session = setup;
    check_version(&conn)?;
    Ok(conn)
}

/// The schema the store lives in: the connection's current one, or the first one its
/// `search_path` names, created if it does not exist yet and `create` (a read-only store
/// creates nothing: `NotADatabase`).
fn current_schema(conn: &PgConn, create: bool) -> Result<String> {
    if let Some(schema) = query_text(conn, "SELECT current_schema()::text")? {
        return Ok(schema);
    }
    if !create {
        return Err(Error::NotADatabase);
    }
    let path = query_text(conn, "SHOW search_path")?.unwrap_or_default();
    let first = path.split(',').map(str::trim).find(|name| *name != "\"$user\"");
    let Some(first) = first.filter(|name| !name.is_empty()) else {
        return Err(Error::InvalidInput("the connection's search_path names no schema".into()));
    };
    // As PostgreSQL reads a name: quoted as written, unquoted in lower case.
    let name = match first.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => first.to_lowercase(),
    };
    let created = conn.batch(&format!("CREATE SCHEMA IF NOT EXISTS {}", quoted(&name)));
    // Another process may have created it at the same moment (the statement can then fail).
    match (created, query_text(conn, "SELECT current_schema()::text")?) {
        (_, Some(schema)) => Ok(schema),
        (Err(error), None) => Err(error),
        (Ok(()), None) => Err(Error::InvalidInput(format!("schema {name:?} is not usable"))),
    }
}

/// The first column of the first row of `sql`, as text.
fn query_text(conn: &PgConn, sql: &str) -> Result<Option<String>> {
    Ok(conn.value::<Option<String>>(sql, &[])?.flatten())
}

/// Creates the store's tables unless they are there, under a lock that keeps two processes
/// opening a new database at once from both creating them.
fn create_if_missing(conn: &PgConn) -> Result<()> {
    conn.begin(true, &[], &[])?;
    let created = conn
        .batch(&format!("SELECT pg_advisory_xact_lock({CREATION_KEY})"))
        .and_then(|()| store_exists(conn))
        .and_then(|exists| if exists { upgrade(conn, POSTGRES_STEPS) } else { create(conn) });
    match created {
        Ok(()) => conn.commit(false, false),
        Err(error) => {
            let _ = conn.rollback();
            Err(error)
        }
    }
}

/// The schema version the first PostgreSQL stores were made at.
const POSTGRES_FIRST_VERSION: i64 = 4;

/// The steps that bring a PostgreSQL store from one schema version to the next, from
/// `POSTGRES_FIRST_VERSION` on (`schema_postgres.sql` makes the current one): a change of the
/// schema adds its step here beside its SQLite one in `schema.rs` (a unit test keeps the two
/// in step). Each is PostgreSQL's own SQL, run as written in the store's schema.
const POSTGRES_STEPS: &[&str] = &[
    include_str!("../../../migrations/postgres/0005_counts.sql"),
    include_str!("../../../migrations/postgres/0006_queue_controls.sql"),
    include_str!("../../../migrations/postgres/0007_queue_schedules.sql"),
];

/// Brings a store of an older schema version to the newest `steps` make, one step after the
/// other in the opening transaction (under the creation lock: one process does it). A store
/// of another application, or of a version no step starts from, is left for `check_version`.
fn upgrade(conn: &PgConn, steps: &[&str]) -> Result<()> {
    let newest = POSTGRES_FIRST_VERSION + i64::try_from(steps.len()).unwrap_or(i64::MAX);
    let (application, found) =
        (meta_value(conn, "application_id")?, meta_value(conn, "schema_version")?);
    let Some(found) = found.filter(|found| (POSTGRES_FIRST_VERSION..newest).contains(found)) else {
        return Ok(());
    };
    if application != Some(APPLICATION_ID) {
        return Ok(());
    }
    let first = usize::try_from(found - POSTGRES_FIRST_VERSION).unwrap_or(usize::MAX);
    for step in steps.iter().skip(first) {
        conn.batch(step)?;
    }
    let sql = "UPDATE main.spindle_meta SET value = ?1 WHERE key = 'schema_version'";
    conn.execute(sql, &[Arg::Int(newest)]).map(drop)
}

/// A value the store keeps of itself in `spindle_meta`.
fn meta_value(conn: &PgConn, key: &str) -> Result<Option<i64>> {
    conn.value("SELECT value FROM main.spindle_meta WHERE key = ?1", &[Arg::Text(key)])
}

/// Whether the schema holds a store (its `spindle_meta` table).
fn store_exists(conn: &PgConn) -> Result<bool> {
    Ok(conn.value("SELECT to_regclass('spindle_meta') IS NOT NULL", &[])?.unwrap_or(false))
}

/// Creates the store in an empty schema.
fn create(conn: &PgConn) -> Result<()> {
    let tables: i64 = conn
        .value(
            "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema()",
            &[],
        )?
        .unwrap_or(0);
    if tables > 0 {
        return Err(Error::NotADatabase);
    }
    conn.batch(SCHEMA_SQL)
}

/// Refuses a schema that is not a store, or a store of a newer Spindle.
fn check_version(conn: &PgConn) -> Result<()> {
    if !store_exists(conn)? {
        return Err(Error::NotADatabase);
    }
    if meta_value(conn, "application_id")? != Some(APPLICATION_ID) {
        return Err(Error::NotADatabase);
    }
    let found = meta_value(conn, "schema_version")?.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    if found < POSTGRES_FIRST_VERSION {
        return Err(Error::Corrupt(format!(
            "schema version {found}: no PostgreSQL store was made before version \
             {POSTGRES_FIRST_VERSION}"
        )));
    }
    if found < SCHEMA_VERSION {
        // A writable store was brought up to date at open (`upgrade`): this one is read-only.
        return Err(Error::InvalidInput(format!(
            "schema version {found} needs an upgrade to {SCHEMA_VERSION}; open it read-write once"
        )));
    }
    Ok(())
}

/// The statements that open a batch's transaction, sent as one: a writing batch then holds
/// off the other processes' writers of `tenants` (sorted, each once) and reads each one's
/// newest event position.
fn begin_sql(writes: bool, tenants: &[Arc<str>], shared: &[Arc<str>]) -> String {
    if !writes {
        // One snapshot, as SQLite's deferred transaction reads (a read-only transaction is
        // never refused for serialisation).
        return "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_owned();
    }
    // Pinned: the server's default might take the snapshot before the locks are granted.
    let mut sql = "BEGIN ISOLATION LEVEL READ COMMITTED".to_owned();
    for name in tenants {
        let tenant = quote_literal(name);
        let lock = lock_key(LOCK_TENANT, &tenant);
        let (take, read) = if shared.contains(name) {
            ("pg_advisory_xact_lock_shared", SHARED_HEAD)
        } else {
            ("pg_advisory_xact_lock", BEGIN_HEAD)
        };
        // The schema first: the tenant's name may hold `main.` itself. Read once the lock is
        // granted (a statement of its own: its snapshot is taken after the lock's).
        let head = read.replace("main.", "").replace("?1", &tenant);
        sql.push_str(&format!("; SELECT {take}({lock}); {head}"));
    }
    sql
}

/// Takes the order of tenant `tenant` (see `PgConn::take_tenant`), then reads its head (a
/// statement of its own: its snapshot is taken after the lock's).
fn take_order_sql(tenant: &str) -> String {
    let tenant = quote_literal(tenant);
    let lock = lock_key(LOCK_ORDER, &tenant);
    let head = NEWEST_POSITION.replace("main.", "").replace("?1", &tenant);
    format!("SELECT pg_advisory_xact_lock({lock}); {head}")
}

/// The head `take_order_sql` read: the last row of its answer (the lock's is a row too).
fn newest_of(messages: &[SimpleQueryMessage]) -> Result<i64> {
    let newest = messages.iter().rev().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0),
        _ => None,
    });
    let newest = newest.ok_or_else(|| Error::Postgres("a tenant's head was not read".into()))?;
    newest.parse().map_err(|_| Error::Postgres(format!("a position read as {newest:?}")))
}

/// What a writing batch's start reads of tenant `?1` once it holds its writers: its newest
/// event position (0 for none), and its status (NULL without a row).
const BEGIN_HEAD: &str = "SELECT COALESCE(max(position), 0),
        (SELECT status FROM main.tenants WHERE tenant_id = ?1)
    FROM main.events WHERE tenant_id = ?1";

/// What a start sharing tenant `?1`'s turn reads of it: its status alone (no head: others
/// may append to it meanwhile), in the two columns `heads_of` reads.
const SHARED_HEAD: &str = "SELECT 0, (SELECT status FROM main.tenants WHERE tenant_id = ?1)";

/// What `begin_sql` read of each tenant, in its tenants' order: the two-column rows of its
/// answer (the locks answer one empty column).
fn heads_of(messages: &[SimpleQueryMessage]) -> Result<Vec<(i64, Option<String>)>> {
    let heads = messages.iter().filter_map(|message| match message {
        SimpleQueryMessage::Row(row) if row.len() == 2 => Some(row),
        _ => None,
    });
    heads
        .map(|row| {
            let text = row.get(0).unwrap_or_default();
            let newest = text
                .parse()
                .map_err(|_| Error::Postgres(format!("a position read as {text:?}")))?;
            Ok((newest, row.get(1).map(str::to_owned)))
        })
        .collect()
}

/// How long a connection may take to be made when the URL does not say
/// (`connect_timeout`): an unreachable server must not hold the store's thread for the
/// system's TCP timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A new client of `url` (a `postgres://` URL or a `key=value` connection string).
///
/// # Errors
/// `InvalidInput` for a malformed URL; `Postgres` when the server cannot be reached or
/// refuses the connection.
pub(crate) fn connect_client(url: &str) -> Result<Client> {
    let mut config: postgres::Config = url.parse().map_err(|error| {
        Error::InvalidInput(format!("a PostgreSQL URL that does not parse: {error}"))
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.connect(NoTls).map_err(Error::from_postgres)
}

/// A new session of the store's own (`PgClient`) with `url`, as `connect_client` makes one.
///
/// # Errors
/// As `connect_client`.
fn connect_session(url: &str) -> Result<PgClient> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|error| {
        Error::InvalidInput(format!("a PostgreSQL URL that does not parse: {error}"))
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    PgClient::connect(&config)
}

/// The statement `PgConn::send` waits for.
enum Main<'s, 'a> {
    /// Statements as written (`PgConn::batch`).
    Simple(&'s str),
    /// A query, in the crate's conventions (`PgConn::query`).
    Query(&'s str, &'s [Arg<'a>]),
    /// A statement whose count of changed rows is wanted (`PgConn::execute`).
    Execute(&'s str, &'s [Arg<'a>]),
}

/// A request that goes with the transaction's next statement (see `PgConn::send`).
enum Ahead {
    /// A batch's start (`begin_sql`), and the writing tenants it takes, in its order (those in
    /// `shared` shared).
    Begin { sql: String, tenants: Vec<Arc<str>>, shared: Vec<Arc<str>> },
    /// An op's events (see `PgConn::defer_events`), appended to `tenant`'s log.
    Events { statement: Statement, args: Vec<HeldArg>, tenant: Arc<str> },
    /// A call's savepoint (with the release of the call's before it; `savepoint_statement`).
    Control(String),
    /// A write left for the batch's end (see `PgConn::write_ahead`).
    Write { statement: Statement, args: Vec<HeldArg> },
}

impl Ahead {
    /// The texts of its list arguments, as `Arg::Texts` borrows them (empty for the others).
    fn lists(&self) -> Vec<Vec<Option<&str>>> {
        match self {
            Ahead::Begin { .. } | Ahead::Control(_) => Vec::new(),
            Ahead::Events { args, .. } | Ahead::Write { args, .. } => {
                args.iter().map(HeldArg::list).collect()
            }
        }
    }

    /// Its arguments, its lists borrowed from `lists` (what `lists` made of them).
    fn args<'a>(&'a self, lists: &'a [Vec<Option<&'a str>>]) -> Vec<Arg<'a>> {
        match self {
            Ahead::Begin { .. } | Ahead::Control(_) => Vec::new(),
            Ahead::Events { args, .. } | Ahead::Write { args, .. } => {
                args.iter().zip(lists).map(|(arg, list)| arg.as_arg(list)).collect()
            }
        }
    }
}

/// An argument kept until its statement is sent.
enum HeldArg {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    Texts(Vec<Option<String>>),
    Ints(Vec<i64>),
}

impl HeldArg {
    /// `arg`, owned.
    fn of(arg: &Arg<'_>) -> Self {
        match *arg {
            Arg::Null => Self::Null,
            Arg::Int(value) => Self::Int(value),
            Arg::Real(value) => Self::Real(value),
            Arg::Text(text) => Self::Text(text.to_owned()),
            Arg::Blob(bytes) => Self::Blob(bytes.to_vec()),
            Arg::Texts(texts) => Self::Texts(texts.iter().map(|t| t.map(str::to_owned)).collect()),
            Arg::Ints(ints) => Self::Ints(ints.to_vec()),
        }
    }

    /// A list of texts as `Arg::Texts` borrows it (empty for any other argument).
    fn list(&self) -> Vec<Option<&str>> {
        match self {
            Self::Texts(texts) => texts.iter().map(Option::as_deref).collect(),
            _ => Vec::new(),
        }
    }

    /// The argument again, a list of texts borrowed from `list` (what `list` made of it).
    fn as_arg<'a>(&'a self, list: &'a [Option<&'a str>]) -> Arg<'a> {
        match self {
            Self::Null => Arg::Null,
            Self::Int(value) => Arg::Int(*value),
            Self::Real(value) => Arg::Real(*value),
            Self::Text(text) => Arg::Text(text),
            Self::Blob(bytes) => Arg::Blob(bytes),
            Self::Texts(_) => Arg::Texts(list),
            Self::Ints(ints) => Arg::Ints(ints),
        }
    }
}

/// The error for an answer of another kind than its request's (not expected of the client).
fn wrong_answer() -> Error {
    Error::Postgres("the server's answer was not of its request's kind".into())
}

/// Whether `error` says the connection is gone (closed, broken, or ended by the server's
/// administrator or shutdown), so that connecting again may help.
fn connection_lost(error: &postgres::Error) -> bool {
    let ended_by_server = error.code().is_some_and(|code| {
        code.code().starts_with("08")
            || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW]
                .contains(code)
    });
    error.is_closed() || ended_by_server
}

/// The session's `application_name`: `spindle ` and the schema, cut to PostgreSQL's 63 bytes.
fn app_name(schema: &str) -> String {
    let mut name = format!("spindle {schema}");
    let mut end = name.len().min(63);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name.truncate(end);
    name
}

/// A string quoted as an SQL literal that reads the same whatever
/// `standard_conforming_strings` says (an escape string, backslashes doubled too).
fn quote_literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// Column `index` of a PostgreSQL row as a `T`, through the value SQLite would have returned.
pub(crate) fn column<T: Column>(row: &postgres::Row, index: usize) -> Result<T> {
    let Raw(value) = row.try_get::<_, Raw<'_>>(index).map_err(Error::from_postgres)?;
    let value = match value {
        None => ValueRef::Null,
        Some((ty, bytes)) => value_ref(&ty, bytes)?,
    };
    T::column_result(value).map_err(|error| {
        Error::from(rusqlite::Error::FromSqlConversionFailure(
            index,
            value.data_type(),
            Box::new(error),
        ))
    })
}

/// Rewrites a statement from the crate's conventions into PostgreSQL's: `?N` becomes `$N`, the
/// `main.` schema prefix goes (the store lives in the connection's current schema), and
/// `INDEXED BY name` hints go. String literals and quoted names are copied as they are.
pub(crate) fn rewrite(sql: &str) -> String {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    while at < bytes.len() {
        let c = bytes[at];
        if c == b'\'' || c == b'"' {
            let end = quoted_end(bytes, at);
            out.push_str(&sql[at..end]);
            at = end;
        } else if c == b'?' && bytes.get(at + 1).is_some_and(u8::is_ascii_digit) {
            out.push('$');
            at += 1;
        } else if word_starts(bytes, at) && sql[at..].starts_with("main.") {
            at += "main.".len();
        } else if word_starts(bytes, at) && sql[at..].starts_with("INDEXED BY ") {
            at += "INDEXED BY ".len();
            while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
                at += 1;
            }
        } else {
            let next = sql[at..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&sql[at..at + next]);
            at += next;
        }
    }
    out
}

/// Where the quoted text starting at `start` ends (past its closing quote; doubled quotes are
/// part of it).
fn quoted_end(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut at = start + 1;
    while at < bytes.len() {
        if bytes[at] == quote {
            if bytes.get(at + 1) == Some(&quote) {
                at += 2;
                continue;
            }
            return at + 1;
        }
        at += 1;
    }
    bytes.len()
}

/// Whether a word may start at `at` (the byte before is not part of a name).
fn word_starts(bytes: &[u8], at: usize) -> bool {
    at == 0
        || !(bytes[at - 1].is_ascii_alphanumeric()
            || bytes[at - 1] == b'_'
            || bytes[at - 1] == b'.')
}

/// The arguments as the client takes them.
fn params<'a>(args: &'a [Arg<'_>]) -> Vec<&'a (dyn ToSql + Sync)> {
    args.iter().map(|arg| arg as &(dyn ToSql + Sync)).collect()
}

/// A column's value as SQLite would have stored it: integers (and booleans) as integers,
/// floats as reals, text as text, bytes as blobs.
pub(crate) fn value_ref<'a>(ty: &Type, bytes: &'a [u8]) -> Result<ValueRef<'a>> {
    let int = |bytes: &[u8]| -> Result<i64> {
        let wrong = || Error::Corrupt(format!("a {ty} value of {} bytes", bytes.len()));
        Ok(match bytes.len() {
            8 => i64::from_be_bytes(bytes.try_into().map_err(|_| wrong())?),
            4 => i64::from(i32::from_be_bytes(bytes.try_into().map_err(|_| wrong())?)),
            2 => i64::from(i16::from_be_bytes(bytes.try_into().map_err(|_| wrong())?)),
            _ => return Err(wrong()),
        })
    };
    Ok(match *ty {
        Type::INT8 | Type::INT4 | Type::INT2 => ValueRef::Integer(int(bytes)?),
        Type::BOOL => ValueRef::Integer(i64::from(bytes.first().is_some_and(|b| *b != 0))),
        Type::FLOAT8 => ValueRef::Real(f64::from_sql(ty, bytes).map_err(decode_error)?),
        Type::FLOAT4 => ValueRef::Real(f64::from(f32::from_sql(ty, bytes).map_err(decode_error)?)),
        Type::BYTEA => ValueRef::Blob(bytes),
        // jsonb's binary form is a version byte, then the text.
        Type::JSONB => ValueRef::Text(bytes.get(1..).unwrap_or_default()),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON | Type::UNKNOWN => {
            ValueRef::Text(bytes)
        }
        // NUMERIC (a sum of BIGINTs), say: the statement must cast it.
        _ => return Err(Error::Corrupt(format!("a column of type {ty} cannot be read: cast it"))),
    })
}

fn decode_error(error: Box<dyn std::error::Error + Sync + Send>) -> Error {
    Error::Corrupt(format!("a value does not decode: {error}"))
}

/// Any column's raw value with its type, or `None` for NULL.
pub(crate) struct Raw<'a>(pub(crate) Option<(Type, &'a [u8])>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some((ty.clone(), raw))))
    }

    fn from_sql_null(
        _: &Type,
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

impl ToSql for Arg<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Arg::Null => return Ok(IsNull::Yes),
            Arg::Int(value) => int_to_sql(value, ty, out)?,
            Arg::Real(value) => match *ty {
                Type::FLOAT4 => out.put_f32(value as f32),
                Type::FLOAT8 => out.put_f64(value),
                _ => {
                    return Err(format!("a real cannot be sent as {ty}: cast the parameter").into());
                }
            },
            Arg::Text(text) => {
                if *ty == Type::JSONB {
                    out.put_u8(1);
                }
                out.put_slice(text.as_bytes());
            }
            Arg::Blob(bytes) => out.put_slice(bytes),
            Arg::Texts(texts) => return array_to_sql(&texts, ty, out),
            Arg::Ints(ints) => return array_to_sql(&ints, ty, out),
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A list argument as the array parameter it was inferred as (the statement casts it:
/// `?3::text[]`); anything else is refused, not sent.
fn array_to_sql<T: ToSql>(
    list: &&[T],
    ty: &Type,
    out: &mut BytesMut,
) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
    if !matches!(ty.kind(), postgres::types::Kind::Array(_)) {
        return Err(format!("a list cannot be sent as {ty}: cast the parameter to an array").into());
    }
    list.to_sql(ty, out)
}

/// An integer argument in the width the parameter was inferred as.
fn int_to_sql(
    value: i64,
    ty: &Type,
    out: &mut BytesMut,
) -> std::result::Result<(), Box<dyn std::error::Error + Sync + Send>> {
    match *ty {
        Type::INT4 => out.put_i32(i32::try_from(value)?),
        Type::INT2 => out.put_i16(i16::try_from(value)?),
        Type::BOOL => out.put_u8(u8::from(value != 0)),
        Type::FLOAT8 => out.put_f64(value as f64),
        Type::TEXT | Type::VARCHAR => out.put_slice(value.to_string().as_bytes()),
        Type::INT8 => out.put_i64(value),
        _ => return Err(format!("an integer cannot be sent as {ty}: cast the parameter").into()),
    }
    Ok(())
}

impl Error {
    /// Maps a PostgreSQL error onto this enum: lock waits, serialisation failures and
    /// deadlocks are `Busy`, and the storage states
    /// have their own variants.
    pub(crate) fn from_postgres(error: postgres::Error) -> Self {
        let Some(code) = error.code() else {
            return Self::Postgres(error.to_string());
        };
        let message =
            error.as_db_error().map_or_else(|| error.to_string(), |db| db.message().to_owned());
        match code {
            c if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::LOCK_NOT_AVAILABLE =>
            {
                Self::Busy
            }
            c if *c == SqlState::READ_ONLY_SQL_TRANSACTION => Self::ReadOnly,
            c if *c == SqlState::DISK_FULL => Self::DiskFull,
            c if *c == SqlState::DATA_CORRUPTED || *c == SqlState::INDEX_CORRUPTED => {
                Self::Corrupt(message)
            }
            c if *c == SqlState::INSUFFICIENT_PRIVILEGE => Self::Forbidden(message),
            c => Self::Postgres(format!("{} ({})", message, c.code())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_version_after_the_first_postgres_one_has_its_step() {
        let steps = i64::try_from(POSTGRES_STEPS.len()).unwrap_or(i64::MAX);
        assert_eq!(POSTGRES_FIRST_VERSION + steps, SCHEMA_VERSION);
    }

    /// With a server to try on (`SPINDLE_TEST_PG`), a session in a schema of its own (a fresh
    /// name, for the caller to drop) holding `tables`, and the schema's name; `None` without.
    fn scratch_schema(tables: &str) -> Result<Option<(PgConn, String)>> {
        let Ok(server) = std::env::var("SPINDLE_TEST_PG") else {
            return Ok(None);
        };
        let schema = format!("s_{}", uuid::Uuid::now_v7().simple());
        let conn = PgConn::connect(&server)?;
        conn.batch(&format!("CREATE SCHEMA {schema}; SET search_path = {schema}; {tables}"))?;
        Ok(Some((conn, schema)))
    }

    /// With a server to try it on (`SPINDLE_TEST_PG`): a store at the first PostgreSQL
    /// version (only its record of itself, in a scratch schema) is taken to the next by a
    /// step, once, and is then too new for this Spindle if that is still the first version.
    #[test]
    fn an_older_store_is_upgraded_step_by_step_at_open() -> Result<()> {
        let Some((conn, schema)) = scratch_schema(&format!(
            "CREATE TABLE spindle_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
             INSERT INTO spindle_meta VALUES ('application_id', {APPLICATION_ID}),
                                             ('schema_version', {POSTGRES_FIRST_VERSION})"
        ))?
        else {
            return Ok(());
        };
        let step = "ALTER TABLE spindle_meta ADD COLUMN note TEXT";
        for _ in 0..2 {
            conn.begin(true, &[], &[])?;
            upgrade(&conn, &[step])?;
            conn.commit(true, false)?;
        }
        let version = meta_value(&conn, "schema_version")?;
        let noted: Option<i64> = conn.value("SELECT count(note) FROM main.spindle_meta", &[])?;
        let refused = check_version(&conn);
        conn.batch(&format!("DROP SCHEMA {schema} CASCADE"))?;
        assert_eq!(version, Some(POSTGRES_FIRST_VERSION + 1));
        assert_eq!(noted, Some(0), "the step ran once, and its column is there");
        if SCHEMA_VERSION == POSTGRES_FIRST_VERSION {
            assert!(matches!(refused, Err(Error::SchemaTooNew { .. })), "{refused:?}");
        }
        Ok(())
    }

    /// With a server (`SPINDLE_TEST_PG`): a tenant's order lock taken by a call under its
    /// savepoint is let go by the server when the call is rolled back to it, and the session
    /// knows: the next call that needs the order takes it again (else its events would take
    /// positions unguarded).
    #[test]
    fn an_order_lock_a_rolled_back_call_took_is_taken_again() -> Result<()> {
        let Some((conn, schema)) = scratch_schema(
            "CREATE TABLE events (position BIGINT, tenant_id TEXT);
             CREATE TABLE tenants (tenant_id TEXT, status TEXT)",
        )?
        else {
            return Ok(());
        };
        let held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                    AND pid = pg_backend_pid() AND classid = 1397771847 AND objsubid = 2";
        let tenant: Arc<str> = Arc::from("acme");
        let mut seen = Vec::new();
        conn.begin(true, std::slice::from_ref(&tenant), std::slice::from_ref(&tenant))?;
        for rolled_back in [true, false] {
            conn.savepoint_statement(SAVEPOINT_OP)?;
            conn.lock_tenant(&tenant)?;
            seen.push(conn.value::<i64>(held, &[])?.unwrap_or(-1));
            let end = if rolled_back { ROLLBACK_TO_OP } else { RELEASE_OP };
            conn.savepoint_statement(end)?;
            seen.push(conn.value::<i64>(held, &[])?.unwrap_or(-1));
            seen.push(i64::from(conn.holds_tenant(&tenant)));
        }
        conn.rollback()?;
        conn.batch(&format!("DROP SCHEMA {schema} CASCADE"))?;
        // Taken, let go with the savepoint and forgotten; taken again, kept past the release.
        assert_eq!(seen, [1, 0, 0, 1, 1, 1]);
        Ok(())
    }

    #[test]
    fn a_batch_start_reads_the_head_of_a_tenant_named_like_a_schema() {
        let tenant: Arc<str> = Arc::from("main.domain.com");
        let sql = take_order_sql(&tenant);
        assert!(sql.contains("tenant_id = E'main.domain.com'"), "{sql}");
        assert!(!sql.contains("FROM main.events"), "{sql}");
        for shared in [&[][..], &[Arc::clone(&tenant)][..]] {
            let sql = begin_sql(true, &[Arc::clone(&tenant)], shared);
            assert!(sql.contains("tenant_id = E'main.domain.com'"), "{sql}");
            assert!(!sql.contains("FROM main.events"), "{sql}");
            assert!(!sql.contains("FROM main.tenants"), "{sql}");
            assert_eq!(sql.contains("_lock_shared("), !shared.is_empty(), "{sql}");
        }
    }

    #[test]
    fn the_rewrite_changes_parameters_schema_and_hints_but_not_literals() {
        let sql = "SELECT 'main.x ?1', \"main.y\" FROM main.mine INDEXED BY mine_by_x
                   WHERE a = ?1 AND b = ?12 AND domain.c = 1";
        assert_eq!(
            rewrite(sql),
            "SELECT 'main.x ?1', \"main.y\" FROM mine \n                   WHERE a = $1 AND b = $12 \
             AND domain.c = 1"
        );
        assert_eq!(rewrite("x = 'it''s ?1' AND y = ?2"), "x = 'it''s ?1' AND y = $2");
    }
}
