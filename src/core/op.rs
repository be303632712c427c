//! The operation contract: the sealed `Op` trait, what an op may touch (`Access`), and the roles
//! that decide which accesses a store view may make.
//!
//! An operation is plain data. Its `apply` runs inside a transaction on one of the store's
//! threads (the writer's batch, or a reader's for an op that only reads), under its own
//! savepoint: returning `Err` (or panicking) rolls back exactly its own work, including its
//! events. Only this crate can implement `Op`, so the set of things that can run against a
//! store is closed and every one of them checks its own invariants. An op is
//! `Clone`: on PostgreSQL a copy is applied again, in the next transaction, when the first lost
//! a deadlock or a serialisation failure to another transaction (at most 3 more times).

use std::fmt;

use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::limits::Limits;

pub(crate) mod sealed {
    /// Seals [`Op`](super::Op): only this crate's operations can run on the actor. It also
    /// carries what the engine asks of an op that no caller needs to see.
    pub trait Sealed {
        /// Whether the op, when it writes, may share its tenant's writers' turn with other
        /// transactions of such ops (PostgreSQL; SQLite has one writer): every write it makes
        /// is checked in its own statement (a fence, a `SKIP LOCKED` claim, an upsert), and
        /// what must keep an order (its events' positions, a gated queue's claims) takes the
        /// tenant's order lock first (`Db::lock_tenant_writes`). An op that reads and then
        /// writes on what it read (a dedupe key, a unique key) keeps the default: `false`.
        fn shares_turn(&self) -> bool {
            false
        }
    }
}

/// A typed operation that runs in one transaction on one of the store's threads: the writer's,
/// or a reader's for one that only reads.
///
/// Run one with [`Store::exec`](crate::Store::exec), or compose several inside
/// [`Store::transaction`](crate::Store::transaction) with [`Tx::exec`].
///
/// The trait is sealed: only this crate's operations implement it, so methods can be added to
/// it. The operations themselves (`queue::Complete`, `log::Append`, ...) are plain data whose
/// public fields are their API: a struct literal of one keeps compiling within a major version.
/// A new option comes as a new op or as a builder on the facade that makes it; a field added
/// to an existing op waits for the next major version.
pub trait Op: fmt::Debug + Clone + Send + 'static + sealed::Sealed {
    /// What the caller receives once the transaction has committed.
    type Output: Send + 'static;

    /// Whether the operation reads, writes or administers; checked against the caller's role
    /// and the store's read-only flag before it runs.
    fn access(&self) -> Access;

    /// Does the work. `Err` rolls back everything this call wrote.
    fn apply(self, tx: &mut Tx<'_>) -> Result<Self::Output>;

    /// Checks what the op carries before it leaves the caller's thread: JSON nested past
    /// `Limits::json_depth_max` is refused here, since serialising or dropping a value nested
    /// deep enough would overflow the store thread's stack. An error names the deepest value
    /// the op carries, not the first too deep. The default checks nothing.
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        let _ = limits;
        Ok(())
    }

    /// Whether `apply` writes with at most one statement, as its last fallible step, after
    /// every check: then a failure leaves nothing to undo (a statement is atomic on its own)
    /// and the op runs without a savepoint of its own, which costs about a fifth of a small
    /// write. Ops that only read need none either. The default, `false`, is always safe.
    fn single_write(&self) -> bool {
        false
    }

    /// Whether the operation may write. An administrator's listing needs the admin role but
    /// writes nothing: it runs on a read-only store and in a deferred transaction.
    fn writes(&self) -> bool {
        self.access() != Access::Read
    }

    /// Whether the operation must run on the writer's own connection although it does not
    /// write (a lock its session holds): then no reader thread runs it. Default false.
    fn on_writer(&self) -> bool {
        false
    }
}

/// What an operation does to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Access {
    /// Reads only.
    Read,
    /// Writes the tenant's data.
    Write,
    /// Changes tenants, tokens or other administration.
    Admin,
}

/// What a store view may do. A view opened from a file is `Admin`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Role {
    /// May only read.
    Reader,
    /// May read and write the tenant's data.
    Writer,
    /// May do everything, including administration.
    Admin,
}

impl Role {
    /// Whether this role may perform an operation with `access`.
    pub fn allows(self, access: Access) -> bool {
        match access {
            Access::Read => true,
            Access::Write => self >= Role::Writer,
            Access::Admin => self == Role::Admin,
        }
    }

    /// The role's name as stored and printed: `reader`, `writer` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Writer => "writer",
            Role::Admin => "admin",
        }
    }
}

/// The explicit end of a unit of work: commit it or roll it back, and hand `T` back either way.
///
/// Unlike the crate's other enums this one is exhaustive, and stays so: a transaction ends in
/// one of these two ways, so a `match` on it needs no wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome<T> {
    /// Keep everything the unit of work wrote.
    Commit(T),
    /// Discard everything the unit of work wrote (its events are never published).
    Rollback(T),
}

impl<T> TxOutcome<T> {
    /// The value carried by either arm.
    pub fn into_inner(self) -> T {
        match self {
            TxOutcome::Commit(value) | TxOutcome::Rollback(value) => value,
        }
    }

    /// Whether this outcome keeps the work.
    pub fn is_commit(&self) -> bool {
        matches!(self, TxOutcome::Commit(_))
    }
}

/// Leaks an op refused for a value nested past `DROP_DEPTH_MAX`: dropping a value recurses
/// once per level, so dropping one that deep could overflow the thread's stack (a debug build
/// overflows a 2 MiB stack at about 3,000 levels of objects). Shallower refusals drop as
/// usual. The error names the deepest value the op carries (`Op::check_shape` measures all).
pub(crate) fn forget_if_deep<O: Op>(op: O, error: &Error) {
    const DROP_DEPTH_MAX: u64 = 1000;
    match error {
        Error::TooLarge { what, actual, .. }
            if *what == crate::limits::JSON_DEPTH && *actual > DROP_DEPTH_MAX =>
        {
            std::mem::forget(op);
        }
        _ => drop(op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_allow_what_they_should() {
        assert!(Role::Reader.allows(Access::Read));
        assert!(!Role::Reader.allows(Access::Write));
        assert!(Role::Writer.allows(Access::Write));
        assert!(!Role::Writer.allows(Access::Admin));
        assert!(Role::Admin.allows(Access::Admin));
    }

    #[test]
    fn both_outcome_arms_carry_the_value() {
        assert_eq!(TxOutcome::Commit(3).into_inner(), 3);
        assert_eq!(TxOutcome::Rollback(4).into_inner(), 4);
        assert!(TxOutcome::Commit(()).is_commit());
        assert!(!TxOutcome::Rollback(()).is_commit());
    }
}
