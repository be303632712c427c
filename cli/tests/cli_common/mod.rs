//! What the tests of the built `spindle` binary share (`cli_pipeline.rs`, `cli_runs.rs`): a
//! scratch directory with a store, the binary run on it, and its output as text.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_spindle");

/// A scratch directory with a store path and a log (`log.txt`) the pipelines append to.
pub struct Scratch {
    pub dir: TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temporary directory") }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn db(&self) -> PathBuf {
        self.path("spindle.db")
    }

    /// Writes `text` to the file `name`; returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write a file");
        path
    }

    /// The binary on this store, with a short lease and no colour.
    pub fn command(&self) -> Command {
        let mut command = Command::new(BIN);
        command.arg("--db").arg(self.db()).env("SPINDLE_LEASE_MS", "1000").env("NO_COLOR", "1");
        command
    }

    /// The binary on this store with `args`.
    pub fn command_with(&self, args: &[&str]) -> Command {
        let mut command = self.command();
        command.args(args);
        command
    }

    /// Runs the binary with `args` to its end.
    pub fn spindle(&self, args: &[&str]) -> Output {
        self.command_with(args).output().expect("run spindle")
    }

    /// `spindle run PIPELINE` to its end.
    pub fn run(&self, pipeline: &Path) -> Output {
        self.command().arg("run").arg(pipeline).output().expect("run spindle")
    }

    /// The lines of the log.
    pub fn lines(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.path("log.txt")).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn stdout(output: &Output) -> String {
    text(&output.stdout)
}

pub fn stderr(output: &Output) -> String {
    text(&output.stderr)
}
