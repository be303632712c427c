//! What the parts of `spindle ui` share: how it was asked to serve, the state every request
//! handler reads (the store view, sessions, the queue samples, the open live streams), the
//! parts of a request the handlers look at, and the headers every answer carries.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use spindle::{Role, Store};

use crate::common::now_ms;
use crate::ui::streams::Streams;

/// How `spindle ui` was asked to serve.
pub struct Settings {
    /// The address to listen on.
    pub addr: String,
    /// Queue actions (requeue, purge, cancel, pause, resume) for sessions signed in as a writer or admin.
    pub allow_actions: bool,
    /// Every read needs a session signed in with a token of the tenant.
    pub require_token: bool,
    /// Other names this server answers to (`Host`), beside its address.
    pub hosts: Vec<String>,
}

/// What every request handler shares.
pub struct Ui {
    /// The store view of the tenant served (read-only without `--allow-actions`).
    pub store: Store,
    /// How it was asked to serve.
    pub settings: Settings,
    /// The sessions the pages hold.
    pub sessions: Mutex<Sessions>,
    /// The queues over the last minutes, oldest first.
    pub samples: Mutex<VecDeque<Sample>>,
    /// Live streams open now.
    pub streams: Arc<Streams>,
    /// The `Host` values that name this server; empty: any (bound to every address).
    pub hosts: Vec<String>,
}

/// The queues at one moment, for the overview's chart.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When it was taken.
    pub at_ms: i64,
    /// Pending, scheduled and claimed items of every queue.
    pub depth: u64,
    /// Completed items not yet pruned, of every queue.
    pub completed: u64,
}

/// The parts of a request the handlers look at.
pub struct Head {
    /// `GET`, `POST`, ..
    pub method: String,
    /// The path, still %-encoded.
    pub path: String,
    /// The query string (after `?`), still encoded.
    pub query: String,
    /// The `Host` header.
    pub host: Option<String>,
    /// The `Origin` header.
    pub origin: Option<String>,
    /// The `Sec-Fetch-Site` header (`same-origin`, `cross-site`, ..).
    pub fetch_site: Option<String>,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// The `X-Spindle-Csrf` header: the session's anti-forgery token.
    pub csrf: Option<String>,
    /// The session id of the `Cookie` header.
    pub session: Option<String>,
    /// The token of an `Authorization: Bearer` header: a scraper's (reads only).
    pub bearer: Option<String>,
    /// The `Last-Event-ID` header of a reconnecting live stream.
    pub last_event_id: Option<String>,
    /// The client's address.
    pub peer: Option<IpAddr>,
    /// A POST's body.
    pub body: String,
}

impl Ui {
    /// Whether a request's `Host` names this server.
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        self.hosts.is_empty() || host.is_some_and(|host| self.hosts.iter().any(|h| h == host))
    }
}

/// What every answer says of caching, framing, sniffing and where scripts come from.
pub const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    (
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'",
    ),
];

/// Adds `headers` and [`SECURITY_HEADERS`] to an answer's head, a `Name: value` line each (a
/// header with a line break in it is left out: it would split the head).
pub fn add_headers(head: &mut String, headers: &[(&str, &str)]) {
    for (name, value) in headers.iter().chain(&SECURITY_HEADERS) {
        if !name.contains(['\r', '\n']) && !value.contains(['\r', '\n']) {
            let _ = write!(head, "{name}: {value}\r\n");
        }
    }
}

/// Sessions not signed in kept at once, at most.
const ANONYMOUS_MAX: usize = 1_000;
/// Sessions not signed in of one client (IP address) kept at once, at most.
const ANONYMOUS_PER_PEER: usize = 32;
/// Signed-in sessions kept at once, at most.
const SIGNED_IN_MAX: usize = 1_000;
/// A session unused this long is forgotten.
const SESSION_IDLE_MS: i64 = 12 * 3_600_000;

/// The sessions this server knows. Those not signed in (anyone may make one) and the
/// signed-in ones (made only with a token) are bounded apart: a flood of new sessions never
/// pushes out a signed-in one, and pushes out first those of the client that made it, so that
/// another client's session lives from its page's load to its sign-in.
#[derive(Default)]
pub struct Sessions {
    by_id: HashMap<String, Session>,
}

/// A session: its anti-forgery token, the token it signed in with, and its client.
pub struct Session {
    pub csrf: String,
    pub signed_in: Option<SignedIn>,
    peer: Option<IpAddr>,
    seen_ms: i64,
}

/// A signed-in session's API token (kept in this process only), tenant and role.
pub struct SignedIn {
    pub secret: String,
    pub tenant: String,
    pub role: Role,
}

impl Sessions {
    /// The session `id`, if it is known and not idle too long; marks it used.
    pub fn live(&mut self, id: &str) -> Option<&mut Session> {
        let now = now_ms();
        if self.by_id.get(id).is_some_and(|s| now - s.seen_ms >= SESSION_IDLE_MS) {
            self.by_id.remove(id);
        }
        let session = self.by_id.get_mut(id)?;
        session.seen_ms = now;
        Some(session)
    }

    /// A new session of client `peer`, forgetting one of its kind past its bound: for one not
    /// signed in, the least recently used of `peer`'s own past `ANONYMOUS_PER_PEER`, else past
    /// `ANONYMOUS_MAX` that of the client with the most; for a signed-in one, past
    /// `SIGNED_IN_MAX`, the least recently used signed-in one.
    pub fn create(
        &mut self,
        signed_in: Option<SignedIn>,
        peer: Option<IpAddr>,
    ) -> (String, &mut Session) {
        let now = now_ms();
        self.by_id.retain(|_, s| now - s.seen_ms < SESSION_IDLE_MS);
        let forget = match signed_in {
            Some(_) => self.oldest(|s| s.signed_in.is_some(), SIGNED_IN_MAX),
            None => self.oldest_anonymous(peer),
        };
        if let Some(id) = forget {
            self.by_id.remove(&id);
        }
        let id = random_hex();
        let session = Session { csrf: random_hex(), signed_in, peer, seen_ms: now };
        let session = self.by_id.entry(id.clone()).or_insert(session);
        (id, session)
    }

    /// The session not signed in to forget before `peer` makes one, if any.
    fn oldest_anonymous(&self, peer: Option<IpAddr>) -> Option<String> {
        let anonymous = |s: &&Session| s.signed_in.is_none();
        if let Some(id) = self.oldest(|s| anonymous(&s) && s.peer == peer, ANONYMOUS_PER_PEER) {
            return Some(id);
        }
        let mut counts: HashMap<Option<IpAddr>, usize> = HashMap::new();
        for session in self.by_id.values().filter(anonymous) {
            *counts.entry(session.peer).or_default() += 1;
        }
        if counts.values().sum::<usize>() < ANONYMOUS_MAX {
            return None;
        }
        let most = counts.into_iter().max_by_key(|(_, n)| *n).map(|(peer, _)| peer)?;
        self.oldest(|s| anonymous(&s) && s.peer == most, 1)
    }

    /// The least recently used of the sessions `which` picks, when there are `bound` of them.
    fn oldest(&self, which: impl Fn(&Session) -> bool, bound: usize) -> Option<String> {
        let picked = self.by_id.iter().filter(|(_, s)| which(s));
        let (count, oldest) =
            picked.fold((0, None::<(&String, &Session)>), |(n, oldest), (id, s)| {
                let older = oldest.is_none_or(|(_, o)| s.seen_ms < o.seen_ms);
                (n + 1, if older { Some((id, s)) } else { oldest })
            });
        oldest.filter(|_| count >= bound).map(|(id, _)| id.clone())
    }

    /// Forgets session `id`.
    pub fn forget(&mut self, id: &str) {
        self.by_id.remove(id);
    }
}

/// 32 random bytes as hex.
fn random_hex() -> String {
    let mut bytes = [0_u8; 32];
    // The system's randomness does not fail on the systems Spindle runs on; were it to, the
    // bytes would be zeros and every session the same, so stop instead.
    if getrandom::fill(&mut bytes).is_err() {
        eprintln!("spindle ui: the system's randomness failed");
        std::process::exit(3);
    }
    bytes.iter().fold(String::with_capacity(64), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    #[test]
    fn sessions_are_bounded_and_fresh_ids_differ() {
        let mut sessions = Sessions::default();
        let signed_in = SignedIn { secret: "s".into(), tenant: "t".into(), role: Role::Writer };
        let (kept, _) = sessions.create(Some(signed_in), peer(1));
        for n in 0..=ANONYMOUS_MAX {
            sessions.create(None, peer((n % 100) as u8));
        }
        assert_eq!(sessions.by_id.len(), ANONYMOUS_MAX + 1);
        assert!(sessions.live(&kept).is_some(), "a flood does not push out a signed-in session");
        assert_ne!(random_hex(), random_hex());
    }

    #[test]
    fn a_flood_of_sessions_from_one_client_pushes_out_its_own() {
        let mut sessions = Sessions::default();
        let (yours, _) = sessions.create(None, peer(1));
        for _ in 0..2 * ANONYMOUS_MAX {
            sessions.create(None, peer(2));
        }
        assert!(sessions.live(&yours).is_some(), "another client's session lives");
        let flood = sessions.by_id.values().filter(|s| s.peer == peer(2)).count();
        assert_eq!(flood, ANONYMOUS_PER_PEER);
    }
}
