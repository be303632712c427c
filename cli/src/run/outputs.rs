//! A run's outputs directory, where its commands read their predecessors' output.
//!
//! Under the runs directory (`<db>.runs` beside a store file, `spindle.runs` in the current
//! directory for a PostgreSQL store, or `--runs-dir`): `<runs dir>/<run id>/`, one file per
//! graph node that succeeded,
//! named by `pipeline::output_file` (the node's id, `%` and `/` escaped, then `.out`; a long
//! id shortened with a digest), holding
//! the kept tail of its output (stdout and stderr, the last 64 KiB). A node's file is written
//! when it succeeds; before a command starts, each of its direct predecessors' files that is
//! missing (a run resumed after a crash, the directory deleted) is written again from the
//! node's output in the store, which is the same tail. Every command gets the directory in
//! `SPINDLE_OUTPUTS`, and each direct predecessor's file in `SPINDLE_OUTPUT_<NODE>`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use spindle::{Node, NodeOutput, NodeStatus, Store};

use crate::common::CliError;
use crate::pipeline::output_file;

/// Writes so far by this process: what keeps its temporary files apart.
static WRITES: AtomicU64 = AtomicU64::new(0);

/// The outputs directory of one run.
pub struct Outputs {
    dir: PathBuf,
}

impl Outputs {
    /// The directory of run `run` under `runs` (the runs directory, absolute: commands may
    /// run elsewhere), created if missing.
    pub fn create(runs: &Path, run: &str) -> Result<Self, CliError> {
        let dir = runs.join(run);
        std::fs::create_dir_all(&dir).map_err(|e| cannot("create", &dir, &e))?;
        Ok(Self { dir })
    }

    /// Removes the directory of run `run` under `runs`, if there is one; true if there was.
    pub fn remove(runs: &Path, run: &str) -> Result<bool, CliError> {
        let dir = runs.join(run);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(cannot("remove", &dir, &error)),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of graph node `node`.
    pub fn path(&self, node: &str) -> PathBuf {
        self.dir.join(output_file(node))
    }

    /// Writes `node`'s output whole or not at all: a temporary file of this writer's own
    /// (a worker and a successor's `ensure` may write the same file at once, with the same
    /// text), renamed over it.
    pub fn write(&self, node: &str, text: &str) -> Result<(), CliError> {
        let path = self.path(node);
        let writer = WRITES.fetch_add(1, Ordering::Relaxed);
        let temporary = self.dir.join(format!(".{}-{writer}.tmp", std::process::id()));
        std::fs::write(&temporary, text).map_err(|e| cannot("write", &temporary, &e))?;
        std::fs::rename(&temporary, &path).map_err(|e| cannot("write", &path, &e))
    }

    /// Writes `node`'s file from its output in the store if the file is missing and the node
    /// succeeded (a node that failed or was skipped has no file).
    pub fn ensure(&self, store: &Store, graph: &str, node: &str) -> Result<(), CliError> {
        if self.path(node).exists() {
            return Ok(());
        }
        let state = store.graphs().node(graph, node)?;
        if state.status != NodeStatus::Complete {
            return Ok(());
        }
        match output_field(&state, "output").and_then(Value::as_str) {
            Some(text) => self.write(node, text),
            None => Ok(()),
        }
    }
}

/// A field of what a node that ran a command completed with (`{"attempt", "output"}`, see
/// `run/mod.rs`), if it completed so.
pub fn output_field<'n>(node: &'n Node, field: &str) -> Option<&'n Value> {
    match &node.output {
        Some(NodeOutput::Single(token)) => token.data.as_ref()?.get(field),
        _ => None,
    }
}

/// The error of a file operation on the outputs directory (exit 3: it is this machine's).
fn cannot(what: &str, path: &Path, error: &std::io::Error) -> CliError {
    CliError::Internal(format!("cannot {what} the outputs file {}: {error}", path.display()))
}
