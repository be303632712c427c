//! The model of one graph (DESIGN.md §5.5) as a caller can hold it without re-running the
//! engine: the nodes and edges it added, and the statuses it last saw. It predicts which calls
//! the engine must accept (`start_node` only on a ready node of a running graph, `complete` and
//! `fail` only on a ready or running one, no growth of a finished graph, a finished graph cancelled is
//! refused unless it was cancelled, `reopen` only of a complete or failed graph at failed nodes,
//! none following another) and checks what must hold after every call: exactly the
//! nodes and edges added, counts that match the nodes, statuses that never leave a finished
//! state (until a reopen), a DAG's nodes firing at most once (a bounded number more after a
//! reopen), a graph that has finished staying finished, the
//! audit clean, and at the end the firing rule against the edges' token counts.

use std::collections::BTreeMap;

use spindle::{Edge, Graph, GraphStatus, JoinType, Node, NodeStatus, Store};

use super::{Expect, Refusal};

/// What the model knows of one node.
#[derive(Debug, Clone)]
pub struct ModelNode {
    pub join: JoinType,
    /// The status the last check saw.
    pub status: NodeStatus,
    /// Added while the graph was running (its edge comes after it: it may run unenabled).
    pub late: bool,
}

/// One graph: its nodes, its edges `(from, to)`, and the status last seen.
#[derive(Debug, Clone)]
pub struct GraphModel {
    pub id: String,
    pub status: GraphStatus,
    pub nodes: BTreeMap<String, ModelNode>,
    pub edges: Vec<(String, String)>,
    /// Whether every edge goes from an earlier node to a later one (no loops).
    pub acyclic: bool,
    /// How many times `reopen` ran it again: each may fire a node once more, and may take a
    /// finished node out of its end.
    pub reruns: u32,
}

fn is_finished(status: NodeStatus) -> bool {
    matches!(status, NodeStatus::Complete | NodeStatus::Failed | NodeStatus::Skipped)
}

impl GraphModel {
    /// A graph just created.
    pub fn new(id: &str) -> Self {
        let (nodes, edges) = (BTreeMap::new(), Vec::new());
        let (status, acyclic, reruns) = (GraphStatus::Pending, true, 0);
        Self { id: id.to_owned(), status, nodes, edges, acyclic, reruns }
    }

    /// Whether nodes and edges may still be added.
    pub fn open(&self) -> bool {
        !self.status.is_terminal()
    }

    /// What `add_node` with `id` must answer.
    pub fn add_node(&mut self, id: &str, join: JoinType) -> Expect<()> {
        if !self.open() || self.nodes.contains_key(id) {
            return Err(Refusal::Conflict);
        }
        let late = self.status == GraphStatus::Running;
        self.nodes.insert(id.to_owned(), ModelNode { join, status: NodeStatus::Pending, late });
        Ok(())
    }

    /// What `add_edge` must answer.
    pub fn add_edge(&mut self, from: &str, to: &str) -> Expect<()> {
        if !self.open() {
            return Err(Refusal::Conflict);
        }
        if !self.nodes.contains_key(from) || !self.nodes.contains_key(to) {
            return Err(Refusal::NotFound);
        }
        self.edges.push((from.to_owned(), to.to_owned()));
        Ok(())
    }

    /// What `start_node` must answer.
    pub fn start_node(&self, node: &str) -> Expect<()> {
        self.node_in(node, NodeStatus::Ready)
    }

    /// What `complete_node` and `fail_node` must answer (a ready node may be finished
    /// without being started).
    pub fn finish_node(&self, node: &str) -> Expect<()> {
        self.node_in(node, NodeStatus::Running).or_else(|_| self.node_in(node, NodeStatus::Ready))
    }

    fn node_in(&self, node: &str, wanted: NodeStatus) -> Expect<()> {
        if self.status != GraphStatus::Running {
            return Err(Refusal::Conflict);
        }
        match self.nodes.get(node) {
            None => Err(Refusal::NotFound),
            Some(found) if found.status == wanted => Ok(()),
            Some(_) => Err(Refusal::Conflict),
        }
    }

    /// What `cancel` must answer.
    pub fn cancel(&self) -> Expect<()> {
        match self.status {
            GraphStatus::Complete | GraphStatus::Failed => Err(Refusal::Conflict),
            _ => Ok(()),
        }
    }

    /// What `reopen` with `nodes` must answer (the graph is never a child here). On success
    /// the graph runs again.
    pub fn reopen(&mut self, nodes: &[&str]) -> Expect<()> {
        let mut seen = std::collections::BTreeSet::new();
        if nodes.is_empty() || !nodes.iter().all(|node| seen.insert(*node)) {
            return Err(Refusal::InvalidInput);
        }
        if !matches!(self.status, GraphStatus::Complete | GraphStatus::Failed) {
            return Err(Refusal::Conflict);
        }
        for node in nodes {
            match self.nodes.get(*node).map(|n| n.status) {
                None => return Err(Refusal::NotFound),
                Some(NodeStatus::Failed) => {}
                Some(_) => return Err(Refusal::Conflict),
            }
        }
        if nodes.iter().any(|from| nodes.iter().any(|to| to != from && self.reaches(from, to))) {
            return Err(Refusal::Conflict);
        }
        self.status = GraphStatus::Running;
        self.reruns += 1;
        Ok(())
    }

    /// Whether `to` can be reached from `from` over edges.
    fn reaches(&self, from: &str, to: &str) -> bool {
        let mut seen = std::collections::BTreeSet::from([from]);
        let mut frontier = vec![from];
        while let Some(next) = frontier.pop() {
            for (_, target) in self.edges.iter().filter(|(source, _)| source == next) {
                if target == to {
                    return true;
                }
                if seen.insert(target.as_str()) {
                    frontier.push(target.as_str());
                }
            }
        }
        false
    }

    /// Reads the graph back, checks it against the model and every invariant, and takes the
    /// statuses it saw. Panics with `context` on the first violation.
    pub fn check(&mut self, store: &Store, context: &str) -> Graph {
        let graphs = store.graphs();
        let summary = graphs.get(&self.id).unwrap_or_else(|e| panic!("{context}: get: {e}"));
        let nodes = graphs.nodes(&self.id).unwrap_or_else(|e| panic!("{context}: nodes: {e}"));
        check_counts(&summary, &nodes, context);
        let ids: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        let model_ids: Vec<&str> = self.nodes.keys().map(String::as_str).collect();
        assert_eq!(ids.len(), model_ids.len(), "{context}: nodes {ids:?} vs {model_ids:?}");
        if self.status.is_terminal() {
            assert_eq!(summary.status, self.status, "{context}: a finished graph changed");
        }
        let node_count = self.nodes.len();
        for node in &nodes {
            let model = self.nodes.get_mut(&node.id);
            let model = model.unwrap_or_else(|| panic!("{context}: unknown node {}", node.id));
            assert_eq!(node.join, model.join, "{context}: join of {}", node.id);
            // A node that gets edges while the graph runs may be revived by them (a skipped
            // node whose new predecessor delivers a token fires: "a Gather enabled by a late
            // edge completes"), so only nodes without late inbound edges must stay finished.
            if is_finished(model.status) && !model.late && self.reruns == 0 {
                assert_eq!(node.status, model.status, "{context}: {} left its end", node.id);
            }
            if self.acyclic {
                // A reopen fires its nodes once more, and a node after them once per new
                // token that reaches it on an edge that already carried one.
                let most = 1 + self.reruns as usize * node_count;
                assert!(
                    node.fires as usize <= most,
                    "{context}: {} fired {} times",
                    node.id,
                    node.fires
                );
            }
            if summary.status == GraphStatus::Complete {
                assert!(is_finished(node.status), "{context}: {node:?} unfinished");
            }
            model.status = node.status;
        }
        self.status = summary.status;
        summary
    }

    /// The audit is clean, the edges are exactly the ones added, and (once finished) each
    /// node's join agrees with the tokens on its inbound edges.
    pub fn check_deep(&self, store: &Store, context: &str) {
        let graphs = store.graphs();
        let problems = graphs.audit(&self.id).unwrap_or_else(|e| panic!("{context}: audit: {e}"));
        assert!(problems.is_empty(), "{context}: audit: {problems:?}");
        let edges: Vec<Edge> = graphs.edges(&self.id).expect("edges");
        let mut got: Vec<(String, String)> =
            edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
        let mut expected = self.edges.clone();
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "{context}: edges");
        if !self.status.is_terminal() || !self.acyclic {
            return;
        }
        let mut inbound: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for edge in &edges {
            inbound.entry(edge.to.as_str()).or_default().push(edge.tokens);
        }
        let nodes = graphs.nodes(&self.id).expect("nodes");
        for node in &nodes {
            let tokens = inbound.get(node.id.as_str()).cloned().unwrap_or_default();
            let late = self.nodes.get(&node.id).is_some_and(|n| n.late);
            check_join(node, &tokens, self.status, late, context);
        }
    }
}

/// The graph's per-status counts match its nodes.
pub fn check_counts(summary: &Graph, all: &[Node], context: &str) {
    let count = |status| all.iter().filter(|node| node.status == status).count() as u64;
    let c = summary.counts;
    let tallied = [c.pending, c.ready, c.running, c.complete, c.failed, c.skipped];
    let expected = [
        count(NodeStatus::Pending),
        count(NodeStatus::Ready),
        count(NodeStatus::Running),
        count(NodeStatus::Complete),
        count(NodeStatus::Failed),
        count(NodeStatus::Skipped),
    ];
    assert_eq!(tallied, expected, "{context}: the graph's counts drifted");
    assert_eq!(summary.node_count, all.len() as u64, "{context}: node count");
}

/// A node that ran had its join met (unless it was added late, before its edge); a skipped
/// node of a complete graph could not have had it met.
pub fn check_join(node: &Node, tokens: &[u64], status: GraphStatus, late: bool, context: &str) {
    let filled = tokens.iter().filter(|&&count| count > 0).count();
    let met = match node.join {
        JoinType::All => filled == tokens.len(),
        JoinType::Any => tokens.is_empty() || filled > 0,
        other => panic!("{context}: the model has no rule for the join {other:?}"),
    };
    let ran = matches!(node.status, NodeStatus::Complete | NodeStatus::Failed);
    assert!(!ran || met || late, "{context}: {node:?} ran with inputs {tokens:?}");
    if status == GraphStatus::Complete && node.status == NodeStatus::Skipped {
        assert!(!met || tokens.is_empty(), "{context}: {node:?} skipped with {tokens:?}");
    }
}
