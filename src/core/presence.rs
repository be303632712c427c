//! Whether a store is alone on its database when it opens: recovering interrupted work at open
//! (the graphs' running nodes) is right only when no other live process is running that work.
//!
//! A SQLite store is taken to be alone (see `Options::recover_on_open`). On PostgreSQL every
//! writable store holds its schema's presence lock shared for as long as its connection lasts;
//! an opening store that can take it exclusively too is the only one, and keeps others from
//! opening until its recovery is done.

use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::Result;

/// Whether the store is alone on its database; if so, others wait to open until
/// [`ReleaseAlone`].
#[derive(Debug, Clone)]
pub(crate) struct HoldAlone;

/// Lets other stores open again after [`HoldAlone`] returned `true`.
#[derive(Debug, Clone)]
pub(crate) struct ReleaseAlone;

impl Sealed for HoldAlone {}
impl Op for HoldAlone {
    type Output = bool;
    fn access(&self) -> Access {
        Access::Admin
    }
    /// A session lock, taken in a reading batch: it takes no tenant's writers.
    fn writes(&self) -> bool {
        false
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<bool> {
        tx.db().hold_alone()
    }
}

impl Sealed for ReleaseAlone {}
impl Op for ReleaseAlone {
    type Output = ();
    fn access(&self) -> Access {
        Access::Admin
    }
    fn writes(&self) -> bool {
        false
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.db().release_alone()
    }
}
