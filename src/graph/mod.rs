//! The graph engine: a Petri net of nodes and coloured tokens that always finishes.
//!
//! A graph holds nodes (a [`NodeSpec`] and a [`JoinType`]) and edges (an optional condition on
//! a token's colour). Starting a graph makes its roots (nodes without an inbound edge other
//! than a self-loop) ready. A caller runs a ready node (`start_node`, then `complete_node` or
//! `fail_node`); its tokens (the output's, one `ok` token when there is none, or an `error`
//! token carrying the message) are delivered on every outbound edge whose condition matches,
//! and a target whose join rule is met becomes ready in turn. Gather nodes run inside the
//! engine; a SubGraph node runs a child graph and finishes with it.
//!
//! The rules that make a graph finish, which the seed lacked:
//! - a pending node that can no longer be enabled (an inbound edge of an `All` join, or every
//!   inbound edge of an `Any` join, is empty and its source has finished) is `skipped`, and
//!   skips propagate; a token that reaches it later (a loop) still enables it;
//! - an error token that no edge accepts fails the graph;
//! - a graph with nothing ready or running completes (nodes still pending then can never run
//!   and are skipped); the check reads a counter, so each step costs O(out-degree);
//! - a finished or cancelled graph refuses further changes (`Conflict`);
//! - a node fired again by a loop more than `Limits::loop_refires_max` times fails the graph.
//!
//! Tokens are never consumed: a node's inputs are every token delivered to it, in arrival
//! order. A finished node fires again (a loop) for a token on a self-loop, for a new round on
//! an edge that already held a token, and, for an `Any` join, for a first token that closes a
//! cycle through it; a late sibling branch does not run an `Any` join twice, and an edge added
//! after a node ran brings it inputs, not a rerun. A Gather fires only through an edge, and
//! its output is bounded like any payload (past it, the graph fails). Every change appends an
//! event to `Stream::graph(id)` ([`GraphEvent`]). Each command is one operation, so one
//! transaction; a graph that ends hands its end to its parent's SubGraph node in the same
//! transaction, and one that fails or is cancelled cancels its unfinished children.
//!
//! Ops live in `ops.rs`, the firing rule in `net.rs`, SQL in `sql.rs`; the facade is
//! [`Graphs`], reached with `store.graphs()`.

mod net;
mod ops;
mod sql;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::events::Event;
use crate::error::{Error, Result};
use crate::page::Page;
use crate::store::Store;

pub use ops::{
    AddEdge, AddNode, Audit, AuditCounts, Cancel, Children, CompleteNode, CountByStatus, Create,
    Edges, ExpireOverdue, FailNode, Find, Get, GetNode, Inputs, List, Nodes, Recover, Reopen,
    SetJoin, SetTimeout, Start, StartNode,
};
pub(crate) use ops::{ExpireDeadlines, RunningTenants};

/// A graph's id (a UUID v7).
pub type GraphId = String;

/// A node's id: the caller's, unique within its graph, or a generated UUID v7.
pub type NodeId = String;

/// The colour of a token; edge conditions route on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TokenColor {
    /// Success: what a completed node sends by default.
    #[default]
    Ok,
    /// Failure: what a failed node sends.
    Error,
    /// A colour of the caller's choosing.
    Named {
        /// The colour's name.
        name: String,
    },
}

impl TokenColor {
    /// A named colour.
    pub fn named(name: impl Into<String>) -> Self {
        TokenColor::Named { name: name.into() }
    }
}

/// A token: a colour and, optionally, data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Token {
    /// What edges route on.
    #[serde(default)]
    pub color: TokenColor,
    /// What the token carries.
    #[serde(default)]
    pub data: Option<Value>,
}

impl Token {
    /// An `ok` token without data.
    pub fn ok() -> Self {
        Self::default()
    }

    /// An `ok` token carrying `data`.
    pub fn ok_data(data: Value) -> Self {
        Self { color: TokenColor::Ok, data: Some(data) }
    }

    /// An `error` token carrying `{"message": message}`.
    pub fn error(message: &str) -> Self {
        Self { color: TokenColor::Error, data: Some(serde_json::json!({ "message": message })) }
    }

    /// A token of a named colour carrying `data`.
    pub fn named(name: impl Into<String>, data: Option<Value>) -> Self {
        Self { color: TokenColor::named(name), data }
    }
}

/// What a node produced: one token or many.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum NodeOutput {
    /// One token.
    Single(Token),
    /// Several tokens, each delivered on every matching edge, in order. None delivers nothing.
    Many {
        /// The tokens.
        tokens: Vec<Token>,
    },
}

impl NodeOutput {
    /// One `ok` token carrying `data`.
    pub fn ok(data: Value) -> Self {
        NodeOutput::Single(Token::ok_data(data))
    }

    /// The tokens, in order.
    pub fn tokens(&self) -> Vec<&Token> {
        match self {
            NodeOutput::Single(token) => vec![token],
            NodeOutput::Many { tokens } => tokens.iter().collect(),
        }
    }
}

/// Which of its inputs a Gather node puts in its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GatherStrategy {
    /// Every token delivered to it.
    All,
    /// The first `n` tokens, in arrival order.
    First {
        /// How many.
        n: usize,
    },
}

/// What a node is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum NodeSpec {
    /// Work a caller does: it starts, then completes or fails the node.
    Task {
        /// What the caller needs to do it.
        data: Value,
    },
    /// Like a task, expected to produce many tokens.
    Scatter {
        /// What the caller needs to do it.
        data: Value,
    },
    /// Run by the engine when enabled through its edges: its output is its inputs (`Many`),
    /// as the strategy says, at most `Limits::payload_bytes_max` encoded (past it the graph
    /// fails). A Gather without inbound edges never runs (it is skipped).
    Gather {
        /// Which inputs.
        strategy: GatherStrategy,
    },
    /// Runs a child graph (made with `create_child` of this graph): the child starts when the
    /// node starts, and the node completes with `{"child_graph_id": ..}` or fails with the
    /// child's error when the child finishes.
    SubGraph {
        /// The child graph.
        graph_id: GraphId,
    },
}

impl NodeSpec {
    /// A task carrying `data`.
    pub fn task(data: Value) -> Self {
        NodeSpec::Task { data }
    }

    /// The spec's kind as written in events: `task`, `scatter`, `gather` or `sub_graph`.
    pub fn kind(&self) -> &'static str {
        match self {
            NodeSpec::Task { .. } => "task",
            NodeSpec::Scatter { .. } => "scatter",
            NodeSpec::Gather { .. } => "gather",
            NodeSpec::SubGraph { .. } => "sub_graph",
        }
    }
}

/// When a node with inbound edges is enabled. Self-loops are not counted: a token on a
/// self-loop always fires its node again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JoinType {
    /// Every inbound edge holds a token.
    #[default]
    All,
    /// At least one inbound edge holds a token.
    Any,
}

impl JoinType {
    /// The join as stored: `all` or `any`.
    pub fn as_str(self) -> &'static str {
        match self {
            JoinType::All => "all",
            JoinType::Any => "any",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self> {
        match text {
            "all" => Ok(JoinType::All),
            "any" => Ok(JoinType::Any),
            other => Err(Error::Corrupt(format!("unknown join type {other:?}"))),
        }
    }
}

/// Where a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NodeStatus {
    /// Waiting for its inputs.
    Pending,
    /// Enabled: a caller may start it.
    Ready,
    /// Started by a caller.
    Running,
    /// Finished with an output.
    Complete,
    /// Finished with an error.
    Failed,
    /// Can no longer be enabled (or the graph finished without it).
    Skipped,
}

impl NodeStatus {
    /// The status as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Pending => "pending",
            NodeStatus::Ready => "ready",
            NodeStatus::Running => "running",
            NodeStatus::Complete => "complete",
            NodeStatus::Failed => "failed",
            NodeStatus::Skipped => "skipped",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self> {
        match text {
            "pending" => Ok(NodeStatus::Pending),
            "ready" => Ok(NodeStatus::Ready),
            "running" => Ok(NodeStatus::Running),
            "complete" => Ok(NodeStatus::Complete),
            "failed" => Ok(NodeStatus::Failed),
            "skipped" => Ok(NodeStatus::Skipped),
            other => Err(Error::Corrupt(format!("unknown node status {other:?}"))),
        }
    }
}

/// Where a graph is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GraphStatus {
    /// Being built; not started.
    Pending,
    /// Started: nodes fire.
    Running,
    /// Finished: nothing more could fire, and no unhandled error.
    Complete,
    /// Finished by an error no edge accepted, a loop limit, or its deadline.
    Failed,
    /// Cancelled by a caller (or with its parent).
    Cancelled,
}

impl GraphStatus {
    /// The status as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            GraphStatus::Pending => "pending",
            GraphStatus::Running => "running",
            GraphStatus::Complete => "complete",
            GraphStatus::Failed => "failed",
            GraphStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the graph has finished (complete, failed or cancelled).
    pub fn is_terminal(self) -> bool {
        matches!(self, GraphStatus::Complete | GraphStatus::Failed | GraphStatus::Cancelled)
    }

    pub(crate) fn parse(text: &str) -> Result<Self> {
        match text {
            "pending" => Ok(GraphStatus::Pending),
            "running" => Ok(GraphStatus::Running),
            "complete" => Ok(GraphStatus::Complete),
            "failed" => Ok(GraphStatus::Failed),
            "cancelled" => Ok(GraphStatus::Cancelled),
            other => Err(Error::Corrupt(format!("unknown graph status {other:?}"))),
        }
    }
}

/// How many of a graph's nodes are in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeCounts {
    /// Waiting for inputs.
    pub pending: u64,
    /// Enabled, not started.
    pub ready: u64,
    /// Started.
    pub running: u64,
    /// Finished with an output.
    pub complete: u64,
    /// Finished with an error.
    pub failed: u64,
    /// Skipped.
    pub skipped: u64,
}

/// Which graphs [`Graphs::find`] and [`Graphs::count_by_status`] read; the default is every
/// graph, oldest first. `#[non_exhaustive]`: start from `GraphFilter::default()` and chain the
/// setters, `GraphFilter::default().status(GraphStatus::Running).metadata("kind", "run")`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct GraphFilter {
    /// Only graphs with this status.
    pub status: Option<GraphStatus>,
    /// Only graphs whose metadata has each of these top-level keys (letters, digits, `_` and
    /// `-`, at most 64) with exactly this scalar value (a string, number, boolean or null, of
    /// the same JSON type); at most 16 of them.
    pub metadata: Vec<(String, Value)>,
    /// Only graphs that are not a SubGraph node's child.
    pub roots_only: bool,
    /// Newest first (descending id) instead of oldest first.
    pub newest_first: bool,
}

impl GraphFilter {
    /// Only graphs with `status`.
    #[must_use]
    pub fn status(mut self, status: GraphStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only graphs whose metadata has the top-level `key` with exactly this scalar `value`
    /// (added to the pairs already given; see [`metadata`](#structfield.metadata)).
    #[must_use]
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// Only graphs that are not a SubGraph node's child (`true`), or every graph.
    #[must_use]
    pub fn roots_only(mut self, roots_only: bool) -> Self {
        self.roots_only = roots_only;
        self
    }

    /// Newest first (`true`) or oldest first.
    #[must_use]
    pub fn newest_first(mut self, newest_first: bool) -> Self {
        self.newest_first = newest_first;
        self
    }
}

/// A graph as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Graph {
    /// Its id.
    pub id: GraphId,
    /// The caller's metadata.
    pub metadata: Value,
    /// Where it is.
    pub status: GraphStatus,
    /// The graph it is a child of, if any.
    pub parent_graph_id: Option<GraphId>,
    /// The SubGraph node of the parent that runs it, once one names it.
    pub parent_node_id: Option<NodeId>,
    /// How many nodes it has.
    pub node_count: u64,
    /// How many edges it has.
    pub edge_count: u64,
    /// Its nodes by status.
    pub counts: NodeCounts,
    /// How long it may run once started, if limited.
    pub timeout_ms: Option<i64>,
    /// When it fails for running too long (set when it starts with a timeout).
    pub deadline_at_ms: Option<i64>,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// The node whose error failed it, if one did.
    pub failed_node_id: Option<NodeId>,
    /// When it was created.
    pub created_at_ms: i64,
    /// When it last changed.
    pub updated_at_ms: i64,
    /// When it started.
    pub started_at_ms: Option<i64>,
    /// When it finished.
    pub finished_at_ms: Option<i64>,
}

/// A node as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Node {
    /// Its id, unique within the graph.
    pub id: NodeId,
    /// Its graph.
    pub graph_id: GraphId,
    /// What it is.
    pub spec: NodeSpec,
    /// When it is enabled.
    pub join: JoinType,
    /// Where it is.
    pub status: NodeStatus,
    /// Its latest output.
    pub output: Option<NodeOutput>,
    /// Its latest error.
    pub error: Option<String>,
    /// How many times it was made ready (or run, for a Gather); more than once only in loops.
    pub fires: u32,
    /// When it was added.
    pub created_at_ms: i64,
    /// When it last changed.
    pub updated_at_ms: i64,
    /// When it was last started.
    pub started_at_ms: Option<i64>,
    /// When it last finished.
    pub finished_at_ms: Option<i64>,
}

/// An edge as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Edge {
    /// Its number within the graph, from 1 in the order edges were added.
    pub seq: u64,
    /// Its source.
    pub from: NodeId,
    /// Its target.
    pub to: NodeId,
    /// The colour it accepts; `None` accepts every colour, `error` included.
    pub condition: Option<TokenColor>,
    /// How many tokens it has carried.
    pub tokens: u64,
}

/// How a node is added: its id (generated when `None`) and its join. `#[non_exhaustive]`:
/// build it with [`NodeOptions::new`] and the setters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeOptions {
    /// The node's id, unique within the graph.
    pub id: Option<NodeId>,
    /// When it is enabled.
    pub join: JoinType,
}

impl NodeOptions {
    /// A generated id and an `All` join.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the node.
    pub fn id(mut self, id: impl Into<NodeId>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the join.
    pub fn join(mut self, join: JoinType) -> Self {
        self.join = join;
        self
    }
}

/// What a recovery pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Recovered {
    /// Running graphs visited.
    pub graphs: u64,
    /// Running nodes reset to ready.
    pub reset: u64,
    /// `node_ready` events written (one per ready node).
    pub announced: u64,
    /// Graphs failed because their deadline had passed.
    pub expired: u64,
    /// The last graph visited (where the next page starts).
    pub last: Option<GraphId>,
}

/// An event of a graph's stream (`Stream::graph(id)`): the event's type is the tag, the
/// payload is the whole value. Outputs are not copied into events (they may be large): read
/// them with `node`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GraphEvent {
    /// A node is enabled: run it.
    NodeReady {
        /// The node.
        node_id: NodeId,
        /// Its spec's kind (`task`, `scatter` or `sub_graph`).
        kind: String,
    },
    /// A caller started a node.
    NodeStarted {
        /// The node.
        node_id: NodeId,
    },
    /// A node completed.
    NodeDone {
        /// The node.
        node_id: NodeId,
    },
    /// A node failed.
    NodeFailed {
        /// The node.
        node_id: NodeId,
        /// The error (its first 1024 bytes; the node holds all of it).
        error: String,
    },
    /// A node can no longer be enabled.
    NodeSkipped {
        /// The node.
        node_id: NodeId,
    },
    /// The graph completed.
    GraphDone {
        /// The graph.
        graph_id: GraphId,
    },
    /// The graph failed.
    GraphFailed {
        /// The graph.
        graph_id: GraphId,
        /// The node whose error failed it, if one did.
        node_id: Option<NodeId>,
        /// Why (its first 1024 bytes).
        error: String,
    },
    /// The graph was cancelled.
    GraphCancelled {
        /// The graph.
        graph_id: GraphId,
    },
    /// A finished graph runs again for the nodes named (`Graphs::reopen`); `node_ready`
    /// events follow for every node to run.
    GraphReopened {
        /// The graph.
        graph_id: GraphId,
        /// The nodes reopened, as named.
        node_ids: Vec<NodeId>,
    },
}

impl GraphEvent {
    /// Reads a graph event from an event of a graph's stream.
    ///
    /// # Errors
    /// `Json` if the event is not a graph event.
    pub fn from_event(event: &Event) -> Result<Self> {
        Ok(serde_json::from_value(event.payload.clone())?)
    }

    /// The event's type, as stored: `node_ready`, .., `graph_cancelled`, `graph_reopened`.
    pub fn event_type(&self) -> &'static str {
        match self {
            GraphEvent::NodeReady { .. } => "node_ready",
            GraphEvent::NodeStarted { .. } => "node_started",
            GraphEvent::NodeDone { .. } => "node_done",
            GraphEvent::NodeFailed { .. } => "node_failed",
            GraphEvent::NodeSkipped { .. } => "node_skipped",
            GraphEvent::GraphDone { .. } => "graph_done",
            GraphEvent::GraphFailed { .. } => "graph_failed",
            GraphEvent::GraphCancelled { .. } => "graph_cancelled",
            GraphEvent::GraphReopened { .. } => "graph_reopened",
        }
    }

    /// Whether the event ends the graph.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            GraphEvent::GraphDone { .. }
                | GraphEvent::GraphFailed { .. }
                | GraphEvent::GraphCancelled { .. }
        )
    }
}

/// The graphs of a store view: `store.graphs()`.
#[derive(Debug, Clone, Copy)]
pub struct Graphs<'a> {
    store: &'a Store,
}

impl<'a> Graphs<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// Creates a pending graph carrying `metadata`.
    ///
    /// # Errors
    /// `TooLarge` for metadata past the payload limit.
    pub fn create(&self, metadata: Value) -> Result<GraphId> {
        self.store.exec(Create { metadata, parent: None })
    }

    /// Creates a pending child graph of `parent` (to be run by a SubGraph node of it).
    ///
    /// # Errors
    /// `NotFound` for an unknown parent; `TooLarge` for metadata past the payload limit or a
    /// parent with `Limits::graph_nodes_max` children already.
    pub fn create_child(&self, parent: &str, metadata: Value) -> Result<GraphId> {
        self.store.exec(Create { metadata, parent: Some(parent.into()) })
    }

    /// The children of a graph, in creation order (at most `Limits::graph_nodes_max`).
    ///
    /// # Errors
    /// `NotFound` for an unknown graph.
    pub fn children(&self, graph: &str) -> Result<Vec<Graph>> {
        self.store.exec(Children { graph: graph.into() })
    }

    /// One graph, with its node and edge counts.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph (or another tenant's).
    pub fn get(&self, graph: &str) -> Result<Graph> {
        self.store.exec(Get { graph: graph.into() })
    }

    /// A page of the tenant's graphs, in creation order.
    ///
    /// # Errors
    /// `TooLarge` for a page past the page size limit.
    pub fn list(&self, page: Page) -> Result<Vec<Graph>> {
        self.store.exec(List { page })
    }

    /// A page of the tenant's graphs that match `filter`, in id (creation) order or, with
    /// `filter.newest_first`, newest first; the page's `after` is the last id of the page before
    /// either way.
    ///
    /// # Errors
    /// `InvalidInput` for a bad metadata key or a value that is not a scalar; `TooLarge` for a
    /// page past the page size limit.
    pub fn find(&self, filter: &GraphFilter, page: Page) -> Result<Vec<Graph>> {
        self.store.exec(Find { filter: filter.clone(), page })
    }

    /// How many of the tenant's graphs match `filter` (its `status` aside), by status; a
    /// status no graph has is left out. A filter with no metadata condition, or with only a
    /// `kind` that is a non-empty string (roots only or not), is answered from counts kept as
    /// graphs are created and change status: O(kinds x statuses), however many graphs there
    /// are. Any other metadata condition reads every graph of the tenant that matches.
    ///
    /// # Errors
    /// `InvalidInput` as for [`Graphs::find`].
    pub fn count_by_status(&self, filter: &GraphFilter) -> Result<Vec<(GraphStatus, u64)>> {
        self.store.exec(CountByStatus { filter: filter.clone() })
    }

    /// Adds a node. On a running graph, a node without inbound edges is ready at once (a
    /// Gather waits for an edge: it has nothing to gather yet).
    ///
    /// # Errors
    /// `NotFound` for an unknown graph; `Conflict` for a finished graph or a taken id;
    /// `InvalidInput`/`TooLarge` for a bad id, spec or a full graph.
    pub fn add_node(&self, graph: &str, spec: NodeSpec, options: NodeOptions) -> Result<NodeId> {
        self.store.exec(AddNode { graph: graph.into(), spec, options })
    }

    /// Adds an edge. On a running graph, a source that has finished delivers its tokens on it
    /// at once (the target may fire, or be skipped).
    ///
    /// # Errors
    /// `NotFound` for an unknown graph or node; `Conflict` for a finished graph; `TooLarge`
    /// for a full graph.
    pub fn add_edge(
        &self,
        graph: &str,
        from: &str,
        to: &str,
        condition: impl Into<Option<TokenColor>>,
    ) -> Result<u64> {
        let condition = condition.into();
        let op = AddEdge { graph: graph.into(), from: from.into(), to: to.into(), condition };
        self.store.exec(op)
    }

    /// Sets the join of a pending node.
    ///
    /// # Errors
    /// `NotFound` for an unknown node; `Conflict` if it is not pending or the graph finished.
    pub fn set_join(&self, graph: &str, node: &str, join: JoinType) -> Result<()> {
        self.store.exec(SetJoin { graph: graph.into(), node: node.into(), join })
    }

    /// Limits how long the graph may run once started (`None` removes the limit). A running
    /// graph's deadline counts from when it started.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph; `Conflict` for a finished one; `InvalidInput` for a
    /// negative timeout.
    pub fn set_timeout(&self, graph: &str, timeout_ms: Option<i64>) -> Result<()> {
        self.store.exec(SetTimeout { graph: graph.into(), timeout_ms })
    }

    /// Starts a pending graph: its roots become ready (an empty graph completes). Starting a
    /// graph that is not pending does nothing and returns its status.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph.
    pub fn start(&self, graph: &str) -> Result<GraphStatus> {
        self.store.exec(Start { graph: graph.into() })
    }

    /// Moves a ready node to running (a SubGraph node starts its child).
    ///
    /// # Errors
    /// `NotFound` for an unknown node; `Conflict` if it is not ready or the graph is not
    /// running.
    pub fn start_node(&self, graph: &str, node: &str) -> Result<()> {
        self.store.exec(StartNode { graph: graph.into(), node: node.into() })
    }

    /// Completes a ready or running node with `output` (`None` sends one `ok` token) and fires
    /// what follows.
    ///
    /// # Errors
    /// `NotFound` for an unknown node; `Conflict` if it is not ready or running or the graph
    /// is not running; `TooLarge` for an output past the payload limit.
    pub fn complete_node(
        &self,
        graph: &str,
        node: &str,
        output: impl Into<Option<NodeOutput>>,
    ) -> Result<()> {
        let output = output.into();
        self.store.exec(CompleteNode { graph: graph.into(), node: node.into(), output })
    }

    /// Fails a ready or running node: its error token goes to every edge that accepts it, or
    /// fails the graph when none does.
    ///
    /// # Errors
    /// As `complete_node`.
    pub fn fail_node(&self, graph: &str, node: &str, error: &str) -> Result<()> {
        self.store.exec(FailNode { graph: graph.into(), node: node.into(), error: error.into() })
    }

    /// Cancels a pending or running graph and its unfinished children. Cancelling a cancelled
    /// graph does nothing.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph; `Conflict` for a complete or failed one.
    pub fn cancel(&self, graph: &str) -> Result<()> {
        self.store.exec(Cancel { graph: graph.into() })
    }

    /// Runs a finished graph again from its failed `nodes`: retry from failure. The graph is
    /// running again; each named node fires again (a `node_ready` event: run it as any ready
    /// node); what follows it runs as its new tokens arrive: a node skipped because of it runs
    /// once its join is met, and a finished node on an edge that already carried one of its
    /// tokens (an error handler, when it fails again) runs again, as in a loop. Nodes a failed
    /// graph left ready or running are announced again; every other finished node keeps its
    /// end. A `graph_reopened` event comes first. The graph then finishes by the usual rules,
    /// its counters exact (`audit`). Each reopen counts as a firing of the named nodes
    /// (`Limits::loop_refires_max`).
    ///
    /// # Errors
    /// `InvalidInput` for no nodes or a node named twice; `NotFound` for an unknown graph or
    /// node; `Conflict` for a graph that is not complete or failed, a child graph (reopen its
    /// parent's node instead), a named node that did not fail or is a SubGraph node, or one
    /// that follows another named node (it would run twice: name only the first). Nothing is
    /// written then.
    pub fn reopen(&self, graph: &str, nodes: &[&str]) -> Result<()> {
        let nodes = nodes.iter().map(|&node| node.to_owned()).collect();
        self.store.exec(Reopen { graph: graph.into(), nodes })
    }

    /// Every node of a graph, in the order they were added.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph.
    pub fn nodes(&self, graph: &str) -> Result<Vec<Node>> {
        self.store.exec(Nodes { graph: graph.into() })
    }

    /// One node.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph or node.
    pub fn node(&self, graph: &str, node: &str) -> Result<Node> {
        self.store.exec(GetNode { graph: graph.into(), node: node.into() })
    }

    /// Every edge of a graph, in the order they were added.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph.
    pub fn edges(&self, graph: &str) -> Result<Vec<Edge>> {
        self.store.exec(Edges { graph: graph.into() })
    }

    /// The tokens delivered to a node, in arrival order.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph or node.
    pub fn inputs(&self, graph: &str, node: &str) -> Result<Vec<Token>> {
        self.store.exec(Inputs { graph: graph.into(), node: node.into() })
    }

    /// Waits up to `timeout` for the graph to finish and returns it as it then stands (check
    /// `status.is_terminal()`). The caller's thread sleeps until a commit ends a graph; when
    /// the graph's deadline passes, a view that may write fails the graph then.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph.
    pub fn wait(&self, graph: &str, timeout: Duration) -> Result<Graph> {
        let deadline = Instant::now().checked_add(timeout);
        let bell = self.store.bell();
        loop {
            let seen = bell.generation();
            let current = self.get(graph)?;
            if current.status.is_terminal() || deadline.is_some_and(|at| Instant::now() >= at) {
                return Ok(current);
            }
            let overdue =
                current.deadline_at_ms.is_some_and(|at| self.store.until_ms(at).is_zero());
            if overdue && self.store.role().allows(crate::Access::Write) {
                self.store.exec(ExpireOverdue)?;
                continue;
            }
            let overdue_at = current
                .deadline_at_ms
                .filter(|_| !overdue)
                .and_then(|at_ms| Instant::now().checked_add(self.store.until_ms(at_ms)));
            let wake_at = match (deadline, overdue_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            bell.wait(seen, wake_at);
        }
    }

    /// Checks the graph's stored counters (per-status counts, each node's inbound edge
    /// counters) against its nodes and edges; returns what disagrees, nothing when the graph is
    /// sound. It reads the whole graph: for tests and integrity checks.
    ///
    /// # Errors
    /// `NotFound` for an unknown graph.
    pub fn audit(&self, graph: &str) -> Result<Vec<String>> {
        self.store.exec(Audit { graph: graph.into() })
    }

    /// Where the tenant's kept graph counts (per kind, root or child, and status: what
    /// [`Graphs::count_by_status`] reads) differ from a recount of its graphs, one line each;
    /// empty when they agree, as they always should (`spindle check` reports any line). It
    /// reads every graph of the tenant.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn audit_counts(&self) -> Result<Vec<String>> {
        self.store.exec(AuditCounts)
    }

    /// Fails every running graph of the tenant whose deadline has passed; returns how many.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn expire_overdue(&self) -> Result<u64> {
        self.store.exec(ExpireOverdue)
    }

    /// Recovers the tenant's running graphs after a crash: fails those past their deadline,
    /// resets every running node to ready, and writes one `node_ready` event for every ready
    /// node so a dispatcher following the stream runs it again. One transaction per page of
    /// `Limits::page_size_max` graphs. The store runs it for every tenant when it opens, if
    /// no other writable store has the database open (their nodes are not interrupted; see
    /// `Options::recover_on_open`, which turns it off). Called by hand, it resets every
    /// running node, another live process's too.
    ///
    /// # Errors
    /// Storage errors only.
    pub fn recover(&self) -> Result<Recovered> {
        let mut total = Recovered::default();
        loop {
            let page = self.store.exec(Recover { after: total.last.clone() })?;
            if page.last.is_none() {
                return Ok(total);
            }
            total.graphs += page.graphs;
            total.reset += page.reset;
            total.announced += page.announced;
            total.expired += page.expired;
            total.last = page.last;
        }
    }
}

/// What a writable store does with graphs when it opens: recovers the running graphs of every
/// tenant (if `recover`), then fails those past their deadline and sets the alarm for the next
/// one. Another process holding the write lock runs its own sweeps: `Busy` is no failure.
/// A suspended tenant's graphs are left as they are (its writes are refused: it cannot finish
/// a node either); they are recovered at the first open after it is active again.
pub(crate) fn at_open(store: &Store, recover: bool) -> Result<()> {
    if recover {
        for tenant in store.exec(RunningTenants)? {
            match store.tenant(&tenant)?.graphs().recover() {
                Ok(recovered) if recovered.graphs > 0 => tracing::info!(
                    %tenant,
                    graphs = recovered.graphs,
                    reset = recovered.reset,
                    expired = recovered.expired,
                    "spindle: recovered the running graphs at open"
                ),
                Ok(_) | Err(Error::TenantSuspended(_)) => {}
                Err(error) => return Err(error),
            }
        }
    }
    match store.exec(ExpireDeadlines) {
        Ok(_) | Err(Error::Busy) => Ok(()),
        Err(error) => Err(error),
    }
}

impl Store {
    /// The graph engine: graphs of nodes and coloured tokens, run by callers and finished by
    /// the engine.
    pub fn graphs(&self) -> Graphs<'_> {
        Graphs::new(self)
    }
}
