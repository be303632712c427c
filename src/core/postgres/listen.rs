//! Other processes' commits on a PostgreSQL store, heard through `LISTEN`/`NOTIFY`.
//!
//! Every writing batch sends one notice on the store's channel before its `COMMIT` (the server
//! delivers it only if the commit succeeds): the sending store's instance id, and whether the
//! batch made work available. A thread of each store listens on a connection of its own; a
//! notice from another instance counts one foreign commit (live subscribers then go back to
//! paging, as after another process's commit on SQLite) and, when work was made available,
//! rings the bell that blocking claims wait on. Notices only wake; what is read is always read
//! from the tables, so a notice lost (a dropped connection) costs a wait, never a row.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use sha2::{Digest, Sha256};

use crate::core::postgres::session::connect_client;
use crate::core::state::ActorState;
use crate::error::{Error, Result};

/// How often the listening thread looks whether its store has closed.
const LISTEN_POLL: Duration = Duration::from_millis(200);

/// How long the listening thread waits before connecting again after losing its connection.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// The store's channel and the thread listening on it.
pub(crate) struct Notices {
    channel: String,
    instance: String,
    foreign: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Notices {
    /// Starts listening on the channel of the store in `schema`, for the actor whose state
    /// is `state` (its bell is rung; the thread ends when the store closes).
    ///
    /// # Errors
    /// `Postgres` when the listening connection cannot be made.
    pub(crate) fn start(url: &str, schema: &str, state: Weak<ActorState>) -> Result<Self> {
        let channel = channel_of(schema);
        let client = listen(url, &channel)?;
        let listener = Listener {
            url: url.to_owned(),
            channel: channel.clone(),
            instance: uuid::Uuid::now_v7().simple().to_string(),
            foreign: Arc::new(AtomicI64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            state,
        };
        let (instance, foreign, stop) =
            (listener.instance.clone(), Arc::clone(&listener.foreign), Arc::clone(&listener.stop));
        let thread = std::thread::Builder::new()
            .name("spindle-listen".into())
            .spawn(move || listener.run(client))?;
        Ok(Self { channel, instance, foreign, stop, thread: Some(thread) })
    }

    /// The channel the store's notices go to.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// The payload of this store's notice for a batch (`rang`: it made work available).
    pub(crate) fn payload(&self, rang: bool) -> String {
        format!("{} {}", self.instance, u8::from(rang))
    }

    /// How many other instances' commits have been heard (moves when another commits).
    pub(crate) fn foreign_commits(&self) -> i64 {
        self.foreign.load(Ordering::Acquire)
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The listening thread's side.
struct Listener {
    url: String,
    channel: String,
    instance: String,
    foreign: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
    state: Weak<ActorState>,
}

impl Listener {
    fn run(self, mut client: Client) {
        while !self.stopped() {
            match next_notice(&mut client) {
                Heard::Notice(payload) => self.heard(&payload),
                Heard::Nothing => {}
                Heard::Lost => {
                    // What was missed is unknown: every waiter looks again, every live
                    // subscriber pages.
                    self.heard("");
                    match self.reconnect() {
                        Some(again) => client = again,
                        None => return,
                    }
                }
            }
        }
    }

    /// Counts another instance's commit (or one that cannot be told apart) and rings the bell
    /// for one that made work available.
    fn heard(&self, payload: &str) {
        let (instance, rang) = payload.split_once(' ').unwrap_or(("", "1"));
        if instance == self.instance {
            return;
        }
        self.foreign.fetch_add(1, Ordering::AcqRel);
        if rang != "0"
            && let Some(state) = self.state.upgrade()
        {
            state.bell.ring();
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
            || self.state.upgrade().is_none_or(|state| state.exited.load(Ordering::Acquire))
    }

    /// Connects again until it works (`None` once the store has closed).
    fn reconnect(&self) -> Option<Client> {
        loop {
            std::thread::sleep(RECONNECT_AFTER);
            if self.stopped() {
                return None;
            }
            match listen(&self.url, &self.channel) {
                Ok(client) => {
                    tracing::info!("spindle: listening again for other processes' commits");
                    self.heard("");
                    return Some(client);
                }
                Err(error) => {
                    tracing::debug!(%error, "spindle: the commit listener cannot connect yet");
                }
            }
        }
    }
}

/// What listening for `LISTEN_POLL` brought.
enum Heard {
    Notice(String),
    Nothing,
    /// The connection is gone.
    Lost,
}

fn next_notice(client: &mut Client) -> Heard {
    if client.is_closed() {
        return Heard::Lost;
    }
    match client.notifications().timeout_iter(LISTEN_POLL).next() {
        Ok(Some(notice)) => Heard::Notice(notice.payload().to_owned()),
        Ok(None) => Heard::Nothing,
        Err(_) => Heard::Lost,
    }
}

/// A connection listening on `channel` (given up on after the connect timeout, so that a
/// store closing while the server is away is not held up).
fn listen(url: &str, channel: &str) -> Result<Client> {
    let mut client = connect_client(url)?;
    client.batch_execute(&format!("LISTEN \"{channel}\"")).map_err(Error::from_postgres)?;
    Ok(client)
}

/// The channel of the store in `schema`: a name of PostgreSQL's size whatever the schema's.
fn channel_of(schema: &str) -> String {
    let digest = Sha256::digest(schema.as_bytes());
    format!("spindle_{}", crate::hash::hex(&digest[..12]))
}
