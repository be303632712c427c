//! `Store::metrics`: what an operator scrapes. The tenant's counts (queue depth by queue and
//! state, dead letters, completed items, graphs, executions and processes by status) come
//! from the counts the store keeps as they change (live queue items from their partial
//! indexes), in one read on a reader: whatever the number of finished items. The store's own work (batches and their
//! sizes, op latency, conflict retries, slow batches) is counted by the store's threads as
//! they run it, since the store opened, in this process. [`Metrics::prometheus`] writes them
//! in the Prometheus text format.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::core::meter::{BATCH_BOUNDS, Buckets, LATENCY_BOUNDS_US, Tally};
use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::Result;
use crate::graph::{GraphFilter, GraphStatus};
use crate::process::ProcessCounts;
use crate::queue::QueueStats;
use crate::store::Store;
use crate::workflow::WorkflowStatus;

/// A store's metrics at one moment, for one tenant (the view's), from [`Store::metrics`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Metrics {
    /// The tenant the counts are of.
    pub tenant: String,
    /// Each queue's items by state (pending, scheduled, claimed, dead, completed), by name.
    pub queues: Vec<QueueStats>,
    /// The tenant's graphs by status (a status none is in is left out).
    pub graphs: Vec<(GraphStatus, u64)>,
    /// The tenant's workflow executions by status (a status none is in is left out).
    pub workflows: Vec<(WorkflowStatus, u64)>,
    /// The tenant's processes by state.
    pub processes: ProcessCounts,
    /// Transactions the store's writer committed since it opened (in this process).
    pub commits: u64,
    /// Transactions the writer rolled back whole since it opened: a failed commit, a
    /// transaction SQLite ended, the only op of its transaction that failed.
    pub rollbacks: u64,
    /// Ops (and transaction closures) per writer transaction (committed or rolled back), since
    /// the store opened.
    pub batch_ops: Histogram,
    /// Seconds from an op's sending to its answer (writer and readers), since the store opened.
    pub op_latency_seconds: Histogram,
    /// Ops run again after losing to another transaction (PostgreSQL), since the store opened.
    pub conflict_retries: u64,
    /// Writer batches that took longer than `Options::slow_batch` (half a second unless set),
    /// since the store opened.
    pub slow_batches: u64,
    /// Queue items completed since the store opened (every tenant, this process's commits): a
    /// counter for a rate, where `queues`' completed count is a gauge that pruning lowers.
    pub completions: u64,
    /// Queue items moved to the dead letters since the store opened (every tenant, this
    /// process's commits).
    pub dead_letters: u64,
    /// The size of the store's write-ahead log file, in bytes (`None` for a store without one:
    /// in memory, PostgreSQL, or a file on a VFS of the caller's own).
    pub wal_bytes: Option<u64>,
}

/// A histogram: how many values fell in each bucket, and their sum.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Histogram {
    /// The buckets' upper bounds, ascending (a value equal to a bound is in its bucket).
    pub bounds: Vec<f64>,
    /// How many values fell in each bucket (not cumulative): one more entry than `bounds`,
    /// the last for the values above every bound.
    pub counts: Vec<u64>,
    /// The sum of every value recorded.
    pub sum: f64,
}

impl Histogram {
    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The histogram of `buckets`, its values divided by `per_unit` (1e6 for microseconds
    /// told in seconds: a division, so that 50 µs reads `0.00005`, not `0.000049999..`).
    fn read<const N: usize>(buckets: &Buckets<N>, bounds: &[u64], per_unit: f64) -> Self {
        let (counts, sum) = buckets.read();
        let bounds = bounds.iter().map(|bound| as_f64(*bound) / per_unit).collect();
        Histogram { bounds, counts, sum: as_f64(sum) / per_unit }
    }
}

impl Metrics {
    /// The metrics in the Prometheus text exposition format (version 0.0.4), every name
    /// prefixed `spindle_`, every count of the tenant labelled with it.
    ///
    /// ```
    /// # fn main() -> spindle::Result<()> {
    /// let store = spindle::Store::open_in_memory()?;
    /// let item = spindle::NewItem::new("mail", serde_json::json!({"to": "a@example.com"}));
    /// store.queue().enqueue(item)?;
    /// let text = store.metrics()?.prometheus();
    /// assert!(text.contains("spindle_queue_items{tenant=\"default\",queue=\"mail\",state=\"pending\"} 1"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        self.write_counts(&mut out);
        self.write_work(&mut out);
        out
    }

    fn write_counts(&self, out: &mut String) {
        let tenant = escape(&self.tenant);
        header(out, "spindle_queue_items", "gauge", "Queue items by queue and state.");
        for stats in &self.queues {
            let queue = escape(&stats.queue);
            for (state, total) in queue_states(stats) {
                let labels = format!("tenant=\"{tenant}\",queue=\"{queue}\",state=\"{state}\"");
                sample(out, "spindle_queue_items", &labels, total);
            }
        }
        let help = "How long the oldest due item of each queue has waited, in seconds.";
        header(out, "spindle_queue_oldest_pending_age_seconds", "gauge", help);
        for stats in &self.queues {
            let age_seconds = as_f64_signed(stats.oldest_pending_age_ms.unwrap_or(0)) / 1000.0;
            let labels = format!("tenant=\"{tenant}\",queue=\"{}\"", escape(&stats.queue));
            sample(out, "spindle_queue_oldest_pending_age_seconds", &labels, age_seconds);
        }
        header(out, "spindle_graphs", "gauge", "Graphs by status.");
        for (status, total) in &self.graphs {
            let labels = format!("tenant=\"{tenant}\",status=\"{}\"", status.as_str());
            sample(out, "spindle_graphs", &labels, total);
        }
        header(out, "spindle_workflow_executions", "gauge", "Workflow executions by status.");
        for (status, total) in &self.workflows {
            let labels = format!("tenant=\"{tenant}\",status=\"{}\"", status.as_str());
            sample(out, "spindle_workflow_executions", &labels, total);
        }
        header(out, "spindle_processes", "gauge", "Processes by state.");
        for (state, total) in process_states(&self.processes) {
            let labels = format!("tenant=\"{tenant}\",state=\"{state}\"");
            sample(out, "spindle_processes", &labels, total);
        }
    }

    fn write_work(&self, out: &mut String) {
        let counters = [
            ("spindle_commits_total", "Writer transactions committed.", self.commits),
            ("spindle_rollbacks_total", "Writer transactions rolled back.", self.rollbacks),
            (
                "spindle_conflict_retries_total",
                "Ops run again after a conflict.",
                self.conflict_retries,
            ),
            (
                "spindle_slow_batches_total",
                "Writer batches over Options::slow_batch.",
                self.slow_batches,
            ),
            (
                "spindle_queue_completions_total",
                "Queue items completed since the store opened.",
                self.completions,
            ),
            (
                "spindle_queue_dead_letters_total",
                "Queue items moved to the dead letters since the store opened.",
                self.dead_letters,
            ),
        ];
        for (name, help, total) in counters {
            header(out, name, "counter", help);
            sample(out, name, "", total);
        }
        let help = "Ops (and transaction closures) per writer transaction.";
        histogram(out, "spindle_batch_ops", help, &self.batch_ops);
        let help = "Seconds from an op's sending to its answer.";
        histogram(out, "spindle_op_latency_seconds", help, &self.op_latency_seconds);
        if let Some(wal_bytes) = self.wal_bytes {
            let help = "The write-ahead log file's size in bytes.";
            header(out, "spindle_wal_bytes", "gauge", help);
            sample(out, "spindle_wal_bytes", "", wal_bytes);
        }
    }
}

impl Store {
    /// The store's metrics now: the view's tenant's counts (read from the counts the store
    /// keeps and the live items' indexes, in one read; no finished item is read) and what the
    /// store's threads counted of their work since it opened. See [`Metrics::prometheus`] for
    /// the text a scraper reads.
    ///
    /// # Errors
    /// Storage errors only; `Forbidden` for a view whose role may not read.
    pub fn metrics(&self) -> Result<Metrics> {
        let counts = self.exec(ReadCounts)?;
        let meter = self.meter();
        Ok(Metrics {
            tenant: self.tenant_id().to_owned(),
            queues: counts.queues,
            graphs: counts.graphs,
            workflows: counts.workflows,
            processes: counts.processes,
            commits: meter.commits.load(Ordering::Relaxed),
            rollbacks: meter.rollbacks.load(Ordering::Relaxed),
            batch_ops: Histogram::read(&meter.batch_ops, &BATCH_BOUNDS, 1.0),
            op_latency_seconds: Histogram::read(&meter.latency_us, &LATENCY_BOUNDS_US, 1e6),
            conflict_retries: meter.conflict_retries.load(Ordering::Relaxed),
            slow_batches: meter.slow_batches.load(Ordering::Relaxed),
            completions: meter.tally(Tally::Completed),
            dead_letters: meter.tally(Tally::DeadLettered),
            wal_bytes: self.wal_bytes(),
        })
    }
}

/// Every kept count of the tenant, in one read transaction.
#[derive(Debug, Clone, Copy)]
struct ReadCounts;

/// What [`ReadCounts`] reads.
#[derive(Debug)]
struct Counts {
    queues: Vec<QueueStats>,
    graphs: Vec<(GraphStatus, u64)>,
    workflows: Vec<(WorkflowStatus, u64)>,
    processes: ProcessCounts,
}

impl Sealed for ReadCounts {}
impl Op for ReadCounts {
    type Output = Counts;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Counts> {
        Ok(Counts {
            queues: tx.exec(crate::queue::Stats)?,
            graphs: tx.exec(crate::graph::CountByStatus { filter: GraphFilter::default() })?,
            workflows: tx.exec(crate::workflow::CountExecutions)?,
            processes: tx.exec(crate::process::CountProcesses)?,
        })
    }
}

/// A queue's counts with the names of their states.
fn queue_states(stats: &QueueStats) -> [(&'static str, u64); 5] {
    [
        ("pending", stats.pending),
        ("scheduled", stats.scheduled),
        ("claimed", stats.claimed),
        ("dead", stats.dead),
        ("completed", stats.completed),
    ]
}

/// The process counts with the names of their states.
fn process_states(counts: &ProcessCounts) -> [(&'static str, u64); 5] {
    [
        ("running", counts.running),
        ("waiting", counts.waiting),
        ("completed", counts.completed),
        ("failed", counts.failed),
        ("cancelled", counts.cancelled),
    ]
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// A histogram as Prometheus reads one: cumulative `_bucket` lines, `_sum` and `_count`.
fn histogram(out: &mut String, name: &str, help: &str, histogram: &Histogram) {
    header(out, name, "histogram", help);
    let mut below = 0;
    for (bound, count) in histogram.bounds.iter().zip(&histogram.counts) {
        below += count;
        sample(out, &format!("{name}_bucket"), &format!("le=\"{bound}\""), below);
    }
    sample(out, &format!("{name}_bucket"), "le=\"+Inf\"", histogram.count());
    sample(out, &format!("{name}_sum"), "", histogram.sum);
    sample(out, &format!("{name}_count"), "", histogram.count());
}

/// A label value as the text format writes one: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[allow(clippy::cast_precision_loss, reason = "a metric's value; 2^53 is far enough")]
fn as_f64(value: u64) -> f64 {
    value as f64
}

#[allow(clippy::cast_precision_loss, reason = "an age in milliseconds")]
fn as_f64_signed(value: i64) -> f64 {
    value as f64
}
