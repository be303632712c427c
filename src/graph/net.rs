//! The firing rule: how tokens move, which nodes fire, which are skipped, and when a graph
//! ends. Everything here runs inside one operation's transaction.
//!
//! A `Net` is one graph opened for change: its counters in memory, a work list of nodes to
//! finish, and the transaction. Finishing a node routes its tokens over its outbound edges;
//! each target's counters (`in_filled`, `in_dead`) decide at once whether it fires, is
//! skipped, or waits, so a step reads only the node's edges and their targets. `settle`
//! drains the work list, ends the graph when nothing is ready or running, and writes the
//! graph's counters back once.

use serde_json::json;

use super::sql::{self, EdgeState, GraphState, Key, NodeState};
use super::{
    GatherStrategy, GraphEvent, GraphStatus, JoinType, NodeOutput, NodeSpec, NodeStatus, Token,
    TokenColor,
};
use crate::core::events::{self, Stream};
use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::limits::Limits;

/// How a node finished.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum NodeEnd {
    /// With an output (`None`: one `ok` token).
    Done(Option<NodeOutput>),
    /// With an error.
    Failed(String),
    /// Without running: it can no longer be enabled.
    Skipped,
}

/// A graph that ended during an operation: what its parent's SubGraph node needs to know.
#[derive(Debug, Clone)]
pub(super) struct Ended {
    pub(super) graph_id: String,
    pub(super) status: GraphStatus,
    pub(super) error: Option<String>,
    pub(super) parent_graph_id: Option<String>,
    pub(super) parent_node_id: Option<String>,
}

/// One graph opened for change.
pub(super) struct Net<'t, 'a> {
    tx: &'t mut Tx<'a>,
    state: GraphState,
    stream: Stream,
    work: Vec<(String, NodeEnd)>,
    ended: Option<Ended>,
}

impl<'t, 'a> Net<'t, 'a> {
    /// Opens a graph of the transaction's tenant.
    pub(super) fn open(tx: &'t mut Tx<'a>, graph: &str) -> Result<Self> {
        let key = Key { tenant: tx.tenant(), graph };
        let state =
            sql::select_state(tx.db(), key)?.ok_or_else(|| Error::not_found("graph", graph))?;
        let stream = Stream::graph(graph);
        Ok(Self { tx, state, stream, work: Vec::new(), ended: None })
    }

    /// The graph's counters as they stand.
    pub(super) fn state(&self) -> &GraphState {
        &self.state
    }

    /// The graph's counters, to change before `settle` writes them.
    pub(super) fn state_mut(&mut self) -> &mut GraphState {
        &mut self.state
    }

    /// Refuses a change to a graph that is not running, or whose deadline has passed.
    pub(super) fn require_running(&self) -> Result<()> {
        self.require_open()?;
        if self.state.status != GraphStatus::Running {
            return Err(Error::Conflict(format!("graph {} is not running", self.state.id)));
        }
        Ok(())
    }

    /// Refuses a change to a graph that has finished, or whose deadline has passed.
    pub(super) fn require_open(&self) -> Result<()> {
        if self.state.status.is_terminal() {
            return Err(Error::Conflict(format!(
                "graph {} is {}",
                self.state.id,
                self.state.status.as_str()
            )));
        }
        if self.overdue() {
            return Err(Error::Conflict(format!("graph {} passed its deadline", self.state.id)));
        }
        Ok(())
    }

    /// Asks the store to sweep when the graph's deadline passes (`ExpireDeadlines`).
    pub(super) fn arm_deadline(&mut self) {
        if let Some(at_ms) = self.state.deadline_at_ms {
            self.tx.set_alarm(at_ms);
        }
    }

    /// Whether the graph runs past its deadline.
    pub(super) fn overdue(&self) -> bool {
        self.state.status == GraphStatus::Running
            && self.state.deadline_at_ms.is_some_and(|at_ms| self.tx.now_ms() >= at_ms)
    }

    /// A node's state, or `NotFound`.
    pub(super) fn node(&self, node: &str) -> Result<NodeState> {
        sql::select_node_state(self.tx.db(), self.key(), node)?
            .ok_or_else(|| Error::not_found("node", node))
    }

    /// The first of `targets` (other than `from`) that `from` reaches over edges, if any.
    pub(super) fn first_reached(
        &self,
        from: &str,
        targets: &std::collections::BTreeSet<&str>,
    ) -> Result<Option<String>> {
        let mut seen = std::collections::HashSet::from([from.to_owned()]);
        let mut frontier = vec![from.to_owned()];
        while let Some(next) = frontier.pop() {
            for edge in sql::select_out_edges(self.tx.db(), self.key(), &next)? {
                if edge.to != from && targets.contains(edge.to.as_str()) {
                    return Ok(Some(edge.to));
                }
                if seen.insert(edge.to.clone()) {
                    frontier.push(edge.to);
                }
            }
        }
        Ok(None)
    }

    /// Whether the graph has a node `node`.
    pub(super) fn has_node(&self, node: &str) -> Result<bool> {
        Ok(sql::select_node_state(self.tx.db(), self.key(), node)?.is_some())
    }

    /// The nodes in `status`, in the order they were added.
    pub(super) fn nodes_in(&self, status: NodeStatus) -> Result<Vec<NodeState>> {
        sql::select_nodes_in(self.tx.db(), self.key(), status)
    }

    /// The limits in force.
    pub(super) fn limits(&self) -> &Limits {
        self.tx.limits()
    }

    /// Starts a pending graph: roots fire. Returns false (and does nothing) if not pending.
    pub(super) fn start(&mut self) -> Result<bool> {
        if self.state.status != GraphStatus::Pending {
            return Ok(false);
        }
        let now_ms = self.tx.now_ms();
        self.state.status = GraphStatus::Running;
        self.state.started_at_ms = Some(now_ms);
        self.state.deadline_at_ms = self.state.timeout_ms.map(|ms| now_ms.saturating_add(ms));
        self.arm_deadline();
        let pending = self.nodes_in(NodeStatus::Pending)?;
        for root in pending.into_iter().filter(startable) {
            self.fire(root)?;
        }
        Ok(true)
    }

    /// Adds a node (already checked); on a running graph a node without inputs fires at once
    /// (a Gather waits for an edge).
    pub(super) fn add_node(&mut self, node: NodeState) -> Result<()> {
        let created_seq = self.state.node_count + 1;
        sql::insert_node(self.tx.db(), self.key(), &node, created_seq, self.tx.now_ms())?;
        self.state.add(node.status);
        if self.state.status == GraphStatus::Running && startable(&node) {
            self.fire(node)?;
        }
        Ok(())
    }

    /// Adds an edge between two nodes of the graph; on a running graph a finished source
    /// delivers its tokens on it at once.
    pub(super) fn add_edge(
        &mut self,
        from: &NodeState,
        mut target: NodeState,
        condition: Option<TokenColor>,
    ) -> Result<u64> {
        let seq = self.state.edge_count + 1;
        let encoded = condition.as_ref().map(serde_json::to_string).transpose()?;
        let to = target.id.clone();
        sql::insert_edge(self.tx.db(), self.key(), seq, &from.id, &to, encoded.as_deref())?;
        self.state.edge_count = seq;
        if from.id != to {
            target.in_edges += 1;
            self.save(&target)?;
        }
        if self.state.status == GraphStatus::Running {
            let from_id = from.id.clone();
            let edge = EdgeState { seq, from: from_id, to, condition, tokens: 0, dead: false };
            self.feed_new_edge(from, edge)?;
        }
        Ok(crate::page::from_sql_int(seq))
    }

    /// Moves a ready node to running.
    pub(super) fn start_node(&mut self, mut node: NodeState) -> Result<()> {
        if node.status != NodeStatus::Ready {
            return Err(Error::Conflict(format!(
                "node {} is {}, not ready",
                node.id,
                node.status.as_str()
            )));
        }
        self.set_status(&mut node, NodeStatus::Running)?;
        sql::set_started(self.tx.db(), self.key(), &node.id, self.tx.now_ms())?;
        self.emit(&GraphEvent::NodeStarted { node_id: node.id })
    }

    /// Finishes a ready or running node as a caller (or a child graph) says.
    pub(super) fn finish_node(&mut self, node: &NodeState, outcome: NodeEnd) -> Result<()> {
        if !matches!(node.status, NodeStatus::Ready | NodeStatus::Running) {
            return Err(Error::Conflict(format!(
                "node {} is {}, not ready or running",
                node.id,
                node.status.as_str()
            )));
        }
        self.finish(&node.id, outcome)
    }

    /// Changes the join of a pending node; on a running graph the node may fire or be
    /// skipped at once under its new rule.
    pub(super) fn set_join(&mut self, mut node: NodeState, join: JoinType) -> Result<()> {
        if node.status != NodeStatus::Pending {
            return Err(Error::Conflict(format!(
                "node {} is {}, not pending",
                node.id,
                node.status.as_str()
            )));
        }
        node.join = join;
        self.save(&node)?;
        if self.state.status != GraphStatus::Running || node.in_edges == 0 {
            return Ok(());
        }
        if enabled(&node) {
            return self.fire(node);
        }
        if disabled(&node) {
            self.work.push((node.id, NodeEnd::Skipped));
        }
        Ok(())
    }

    /// Resets a running node to ready (recovery).
    pub(super) fn reset(&mut self, mut node: NodeState) -> Result<()> {
        self.set_status(&mut node, NodeStatus::Ready)
    }

    /// Writes a `node_ready` event for a ready node (recovery).
    pub(super) fn announce(&mut self, node: &NodeState) -> Result<()> {
        let event = GraphEvent::NodeReady { node_id: node.id.clone(), kind: node.kind.clone() };
        self.emit(&event)
    }

    /// Runs a finished graph again (`Graphs::reopen`; the caller checked the graph and the
    /// nodes): the graph is running, `chosen` fire again, and the nodes its end left behind
    /// are taken up again: running ones are reset and ready ones announced (a Gather among
    /// them finishes now), and pending ones fire or are skipped by their counters.
    pub(super) fn reopen(&mut self, chosen: Vec<NodeState>) -> Result<()> {
        let now_ms = self.tx.now_ms();
        self.state.status = GraphStatus::Running;
        self.state.finished_at_ms = None;
        self.state.error = None;
        self.state.failed_node_id = None;
        self.state.deadline_at_ms = self.state.timeout_ms.map(|ms| now_ms.saturating_add(ms));
        self.arm_deadline();
        let node_ids = chosen.iter().map(|node| node.id.clone()).collect();
        self.emit(&GraphEvent::GraphReopened { graph_id: self.state.id.clone(), node_ids })?;
        self.take_up_left_behind()?;
        for node in chosen {
            // Fresh counters: an earlier firing may have changed them.
            let node = self.node(&node.id)?;
            self.fire(node)?;
        }
        for node in self.nodes_in(NodeStatus::Pending)? {
            if node.in_edges > 0 && enabled(&node) {
                self.fire(node)?;
            } else if node.in_edges > 0 && disabled(&node) {
                self.work.push((node.id, NodeEnd::Skipped));
            }
        }
        Ok(())
    }

    /// The ready and running nodes a failed graph's end left: running ones go back to ready,
    /// and each is announced again; a Gather among them finishes with its inputs.
    fn take_up_left_behind(&mut self) -> Result<()> {
        for node in self.nodes_in(NodeStatus::Running)? {
            if node.kind != "gather" {
                self.reset(node)?;
            }
        }
        let mut left = self.nodes_in(NodeStatus::Ready)?;
        left.extend(self.nodes_in(NodeStatus::Running)?);
        for node in left {
            if node.kind == "gather" {
                let output = self.gather(&node)?;
                self.work.push((node.id, NodeEnd::Done(Some(output))));
            } else {
                self.announce(&node)?;
            }
        }
        Ok(())
    }

    /// Ends the graph with `status` (failed or cancelled; completion comes from `settle`).
    pub(super) fn end(
        &mut self,
        status: GraphStatus,
        node: Option<&str>,
        error: Option<String>,
    ) -> Result<()> {
        self.work.clear();
        self.state.status = status;
        self.state.finished_at_ms = Some(self.tx.now_ms());
        self.state.failed_node_id = node.map(str::to_owned);
        self.state.error.clone_from(&error);
        let graph_id = self.state.id.clone();
        let event = match status {
            GraphStatus::Complete => GraphEvent::GraphDone { graph_id },
            GraphStatus::Cancelled => GraphEvent::GraphCancelled { graph_id },
            _ => GraphEvent::GraphFailed {
                graph_id,
                node_id: node.map(str::to_owned),
                error: excerpt(error.as_deref().unwrap_or("")),
            },
        };
        self.emit(&event)?;
        self.tx.ring_bell();
        self.ended = Some(Ended {
            graph_id: self.state.id.clone(),
            status,
            error,
            parent_graph_id: self.state.parent_graph_id.clone(),
            parent_node_id: self.state.parent_node_id.clone(),
        });
        Ok(())
    }

    /// Finishes the queued work, completes the graph if nothing is ready or running, and
    /// writes the graph's counters. Returns the graph's end, if it ended.
    pub(super) fn settle(mut self) -> Result<Option<Ended>> {
        while let Some((node, outcome)) = self.work.pop() {
            self.finish(&node, outcome)?;
        }
        let idle = self.state.count(NodeStatus::Ready) + self.state.count(NodeStatus::Running);
        if self.state.status == GraphStatus::Running && idle == 0 {
            self.complete()?;
        }
        sql::update_state(self.tx.db(), self.tx.tenant(), &self.state, self.tx.now_ms())?;
        Ok(self.ended)
    }

    fn key(&self) -> Key<'_> {
        Key { tenant: self.tx.tenant(), graph: &self.state.id }
    }

    /// Nothing can fire any more: the nodes still pending are skipped and the graph is done.
    fn complete(&mut self) -> Result<()> {
        let pending = self.nodes_in(NodeStatus::Pending)?;
        for mut node in pending {
            self.set_status(&mut node, NodeStatus::Skipped)?;
            self.emit(&GraphEvent::NodeSkipped { node_id: node.id })?;
        }
        self.end(GraphStatus::Complete, None, None)
    }

    /// Records how a node finished and routes its tokens.
    fn finish(&mut self, node_id: &str, outcome: NodeEnd) -> Result<()> {
        if self.state.status != GraphStatus::Running {
            return Ok(());
        }
        let mut node = self.node(node_id)?;
        let tokens = match outcome {
            NodeEnd::Skipped if node.status != NodeStatus::Pending => return Ok(()),
            NodeEnd::Skipped => {
                self.set_status(&mut node, NodeStatus::Skipped)?;
                self.emit(&GraphEvent::NodeSkipped { node_id: node.id.clone() })?;
                Vec::new()
            }
            NodeEnd::Done(output) => self.record_done(&mut node, output)?,
            NodeEnd::Failed(error) => self.record_failed(&mut node, &error)?,
        };
        self.route(&node, &tokens)
    }

    fn record_done(
        &mut self,
        node: &mut NodeState,
        output: Option<NodeOutput>,
    ) -> Result<Vec<Token>> {
        self.set_status(node, NodeStatus::Complete)?;
        let encoded = output.as_ref().map(serde_json::to_string).transpose()?;
        let now_ms = self.tx.now_ms();
        sql::set_result(self.tx.db(), self.key(), &node.id, encoded.as_deref(), None, now_ms)?;
        self.emit(&GraphEvent::NodeDone { node_id: node.id.clone() })?;
        Ok(match output {
            Some(output) => output.tokens().into_iter().cloned().collect(),
            None => vec![Token::ok()],
        })
    }

    fn record_failed(&mut self, node: &mut NodeState, error: &str) -> Result<Vec<Token>> {
        self.set_status(node, NodeStatus::Failed)?;
        let now_ms = self.tx.now_ms();
        sql::set_result(self.tx.db(), self.key(), &node.id, None, Some(error), now_ms)?;
        let event = GraphEvent::NodeFailed { node_id: node.id.clone(), error: excerpt(error) };
        self.emit(&event)?;
        Ok(vec![Token::error(error)])
    }

    /// Delivers every token on every outbound edge that accepts it; fails the graph when the
    /// node failed and no edge accepts its error token; then tells each target, and marks the edges that got
    /// nothing dead if the node stays finished.
    fn route(&mut self, node: &NodeState, tokens: &[Token]) -> Result<()> {
        let mut edges = sql::select_out_edges(self.tx.db(), self.key(), &node.id)?;
        let failed = node.status == NodeStatus::Failed;
        if let Some(unhandled) = unaccepted_error(tokens, &edges).filter(|_| failed) {
            let message = error_message(unhandled);
            return self.end(GraphStatus::Failed, Some(&node.id), Some(message));
        }
        let mut arrivals = Vec::new();
        for edge in &mut edges {
            let matched: Vec<&Token> = tokens.iter().filter(|t| accepts(edge, &t.color)).collect();
            if !matched.is_empty() {
                arrivals.push(self.deliver(node, edge, &matched)?);
            }
        }
        // Only a token on its own self-loop fires the node again here (other targets fire
        // themselves; a Gather's completion waits on the work list).
        let self_loop = arrivals.iter().any(|arrival| arrival.to == node.id);
        for arrival in arrivals {
            if self.state.status != GraphStatus::Running {
                return Ok(());
            }
            self.arrive(&node.id, arrival)?;
        }
        let fired_again = self_loop && self.state.status == GraphStatus::Running;
        if !fired_again {
            self.mark_dead(&node.id, &mut edges)?;
        }
        Ok(())
    }

    /// Writes the tokens on an edge; returns what its target must hear.
    fn deliver(
        &mut self,
        source: &NodeState,
        edge: &mut EdgeState,
        tokens: &[&Token],
    ) -> Result<Arrival> {
        let arrival = Arrival {
            to: edge.to.clone(),
            was_empty: edge.tokens == 0,
            was_dead: edge.dead,
            source_fired_seq: source.fired_seq,
        };
        for token in tokens {
            self.state.token_count += 1;
            let encoded = serde_json::to_string(token)?;
            sql::insert_token(self.tx.db(), self.key(), self.state.token_count, edge, &encoded)?;
        }
        edge.tokens += i64::try_from(tokens.len()).unwrap_or(i64::MAX);
        edge.dead = false;
        sql::update_edge(self.tx.db(), self.key(), edge)?;
        Ok(arrival)
    }

    /// A token reached `arrival.to` from `source`: the target fires if its rule says so.
    fn arrive(&mut self, source: &str, arrival: Arrival) -> Result<()> {
        let mut target = self.node(&arrival.to)?;
        let self_loop = source == target.id;
        if !self_loop {
            target.in_filled += i64::from(arrival.was_empty);
            target.in_dead -= i64::from(arrival.was_dead);
        }
        let fires = match target.status {
            NodeStatus::Pending | NodeStatus::Skipped => enabled(&target),
            NodeStatus::Complete | NodeStatus::Failed => {
                self_loop || (enabled(&target) && self.fires_again(&target, source, &arrival)?)
            }
            NodeStatus::Ready | NodeStatus::Running => false,
        };
        if fires { self.fire(target) } else { self.save(&target) }
    }

    /// Whether a new token from `source` fires the finished, enabled `target` again.
    ///
    /// A token on an edge that already held one is a new round from a source that ran again:
    /// it fires (the seed's rule, which makes loops work). A first token on an edge fires an
    /// `All` join only if it was pending (an edge added after it ran brings inputs, not a
    /// rerun), and an `Any` join only when the token closes a loop: the source fired after
    /// the target last did and is reachable from it. So a late sibling branch does not run an
    /// `Any` join twice. The walk runs only for such a first token, never on the common path.
    fn fires_again(&self, target: &NodeState, source: &str, arrival: &Arrival) -> Result<bool> {
        if !arrival.was_empty {
            return Ok(true);
        }
        if target.join == JoinType::All || arrival.source_fired_seq <= target.fired_seq {
            return Ok(false);
        }
        // `source` is not `target` here: a self-loop's token fires without asking.
        let source = std::collections::BTreeSet::from([source]);
        Ok(self.first_reached(&target.id, &source)?.is_some())
    }

    /// The edges of a finished node that hold no token are dead: their targets may no longer
    /// be enabled.
    fn mark_dead(&mut self, source: &str, edges: &mut [EdgeState]) -> Result<()> {
        for edge in edges.iter_mut().filter(|e| e.tokens == 0 && !e.dead && e.to != source) {
            edge.dead = true;
            sql::update_edge(self.tx.db(), self.key(), edge)?;
            let mut target = self.node(&edge.to)?;
            target.in_dead += 1;
            self.save(&target)?;
            if target.status == NodeStatus::Pending && disabled(&target) {
                self.work.push((target.id, NodeEnd::Skipped));
            }
        }
        Ok(())
    }

    /// Makes a node ready (a Gather runs at once), within the loop limit.
    fn fire(&mut self, mut node: NodeState) -> Result<()> {
        let limit = i64::from(self.tx.limits().loop_refires_max);
        if node.fires > limit {
            let error = format!("node {} fired again more than {limit} times", node.id);
            return self.end(GraphStatus::Failed, Some(&node.id), Some(error));
        }
        node.fires += 1;
        self.state.fire_count += 1;
        node.fired_seq = self.state.fire_count;
        if node.status.is_finished() {
            self.revive_out_edges(&node.id)?;
        }
        if node.kind == "gather" {
            self.set_status(&mut node, NodeStatus::Running)?;
            let output = self.gather(&node)?;
            let encoded = serde_json::to_string(&output)?;
            if let Err(too_large) = self.tx.limits().check_payload("gather output bytes", &encoded)
            {
                let error = too_large.to_string();
                return self.end(GraphStatus::Failed, Some(&node.id), Some(error));
            }
            self.work.push((node.id, NodeEnd::Done(Some(output))));
            return Ok(());
        }
        self.set_status(&mut node, NodeStatus::Ready)?;
        self.announce(&node)
    }

    /// A node fires again: its dead edges may carry tokens once more.
    fn revive_out_edges(&mut self, source: &str) -> Result<()> {
        let edges = sql::select_out_edges(self.tx.db(), self.key(), source)?;
        for mut edge in edges.into_iter().filter(|edge| edge.dead) {
            edge.dead = false;
            sql::update_edge(self.tx.db(), self.key(), &edge)?;
            if edge.to != source {
                let mut target = self.node(&edge.to)?;
                target.in_dead -= 1;
                self.save(&target)?;
            }
        }
        Ok(())
    }

    /// A Gather's output: its inputs, as its strategy says.
    fn gather(&self, node: &NodeState) -> Result<NodeOutput> {
        let NodeSpec::Gather { strategy } = node.spec()? else {
            return Err(Error::Corrupt(format!("node {} is not a gather", node.id)));
        };
        let mut tokens = sql::select_inputs(self.tx.db(), self.key(), &node.id)?;
        if let GatherStrategy::First { n } = strategy {
            tokens.truncate(n);
        }
        Ok(NodeOutput::Many { tokens })
    }

    /// A new edge on a running graph: a finished source delivers what it produced on it.
    fn feed_new_edge(&mut self, from: &NodeState, mut edge: EdgeState) -> Result<()> {
        let tokens = match from.status {
            NodeStatus::Complete | NodeStatus::Failed => self.produced(from)?,
            NodeStatus::Skipped => Vec::new(),
            NodeStatus::Pending | NodeStatus::Ready | NodeStatus::Running => return Ok(()),
        };
        let matched: Vec<&Token> = tokens.iter().filter(|t| accepts(&edge, &t.color)).collect();
        if !matched.is_empty() {
            let arrival = self.deliver(from, &mut edge, &matched)?;
            return self.arrive(&from.id, arrival);
        }
        self.mark_dead(&from.id, std::slice::from_mut(&mut edge))
    }

    /// The tokens a finished node produced last.
    fn produced(&self, node: &NodeState) -> Result<Vec<Token>> {
        let whole = sql::select_node(self.tx.db(), self.key(), &node.id)?
            .ok_or_else(|| Error::not_found("node", &node.id))?;
        Ok(match (node.status, whole.output, whole.error) {
            (NodeStatus::Failed, _, error) => vec![Token::error(error.as_deref().unwrap_or(""))],
            (_, Some(output), _) => output.tokens().into_iter().cloned().collect(),
            (_, None, _) => vec![Token::ok()],
        })
    }

    /// Moves a node to `to`, in its row and in the graph's counts.
    fn set_status(&mut self, node: &mut NodeState, to: NodeStatus) -> Result<()> {
        self.state.shift(node.status, to);
        node.status = to;
        self.save(node)
    }

    fn save(&self, node: &NodeState) -> Result<()> {
        sql::update_node_state(self.tx.db(), self.key(), node, self.tx.now_ms())
    }

    fn emit(&mut self, event: &GraphEvent) -> Result<()> {
        let payload = serde_json::to_value(event)?;
        events::append(self.tx, &self.stream, event.event_type(), payload, None)?;
        Ok(())
    }
}

/// What a target hears when tokens arrive on one of its edges.
struct Arrival {
    to: String,
    was_empty: bool,
    was_dead: bool,
    /// When the token's source last fired (see `Net::fires_again`).
    source_fired_seq: i64,
}

impl NodeStatus {
    /// Complete, failed or skipped: finished, though a loop may fire it again.
    fn is_finished(self) -> bool {
        matches!(self, NodeStatus::Complete | NodeStatus::Failed | NodeStatus::Skipped)
    }
}

/// Whether a node without inbound edges fires when its graph starts (or when it is added to
/// a running graph). A Gather waits for an edge: it has nothing to gather yet.
fn startable(node: &NodeState) -> bool {
    node.in_edges == 0 && node.kind != "gather"
}

/// Whether the node's join rule is met.
fn enabled(node: &NodeState) -> bool {
    match node.join {
        JoinType::All => node.in_edges > 0 && node.in_filled == node.in_edges,
        JoinType::Any => node.in_filled > 0,
    }
}

/// Whether a pending node can no longer be enabled by its inbound edges.
fn disabled(node: &NodeState) -> bool {
    match node.join {
        JoinType::All => node.in_dead > 0,
        JoinType::Any => node.in_dead >= node.in_edges,
    }
}

fn accepts(edge: &EdgeState, color: &TokenColor) -> bool {
    edge.condition.as_ref().is_none_or(|wanted| wanted == color)
}

/// The first error token that no edge accepts.
fn unaccepted_error<'t>(tokens: &'t [Token], edges: &[EdgeState]) -> Option<&'t Token> {
    tokens
        .iter()
        .filter(|token| token.color == TokenColor::Error)
        .find(|token| !edges.iter().any(|edge| accepts(edge, &token.color)))
}

fn error_message(token: &Token) -> String {
    let message = token.data.as_ref().and_then(|data| data.get("message"));
    match message {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// At most the first 1024 bytes of `text`, cut at a character boundary.
pub(super) fn excerpt(text: &str) -> String {
    let mut end = text.len().min(1024);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The output a SubGraph node completes with.
pub(super) fn child_output(child_graph_id: &str) -> NodeOutput {
    NodeOutput::ok(json!({ "child_graph_id": child_graph_id }))
}
