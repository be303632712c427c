//! The names of a run's things in the store, which the runner writes under and everything
//! that reads runs back (the `runs`, `logs` and queue commands, the dashboard) looks for: the
//! `kind` of a run's graph, the queue its nodes are dispatched through (whose items only the
//! run may act on), the stream that keeps its pipeline's text, and its live log's streams.
//!
//! Kept apart from the runner (`run/`) and the pipeline file (`pipeline/`), so that the
//! readers name neither. Uses only `spindle`, `serde_json`, `sha2` and std: the crates of the
//! pipeline fuzz harness (`fuzz/fuzz_targets/pipeline.rs`, `tests/fuzz_corpus.rs`) include it
//! (`#[path]`) at their root for `pipeline/format.rs`.

use serde_json::json;
use sha2::{Digest, Sha256};
use spindle::{GraphFilter, Limits, Stream};

/// The `kind` a run's graph carries in its metadata.
pub const RUN_KIND: &str = "spindle-run";

/// The runs of the tenant (root graphs whose metadata says `kind: spindle-run`), oldest first:
/// what `Graphs::find` reads when asked for runs (narrow it with more fields).
pub fn run_filter() -> GraphFilter {
    GraphFilter::default().metadata("kind", json!(RUN_KIND)).roots_only(true)
}

/// The stream that keeps a run's pipeline text: `source` events whose texts, joined, are it.
pub fn source_stream(run: &str) -> Stream {
    Stream::custom(format!("pipeline:{run}"))
}

/// The queue a run's nodes are dispatched through. Its items belong to the run: only the run
/// settles them, and an action on them from outside (requeue, cancel, purge) is refused (see
/// [`owned_by_run`]).
pub fn run_queue(run: &str) -> String {
    format!("{RUN_QUEUE_PREFIX}{run}")
}

/// What every run's queue name starts with: reserved for runs (an application's own queue
/// named so is refused to the command's and the dashboard's actions too).
const RUN_QUEUE_PREFIX: &str = "run:";

/// The run whose queue `queue` is, if it is a run's queue.
pub fn run_of_queue(queue: &str) -> Option<&str> {
    queue.strip_prefix(RUN_QUEUE_PREFIX)
}

/// Refuses an outside action (`what`: "requeue", "cancel", ..) on the items of `queue` when
/// it is a run's queue: a run's items carry its nodes' firings, and only the run may decide
/// that one runs again, or not at all (at most one attempt of a node runs at any moment).
pub fn owned_by_run(queue: &str, what: &str) -> Result<(), String> {
    let Some(run) = run_of_queue(queue) else { return Ok(()) };
    Err(format!(
        "cannot {what} items of {queue}: they belong to run {run}, which alone settles them. \
         To run its failed nodes again: spindle retry {run}; to stop a live run: Ctrl-C its \
         runner; to drop a finished run's items: spindle prune"
    ))
}

/// The most of a node's name a shortened node stream name keeps.
const NODE_PREFIX_BYTES: usize = 160;

/// The live log stream of `run`: the index of its attempts (of a run logged before node
/// streams, the whole log).
pub fn log_stream(run: &str) -> Stream {
    Stream::custom(format!("log:{run}"))
}

/// The stream of `node`'s attempts in `run`: `log:RUN:NODE`, or, when that would pass the
/// store's id limit or the name holds `~` itself, `log:RUN:` with the node name's first bytes,
/// `~` and 16 hex digits of its SHA-256. A name with `~` always takes the digest form, so no
/// node can be named as another's shortened stream; two names share a stream only by that
/// digest's prefix colliding, and the readers check each event's `node` anyway.
pub fn node_stream(run: &str, node: &str) -> Stream {
    let name = format!("log:{run}:{node}");
    let limit = Limits::default().id_len_max;
    if name.len() <= limit && !node.contains('~') {
        return Stream::custom(name);
    }
    let head = format!("log:{run}:");
    let digest: String =
        Sha256::digest(node.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let room = limit.saturating_sub(head.len() + 1 + digest.len()).min(NODE_PREFIX_BYTES);
    let cut = (0..=room).rev().find(|&i| node.is_char_boundary(i)).unwrap_or(0);
    Stream::custom(format!("{head}{}~{digest}", &node[..cut]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_queue_is_its_own_and_other_queues_are_anyones() {
        assert_eq!(run_queue("01abc"), "run:01abc");
        assert_eq!(run_of_queue("run:01abc"), Some("01abc"));
        let refused = owned_by_run(&run_queue("01abc"), "cancel").expect_err("a run's queue");
        assert!(refused.starts_with("cannot cancel items of run:01abc"), "{refused}");
        assert!(refused.contains("spindle retry 01abc"), "{refused}");
        for queue in ["mail", "runs", "run", "Run:x", "xrun:y"] {
            assert_eq!(owned_by_run(queue, "requeue"), Ok(()), "{queue}");
        }
    }
}
