//! `spindle logs RUN [NODE] [--follow]`: what a run's commands printed.
//!
//! Read from the run's live log (`livelog.rs` writes it, `log_reader.rs` reads it): every attempt's output (stdout and stderr
//! together, its last 64 KiB), attempts in the order they ended, each under a line that names
//! the node, the attempt and how it ended. One node prints under headers, read from that node's
//! stream alone; every node prints each line prefixed by its name, read through the run's index
//! one attempt at a time and printed as it is read. `--follow` prints output as the commands
//! print it, also for a run another process drives, until the run ends: it reads what is new
//! a few times a second and prints the streams' events merged in the order they committed. A
//! run logged before node streams is read from its run-wide stream; a run whose live log is
//! empty (made before there was one, or pruned) shows what its nodes kept of their last
//! attempt.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde_json::{Value, json};
use spindle::{Event, Node, NodeStatus, Store, Stream};

use crate::common::{CliError, Output};
use crate::log_reader::{Attempt, LogReader, PAGE_EVENTS, is_old_layout, key_of, node_of, text_of};
use crate::names::node_stream;
use crate::run::attempts_of;
use crate::run::outputs::output_field;
use crate::run::runs::resolve;

/// How often `--follow` reads what is new.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

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
    let reader = LogReader::new(store, &graph.id);
    if follow {
        return follow_log(&reader, &view);
    }
    let mut print = |attempt: Attempt| view.print_attempt(&attempt);
    let shown = match node {
        Some(node) => reader.node_attempts(node, &mut print)?,
        None => reader.run_attempts(&mut print)?,
    };
    if shown == 0 {
        return kept_outputs(store, &graph.id, &view);
    }
    Ok(())
}

/// Which node to show, and how.
struct View<'a> {
    node: Option<&'a str>,
    out: &'a Output,
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

/// Prints the live log as it grows until the run has ended and everything before its end is
/// printed. Partial lines wait for their end (or for their attempt's end).
fn follow_log(reader: &LogReader<'_>, view: &View<'_>) -> Result<(), CliError> {
    let mut follower = Follower::new(reader, view)?;
    loop {
        // The status first: what committed before the run ended is then within the bound.
        let ended = reader.store().graphs().get(reader.run())?.status.is_terminal();
        let bound = reader.store().events().last_position()?;
        follower.round(bound)?;
        if ended {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// A stream `--follow` reads: how far, and what it read but has not printed yet.
struct Source {
    stream: Stream,
    after: u64,
    buffer: VecDeque<Event>,
    /// Nothing more of it within this round's bound.
    drained: bool,
}

impl Source {
    fn new(stream: Stream, after: u64) -> Self {
        Source { stream, after, buffer: VecDeque::new(), drained: false }
    }

    /// Reads its next page if it has nothing buffered, keeping what committed up to `bound`.
    fn fill(&mut self, reader: &LogReader<'_>, bound: u64) -> spindle::Result<()> {
        if !self.buffer.is_empty() || self.drained {
            return Ok(());
        }
        let page = reader.page(&self.stream, self.after, PAGE_EVENTS)?;
        self.drained = page.len() < PAGE_EVENTS;
        for event in page {
            if event.position > bound {
                self.drained = true;
                break;
            }
            self.after = event.seq;
            self.buffer.push_back(event);
        }
        Ok(())
    }
}

/// `--follow`: the streams it reads, their events merged in the order they committed.
struct Follower<'r> {
    reader: &'r LogReader<'r>,
    view: &'r View<'r>,
    /// By stream id: the run's stream (for every node, or the old layout's outputs), and the
    /// node's stream (for one node) or those of the attempts under way (for every node).
    sources: BTreeMap<String, Source>,
    /// Attempts under way, by node (every node's view).
    open: BTreeMap<String, BTreeSet<u64>>,
    /// Each attempt's last line while it has no end yet.
    partial: BTreeMap<(String, u64), String>,
}

impl<'r> Follower<'r> {
    fn new(reader: &'r LogReader<'r>, view: &'r View<'r>) -> spindle::Result<Self> {
        let mut sources = BTreeMap::new();
        let mut add =
            |stream: Stream| sources.insert(stream.id().to_owned(), Source::new(stream, 0));
        match view.node {
            None => drop(add(reader.index().clone())),
            Some(node) => {
                add(node_stream(reader.run(), node));
                if reader.has_old_layout()? {
                    add(reader.index().clone());
                }
            }
        }
        let (open, partial) = (BTreeMap::new(), BTreeMap::new());
        Ok(Follower { reader, view, sources, open, partial })
    }

    /// Prints what committed up to position `bound` that it has not printed, in the order it
    /// committed (positions of a tenant commit in order, so nothing can still come below it).
    fn round(&mut self, bound: u64) -> spindle::Result<()> {
        self.sources.values_mut().for_each(|source| source.drained = false);
        loop {
            for source in self.sources.values_mut() {
                source.fill(self.reader, bound)?;
            }
            let fronts = self.sources.iter_mut().filter_map(|(id, source)| {
                let position = source.buffer.front()?.position;
                Some((position, id, source))
            });
            let Some((_, id, source)) = fronts.min_by_key(|(position, ..)| *position) else {
                return Ok(());
            };
            let (id, event) = (id.clone(), source.buffer.pop_front());
            if let Some(event) = event {
                self.handle(&id, &event);
            }
        }
    }

    /// Prints an attempt's event, or follows what the run's index says.
    fn handle(&mut self, source: &str, event: &Event) {
        if source != self.reader.index().id() || is_old_layout(event) {
            return follow_event(event, self.view, &mut self.partial);
        }
        if self.view.node.is_some() {
            return;
        }
        let (node, attempt) = key_of(event);
        let stream = node_stream(self.reader.run(), &node);
        match event.event_type.as_str() {
            "started" => {
                self.open.entry(node).or_default().insert(attempt);
                let after = event.payload["after"].as_u64().unwrap_or(0);
                let id = stream.id().to_owned();
                self.sources.entry(id).or_insert_with(|| Source::new(stream, after));
            }
            "ended" => {
                let attempts = self.open.entry(node.clone()).or_default();
                attempts.remove(&attempt);
                if attempts.is_empty() {
                    self.open.remove(&node);
                    self.sources.remove(stream.id());
                }
            }
            _ => {}
        }
    }
}

/// Prints what one live log event adds.
fn follow_event(event: &Event, view: &View<'_>, partial: &mut BTreeMap<(String, u64), String>) {
    let node = node_of(event);
    if !view.shows(node) {
        return;
    }
    let attempt = event.payload["attempt"].as_u64().unwrap_or(0);
    let pending = partial.entry((node.to_owned(), attempt)).or_default();
    match event.event_type.as_str() {
        "output" => {
            pending.push_str(text_of(event));
            if let Some(end) = pending.rfind('\n') {
                let whole: String = pending.drain(..=end).collect();
                view.text(node, &whole);
            }
        }
        "ended" => {
            let rest = std::mem::take(pending);
            partial.remove(&(node.to_owned(), attempt));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;
    use crate::log_reader::{TAIL_BYTES, keep_tail};
    use crate::names::log_stream;
    use crate::run::livelog::{Captured, LiveLog};

    /// Writes one attempt of `node` in `run` that printed `text` and ended `how` (none: it
    /// did not end).
    fn attempt(store: &Store, run: &str, node: &str, number: u32, text: &[u8], how: Option<&str>) {
        let captured = Arc::new(Mutex::new(Captured::default()));
        let live = LiveLog::new(store, run, node, number, &captured);
        captured.lock().push(text);
        match how {
            Some(how) => live.ended(how).expect("log the attempt"),
            None => live.flush().expect("log the output"),
        }
    }

    /// What `each` is handed, as (node, attempt, how, text).
    fn collect(
        read: impl FnOnce(&mut dyn FnMut(Attempt)) -> spindle::Result<usize>,
    ) -> Vec<(String, u64, Option<String>, String)> {
        let mut all = Vec::new();
        let shown = read(&mut |a| all.push((a.node, a.attempt, a.how, a.text))).expect("read");
        assert_eq!(shown, all.len(), "the count is what was handed on");
        all
    }

    /// An old-layout event in the run's stream, as runs logged before node streams hold them.
    fn old(store: &Store, run: &str, event_type: &str, payload: Value) {
        store.events().append(log_stream(run), event_type, payload).expect("append");
    }

    #[test]
    fn a_nodes_log_is_read_from_its_own_stream_without_the_others_output() {
        let store = Store::open_in_memory().expect("a store");
        let loud = vec![b'x'; 900 * 1024];
        for number in 1..=3 {
            attempt(&store, "r", "loud", number, &loud, Some("exit 1"));
        }
        attempt(&store, "r", "quiet", 1, b"hello\n", Some("exit 0"));
        let reader = LogReader::new(&store, "r");
        let quiet = collect(|each| reader.node_attempts("quiet", each));
        assert_eq!(quiet, [("quiet".into(), 1, Some("exit 0".into()), "hello\n".into())]);
        let read = reader.events_read();
        let node = node_stream("r", "quiet").id().to_owned();
        let index = log_stream("r").id().to_owned();
        assert_eq!(read.get(&node), Some(&2), "its output and its end: {read:?}");
        assert!(read.get(&index).is_none_or(|n| *n <= 1), "one event to tell the layout: {read:?}");
        assert_eq!(read.len(), 2, "no other stream was read: {read:?}");
    }

    #[test]
    fn the_whole_run_reads_an_attempt_at_a_time_in_the_order_they_ended() {
        let store = Store::open_in_memory().expect("a store");
        attempt(&store, "r", "b", 1, b"b1\n", Some("exit 1"));
        attempt(&store, "r", "a", 1, b"a1\n", Some("exit 0"));
        attempt(&store, "r", "c", 1, b"c, cut off\n", None);
        attempt(&store, "r", "b", 2, b"b2\n", Some("exit 0"));
        let reader = LogReader::new(&store, "r");
        let all = collect(|each| reader.run_attempts(each));
        let order: Vec<(&str, u64, Option<&str>)> =
            all.iter().map(|(n, a, how, _)| (n.as_str(), *a, how.as_deref())).collect();
        assert_eq!(
            order,
            [
                ("b", 1, Some("exit 1")),
                ("a", 1, Some("exit 0")),
                ("b", 2, Some("exit 0")),
                ("c", 1, None)
            ]
        );
        assert_eq!(all[2].3, "b2\n", "only the attempt's own output");
        let b = collect(|each| reader.node_attempts("b", each));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn a_run_of_the_old_layout_is_read_from_the_run_stream_also_once_resumed() {
        let store = Store::open_in_memory().expect("a store");
        old(&store, "r", "output", json!({ "node": "a", "attempt": 1, "text": "old a\n" }));
        old(&store, "r", "output", json!({ "node": "b", "attempt": 1, "text": "old b\n" }));
        old(&store, "r", "ended", json!({ "node": "a", "attempt": 1, "how": "exit 1" }));
        attempt(&store, "r", "a", 2, b"new a\n", Some("exit 0"));
        let reader = LogReader::new(&store, "r");
        let a = collect(|each| reader.node_attempts("a", each));
        assert_eq!(
            a,
            [
                ("a".into(), 1, Some("exit 1".into()), "old a\n".into()),
                ("a".into(), 2, Some("exit 0".into()), "new a\n".into())
            ]
        );
        let all = collect(|each| reader.run_attempts(each));
        let texts: Vec<&str> = all.iter().map(|(_, _, _, text)| text.as_str()).collect();
        assert_eq!(texts, ["old a\n", "new a\n", "old b\n"], "ended first, then b's unended one");
    }

    #[test]
    fn keep_tail_keeps_the_last_bytes_at_a_character_boundary() {
        let mut text = String::new();
        keep_tail(&mut text, &"é".repeat(TAIL_BYTES));
        assert!(text.len() <= TAIL_BYTES && text.starts_with('é'), "{}", text.len());
    }
}
