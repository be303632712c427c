//! The store's own PostgreSQL session: a tokio-postgres client and the small single-threaded
//! runtime that drives it, behind synchronous calls (what the `postgres` crate's `Client` is),
//! plus what that crate cannot do: send several requests before the first answer comes back
//! (pipelining, `PgClient::pipeline`), so that statements the actor sends together cost one
//! round trip.
//!
//! The runtime runs only while a call waits on it: between calls nothing reads the socket (as
//! with `postgres::Client`). Dropping the client ends the session politely (`Terminate`).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use postgres::types::ToSql;
use postgres::{Row, SimpleQueryMessage, Statement, ToStatement};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};

/// How long a closing session may take to say goodbye to the server.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// One request of a pipeline (see `PgClient::pipeline`).
pub(crate) enum Request<'a> {
    /// Statements as written, in one simple query: transaction control, a batch's start.
    Simple(&'a str),
    /// A prepared statement's rows.
    Query(&'a Statement, Vec<&'a (dyn ToSql + Sync)>),
    /// A prepared statement's count of changed rows.
    Execute(&'a Statement, Vec<&'a (dyn ToSql + Sync)>),
}

/// What a request answered.
pub(crate) enum Answer {
    /// A simple query's messages (rows as text, and a count per statement).
    Messages(Vec<SimpleQueryMessage>),
    /// A query's rows.
    Rows(Vec<Row>),
    /// How many rows a statement changed.
    Count(u64),
}

/// A session with the server, synchronous to its caller.
pub(crate) struct PgClient {
    // Dropped first: closing its channel tells the connection task to end the session.
    client: tokio_postgres::Client,
    driver: Driver,
}

/// The runtime and the task that reads and writes the session's socket.
struct Driver {
    runtime: Runtime,
    connection: Option<JoinHandle<()>>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The client is gone (dropped before): the task sends `Terminate` and ends.
        if let Some(connection) = self.connection.take() {
            // The timer is made inside the runtime, which it needs.
            let ended = async { tokio::time::timeout(CLOSE_TIMEOUT, connection).await };
            let _ = self.runtime.block_on(ended);
        }
    }
}

impl PgClient {
    /// Connects as `config` says.
    ///
    /// # Errors
    /// `Postgres` when the server cannot be reached or refuses the session; `Io` when no
    /// runtime can be made.
    pub(crate) fn connect(config: &tokio_postgres::Config) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let connecting = runtime.block_on(config.connect(tokio_postgres::NoTls));
        let (client, connection) = connecting.map_err(Error::from_postgres)?;
        let connection = runtime.spawn(async move {
            // Its error also reaches every request waiting on it, and `is_closed` says so.
            let _ = connection.await;
        });
        Ok(Self { client, driver: Driver { runtime, connection: Some(connection) } })
    }

    /// Whether the session has ended (the server closed it, or the socket broke).
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Waits for `future` on the session's runtime (the connection task runs meanwhile).
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.driver.runtime.block_on(future)
    }

    /// Prepares `sql` (one round trip).
    pub(crate) fn prepare(&self, sql: &str) -> std::result::Result<Statement, postgres::Error> {
        self.block_on(self.client.prepare(sql))
    }

    /// Runs statements as written, in one simple query.
    pub(crate) fn batch_execute(&self, sql: &str) -> std::result::Result<(), postgres::Error> {
        self.block_on(self.client.batch_execute(sql))
    }

    /// Runs one statement (prepared on the way if `statement` is text); returns how many rows
    /// it changed.
    pub(crate) fn execute<T: ?Sized + ToStatement>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<u64, postgres::Error> {
        self.block_on(self.client.execute(statement, params))
    }

    /// Runs one query (prepared on the way if `statement` is text); returns its rows.
    pub(crate) fn query<T: ?Sized + ToStatement>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Vec<Row>, postgres::Error> {
        self.block_on(self.client.query(statement, params))
    }

    /// Sends every request before waiting for any answer, and returns each one's answer in
    /// their order: one round trip for all of them. The server runs them one after the other,
    /// as if sent one at a time; a request after one that failed runs too (in a transaction,
    /// it then fails as the aborted transaction refuses it).
    pub(crate) fn pipeline(
        &self,
        requests: &[Request<'_>],
    ) -> Vec<std::result::Result<Answer, postgres::Error>> {
        let futures = requests.iter().map(|request| answer(&self.client, request)).collect();
        self.block_on(in_order(futures))
    }
}

/// A future of a request's answer, boxed: the requests of a pipeline are of several kinds.
type Answering<'f> =
    Pin<Box<dyn Future<Output = std::result::Result<Answer, postgres::Error>> + 'f>>;

/// `request`'s answer from `client` (sent when the future is first polled).
fn answer<'f>(client: &'f tokio_postgres::Client, request: &'f Request<'f>) -> Answering<'f> {
    match request {
        Request::Simple(sql) => {
            Box::pin(async move { client.simple_query(sql).await.map(Answer::Messages) })
        }
        Request::Query(statement, params) => {
            Box::pin(async move { client.query(*statement, params).await.map(Answer::Rows) })
        }
        Request::Execute(statement, params) => {
            Box::pin(async move { client.execute(*statement, params).await.map(Answer::Count) })
        }
    }
}

/// Polls every future, first to last each time (a request is sent on its future's first poll,
/// so all are sent before any answer is awaited), until all are done; their outputs in order.
async fn in_order<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + '_>>>) -> Vec<T> {
    let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|context| {
        let mut waiting = false;
        for (future, output) in futures.iter_mut().zip(done.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(context) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting { Poll::Pending } else { Poll::Ready(()) }
    })
    .await;
    done.into_iter().flatten().collect()
}
