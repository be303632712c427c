//! The graph engine's operations: one struct each, run with `store.exec` or composed with
//! `tx.exec`.
//!
//! Each op checks its input, opens the graph (`Net`), makes its change, and settles. A graph
//! that ends hands its end to its parent's SubGraph node in the same transaction
//! (`settle_up`), so a whole chain of finishing graphs is one atomic step.

use serde_json::Value;

use super::net::{self, Ended, Net, NodeEnd};
use super::sql::{self, Key, NodeState};
use super::{
    Edge, GatherStrategy, Graph, GraphFilter, GraphId, GraphStatus, JoinType, Node, NodeId,
    NodeOptions, NodeOutput, NodeSpec, NodeStatus, Recovered, Token, TokenColor,
};
use crate::core::counts;
use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::page::Page;

/// Creates a pending graph (a child of `parent`, if given); output its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Create {
    /// The caller's metadata, at most `Limits::payload_bytes_max` encoded.
    pub metadata: Value,
    /// The parent graph, for a child.
    pub parent: Option<GraphId>,
}

/// Reads one graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    /// The graph.
    pub graph: GraphId,
}

/// Reads a page of the tenant's graphs, in creation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List {
    /// Which page.
    pub page: Page,
}

/// Reads a page of the tenant's graphs that match a filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Find {
    /// Which graphs.
    pub filter: GraphFilter,
    /// Which page.
    pub page: Page,
}

/// Counts the tenant's graphs that match a filter, by status.
#[derive(Debug, Clone, PartialEq)]
pub struct CountByStatus {
    /// Which graphs (its `status` and `newest_first` aside).
    pub filter: GraphFilter,
}

/// Where the tenant's kept graph counts differ from a recount of its graphs; see
/// [`Graphs::audit_counts`](super::Graphs::audit_counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCounts;

/// Reads the children of a graph, in creation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Children {
    /// The parent graph.
    pub graph: GraphId,
}

/// Adds a node to an unfinished graph; output its id.
#[derive(Debug, Clone, PartialEq)]
pub struct AddNode {
    /// The graph.
    pub graph: GraphId,
    /// What the node is.
    pub spec: NodeSpec,
    /// Its id and join.
    pub options: NodeOptions,
}

/// Adds an edge to an unfinished graph; output its number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddEdge {
    /// The graph.
    pub graph: GraphId,
    /// The source node.
    pub from: NodeId,
    /// The target node (the source itself for a self-loop).
    pub to: NodeId,
    /// The colour it accepts; `None` accepts every colour.
    pub condition: Option<TokenColor>,
}

/// Sets the join of a pending node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetJoin {
    /// The graph.
    pub graph: GraphId,
    /// The node.
    pub node: NodeId,
    /// The new join.
    pub join: JoinType,
}

/// Sets (or removes) how long a graph may run once started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetTimeout {
    /// The graph.
    pub graph: GraphId,
    /// Milliseconds from its start; `None` removes the limit.
    pub timeout_ms: Option<i64>,
}

/// Starts a pending graph; output its status afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The graph.
    pub graph: GraphId,
}

/// Moves a ready node to running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartNode {
    /// The graph.
    pub graph: GraphId,
    /// The node.
    pub node: NodeId,
}

/// Completes a ready or running node.
#[derive(Debug, Clone, PartialEq)]
pub struct CompleteNode {
    /// The graph.
    pub graph: GraphId,
    /// The node.
    pub node: NodeId,
    /// What it produced; `None` sends one `ok` token.
    pub output: Option<NodeOutput>,
}

/// Fails a ready or running node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailNode {
    /// The graph.
    pub graph: GraphId,
    /// The node.
    pub node: NodeId,
    /// What went wrong.
    pub error: String,
}

/// Cancels a pending or running graph and its unfinished children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The graph.
    pub graph: GraphId,
}

/// Runs a finished graph again from the named nodes (see `Graphs::reopen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reopen {
    /// The graph: complete or failed, not a child.
    pub graph: GraphId,
    /// The nodes to run again: each failed, not a SubGraph node, none named twice, none
    /// following another named one.
    pub nodes: Vec<NodeId>,
}

/// Reads every node of a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nodes {
    /// The graph.
    pub graph: GraphId,
}

/// Reads one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetNode {
    /// The graph.
    pub graph: GraphId,
    /// The node.
    pub node: NodeId,
}

/// Reads every edge of a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edges {
    /// The graph.
    pub graph: GraphId,
}

/// Reads the tokens delivered to a node, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    /// The graph.
    pub graph: GraphId,
    /// The node.
    pub node: NodeId,
}

/// Recovers up to `Limits::page_size_max` of the tenant's running graphs after a crash, in
/// id order after `after`; see `Graphs::recover`, which runs it page by page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recover {
    /// Recover the graphs after this one (`None`: from the first).
    pub after: Option<GraphId>,
}

/// Checks a graph's stored counters against its nodes and edges; output what disagrees
/// (nothing when the graph is sound). Reads every node and edge: for tests and `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// The graph.
    pub graph: GraphId,
}

/// Fails up to `Limits::page_size_max` running graphs past their deadline; output how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpireOverdue;

/// The tenants with a running graph, for the recovery pass at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunningTenants;

/// The store's own deadline sweep, across tenants: fails overdue running graphs (a page at a
/// time) and sets the store's alarm for the next deadline. The store runs it at open and
/// whenever that alarm is due, so a deadline is kept without any caller waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExpireDeadlines;

impl Sealed for Create {}
impl Op for Create {
    type Output = GraphId;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        limits.check_depth(&self.metadata)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<GraphId> {
        let metadata = serde_json::to_string(&self.metadata)?;
        tx.limits().check_payload("graph metadata bytes", &metadata)?;
        if let Some(parent) = &self.parent {
            adopt_child(tx, parent)?;
        }
        let id = tx.new_id();
        let key = Key { tenant: tx.tenant(), graph: &id };
        sql::insert_graph(tx.db(), key, self.parent.as_deref(), &metadata, tx.now_ms())?;
        Ok(id)
    }
}

impl Sealed for Get {}
impl Op for Get {
    type Output = Graph;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Graph> {
        let key = Key { tenant: tx.tenant(), graph: &self.graph };
        sql::select_graph(tx.db(), key)?.ok_or_else(|| Error::not_found("graph", &self.graph))
    }
}

impl Sealed for List {}
impl Op for List {
    type Output = Vec<Graph>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Graph>> {
        tx.limits().check_page(self.page.limit)?;
        let after = self.page.after.as_deref().unwrap_or("");
        sql::select_graphs(tx.db(), tx.tenant(), after, self.page.limit)
    }
}

impl Sealed for Find {}
impl Op for Find {
    type Output = Vec<Graph>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Graph>> {
        tx.limits().check_page(self.page.limit)?;
        check_filter(&self.filter)?;
        sql::find_graphs(tx.db(), tx.tenant(), &self.filter, &self.page)
    }
}

impl Sealed for CountByStatus {}
impl Op for CountByStatus {
    type Output = Vec<(GraphStatus, u64)>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<(GraphStatus, u64)>> {
        check_filter(&self.filter)?;
        sql::count_graphs(tx.db(), tx.tenant(), &self.filter)
    }
}

impl Sealed for AuditCounts {}
impl Op for AuditCounts {
    type Output = Vec<String>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<String>> {
        let [kept, counted] = sql::select_counts_and_recount(tx.db(), tx.tenant())?;
        Ok(counts::differences(kept, counted))
    }
}

/// Metadata conditions one filter may hold.
const FILTER_KEYS_MAX: usize = 16;

/// How soon a deadline sweep that another process's work held up is tried again.
const SWEEP_RETRY_MS: i64 = 250;

/// A filter's metadata keys are plain names and its values scalars, at most
/// `FILTER_KEYS_MAX` of them.
fn check_filter(filter: &GraphFilter) -> Result<()> {
    if filter.metadata.len() > FILTER_KEYS_MAX {
        return Err(Error::InvalidInput(format!(
            "a filter holds at most {FILTER_KEYS_MAX} metadata conditions, not {}",
            filter.metadata.len()
        )));
    }
    for (key, value) in &filter.metadata {
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if key.is_empty() || key.len() > 64 || !key.chars().all(plain) {
            return Err(Error::InvalidInput(format!(
                "a metadata key is 1 to 64 letters, digits, _ or -, not {key:?}"
            )));
        }
        if value.is_object() || value.is_array() {
            return Err(Error::InvalidInput(format!(
                "metadata {key:?} is compared with a scalar, not {value}"
            )));
        }
    }
    Ok(())
}

impl Sealed for Children {}
impl Op for Children {
    type Output = Vec<Graph>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Graph>> {
        let key = existing(tx, &self.graph)?;
        sql::select_children(tx.db(), key)
    }
}

impl Sealed for AddNode {}
impl Op for AddNode {
    type Output = NodeId;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        match &self.spec {
            NodeSpec::Task { data } | NodeSpec::Scatter { data } => limits.check_depth(data),
            NodeSpec::Gather { .. } | NodeSpec::SubGraph { .. } => Ok(()),
        }
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<NodeId> {
        let spec = check_spec(tx, &self.spec)?;
        let id = match self.options.id {
            Some(id) => {
                tx.limits().check_id("node id", &id)?;
                id
            }
            None => tx.new_id(),
        };
        let net = Net::open(tx, &self.graph)?;
        net.require_open()?;
        check_room(net.state().node_count, net.limits().graph_nodes_max, "graph nodes")?;
        if net.has_node(&id)? {
            return Err(Error::Conflict(format!("graph {} already has a node {id}", self.graph)));
        }
        drop(net);
        if let NodeSpec::SubGraph { graph_id } = &self.spec {
            bind_child(tx, &self.graph, graph_id, &id)?;
        }
        let mut net = Net::open(tx, &self.graph)?;
        let node = NodeState {
            id: id.clone(),
            kind: self.spec.kind().to_owned(),
            spec,
            join: self.options.join,
            status: NodeStatus::Pending,
            in_edges: 0,
            in_filled: 0,
            in_dead: 0,
            fires: 0,
            fired_seq: 0,
        };
        net.add_node(node)?;
        let ended = net.settle()?;
        settle_up(tx, ended)?;
        Ok(id)
    }
}

impl Sealed for AddEdge {}
impl Op for AddEdge {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        if let Some(TokenColor::Named { name }) = &self.condition {
            tx.limits().check_id("colour name", name)?;
        }
        let mut net = Net::open(tx, &self.graph)?;
        net.require_open()?;
        check_room(net.state().edge_count, net.limits().graph_edges_max, "graph edges")?;
        let from = net.node(&self.from)?;
        let target = net.node(&self.to)?;
        let seq = net.add_edge(&from, target, self.condition)?;
        let ended = net.settle()?;
        settle_up(tx, ended)?;
        Ok(seq)
    }
}

impl Sealed for SetJoin {}
impl Op for SetJoin {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let mut net = Net::open(tx, &self.graph)?;
        net.require_open()?;
        let node = net.node(&self.node)?;
        net.set_join(node, self.join)?;
        let ended = net.settle()?;
        settle_up(tx, ended)
    }
}

impl Sealed for SetTimeout {}
impl Op for SetTimeout {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        if self.timeout_ms.is_some_and(|ms| ms < 0) {
            return Err(Error::InvalidInput("timeout_ms must not be negative".into()));
        }
        let mut net = Net::open(tx, &self.graph)?;
        net.require_open()?;
        let state = net.state_mut();
        state.timeout_ms = self.timeout_ms;
        state.deadline_at_ms = match (state.started_at_ms, self.timeout_ms) {
            (Some(started_ms), Some(ms)) => Some(started_ms.saturating_add(ms)),
            _ => None,
        };
        net.arm_deadline();
        net.settle().map(|_| ())
    }
}

impl Sealed for Start {}
impl Op for Start {
    type Output = GraphStatus;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<GraphStatus> {
        let mut net = Net::open(tx, &self.graph)?;
        if !net.start()? {
            return Ok(net.state().status);
        }
        let ended = net.settle()?;
        let status = ended.as_ref().map_or(GraphStatus::Running, |ended| ended.status);
        settle_up(tx, ended)?;
        Ok(status)
    }
}

impl Sealed for StartNode {}
impl Op for StartNode {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let mut net = Net::open(tx, &self.graph)?;
        net.require_running()?;
        let node = net.node(&self.node)?;
        let spec = (node.kind == "sub_graph").then(|| node.spec()).transpose()?;
        net.start_node(node)?;
        let ended = net.settle()?;
        settle_up(tx, ended)?;
        match spec {
            Some(NodeSpec::SubGraph { graph_id }) => start_child(tx, &graph_id),
            _ => Ok(()),
        }
    }
}

impl Sealed for CompleteNode {}
impl Op for CompleteNode {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        let tokens = self.output.as_ref().map(NodeOutput::tokens).unwrap_or_default();
        let data = tokens.into_iter().filter_map(|token| token.data.as_ref());
        limits.check_depths(data)
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        if let Some(output) = &self.output {
            tx.limits().check_json("node output bytes", output)?;
        }
        finish_node(tx, &self.graph, &self.node, NodeEnd::Done(self.output))
    }
}

impl Sealed for FailNode {}
impl Op for FailNode {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.limits().check_payload("node error bytes", &self.error)?;
        finish_node(tx, &self.graph, &self.node, NodeEnd::Failed(self.error))
    }
}

impl Sealed for Cancel {}
impl Op for Cancel {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let status = Net::open(tx, &self.graph)?.state().status;
        match status {
            GraphStatus::Cancelled => Ok(()),
            GraphStatus::Complete | GraphStatus::Failed => {
                Err(Error::Conflict(format!("graph {} is {}", self.graph, status.as_str())))
            }
            GraphStatus::Pending | GraphStatus::Running => cancel_tree(tx, &self.graph),
        }
    }
}

impl Sealed for Reopen {}
impl Op for Reopen {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        if self.nodes.is_empty() {
            return Err(Error::InvalidInput("name at least one node to reopen".into()));
        }
        if self.nodes.len() > limits.graph_nodes_max {
            return Err(Error::too_large(
                "reopened nodes",
                limits.graph_nodes_max,
                self.nodes.len(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        match self.nodes.iter().find(|node| !seen.insert(node.as_str())) {
            Some(twice) => Err(Error::InvalidInput(format!("node {twice} is named twice"))),
            None => Ok(()),
        }
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        let mut net = Net::open(tx, &self.graph)?;
        check_reopenable(net.state())?;
        let mut chosen = Vec::with_capacity(self.nodes.len());
        for id in &self.nodes {
            let node = net.node(id)?;
            check_rerunnable(&node)?;
            chosen.push(node);
        }
        check_not_downstream(&net, &chosen)?;
        net.reopen(chosen)?;
        let ended = net.settle()?;
        settle_up(tx, ended)
    }
}

/// Refuses to reopen a graph that has not finished by completing or failing, or a child (its
/// parent's SubGraph node holds its end).
fn check_reopenable(state: &sql::GraphState) -> Result<()> {
    if !matches!(state.status, GraphStatus::Complete | GraphStatus::Failed) {
        return Err(Error::Conflict(format!(
            "graph {} is {}: only a complete or failed graph can be reopened",
            state.id,
            state.status.as_str()
        )));
    }
    if let Some(parent) = &state.parent_graph_id {
        return Err(Error::Conflict(format!(
            "graph {} is a child of {parent}: reopen its node in the parent",
            state.id
        )));
    }
    Ok(())
}

/// Refuses to run again a node that did not fail, or one whose child graph decides its end.
fn check_rerunnable(node: &NodeState) -> Result<()> {
    if node.status != NodeStatus::Failed {
        return Err(Error::Conflict(format!(
            "node {} is {}: only a failed node can run again",
            node.id,
            node.status.as_str()
        )));
    }
    if node.kind == "sub_graph" {
        return Err(Error::Conflict(format!(
            "node {} is a sub-graph: its child graph cannot run again",
            node.id
        )));
    }
    Ok(())
}

/// Refuses a named node that follows another named one: it runs again when the other's new
/// token reaches it, and would otherwise run twice.
fn check_not_downstream(net: &Net<'_, '_>, chosen: &[NodeState]) -> Result<()> {
    let named: std::collections::BTreeSet<&str> = chosen.iter().map(|n| n.id.as_str()).collect();
    for node in chosen {
        if let Some(follower) = net.first_reached(&node.id, &named)? {
            return Err(Error::Conflict(format!(
                "node {follower} follows node {}, which is named too: name only {} (its new \
                 token reaches {follower})",
                node.id, node.id
            )));
        }
    }
    Ok(())
}

impl Sealed for Nodes {}
impl Op for Nodes {
    type Output = Vec<Node>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Node>> {
        let key = existing(tx, &self.graph)?;
        sql::select_nodes(tx.db(), key)
    }
}

impl Sealed for GetNode {}
impl Op for GetNode {
    type Output = Node;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Node> {
        let key = existing(tx, &self.graph)?;
        sql::select_node(tx.db(), key, &self.node)?
            .ok_or_else(|| Error::not_found("node", &self.node))
    }
}

impl Sealed for Edges {}
impl Op for Edges {
    type Output = Vec<Edge>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Edge>> {
        let key = existing(tx, &self.graph)?;
        sql::select_edges(tx.db(), key)
    }
}

impl Sealed for Inputs {}
impl Op for Inputs {
    type Output = Vec<Token>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Token>> {
        let key = existing(tx, &self.graph)?;
        if sql::select_node_state(tx.db(), key, &self.node)?.is_none() {
            return Err(Error::not_found("node", &self.node));
        }
        sql::select_inputs(tx.db(), key, &self.node)
    }
}

impl Sealed for Recover {}
impl Op for Recover {
    type Output = Recovered;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Recovered> {
        let mut recovered = Recovered::default();
        let after = self.after.as_deref().unwrap_or("");
        let limit = tx.limits().page_size_max;
        for graph in sql::select_running(tx.db(), tx.tenant(), after, limit)? {
            recovered.graphs += 1;
            recover_graph(tx, &graph, &mut recovered)?;
            recovered.last = Some(graph);
        }
        Ok(recovered)
    }
}

impl Sealed for Audit {}
impl Op for Audit {
    type Output = Vec<String>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<String>> {
        let key = Key { tenant: tx.tenant(), graph: &self.graph };
        let state = sql::select_state(tx.db(), key)?
            .ok_or_else(|| Error::not_found("graph", &self.graph))?;
        let nodes = sql::select_node_states(tx.db(), key)?;
        let edges = sql::select_edge_states(tx.db(), key)?;
        Ok(audit(&state, &nodes, &edges))
    }
}

impl Sealed for ExpireOverdue {}
impl Op for ExpireOverdue {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        let limit = tx.limits().page_size_max;
        let overdue = sql::select_overdue(tx.db(), tx.tenant(), tx.now_ms(), limit)?;
        for graph in &overdue {
            expire(tx, graph)?;
        }
        Ok(overdue.len() as u64)
    }
}

impl Sealed for ExpireDeadlines {}
impl Op for ExpireDeadlines {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Admin
    }
    /// One process at a time sweeps (on PostgreSQL, where many may share the database):
    /// another's sweep, or a tenant another process is writing, is tried again a moment later.
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        let retry_ms = tx.now_ms().saturating_add(SWEEP_RETRY_MS);
        if !tx.db().try_lock_sweep("graph deadlines")? {
            tx.set_alarm(retry_ms);
            return Ok(0);
        }
        let (mut expired, mut passed_over) = (0, false);
        for tenant in sql::select_tenants_overdue(tx.db(), tx.now_ms())? {
            match tx.as_tenant(&tenant, |tx| ExpireOverdue.apply(tx))? {
                Some(count) => expired += count,
                None => passed_over = true,
            }
        }
        // A tenant passed over is still overdue: the next sweep waits the retry out.
        let next_ms = sql::select_next_deadline(tx.db())?;
        let next_ms = if passed_over { next_ms.map(|ms| ms.max(retry_ms)) } else { next_ms };
        if let Some(next_ms) = next_ms {
            tx.set_alarm(next_ms);
        }
        Ok(expired)
    }
}

impl Sealed for RunningTenants {}
impl Op for RunningTenants {
    type Output = Vec<String>;
    fn access(&self) -> Access {
        Access::Admin
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<String>> {
        sql::select_tenants_running(tx.db())
    }
}

/// Finishes a node as its caller says, then settles the graph and its ancestors. A SubGraph
/// node is finished by its child graph, never by a caller.
fn finish_node(tx: &mut Tx<'_>, graph: &str, node: &str, outcome: NodeEnd) -> Result<()> {
    let mut net = Net::open(tx, graph)?;
    net.require_running()?;
    let node = net.node(node)?;
    if node.kind == "sub_graph" {
        return Err(Error::Conflict(format!(
            "node {} is a sub-graph: its child graph finishes it",
            node.id
        )));
    }
    net.finish_node(&node, outcome)?;
    let ended = net.settle()?;
    settle_up(tx, ended)
}

/// Hands a graph's end to the SubGraph node that runs it, and so on up the tree, and down to
/// its children: a graph that fails or is cancelled cancels its unfinished children, and one
/// that completes cancels those bound to a node that will not run them. A work list, not
/// recursion: nesting depth cannot exhaust the store thread's stack.
fn settle_up(tx: &mut Tx<'_>, ended: Option<Ended>) -> Result<()> {
    let mut ends: Vec<Ended> = ended.into_iter().collect();
    while let Some(end) = ends.pop() {
        let bound_only = end.status == GraphStatus::Complete;
        for child in
            sql::select_live_children(tx.db(), Key { tenant: tx.tenant(), graph: &end.graph_id })?
        {
            if bound_only && child.1.is_none() {
                continue;
            }
            let mut net = Net::open(tx, &child.0)?;
            net.end(GraphStatus::Cancelled, None, None)?;
            ends.extend(net.settle()?);
        }
        ends.extend(finish_parent_node(tx, &end)?);
    }
    Ok(())
}

/// Finishes the SubGraph node that runs the graph that ended, if it still waits for it.
fn finish_parent_node(tx: &mut Tx<'_>, child: &Ended) -> Result<Option<Ended>> {
    let (Some(parent), Some(node)) = (&child.parent_graph_id, &child.parent_node_id) else {
        return Ok(None);
    };
    let mut net = Net::open(tx, parent)?;
    if net.state().status != GraphStatus::Running {
        return Ok(None);
    }
    let node = net.node(node)?;
    if !matches!(node.status, NodeStatus::Ready | NodeStatus::Running) {
        return Ok(None);
    }
    let outcome = match child.status {
        GraphStatus::Complete => NodeEnd::Done(Some(net::child_output(&child.graph_id))),
        GraphStatus::Cancelled => {
            NodeEnd::Failed(format!("child graph {} was cancelled", child.graph_id))
        }
        _ => NodeEnd::Failed(format!(
            "child graph {} failed: {}",
            child.graph_id,
            child.error.as_deref().unwrap_or("")
        )),
    };
    net.finish_node(&node, outcome)?;
    net.settle()
}

/// Starts the child graph of a SubGraph node that just started; a child that is already
/// finished (or finishes at once) finishes the node.
fn start_child(tx: &mut Tx<'_>, child: &str) -> Result<()> {
    let mut net = Net::open(tx, child)?;
    net.start()?;
    let state = net.state().clone();
    let ended = net.settle()?;
    if ended.is_some() {
        return settle_up(tx, ended);
    }
    let finished = Net::open(tx, child)?.state().clone();
    if !finished.status.is_terminal() {
        return Ok(());
    }
    let ended = Ended {
        graph_id: finished.id,
        status: finished.status,
        error: finished.error,
        parent_graph_id: state.parent_graph_id,
        parent_node_id: state.parent_node_id,
    };
    settle_up(tx, Some(ended))
}

/// Cancels a graph; its end cancels its unfinished children (`settle_up`).
fn cancel_tree(tx: &mut Tx<'_>, graph: &str) -> Result<()> {
    let mut net = Net::open(tx, graph)?;
    if net.state().status.is_terminal() {
        return Ok(());
    }
    net.end(GraphStatus::Cancelled, None, None)?;
    let ended = net.settle()?;
    settle_up(tx, ended)
}

/// Fails a running graph whose deadline has passed.
fn expire(tx: &mut Tx<'_>, graph: &str) -> Result<()> {
    let mut net = Net::open(tx, graph)?;
    let error = format!("graph {graph} passed its deadline");
    net.end(GraphStatus::Failed, None, Some(error))?;
    let ended = net.settle()?;
    settle_up(tx, ended)
}

/// Recovers one running graph: expire it if overdue, else reset running nodes and announce
/// every ready node once.
fn recover_graph(tx: &mut Tx<'_>, graph: &str, recovered: &mut Recovered) -> Result<()> {
    let mut net = Net::open(tx, graph)?;
    if net.state().status != GraphStatus::Running {
        return Ok(());
    }
    if net.overdue() {
        recovered.expired += 1;
        drop(net);
        return expire(tx, graph);
    }
    for node in net.nodes_in(NodeStatus::Running)? {
        recovered.reset += 1;
        net.reset(node)?;
    }
    for node in net.nodes_in(NodeStatus::Ready)? {
        recovered.announced += 1;
        net.announce(&node)?;
    }
    net.settle().map(|_| ())
}

/// Checks that `parent` exists and has room for another child, and counts the child.
fn adopt_child(tx: &mut Tx<'_>, parent: &str) -> Result<()> {
    let mut net = Net::open(tx, parent)?;
    check_room(net.state().child_count, net.limits().graph_nodes_max, "graph children")?;
    net.state_mut().child_count += 1;
    net.settle().map(|_| ())
}

/// Binds a child graph to the SubGraph node that will run it.
fn bind_child(tx: &mut Tx<'_>, graph: &str, child: &str, node: &str) -> Result<()> {
    let mut net = Net::open(tx, child)?;
    let state = net.state();
    if state.parent_graph_id.as_deref() != Some(graph) {
        return Err(Error::InvalidInput(format!(
            "graph {child} is not a child of {graph}: create it with create_child"
        )));
    }
    if let Some(bound) = &state.parent_node_id {
        return Err(Error::Conflict(format!("graph {child} is already run by node {bound}")));
    }
    net.state_mut().parent_node_id = Some(node.to_owned());
    net.settle().map(|_| ())
}

/// What disagrees between a graph's counters and its nodes and edges.
fn audit(state: &sql::GraphState, nodes: &[NodeState], edges: &[sql::EdgeState]) -> Vec<String> {
    let mut problems = Vec::new();
    let statuses = [
        NodeStatus::Pending,
        NodeStatus::Ready,
        NodeStatus::Running,
        NodeStatus::Complete,
        NodeStatus::Failed,
        NodeStatus::Skipped,
    ];
    for status in statuses {
        let counted = nodes.iter().filter(|node| node.status == status).count() as i64;
        if state.count(status) != counted {
            let stored = state.count(status);
            problems.push(format!("{} nodes: stored {stored}, found {counted}", status.as_str()));
        }
    }
    if state.node_count != nodes.len() as i64 || state.edge_count != edges.len() as i64 {
        problems.push(format!(
            "sizes: stored {} nodes and {} edges, found {} and {}",
            state.node_count,
            state.edge_count,
            nodes.len(),
            edges.len()
        ));
    }
    for edge in edges.iter().filter(|edge| edge.dead && edge.tokens > 0) {
        problems.push(format!("edge {} is dead but carried {} tokens", edge.seq, edge.tokens));
    }
    for node in nodes {
        let inbound: Vec<&sql::EdgeState> =
            edges.iter().filter(|e| e.to == node.id && e.from != node.id).collect();
        let found = [
            inbound.len() as i64,
            inbound.iter().filter(|e| e.tokens > 0).count() as i64,
            inbound.iter().filter(|e| e.dead).count() as i64,
        ];
        let stored = [node.in_edges, node.in_filled, node.in_dead];
        if found != stored {
            problems.push(format!(
                "node {}: stored in_edges/in_filled/in_dead {stored:?}, found {found:?}",
                node.id
            ));
        }
    }
    problems
}

/// Checks a node's spec; returns it encoded.
fn check_spec(tx: &Tx<'_>, spec: &NodeSpec) -> Result<String> {
    match spec {
        NodeSpec::Gather { strategy: GatherStrategy::First { n: 0 } } => {
            return Err(Error::InvalidInput("a gather of the first n needs n >= 1".into()));
        }
        NodeSpec::SubGraph { graph_id } => tx.limits().check_id("child graph id", graph_id)?,
        _ => {}
    }
    let encoded = serde_json::to_string(spec)?;
    tx.limits().check_payload("node spec bytes", &encoded)?;
    Ok(encoded)
}

fn check_room(count: i64, max: usize, what: &'static str) -> Result<()> {
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if count >= max {
        return Err(Error::too_large(what, max, count.saturating_add(1)));
    }
    Ok(())
}

/// The key of an existing graph of the tenant, or `NotFound`.
fn existing<'k>(tx: &'k Tx<'_>, graph: &'k str) -> Result<Key<'k>> {
    let key = Key { tenant: tx.tenant(), graph };
    if sql::select_state(tx.db(), key)?.is_none() {
        return Err(Error::not_found("graph", graph));
    }
    Ok(key)
}
