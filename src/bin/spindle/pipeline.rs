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
//! Everything is checked before anything is written: a bad file is one error naming the file,
//! the node and the reason.
//!
//! The fuzz harness `fuzz/harness/pipeline.rs` includes this file as it is (`#[path]`), so it
//! uses only `spindle`, `serde`, `serde_json`, `sha2` and std.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use spindle::{JoinType, NodeOptions, NodeSpec, TokenColor, Tx};

/// A checked pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// Its name.
    pub name: String,
    /// SHA-256 of its canonical JSON: a run resumes only the same content.
    pub hash: String,
    /// Its nodes, in file order.
    pub nodes: Vec<Step>,
}

/// One node of a pipeline.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub run: String,
    pub after: Vec<(String, On)>,
    pub retries: u32,
    pub timeout_s: Option<u64>,
    pub join: JoinType,
}

/// When an edge fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    Ok,
    Error,
    Any,
}

impl On {
    fn condition(self) -> Option<TokenColor> {
        match self {
            On::Ok => Some(TokenColor::Ok),
            On::Error => Some(TokenColor::Error),
            On::Any => None,
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
/// The longest command.
const RUN_BYTES_MAX: usize = 64 * 1024;

/// Reads and checks a pipeline file.
pub fn load(path: &Path) -> Result<Pipeline, BadPipeline> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| BadPipeline {
        file: file.clone(),
        node: None,
        reason: format!("cannot read: {e}"),
    })?;
    parse(&file, &text)
}

/// Checks the text of a pipeline file; `file` names it in the error. What [`load`] does once
/// it has read the file (the fuzz harness `fuzz/harness/pipeline.rs` calls it directly).
pub fn parse(file: &str, text: &str) -> Result<Pipeline, BadPipeline> {
    let bad = |node: Option<&str>, reason: String| BadPipeline {
        file: file.to_owned(),
        node: node.map(str::to_owned),
        reason,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| bad(None, format!("{e}")))?;
    let raw: RawPipeline = serde_json::from_str(text).map_err(|e| bad(None, format!("{e}")))?;
    let hash = hex(&Sha256::digest(value.to_string().as_bytes()));
    check(raw, hash).map_err(|(node, reason)| bad(node.as_deref(), reason))
}

/// Checks names, edges, joins, retries and cycles.
fn check(raw: RawPipeline, hash: String) -> Result<Pipeline, (Option<String>, String)> {
    if raw.name.trim().is_empty() || raw.name.len() > 200 {
        return Err((None, "the pipeline needs a name of 1 to 200 bytes".into()));
    }
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
    let mut steps = Vec::new();
    for (name, value) in &raw.nodes.0 {
        let named = |reason: String| (Some(name.clone()), reason);
        let node: RawNode =
            serde_json::from_value(value.clone()).map_err(|e| named(e.to_string()))?;
        steps.push(check_node(name, &node, &names).map_err(named)?);
    }
    let edges: usize = steps.iter().map(|step| step.after.len()).sum();
    if edges > EDGES_MAX {
        return Err((None, format!("the pipeline has more than {EDGES_MAX} edges")));
    }
    if let Some(node) = find_cycle(&steps) {
        return Err((Some(node), "it is part of a cycle (cycles are not supported)".into()));
    }
    Ok(Pipeline { name: raw.name, hash, nodes: steps })
}

fn check_node(name: &str, node: &RawNode, names: &BTreeSet<&str>) -> Result<Step, String> {
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return Err("a node name must be 1 to 200 bytes without control characters".into());
    }
    if node.run.trim().is_empty() {
        return Err("\"run\" is empty".into());
    }
    if node.run.len() > RUN_BYTES_MAX {
        return Err(format!("\"run\" is longer than {RUN_BYTES_MAX} bytes"));
    }
    if node.retries > RETRIES_MAX {
        return Err(format!("\"retries\" is at most {RETRIES_MAX}"));
    }
    if node.timeout_s == Some(0) {
        return Err("\"timeout_s\" must be at least 1".into());
    }
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
        });
        let steps = &self.nodes;
        let graph = tx.exec(spindle::graph::Create { metadata, parent: None })?;
        for step in steps {
            let spec = NodeSpec::task(json!({
                "run": step.run,
                "retries": step.retries,
                "timeout_s": step.timeout_s,
            }));
            let options = NodeOptions::new().id(step.name.clone()).join(step.join);
            let graph = graph.clone();
            tx.exec(spindle::graph::AddNode { graph, spec, options })?;
        }
        for step in steps {
            for (pred, on) in &step.after {
                tx.exec(spindle::graph::AddEdge {
                    graph: graph.clone(),
                    from: pred.clone(),
                    to: step.name.clone(),
                    condition: on.condition(),
                })?;
            }
        }
        Ok(graph)
    }

    /// The step named `name`.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.nodes.iter().find(|step| step.name == name)
    }
}

/// The `kind` a run's graph carries in its metadata.
pub const RUN_KIND: &str = "spindle-run";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    name: String,
    nodes: Ordered,
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
}
