//! The dashboard's sessions and what they may do: a session cookie (HttpOnly, SameSite=Strict)
//! names a session, which holds its anti-forgery token and, once signed in, the API token it
//! signed in with (kept in this process only; the page never stores it). Queue actions
//! (requeue, purge, cancel; pause and resume a queue) are POSTs that pass every check here
//! before they touch the store: actions allowed, same origin, the session's anti-forgery
//! token, a token of the tenant that still authenticates, with the writer or admin role.
//!
//! Sessions are bounded (`state::Sessions`).

use serde_json::{Value, json};
use spindle::{Access, Store};

use crate::names::owned_by_run;
use crate::ui::api::{Reply, segments, store_error};
use crate::ui::state::{Head, Session, Sessions, SignedIn, Ui};

/// The session cookie's name.
const COOKIE: &str = "spindle_ui";

/// The session id in a `Cookie` header.
pub fn session_cookie(header: &str) -> Option<String> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// `GET /api/session` (the session, made if need be), `POST /api/session` (sign in with
/// `{"token": ..}`) and `POST /api/session/logout`. Signing in or out moves the session to a
/// new id and anti-forgery token (a cookie planted before cannot ride on the sign-in).
pub fn session(ui: &Ui, head: &Head) -> (Reply, Option<String>) {
    let answer = match (head.method.as_str(), head.path.as_str()) {
        ("GET", "/api/session") => return current(ui, head),
        ("POST", "/api/session") => sign_in(ui, head),
        ("POST", "/api/session/logout") => sign_out(ui, head),
        (method, _) => Err(Reply::error(405, format!("{method} is not allowed here"))),
    };
    answer.unwrap_or_else(|reply| (reply, None))
}

/// Whether the request may read: always, unless every read needs a signed-in session whose
/// token still authenticates, or an `Authorization: Bearer` token of the tenant.
pub fn may_read(ui: &Ui, head: &Head) -> Result<(), Reply> {
    if !ui.settings.require_token {
        return Ok(());
    }
    match &head.bearer {
        Some(secret) => bearer_store(ui, secret).map(drop),
        None => token_store(ui, head).map(drop),
    }
}

/// The store view an `Authorization: Bearer` token of the tenant opens (a scraper's, which
/// keeps no session): reads only, never an action.
fn bearer_store(ui: &Ui, secret: &str) -> Result<Store, Reply> {
    match ui.store.authenticate(secret) {
        Ok(store) if store.tenant_id() == ui.store.tenant_id() => Ok(store),
        Ok(_) => Err(Reply::error(403, "the token is another tenant's")),
        Err(_) => Err(Reply::error(401, "the bearer token does not authenticate")),
    }
}

/// A queue action (`POST /api/queues/Q/...`), once every check passes.
pub fn action(ui: &Ui, head: &Head) -> Reply {
    let parts = segments(&head.path).unwrap_or_default();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let Some(action) = Action::parse(&parts) else {
        return Reply::error(405, format!("POST is not allowed on {}", head.path));
    };
    if !ui.settings.allow_actions {
        return Reply::error(403, "actions are off: start `spindle ui --allow-actions`");
    }
    let store = match writer(ui, head) {
        Ok(store) => store,
        Err(reply) => return reply,
    };
    action.run(&store).unwrap_or_else(|e| e)
}

/// What a POST under `/api/queues/` asks for: the queue, and the item of a one-item action.
enum Action {
    Requeue(String, String),
    RequeueAll(String),
    Purge(String),
    Cancel(String, String),
    Pause(String),
    Resume(String),
}

/// Rounds of a many-item action (each does up to a page of items).
const ROUNDS_MAX: usize = 10_000;

impl Action {
    fn parse(parts: &[&str]) -> Option<Self> {
        let owned = |text: &str| text.to_owned();
        match *parts {
            ["", "api", "queues", queue, "dead", id, "requeue"] => {
                Some(Action::Requeue(owned(queue), owned(id)))
            }
            ["", "api", "queues", queue, "requeue-all"] => Some(Action::RequeueAll(owned(queue))),
            ["", "api", "queues", queue, "purge"] => Some(Action::Purge(owned(queue))),
            ["", "api", "queues", queue, "pause"] => Some(Action::Pause(owned(queue))),
            ["", "api", "queues", queue, "resume"] => Some(Action::Resume(owned(queue))),
            ["", "api", "queues", queue, "items", id, "cancel"] => {
                Some(Action::Cancel(owned(queue), owned(id)))
            }
            _ => None,
        }
    }

    fn run(self, store: &Store) -> Result<Reply, Reply> {
        let queue = store.queue();
        let (name, what) = self.target();
        owned_by_run(name, what).map_err(|message| Reply::error(409, message))?;
        let body = match self {
            Action::Requeue(name, id) => {
                in_queue(store, &name, &id)?;
                queue.requeue(&id).map_err(store_error)?;
                json!({ "requeued": 1 })
            }
            Action::RequeueAll(name) => {
                json!({ "requeued": all_rounds(|| queue.requeue_all(&name))? })
            }
            Action::Purge(name) => json!({ "purged": all_rounds(|| queue.purge_dead(&name))? }),
            Action::Cancel(name, id) => {
                in_queue(store, &name, &id)?;
                queue.cancel(&id).map_err(store_error)?;
                json!({ "cancelled": 1 })
            }
            Action::Pause(name) => {
                queue.pause(&name).map_err(store_error)?;
                json!({ "queue": name, "paused": true })
            }
            Action::Resume(name) => {
                queue.resume(&name).map_err(store_error)?;
                json!({ "queue": name, "paused": false })
            }
        };
        Ok(Reply::ok(body))
    }

    /// The queue the action is on, and what it does to its items.
    fn target(&self) -> (&str, &'static str) {
        match self {
            Action::Requeue(queue, _) | Action::RequeueAll(queue) => (queue, "requeue"),
            Action::Purge(queue) => (queue, "purge"),
            Action::Cancel(queue, _) => (queue, "cancel"),
            Action::Pause(queue) => (queue, "pause"),
            Action::Resume(queue) => (queue, "resume"),
        }
    }
}

/// An item of another queue is not found under this one.
fn in_queue(store: &Store, queue: &str, id: &str) -> Result<(), Reply> {
    let item = store.queue().get(id).map_err(store_error)?;
    if item.queue != queue {
        return Err(Reply::error(404, format!("queue {queue} has no item {id}")));
    }
    Ok(())
}

/// Repeats a page-at-a-time action until it does nothing more; returns the items it did.
fn all_rounds(mut round: impl FnMut() -> spindle::Result<u64>) -> Result<u64, Reply> {
    let mut total = 0;
    for _ in 0..ROUNDS_MAX {
        let done = round().map_err(store_error)?;
        if done == 0 {
            break;
        }
        total += done;
    }
    Ok(total)
}

/// The store as the session's token sees it, if the request may write through it.
fn writer(ui: &Ui, head: &Head) -> Result<Store, Reply> {
    same_origin(head)?;
    checked_session(&mut ui.sessions.lock(), head)?;
    let store = token_store(ui, head)?;
    if !store.role().allows(Access::Write) {
        return Err(Reply::error(403, "a reader token cannot act: sign in as a writer or admin"));
    }
    Ok(store)
}

/// The store as the session's token sees it now. The token is authenticated again at every
/// call: a revoked or expired one stops working at once, and the session is signed out.
fn token_store(ui: &Ui, head: &Head) -> Result<Store, Reply> {
    let secret = {
        let mut sessions = ui.sessions.lock();
        let session = head.session.as_deref().and_then(|id| sessions.live(id));
        let signed_in = session.and_then(|session| session.signed_in.as_ref());
        let signed_in = signed_in
            .ok_or_else(|| Reply::error(401, "sign in with an API token of the tenant first"))?;
        signed_in.secret.clone()
    };
    match ui.store.authenticate(&secret) {
        Ok(store) if store.tenant_id() == ui.store.tenant_id() => Ok(store),
        Ok(_) => Err(Reply::error(403, "the token is another tenant's")),
        Err(_) => {
            let mut sessions = ui.sessions.lock();
            if let Some(session) = head.session.as_deref().and_then(|id| sessions.live(id)) {
                session.signed_in = None;
            }
            Err(Reply::error(401, "the token no longer authenticates: sign in again"))
        }
    }
}

fn current(ui: &Ui, head: &Head) -> (Reply, Option<String>) {
    let mut sessions = ui.sessions.lock();
    if let Some(session) = head.session.as_deref().and_then(|id| sessions.live(id)) {
        return (Reply::ok(describe(ui, session)), None);
    }
    let (id, session) = sessions.create(None, head.peer);
    (Reply::ok(describe(ui, session)), Some(cookie(&id)))
}

fn sign_in(ui: &Ui, head: &Head) -> Result<(Reply, Option<String>), Reply> {
    same_origin(head)?;
    checked_session(&mut ui.sessions.lock(), head)?;
    let body: Value = serde_json::from_str(&head.body)
        .map_err(|_| Reply::error(400, "the body is JSON: {\"token\": \"spn_...\"}"))?;
    let secret = body["token"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Reply::error(400, "the body names the token: {\"token\": \"spn_...\"}"))?;
    let store = ui
        .store
        .authenticate(secret)
        .map_err(|_| Reply::error(401, "that token does not authenticate"))?;
    if store.tenant_id() != ui.store.tenant_id() {
        return Err(Reply::error(
            403,
            format!("the token is another tenant's, not {}'s", ui.store.tenant_id()),
        ));
    }
    let tenant = store.tenant_id().to_owned();
    let signed_in = SignedIn { secret: secret.to_owned(), tenant, role: store.role() };
    Ok(renew(ui, head, Some(signed_in)))
}

fn sign_out(ui: &Ui, head: &Head) -> Result<(Reply, Option<String>), Reply> {
    same_origin(head)?;
    checked_session(&mut ui.sessions.lock(), head)?;
    Ok(renew(ui, head, None))
}

/// Replaces the request's session with a new one (new id, new anti-forgery token).
fn renew(ui: &Ui, head: &Head, signed_in: Option<SignedIn>) -> (Reply, Option<String>) {
    let mut sessions = ui.sessions.lock();
    if let Some(old) = head.session.as_deref() {
        sessions.forget(old);
    }
    let (id, session) = sessions.create(signed_in, head.peer);
    (Reply::ok(describe(ui, session)), Some(cookie(&id)))
}

/// The `Set-Cookie` value of session `id`.
fn cookie(id: &str) -> String {
    format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict")
}

/// The request's session, if its anti-forgery token matches.
fn checked_session<'a>(sessions: &'a mut Sessions, head: &Head) -> Result<&'a mut Session, Reply> {
    let session = head
        .session
        .as_deref()
        .and_then(|id| sessions.live(id))
        .ok_or_else(|| Reply::error(403, "no session: load the page again"))?;
    match head.csrf.as_deref() {
        Some(token) if constant_time_eq(token, &session.csrf) => Ok(session),
        _ => Err(Reply::error(403, "the request lacks this session's X-Spindle-Csrf token")),
    }
}

/// A POST must come from a page of this server, as JSON (which a form on another site cannot
/// send without asking first).
fn same_origin(head: &Head) -> Result<(), Reply> {
    let from_here = match (&head.origin, &head.host) {
        (Some(origin), Some(host)) => origin == &format!("http://{host}"),
        (None, _) => head.fetch_site.as_deref() == Some("same-origin"),
        (Some(_), None) => false,
    };
    if !from_here {
        return Err(Reply::error(403, "cross-site requests are refused"));
    }
    let json = head.content_type.as_deref().is_some_and(|t| t.starts_with("application/json"));
    if !json {
        return Err(Reply::error(415, "a POST sends Content-Type: application/json"));
    }
    Ok(())
}

/// What `GET /api/session` answers.
fn describe(ui: &Ui, session: &Session) -> Value {
    let signed_in =
        session.signed_in.as_ref().map(|s| json!({ "tenant": s.tenant, "role": s.role.as_str() }));
    json!({
        "csrf": session.csrf,
        "tenant": ui.store.tenant_id(),
        "actions": ui.settings.allow_actions,
        "login_required": ui.settings.require_token,
        "signed_in": signed_in,
    })
}

/// Compares secrets without stopping at the first difference.
fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        assert_eq!(session_cookie("a=1; spindle_ui=abc; b=2").as_deref(), Some("abc"));
        assert_eq!(session_cookie("spindle_uix=1"), None);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_time_eq("abc", "abc") && !constant_time_eq("abc", "abd"));
        assert!(!constant_time_eq("abc", "abcd"));
    }
}
