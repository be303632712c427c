//! The graph engine's SQL: every statement, and the mapping of rows back to values.
//!
//! Every statement names the tenant and the graph. Where the planner, without statistics,
//! would walk the tenant's whole primary key instead of a narrower index, the statement names
//! the index (`INDEXED BY`) or orders by the index's columns. The engine reads and writes a node's
//! counters as one row (`NodeState`) and the graph's as another (`GraphState`), so a step
//! costs a few primary-key reads and writes per node it touches.
//!
//! Creating a graph and writing back a changed status also write its count in `graph_counts`
//! (per tenant, kind, root and status), in the same op (`move_count`). `count_by_status` reads
//! it for the filters it serves (no metadata, or only a `kind`), and reads the graphs for any
//! other.

use crate::core::db::{Db, OwnedArg, Query, Row, args, borrow_args};

use super::{
    Edge, Graph, GraphFilter, GraphStatus, JoinType, Node, NodeCounts, NodeSpec, NodeStatus, Token,
    TokenColor,
};
use crate::error::{Error, Result};
use crate::page::{Page, from_sql_int, sql_limit};

/// Which graph of which tenant a statement is about.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key<'a> {
    pub(super) tenant: &'a str,
    pub(super) graph: &'a str,
}

/// The columns `state_from_row` reads, in order.
macro_rules! state_columns {
    () => {
        "graph_id, status, parent_graph_id, parent_node_id, node_count, edge_count, child_count,
         token_count, fire_count, pending, ready, running, complete, failed, skipped, timeout_ms,
         deadline_at_ms, error, failed_node_id, started_at_ms, finished_at_ms"
    };
}

/// What the engine reads and writes of a graph (everything but its metadata).
#[derive(Debug, Clone)]
pub(super) struct GraphState {
    pub(super) id: String,
    pub(super) status: GraphStatus,
    /// The status as read: `update_state` moves the graph's count when `status` differs.
    stored_status: GraphStatus,
    pub(super) parent_graph_id: Option<String>,
    pub(super) parent_node_id: Option<String>,
    pub(super) node_count: i64,
    pub(super) edge_count: i64,
    pub(super) child_count: i64,
    pub(super) token_count: i64,
    pub(super) fire_count: i64,
    /// pending, ready, running, complete, failed, skipped.
    pub(super) counts: [i64; 6],
    pub(super) timeout_ms: Option<i64>,
    pub(super) deadline_at_ms: Option<i64>,
    pub(super) error: Option<String>,
    pub(super) failed_node_id: Option<String>,
    pub(super) started_at_ms: Option<i64>,
    pub(super) finished_at_ms: Option<i64>,
}

impl GraphState {
    /// How many nodes are in `status`.
    pub(super) fn count(&self, status: NodeStatus) -> i64 {
        self.counts[slot(status)]
    }

    /// Moves one node from `from` to `to` in the counts.
    pub(super) fn shift(&mut self, from: NodeStatus, to: NodeStatus) {
        self.counts[slot(from)] -= 1;
        self.counts[slot(to)] += 1;
    }

    /// Counts one new node in `status`.
    pub(super) fn add(&mut self, status: NodeStatus) {
        self.counts[slot(status)] += 1;
        self.node_count += 1;
    }

    fn node_counts(&self) -> NodeCounts {
        let count = |status| from_sql_int(self.count(status));
        NodeCounts {
            pending: count(NodeStatus::Pending),
            ready: count(NodeStatus::Ready),
            running: count(NodeStatus::Running),
            complete: count(NodeStatus::Complete),
            failed: count(NodeStatus::Failed),
            skipped: count(NodeStatus::Skipped),
        }
    }
}

fn slot(status: NodeStatus) -> usize {
    match status {
        NodeStatus::Pending => 0,
        NodeStatus::Ready => 1,
        NodeStatus::Running => 2,
        NodeStatus::Complete => 3,
        NodeStatus::Failed => 4,
        NodeStatus::Skipped => 5,
    }
}

/// What the engine reads and writes of a node (everything but its output).
#[derive(Debug, Clone)]
pub(super) struct NodeState {
    pub(super) id: String,
    pub(super) kind: String,
    pub(super) spec: String,
    pub(super) join: JoinType,
    pub(super) status: NodeStatus,
    pub(super) in_edges: i64,
    pub(super) in_filled: i64,
    pub(super) in_dead: i64,
    pub(super) fires: i64,
    pub(super) fired_seq: i64,
}

impl NodeState {
    /// The spec, decoded.
    pub(super) fn spec(&self) -> Result<NodeSpec> {
        Ok(serde_json::from_str(&self.spec)?)
    }
}

/// What the engine reads and writes of an edge.
#[derive(Debug, Clone)]
pub(super) struct EdgeState {
    pub(super) seq: i64,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) condition: Option<TokenColor>,
    pub(super) tokens: i64,
    pub(super) dead: bool,
}

/// A new graph.
pub(super) fn insert_graph(
    db: Db<'_>,
    key: Key<'_>,
    parent: Option<&str>,
    metadata: &str,
    now_ms: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.graphs (tenant_id, graph_id, parent_graph_id, metadata, status,
                             created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?5)",
        args![key.tenant, key.graph, parent, metadata, now_ms],
    )?;
    move_count(db, key, None, GraphStatus::Pending)
}

/// The graph's state, if it exists.
pub(super) fn select_state(db: Db<'_>, key: Key<'_>) -> Result<Option<GraphState>> {
    let row = db.query_opt(
        concat!(
            "SELECT ",
            state_columns!(),
            " FROM main.graphs WHERE tenant_id = ?1 AND graph_id = ?2"
        ),
        args![key.tenant, key.graph],
        raw_state,
    )?;
    row.map(RawState::decode).transpose()
}

/// Writes back everything of `state` the engine changes.
pub(super) fn update_state(
    db: Db<'_>,
    tenant: &str,
    state: &GraphState,
    now_ms: i64,
) -> Result<()> {
    let [pending, ready, running, complete, failed, skipped] = state.counts;
    let changed = db.execute(
        "UPDATE main.graphs SET status = ?3, parent_node_id = ?4, node_count = ?5, edge_count = ?6,
                child_count = ?7, token_count = ?8, fire_count = ?9, pending = ?10, ready = ?11,
                running = ?12, complete = ?13, failed = ?14, skipped = ?15, timeout_ms = ?16,
                deadline_at_ms = ?17, error = ?18, failed_node_id = ?19, started_at_ms = ?20,
                finished_at_ms = ?21, updated_at_ms = ?22
         WHERE tenant_id = ?1 AND graph_id = ?2",
        args![
            tenant,
            state.id,
            state.status.as_str(),
            state.parent_node_id,
            state.node_count,
            state.edge_count,
            state.child_count,
            state.token_count,
            state.fire_count,
            pending,
            ready,
            running,
            complete,
            failed,
            skipped,
            state.timeout_ms,
            state.deadline_at_ms,
            state.error,
            state.failed_node_id,
            state.started_at_ms,
            state.finished_at_ms,
            now_ms,
        ],
    )?;
    Error::expect_one(changed, "graph", &state.id)?;
    if state.status != state.stored_status {
        let key = Key { tenant, graph: &state.id };
        move_count(db, key, Some(state.stored_status), state.status)?;
    }
    Ok(())
}

/// A graph's kind as `graph_counts` keys it (the metadata's top-level "kind" when it is a
/// string, else ''), in SQLite's SQL and in PostgreSQL's (`graph_count_kind`, a function of
/// the schema: it reads metadata `jsonb` cannot, as ''). Every count of a graph reads its kind
/// through these, and so do the recount and the migration that fills `graph_counts`.
macro_rules! graph_kind {
    (sqlite) => {
        "CASE WHEN json_type(metadata, '$.kind') = 'text' THEN metadata ->> '$.kind' ELSE '' END"
    };
    (postgres) => {
        "graph_count_kind(metadata)"
    };
}

/// Moves the graph at `key` from `from` (`None`: a new graph) to `to` in `graph_counts`, under
/// its kind and root (read from its row), in the op that moves it; a count that reaches 0
/// goes (see the last section of `schema.sql`).
fn move_count(db: Db<'_>, key: Key<'_>, from: Option<GraphStatus>, to: GraphStatus) -> Result<()> {
    let (kind, root): (String, i64) = db.query_one(
        Query::per_engine(
            concat!(
                "SELECT ",
                graph_kind!(sqlite),
                ", parent_graph_id IS NULL FROM main.graphs WHERE tenant_id = ?1 AND graph_id = ?2"
            ),
            concat!(
                "SELECT ",
                graph_kind!(postgres),
                ", (parent_graph_id IS NULL)::int FROM main.graphs
                 WHERE tenant_id = ?1 AND graph_id = ?2"
            ),
        ),
        args![key.tenant, key.graph],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    if let Some(from) = from {
        db.execute(
            "DELETE FROM main.graph_counts
             WHERE tenant_id = ?1 AND kind = ?2 AND root = ?3 AND status = ?4 AND total <= 1",
            args![key.tenant, kind, root, from.as_str()],
        )?;
        db.execute(
            "UPDATE main.graph_counts SET total = total - 1
             WHERE tenant_id = ?1 AND kind = ?2 AND root = ?3 AND status = ?4",
            args![key.tenant, kind, root, from.as_str()],
        )?;
    }
    db.execute(
        "INSERT INTO main.graph_counts AS c (tenant_id, kind, root, status, total)
         VALUES (?1, ?2, ?3, ?4, 1)
         ON CONFLICT (tenant_id, kind, root, status) DO UPDATE SET total = c.total + 1",
        args![key.tenant, kind, root, to.as_str()],
    )?;
    Ok(())
}

/// One graph with its metadata.
pub(super) fn select_graph(db: Db<'_>, key: Key<'_>) -> Result<Option<Graph>> {
    let row = db.query_opt(
        concat!(
            "SELECT ",
            state_columns!(),
            ", metadata, created_at_ms, updated_at_ms FROM main.graphs
         WHERE tenant_id = ?1 AND graph_id = ?2"
        ),
        args![key.tenant, key.graph],
        raw_graph,
    )?;
    row.map(RawGraph::decode).transpose()
}

/// A page of the tenant's graphs after `after`, by id (creation order).
pub(super) fn select_graphs(
    db: Db<'_>,
    tenant: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<Graph>> {
    db.query_all(
        concat!(
            "SELECT ",
            state_columns!(),
            ", metadata, created_at_ms, updated_at_ms FROM main.graphs
         WHERE tenant_id = ?1 AND graph_id > ?2 ORDER BY graph_id LIMIT ?3"
        ),
        args![tenant, after, sql_limit(limit)],
        |row| raw_graph(row)?.decode(),
    )
}

/// A page of the tenant's graphs that match `filter`, by id (descending with `newest_first`).
pub(super) fn find_graphs(
    db: Db<'_>,
    tenant: &str,
    filter: &GraphFilter,
    page: &Page,
) -> Result<Vec<Graph>> {
    let mut clause = filter_clause(tenant, filter);
    let order = if filter.newest_first { ("<", "DESC") } else { (">", "ASC") };
    if let Some(after) = &page.after {
        let at = clause.bind(OwnedArg::Text(after.clone()));
        clause.both(&format!(" AND graph_id {} ?{at}", order.0));
    }
    let at = clause.bind(OwnedArg::Int(sql_limit(page.limit)));
    let index = finished_index(filter, &mut clause);
    let [sqlite, postgres] = clause.texts().map(|conditions| {
        format!(
            "SELECT {}, metadata, created_at_ms, updated_at_ms FROM main.graphs {index}
             WHERE {conditions} ORDER BY graph_id {} LIMIT ?{at}",
            state_columns!(),
            order.1,
        )
    });
    let args = borrow_args(&clause.values);
    db.query_all(Query::per_engine(&sqlite, &postgres), &args, |row| raw_graph(row)?.decode())
}

/// For a filter on a finished status, the hint that reads the finished graphs of that status
/// only (`graphs_finished`, newest first as it is asked for): the status is also written into
/// the conditions (one of three literals), so that both engines see the partial index serves
/// them. Empty for any other filter.
fn finished_index(filter: &GraphFilter, clause: &mut Clause) -> &'static str {
    match filter.status {
        Some(status) if status.is_terminal() => {
            clause.both(&format!(" AND status = '{}'", status.as_str()));
            "INDEXED BY graphs_finished"
        }
        _ => "",
    }
}

/// How many of the tenant's graphs match `filter` (its status aside), by status: from
/// `graph_counts` when the filter names no metadata or only a non-empty `kind` (O(kinds x
/// statuses)), else by reading the graphs that match.
pub(super) fn count_graphs(
    db: Db<'_>,
    tenant: &str,
    filter: &GraphFilter,
) -> Result<Vec<(GraphStatus, u64)>> {
    let Some(kind) = counted_kind(filter) else {
        return count_graphs_scanning(db, tenant, filter);
    };
    let roots = i64::from(filter.roots_only);
    let status_total = |row: &Row<'_>| {
        Ok((GraphStatus::parse(&row.get::<String>(0)?)?, from_sql_int(row.get(1)?)))
    };
    match kind {
        Some(kind) => db.query_all(
            "SELECT status, CAST(SUM(total) AS BIGINT) FROM main.graph_counts
             WHERE tenant_id = ?1 AND kind = ?2 AND root >= ?3
             GROUP BY status ORDER BY status",
            args![tenant, kind, roots],
            status_total,
        ),
        None => db.query_all(
            "SELECT status, CAST(SUM(total) AS BIGINT) FROM main.graph_counts
             WHERE tenant_id = ?1 AND root >= ?2
             GROUP BY status ORDER BY status",
            args![tenant, roots],
            status_total,
        ),
    }
}

/// Which of the kept counts serve `filter`: `Some(None)` for no metadata condition,
/// `Some(Some(kind))` for only a `kind` that is a non-empty string (graph_counts keys every
/// other kind as ''), `None` for a filter only reading the graphs answers.
fn counted_kind(filter: &GraphFilter) -> Option<Option<&str>> {
    match filter.metadata.as_slice() {
        [] => Some(None),
        [(key, serde_json::Value::String(kind))]
            if key == "kind" && !kind.is_empty() && !kind.contains('\0') =>
        {
            Some(Some(kind))
        }
        _ => None,
    }
}

/// How many of the tenant's graphs match `filter` (its status aside), by status, reading
/// every graph that matches.
fn count_graphs_scanning(
    db: Db<'_>,
    tenant: &str,
    filter: &GraphFilter,
) -> Result<Vec<(GraphStatus, u64)>> {
    let unfiltered = GraphFilter { status: None, ..filter.clone() };
    let clause = filter_clause(tenant, &unfiltered);
    let [sqlite, postgres] = clause.texts().map(|conditions| {
        format!(
            "SELECT status, count(*) FROM main.graphs WHERE {conditions}
             GROUP BY status ORDER BY status"
        )
    });
    let args = borrow_args(&clause.values);
    db.query_all(Query::per_engine(&sqlite, &postgres), &args, |row| {
        Ok((GraphStatus::parse(&row.get::<String>(0)?)?, from_sql_int(row.get(1)?)))
    })
}

/// The tenant's kept graph counts (`graph_counts`) and a recount of its graphs, each as
/// `("graphs KIND root|child STATUS", total)`.
pub(super) fn select_counts_and_recount(
    db: Db<'_>,
    tenant: &str,
) -> Result<[Vec<(String, u64)>; 2]> {
    let row = |r: &Row<'_>| -> Result<(String, u64)> {
        let (kind, root, status): (String, i64, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let root = if root == 1 { "root" } else { "child" };
        Ok((format!("graphs {kind:?} {root} {status}"), from_sql_int(r.get(3)?)))
    };
    let kept = db.query_all(
        "SELECT kind, root, status, total FROM main.graph_counts WHERE tenant_id = ?1",
        args![tenant],
        row,
    )?;
    let counted = db.query_all(
        Query::per_engine(
            concat!(
                "SELECT ",
                graph_kind!(sqlite),
                ", parent_graph_id IS NULL, status, count(*)
                 FROM main.graphs WHERE tenant_id = ?1 GROUP BY 1, 2, 3"
            ),
            concat!(
                "SELECT ",
                graph_kind!(postgres),
                ", (parent_graph_id IS NULL)::int, status, count(*)
                 FROM main.graphs WHERE tenant_id = ?1 GROUP BY 1, 2, 3"
            ),
        ),
        args![tenant],
        row,
    )?;
    Ok([kept, counted])
}

/// A filter's `WHERE` conditions in each engine's SQL, and the values of their numbered
/// parameters (the same for both).
struct Clause {
    sqlite: String,
    postgres: String,
    values: Vec<OwnedArg>,
}

impl Clause {
    /// Adds a parameter; returns its number.
    fn bind(&mut self, value: OwnedArg) -> usize {
        self.values.push(value);
        self.values.len()
    }

    /// Adds conditions written the same for both engines.
    fn both(&mut self, sql: &str) {
        self.sqlite.push_str(sql);
        self.postgres.push_str(sql);
    }

    fn texts(&self) -> [&str; 2] {
        [&self.sqlite, &self.postgres]
    }
}

/// How a metadata value is matched: its JSON type (1 is not true, nor 1.0) as each engine
/// names it, then its value as SQL reads it (none for true, false and null), so that a
/// string's escapes in the stored text do not matter.
struct Scalar {
    /// SQLite's `json_type` name.
    sqlite_type: &'static str,
    /// The condition on PostgreSQL's `jsonb` value `{v}` and its text `{t}`.
    postgres_type: &'static str,
    /// The value, and the SQL types PostgreSQL compares the text and the value as.
    value: Option<(OwnedArg, [&'static str; 2])>,
}

/// How `value` is matched.
fn json_scalar(value: &serde_json::Value) -> Scalar {
    use serde_json::Value as Json;
    const INTEGER: &str = "jsonb_typeof({v}) = 'number' AND {t} ~ '^-?[0-9]+$'";
    let (sqlite_type, postgres_type, value) = match value {
        Json::String(text) => (
            "text",
            "jsonb_typeof({v}) = 'string'",
            Some((OwnedArg::Text(text.clone()), ["TEXT"; 2])),
        ),
        Json::Number(n) => match n.as_i64() {
            Some(int) => ("integer", INTEGER, Some((OwnedArg::Int(int), ["NUMERIC", "BIGINT"]))),
            None => (
                "real",
                "jsonb_typeof({v}) = 'number' AND {t} !~ '^-?[0-9]+$'",
                Some((OwnedArg::Real(n.as_f64().unwrap_or(f64::NAN)), ["DOUBLE PRECISION"; 2])),
            ),
        },
        Json::Bool(true) => ("true", "{v} = 'true'::jsonb", None),
        Json::Bool(false) => ("false", "{v} = 'false'::jsonb", None),
        // Objects and arrays are refused before; null is what is left.
        _ => ("null", "jsonb_typeof({v}) = 'null'", None),
    };
    Scalar { sqlite_type, postgres_type, value }
}

/// The `WHERE` conditions of `filter` and the values of their numbered parameters.
fn filter_clause(tenant: &str, filter: &GraphFilter) -> Clause {
    let values = vec![OwnedArg::Text(tenant.to_owned())];
    let mut clause =
        Clause { sqlite: "tenant_id = ?1".into(), postgres: "tenant_id = ?1".into(), values };
    if let Some(status) = filter.status {
        let at = clause.bind(OwnedArg::Text(status.as_str().to_owned()));
        clause.both(&format!(" AND status = ?{at}"));
    }
    if filter.roots_only {
        clause.both(" AND parent_graph_id IS NULL");
    }
    for (key, value) in &filter.metadata {
        let key_at = clause.bind(OwnedArg::Text(key.clone()));
        let scalar = json_scalar(value);
        // In parentheses: `->>` binds as tightly as `||`.
        let path = format!("('$.\"' || ?{key_at} || '\"')");
        let (v, t) =
            (format!("(metadata::jsonb -> ?{key_at})"), format!("(metadata::jsonb ->> ?{key_at})"));
        clause
            .sqlite
            .push_str(&format!(" AND json_type(metadata, {path}) = '{}'", scalar.sqlite_type));
        let postgres_type = scalar.postgres_type.replace("{v}", &v).replace("{t}", &t);
        clause.postgres.push_str(&format!(" AND {postgres_type}"));
        if let Some((value, [text_as, value_as])) = scalar.value {
            let at = clause.bind(value);
            clause.sqlite.push_str(&format!(" AND (metadata ->> {path}) = ?{at}"));
            let compare = format!(" AND CAST({t} AS {text_as}) = CAST(?{at} AS {value_as})");
            clause.postgres.push_str(&compare);
        }
    }
    clause
}

/// The children of `parent`, by id.
pub(super) fn select_children(db: Db<'_>, key: Key<'_>) -> Result<Vec<Graph>> {
    db.query_all(
        concat!(
            "SELECT ",
            state_columns!(),
            ", metadata, created_at_ms, updated_at_ms FROM main.graphs INDEXED BY graphs_by_parent
         WHERE tenant_id = ?1 AND parent_graph_id = ?2 ORDER BY graph_id"
        ),
        args![key.tenant, key.graph],
        |row| raw_graph(row)?.decode(),
    )
}

/// The ids of the unfinished children of `parent`, with the node bound to run each.
pub(super) fn select_live_children(
    db: Db<'_>,
    key: Key<'_>,
) -> Result<Vec<(String, Option<String>)>> {
    db.query_all(
        "SELECT graph_id, parent_node_id FROM main.graphs INDEXED BY graphs_by_parent
         WHERE tenant_id = ?1 AND parent_graph_id = ?2 AND status IN ('pending', 'running')
         ORDER BY graph_id",
        args![key.tenant, key.graph],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
}

/// The ids of up to `limit` of the tenant's running graphs after `after`, by id.
pub(super) fn select_running(
    db: Db<'_>,
    tenant: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<String>> {
    db.query_all(
        "SELECT graph_id FROM main.graphs INDEXED BY graphs_running_ids
         WHERE tenant_id = ?1 AND status = 'running' AND graph_id > ?2
         ORDER BY graph_id LIMIT ?3",
        args![tenant, after, sql_limit(limit)],
        |row| row.get(0),
    )
}

/// The ids of up to `limit` running graphs whose deadline is at or before `now_ms`.
pub(super) fn select_overdue(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<String>> {
    db.query_all(
        "SELECT graph_id FROM main.graphs
         WHERE tenant_id = ?1 AND status = 'running' AND deadline_at_ms <= ?2
         ORDER BY deadline_at_ms, graph_id LIMIT ?3",
        args![tenant, now_ms, sql_limit(limit)],
        |row| row.get(0),
    )
}

/// Every tenant with a running graph past its deadline at `now_ms`.
pub(crate) fn select_tenants_overdue(db: Db<'_>, now_ms: i64) -> Result<Vec<String>> {
    db.query_all(
        "SELECT DISTINCT tenant_id FROM main.graphs INDEXED BY graphs_deadlines
         WHERE status = 'running' AND deadline_at_ms IS NOT NULL AND deadline_at_ms <= ?1",
        args![now_ms],
        |row| row.get(0),
    )
}

/// The earliest deadline of any running graph of any tenant.
pub(super) fn select_next_deadline(db: Db<'_>) -> Result<Option<i64>> {
    db.query_one(
        "SELECT min(deadline_at_ms) FROM main.graphs INDEXED BY graphs_deadlines
         WHERE status = 'running' AND deadline_at_ms IS NOT NULL",
        args![],
        |row| row.get(0),
    )
}

/// Every tenant with a running graph (for recovery at open).
pub(crate) fn select_tenants_running(db: Db<'_>) -> Result<Vec<String>> {
    db.query_all(
        "SELECT DISTINCT tenant_id FROM main.graphs WHERE status = 'running' ORDER BY tenant_id",
        args![],
        |row| row.get(0),
    )
}

/// A new node.
pub(super) fn insert_node(
    db: Db<'_>,
    key: Key<'_>,
    node: &NodeState,
    created_seq: i64,
    now_ms: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.graph_nodes (tenant_id, graph_id, node_id, kind, spec, join_type, status,
                                  in_edges, in_filled, in_dead, fires, fired_seq, created_seq,
                                  created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14)",
        args![
            key.tenant,
            key.graph,
            node.id,
            node.kind,
            node.spec,
            node.join.as_str(),
            node.status.as_str(),
            node.in_edges,
            node.in_filled,
            node.in_dead,
            node.fires,
            node.fired_seq,
            created_seq,
            now_ms,
        ],
    )?;
    Ok(())
}

/// A node's state, if it exists.
pub(super) fn select_node_state(db: Db<'_>, key: Key<'_>, node: &str) -> Result<Option<NodeState>> {
    let row = db.query_opt("SELECT node_id, kind, spec, join_type, status, in_edges, in_filled, in_dead, fires,
                fired_seq FROM main.graph_nodes WHERE tenant_id = ?1 AND graph_id = ?2 AND node_id = ?3", args![key.tenant, key.graph, node], raw_node_state)?;
    row.map(RawNodeState::decode).transpose()
}

/// The states of the nodes in `status`, in the order they were added.
pub(super) fn select_nodes_in(
    db: Db<'_>,
    key: Key<'_>,
    status: NodeStatus,
) -> Result<Vec<NodeState>> {
    db.query_all("SELECT node_id, kind, spec, join_type, status, in_edges, in_filled, in_dead, fires,
                fired_seq FROM main.graph_nodes WHERE tenant_id = ?1 AND graph_id = ?2 AND status = ?3
         ORDER BY created_seq", args![key.tenant, key.graph, status.as_str()], |row| raw_node_state(row)?.decode())
}

/// Writes back a node's status, join, counters and fires.
pub(super) fn update_node_state(
    db: Db<'_>,
    key: Key<'_>,
    node: &NodeState,
    now_ms: i64,
) -> Result<()> {
    let changed = db.execute(
        "UPDATE main.graph_nodes SET status = ?4, join_type = ?5, in_edges = ?6, in_filled = ?7,
                in_dead = ?8, fires = ?9, fired_seq = ?10, updated_at_ms = ?11
         WHERE tenant_id = ?1 AND graph_id = ?2 AND node_id = ?3",
        args![
            key.tenant,
            key.graph,
            node.id,
            node.status.as_str(),
            node.join.as_str(),
            node.in_edges,
            node.in_filled,
            node.in_dead,
            node.fires,
            node.fired_seq,
            now_ms,
        ],
    )?;
    Error::expect_one(changed, "node", &node.id)
}

/// Records that a node was started.
pub(super) fn set_started(db: Db<'_>, key: Key<'_>, node: &str, now_ms: i64) -> Result<()> {
    Error::expect_one(
        db.execute(
            "UPDATE main.graph_nodes SET started_at_ms = ?4
         WHERE tenant_id = ?1 AND graph_id = ?2 AND node_id = ?3",
            args![key.tenant, key.graph, node, now_ms],
        )?,
        "node",
        node,
    )
}

/// Records how a node finished: its output or its error (the other is cleared).
pub(super) fn set_result(
    db: Db<'_>,
    key: Key<'_>,
    node: &str,
    output: Option<&str>,
    error: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    let changed = db.execute(
        "UPDATE main.graph_nodes SET output = ?4, error = ?5, finished_at_ms = ?6
         WHERE tenant_id = ?1 AND graph_id = ?2 AND node_id = ?3",
        args![key.tenant, key.graph, node, output, error, now_ms],
    )?;
    Error::expect_one(changed, "node", node)
}

/// The columns `raw_node` reads, in order.
macro_rules! node_columns {
    () => {
        "node_id, graph_id, spec, join_type, status, output, error, fires, created_at_ms,
         updated_at_ms, started_at_ms, finished_at_ms"
    };
}

/// One node, whole.
pub(super) fn select_node(db: Db<'_>, key: Key<'_>, node: &str) -> Result<Option<Node>> {
    let row = db.query_opt(
        concat!(
            "SELECT ",
            node_columns!(),
            " FROM main.graph_nodes WHERE tenant_id = ?1 AND graph_id = ?2 AND node_id = ?3"
        ),
        args![key.tenant, key.graph, node],
        raw_node,
    )?;
    row.map(RawNode::decode).transpose()
}

/// Every node of a graph, whole, in the order they were added.
pub(super) fn select_nodes(db: Db<'_>, key: Key<'_>) -> Result<Vec<Node>> {
    db.query_all(
        concat!(
            "SELECT ",
            node_columns!(),
            " FROM main.graph_nodes WHERE tenant_id = ?1 AND graph_id = ?2 ORDER BY created_seq"
        ),
        args![key.tenant, key.graph],
        |row| raw_node(row)?.decode(),
    )
}

/// A new edge.
pub(super) fn insert_edge(
    db: Db<'_>,
    key: Key<'_>,
    seq: i64,
    from: &str,
    to: &str,
    condition: Option<&str>,
) -> Result<()> {
    db.execute(
        "INSERT INTO main.graph_edges (tenant_id, graph_id, edge_seq, from_node_id, to_node_id,
                                  condition)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![key.tenant, key.graph, seq, from, to, condition],
    )?;
    Ok(())
}

/// The outbound edges of a node (self-loops included), in the order they were added.
pub(super) fn select_out_edges(db: Db<'_>, key: Key<'_>, from: &str) -> Result<Vec<EdgeState>> {
    db.query_all(
        "SELECT edge_seq, to_node_id, condition, tokens, dead FROM main.graph_edges
         WHERE tenant_id = ?1 AND graph_id = ?2 AND from_node_id = ?3 ORDER BY edge_seq",
        args![key.tenant, key.graph, from],
        |row| {
            let condition = row.get::<Option<String>>(2)?;
            let condition = condition.as_deref().map(serde_json::from_str).transpose()?;
            let (seq, to, tokens, dead) = (row.get(0)?, row.get(1)?, row.get(3)?, row.get(4)?);
            Ok(EdgeState { seq, from: from.to_owned(), to, condition, tokens, dead })
        },
    )
}

/// Writes back an edge's token count and dead flag.
pub(super) fn update_edge(db: Db<'_>, key: Key<'_>, edge: &EdgeState) -> Result<()> {
    let args = args![key.tenant, key.graph, edge.from, edge.seq, edge.tokens, edge.dead];
    let changed = db.execute(
        "UPDATE main.graph_edges SET tokens = ?5, dead = ?6
         WHERE tenant_id = ?1 AND graph_id = ?2 AND from_node_id = ?3 AND edge_seq = ?4",
        args,
    )?;
    Error::expect_one(changed, "edge", &edge.seq.to_string())
}

/// Every edge of a graph, in the order they were added.
pub(super) fn select_edges(db: Db<'_>, key: Key<'_>) -> Result<Vec<Edge>> {
    db.query_all(
        "SELECT edge_seq, from_node_id, to_node_id, condition, tokens FROM main.graph_edges
         WHERE tenant_id = ?1 AND graph_id = ?2 ORDER BY edge_seq",
        args![key.tenant, key.graph],
        |row| {
            let condition = row.get::<Option<String>>(3)?;
            let condition = condition.as_deref().map(serde_json::from_str).transpose()?;
            let (seq, from, to, tokens) = (row.get(0)?, row.get(1)?, row.get(2)?, row.get(4)?);
            Ok(Edge { seq: from_sql_int(seq), from, to, condition, tokens: from_sql_int(tokens) })
        },
    )
}

/// Every edge's endpoints, token count and dead flag (for `Audit`).
pub(super) fn select_edge_states(db: Db<'_>, key: Key<'_>) -> Result<Vec<EdgeState>> {
    db.query_all(
        "SELECT edge_seq, from_node_id, to_node_id, tokens, dead FROM main.graph_edges
         WHERE tenant_id = ?1 AND graph_id = ?2 ORDER BY edge_seq",
        args![key.tenant, key.graph],
        |row| {
            let (seq, from, to, tokens, dead) =
                (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?);
            Ok(EdgeState { seq, from, to, condition: None, tokens, dead })
        },
    )
}

/// Every node's state, in the order they were added (for `Audit`).
pub(super) fn select_node_states(db: Db<'_>, key: Key<'_>) -> Result<Vec<NodeState>> {
    db.query_all(
        "SELECT node_id, kind, spec, join_type, status, in_edges, in_filled, in_dead, fires,
                fired_seq FROM main.graph_nodes WHERE tenant_id = ?1 AND graph_id = ?2
         ORDER BY created_seq",
        args![key.tenant, key.graph],
        |row| raw_node_state(row)?.decode(),
    )
}

/// A token delivered on an edge, numbered in arrival order.
pub(super) fn insert_token(
    db: Db<'_>,
    key: Key<'_>,
    token_seq: i64,
    edge: &EdgeState,
    token: &str,
) -> Result<()> {
    db.execute("INSERT INTO main.graph_tokens (tenant_id, graph_id, token_seq, edge_seq, to_node_id, token)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)", args![key.tenant, key.graph, token_seq, edge.seq, edge.to, token])?;
    Ok(())
}

/// The tokens delivered to a node, in arrival order.
pub(super) fn select_inputs(db: Db<'_>, key: Key<'_>, node: &str) -> Result<Vec<Token>> {
    db.query_all(
        "SELECT token FROM main.graph_tokens WHERE tenant_id = ?1 AND graph_id = ?2 AND to_node_id = ?3
         ORDER BY token_seq",
        args![key.tenant, key.graph, node],
        |row| Ok(serde_json::from_str(&row.get::<String>(0)?)?),
    )
}

struct RawState {
    id: String,
    status: String,
    parent_graph_id: Option<String>,
    parent_node_id: Option<String>,
    sizes: [i64; 5],
    counts: [i64; 6],
    timeout_ms: Option<i64>,
    deadline_at_ms: Option<i64>,
    error: Option<String>,
    failed_node_id: Option<String>,
    started_at_ms: Option<i64>,
    finished_at_ms: Option<i64>,
}

impl RawState {
    fn decode(self) -> Result<GraphState> {
        let [node_count, edge_count, child_count, token_count, fire_count] = self.sizes;
        let status = GraphStatus::parse(&self.status)?;
        Ok(GraphState {
            id: self.id,
            status,
            stored_status: status,
            parent_graph_id: self.parent_graph_id,
            parent_node_id: self.parent_node_id,
            node_count,
            edge_count,
            child_count,
            token_count,
            fire_count,
            counts: self.counts,
            timeout_ms: self.timeout_ms,
            deadline_at_ms: self.deadline_at_ms,
            error: self.error,
            failed_node_id: self.failed_node_id,
            started_at_ms: self.started_at_ms,
            finished_at_ms: self.finished_at_ms,
        })
    }
}

fn raw_state(row: &Row<'_>) -> Result<RawState> {
    Ok(RawState {
        id: row.get(0)?,
        status: row.get(1)?,
        parent_graph_id: row.get(2)?,
        parent_node_id: row.get(3)?,
        sizes: [row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?, row.get(8)?],
        counts: [row.get(9)?, row.get(10)?, row.get(11)?, row.get(12)?, row.get(13)?, row.get(14)?],
        timeout_ms: row.get(15)?,
        deadline_at_ms: row.get(16)?,
        error: row.get(17)?,
        failed_node_id: row.get(18)?,
        started_at_ms: row.get(19)?,
        finished_at_ms: row.get(20)?,
    })
}

struct RawGraph {
    state: RawState,
    metadata: String,
    created_at_ms: i64,
    updated_at_ms: i64,
}

impl RawGraph {
    fn decode(self) -> Result<Graph> {
        let state = self.state.decode()?;
        Ok(Graph {
            metadata: serde_json::from_str(&self.metadata)?,
            counts: state.node_counts(),
            id: state.id,
            status: state.status,
            parent_graph_id: state.parent_graph_id,
            parent_node_id: state.parent_node_id,
            node_count: from_sql_int(state.node_count),
            edge_count: from_sql_int(state.edge_count),
            timeout_ms: state.timeout_ms,
            deadline_at_ms: state.deadline_at_ms,
            error: state.error,
            failed_node_id: state.failed_node_id,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            started_at_ms: state.started_at_ms,
            finished_at_ms: state.finished_at_ms,
        })
    }
}

fn raw_graph(row: &Row<'_>) -> Result<RawGraph> {
    Ok(RawGraph {
        state: raw_state(row)?,
        metadata: row.get(21)?,
        created_at_ms: row.get(22)?,
        updated_at_ms: row.get(23)?,
    })
}

struct RawNodeState {
    id: String,
    kind: String,
    spec: String,
    join: String,
    status: String,
    counters: [i64; 5],
}

impl RawNodeState {
    fn decode(self) -> Result<NodeState> {
        let [in_edges, in_filled, in_dead, fires, fired_seq] = self.counters;
        Ok(NodeState {
            id: self.id,
            kind: self.kind,
            spec: self.spec,
            join: JoinType::parse(&self.join)?,
            status: NodeStatus::parse(&self.status)?,
            in_edges,
            in_filled,
            in_dead,
            fires,
            fired_seq,
        })
    }
}

fn raw_node_state(row: &Row<'_>) -> Result<RawNodeState> {
    Ok(RawNodeState {
        id: row.get(0)?,
        kind: row.get(1)?,
        spec: row.get(2)?,
        join: row.get(3)?,
        status: row.get(4)?,
        counters: [row.get(5)?, row.get(6)?, row.get(7)?, row.get(8)?, row.get(9)?],
    })
}

struct RawNode {
    id: String,
    graph_id: String,
    spec: String,
    join: String,
    status: String,
    output: Option<String>,
    error: Option<String>,
    fires: i64,
    times: [Option<i64>; 4],
}

impl RawNode {
    fn decode(self) -> Result<Node> {
        let [created, updated, started_at_ms, finished_at_ms] = self.times;
        Ok(Node {
            id: self.id,
            graph_id: self.graph_id,
            spec: serde_json::from_str(&self.spec)?,
            join: JoinType::parse(&self.join)?,
            status: NodeStatus::parse(&self.status)?,
            output: self.output.as_deref().map(serde_json::from_str).transpose()?,
            error: self.error,
            fires: u32::try_from(self.fires).unwrap_or(u32::MAX),
            created_at_ms: created.unwrap_or(0),
            updated_at_ms: updated.unwrap_or(0),
            started_at_ms,
            finished_at_ms,
        })
    }
}

fn raw_node(row: &Row<'_>) -> Result<RawNode> {
    Ok(RawNode {
        id: row.get(0)?,
        graph_id: row.get(1)?,
        spec: row.get(2)?,
        join: row.get(3)?,
        status: row.get(4)?,
        output: row.get(5)?,
        error: row.get(6)?,
        fires: row.get(7)?,
        times: [row.get(8)?, row.get(9)?, row.get(10)?, row.get(11)?],
    })
}
