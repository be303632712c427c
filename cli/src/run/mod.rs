//! `spindle run`: a pipeline as a durable graph, its ready nodes dispatched through the queue
//! to the library's worker pool, whose handlers run shell commands.
//!
//! The graph and the queue hold everything: a node that finished is never run again, and a
//! run killed at any moment resumes where it stood. A dispatcher follows the graph's stream and
//! enqueues each ready node (deduplicated by node and firing, and only while it is still
//! ready); the pool claims an item for a free handler under a short lease and renews it while
//! the command runs, and the handler completes the item and the node in one transaction under
//! the item's fence (it settles every item itself: the pool is told `Outcome::Settled`). Ctrl-C
//! stops the pool's claiming; a second one kills the running commands. After a crash the
//! interrupted node's lease lapses within seconds and the node runs again, instead of the
//! interrupted attempt: at most one attempt of a node's command runs at any moment (see
//! `attempt.rs`: commands die with their runner, and a new attempt first ends what is left of
//! the last).
//!
//! The run's queue is its own (`names::owned_by_run`): each item names the firing of its
//! node it was made for (its dedupe key, `NODE#FIRING`), and an item of any other firing is
//! dropped unrun, checked where the node is taken and again where the attempt is settled. A
//! pending item cancelled from outside fails its node (`Run::follow_cancels`).
//!
//! The folder: this file (a run: the dispatcher, the pool's handlers, the end), `attempt.rs`
//! (one attempt of a node's command, its process group, what is left of the last one),
//! `outputs.rs` (the outputs directory commands read their predecessors' output from),
//! `livelog.rs` (what commands print, streamed into the store while they run), `logs.rs`
//! (`spindle logs`), and `runs.rs` (`spindle runs`, a `RUN` argument, `spindle retry`).

pub mod attempt;
pub mod livelog;
pub mod logs;
pub mod outputs;
pub mod runs;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use parking_lot::Mutex;
use serde_json::{Value, json};
use spindle::graph::{GetNode, StartNode};
use spindle::queue::{CancelExecution, Complete, Enqueue, Fail, Job, WorkerPool};
use spindle::{
    Backoff, Claimed, Graph, GraphEvent, GraphStatus, NewItem, NodeOutput, NodeStatus, Page, Store,
    Stream, Subscription, Token, Tx, TxOutcome,
};

use crate::common::{CliError, Output, human_duration};
use crate::names::{run_filter, run_queue};
use crate::pipeline::{Pipeline, PlanKind, Step};
use crate::run::attempt::kill_group;
use crate::run::livelog::{Captured, LiveLog};
use crate::run::outputs::{Outputs, output_field};

/// How long a claim lasts without a renewal: what a resumed run waits at most for the node a
/// killed run was running. `SPINDLE_LEASE_MS` overrides it (the tests use a short one). The
/// pool renews a running node's lease each time a fifth of it has passed (not the pool's
/// default half): with a short lease a renewal then has four fifths of it to get through a
/// slow store on a loaded machine.
const LEASE_MS: i64 = 10_000;

fn lease_ms() -> i64 {
    std::env::var("SPINDLE_LEASE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .filter(|ms| (500..=3_600_000).contains(ms))
        .unwrap_or(LEASE_MS)
}
/// Claims an item gets. A claim whose lease lapses (the run was killed) costs one, so this
/// bounds interruptions, not retries: failures of the command are counted in the item's
/// payload (`try`), and each retry is a new item.
const CLAIMS_MAX: u32 = 1_000;

/// How a run ended.
pub enum Ending {
    Complete,
    Failed,
    Interrupted,
}

/// How a run is asked for: the pipeline, `jobs` workers, whether to start afresh, and the
/// runs directory (its outputs directory goes under it).
pub struct Request<'a> {
    /// The checked pipeline.
    pub pipeline: Pipeline,
    /// Commands run at once.
    pub jobs: usize,
    /// Start a new run even if an unfinished one exists.
    pub fresh: bool,
    /// The runs directory (see `Location::runs_dir`).
    pub runs: &'a Path,
}

/// Runs (or resumes) a pipeline.
pub fn run(store: &Store, request: Request<'_>, out: &Output) -> Result<Ending, CliError> {
    let Request { pipeline, jobs, fresh, runs } = request;
    let graph = find_or_create(store, &pipeline, fresh, out)?;
    drive(store, graph, pipeline, jobs, runs, out)
}

/// Runs the graph `graph` of `pipeline` (started here if pending) until it ends or Ctrl-C
/// stops it: what `run` does once it has found or built the run, and what `retry` does once it
/// has reopened one. `runs` is the runs directory (the run's outputs directory goes under it).
pub fn drive(
    store: &Store,
    graph: String,
    pipeline: Pipeline,
    jobs: usize,
    runs: &Path,
    out: &Output,
) -> Result<Ending, CliError> {
    let outputs = Outputs::create(runs, &graph)?;
    store.graphs().start(&graph)?;
    let run = Arc::new(Run::new(store.clone(), graph, pipeline, outputs, *out));
    install_interrupts(&run);
    // Cancels are followed from before the first item is enqueued or claimed.
    let cancelled = run.cancels_from_now()?;
    let pool = start_pool(&run, jobs)?;
    let dispatcher = spawn(&run, "dispatcher", |run| run.dispatch())?;
    let cancels = spawn(&run, "cancels", move |run| run.follow_cancels(cancelled))?;
    let ended = run.watch(&pool);
    run.finished.store(true, Ordering::SeqCst);
    if ended.is_err() {
        run.kill.store(true, Ordering::SeqCst);
    }
    pool.stop();
    let joined = pool.join();
    dispatcher.join().map_err(|_| CliError::Internal("the dispatcher panicked".into()))?;
    cancels.join().map_err(|_| CliError::Internal("the cancels thread panicked".into()))?;
    joined.map_err(|error| CliError::Internal(format!("the worker pool failed: {error}")))?;
    let ended = ended?;
    if let Some(error) = run.failure.lock().take() {
        return Err(error);
    }
    if !matches!(ended, Ending::Interrupted) {
        cancel_leftovers(store, &run.graph)?;
    }
    run.summary(out)?;
    Ok(ended)
}

/// The unfinished run of the same pipeline (name and content), or a new one, in one
/// transaction: two runners started together on the same file run the same graph.
fn find_or_create(
    store: &Store,
    pipeline: &Pipeline,
    fresh: bool,
    out: &Output,
) -> Result<String, CliError> {
    let owned = pipeline.clone();
    let (graph, resumed) = store.transaction(move |tx| {
        let unfinished = unfinished_runs(tx, &owned)?;
        if !fresh && let Some(graph) = unfinished.last() {
            return Ok(TxOutcome::Commit((graph.id.clone(), true)));
        }
        for graph in &unfinished {
            tx.exec(spindle::graph::Cancel { graph: graph.id.clone() })?;
            let execution_id = graph.id.clone();
            while tx.exec(CancelExecution { execution_id: execution_id.clone() })? > 0 {}
        }
        Ok(TxOutcome::Commit((owned.build(tx)?, false)))
    })?;
    let name = &pipeline.name;
    if resumed {
        out.note(&format!("resuming run {graph} of {name}"));
    } else {
        out.note(&format!("run {graph} of {name} ({} nodes)", pipeline.nodes.len()));
    }
    Ok(graph)
}

fn unfinished_runs(tx: &mut Tx<'_>, pipeline: &Pipeline) -> spindle::Result<Vec<Graph>> {
    let mut filter = run_filter();
    filter.metadata.push(("pipeline".into(), json!(pipeline.name)));
    filter.metadata.push(("hash".into(), json!(pipeline.hash)));
    let runs = crate::common::all_graphs_by(|page: Page| {
        tx.exec(spindle::graph::Find { filter: filter.clone(), page })
    })?;
    Ok(runs.into_iter().filter(|run| !run.status.is_terminal()).collect())
}

/// Starts the run's worker pool: `jobs` handlers on the run's queue, each claiming only for
/// itself (no prefetch: an item waiting in a buffer would be one more lease a resumed run or a
/// second runner waits for).
fn start_pool(run: &Arc<Run>, jobs: usize) -> Result<WorkerPool, CliError> {
    let handler = Arc::clone(run);
    run.store
        .queue()
        .worker(&[run.queue.as_str()])
        .threads(jobs.max(1))
        .prefetch(0)
        .lease_ms(run.lease_ms)
        .renew_after_ms(run.lease_ms / 5)
        .worker_id(format!("{}-{}", hostname(), std::process::id()))
        .poll_interval(Duration::from_millis(250))
        .run(move |job| handler.handle(job))
        .map_err(|error| CliError::Internal(format!("cannot start the workers: {error}")))
}

/// Starts one of the run's threads; its first error ends the run (`Run::watch` returns it).
fn spawn(
    run: &Arc<Run>,
    name: &str,
    body: impl FnOnce(&Run) -> Result<(), CliError> + Send + 'static,
) -> Result<thread::JoinHandle<()>, CliError> {
    let (run, name) = (Arc::clone(run), name.to_owned());
    thread::Builder::new()
        .name(format!("spindle-{name}"))
        .spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&run)));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(error)) => run.fail(error),
                Err(_) => run.fail(CliError::Internal(format!("the {name} thread panicked"))),
            }
        })
        .map_err(|error| CliError::Internal(format!("cannot start a thread: {error}")))
}

/// A graph node that runs a command: its id, its step, and its matrix value.
#[derive(Clone)]
struct Task {
    /// Its graph node (`NAME`, or `NAME[value]` for a matrix instance).
    id: String,
    /// The pipeline node it runs.
    step: Step,
    /// Its matrix value, for a matrix instance.
    value: Option<String>,
}

/// What the run's threads share.
struct Run {
    store: Store,
    graph: String,
    queue: String,
    pipeline: Pipeline,
    /// What each graph node is.
    kinds: BTreeMap<String, PlanKind>,
    /// Where commands read their predecessors' output.
    outputs: Outputs,
    lease_ms: i64,
    /// Set by the first Ctrl-C: claim nothing more (`watch` stops the pool).
    stop: AtomicBool,
    /// Set by the second Ctrl-C, or when the run ends: kill the running commands.
    kill: AtomicBool,
    interrupts: AtomicUsize,
    /// Set when the graph has ended (or the run stops): the dispatcher leaves.
    finished: AtomicBool,
    /// The nodes being run, with when they started.
    running: Mutex<BTreeMap<String, Instant>>,
    /// The progress bar, when there is a terminal (and `--quiet` is not given).
    bar: Option<indicatif::ProgressBar>,
    out: Output,
    began: Instant,
    /// The first error of any thread.
    failure: Mutex<Option<CliError>>,
}

impl Run {
    fn new(store: Store, graph: String, pipeline: Pipeline, outputs: Outputs, out: Output) -> Self {
        let queue = run_queue(&graph);
        let plan = pipeline.plan();
        let terminal = std::io::stderr().is_terminal() && !out.quiet;
        let bar = terminal.then(|| new_bar(plan.nodes.len()));
        let kinds = plan.nodes.into_iter().map(|node| (node.id, node.kind)).collect();
        Self {
            store,
            graph,
            queue,
            pipeline,
            kinds,
            outputs,
            lease_ms: lease_ms(),
            stop: AtomicBool::new(false),
            kill: AtomicBool::new(false),
            interrupts: AtomicUsize::new(0),
            finished: AtomicBool::new(false),
            running: Mutex::new(BTreeMap::new()),
            bar,
            out,
            began: Instant::now(),
            failure: Mutex::new(None),
        }
    }

    /// Records a thread's error and stops the run. Input was checked before the run began,
    /// so nothing a thread meets is bad input: it is an internal error (exit 3).
    fn fail(&self, error: CliError) {
        let error = match error {
            CliError::Bad(message) => CliError::Internal(message),
            other => other,
        };
        self.failure.lock().get_or_insert(error);
        self.finished.store(true, Ordering::SeqCst);
        self.kill.store(true, Ordering::SeqCst);
    }

    /// Follows the graph's stream and enqueues every node that is ready, the announcements
    /// that arrived together in one transaction. The end of an earlier round (before a
    /// `retry` reopened the graph) is passed over.
    fn dispatch(&self) -> Result<(), CliError> {
        let mut events = self.store.subscribe(Stream::graph(&self.graph), 0)?;
        while !self.finished.load(Ordering::SeqCst) {
            let Some(first) = events.recv_timeout(Duration::from_millis(200))? else { continue };
            let mut ready = Vec::new();
            let mut next = Some(first);
            while let Some(event) = next {
                match GraphEvent::from_event(&event)? {
                    GraphEvent::NodeReady { node_id, .. } => ready.push(node_id),
                    event if event.is_terminal() && self.ended()? => return Ok(()),
                    _ => {}
                }
                next = if ready.len() < 256 { events.try_recv()? } else { None };
            }
            self.enqueue(ready)?;
        }
        Ok(())
    }

    /// Whether the graph has ended (a terminal event may be of an earlier round).
    fn ended(&self) -> Result<bool, CliError> {
        Ok(self.store.graphs().get(&self.graph)?.status.is_terminal())
    }

    /// Enqueues the tasks that are still ready, once per firing (a replayed or repeated
    /// announcement is a no-op), and completes the ready scatters of matrix nodes (one token
    /// per value, each taken by its instance's edge), in one transaction.
    fn enqueue(&self, names: Vec<String>) -> Result<(), CliError> {
        let mut work: Vec<(String, Option<Vec<String>>)> = Vec::new();
        for name in names {
            match self.kinds.get(&name) {
                Some(PlanKind::Task { .. }) => work.push((name, None)),
                Some(PlanKind::Scatter { step }) => {
                    let matrix = self.pipeline.nodes[*step].matrix.as_ref();
                    work.push((name, Some(matrix.map(|m| m.values.clone()).unwrap_or_default())));
                }
                Some(PlanKind::Gather { .. }) | None => {}
            }
        }
        let (graph, queue) = (self.graph.clone(), self.queue.clone());
        self.store.transaction(move |tx| {
            for (name, scatter) in work {
                let node = tx.exec(GetNode { graph: graph.clone(), node: name.clone() })?;
                if node.status != NodeStatus::Ready {
                    continue;
                }
                if let Some(values) = scatter {
                    scatter_now(tx, &graph, &name, values)?;
                    continue;
                }
                let item = new_item(&queue, &graph, &name, node.fires, Try::first(&node));
                match tx.exec(Enqueue { item }) {
                    // A retry of this firing is queued already (it carries another try).
                    Ok(_) | Err(spindle::Error::Conflict(_)) => {}
                    Err(error) => return Err(error),
                }
            }
            Ok(TxOutcome::Commit(()))
        })?;
        Ok(())
    }

    /// The run's queue's events from now on: `follow_cancels` reads them. Taken before the
    /// dispatcher enqueues or the pool claims anything, so no cancel of this drive's items
    /// goes unseen. (A cancel made while no runner drove the run needs nothing: a runner that
    /// opens alone recovers the run, and its ready nodes are enqueued afresh.)
    fn cancels_from_now(&self) -> Result<Subscription, CliError> {
        let stream = Stream::queue(&self.queue);
        let head = self.store.events().head(&stream)?;
        Ok(self.store.subscribe(stream, head)?)
    }

    /// Follows the run's queue for its items cancelled from outside the run (through the
    /// library: the command and the dashboard refuse it, see `names::owned_by_run`): the
    /// node a cancelled item was to run, still waiting for it at that firing, fails as a whole,
    /// so the run goes on by its error edges instead of waiting for an item that will never
    /// come. Items this drive is still to retry (their attempt's group still stopping) are
    /// tried again each round.
    fn follow_cancels(&self, mut events: Subscription) -> Result<(), CliError> {
        let mut stopping: Vec<String> = Vec::new();
        while !self.finished.load(Ordering::SeqCst) {
            let event = events.recv_timeout(Duration::from_millis(200))?;
            let retried = std::mem::take(&mut stopping);
            let cancelled = event.filter(|event| event.event_type == "cancelled");
            let fresh: Vec<String> = cancelled.iter().flat_map(cancelled_ids).collect();
            for id in retried.into_iter().chain(fresh) {
                if !self.fail_cancelled(&id)? {
                    stopping.push(id);
                }
            }
        }
        Ok(())
    }

    /// Fails the node of the cancelled item `id` if it still waits for that item: at the
    /// item's firing, ready or running, in a graph that runs, the item still cancelled (checked
    /// again in the transaction that fails the node). An attempt the item recorded (it was
    /// claimed when a `cancel_execution` took it) is ended first, as a next attempt would end
    /// it: false, and nothing done, while its group is still stopping.
    fn fail_cancelled(&self, id: &str) -> Result<bool, CliError> {
        let item = match self.store.queue().get(id) {
            Ok(item) => item,
            Err(spindle::Error::NotFound { .. }) => return Ok(true),
            Err(error) => return Err(error.into()),
        };
        let (Some(node), Some(firing)) = (item.node_id.clone(), firing_of(&item)) else {
            return Ok(true);
        };
        if !self.waits_for(&node, firing)? {
            return Ok(true);
        }
        if !attempt::end_previous(&item.payload) {
            return Ok(false);
        }
        let attempt = Try::of_item(&item).attempt();
        let ran = if attempt::recorded(&item.payload) { "while it ran" } else { "before it ran" };
        let (graph, id) = (self.graph.clone(), id.to_owned());
        let failed = self.store.transaction(move |tx| {
            let running = tx.exec(spindle::graph::Get { graph: graph.clone() })?.status;
            let state = tx.exec(GetNode { graph: graph.clone(), node: node.clone() })?;
            let item = tx.exec(spindle::queue::Get { id: id.clone() })?;
            if !waiting(&state, firing, running) || item.status != spindle::ItemStatus::Cancelled {
                return Ok(TxOutcome::Commit(None));
            }
            let what = format!("cancelled: its queue item {id} was cancelled {ran}");
            let error = failure(attempt, &what, "");
            tx.exec(spindle::graph::FailNode { graph, node: node.clone(), error })?;
            Ok(TxOutcome::Commit(Some(node)))
        })?;
        if let Some(node) = failed {
            self.report(&format!("FAILED {node} (its queue item was cancelled)"));
        }
        Ok(true)
    }

    /// Whether node `node` of the run still waits for an item of its firing `firing`.
    fn waits_for(&self, node: &str, firing: u32) -> Result<bool, CliError> {
        let running = self.store.graphs().get(&self.graph)?.status;
        let state = self.store.graphs().node(&self.graph, node)?;
        Ok(waiting(&state, firing, running))
    }

    /// The pool's handler: runs the item's node and settles the item itself, under its fence.
    /// An error or a panic ends the run (the item is then left to its lease).
    fn handle(&self, job: &Job) -> spindle::queue::Outcome {
        let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_item(job)));
        match handled {
            Ok(Ok(())) => {}
            Ok(Err(error)) => self.fail(error),
            Err(_) => self.fail(CliError::Internal("a worker's handler panicked".into())),
        }
        spindle::queue::Outcome::Settled
    }

    /// Runs the node of a claimed item and records how it ended; gives the item back if the run
    /// stopped before it started.
    fn run_item(&self, job: &Job) -> Handled {
        let stopped = self.stop.load(Ordering::SeqCst) || self.finished.load(Ordering::SeqCst);
        if stopped || job.stopping() {
            return self.release(job.claimed());
        }
        let claimed = job.claimed();
        let name = claimed.item.payload["node"].as_str().unwrap_or_default().to_owned();
        let (Some(task), Some(firing)) = (self.task(&name), firing_of(&claimed.item)) else {
            return self.drop_item(claimed);
        };
        if !attempt::end_previous(&claimed.item.payload) {
            self.report(&format!("wait   {name} (its last attempt is still stopping)"));
            return self.release(claimed);
        }
        match self.take_node(&name, firing)? {
            Taken::Run => {}
            Taken::Finished => return self.drop_item(claimed),
            Taken::Stale(now) => {
                self.report(&format!(
                    "drop   {name} (an item of its firing {firing}, not of its firing {now}: \
                     never run)"
                ));
                return self.drop_item(claimed);
            }
        }
        self.running.lock().insert(name.clone(), Instant::now());
        let attempt = Try::of(claimed).attempt();
        let ours = Ours { task: &task, attempt, firing };
        let result = self.execute(&task, job, attempt).and_then(|exit| match exit {
            Exit::LeaseLost => Ok(()),
            Exit::Abandoned => self.release(claimed),
            Exit::Success(tail) => self.succeed(claimed, &ours, tail),
            Exit::Failure(error) => self.failed(claimed, &ours, error),
        });
        self.running.lock().remove(&name);
        result
    }

    /// The task graph node `id` is, if it runs a command.
    fn task(&self, id: &str) -> Option<Task> {
        let Some(PlanKind::Task { step, value }) = self.kinds.get(id) else { return None };
        let step = self.pipeline.nodes.get(*step)?.clone();
        Some(Task { id: id.to_owned(), step, value: value.clone() })
    }

    /// The environment of a task's command: the pipeline's and the node's `env`, then what
    /// spindle sets (the run, the node, the attempt, its matrix value, the outputs directory
    /// and each direct predecessor's output file), each predecessor's file written first if
    /// missing.
    fn environment(&self, task: &Task, attempt: u32) -> Result<Vec<(String, String)>, CliError> {
        let mut env: Vec<(String, String)> = task.step.env.clone().into_iter().collect();
        env.push(("SPINDLE_RUN".into(), self.graph.clone()));
        env.push(("SPINDLE_NODE".into(), task.id.clone()));
        env.push(("SPINDLE_ATTEMPT".into(), attempt.to_string()));
        if let (Some(value), Some(matrix)) = (&task.value, &task.step.matrix) {
            let var = format!("SPINDLE_MATRIX_{}", crate::pipeline::env_word(&matrix.var));
            env.push((var, value.clone()));
            env.push(("SPINDLE_MATRIX".into(), value.clone()));
        }
        env.push(("SPINDLE_OUTPUTS".into(), self.outputs.dir().display().to_string()));
        for input in self.pipeline.inputs(&task.step) {
            self.outputs.ensure(&self.store, &self.graph, &input.node)?;
            env.push((input.var, self.outputs.path(&input.node).display().to_string()));
        }
        Ok(env)
    }

    /// Where a task's command runs: its `cwd` read from the pipeline file's directory, if it
    /// has one.
    fn cwd(&self, task: &Task) -> Option<PathBuf> {
        task.step.cwd.as_ref().map(|cwd| self.pipeline.dir.join(cwd))
    }

    /// Takes node `name` for an item of its firing `firing`, in one transaction: a ready node
    /// of that firing is started; a running one of that firing is the item's already (the
    /// firing's next try, or a claim again after a lease lapsed: one live item per firing, the
    /// dedupe key). An item of another firing is stale (requeued from an earlier round's dead
    /// letters, say): it never runs, whatever the node's status.
    fn take_node(&self, name: &str, firing: u32) -> Result<Taken, CliError> {
        let (graph, node) = (self.graph.clone(), name.to_owned());
        let taken = self.store.transaction(move |tx| {
            let state = tx.exec(GetNode { graph: graph.clone(), node: node.clone() })?;
            let status = tx.exec(spindle::graph::Get { graph: graph.clone() })?.status;
            let taken = match state.status {
                _ if state.fires != firing => Taken::Stale(state.fires),
                _ if status != GraphStatus::Running => Taken::Finished,
                NodeStatus::Ready => {
                    tx.exec(StartNode { graph, node })?;
                    Taken::Run
                }
                NodeStatus::Running => Taken::Run,
                _ => Taken::Finished,
            };
            Ok(TxOutcome::Commit(taken))
        })?;
        Ok(taken)
    }

    /// Completes an item whose node no longer needs running (finished, or its run ended).
    fn drop_item(&self, job: &Claimed) -> Handled {
        let result = json!({ "skipped": true });
        match self.store.queue().complete(&job.item.id, job.fence, result) {
            Ok(()) | Err(spindle::Error::LeaseLost(_)) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Gives an item back untouched, its claim refunded: the run stopped before it ran.
    fn release(&self, job: &Claimed) -> Handled {
        match self.store.queue().release(&job.item.id, job.fence) {
            Ok(()) | Err(spindle::Error::LeaseLost(_)) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Runs the command (the pool renews the lease meanwhile) until it exits, times out, loses
    /// its lease or is killed.
    fn execute(&self, task: &Task, job: &Job, attempt: u32) -> Result<Exit, CliError> {
        let tail = Arc::new(Mutex::new(Captured::default()));
        let live = LiveLog::new(&self.store, &self.graph, &task.id, attempt, &tail);
        let mut child = match self.spawn_command(task, attempt)? {
            Ok(child) => child,
            Err(what) => {
                live.ended(&what)?;
                return Ok(Exit::Failure(failure(attempt, &what, "")));
            }
        };
        let pid = child.id();
        let (drained_tx, drained) = crossbeam_channel::unbounded::<()>();
        let watched = collect_output(&mut child, &tail, &drained_tx).and_then(|readers| {
            // A thread waits for the shell without reaping it, so its exit is seen at once and
            // its pid (the group's id) cannot be reused before the group is killed.
            let (exited_tx, exited) = crossbeam_channel::bounded(1);
            thread::Builder::new()
                .spawn(move || {
                    let _ = exited_tx.send(wait_unreaped(pid));
                })
                .map(|_| (readers, exited))
                .map_err(|e| CliError::Internal(format!("cannot start a thread: {e}")))
        });
        drop(drained_tx);
        let supervised = match &watched {
            Ok((_, exited)) => match self.record_attempt(job.claimed(), &mut child) {
                Ok(true) => self.supervise(exited, &task.step, job, &live),
                Ok(false) => Ok(Supervised::LeaseLost),
                Err(error) => Err(error),
            },
            Err(_) => Ok(Supervised::Killed),
        };
        // Whatever happened, nothing of the command outlives it: a background child would
        // hold its output open and run on unsupervised. Then the shell is reaped.
        kill_group(pid);
        let _ = child.wait();
        let (readers, _) = watched?;
        // The output ends when the pipes close; a process that left the group may hold them:
        // wait at most a fifth of the lease for it.
        let drain_until = Instant::now() + self.drain_wait();
        for _ in 0..readers {
            if drained.recv_deadline(drain_until).is_err() {
                break;
            }
        }
        let tail = tail.lock().text();
        let supervised = supervised?;
        live.ended(&supervised.to_string())?;
        let fail = |what: String| Exit::Failure(failure(attempt, &what, &tail));
        Ok(match supervised {
            Supervised::Exited(0) => Exit::Success(tail.clone()),
            Supervised::LeaseLost => Exit::LeaseLost,
            Supervised::Killed => Exit::Abandoned,
            other => fail(other.to_string()),
        })
    }

    /// Starts the command of an attempt (its guard, that is: see `attempt.rs`); `Err` inside
    /// says why it could not start in its `cwd` (the attempt fails).
    fn spawn_command(&self, task: &Task, attempt: u32) -> Result<Result<Child, String>, CliError> {
        let env = self.environment(task, attempt)?;
        let cwd = self.cwd(task);
        if let Some(cwd) = cwd.as_ref().filter(|cwd| !cwd.is_dir()) {
            return Ok(Err(format!("its cwd {} is not a directory", cwd.display())));
        }
        match attempt::spawn(&task.step.run, &env, cwd.as_deref()) {
            Ok(child) => Ok(Ok(child)),
            Err(attempt::SpawnError::Cwd(error)) => {
                Ok(Err(format!("cannot run in its cwd: {error}")))
            }
            Err(attempt::SpawnError::Other(error)) => Err(error),
        }
    }

    /// Records the attempt's process group with the item, under its fence, then lets the
    /// guard start the command: whoever runs the node next can make sure this attempt is gone.
    /// False when the lease was lost first (the command never starts).
    fn record_attempt(&self, job: &Claimed, guard: &mut Child) -> Result<bool, CliError> {
        let payload = attempt::with_group(&job.item.payload, guard, &hostname())?;
        match self.store.queue().checkpoint(&job.item.id, job.fence, payload) {
            Ok(()) => {}
            Err(spindle::Error::LeaseLost(_)) => return Ok(false),
            Err(error) => return Err(error.into()),
        }
        attempt::go(guard);
        Ok(true)
    }

    /// Waits for the command until it exits, times out, loses its lease (the pool could not
    /// renew it) or is killed (the caller then kills its process group).
    fn supervise(
        &self,
        exited: &crossbeam_channel::Receiver<Result<Supervised, String>>,
        step: &Step,
        job: &Job,
        live: &LiveLog,
    ) -> Result<Supervised, CliError> {
        let started = Instant::now();
        let timeout = step.timeout_s.map(Duration::from_secs);
        loop {
            live.flush_if_due()?;
            match exited.recv_timeout(Duration::from_millis(50)) {
                Ok(status) => return status.map_err(CliError::Internal),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(CliError::Internal("lost the command's exit status".into()));
                }
            }
            if self.kill.load(Ordering::SeqCst) {
                return Ok(Supervised::Killed);
            }
            if timeout.is_some_and(|timeout| started.elapsed() >= timeout) {
                return Ok(Supervised::TimedOut(step.timeout_s.unwrap_or(0)));
            }
            if job.lease_lost() {
                return Ok(Supervised::LeaseLost);
            }
        }
    }

    /// How long the output of an ended command may take to close: a fifth of the lease.
    fn drain_wait(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.lease_ms / 5).unwrap_or(1).max(1))
    }

    /// Completes the item and the node in one transaction, then writes the node's outputs
    /// file.
    fn succeed(&self, job: &Claimed, ours: &Ours<'_>, tail: String) -> Handled {
        let text = tail.clone();
        let Ours { task, attempt, firing } = *ours;
        let output = NodeOutput::ok(json!({ "attempt": attempt, "output": tail }));
        let (graph, node) = (self.graph.clone(), task.id.clone());
        let (id, fence) = (job.item.id.clone(), job.fence);
        let done = self.store.transaction(move |tx| {
            tx.exec(Complete { id, fence, result: json!({ "ok": true }) })?;
            still_ours(tx, &graph, &node, firing)?;
            tx.exec(spindle::graph::CompleteNode { graph, node, output: Some(output) })?;
            Ok(TxOutcome::Commit(()))
        });
        let committed = done.is_ok();
        self.settled(done, job, &format!("ok     {} (attempt {attempt})", task.id))?;
        if committed { self.outputs.write(&task.id, &text) } else { Ok(()) }
    }

    /// Queues the next try of the same firing after a backoff, closing this item in the same
    /// transaction; or, with the retries spent, fails the item and the node in one transaction.
    fn failed(&self, job: &Claimed, ours: &Ours<'_>, error: String) -> Handled {
        let Ours { task, attempt, firing } = *ours;
        let (id, fence) = (job.item.id.clone(), job.fence);
        let (graph, node) = (self.graph.clone(), task.id.clone());
        let this = Try::of(job);
        if this.of_firing <= task.step.retries {
            let next = new_item(&self.queue, &self.graph, &task.id, firing, this.next());
            let delay_ms = Backoff::new(1_000, 30_000).delay_ms(attempt);
            let done = self.store.transaction(move |tx| {
                tx.exec(Complete { id, fence, result: json!({ "failed": error }) })?;
                still_ours(tx, &graph, &node, firing)?;
                let item = next.run_at_ms(tx.now_ms().saturating_add(delay_ms));
                tx.exec(Enqueue { item })?;
                Ok(TxOutcome::Commit(()))
            });
            return self.settled(done, job, &format!("retry  {} (attempt {attempt})", task.id));
        }
        let done = self.store.transaction(move |tx| {
            tx.exec(Fail { id, fence, error: error.clone(), retryable: false })?;
            still_ours(tx, &graph, &node, firing)?;
            tx.exec(spindle::graph::FailNode { graph, node, error })?;
            Ok(TxOutcome::Commit(()))
        });
        self.settled(done, job, &format!("FAILED {} (attempt {attempt})", task.id))
    }

    /// Reports a committed outcome. A lost lease or an ended graph means someone else
    /// decided: only the item is closed.
    fn settled(&self, done: spindle::Result<()>, job: &Claimed, line: &str) -> Handled {
        match done {
            Ok(()) => {
                self.report(line);
                Ok(())
            }
            Err(spindle::Error::LeaseLost(_)) => {
                let node = job.item.payload["node"].as_str().unwrap_or("?");
                self.report(&format!("lost   {node} (its lease lapsed: it runs again)"));
                Ok(())
            }
            Err(spindle::Error::Conflict(_)) => self.drop_item(job),
            Err(error) => Err(error.into()),
        }
    }

    /// One line per finished attempt: above the bar on a terminal, plain otherwise; none with
    /// `--quiet`. Its first word (ok, retry, FAILED, ..) is coloured.
    fn report(&self, what: &str) {
        if self.out.quiet {
            return;
        }
        let (word, rest) = what.split_once(' ').unwrap_or((what, ""));
        let what = format!("{} {rest}", self.out.paint_err(word, word));
        let line = format!("[{:>7.1}s] {what}", self.began.elapsed().as_secs_f64());
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Shows progress until the graph ends, or the run stops and nothing runs any more; stops
    /// the pool's claiming once the run stops. A pool that stopped on its own (a store error)
    /// ends the run.
    fn watch(&self, pool: &WorkerPool) -> Result<Ending, CliError> {
        let mut claiming = true;
        loop {
            if let Some(error) = self.failure.lock().take() {
                self.end(Ending::Failed);
                return Err(error);
            }
            if claiming && pool.is_finished() {
                self.end(Ending::Failed);
                return Err(CliError::Internal("the worker pool stopped".into()));
            }
            let graph = self.store.graphs().get(&self.graph)?;
            self.show(&graph);
            match graph.status {
                GraphStatus::Complete => return Ok(self.end(Ending::Complete)),
                GraphStatus::Failed | GraphStatus::Cancelled => {
                    // Nothing a sibling still runs can change the outcome.
                    self.kill.store(true, Ordering::SeqCst);
                    return Ok(self.end(Ending::Failed));
                }
                // Pending, running, or a status a later library adds: drive it on.
                _ => {}
            }
            if self.stop.load(Ordering::SeqCst) {
                if claiming {
                    pool.stop();
                    claiming = false;
                }
                if self.running.lock().is_empty() {
                    return Ok(self.end(Ending::Interrupted));
                }
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn end(&self, ending: Ending) -> Ending {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        ending
    }

    fn show(&self, graph: &Graph) {
        let Some(bar) = &self.bar else { return };
        let counts = graph.counts;
        bar.set_position(counts.complete + counts.failed + counts.skipped);
        let running: Vec<String> = self.running.lock().keys().take(4).cloned().collect();
        bar.set_message(format!(
            "done {} running {} failed {} skipped {}  {}",
            counts.complete,
            counts.running,
            counts.failed,
            counts.skipped,
            running.join(" ")
        ));
    }

    /// The table of every node: status, attempts, duration.
    fn summary(&self, out: &Output) -> Result<(), CliError> {
        let graph = self.store.graphs().get(&self.graph)?;
        let nodes = self.store.graphs().nodes(&self.graph)?;
        let rows: Vec<Value> = nodes.iter().map(summary_row).collect();
        if out.json {
            out.print_json(&json!({ "run": graph.id, "status": graph.status, "nodes": rows }));
            return Ok(());
        }
        if out.quiet {
            return Ok(());
        }
        println!("{:<32} {:<9} {:>8} {:>10}", "NODE", "STATUS", "ATTEMPTS", "DURATION");
        for row in &rows {
            let attempts = row["attempts"].as_u64().map_or("-".into(), |n| n.to_string());
            let duration = row["duration_ms"].as_i64().map_or("-".into(), human_duration);
            let status = row["status"].as_str().unwrap_or("?");
            let status = out.paint(status, &format!("{status:<9}"));
            let node = row["node"].as_str().unwrap_or("?");
            println!("{node:<32} {status} {attempts:>8} {duration:>10}");
        }
        let status = graph.status.as_str();
        let took = graph.started_at_ms.zip(graph.finished_at_ms).map(|(s, f)| f - s);
        let took = took.map_or_else(String::new, |ms| format!(" in {}", human_duration(ms)));
        println!("run {} {}{took}", graph.id, out.paint(status, status));
        if graph.status == GraphStatus::Failed {
            println!(
                "  see what failed: spindle logs {}   run it again: spindle retry {}",
                graph.id, graph.id
            );
        }
        Ok(())
    }
}

/// The item that runs try `this` of a node's firing `fires`: one live item per firing (the
/// dedupe key), whichever try it carries.
fn new_item(queue: &str, graph: &str, name: &str, fires: u32, this: Try) -> NewItem {
    let payload = json!({ "node": name, "try": this.of_firing, "before": this.before });
    NewItem::new(queue, payload)
        .max_attempts(CLAIMS_MAX)
        .dedupe_key(format!("{name}#{fires}"))
        .execution_id(graph)
        .node_id(name)
}

/// Which try of its node an item runs: the try of this firing (from 1: what `retries`
/// bounds) after the attempts of earlier firings (a `retry` of the run goes on counting).
#[derive(Debug, Clone, Copy)]
struct Try {
    of_firing: u32,
    before: u32,
}

impl Try {
    /// The first try of a node's newest firing, counting on from its last attempt when it ran
    /// before.
    fn first(node: &spindle::Node) -> Self {
        let before = if node.fires > 1 { attempts_of(node).unwrap_or(0) } else { 0 };
        Try { of_firing: 1, before: u32::try_from(before).unwrap_or(u32::MAX) }
    }

    /// The try a claimed item carries.
    fn of(job: &Claimed) -> Self {
        Self::of_item(&job.item)
    }

    /// The try an item carries.
    fn of_item(item: &spindle::QueueItem) -> Self {
        let field = |name: &str| {
            let value = item.payload[name].as_u64().unwrap_or(0);
            u32::try_from(value).unwrap_or(u32::MAX)
        };
        Try { of_firing: field("try").max(1), before: field("before") }
    }

    fn next(self) -> Self {
        Try { of_firing: self.of_firing.saturating_add(1), ..self }
    }

    /// The attempt number people see (`SPINDLE_ATTEMPT`, the summary, the logs).
    fn attempt(self) -> u32 {
        self.before.saturating_add(self.of_firing)
    }
}

/// Runs a matrix node's ready scatter at once: one token per value, coloured by the value,
/// which only that value's instance edge takes.
fn scatter_now(
    tx: &mut Tx<'_>,
    graph: &str,
    node: &str,
    values: Vec<String>,
) -> spindle::Result<()> {
    let (graph, node) = (graph.to_owned(), node.to_owned());
    tx.exec(StartNode { graph: graph.clone(), node: node.clone() })?;
    let tokens = values.into_iter().map(|value| Token::named(value, None)).collect();
    let output = Some(NodeOutput::Many { tokens });
    tx.exec(spindle::graph::CompleteNode { graph, node, output })?;
    Ok(())
}

/// Checks, in the transaction that settles an attempt, that `node` is still at the firing
/// `firing` the attempt ran for (`Conflict` otherwise: the item is then dropped, and the
/// node's newer firing decides), and starts it again if a recovery set it back to ready while
/// this worker ran it (a runner that opened the store alone recovered the run): the item's
/// holder still decides how the node ended.
fn still_ours(tx: &mut Tx<'_>, graph: &str, node: &str, firing: u32) -> spindle::Result<()> {
    let (graph, node) = (graph.to_owned(), node.to_owned());
    let state = tx.exec(GetNode { graph: graph.clone(), node: node.clone() })?;
    if state.fires != firing {
        return Err(spindle::Error::Conflict(format!(
            "node {node} is at its firing {}, not {firing}",
            state.fires
        )));
    }
    if state.status == NodeStatus::Ready {
        tx.exec(StartNode { graph, node })?;
    }
    Ok(())
}

/// Whether a node at `state` waits for an item of its firing `firing` in a graph whose status
/// is `graph`: ready or running at that firing, in a running graph.
fn waiting(state: &spindle::Node, firing: u32, graph: GraphStatus) -> bool {
    matches!(state.status, NodeStatus::Ready | NodeStatus::Running)
        && state.fires == firing
        && graph == GraphStatus::Running
}

/// The ids of the items a `cancelled` event of a queue names.
fn cancelled_ids(event: &spindle::Event) -> Vec<String> {
    let entries = event.payload["items"].as_array().into_iter().flatten();
    entries.filter_map(|entry| entry["id"].as_str().map(str::to_owned)).collect()
}

/// Cancels the items a run that ended leaves (ready nodes of a failed run were enqueued but
/// will never run), in one transaction that first checks the run is still over: a `retry`
/// that reopened it meanwhile keeps its items.
fn cancel_leftovers(store: &Store, graph: &str) -> Result<(), CliError> {
    let graph = graph.to_owned();
    store.transaction(move |tx| {
        let status = tx.exec(spindle::graph::Get { graph: graph.clone() })?.status;
        if status.is_terminal() {
            let execution_id = graph;
            while tx.exec(CancelExecution { execution_id: execution_id.clone() })? > 0 {}
        }
        Ok(TxOutcome::Commit(()))
    })?;
    Ok(())
}

/// The firing of its node an item was enqueued for: its dedupe key is `NODE#FIRING` (see
/// [`new_item`]). `None` for an item the run did not make.
fn firing_of(item: &spindle::QueueItem) -> Option<u32> {
    item.dedupe_key.as_deref()?.rsplit_once('#')?.1.parse().ok()
}

/// Whether a claimed item's node is its to run.
enum Taken {
    /// The node is at the item's firing, ready (now started) or running: run it.
    Run,
    /// The node finished, or its graph ended: nothing to run.
    Finished,
    /// The node is at another firing (this one): the item is stale.
    Stale(u32),
}

/// The attempt a handler runs: the task, the attempt's number, the node's firing.
#[derive(Clone, Copy)]
struct Ours<'a> {
    task: &'a Task,
    attempt: u32,
    firing: u32,
}

/// What a handler's step returns.
type Handled = Result<(), CliError>;

/// How many attempts a finished node took, read back from its output or error.
pub fn attempts_of(node: &spindle::Node) -> Option<u64> {
    let from_output = output_field(node, "attempt").and_then(Value::as_u64);
    let from_error = || {
        let rest = node.error.as_deref()?.strip_prefix("attempt ")?;
        rest.split(':').next()?.parse::<u64>().ok()
    };
    from_output.or_else(from_error)
}

/// A node's row in the summary.
fn summary_row(node: &spindle::Node) -> Value {
    let attempts = attempts_of(node);
    let duration_ms = node.finished_at_ms.zip(node.started_at_ms).map(|(f, s)| f - s);
    json!({ "node": node.id, "status": node.status, "attempts": attempts,
            "duration_ms": duration_ms, "error": node.error })
}

/// How a command ended, as its handler sees it.
enum Exit {
    Success(String),
    Failure(String),
    LeaseLost,
    Abandoned,
}

enum Supervised {
    Exited(i32),
    Signalled,
    TimedOut(u64),
    LeaseLost,
    Killed,
}

impl std::fmt::Display for Supervised {
    /// How the attempt ended, as its error and the live log say it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Supervised::Exited(code) => write!(f, "exit {code}"),
            Supervised::Signalled => f.write_str("killed by a signal"),
            Supervised::TimedOut(seconds) => write!(f, "timed out after {seconds} s"),
            Supervised::LeaseLost => f.write_str("stopped: its lease was lost"),
            Supervised::Killed => f.write_str("stopped: the run was interrupted"),
        }
    }
}

/// The error a failed attempt records: its number (read back by the summary and the logs),
/// what happened, and the kept output (its last 64 KiB), which `spindle logs` prints.
fn failure(attempt: u32, what: &str, tail: &str) -> String {
    format!("attempt {attempt}: {what}\n{tail}")
}

/// Starts a thread per output pipe that keeps its tail and says on `drained` when the pipe
/// closed; returns how many were started.
fn collect_output(
    child: &mut Child,
    tail: &Arc<Mutex<Captured>>,
    drained: &crossbeam_channel::Sender<()>,
) -> Result<usize, CliError> {
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    let mut readers = 0;
    for mut stream in streams.into_iter().flatten() {
        let (tail, drained) = (Arc::clone(tail), drained.clone());
        let reader = move || {
            let mut buffer = [0_u8; 8192];
            while let Ok(read) = stream.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                tail.lock().push(&buffer[..read]);
            }
            let _ = drained.send(());
        };
        thread::Builder::new()
            .spawn(reader)
            .map_err(|e| CliError::Internal(format!("cannot start a thread: {e}")))?;
        readers += 1;
    }
    Ok(readers)
}

/// Waits until the process `pid` exits, leaving it to be reaped (its pid stays taken).
fn wait_unreaped(pid: u32) -> Result<Supervised, String> {
    let pid = i32::try_from(pid).map_err(|e| e.to_string())?;
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(Pid::from_raw(pid)), flags).map_err(|e| e.to_string())? {
        WaitStatus::Exited(_, code) => Ok(Supervised::Exited(code)),
        _ => Ok(Supervised::Signalled),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname").map_or_else(|_| "host".into(), |h| h.trim().to_owned())
}

fn new_bar(len: usize) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len as u64);
    let style = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// Ctrl-C once: claim nothing more (`Run::watch` stops the pool) and let running commands
/// finish. Twice: kill them. The run stays resumable either way.
fn install_interrupts(run: &Arc<Run>) {
    let run = Arc::clone(run);
    let _ = ctrlc::set_handler(move || {
        if run.interrupts.fetch_add(1, Ordering::SeqCst) == 0 {
            run.stop.store(true, Ordering::SeqCst);
            eprintln!(
                "stopping: running nodes finish (Ctrl-C again kills them); run again to resume"
            );
        } else {
            run.kill.store(true, Ordering::SeqCst);
        }
    });
}
