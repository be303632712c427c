//! `spindle logs RUN [NODE] [--follow]`: what a run's commands printed.
//!
//! Read from the run's live log (`livelog.rs`): every attempt's output (stdout and stderr
//! together, its last 64 KiB), attempts in the order they ended, each under a line that names
//! the node, the attempt and how it ended. One node prints under headers; every node prints
//! each line prefixed by its name. `--follow` prints output as the commands print it, also for
//! a run another process drives, until the run ends. A run whose live log is empty (made before
//! there was one) shows what its nodes kept of their last attempt.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use spindle::{Event, Node, NodeStatus, Store};

use crate::common::{CliError, Output, read_stream};
use crate::livelog::{self, TAIL_BYTES};
use crate::outputs::output_field;
use crate::run::attempts_of;
use crate::runs::resolve;

/// Prints the output of a run's nodes (or of `node`), following the run if asked.
pub fn logs(
    store: &Store,
    run: &str,
    node: Option<&str>,
    follow: bool,
    out: &Output,
) -> Result<(), CliError> {
    let graph = resolve(store, run)?;
    if let Some(node) = node {
        match store.graphs().node(&graph.id, node) {
            Err(spindle::Error::NotFound { .. }) => {
                return Err(CliError::Bad(format!(
                    "run {} has no node {node:?}: `spindle graph show {}` lists its nodes",
                    graph.id, graph.id
                )));
            }
            other => drop(other?),
        }
    }
    let view = View { node, out };
    if follow {
        return follow_log(store, &graph.id, &view);
    }
    let events = read_stream(store, &livelog::stream(&graph.id))?;
    if events.is_empty() {
        return kept_outputs(store, &graph.id, &view);
    }
    for attempt in attempts(&events).into_iter().filter(|a| view.shows(&a.node)) {
        view.print_attempt(&attempt);
    }
    Ok(())
}

/// Which node to show, and how.
struct View<'a> {
    node: Option<&'a str>,
    out: &'a Output,
}

/// One attempt's output as the live log holds it.
pub struct Attempt {
    pub node: String,
    pub attempt: u64,
    pub text: String,
    /// How it ended; `None` while it runs (or if its runner was killed).
    pub how: Option<String>,
}

impl View<'_> {
    fn shows(&self, node: &str) -> bool {
        self.node.is_none_or(|wanted| wanted == node)
    }

    fn print_attempt(&self, attempt: &Attempt) {
        let how = attempt.how.as_deref().unwrap_or("running, or its runner was stopped");
        if self.out.json {
            let (node, number, output) = (&attempt.node, attempt.attempt, &attempt.text);
            self.out.print_json(
                &json!({ "node": node, "attempt": number, "ended": attempt.how, "output": output }),
            );
            return;
        }
        self.header(&attempt.node, attempt.attempt, how);
        self.text(&attempt.node, &attempt.text);
    }

    fn header(&self, node: &str, attempt: u64, how: &str) {
        match self.node {
            Some(_) => println!("== {node} (attempt {attempt}): {how}"),
            None => println!("{node} | == attempt {attempt}: {how}"),
        }
    }

    /// Whole lines of `text`, bare under one node's header or prefixed by the node's name.
    fn text(&self, node: &str, text: &str) {
        for line in text.lines() {
            match self.node {
                Some(_) => println!("{line}"),
                None => println!("{node} | {line}"),
            }
        }
    }
}

/// The attempts of a live log: ended ones in the order they ended, then the others.
pub fn attempts(events: &[Event]) -> Vec<Attempt> {
    let mut open: BTreeMap<(String, u64), Attempt> = BTreeMap::new();
    let mut ended = Vec::new();
    for event in events {
        let node = event.payload["node"].as_str().unwrap_or("?").to_owned();
        let number = event.payload["attempt"].as_u64().unwrap_or(0);
        let key = (node.clone(), number);
        let attempt = open.entry(key.clone()).or_insert_with(|| Attempt {
            node,
            attempt: number,
            text: String::new(),
            how: None,
        });
        match event.event_type.as_str() {
            "output" => keep_tail(&mut attempt.text, event.payload["text"].as_str().unwrap_or("")),
            "ended" => {
                attempt.how = event.payload["how"].as_str().map(str::to_owned);
                ended.extend(open.remove(&key));
            }
            _ => {}
        }
    }
    ended.extend(open.into_values());
    ended
}

/// Appends `more`, keeping the last `TAIL_BYTES` (cut at a character boundary).
fn keep_tail(text: &mut String, more: &str) {
    text.push_str(more);
    if text.len() > TAIL_BYTES {
        let mut cut = text.len() - TAIL_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text.drain(..cut);
    }
}

/// Prints the live log as it grows until the run has ended and everything before its end
/// is printed. Partial lines wait for their end (or for their attempt's end).
fn follow_log(store: &Store, run: &str, view: &View<'_>) -> Result<(), CliError> {
    let stream = livelog::stream(run);
    let mut subscription = store.subscribe(&stream, 0)?;
    let mut partial: BTreeMap<(String, u64), String> = BTreeMap::new();
    let mut last_seq = 0;
    let mut end_seq: Option<u64> = None;
    loop {
        if end_seq.is_some_and(|end| last_seq >= end) {
            return Ok(());
        }
        let Some(event) = subscription.recv_timeout(Duration::from_millis(200))? else {
            if end_seq.is_none() && store.graphs().get(run)?.status.is_terminal() {
                end_seq = Some(store.events().head(&stream)?);
            }
            continue;
        };
        last_seq = event.seq;
        follow_event(&event, view, &mut partial);
    }
}

/// Prints what one live log event adds.
fn follow_event(event: &Event, view: &View<'_>, partial: &mut BTreeMap<(String, u64), String>) {
    let node = event.payload["node"].as_str().unwrap_or("?");
    if !view.shows(node) {
        return;
    }
    let attempt = event.payload["attempt"].as_u64().unwrap_or(0);
    let pending = partial.entry((node.to_owned(), attempt)).or_default();
    match event.event_type.as_str() {
        "output" => {
            pending.push_str(event.payload["text"].as_str().unwrap_or(""));
            if let Some(end) = pending.rfind('\n') {
                let whole: String = pending.drain(..=end).collect();
                view.text(node, &whole);
            }
        }
        "ended" => {
            let rest = std::mem::take(pending);
            view.text(node, &rest);
            view.header(node, attempt, event.payload["how"].as_str().unwrap_or("?"));
        }
        _ => {}
    }
}

/// What each finished node kept of its last attempt, in the order they finished: the logs of
/// a run made before runs had a live log.
fn kept_outputs(store: &Store, run: &str, view: &View<'_>) -> Result<(), CliError> {
    let mut finished: Vec<Node> = store
        .graphs()
        .nodes(run)?
        .into_iter()
        .filter(|n| view.shows(&n.id))
        .filter(|n| matches!(n.status, NodeStatus::Complete | NodeStatus::Failed))
        .collect();
    finished.sort_by_key(|n| (n.finished_at_ms, n.id.clone()));
    for node in finished {
        let attempt = Attempt {
            attempt: attempts_of(&node).unwrap_or(0),
            text: kept_output(&node),
            how: Some(node.status.as_str().to_owned()),
            node: node.id,
        };
        view.print_attempt(&attempt);
    }
    Ok(())
}

/// What a finished node kept of its output: a success's tail, or a failure's after its first
/// line (which says what happened).
fn kept_output(node: &Node) -> String {
    if node.status == NodeStatus::Failed {
        let error = node.error.as_deref().unwrap_or("");
        return error.split_once('\n').map_or("", |(_, rest)| rest).to_owned();
    }
    output_field(node, "output").and_then(Value::as_str).unwrap_or("").to_owned()
}
