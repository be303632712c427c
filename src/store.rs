//! `Store`: the cheap, cloneable handle callers hold.
//!
//! A handle holds no connection: it sends typed calls to its thread's writer actor's bounded
//! mailbox (a store has one writer, or on PostgreSQL a few: `core::writers`) and waits for the
//! reply on a channel of its own. Clones and tenant views share the writers; the store
//! closes when `close()` is called or when the last handle is dropped. A subscription holds only
//! a weak reference, so it never keeps a store open.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use parking_lot::Mutex;

use crate::core::actor::{EngineHooks, Inline, spin_recv};
use crate::core::backup::{self, BackupProgress, BackupReport};
use crate::core::bell::Bell;
use crate::core::clock::Clock;
use crate::core::events::Stream;
use crate::core::msg::{Call, InFlightMark, Msg};
use crate::core::op::{Op, Role, TxOutcome};
use crate::core::presence::{HoldAlone, ReleaseAlone};
use crate::core::publish::Filter;
use crate::core::readers::Readers;
use crate::core::schema::Location;
use crate::core::state::ActorState;
use crate::core::tx::{Scope, Tx};
use crate::core::writers::Writers;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::options::Options;
use crate::subscription::Subscription;

/// How long a lone caller spins for its reply before parking.
const CALLER_SPIN: Duration = Duration::from_micros(60);

/// How often a parked caller (or subscriber) checks that the actor is still there to answer.
pub(crate) const LIVENESS_CHECK: Duration = Duration::from_millis(100);

/// The tenant a store view uses unless told otherwise.
pub const DEFAULT_TENANT: &str = "default";

/// A handle to an open store: `Clone + Send + Sync`, cheap to clone, bound to one tenant.
///
/// ```
/// # fn main() -> spindle::Result<()> {
/// use spindle::{Store, Stream};
/// let store = Store::open_in_memory()?;
/// let orders = Stream::custom("orders");
/// let appended = store.events().append(&orders, "placed", serde_json::json!({"id": 7}))?;
/// assert_eq!(appended.seq, 1);
/// store.close()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
    scope: Scope,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("tenant", &self.scope.tenant)
            .field("role", &self.scope.role)
            .field("closed", &self.shared.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// What the engine and the handle need from the domains, which they do not name: built in
/// one place, `crate::domains`.
#[derive(Debug)]
pub(crate) struct DomainHooks {
    /// What the engine needs (the alarm call, the streams only their domain may write).
    pub(crate) engine: EngineHooks,
    /// Run once a writable store is open, in order; `recover` is `Options::recover_on_open`
    /// (recovering interrupted work, the graphs' for one).
    pub(crate) at_open: &'static [fn(&Store, bool) -> Result<()>],
}

/// What every handle of one store shares.
pub(crate) struct Shared {
    runner: Runner,
    /// The reader threads, if the store reads apart from its writer (`Options::readers`).
    readers: Option<Readers>,
    closed: AtomicBool,
    state: Arc<ActorState>,
    limits: Limits,
    clock: Arc<dyn Clock>,
    /// What `backup_to` copies.
    source: backup::Source,
}

thread_local! {
    /// This thread's writes sent with `submit` and not yet answered, per store (by the address
    /// of its `Shared`): a read it sends meanwhile must see them, so it runs on the writer,
    /// after them (ops one thread submits run in the order it sent them).
    static IN_FLIGHT: RefCell<Vec<(usize, Arc<AtomicUsize>)>> = const { RefCell::new(Vec::new()) };
}

/// Where the actor runs.
enum Runner {
    /// On threads of their own, fed through their mailboxes: one writer, or on PostgreSQL
    /// several (`Options::writers`).
    Threads(Writers),
    /// On the callers' threads, one call at a time (`Options::inline`).
    Inline(Box<Inline>),
}

impl Store {
    /// Opens the store at `location` with the domains' `hooks` (what `crate::domains` opens
    /// every store with: the handle does not name the domains).
    pub(crate) fn start(
        location: Location,
        options: Options,
        hooks: &'static DomainHooks,
    ) -> Result<Store> {
        options.validate()?;
        let limits = options.limits.clone();
        let clock = Arc::clone(&options.clock);
        let (recover, read_only) = (options.recover_on_open, options.read_only);
        let state = Arc::new(ActorState::default());
        let (later_location, later_options) = (location.clone(), options.clone());
        let source = backup::Source::of(&location, &options);
        let runner = if options.inline {
            let inline = Inline::open(&location, options, Arc::clone(&state), &hooks.engine)?;
            Runner::Inline(Box::new(inline))
        } else {
            Runner::Threads(Writers::spawn(location, options, &state, &hooks.engine)?)
        };
        let closed = AtomicBool::new(false);
        let mut shared = Shared { runner, readers: None, closed, state, limits, clock, source };
        // The writer made or upgraded the schema; the readers open the store as it now is.
        shared.readers =
            Readers::start(&later_location, &later_options, &shared.state, &hooks.engine)?;
        let scope = Scope { tenant: Arc::from(DEFAULT_TENANT), role: Role::Admin, bound: false };
        let store = Store { shared: Arc::new(shared), scope };
        if !read_only {
            store.run_at_open(hooks.at_open, recover)?;
        }
        // Once recovered: a store recovers only while no other session of it is there.
        if let Runner::Threads(writers) = &store.shared.runner {
            let state = &store.shared.state;
            writers.start_others(&later_location, &later_options, state, &hooks.engine)?;
        }
        Ok(store)
    }

    /// Runs what the domains do when a writable store opens: recovery (if `recover`) only
    /// while no other writable store is open on the database (see `core::presence` and
    /// `Options::recover_on_open`), and every other store waits to open until it is done.
    fn run_at_open(&self, at_open: &[fn(&Store, bool) -> Result<()>], recover: bool) -> Result<()> {
        let alone = recover && self.exec(HoldAlone)?;
        if recover && !alone {
            tracing::info!("spindle: another writer has the store open; no recovery at open");
        }
        let ran = at_open.iter().try_for_each(|at_open| at_open(self, alone));
        let released = if alone { self.exec(ReleaseAlone) } else { Ok(()) };
        ran.and(released)
    }

    /// Runs one operation in its own savepoint of the next batch; returns its output once the
    /// batch has committed. On PostgreSQL an op that lost a deadlock or a serialisation
    /// failure to another transaction is applied again in the next batch (at most 3 more
    /// times) before it is answered `Busy`.
    ///
    /// # Errors
    /// The op's own error (its writes rolled back), `OpPanicked` if it panicked, the batch's
    /// error if the commit failed, `Forbidden`/`ReadOnly` if it may not run, `Closed` after
    /// close.
    pub fn exec<O: Op>(&self, op: O) -> Result<O::Output> {
        self.shared.exec(&self.scope, op)
    }

    /// Sends one operation without waiting for its reply: the caller keeps going and collects
    /// the output later with [`Pending::wait`]. One thread can so keep many operations in
    /// flight, and they share group commits instead of waiting for one each.
    ///
    /// The guarantees are those of [`Store::exec`]: the op runs in its own savepoint, and its
    /// reply (output or error) is sent only once its batch has committed. Writes submitted by
    /// one thread run in the order they were submitted, and a read sees every write its thread
    /// submitted before it (such a read waits for them on the writer's thread); a read
    /// submitted before a write may run on a reader after it, and see it too. Each op stands
    /// alone: a failed one does not stop the ones after it. For
    /// all-or-nothing, compose the ops in one [`Store::transaction`] (a transaction is itself one
    /// call, and a closure cannot submit: it runs on the store's thread, where a call into the
    /// store is refused). Dropping a `Pending` does not cancel its op. When the mailbox is full
    /// (`Options::mailbox_capacity`), `submit` blocks until there is room.
    ///
    /// ```
    /// # fn main() -> spindle::Result<()> {
    /// use spindle::{Store, Stream, log::Append};
    /// let store = Store::open_in_memory()?;
    /// let stream = Stream::custom("clicks");
    /// let click = |n: u64| Append {
    ///     stream: stream.clone(),
    ///     event_type: "click".into(),
    ///     payload: serde_json::json!(n),
    ///     idem_key: None,
    /// };
    /// // Ten appends in flight at once: they share one commit.
    /// let pending: Vec<_> =
    ///     (0..10).map(|n| store.submit(click(n))).collect::<spindle::Result<_>>()?;
    /// let seqs: Vec<u64> =
    ///     pending.into_iter().map(|p| p.wait().map(|a| a.seq)).collect::<spindle::Result<_>>()?;
    /// assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// At once: the op's shape errors (as `exec`), `Closed` after close, `InvalidInput` from
    /// inside an operation. Every other error comes from [`Pending::wait`].
    pub fn submit<O: Op>(&self, op: O) -> Result<Pending<O::Output>> {
        self.shared.submit(&self.scope, op)
    }

    /// Runs a closure as one unit of work: everything it does commits or rolls back together,
    /// as its [`TxOutcome`] says, and either way its value is returned (after the commit).
    ///
    /// The closure runs on the store's thread, so it is `Send + 'static`: move what it needs
    /// into it. It must not call back into the store through a handle (that call is refused
    /// with `InvalidInput`); compose with [`Tx::exec`] instead.
    ///
    /// ```
    /// # fn main() -> spindle::Result<()> {
    /// use spindle::{Store, Stream, TxOutcome};
    /// let store = Store::open_in_memory()?;
    /// let stream = Stream::custom("s");
    /// let s = stream.clone();
    /// let seq = store.transaction(move |tx| {
    ///     let first = tx.append_event(&s, "a", serde_json::json!(1))?;
    ///     tx.append_event(&s, "b", serde_json::json!(2))?;
    ///     Ok(TxOutcome::Rollback(first.seq))
    /// })?;
    /// assert_eq!(seq, 1);
    /// assert_eq!(store.events().head(&stream)?, 0); // rolled back: nothing was kept
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// The closure's error (everything rolled back), `OpPanicked`, the batch's commit error,
    /// `ReadOnly`/`Forbidden` for a view that may not write, `Closed` after close.
    pub fn transaction<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<TxOutcome<T>> + Send + 'static,
    {
        let (reply, answer) = bounded(1);
        self.shared.call(Msg::Run(Call::transaction(f, self.scope.clone(), reply)), &answer)
    }

    /// Runs a closure that only reads, as one unit: on a reader thread's read-only connection
    /// (see [`Options::readers`]), so it never waits for the writer's batch nor holds a
    /// write back, and sees one snapshot of the store from its start: every write whose reply
    /// was sent before it was called, and nothing committed meanwhile. Through [`Tx::exec`]
    /// it runs operations that only read; one that may write, an append, and raw SQL are
    /// refused with `InvalidInput` (use [`Store::transaction`]). Without readers (an in-memory
    /// or inline store, `readers` at 0) it runs on the writer's thread, with the same rules.
    ///
    /// ```
    /// # fn main() -> spindle::Result<()> {
    /// use spindle::{Store, Stream, log::Head};
    /// let store = Store::open_in_memory()?;
    /// let (a, b) = (Stream::custom("a"), Stream::custom("b"));
    /// store.events().append(&a, "x", serde_json::json!(1))?;
    /// let heads = store.read(move |tx| Ok((tx.exec(Head { stream: a })?, tx.exec(Head { stream: b })?)))?;
    /// assert_eq!(heads, (1, 0));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// The closure's error, `OpPanicked`, `Forbidden` for an op the view's role may not run,
    /// `Closed` after close.
    pub fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = bounded(1);
        self.shared.run(Call::read(f, self.scope.clone(), reply), &answer)
    }

    /// Follows one stream: every event with `seq > after_seq`, the backlog first, then live.
    ///
    /// # Errors
    /// `InvalidInput`/`TooLarge` for a bad stream id; `Closed` after close.
    pub fn subscribe(&self, stream: impl Borrow<Stream>, after_seq: u64) -> Result<Subscription> {
        self.subscribe_with_buffer(stream, after_seq, self.shared.limits.subscriber_buffer_max)
    }

    /// As [`Store::subscribe`], with a live buffer of `buffer` events (at most
    /// `Limits::subscriber_buffer_max`). A subscriber that lets its buffer fill is not told:
    /// it silently catches up by paging.
    ///
    /// # Errors
    /// As `subscribe`, and `InvalidInput`/`TooLarge` for a buffer of 0 or past the limit.
    pub fn subscribe_with_buffer(
        &self,
        stream: impl Borrow<Stream>,
        after_seq: u64,
        buffer: usize,
    ) -> Result<Subscription> {
        let stream = stream.borrow();
        self.shared.limits.check_id("stream id", stream.id())?;
        self.subscription(Filter::Stream(stream.clone()), after_seq, buffer)
    }

    /// Follows every stream of this view's tenant: every event with `position >
    /// after_position`, the backlog first, then live.
    ///
    /// # Errors
    /// `Closed` after close.
    pub fn subscribe_all(&self, after_position: u64) -> Result<Subscription> {
        self.subscribe_all_with_buffer(after_position, self.shared.limits.subscriber_buffer_max)
    }

    /// As [`Store::subscribe_all`], with a live buffer of `buffer` events.
    ///
    /// # Errors
    /// As `subscribe_all`, and `InvalidInput`/`TooLarge` for a bad buffer size.
    pub fn subscribe_all_with_buffer(
        &self,
        after_position: u64,
        buffer: usize,
    ) -> Result<Subscription> {
        self.subscription(Filter::All, after_position, buffer)
    }

    fn subscription(&self, filter: Filter, after: u64, buffer: usize) -> Result<Subscription> {
        let limits = &self.shared.limits;
        if buffer == 0 {
            return Err(Error::InvalidInput("subscriber buffer must hold at least 1".into()));
        }
        if buffer > limits.subscriber_buffer_max {
            return Err(Error::too_large(
                "subscriber buffer",
                limits.subscriber_buffer_max,
                buffer,
            ));
        }
        self.shared.check_open()?;
        let max = limits.subscriptions_max;
        let counted = self.shared.state.subscriptions.fetch_update(
            Ordering::SeqCst,
            Ordering::SeqCst,
            |open| (open < max).then_some(open + 1),
        );
        if let Err(open) = counted {
            return Err(Error::too_large("open subscriptions", max, open + 1));
        }
        let page_size = limits.page_size_max;
        Ok(Subscription::new(&self.shared, self.scope.clone(), filter, after, buffer, page_size))
    }

    /// A view of the same store bound to tenant `id`: everything it reads and writes is that
    /// tenant's, and other tenants' objects behave as missing.
    ///
    /// # Errors
    /// `InvalidInput`/`TooLarge` for a bad tenant id; `Forbidden` from a view a token bound to
    /// another tenant.
    pub fn tenant(&self, id: &str) -> Result<Store> {
        self.shared.limits.check_id("tenant id", id)?;
        if self.scope.bound && id != &*self.scope.tenant {
            return Err(Error::Forbidden(format!(
                "a view bound to tenant {} by a token cannot move to another tenant",
                self.scope.tenant
            )));
        }
        let scope = Scope { tenant: Arc::from(id), role: self.scope.role, bound: self.scope.bound };
        Ok(Store { shared: Arc::clone(&self.shared), scope })
    }

    /// The tenant this view is bound to.
    pub fn tenant_id(&self) -> &str {
        &self.scope.tenant
    }

    /// The role this view holds.
    pub fn role(&self) -> Role {
        self.scope.role
    }

    /// The limits this store enforces.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Another view of the same store, as `scope`.
    pub(crate) fn with_scope(&self, scope: Scope) -> Store {
        Store { shared: Arc::clone(&self.shared), scope }
    }

    /// [`Store::submit`] to writer `lane` of a store with several (see `Shared::submit_on`).
    pub(crate) fn submit_on<O: Op>(&self, lane: usize, op: O) -> Result<Pending<O::Output>> {
        self.shared.submit_on(&self.scope, lane, op)
    }

    /// How many writer actors take this store's calls.
    pub(crate) fn writer_count(&self) -> usize {
        self.shared.writer_count()
    }

    /// The store clock's time, in epoch milliseconds.
    pub(crate) fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    /// The bell the actor rings after a commit that made work available.
    pub(crate) fn bell(&self) -> &Bell {
        &self.shared.state.bell
    }

    /// How long from now until the store's clock shows `at_ms` (zero if it already does).
    pub(crate) fn until_ms(&self, at_ms: i64) -> Duration {
        let wait_ms = at_ms.saturating_sub(self.shared.clock.now_ms()).max(0);
        Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0))
    }

    /// Copies the store, while it is in use, into a new file at `path`: one consistent
    /// snapshot holding every write whose reply was sent before this call (and nothing of a
    /// batch that had not committed), which [`Store::open`] opens as a store (and
    /// [`Store::restore`] puts in a store's place).
    ///
    /// It neither stops nor slows the writer much: a read-only connection of its own reads one
    /// snapshot while SQLite's online backup copies the file's pages (a reader thread is not
    /// used, so the store's reads go on too). Meanwhile the WAL cannot be reset past that
    /// snapshot, and grows by what is written until the copy is done.
    ///
    /// Nothing appears at `path` until the copy is whole and on disk: it is written to
    /// `PATH.partial-PID-N` in the same directory, flushed, then linked in as `path` (and the
    /// directory flushed). A copy that fails removes that file; a process killed midway leaves
    /// it (with its `-wal` and `-shm` if killed at the very end), never a file at `path`. The
    /// copy is a single file in SQLite's rollback-journal mode, readable without files beside
    /// it; a store opening it to write switches it to WAL.
    ///
    /// ```
    /// # fn main() -> spindle::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let (path, copy) = (dir.path().join("app.db"), dir.path().join("app-backup.db"));
    /// use spindle::{Store, Stream};
    /// let store = Store::open(&path)?;
    /// store.events().append(&Stream::custom("orders"), "placed", serde_json::json!(1))?;
    /// let report = store.backup_to(&copy)?;       // the store stays open and writable
    /// assert!(report.bytes > 0);
    /// let restored = Store::open(&copy)?;
    /// assert_eq!(restored.events().head(Stream::custom("orders"))?, 1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// `StoreFile` when `path` cannot take the copy: of kind `AlreadyExists` when a file is
    /// there (or SQLite's `-wal`, `-shm` or `-journal` beside it; nothing is written), of the
    /// kind the system reported when its directory is missing or may not be written;
    /// `InvalidInput` for an in-memory store or one on a VFS of the caller's own (no file to
    /// copy); `WrongEngine` on PostgreSQL (back it up with `pg_dump` of its schema);
    /// `Forbidden` from a view bound to a tenant by a token (the copy holds every tenant);
    /// `Closed` after close; `DiskFull`, `Io` or `Sqlite` when the copy fails (its partial
    /// file removed).
    pub fn backup_to(&self, path: impl AsRef<Path>) -> Result<BackupReport> {
        self.backup_to_with(path, |_| {})
    }

    /// As [`Store::backup_to`], telling `progress` how far the copy has come after each step
    /// (a step copies up to 256 pages, 1 MiB of a store of 4 KiB pages).
    ///
    /// # Errors
    /// As [`Store::backup_to`].
    pub fn backup_to_with(
        &self,
        path: impl AsRef<Path>,
        mut progress: impl FnMut(BackupProgress),
    ) -> Result<BackupReport> {
        self.shared.check_open()?;
        if self.scope.bound {
            return Err(Error::Forbidden(
                "a view bound to a tenant by a token may not copy the store: it holds every \
                 tenant"
                    .into(),
            ));
        }
        backup::backup(&self.shared.source, path.as_ref(), &mut progress)
    }

    /// Puts a copy of the backup `backup` (a file [`Store::backup_to`] made, or a store file
    /// no process has open) in the place of the store file at `path`, which no process may
    /// have open. Then [`Store::open`] of `path` opens the backup's contents, and a store of
    /// an older schema version is brought up to date by that open.
    ///
    /// The backup is copied into `PATH.partial-PID-N` beside `path` and checked there first:
    /// a Spindle store of a schema version this build opens, SQLite's integrity check, no
    /// foreign key violation. Only then does anything at `path` change: the old store's WAL is
    /// checkpointed into it and its `-wal`, `-shm` and `-journal` removed (SQLite would apply
    /// a stale WAL to the new file), and the copy renamed over it (the directory flushed).
    /// The copy keeps the old store file's mode (and, when run as root, its owner). The whole
    /// time, the restore holds the store's presence lock (`<path>-presence`) exclusively, so
    /// no store opens `path` to write meanwhile (one trying waits up to its busy timeout).
    ///
    /// # Errors
    /// `StoreFile` of kind `ResourceBusy` when a store has `path` open (to write: it holds
    /// the presence lock; or, on Linux, in any way: the kernel lists a lock on the file or
    /// its `-shm`); of kind `InvalidInput` when the file at `path` is neither a Spindle store
    /// nor empty (a restore never replaces another file) or `backup` is not a regular file;
    /// of another kind when `path` cannot hold a store (as [`Store::open`]) or `backup` is
    /// missing. `InvalidInput` when `backup` is the store file itself or holds no Spindle
    /// store, `NotADatabase` when it is not a database, `SchemaTooNew` for a newer Spindle's,
    /// `Corrupt` when it fails the integrity or foreign key check; `Io`, `DiskFull` or
    /// `Sqlite` when the copy fails. Whatever fails, the store at `path` is left as it was
    /// and the partial file removed.
    pub fn restore(backup: impl AsRef<Path>, path: impl AsRef<Path>) -> Result<BackupReport> {
        backup::restore(backup.as_ref(), path.as_ref())
    }

    /// Closes the store for every handle: finishes the queued work, commits, checkpoints and
    /// truncates the WAL, closes the file and stops the thread (if it has one). Later calls on any handle
    /// return `Closed`; closing again returns `Ok`.
    ///
    /// # Errors
    /// The first error met while closing (a failed checkpoint or close). On a full disk the
    /// final checkpoint may fail with `DiskFull`: every commit is still safe in the WAL, and
    /// the next open has them all.
    pub fn close(&self) -> Result<()> {
        if self.shared.state.on_actor_thread() {
            return Err(reentrant());
        }
        self.shared.close()
    }

    /// What the store's threads count of their work (`Store::metrics`).
    pub(crate) fn meter(&self) -> &crate::core::meter::Meter {
        &self.shared.state.meter
    }

    /// The size of the store's WAL file, if it has one of its own.
    pub(crate) fn wal_bytes(&self) -> Option<u64> {
        self.shared.source.wal_bytes()
    }
}

impl Shared {
    pub(crate) fn exec<O: Op>(&self, scope: &Scope, op: O) -> Result<O::Output> {
        let (call, answer) = self.call_of(scope, op)?;
        self.run(call, &answer)
    }

    /// The call that runs `op` in `scope`, and the channel its reply comes on, once the op's
    /// shape is within the store's limits.
    ///
    /// # Errors
    /// The op's shape error (the op is then dropped safely, however deep its values).
    fn call_of<O: Op>(&self, scope: &Scope, op: O) -> Result<(Call, Receiver<Result<O::Output>>)> {
        if let Err(error) = op.check_shape(&self.limits) {
            crate::core::op::forget_if_deep(op, &error);
            return Err(error);
        }
        let (reply, answer) = bounded(1);
        Ok((Call::op(op, scope.clone(), reply), answer))
    }

    /// Runs `call` on a reader if one may (see `readers.rs`), else on the writer, and waits for
    /// its reply.
    pub(crate) fn run<T>(&self, call: Call, answer: &Receiver<Result<T>>) -> Result<T> {
        match self.reader_for(&call) {
            Some(readers) => {
                self.check_open()?;
                readers.send(call)?;
                wait_reply(answer, &self.state)
            }
            None => self.call(Msg::Run(call), answer),
        }
    }

    /// The readers, if they may run `call`: it only reads, the store has readers, and this
    /// thread has no submitted write of this store still unanswered.
    fn reader_for(&self, call: &Call) -> Option<&Readers> {
        let readers = self.readers.as_ref().filter(|_| call.readable)?;
        let address = self.address();
        let waiting = IN_FLIGHT.with(|in_flight| {
            let in_flight = in_flight.borrow();
            let mine = in_flight.iter().find(|(store, _)| *store == address);
            mine.is_some_and(|(_, count)| count.load(Ordering::SeqCst) > 0)
        });
        (!waiting).then_some(readers)
    }

    /// Counts `call`, a write this thread submits, among its unanswered ones until it is
    /// answered.
    fn mark_in_flight(&self, call: &mut Call) {
        if !call.writes || self.readers.is_none() {
            return;
        }
        let address = self.address();
        let counter = IN_FLIGHT.with(|in_flight| {
            let mut in_flight = in_flight.borrow_mut();
            // Forget the counters of stores gone (nothing else holds them) and idle.
            in_flight.retain(|(store, count)| {
                *store == address
                    || Arc::strong_count(count) > 1
                    || count.load(Ordering::SeqCst) > 0
            });
            match in_flight.iter().find(|(store, _)| *store == address) {
                Some((_, count)) => Arc::clone(count),
                None => {
                    let count = Arc::new(AtomicUsize::new(0));
                    in_flight.push((address, Arc::clone(&count)));
                    count
                }
            }
        });
        call.in_flight = Some(InFlightMark::new(&counter));
    }

    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    pub(crate) fn submit<O: Op>(
        self: &Arc<Self>,
        scope: &Scope,
        op: O,
    ) -> Result<Pending<O::Output>> {
        let (mut call, answer) = self.call_of(scope, op)?;
        match self.reader_for(&call) {
            Some(readers) => {
                self.check_open()?;
                readers.send(call)?;
            }
            None => {
                self.mark_in_flight(&mut call);
                self.send(Msg::Run(call))?;
            }
        }
        Ok(Pending { answer, shared: Arc::clone(self), taken: false, _waiting: None })
    }

    /// Sends `op` to writer `lane` (see `Writers::send_on`) without waiting for its reply.
    /// Unlike `submit`, the op is not counted among this thread's unanswered writes: a read
    /// the thread sends meanwhile may run on a reader before it. For the worker pool's rounds,
    /// which read nothing they wrote before their reply.
    pub(crate) fn submit_on<O: Op>(
        self: &Arc<Self>,
        scope: &Scope,
        lane: usize,
        op: O,
    ) -> Result<Pending<O::Output>> {
        let (call, answer) = self.call_of(scope, op)?;
        // Its sender waits for it as a caller of `exec` would (see `Pending::_waiting`),
        // counted before the writer can look.
        let waiting = Some(WaitingCount::enter(&self.state));
        self.send_to(Some(lane), Msg::Run(call))?;
        Ok(Pending { answer, shared: Arc::clone(self), taken: false, _waiting: waiting })
    }

    /// How many writer actors take this store's calls (one but on a PostgreSQL store with
    /// `Options::writers`).
    pub(crate) fn writer_count(&self) -> usize {
        self.state.writers.load(Ordering::Relaxed).max(1)
    }

    /// Sends a message to the actor (blocking while the mailbox is full); an inline store
    /// handles it before this returns.
    pub(crate) fn send(&self, message: Msg) -> Result<()> {
        self.send_to(None, message)
    }

    /// Sends a message to writer `lane` (see `Writers::send_on`), or with none to its writer
    /// (`Writers::send`); an inline store handles it before this returns.
    fn send_to(&self, lane: Option<usize>, message: Msg) -> Result<()> {
        self.check_open()?;
        match (&self.runner, lane) {
            (Runner::Threads(writers), Some(lane)) => writers.send_on(lane, message),
            (Runner::Threads(writers), None) => writers.send(message),
            (Runner::Inline(inline), _) => inline.handle(message),
        }
    }

    /// `Closed` after close; `InvalidInput` on the store's own thread, where waiting for the
    /// actor would mean waiting for itself (an op or transaction calling back into the store).
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.state.on_actor_thread() {
            return Err(reentrant());
        }
        Ok(())
    }

    pub(crate) fn state(&self) -> &Arc<ActorState> {
        &self.state
    }

    fn call<T>(&self, message: Msg, answer: &Receiver<Result<T>>) -> Result<T> {
        let waiting = WaitingGuard::enter(&self.state);
        self.send(message)?;
        if waiting.first
            && let Some(reply) = spin_recv(answer, CALLER_SPIN)
        {
            return reply;
        }
        wait_reply(answer, &self.state)
    }

    fn close(&self) -> Result<()> {
        if let Some(readers) = &self.readers {
            if self.state.on_actor_thread() {
                return Err(reentrant());
            }
            // The readers finish what was sent to them and let go of their snapshots before
            // the writer's last checkpoint.
            self.closed.store(true, Ordering::Release);
            readers.close();
        }
        match &self.runner {
            Runner::Threads(writers) => {
                writers.close(|mailbox, thread| self.close_thread(mailbox, thread))
            }
            Runner::Inline(inline) => {
                if self.state.on_actor_thread() {
                    return Err(reentrant());
                }
                self.closed.store(true, Ordering::Release);
                inline.close()
            }
        }
    }

    fn close_thread(
        &self,
        mailbox: &Sender<Msg>,
        thread: &Mutex<Option<JoinHandle<()>>>,
    ) -> Result<()> {
        let mut thread = thread.lock();
        let Some(handle) = thread.take() else {
            return Ok(());
        };
        self.closed.store(true, Ordering::Release);
        if self.state.on_actor_thread() {
            // The last handle was dropped inside an op: the actor cannot wait for itself. It
            // stops by itself once this handle's mailbox sender is gone and the queue is empty.
            drop(handle);
            return Err(reentrant());
        }
        let (reply, answer) = bounded(1);
        let result = match mailbox.send(Msg::Close(reply)) {
            Ok(()) => wait_reply(&answer, &self.state),
            Err(_) => Ok(()),
        };
        match handle.join() {
            Ok(()) => result,
            Err(_) => Err(Error::Poisoned("the store thread panicked".into())),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn reentrant() -> Error {
    Error::InvalidInput(
        "a store call from inside an operation would wait for itself; compose with tx.exec".into(),
    )
}

/// The reply of an operation sent with [`Store::submit`], not yet received.
///
/// It holds the store open (like a handle) until it is waited for or dropped.
#[must_use = "an op's reply says whether it was kept; wait for it"]
pub struct Pending<T> {
    answer: Receiver<Result<T>>,
    shared: Arc<Shared>,
    taken: bool,
    /// Counted among the callers waiting for the writers (`ActorState::waiting`) until it is
    /// dropped, when its sender waits for nothing else (a worker pool's round): a writer then
    /// need not spin for the next call, and a batch lingers for it as for a blocked caller.
    _waiting: Option<WaitingCount>,
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("ready", &!self.answer.is_empty()).finish()
    }
}

impl<T> Pending<T> {
    /// Waits for the op's reply, sent once its batch has committed.
    ///
    /// # Errors
    /// Those of [`Store::exec`]; `InvalidInput` if `wait_timeout` or `try_wait` already
    /// returned the reply.
    pub fn wait(mut self) -> Result<T> {
        if self.taken {
            return Err(taken());
        }
        self.taken = true;
        let _waiting = WaitingGuard::enter(&self.shared.state);
        wait_reply(&self.answer, &self.shared.state)
    }

    /// Waits at most `timeout` for the reply: `Some` (once: it is then taken) or `None` if it
    /// has not come yet.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<T>> {
        if self.taken {
            return Some(Err(taken()));
        }
        let deadline = Instant::now().checked_add(timeout);
        let reply = loop {
            let left = deadline.map_or(LIVENESS_CHECK, |at| at - Instant::now().min(at));
            match self.answer.recv_timeout(left.min(LIVENESS_CHECK)) {
                Ok(reply) => break reply,
                Err(RecvTimeoutError::Disconnected) => break Err(Error::Closed),
                Err(RecvTimeoutError::Timeout) => {
                    if self.shared.state.exited.load(Ordering::SeqCst) {
                        break self.answer.try_recv().unwrap_or(Err(Error::Closed));
                    }
                    if deadline.is_some_and(|at| Instant::now() >= at) {
                        return None;
                    }
                }
            }
        };
        self.taken = true;
        Some(reply)
    }

    /// The reply if it has come (`Some`, once: it is then taken), without waiting.
    pub fn try_wait(&mut self) -> Option<Result<T>> {
        self.wait_timeout(Duration::ZERO)
    }

    /// The channel the reply comes on, for a caller that selects over it and others (it then
    /// takes the reply with `try_wait`).
    pub(crate) fn receiver(&self) -> &Receiver<Result<T>> {
        &self.answer
    }

    /// Whether the reply has come (and not been taken yet): `wait` would return at once.
    pub fn is_ready(&self) -> bool {
        !self.taken && !self.answer.is_empty()
    }
}

fn taken() -> Error {
    Error::InvalidInput("this pending op's reply was already taken".into())
}

/// Waits for a reply, checking now and then that the actor is still alive: a call that reached
/// the mailbox after the actor's last look is never answered, and must not block forever.
pub(crate) fn wait_reply<T>(answer: &Receiver<Result<T>>, state: &ActorState) -> Result<T> {
    loop {
        match answer.recv_timeout(LIVENESS_CHECK) {
            Ok(reply) => return reply,
            Err(RecvTimeoutError::Disconnected) => return Err(Error::Closed),
            Err(RecvTimeoutError::Timeout) => {
                if state.exited.load(Ordering::SeqCst) {
                    return answer.try_recv().unwrap_or(Err(Error::Closed));
                }
            }
        }
    }
}

/// Counts a caller as waiting for the actor while it lives, for a reply that outlives the
/// call that sent it (`Shared::submit_on`).
struct WaitingCount(Arc<ActorState>);

impl WaitingCount {
    fn enter(state: &Arc<ActorState>) -> Self {
        state.waiting.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(state))
    }
}

impl Drop for WaitingCount {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a caller as waiting for the actor while it lives.
struct WaitingGuard<'a> {
    state: &'a ActorState,
    /// No other caller was waiting when this one began: it spins a moment for its reply.
    first: bool,
}

impl<'a> WaitingGuard<'a> {
    fn enter(state: &'a ActorState) -> Self {
        let before = state.waiting.fetch_add(1, Ordering::Relaxed);
        Self { state, first: before == 0 }
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.state.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
