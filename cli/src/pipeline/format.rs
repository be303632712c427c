//! The pipeline file: parsing, validation, and the graph it becomes.
//!
//! ```json
//! { "name": "build",
//!   "nodes": {
//!     "fetch": { "run": "curl -fsS ... > src.tgz" },
//!     "test":  { "run": "make test", "after": ["fetch"], "retries": 2, "timeout_s": 600 },
//!     "alert": { "run": "echo failed", "after": [{ "node": "test", "on": "error" }] } } }
//! ```
//!
//! A node may also carry `env` (a map of strings, over the pipeline's own `env`), `cwd` (a
//! directory, relative to the file's) and `matrix` (one variable and its values: the node runs
//! once per value). [`Pipeline::plan`] turns the file into the graph it becomes: a plain node is
//! one task; a matrix node `N` is a scatter `N`, a task `N[value]` per value and a gather
//! `N[*]` (every instance succeeded) its successors hang off; an edge `on: error` from `N`
//! leaves the gather `N[*:error]` (the first failed instance), `on: any` the gather `N[*:any]`
//! (every instance ended).
//!
//! Everything is checked before anything is written: a bad file is one error naming the file,
//! the node and the reason.
//!
//! The fuzz harness `fuzz/harness/pipeline.rs` includes this file as it is (`#[path]`), so it
//! uses only `spindle`, `serde`, `serde_json`, `sha2`, std and `crate::names` (`names.rs`,
//! which the crates that include the harness declare at their root too).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use spindle::{GatherStrategy, JoinType, NodeOptions, NodeSpec, TokenColor, Tx};

use crate::names::{RUN_KIND, source_stream};

/// A checked pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// Its name.
    pub name: String,
    /// SHA-256 of its canonical JSON: a run resumes only the same content.
    pub hash: String,
    /// Its nodes, in file order.
    pub nodes: Vec<Step>,
    /// The directory a relative `cwd` is read from: the file's.
    pub dir: PathBuf,
    /// The JSON text it was read from (a TOML file's, as JSON): a run keeps it, so that
    /// `spindle retry` runs the same pipeline without the file.
    pub source: String,
}

/// One node of a pipeline.
#[derive(Debug, Clone)]
pub struct Step {
    /// Its name (its graph node's id, or its scatter's for a matrix node).
    pub name: String,
    /// The command, for `sh -c`.
    pub run: String,
    /// Its predecessors and when each edge fires.
    pub after: Vec<(String, On)>,
    /// Retries after a failed attempt.
    pub retries: u32,
    /// How long an attempt may run.
    pub timeout_s: Option<u64>,
    /// When its inbound edges enable it.
    pub join: JoinType,
    /// What its command's environment adds: the pipeline's `env`, then the node's over it.
    pub env: BTreeMap<String, String>,
    /// Where its command runs, as written (relative to [`Pipeline::dir`], or absolute).
    pub cwd: Option<String>,
    /// The values it runs once each for.
    pub matrix: Option<Matrix>,
}

/// A node's matrix: one variable and its values, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    /// The variable (`SPINDLE_MATRIX_<VAR>` in the command's environment).
    pub var: String,
    /// Its values, distinct.
    pub values: Vec<String>,
}

/// The graph a pipeline becomes: its nodes in build order and its edges.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The graph's nodes.
    pub nodes: Vec<PlanNode>,
    /// The graph's edges, in the order they are added.
    pub edges: Vec<PlanEdge>,
}

/// One node of the graph.
#[derive(Debug, Clone)]
pub struct PlanNode {
    /// Its id in the graph.
    pub id: String,
    /// What it is.
    pub kind: PlanKind,
    /// When its inbound edges enable it.
    pub join: JoinType,
}

/// What a graph node does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanKind {
    /// Runs the command of step `step` (of a matrix node: with `value`).
    Task { step: usize, value: Option<String> },
    /// A matrix node's start: completed by the runner at once, one token per value.
    Scatter { step: usize },
    /// A matrix node's end for the edges that fire `on` it: run by the engine.
    Gather { step: usize, on: On },
}

/// One edge of the graph.
#[derive(Debug, Clone)]
pub struct PlanEdge {
    /// Its source.
    pub from: String,
    /// Its target.
    pub to: String,
    /// The colour it accepts (`None`: any).
    pub condition: Option<TokenColor>,
}

/// A predecessor's output a command can read: the graph node that wrote it and the variable
/// that names its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The predecessor's graph node.
    pub node: String,
    /// `SPINDLE_OUTPUT_<NODE>` (of a matrix instance, `SPINDLE_OUTPUT_<NODE>_<VALUE>`).
    pub var: String,
}

/// When an edge fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The predecessor succeeded.
    Ok,
    /// The predecessor failed.
    Error,
    /// The predecessor ended either way.
    Any,
}

impl On {
    /// The colour an edge of this kind accepts (`None`: any).
    pub fn condition(self) -> Option<TokenColor> {
        match self {
            On::Ok => Some(TokenColor::Ok),
            On::Error => Some(TokenColor::Error),
            On::Any => None,
        }
    }

    /// As written in a file: `ok`, `error` or `any`.
    pub fn as_str(self) -> &'static str {
        match self {
            On::Ok => "ok",
            On::Error => "error",
            On::Any => "any",
        }
    }
}

/// A pipeline file that cannot be run: which file, which node, why.
#[derive(Debug)]
pub struct BadPipeline {
    pub file: String,
    pub node: Option<String>,
    pub reason: String,
}

impl fmt::Display for BadPipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(node) => write!(f, "{}: node {node:?}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// The most retries a node may ask for.
pub const RETRIES_MAX: u32 = 100;
/// The most nodes and edges a pipeline may have (the store's default graph limits).
const NODES_MAX: usize = 10_000;
const EDGES_MAX: usize = 100_000;
/// The longest graph node id: the store's id limit (256 bytes) less room for the `#firing` a
/// run's queue item adds to it in its dedupe key.
const ID_BYTES_MAX: usize = 240;
/// The longest pipeline name.
const NAME_BYTES_MAX: usize = 200;
/// The longest command.
const RUN_BYTES_MAX: usize = 64 * 1024;
/// The most values a matrix may have.
pub const MATRIX_MAX: usize = 256;
/// The longest matrix variable and value.
const MATRIX_NAME_BYTES_MAX: usize = 64;
/// The prefix of the variables `spindle run` sets itself, which `env` may not set.
pub const RESERVED_ENV_PREFIX: &str = "SPINDLE_";

/// Checks the text of a pipeline file; `file` names it in the error. What `file::read`
/// does once it has read the file (the fuzz harness `fuzz/harness/pipeline.rs` calls it directly).
pub fn parse(file: &str, text: &str) -> Result<Pipeline, BadPipeline> {
    let bad = |node: Option<&str>, reason: String| BadPipeline {
        file: file.to_owned(),
        node: node.map(str::to_owned),
        reason,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| bad(None, format!("{e}")))?;
    let raw: RawPipeline = serde_json::from_str(text).map_err(|e| bad(None, format!("{e}")))?;
    let hash = hex(&Sha256::digest(value.to_string().as_bytes()));
    let mut pipeline = check(raw, hash).map_err(|(node, reason)| bad(node.as_deref(), reason))?;
    pipeline.source = text.to_owned();
    Ok(pipeline)
}

/// Checks names, edges, joins, retries, environments, matrices and cycles.
fn check(raw: RawPipeline, hash: String) -> Result<Pipeline, (Option<String>, String)> {
    check_name(&raw.name)?;
    if raw.nodes.0.is_empty() {
        return Err((None, "the pipeline has no nodes".into()));
    }
    if raw.nodes.0.len() > NODES_MAX {
        return Err((None, format!("the pipeline has more than {NODES_MAX} nodes")));
    }
    let mut names = BTreeSet::new();
    for (name, _) in &raw.nodes.0 {
        if !names.insert(name.as_str()) {
            return Err((Some(name.clone()), "the name is used twice".into()));
        }
    }
    check_env(&raw.env).map_err(|reason| (None, format!("\"env\": {reason}")))?;
    let mut steps = Vec::new();
    for (name, value) in &raw.nodes.0 {
        let named = |reason: String| (Some(name.clone()), reason);
        let node: RawNode =
            serde_json::from_value(value.clone()).map_err(|e| named(e.to_string()))?;
        let mut step = check_node(name, &node, &names).map_err(named)?;
        step.env = raw.env.clone().into_iter().chain(step.env).collect();
        steps.push(step);
    }
    if let Some(node) = find_cycle(&steps) {
        return Err((Some(node), "it is part of a cycle (cycles are not supported)".into()));
    }
    let (dir, source) = (PathBuf::new(), String::new());
    let pipeline = Pipeline { name: raw.name, hash, nodes: steps, dir, source };
    check_plan(&pipeline)?;
    Ok(pipeline)
}

/// Checks the pipeline's name: 1 to 200 bytes, not only spaces, and no control character
/// (NUL, escape, newline, ...) nor an invisible one that reorders or hides text (bidi
/// controls, zero-width ones, line and paragraph separators): it is printed as it is
/// (`spindle runs`, progress lines), so a shared file could otherwise move the cursor,
/// rewrite the terminal, or pass for another name.
fn check_name(name: &str) -> Result<(), (Option<String>, String)> {
    if name.trim().is_empty() || name.len() > NAME_BYTES_MAX {
        return Err((None, format!("the pipeline needs a name of 1 to {NAME_BYTES_MAX} bytes")));
    }
    if let Some(c) = name.chars().find(|&c| c.is_control() || is_invisible_format(c)) {
        let reason = format!(
            "the pipeline's name holds the control character {c:?}: a name is printed as it is, \
             so it holds none (remove it)"
        );
        return Err((None, reason));
    }
    Ok(())
}

/// Whether `c` is a format character that changes how text around it shows without showing
/// itself: the bidi embeddings, overrides, isolates and marks, the zero-width characters, the
/// soft hyphen, and the line and paragraph separators.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// Checks the graph the pipeline becomes: its size, ids used once (a matrix instance's name
/// may clash with a node's), and each node's output variables distinct.
fn check_plan(pipeline: &Pipeline) -> Result<(), (Option<String>, String)> {
    let plan = pipeline.plan();
    if plan.nodes.len() > NODES_MAX {
        let reason = format!("the pipeline becomes more than {NODES_MAX} graph nodes");
        return Err((None, reason));
    }
    if plan.edges.len() > EDGES_MAX {
        return Err((None, format!("the pipeline becomes more than {EDGES_MAX} edges")));
    }
    let mut ids = BTreeSet::new();
    for node in &plan.nodes {
        let step = &pipeline.nodes[node.kind.step()].name;
        if node.id.len() > ID_BYTES_MAX {
            let reason = format!(
                "the graph node {:?} it makes is longer than {ID_BYTES_MAX} bytes: shorten its name or matrix values",
                node.id
            );
            return Err((Some(step.clone()), reason));
        }
        if !ids.insert(node.id.as_str()) {
            let reason = format!("the graph node {:?} it makes is a node's name too", node.id);
            return Err((Some(step.clone()), format!("{reason}: rename one")));
        }
    }
    for step in &pipeline.nodes {
        let mut vars = BTreeSet::new();
        for input in pipeline.inputs(step) {
            if !vars.insert(input.var.clone()) {
                let reason =
                    format!("two predecessors' outputs would both be ${}: rename one", input.var);
                return Err((Some(step.name.clone()), reason));
            }
        }
    }
    Ok(())
}

/// Checks an `env` map: names non-empty without `=` or NUL and not `SPINDLE_*`, values
/// without NUL.
fn check_env(env: &BTreeMap<String, String>) -> Result<(), String> {
    for (name, value) in env {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(format!("the name {name:?} is empty or holds '=' or NUL: rename it"));
        }
        if name.starts_with(RESERVED_ENV_PREFIX) {
            return Err(format!(
                "{name:?} may not be set: {RESERVED_ENV_PREFIX}* variables are spindle's (use another name)"
            ));
        }
        if value.contains('\0') {
            return Err(format!("the value of {name:?} holds NUL: remove it"));
        }
    }
    Ok(())
}

/// Checks a node's `cwd`: a non-empty path without NUL.
fn check_cwd(cwd: Option<&str>) -> Result<(), String> {
    match cwd {
        Some(cwd) if cwd.trim().is_empty() || cwd.contains('\0') => {
            Err("\"cwd\" must be a directory's path, not empty and without NUL".into())
        }
        _ => Ok(()),
    }
}

/// Checks a node's `matrix`: one variable (letters, digits, `_`) with 1 to [`MATRIX_MAX`]
/// distinct values of letters, digits, `.`, `_` and `-`.
fn check_matrix(matrix: Option<&BTreeMap<String, Vec<String>>>) -> Result<Option<Matrix>, String> {
    let Some(matrix) = matrix else { return Ok(None) };
    let mut entries = matrix.iter();
    let (Some((var, values)), None) = (entries.next(), entries.next()) else {
        return Err(
            "\"matrix\" has exactly one variable, as {\"target\": [\"x86\", \"arm\"]}".into()
        );
    };
    let plain = |text: &str, extra: &[char]| {
        !text.is_empty()
            && text.len() <= MATRIX_NAME_BYTES_MAX
            && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || extra.contains(&c))
    };
    if !plain(var, &[]) {
        return Err(format!(
            "the matrix variable {var:?} must be 1 to {MATRIX_NAME_BYTES_MAX} letters, digits or '_'"
        ));
    }
    if values.is_empty() || values.len() > MATRIX_MAX {
        return Err(format!("the matrix {var:?} needs 1 to {MATRIX_MAX} values"));
    }
    let mut seen = BTreeSet::new();
    for value in values {
        if !plain(value, &['.', '-']) {
            return Err(format!(
                "the matrix value {value:?} must be 1 to {MATRIX_NAME_BYTES_MAX} letters, digits, '.', '_' or '-'"
            ));
        }
        if !seen.insert(value) {
            return Err(format!("the matrix value {value:?} is listed twice: list it once"));
        }
    }
    Ok(Some(Matrix { var: var.clone(), values: values.clone() }))
}

fn check_node(name: &str, node: &RawNode, names: &BTreeSet<&str>) -> Result<Step, String> {
    let hidden = |c: char| c.is_control() || is_invisible_format(c);
    if name.is_empty() || name.len() > 200 || name.chars().any(hidden) {
        return Err("a node name must be 1 to 200 bytes without control characters".into());
    }
    if node.run.trim().is_empty() {
        return Err("\"run\" is empty".into());
    }
    if node.run.len() > RUN_BYTES_MAX {
        return Err(format!("\"run\" is longer than {RUN_BYTES_MAX} bytes"));
    }
    if node.run.contains('\0') {
        return Err("\"run\" holds NUL, which no command can: remove it".into());
    }
    if node.retries > RETRIES_MAX {
        return Err(format!("\"retries\" is at most {RETRIES_MAX}"));
    }
    if node.timeout_s == Some(0) {
        return Err("\"timeout_s\" must be at least 1".into());
    }
    check_env(&node.env).map_err(|reason| format!("\"env\": {reason}"))?;
    check_cwd(node.cwd.as_deref())?;
    let matrix = check_matrix(node.matrix.as_ref())?;
    let join = match node.join.as_deref() {
        None | Some("all") => JoinType::All,
        Some("any") => JoinType::Any,
        Some(other) => return Err(format!("\"join\" is \"all\" or \"any\", not {other:?}")),
    };
    let mut after = Vec::new();
    for entry in &node.after {
        let (pred, on) = match entry {
            RawAfter::Name(pred) => (pred.clone(), On::Ok),
            RawAfter::Edge(edge) => (edge.node.clone(), parse_on(edge.on.as_deref())?),
        };
        if !names.contains(pred.as_str()) {
            return Err(format!("\"after\" names an unknown node {pred:?}"));
        }
        after.push((pred, on));
    }
    Ok(Step {
        name: name.to_owned(),
        run: node.run.clone(),
        after,
        retries: node.retries,
        timeout_s: node.timeout_s,
        join,
        env: node.env.clone(),
        cwd: node.cwd.clone(),
        matrix,
    })
}

fn parse_on(on: Option<&str>) -> Result<On, String> {
    match on {
        None | Some("ok") => Ok(On::Ok),
        Some("error") => Ok(On::Error),
        Some("any") => Ok(On::Any),
        Some(other) => Err(format!("\"on\" is \"ok\", \"error\" or \"any\", not {other:?}")),
    }
}

/// A node on a cycle, if there is one (a self-reference included).
fn find_cycle(steps: &[Step]) -> Option<String> {
    let mut indegree: BTreeMap<&str, usize> =
        steps.iter().map(|step| (step.name.as_str(), step.after.len())).collect();
    let mut successors: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for step in steps {
        for (pred, _) in &step.after {
            successors.entry(pred.as_str()).or_default().push(step.name.as_str());
        }
    }
    let mut ready: Vec<&str> =
        indegree.iter().filter(|(_, count)| **count == 0).map(|(name, _)| *name).collect();
    while let Some(name) = ready.pop() {
        for next in successors.get(name).into_iter().flatten() {
            if let Some(count) = indegree.get_mut(next) {
                *count -= 1;
                if *count == 0 {
                    ready.push(next);
                }
            }
        }
        indegree.remove(name);
    }
    indegree.into_keys().next().map(str::to_owned)
}

impl Pipeline {
    /// Builds the pipeline's graph (pending) in the caller's transaction; returns its id.
    pub fn build(&self, tx: &mut Tx<'_>) -> spindle::Result<String> {
        let metadata = json!({
            "kind": RUN_KIND,
            "pipeline": self.name,
            "hash": self.hash,
            "nodes": self.nodes.len(),
            "dir": self.dir.to_string_lossy(),
        });
        let plan = self.plan();
        let graph = tx.exec(spindle::graph::Create { metadata, parent: None })?;
        self.keep_source(tx, &graph)?;
        for node in &plan.nodes {
            let spec = self.spec(&node.kind);
            let options = NodeOptions::new().id(node.id.clone()).join(node.join);
            let graph = graph.clone();
            tx.exec(spindle::graph::AddNode { graph, spec, options })?;
        }
        for edge in plan.edges {
            let PlanEdge { from, to, condition } = edge;
            tx.exec(spindle::graph::AddEdge { graph: graph.clone(), from, to, condition })?;
        }
        Ok(graph)
    }

    /// Keeps the pipeline's text with its run (`source_stream`), in parts small enough for
    /// events.
    fn keep_source(&self, tx: &mut Tx<'_>, graph: &str) -> spindle::Result<()> {
        let mut rest = self.source.as_str();
        while !rest.is_empty() {
            let mut end = rest.len().min(SOURCE_PART_BYTES);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let (part, after) = rest.split_at(end);
            tx.exec(spindle::log::Append {
                stream: source_stream(graph),
                event_type: "source".into(),
                payload: json!({ "text": part }),
                idem_key: None,
            })?;
            rest = after;
        }
        Ok(())
    }

    /// What a graph node is in the store.
    fn spec(&self, kind: &PlanKind) -> NodeSpec {
        match kind {
            PlanKind::Task { step, value } => {
                let step = &self.nodes[*step];
                let mut data = json!({
                    "run": step.run,
                    "retries": step.retries,
                    "timeout_s": step.timeout_s,
                });
                if let (Some(value), Some(matrix)) = (value, &step.matrix) {
                    data["matrix"] = json!({ matrix.var.as_str(): value });
                }
                NodeSpec::task(data)
            }
            PlanKind::Scatter { step } => {
                let matrix = self.nodes[*step].matrix.as_ref();
                let (var, values) = matrix.map(|m| (m.var.as_str(), &m.values[..])).unzip();
                NodeSpec::Scatter { data: json!({ "matrix": var, "values": values }) }
            }
            PlanKind::Gather { .. } => {
                NodeSpec::Gather { strategy: GatherStrategy::First { n: 1 } }
            }
        }
    }

    /// The graph the pipeline becomes (see the module's header).
    pub fn plan(&self) -> Plan {
        let mut plan = Plan { nodes: Vec::new(), edges: Vec::new() };
        let mut gathers: BTreeSet<(&str, &'static str)> = BTreeSet::new();
        for step in &self.nodes {
            for (pred, on) in &step.after {
                gathers.insert((pred.as_str(), on.as_str()));
            }
        }
        for (index, step) in self.nodes.iter().enumerate() {
            let Some(matrix) = &step.matrix else {
                let kind = PlanKind::Task { step: index, value: None };
                plan.nodes.push(PlanNode { id: step.name.clone(), kind, join: step.join });
                continue;
            };
            plan_matrix(&mut plan, index, step, matrix);
            for on in [On::Ok, On::Error, On::Any] {
                if on == On::Ok || gathers.contains(&(step.name.as_str(), on.as_str())) {
                    plan_gather(&mut plan, index, step, matrix, on);
                }
            }
        }
        for step in &self.nodes {
            for (pred, on) in &step.after {
                let from = match self.step(pred).and_then(|p| p.matrix.as_ref()) {
                    Some(_) => gather_id(pred, *on),
                    None => pred.clone(),
                };
                let edge = PlanEdge { from, to: step.name.clone(), condition: on.condition() };
                plan.edges.push(edge);
            }
        }
        plan
    }

    /// The outputs the command of `step` can read: its direct predecessors' (every instance
    /// of a matrix predecessor's).
    pub fn inputs(&self, step: &Step) -> Vec<Input> {
        let mut inputs: Vec<Input> = Vec::new();
        let mut seen = BTreeSet::new();
        for (pred, _) in &step.after {
            if !seen.insert(pred.as_str()) {
                continue;
            }
            match self.step(pred).and_then(|p| p.matrix.as_ref()) {
                Some(matrix) => inputs.extend(matrix.values.iter().map(|value| Input {
                    node: instance_id(pred, value),
                    var: format!("{}_{}", output_var(pred), env_word(value)),
                })),
                None => inputs.push(Input { node: pred.clone(), var: output_var(pred) }),
            }
        }
        inputs
    }

    /// The step named `name`.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.nodes.iter().find(|step| step.name == name)
    }
}

impl PlanKind {
    /// The index of the step the node comes from.
    pub fn step(&self) -> usize {
        match self {
            PlanKind::Task { step, .. }
            | PlanKind::Scatter { step }
            | PlanKind::Gather { step, .. } => *step,
        }
    }
}

/// A matrix node's scatter and instances, with the edges between them.
fn plan_matrix(plan: &mut Plan, index: usize, step: &Step, matrix: &Matrix) {
    let scatter = PlanNode {
        id: step.name.clone(),
        kind: PlanKind::Scatter { step: index },
        join: step.join,
    };
    plan.nodes.push(scatter);
    for value in &matrix.values {
        let id = instance_id(&step.name, value);
        let kind = PlanKind::Task { step: index, value: Some(value.clone()) };
        plan.nodes.push(PlanNode { id: id.clone(), kind, join: JoinType::All });
        let condition = Some(TokenColor::named(value.clone()));
        plan.edges.push(PlanEdge { from: step.name.clone(), to: id, condition });
    }
}

/// The gather of a matrix node's instances for edges that fire `on` it: every instance
/// succeeded (`ok`), the first failed (`error`), every one ended (`any`).
fn plan_gather(plan: &mut Plan, index: usize, step: &Step, matrix: &Matrix, on: On) {
    let id = gather_id(&step.name, on);
    let join = if on == On::Error { JoinType::Any } else { JoinType::All };
    let kind = PlanKind::Gather { step: index, on };
    plan.nodes.push(PlanNode { id: id.clone(), kind, join });
    for value in &matrix.values {
        let from = instance_id(&step.name, value);
        plan.edges.push(PlanEdge { from, to: id.clone(), condition: on.condition() });
    }
}

/// The graph node of a matrix node's instance for `value`: `NAME[value]`.
pub fn instance_id(name: &str, value: &str) -> String {
    format!("{name}[{value}]")
}

/// The graph node a matrix node's successors on `on` hang off: `NAME[*]`, `NAME[*:error]`,
/// `NAME[*:any]`.
pub fn gather_id(name: &str, on: On) -> String {
    match on {
        On::Ok => format!("{name}[*]"),
        On::Error | On::Any => format!("{name}[*:{}]", on.as_str()),
    }
}

/// `SPINDLE_OUTPUT_<NODE>`: the node's name upper-cased, other than letters and digits as `_`.
pub fn output_var(node: &str) -> String {
    format!("{RESERVED_ENV_PREFIX}OUTPUT_{}", env_word(node))
}

/// `text` upper-cased, every character but ASCII letters and digits as `_`.
pub fn env_word(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
        .collect()
}

/// The file a graph node's output is kept in, in the run's outputs directory: its id with `%`
/// and `/` escaped (`%25`, `%2F`), then `.out`; an id that would make a name longer than
/// [`OUTPUT_FILE_BYTES_MAX`] keeps its first 160 bytes, then `~` and 16 hex digits of the id's
/// SHA-256.
pub fn output_file(node: &str) -> String {
    let escaped = node.replace('%', "%25").replace('/', "%2F");
    if escaped.len() + ".out".len() <= OUTPUT_FILE_BYTES_MAX {
        return format!("{escaped}.out");
    }
    let cut = (0..=160).rev().find(|&i| escaped.is_char_boundary(i)).unwrap_or(0);
    let digest = hex(&Sha256::digest(node.as_bytes()));
    format!("{}~{}.out", &escaped[..cut], &digest[..16])
}

/// The longest name of an outputs file (file systems allow 255 bytes).
pub const OUTPUT_FILE_BYTES_MAX: usize = 200;

/// The most of a pipeline's text one `source` event holds.
const SOURCE_PART_BYTES: usize = 256 * 1024;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    name: String,
    nodes: Ordered,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    run: String,
    #[serde(default)]
    after: Vec<RawAfter>,
    #[serde(default)]
    retries: u32,
    timeout_s: Option<u64>,
    join: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    matrix: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawAfter {
    Name(String),
    Edge(RawEdge),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdge {
    node: String,
    on: Option<String>,
}

/// The nodes object in file order, duplicates kept (so that they can be reported), each
/// node still JSON (so that an error in it can name it).
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of nodes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Ordered(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Pipeline, (Option<String>, String)> {
        let raw: RawPipeline = serde_json::from_str(text).map_err(|e| (None, e.to_string()))?;
        check(raw, String::new())
    }

    #[test]
    fn a_good_pipeline_parses_with_its_edges() {
        let pipeline = parse(
            r#"{"name":"p","nodes":{"a":{"run":"true"},
                "b":{"run":"true","after":["a",{"node":"a","on":"error"}],"join":"any"}}}"#,
        )
        .expect("good");
        let b = pipeline.step("b").expect("b");
        assert_eq!(b.after, [("a".to_owned(), On::Ok), ("a".to_owned(), On::Error)]);
        assert_eq!(b.join, JoinType::Any);
    }

    #[test]
    fn bad_pipelines_name_the_node_and_the_reason() {
        let cases = [
            (r#"{"name":"p","nodes":{"a":{"run":"true","after":["x"]}}}"#, "unknown node"),
            (r#"{"name":"p","nodes":{"a":{"run":" "}}}"#, "empty"),
            (r#"{"name":"p","nodes":{"a":{"run":"true"},"a":{"run":"true"}}}"#, "twice"),
            (
                r#"{"name":"p","nodes":{"a":{"run":"true","after":[{"node":"a","on":"x"}]}}}"#,
                "\"on\"",
            ),
            (
                r#"{"name":"p","nodes":{"a":{"run":"true","after":["b"]},"b":{"run":"true","after":["a"]}}}"#,
                "cycle",
            ),
            (r#"{"name":"p","nodes":{"a":{"run":"true","join":"some"}}}"#, "join"),
        ];
        for (text, reason) in cases {
            let (node, message) = parse(text).expect_err(text);
            assert!(message.contains(reason), "{text}: {message}");
            assert!(node.is_some(), "{text}: no node named");
        }
        assert!(parse(r#"{"name":"p","nodes":{}}"#).is_err());
        for typo in [
            r#"{"name":"p","nodes":{"a":{"run":"true","typo":1}}}"#,
            r#"{"name":"p","nodes":{"a":{"run":"true"},"b":{"run":"true","after":[{"node":"a","when":"error"}]}}}"#,
            r#"{"name":"p","nodes":{"a":{"run":"true","retries":-1}}}"#,
        ] {
            let (node, _) = parse(typo).expect_err(typo);
            assert!(node.is_some(), "{typo}: the node is named");
        }
    }

    #[test]
    fn a_name_with_a_control_character_is_refused_and_names_no_node() {
        let hostile = [
            "p\0",
            "\u{1b}[2Jp",
            "line\nbreak",
            "tab\there",
            "del\u{7f}",
            "c1\u{9b}",
            "evil\u{202e}txt.exe",
            "zero\u{200b}width",
            "iso\u{2067}late",
            "sep\u{2028}",
            "\u{feff}bom",
        ];
        for name in hostile {
            let text = json!({ "name": name, "nodes": { "a": { "run": "true" } } }).to_string();
            let (node, message) = parse(&text).expect_err(name);
            assert!(node.is_none(), "{name:?}: the pipeline's name, not a node's");
            assert!(message.contains("control character"), "{name:?}: {message}");
            let shown = |c: char| c.is_control() || is_invisible_format(c);
            assert!(!message.chars().any(shown), "printed escaped: {message:?}");
        }
        let node = json!({ "name": "p", "nodes": { "a\u{202e}b": { "run": "true" } } });
        assert!(parse(&node.to_string()).is_err(), "nor in a node's name");
        let fine = json!({ "name": "build · 2 ✓", "nodes": { "a": { "run": "true" } } });
        assert!(parse(&fine.to_string()).is_ok(), "other characters are fine");
    }

    #[test]
    fn nul_in_a_command_is_refused_naming_the_node() {
        let text = r#"{"name":"p","nodes":{"a":{"run":"true"},"b":{"run":"echo a\u0000b"}}}"#;
        let (node, message) = parse(text).expect_err("NUL in run");
        assert_eq!(node.as_deref(), Some("b"));
        assert!(message.contains("NUL") && message.contains("\"run\""), "{message}");
        let newline = r#"{"name":"p","nodes":{"a":{"run":"echo a\necho b\t"}}}"#;
        assert!(parse(newline).is_ok(), "other control characters are a shell's to read");
    }

    #[test]
    fn env_is_the_pipelines_under_the_nodes_and_checked() {
        let pipeline = parse(
            r#"{"name":"p","env":{"A":"1","B":"2"},"nodes":{"a":{"run":"true","env":{"B":"3"},"cwd":"sub"}}}"#,
        )
        .expect("good");
        let a = pipeline.step("a").expect("a");
        let env: Vec<(&str, &str)> = a.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(env, [("A", "1"), ("B", "3")]);
        assert_eq!(a.cwd.as_deref(), Some("sub"));
        for (text, reason) in [
            (r#"{"name":"p","nodes":{"a":{"run":"true","env":{"":"x"}}}}"#, "empty"),
            (r#"{"name":"p","nodes":{"a":{"run":"true","env":{"A=B":"x"}}}}"#, "'='"),
            (r#"{"name":"p","nodes":{"a":{"run":"true","env":{"A":"x\u0000"}}}}"#, "NUL"),
            (r#"{"name":"p","nodes":{"a":{"run":"true","env":{"SPINDLE_NODE":"x"}}}}"#, "SPINDLE_"),
            (r#"{"name":"p","nodes":{"a":{"run":"true","env":{"A":1}}}}"#, "string"),
            (r#"{"name":"p","nodes":{"a":{"run":"true","cwd":""}}}"#, "cwd"),
        ] {
            let (node, message) = parse(text).expect_err(text);
            assert!(message.contains(reason), "{text}: {message}");
            assert_eq!(node.as_deref(), Some("a"), "{text}: the node is named");
        }
        let (node, message) =
            parse(r#"{"name":"p","env":{"SPINDLE_X":"1"},"nodes":{"a":{"run":"true"}}}"#)
                .expect_err("a reserved name");
        assert!(node.is_none() && message.contains("\"env\""), "{message}");
    }

    #[test]
    fn a_matrix_becomes_a_scatter_its_instances_and_gathers() {
        let pipeline = parse(
            r#"{"name":"p","nodes":{"a":{"run":"true"},
                "m":{"run":"true","after":["a"],"matrix":{"target":["x86","arm"]}},
                "ok":{"run":"true","after":["m"]},
                "bad":{"run":"true","after":[{"node":"m","on":"error"}]}}}"#,
        )
        .expect("good");
        let plan = pipeline.plan();
        let ids: Vec<&str> = plan.nodes.iter().map(|node| node.id.as_str()).collect();
        assert_eq!(ids, ["a", "m", "m[x86]", "m[arm]", "m[*]", "m[*:error]", "ok", "bad"]);
        let edges: Vec<(&str, &str)> =
            plan.edges.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
        for edge in [("a", "m"), ("m", "m[x86]"), ("m[arm]", "m[*]"), ("m[*]", "ok")] {
            assert!(edges.contains(&edge), "{edge:?} in {edges:?}");
        }
        assert!(edges.contains(&("m[*:error]", "bad")), "{edges:?}");
        let vars: Vec<String> =
            pipeline.inputs(pipeline.step("ok").expect("ok")).into_iter().map(|i| i.var).collect();
        assert_eq!(vars, ["SPINDLE_OUTPUT_M_X86", "SPINDLE_OUTPUT_M_ARM"]);
        let m = pipeline.step("m").expect("m");
        assert_eq!(pipeline.inputs(m)[0].var, "SPINDLE_OUTPUT_A");
    }

    #[test]
    fn bad_matrices_name_the_node() {
        let many: Vec<String> = (0..=MATRIX_MAX).map(|i| format!("v{i}")).collect();
        let too_many = json!({"name":"p","nodes":{"m":{"run":"true","matrix":{"v":many}}}});
        let (name, value) = ("n".repeat(200), "v".repeat(60));
        let long_name = json!({"name":"p","nodes":{name:{"run":"true","matrix":{"v":[value]}}}});
        for (text, reason) in [
            (r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{"v":[]}}}}"#, "1 to"),
            (r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{"v":["a","a"]}}}}"#, "twice"),
            (r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{"v":["a b"]}}}}"#, "letters"),
            (r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{"a-b":["x"]}}}}"#, "variable"),
            (r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{"a":["x"],"b":["y"]}}}}"#, "one"),
            (r#"{"name":"p","nodes":{"m":{"run":"true","matrix":{}}}}"#, "one"),
            (r#"{"name":"p","nodes":{"m":{"run":"true","matrix":["x"]}}}"#, "map"),
            (
                r#"{"name":"p","nodes":{"m[x]":{"run":"true"},"m":{"run":"true","matrix":{"v":["x"]}}}}"#,
                "rename",
            ),
            (
                r#"{"name":"p","nodes":{"a-b":{"run":"true"},"a_b":{"run":"true"},"c":{"run":"true","after":["a-b","a_b"]}}}"#,
                "SPINDLE_OUTPUT_A_B",
            ),
            (&too_many.to_string(), "1 to 256"),
            (&long_name.to_string(), "longer than 240 bytes"),
        ] {
            let (node, message) = parse(text).expect_err(text);
            assert!(message.contains(reason), "{text}: {message}");
            assert!(node.is_some(), "{text}: the node is named");
        }
    }

    #[test]
    fn output_files_escape_what_a_file_name_cannot_hold() {
        assert_eq!(output_file("build[x86]"), "build[x86].out");
        assert_eq!(output_file("a/b%c"), "a%2Fb%25c.out");
        assert_eq!(output_var("deploy-prod.eu"), "SPINDLE_OUTPUT_DEPLOY_PROD_EU");
        let (long, other) = ("/".repeat(200), format!("{}x", "/".repeat(199)));
        assert!(output_file(&long).len() <= OUTPUT_FILE_BYTES_MAX, "{}", output_file(&long));
        assert_ne!(output_file(&long), output_file(&other), "the digest tells them apart");
    }
}
