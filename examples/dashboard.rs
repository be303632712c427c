//! Fills a store with some of everything `spindle ui` shows beside pipeline runs: a queue with
//! dead letters (each with its last error), pending and scheduled items and an item under a
//! lease; registered processes; workflow executions with events and a snapshot; and an API
//! token to sign in with for queue actions (printed once, as `token: spn_...`).
//!
//! ```text
//! cargo run --example dashboard -- spindle.db      # then: spindle ui --allow-actions
//! ```
//!
//! The browser tests (`tests/e2e/`) fill their store with it, beside `spindle run`.

use serde_json::json;
use spindle::process::Registration;
use spindle::{NewItem, Role, Store, WorkflowStatus};

fn main() -> spindle::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "spindle.db".into());
    let store = Store::open(&path)?;
    queues(&store)?;
    processes(&store)?;
    workflows(&store)?;
    let (secret, _) = store.auth().create_token("dashboard", Role::Writer, None)?;
    println!("token: {}", secret.expose());
    store.close()
}

/// `mail`: three dead letters, two pending items (tagged, with metadata), one scheduled, one
/// claimed.
fn queues(store: &Store) -> spindle::Result<()> {
    let queue = store.queue();
    for (n, error) in ["smtp: connection refused", "smtp: 550 no such user", "template missing"]
        .iter()
        .enumerate()
    {
        queue.enqueue(
            NewItem::new("mail", json!({ "to": format!("user{n}@example.com") })).max_attempts(1),
        )?;
        if let Some(claimed) = queue.claim("mailer-1", &["mail"], 60_000)? {
            queue.fail(&claimed.item.id, claimed.fence, error, false)?;
        }
    }
    queue.enqueue(NewItem::new("mail", json!({ "to": "ops@example.com" })))?;
    queue.claim("mailer-2", &["mail"], 60_000)?;
    for n in 0..2 {
        let digest = NewItem::new("mail", json!({ "digest": n })).tag("digest");
        queue.enqueue(digest.metadata(json!({ "digest": n, "plan": "pro" })))?;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let tomorrow_ms = now_ms + 86_400_000;
    queue.enqueue(NewItem::new("mail", json!({ "report": "weekly" })).run_at_ms(tomorrow_ms))?;
    queue.enqueue(NewItem::new("thumbnails", json!({ "image": "cat.png" })))?;
    Ok(())
}

/// Two processes: an agent and a tool it started.
fn processes(store: &Store) -> spindle::Result<()> {
    let processes = store.processes();
    processes.register(Registration::new("agent-7", "agent", json!({ "goal": "triage inbox" })))?;
    processes.register(Registration::new(
        "tool-7-search",
        "tool",
        json!({ "query": "refunds" }),
    ))?;
    Ok(())
}

/// A deploy workflow: one execution running with events and a snapshot, one completed.
fn workflows(store: &Store) -> spindle::Result<()> {
    let workflows = store.workflows();
    workflows.put_definition("deploy", "v1", json!({ "steps": ["build", "push", "roll out"] }))?;
    let running = workflows.create_execution("deploy", "v1", json!({ "env": "staging" }))?;
    workflows.set_status(&running.id, WorkflowStatus::Running)?;
    let mut at_seq = 0;
    for step in ["build", "push"] {
        at_seq = workflows.append_event(&running.id, "step_done", json!({ "step": step }))?.seq;
    }
    workflows.write_snapshot(&running.id, at_seq, json!({ "done": ["build", "push"] }))?;
    let done = workflows.create_execution("deploy", "v1", json!({ "env": "prod" }))?;
    workflows.set_status(&done.id, WorkflowStatus::Running)?;
    workflows.set_status(&done.id, WorkflowStatus::Completed)?;
    Ok(())
}
