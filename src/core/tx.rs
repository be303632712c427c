//! `Tx`: what an operation sees of the open transaction.
//!
//! A `Tx` lives for one call of a batch. It hands out the batch's timestamp, the caller's tenant
//! and role, the limits, composition of further ops (each under its own nested savepoint), the
//! event log, and a narrow SQL handle for the caller's own tables. Events appended through it are
//! collected here and published by the actor only after `COMMIT` succeeds.

use std::borrow::Borrow;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

use rusqlite::Connection;
use serde_json::Value;

use crate::core::db::{Db, OwnedArg};
use crate::core::events::{self, Appended, OwnedStreams, Stream};
use crate::core::meter::Tallies;
pub(crate) use crate::core::meter::Tally;
use crate::core::op::{Op, Role};
use crate::core::presence::Presence;
use crate::core::publish::Published;
use crate::core::sqlite::guard::{CallGuard, SchemaLinks};
use crate::core::sqlite::raw::Sql;
use crate::error::{Error, Result};
use crate::ids::IdGen;
use crate::limits::Limits;

/// The open transaction, as seen by one operation or one [`Store::transaction`] closure.
///
/// [`Store::transaction`]: crate::Store::transaction
pub struct Tx<'a> {
    engine: Engine<'a>,
    now_ms: i64,
    scope: &'a Scope,
    published: Vec<Published>,
    /// What the ops tallied for the metrics, counted after commit.
    tallies: Tallies,
    publishing: bool,
    rang: bool,
    alarm_ms: Option<i64>,
    tenants_changed: bool,
    /// Whether the caller's closure asked for [`Tx::sqlite`]: the actor then checks the
    /// connection afterwards.
    caller_sql: Cell<bool>,
    /// A reader's transaction ([`Store::read`](crate::Store::read), or an op on a reader
    /// thread): ops that may write, appends and raw SQL are refused.
    read_only: bool,
    /// Whether writes of [`Tx::write_late`] wait for the batch's end (see there).
    writes_late: bool,
    /// The writes left for the batch's end, in the order they were asked for.
    late: Vec<LateWrite>,
}

/// A write a call leaves for the end of its batch (`Tx::write_late`): a statement with its
/// arguments, and the key its batch sorts such writes by before it sends them.
#[derive(Debug)]
pub(crate) struct LateWrite {
    /// What the batch sorts its late writes by: the row they lock, so that two batches lock
    /// such rows in one order.
    pub(crate) key: String,
    /// The statement.
    pub(crate) sql: &'static str,
    /// Its arguments.
    pub(crate) args: Vec<OwnedArg>,
}

/// What the actor lends every `Tx` of a batch.
#[derive(Clone, Copy)]
pub(crate) struct Engine<'a> {
    pub(crate) db: Db<'a>,
    /// What only the SQLite engine has: the call guard and a caller's raw SQL.
    pub(crate) sqlite: Option<SqliteParts<'a>>,
    pub(crate) limits: &'a Limits,
    pub(crate) ids: &'a IdGen,
    /// The domains' checks of which streams only they may write.
    pub(crate) owned_streams: &'a [OwnedStreams],
}

/// The SQLite engine's connection, its call guard, what the checks of a caller's SQL know
/// of the schema, and the store's presence on its file.
#[derive(Clone, Copy)]
pub(crate) struct SqliteParts<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) guard: &'a CallGuard,
    pub(crate) schema: &'a RefCell<SchemaLinks>,
    /// A writable file store's presence lock (`None` in memory, read-only, or on a VFS of the
    /// caller's own).
    pub(crate) presence: Option<&'a Presence>,
}

impl Engine<'_> {
    /// Runs the crate's own work past the call guard (which watches only a caller's SQL).
    fn internal<T>(&self, work: impl FnOnce() -> T) -> T {
        match self.sqlite {
            Some(parts) => parts.guard.internal(work),
            None => work(),
        }
    }
}

/// Who a call runs as: the tenant whose data it may touch and the role it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scope {
    pub(crate) tenant: Arc<str>,
    pub(crate) role: Role,
    /// Bound to its tenant by an API token: it cannot move to another tenant, administer
    /// tenants, or read the store's tables through raw SQL. A view opened from a file is not.
    pub(crate) bound: bool,
}

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("now_ms", &self.now_ms)
            .field("tenant", &self.scope.tenant)
            .field("role", &self.scope.role)
            .field("events", &self.published.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Tx<'a> {
    /// The batch's timestamp in epoch milliseconds: one value for every operation of the batch,
    /// never smaller than the previous batch's.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// The tenant this transaction runs for.
    pub fn tenant(&self) -> &str {
        &self.scope.tenant
    }

    /// The role of the view that submitted this transaction.
    pub fn role(&self) -> Role {
        self.scope.role
    }

    /// Whether this is the store owner's administrator (a view opened from the file, not one
    /// bound to a tenant by a token): only it administers tenants.
    pub(crate) fn is_system(&self) -> bool {
        !self.scope.bound && self.scope.role == Role::Admin
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        self.engine.limits
    }

    /// A new UUID v7 id, time-ordered by the batch's timestamp.
    pub fn new_id(&self) -> String {
        self.engine.ids.next(self.now_ms)
    }

    /// Fills `out` with random bytes from the store's randomness (seeded by `Options::seed`).
    pub(crate) fn fill_random(&self, out: &mut [u8]) {
        self.engine.ids.fill(out);
    }

    /// Runs another operation inside this transaction, under its own savepoint: if it fails,
    /// its writes and events are rolled back and the error is returned, and the rest of this
    /// transaction carries on (or not) as the caller decides.
    ///
    /// # Errors
    /// `Forbidden` if the view's role does not allow the operation; otherwise the op's own error.
    pub fn exec<O: Op>(&mut self, op: O) -> Result<O::Output> {
        if !self.scope.role.allows(op.access()) {
            return Err(forbidden(std::any::type_name::<O>(), self.scope.role));
        }
        if self.read_only && op.writes() {
            return Err(read_transaction(std::any::type_name::<O>()));
        }
        if let Err(error) = op.check_shape(self.limits()) {
            crate::core::op::forget_if_deep(op, &error);
            return Err(error);
        }
        let engine = self.engine;
        engine.internal(|| self.nested(|tx| op.apply(tx)))
    }

    /// Runs `work` under a savepoint of its own: on `Err` its writes and events are rolled
    /// back, and the error is returned.
    pub(crate) fn nested<T>(&mut self, work: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let (mark, late) = (self.published.len(), self.late.len());
        let (rang, alarm_ms, tallies) = (self.rang, self.alarm_ms, self.tallies);
        self.control("SAVEPOINT nested")?;
        let result = work(self);
        let ended = match &result {
            Ok(_) => self.control("RELEASE nested"),
            // If SQLite already rolled the whole transaction back (disk full, I/O error), the
            // savepoint is gone; the actor notices, so the work's own error is the one to return.
            Err(_) => {
                self.control("ROLLBACK TO nested").and_then(|()| self.control("RELEASE nested"))
            }
        };
        if result.is_err() || ended.is_err() {
            self.published.truncate(mark);
            self.late.truncate(late);
            self.rang = rang;
            self.alarm_ms = alarm_ms;
            self.tallies = tallies;
        }
        let output = result?;
        ended?;
        Ok(output)
    }

    /// Runs `work` as another tenant (for the store's own sweeps across tenants): its events
    /// go to that tenant's streams. The role stays. `None`, without running it, while another
    /// process's transaction writes the tenant (PostgreSQL): a sweep never waits for one in
    /// the middle of its batch, and tries again later.
    pub(crate) fn as_tenant<T>(
        &mut self,
        tenant: &str,
        work: impl FnOnce(&mut Tx<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        if !self.db().try_lock_tenant_writes(tenant)? {
            return Ok(None);
        }
        let scope =
            Scope { tenant: Arc::from(tenant), role: self.scope.role, bound: self.scope.bound };
        let mut other = Tx::new(self.engine, self.now_ms, &scope);
        other.publishing = self.publishing;
        let result = other.nested(work);
        let finished = other.finish();
        self.published.extend(finished.published);
        self.tallies.merge(finished.tallies);
        self.late.extend(finished.late);
        self.rang |= finished.rang;
        self.tenants_changed |= finished.tenants_changed;
        if let Some(at_ms) = finished.alarm_ms {
            self.set_alarm(at_ms);
        }
        result.map(Some)
    }

    /// Runs one of the crate's own savepoint statements, past the call guard.
    fn control(&self, sql: &str) -> Result<()> {
        let engine = self.engine;
        engine.internal(|| engine.db.execute(sql, &[]))?;
        Ok(())
    }

    /// Appends an event to `stream`; it is published to subscribers after commit.
    ///
    /// # Errors
    /// `InvalidInput` or `TooLarge` for a bad stream id, event type or payload, and for the
    /// stream of a registered process or an existing execution (their domains write those).
    pub fn append_event(
        &mut self,
        stream: impl Borrow<Stream>,
        event_type: &str,
        payload: Value,
    ) -> Result<Appended> {
        self.writable("an append")?;
        let (stream, engine) = (stream.borrow(), self.engine);
        engine.internal(|| events::check_open_to_callers(self, stream))?;
        engine.internal(|| self.nested(|tx| events::append(tx, stream, event_type, payload, None)))
    }

    /// Appends an event unless one with the same `idem_key` exists on the stream: the same type
    /// and payload return the existing event (`existed: true`) and write nothing; different
    /// content is `Conflict`.
    ///
    /// # Errors
    /// `Conflict` for a reused key with different content; `InvalidInput`/`TooLarge` for bad input.
    pub fn append_event_idempotent(
        &mut self,
        stream: impl Borrow<Stream>,
        event_type: &str,
        payload: Value,
        idem_key: &str,
    ) -> Result<Appended> {
        self.writable("an append")?;
        let (stream, engine) = (stream.borrow(), self.engine);
        let key = Some(idem_key);
        engine.internal(|| events::check_open_to_callers(self, stream))?;
        engine.internal(|| self.nested(|tx| events::append(tx, stream, event_type, payload, key)))
    }

    /// SQL of the caller's own, for its own tables, inside this transaction, on a store of the
    /// SQLite engine: statements only, never the store's connection. See [`Sql`] for exactly
    /// what it may and may not do; what it may not is refused with `Forbidden` and writes
    /// nothing.
    ///
    /// # Errors
    /// `WrongEngine` on a store of another engine (PostgreSQL).
    pub fn sqlite(&self) -> Result<Sql<'_>> {
        self.writable("raw SQL (Tx::sqlite)")?;
        let parts = self.sqlite_parts()?;
        Ok(Sql::new(parts.conn, parts.guard))
    }

    /// SQL of the caller's own inside this transaction, on a store of the PostgreSQL engine:
    /// one statement at a time, each under a savepoint of its own. See [`PgSql`] for what it
    /// refuses.
    ///
    /// # Errors
    /// `WrongEngine` on a store of another engine (SQLite); `Forbidden` for a view bound to
    /// its tenant by a token (the store's tables hold every tenant's rows).
    ///
    /// [`PgSql`]: crate::PgSql
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Result<crate::core::postgres::raw::PgSql<'_>> {
        self.writable("raw SQL (Tx::postgres)")?;
        let Some(conn) = self.engine.db.postgres_session() else {
            return Err(Error::WrongEngine("the PostgreSQL handle (Tx::postgres)".into()));
        };
        if self.scope.bound {
            return Err(Error::Forbidden("a view bound to its tenant runs no raw SQL".into()));
        }
        Ok(crate::core::postgres::raw::PgSql::new(conn))
    }

    /// The SQLite engine's parts, once the caller's SQL is noted: before its first statement,
    /// the schema the checks know is brought up to date (another connection may have moved it).
    fn sqlite_parts(&self) -> Result<SqliteParts<'a>> {
        let Some(parts) = self.engine.sqlite else {
            return Err(Error::WrongEngine("the SQLite handle (Tx::sqlite)".into()));
        };
        if !self.caller_sql.replace(true) {
            let SqliteParts { conn, guard, schema, .. } = parts;
            guard.internal(|| schema.borrow_mut().refresh(conn, guard));
        }
        Ok(parts)
    }

    /// Runs `sql` as the caller's SQL but past the call guard: what the guard would refuse,
    /// done anyway, for tests of the actor's check behind it.
    #[cfg(test)]
    pub(crate) fn sql_past_the_guard(&self, sql: &str) -> Result<()> {
        let SqliteParts { conn, guard, .. } = self.sqlite_parts()?;
        guard.internal(|| conn.execute_batch(sql))?;
        Ok(())
    }

    /// The open transaction's connection, for the crate's own statements (ops' SQL is trusted).
    pub(crate) fn db(&self) -> Db<'a> {
        self.engine.db
    }

    /// Whether this store is the only writable one open on its database, and if so keeps every
    /// other from opening until [`Tx::release_alone`] (see `core::presence`): a SQLite file
    /// store asks its presence lock, a PostgreSQL store its session's.
    pub(crate) fn hold_alone(&self) -> Result<bool> {
        match self.engine.sqlite.and_then(|parts| parts.presence) {
            Some(presence) => presence.hold_alone(),
            None => self.db().hold_alone(),
        }
    }

    /// Lets other stores open again after [`Tx::hold_alone`] returned `true`.
    pub(crate) fn release_alone(&self) -> Result<()> {
        match self.engine.sqlite.and_then(|parts| parts.presence) {
            Some(presence) => presence.release_alone(),
            None => self.db().release_alone(),
        }
    }

    /// Whether `stream` is one only its domain may write (a registered process's, an
    /// execution's), as the domains registered with the engine say.
    pub(crate) fn stream_is_owned(&self, stream: &Stream) -> Result<bool> {
        for owns in self.engine.owned_streams {
            if owns(self.db(), self.tenant(), stream)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl<'a> Tx<'a> {
    pub(crate) fn new(engine: Engine<'a>, now_ms: i64, scope: &'a Scope) -> Self {
        Self {
            engine,
            now_ms,
            scope,
            published: Vec::new(),
            tallies: Tallies::default(),
            publishing: true,
            rang: false,
            alarm_ms: None,
            tenants_changed: false,
            caller_sql: Cell::new(false),
            read_only: false,
            writes_late: false,
            late: Vec::new(),
        }
    }

    /// Lets this call's [`Tx::write_late`] writes wait for its batch's end: for a call that
    /// shares its tenants' turn on PostgreSQL (`Sealed::shares_turn`), whose batch runs beside
    /// other such batches.
    pub(crate) fn set_writes_late(&mut self) {
        self.writes_late = true;
    }

    /// Whether [`Tx::write_late`] writes wait for the batch's end.
    pub(crate) fn writes_late(&self) -> bool {
        self.writes_late
    }

    /// Leaves `sql` with `args` for the end of the batch of this call, which writes late
    /// (`writes_late`: it shares its tenants' turn), if the call is kept: it goes with the
    /// commit (a call of the batch that does not share the turn, which may read such rows,
    /// starts a transaction after it). For a blind write to a row that batches sharing the
    /// turn would otherwise all lock from their first statement to their commit (a kept
    /// count): the row is then locked only for the commit's round trip. Nothing in a call that
    /// shares the turn may read what such a write writes.
    pub(crate) fn write_late(&mut self, key: String, sql: &'static str, args: Vec<OwnedArg>) {
        debug_assert!(self.writes_late, "a write left late by a call that writes at once");
        self.late.push(LateWrite { key, sql, args });
    }

    /// Makes this a reader's transaction: what may write is refused (see [`Tx::exec`]).
    pub(crate) fn set_read_only(&mut self) {
        self.read_only = true;
    }

    /// Refuses `what` in a reader's transaction.
    fn writable(&self, what: &str) -> Result<()> {
        if self.read_only {
            return Err(read_transaction(what));
        }
        Ok(())
    }

    /// Tells the transaction whether any subscriber is live: if none is, events are not kept
    /// in memory for publishing (the set of live subscribers changes only between batches).
    pub(crate) fn set_publishing(&mut self, publishing: bool) {
        self.publishing = publishing;
    }

    /// Whether committed events will be published to live subscribers.
    pub(crate) fn publishing(&self) -> bool {
        self.publishing
    }

    /// Records an event written in this transaction, to publish after commit.
    pub(crate) fn record(&mut self, published: Published) {
        self.published.push(published);
    }

    /// The shared tenant id, cheap to clone into published events.
    pub(crate) fn tenant_arc(&self) -> &Arc<str> {
        &self.scope.tenant
    }

    /// Asks for the store's waiters (a blocking claim, say) to be woken once this transaction
    /// has committed: new work may be there for them.
    pub(crate) fn ring_bell(&mut self) {
        self.rang = true;
    }

    /// Asks the actor to run its alarm call once the clock reaches `at_ms` (a deadline that
    /// must be acted on without a caller): before the first batch stamped at or after it, or
    /// as a batch of its own when the store is idle. Kept only if this transaction commits.
    pub(crate) fn set_alarm(&mut self, at_ms: i64) {
        self.alarm_ms = Some(self.alarm_ms.map_or(at_ms, |ms| ms.min(at_ms)));
    }

    /// Counts `n` more of `tally` for the metrics once the transaction commits (nothing if this
    /// op, or its transaction, is rolled back).
    pub(crate) fn tally(&mut self, tally: Tally, n: u64) {
        self.tallies.add(tally, n);
    }

    /// Tells the actor that a tenant's status may have changed: it forgets what it knew of
    /// which tenants may write.
    pub(crate) fn tenants_changed(&mut self) {
        self.tenants_changed = true;
    }

    /// Hands the recorded events, whether the bell was rung, the alarm, and whether tenants
    /// changed, to the actor.
    pub(crate) fn finish(self) -> Finished {
        Finished {
            published: self.published,
            tallies: self.tallies,
            rang: self.rang,
            alarm_ms: self.alarm_ms,
            tenants_changed: self.tenants_changed,
            caller_sql: self.caller_sql.get(),
            late: self.late,
        }
    }
}

/// What a call left for the actor to do after commit.
pub(crate) struct Finished {
    pub(crate) published: Vec<Published>,
    /// What the call tallied for the metrics.
    pub(crate) tallies: Tallies,
    pub(crate) rang: bool,
    pub(crate) alarm_ms: Option<i64>,
    pub(crate) tenants_changed: bool,
    /// Whether the caller's own SQL ran (see [`Tx::sqlite`]).
    pub(crate) caller_sql: bool,
    /// The writes the call left for its batch's end (`Tx::write_late`).
    pub(crate) late: Vec<LateWrite>,
}

/// The error for something that may write, asked for in a read transaction.
fn read_transaction(what: &str) -> Error {
    Error::InvalidInput(format!(
        "{what} may write: a read transaction (Store::read) runs only what reads; use \
         Store::transaction"
    ))
}

/// The error for an operation the view's role may not perform.
pub(crate) fn forbidden(op_name: &str, role: Role) -> Error {
    Error::Forbidden(format!("role {} may not run {op_name}", role.as_str()))
}
