//! How a store is opened: durability, batching, the mailbox, the clock, limits, read-only, and
//! what fuzz harnesses need (the inline mode, a seed).
//!
//! `Options::default()` gives the safe defaults: WAL with `synchronous=FULL`, a 5 s busy
//! timeout, batches of up to 64 operations, a mailbox of 1024 messages, the system clock and the
//! limits of DESIGN.md §6.

use std::sync::Arc;
use std::time::Duration;

use crate::core::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::setters::setters;

/// What an acknowledged commit survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous=FULL`: a commit survives a process crash and a power loss. The default.
    #[default]
    Full,
    /// `synchronous=NORMAL`: a commit survives a process crash; a power loss may take the last
    /// commits back (the database stays consistent). Faster: no fsync per commit.
    Normal,
}

/// Everything that can be chosen when opening a store. `#[non_exhaustive]`: start from
/// `Options::default()` and chain a setter per field to change, each named after its field:
/// `Options::default().durability(Durability::Normal).readers(0)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// What an acknowledged commit survives.
    pub durability: Durability,
    /// How long a write waits for another connection's lock before failing with `Busy`; at most
    /// `i32::MAX` milliseconds (about 24 days).
    pub busy_timeout: Duration,
    /// Most operations run in one transaction (group commit). At least 1.
    pub batch_max: usize,
    /// Most messages waiting for the actor; callers block (briefly) when it is full. At least 1.
    pub mailbox_capacity: usize,
    /// The source of `Tx::now_ms`.
    pub clock: Arc<dyn Clock>,
    /// The bounds every argument is checked against.
    pub limits: Limits,
    /// Open the file read-only: reads work, every write is refused with `Error::ReadOnly`.
    pub read_only: bool,
    /// Size of the write-ahead log, in bytes, past which the actor forces a checkpoint that
    /// truncates it. Default 64 MiB.
    pub wal_bytes_max: u64,
    /// Recover the running graphs of every tenant when the store opens (`Graphs::recover`).
    /// Default true. A second process that only inspects a store another one is running
    /// (the command-line tool's inspectors) turns it off, so it leaves running nodes alone.
    /// A store recovers only when no other writable store has its database open (their
    /// running nodes are not interrupted), and holds others from opening until it is done
    /// (they wait up to `busy_timeout`, then fail: on a SQLite file with `Error::StoreFile` of
    /// kind `WouldBlock` naming the presence file, on PostgreSQL with `Error::Busy`). A
    /// writable SQLite file store says it is there with an advisory lock (`flock`) held shared
    /// on a file beside the store's, `<db>-presence`, never deleted, readable and writable only
    /// by the classes the store file's mode lets write it, from its open to its close (the
    /// kernel lets it go when the process dies); a store that can take it exclusively is alone.
    /// So a long-lived writable store keeps every other from being alone: nothing is
    /// recovered at open while it lives. The lock goes by the file's name (a hard link is a
    /// second lock); on NFS, where `flock` is emulated with per-process POSIX locks, two stores
    /// of one process may both be alone. Two stores of one process on one file are two stores
    /// here (on a local file system). A
    /// PostgreSQL store does the same with its session's presence lock on the schema. A
    /// read-only store holds no lock (and makes no file); an in-memory store, or one on a VFS
    /// of the caller's own, is alone.
    /// Graph deadlines are kept either way (unless the store is read-only).
    pub recover_on_open: bool,
    /// The most the database file may grow to, in bytes (rounded down to whole pages): a
    /// write that needs more is refused with `Error::DiskFull` and writes nothing, and space
    /// freed by deletions is used again. `None` (the default) leaves SQLite's own bound. A file
    /// already larger is capped at its current size.
    pub file_bytes_max: Option<u64>,
    /// Run the store on the caller's thread instead of a thread of its own: each call takes the
    /// store's lock and runs the actor's loop for that one call (same operations, transactions,
    /// savepoints, events and errors), with no hand-off between threads. For fuzz harnesses
    /// and single-threaded tools: an operation costs a few microseconds instead of a thread
    /// round trip, and the order of everything is the order of the calls. Several threads may
    /// share an inline store and stay correct (their calls are serialised), but there is no
    /// group commit (each call commits alone, holding the lock through its fsync), and time-driven
    /// work (graph deadlines, checkpoints of an idle store, events committed by another process
    /// for live subscribers) happens at the next call rather than on its own. Default false.
    pub inline: bool,
    /// Seed of everything random the store makes (generated ids, token secrets): with the same
    /// seed, a `ManualClock` and the same calls, two runs of an inline store give byte-identical
    /// results (a store on its own thread too, but for graph deadlines, which its thread runs
    /// when it is idle, so whether one ran before a read depends on timing). `None` (the
    /// default) keys the store's randomness from the operating system. A seeded store's token
    /// secrets are as predictable as its seed: for tests and fuzzing only. A seeded writable
    /// file store also folds in what the file holds (it reads every row at open) and the time,
    /// so that a reopened store's ids do not repeat an earlier session's.
    pub seed: Option<u64>,
    /// The name of a registered SQLite VFS (virtual file system) to open the file through,
    /// for a test that injects faults or a file system of the caller's own; it must already be
    /// registered (`sqlite3_vfs_register`) in the SQLite library this crate links. `None` (the
    /// default) uses SQLite's default VFS.
    pub vfs: Option<String>,
    /// Reader threads: each holds a read-only connection of its own and runs the operations
    /// that only read (gets, listings, counts, event pages, [`Store::read`] closures), so a
    /// read never waits for the writer's batch and a write never waits behind a read. A read
    /// sees every write whose reply was sent before the read was sent; a read a thread sends
    /// while writes it submitted ([`Store::submit`]) are still unanswered runs on the writer,
    /// after them. On a SQLite file each reader keeps a 16 MiB page cache and reads the file
    /// through a memory map (`mmap_size`, up to 1 GiB of address space, the operating system's
    /// page cache rather than the process's memory); an I/O error under the map ends the
    /// process (SIGBUS) instead of failing the read. 0 runs every read on the writer's
    /// thread, as an in-memory or inline store,
    /// and one on a VFS of the caller's own ([`Options::vfs`]), always do. Default: the
    /// machine's cores less one (a core for the writer), between 1 and 4. At most
    /// [`READERS_MAX`].
    ///
    /// [`Store::read`]: crate::Store::read
    /// [`Store::submit`]: crate::Store::submit
    pub readers: usize,
    /// Writer sessions on a PostgreSQL store: each an actor thread with a session of its own
    /// (and its own group commit), so that one process's callers do not all queue behind one
    /// session: a long transaction on one holds back only the threads that write through it,
    /// and the batches of several run at once where the server has cores to spare. A calling
    /// thread always writes through the same one, so the ops one thread sends run in the
    /// order it sent them and its reads see its writes; calls of different threads may run in
    /// different sessions at once, as the calls of two processes do: two sessions writing one
    /// tenant take its turn as two processes would (a batch that waits past `busy_timeout`
    /// for another's is answered `Busy`). Each session also listens for the others' commits
    /// (a connection more each). Subscribers are fed live by the first; another's commit
    /// sends them back to paging once, as another process's does. SQLite has one writer
    /// whatever this says, and so do an inline or read-only store and one with a
    /// [`seed`](#structfield.seed) (its ids would otherwise depend on which writer a thread
    /// took). A worker pool keeps a round in flight on each session (its rounds keep no
    /// order among themselves). Default: 1 (on a machine whose two cores the server shared,
    /// a second session made one process's pool 1.14-1.36x faster and three processes' pools
    /// slower: BENCHMARKS.md). Between 1 and [`WRITERS_MAX`].
    pub writers: usize,
    /// A writer batch that takes longer than this, from its first statement to its last reply,
    /// is told to `tracing` as a warning and counted in [`Metrics::slow_batches`]. Default:
    /// half a second.
    ///
    /// [`Metrics::slow_batches`]: crate::Metrics::slow_batches
    pub slow_batch: Duration,
}

/// The most reader threads a store may have ([`Options::readers`]).
pub const READERS_MAX: usize = 64;

/// The most writer sessions a PostgreSQL store may have ([`Options::writers`]).
pub const WRITERS_MAX: usize = 16;

/// The default number of reader threads: the machine's cores less one (the writer's), between
/// 1 and 4. Readers never block the writer, but busy ones compete with it for the cores: on
/// two cores, two readers looping on reads tripled an append's p99 (BENCHMARKS, session 13).
fn default_readers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    cores.saturating_sub(1).clamp(1, 4)
}

impl Default for Options {
    fn default() -> Self {
        Self {
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(5),
            batch_max: 64,
            mailbox_capacity: 1024,
            clock: Arc::new(SystemClock),
            limits: Limits::default(),
            read_only: false,
            wal_bytes_max: 64 * 1024 * 1024,
            recover_on_open: true,
            file_bytes_max: None,
            inline: false,
            seed: None,
            vfs: None,
            readers: default_readers(),
            writers: 1,
            slow_batch: Duration::from_millis(500),
        }
    }
}

impl Options {
    setters! {
        /// Sets [`durability`](#structfield.durability): what an acknowledged commit survives.
        durability: Durability;
        /// Sets [`busy_timeout`](#structfield.busy_timeout): how long a write waits for another
        /// connection's lock.
        busy_timeout: Duration;
        /// Sets [`batch_max`](#structfield.batch_max): most operations in one transaction.
        batch_max: usize;
        /// Sets [`mailbox_capacity`](#structfield.mailbox_capacity): most messages waiting for
        /// the actor.
        mailbox_capacity: usize;
        /// Sets [`clock`](#structfield.clock): the source of `Tx::now_ms` (an
        /// `Arc<ManualClock>` for tests).
        clock: Arc<dyn Clock>;
        /// Sets [`limits`](#structfield.limits): the bounds every argument is checked against.
        limits: Limits;
        /// Sets [`read_only`](#structfield.read_only): open the file read-only.
        read_only: bool;
        /// Sets [`wal_bytes_max`](#structfield.wal_bytes_max): the write-ahead log's size that
        /// forces a truncating checkpoint.
        wal_bytes_max: u64;
        /// Sets [`recover_on_open`](#structfield.recover_on_open): recover running graphs when
        /// the store opens.
        recover_on_open: bool;
        /// Sets [`inline`](#structfield.inline): run the store on the caller's thread.
        inline: bool;
        /// Sets [`readers`](#structfield.readers): how many reader threads (0: reads on the
        /// writer).
        readers: usize;
        /// Sets [`writers`](#structfield.writers): how many writer sessions a PostgreSQL store
        /// keeps.
        writers: usize;
        /// Sets [`slow_batch`](#structfield.slow_batch): the duration past which a writer batch
        /// is reported as slow.
        slow_batch: Duration;
    }

    /// Sets [`file_bytes_max`](#structfield.file_bytes_max): the most the database file may grow
    /// to (`None`: SQLite's own bound). Takes a `u64` or an `Option<u64>`.
    #[must_use]
    pub fn file_bytes_max(mut self, bytes: impl Into<Option<u64>>) -> Self {
        self.file_bytes_max = bytes.into();
        self
    }

    /// Sets [`seed`](#structfield.seed): the seed of everything random the store makes (`None`:
    /// from the operating system). Takes a `u64` or an `Option<u64>`.
    #[must_use]
    pub fn seed(mut self, seed: impl Into<Option<u64>>) -> Self {
        self.seed = seed.into();
        self
    }

    /// Sets [`vfs`](#structfield.vfs): the name of a registered SQLite VFS to open the file
    /// through.
    #[must_use]
    pub fn vfs(mut self, name: impl Into<String>) -> Self {
        self.vfs = Some(name.into());
        self
    }

    /// Checks that the options can be used; called by `Store::open_with`.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.batch_max == 0 {
            return Err(Error::InvalidInput("batch_max must be at least 1".into()));
        }
        if self.mailbox_capacity == 0 {
            return Err(Error::InvalidInput("mailbox_capacity must be at least 1".into()));
        }
        if self.busy_timeout.as_millis() > i32::MAX as u128 {
            return Err(Error::InvalidInput("busy_timeout must be at most i32::MAX ms".into()));
        }
        if self.file_bytes_max == Some(0) {
            return Err(Error::InvalidInput("file_bytes_max must be positive".into()));
        }
        if self.wal_bytes_max == 0 {
            return Err(Error::InvalidInput("wal_bytes_max must be positive".into()));
        }
        if self.readers > READERS_MAX {
            return Err(Error::InvalidInput(format!("readers must be at most {READERS_MAX}")));
        }
        if !(1..=WRITERS_MAX).contains(&self.writers) {
            return Err(Error::InvalidInput(format!(
                "writers must be between 1 and {WRITERS_MAX}"
            )));
        }
        self.limits.validate()
    }
}
