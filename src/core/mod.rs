//! The engine: the actor thread, the mailbox, the operation contract, transactions, publishing,
//! opening and the schema, and time.
//!
//! Nothing here names a domain except the event log (`crate::core::events`), which is what publishing is
//! made of. Domains see only [`Tx`](tx::Tx) and [`Op`](op::Op): never a channel, a thread or
//! the raw connection outside a transaction.

pub(crate) mod actor;
pub(crate) mod bell;
pub(crate) mod checkpoint;
pub(crate) mod clock;
pub(crate) mod events;
pub(crate) mod guard;
pub(crate) mod msg;
pub(crate) mod op;
pub(crate) mod publish;
pub(crate) mod schema;
pub(crate) mod sql;
pub(crate) mod tx;
