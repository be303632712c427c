//! The mailbox: the closed set of messages the actor handles, and the type-erased call envelope.
//!
//! A `Call` can only be built from an [`Op`] or from a transaction closure. It carries the op's
//! name (for errors and tracing), what it accesses, who it runs as, and the reply channel, kept
//! beside the work so that a panic inside the work still gets answered.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::core::meter::Meter;
use crate::core::op::{Access, Op, TxOutcome};
use crate::core::publish::LiveRequest;
use crate::core::tx::{Scope, Tx};
use crate::error::{Error, Result};

/// Everything the actor can be asked to do.
pub(crate) enum Msg {
    /// Run one call in the next batch.
    Run(Call),
    /// Register a subscriber from its cursor, between two commits.
    GoLive(LiveRequest),
    /// Finish what is queued, checkpoint, close the connection and stop.
    Close(Sender<Result<()>>),
}

/// One unit of work for a batch: an op or a transaction closure, with its reply channel.
pub(crate) struct Call {
    pub(crate) label: &'static str,
    pub(crate) access: Access,
    /// Whether the call may write (`Op::writes`; a transaction closure may).
    pub(crate) writes: bool,
    /// Whether the call runs under a savepoint of its own (see `Op::single_write`).
    pub(crate) savepoint: bool,
    /// Whether the call is the crate's own op (its SQL is trusted), not a caller's closure.
    pub(crate) internal: bool,
    /// Whether the call shares its tenant's writers' turn with other batches' such calls
    /// (`Sealed::shares_turn`; never a closure).
    pub(crate) shares_turn: bool,
    /// Whether a reader may run it: it only reads, and needs nothing of the writer's own
    /// connection (`Op::on_writer`).
    pub(crate) readable: bool,
    pub(crate) scope: Scope,
    /// Counts the call among its sender's unanswered writes until it is answered (see
    /// `store::InFlight`).
    pub(crate) in_flight: Option<InFlightMark>,
    /// When the call was made (sent): its answer's latency counts from here.
    sent_at: Instant,
    work: Box<dyn Work>,
}

/// What a call may do and how it runs (see the fields of the same names in [`Call`]).
struct Shape {
    writes: bool,
    savepoint: bool,
    internal: bool,
    shares_turn: bool,
    readable: bool,
}

/// One unanswered write of a thread, counted in its `counter` until dropped: when the call is
/// answered (after its reply is sent), or when it is dropped unanswered (the store closed).
pub(crate) struct InFlightMark(Arc<AtomicUsize>);

impl InFlightMark {
    /// Counts one more write in `counter`.
    pub(crate) fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(counter))
    }
}

impl Drop for InFlightMark {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Call {
    /// A call that applies `op` and replies with its output.
    pub(crate) fn op<O: Op>(op: O, scope: Scope, reply: Sender<Result<O::Output>>) -> Self {
        let access = op.access();
        let writes = op.writes();
        let savepoint = writes && !op.single_write();
        // A bound view's administration (reads too) is refused while its tenant is suspended:
        // the writer checks that (see `Actor::run_call`), so it runs there.
        let bound_admin = access == Access::Admin && scope.bound;
        let readable = !writes && !op.on_writer() && !bound_admin;
        let label = std::any::type_name::<O>();
        let shares_turn = writes && op.shares_turn();
        let work = Box::new(OpWork { op, reply, retried: 0 });
        let shape = Shape { writes, savepoint, internal: true, shares_turn, readable };
        Self::new(label, access, shape, scope, work)
    }

    /// A call that runs a read closure (`Store::read`) and replies with its value.
    pub(crate) fn read<T, F>(f: F, scope: Scope, reply: Sender<Result<T>>) -> Self
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    {
        let f = move |tx: &mut Tx<'_>| f(tx).map(TxOutcome::Commit);
        let work = Box::new(TxWork { f, reply });
        let shape = Shape {
            writes: false,
            savepoint: false,
            internal: false,
            shares_turn: false,
            readable: true,
        };
        Self::new("read", Access::Read, shape, scope, work)
    }

    /// A call that runs a transaction closure and replies with the value of its outcome.
    pub(crate) fn transaction<T, F>(f: F, scope: Scope, reply: Sender<Result<T>>) -> Self
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<TxOutcome<T>> + Send + 'static,
    {
        let work = Box::new(TxWork { f, reply });
        let shape = Shape {
            writes: true,
            savepoint: true,
            internal: false,
            shares_turn: false,
            readable: false,
        };
        Self::new("transaction", Access::Write, shape, scope, work)
    }

    /// A call sent now.
    fn new(
        label: &'static str,
        access: Access,
        shape: Shape,
        scope: Scope,
        work: Box<dyn Work>,
    ) -> Self {
        let Shape { writes, savepoint, internal, shares_turn, readable } = shape;
        let sent_at = Instant::now();
        let in_flight = None;
        Self {
            label,
            access,
            writes,
            savepoint,
            internal,
            shares_turn,
            readable,
            scope,
            in_flight,
            sent_at,
            work,
        }
    }

    /// Runs the work, catching a panic.
    pub(crate) fn run(self, tx: &mut Tx<'_>) -> Applied {
        let Call {
            label,
            access,
            writes,
            savepoint,
            internal,
            shares_turn,
            readable,
            scope,
            in_flight,
            sent_at,
            work,
        } = self;
        let (mut applied, spare) = work.run(tx, label, writes);
        applied.sent_at = Some(sent_at);
        // A call that runs again stays in flight until that run is answered.
        applied.again = spare.map(|work| Call {
            label,
            access,
            writes,
            savepoint,
            internal,
            shares_turn,
            readable,
            scope,
            in_flight: None,
            sent_at,
            work,
        });
        match &mut applied.again {
            Some(again) => again.in_flight = in_flight,
            None => applied.in_flight = in_flight,
        }
        applied
    }

    /// Answers the call with `error` without running it, counting its latency in `meter` first.
    pub(crate) fn refuse(self, error: Error, meter: &Meter) {
        let Call { work, in_flight, sent_at, .. } = self;
        meter.answered(sent_at.elapsed());
        work.refuse(error);
        drop(in_flight);
    }
}

/// The result of running a call, waiting for the batch's `COMMIT` before it is delivered.
pub(crate) struct Applied {
    /// Whether the call's writes are kept (`Ok` and `Commit`), or were rolled back.
    pub(crate) keep: bool,
    /// A copy of the call's own error, if it failed.
    pub(crate) failure: Option<Error>,
    deliver: Box<dyn FnOnce(Option<Error>) + Send>,
    /// The call once more, for a later transaction, if it may run again (see `take_retry`).
    again: Option<Call>,
    /// The call's place among its sender's unanswered writes, let go once the reply is sent.
    in_flight: Option<InFlightMark>,
    /// When the call was sent, for the latency counted at its answer.
    sent_at: Option<Instant>,
}

impl Applied {
    /// The call once more, to run in a later transaction, if it failed after losing to another
    /// transaction (the actor knows) and has tries left: it is then not answered now.
    pub(crate) fn take_retry(&mut self) -> Option<Call> {
        if self.keep {
            return None;
        }
        let again = self.again.take()?;
        self.deliver = Box::new(|_| {});
        // Answered (and counted) when its run in the later transaction is.
        self.sent_at = None;
        Some(again)
    }

    /// The call once more, kept work and all, to run in a later transaction, if its own
    /// transaction lost to another at its commit (a write left for the batch's end, see
    /// `Tx::write_late`) and it has tries left.
    pub(crate) fn take_rerun(&mut self) -> Option<Call> {
        // A closure runs once (it has no copy): it is answered with the commit's error.
        self.again.as_ref()?;
        self.keep = false;
        self.take_retry()
    }

    /// Sends the reply and counts its latency in `meter`. `commit_error` is the batch's
    /// failure, if its writes were lost (the actor passes none for a call that kept nothing: it
    /// is answered with its own result).
    pub(crate) fn deliver(self, commit_error: Option<Error>, meter: &Meter) {
        let Applied { deliver, in_flight, sent_at, .. } = self;
        // Counted before the reply: a caller answered sees its op counted.
        if let Some(sent_at) = sent_at {
            meter.answered(sent_at.elapsed());
        }
        deliver(commit_error);
        drop(in_flight);
    }

    /// Refuses the call after it ran (the actor found it changed what it may not): its work is
    /// rolled back and it is answered with `error`, whatever it returned.
    pub(crate) fn overrule(self, error: Error) -> Self {
        let deliver = self.deliver;
        Self {
            keep: false,
            failure: Some(error.replicate()),
            deliver: Box::new(move |_| deliver(Some(error))),
            again: None,
            in_flight: self.in_flight.or_else(|| self.again.and_then(|again| again.in_flight)),
            sent_at: self.sent_at,
        }
    }

    fn new<T: Send + 'static>(result: Result<(bool, T)>, reply: Sender<Result<T>>) -> Self {
        match result {
            Ok((keep, value)) => Self {
                keep,
                failure: None,
                // The actor passes an error only for a call whose writes it cannot keep.
                deliver: Box::new(move |error| {
                    let answer = match error {
                        Some(error) => Err(error),
                        None => Ok(value),
                    };
                    // The caller may have gone away; nobody is left to tell.
                    let _ = reply.send(answer);
                }),
                again: None,
                in_flight: None,
                sent_at: None,
            },
            Err(error) => Self {
                keep: false,
                failure: Some(error.replicate()),
                // Its own error, unless the actor overruled it with another.
                deliver: Box::new(move |overruled: Option<Error>| {
                    let _ = reply.send(Err(overruled.unwrap_or(error)));
                }),
                again: None,
                in_flight: None,
                sent_at: None,
            },
        }
    }
}

/// How many times an operation that lost to another transaction (a deadlock or a
/// serialisation failure, on PostgreSQL) runs again, each in a later transaction, before it is
/// answered `Busy`.
pub(crate) const CONFLICT_RETRIES: u32 = 3;

/// What a call runs: the work, and a copy of it to run again if it may (see `Applied`).
type Ran = (Applied, Option<Box<dyn Work>>);

trait Work: Send {
    /// `writes`: whether the call may write (a reading one never loses to another).
    fn run(self: Box<Self>, tx: &mut Tx<'_>, label: &'static str, writes: bool) -> Ran;
    fn refuse(self: Box<Self>, error: Error);
}

struct OpWork<O: Op> {
    op: O,
    reply: Sender<Result<O::Output>>,
    /// How many times it ran before (lost to another transaction each time).
    retried: u32,
}

impl<O: Op> Work for OpWork<O> {
    fn run(self: Box<Self>, tx: &mut Tx<'_>, label: &'static str, writes: bool) -> Ran {
        let OpWork { op, reply, retried } = *self;
        // Only a PostgreSQL transaction that writes can lose to another's (SQLite has one
        // writer; a reading batch reads one snapshot): a copy of the op is kept there, to run
        // again if it does.
        let may_lose = writes && tx.db().is_postgres();
        let spare = (retried < CONFLICT_RETRIES && may_lose).then(|| op.clone());
        let result = catch_unwind(AssertUnwindSafe(|| op.apply(tx)))
            .unwrap_or_else(|payload| Err(panicked(label, payload.as_ref())));
        let again = spare.map(|op| {
            let retried = retried + 1;
            Box::new(OpWork { op, reply: reply.clone(), retried }) as Box<dyn Work>
        });
        (Applied::new(result.map(|output| (true, output)), reply), again)
    }

    fn refuse(self: Box<Self>, error: Error) {
        let _ = self.reply.send(Err(error));
    }
}

struct TxWork<F, T> {
    f: F,
    reply: Sender<Result<T>>,
}

impl<T, F> Work for TxWork<F, T>
where
    T: Send + 'static,
    F: FnOnce(&mut Tx<'_>) -> Result<TxOutcome<T>> + Send + 'static,
{
    /// A closure runs once (it is `FnOnce`): one that loses to another transaction is
    /// answered `Busy`, for its caller to run again.
    fn run(self: Box<Self>, tx: &mut Tx<'_>, label: &'static str, _: bool) -> Ran {
        let TxWork { f, reply } = *self;
        let result = catch_unwind(AssertUnwindSafe(|| f(tx)))
            .unwrap_or_else(|payload| Err(panicked(label, payload.as_ref())));
        let result = result.map(|outcome| match outcome {
            TxOutcome::Commit(value) => (true, value),
            TxOutcome::Rollback(value) => (false, value),
        });
        (Applied::new(result, reply), None)
    }

    fn refuse(self: Box<Self>, error: Error) {
        let _ = self.reply.send(Err(error));
    }
}

/// The error for a panic inside a call, with the panic's message when it has one.
fn panicked(label: &str, payload: &(dyn Any + Send)) -> Error {
    let message = payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    Error::OpPanicked(format!("{label}: {message}"))
}
