//! `spindle ui`'s answers against the library's reads of the same store, in the same run: the
//! runs list (its first page, and a page deep into it) of a store with 100,000 runs, and the
//! graph view of a 10,000-node run. Each figure is the median of its requests; the issue's bar
//! is the dashboard within 10x of the library.
//!
//! ```text
//! cargo bench --bench ui
//! cargo bench --bench ui -- --smoke    # 1,000 runs, a 1,000-node run: does it still run?
//! ```
//!
//! The dashboard is the built binary on a loopback port, asked over a new connection per
//! request (as a browser's first request is), so its figure holds HTTP, JSON and the store;
//! the library's figure is the same reads from this process: `Graphs::find` for a page of 50
//! runs; `Graphs::get`, `nodes` and `edges` for the graph view.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use spindle::graph::{AddEdge, AddNode, Create};
use spindle::{Durability, GraphFilter, NodeOptions, NodeSpec, Options, Page, Store, TxOutcome};

const BIN: &str = env!("CARGO_BIN_EXE_spindle");
/// Runs one transaction creates while filling.
const RUNS_PER_TX: usize = 5_000;
/// The runs list's page.
const PAGE: usize = 50;

fn main() {
    let smoke = std::env::args().any(|arg| arg == "--smoke");
    let (runs, nodes, samples) = if smoke { (1_000, 1_000, 5) } else { (100_000, 10_000, 31) };
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("ui.db");
    let began = Instant::now();
    let (big, deep) = fill(&db, runs, nodes);
    println!(
        "ui: {runs} runs and a {nodes}-node run, filled in {:.1} s",
        began.elapsed().as_secs_f64()
    );

    let store = Store::open(&db).expect("open");
    let ui = Ui::start(&db);
    let filter = GraphFilter::default()
        .metadata("kind", json!("spindle-run"))
        .roots_only(true)
        .newest_first(true);
    let cases: [Case; 3] = [
        (
            "runs list, first page",
            format!("/api/runs?limit={PAGE}"),
            Box::new(|| drop(store.graphs().find(&filter, Page::first(PAGE + 1)).expect("find"))),
        ),
        (
            "runs list, a page deep in",
            format!("/api/runs?limit={PAGE}&after={deep}"),
            Box::new(|| {
                let page = Page::after(deep.clone(), PAGE + 1);
                drop(store.graphs().find(&filter, page).expect("find"));
            }),
        ),
        (
            "graph view",
            format!("/api/runs/{big}"),
            Box::new(|| {
                drop(store.graphs().get(&big).expect("get"));
                drop(store.graphs().nodes(&big).expect("nodes"));
                drop(store.graphs().edges(&big).expect("edges"));
            }),
        ),
    ];
    for (name, path, library) in &cases {
        let library_ms = median_ms(samples, library);
        let ui_ms = median_ms(samples, || ui.get(path));
        println!(
            "  {name}: library {library_ms:.2} ms, dashboard {ui_ms:.2} ms (median of {samples}): \
             {:.1}x",
            ui_ms / library_ms
        );
    }
    store.close().expect("close");
}

/// Fills a store: `runs` runs (graphs marked as the CLI marks them) and one run of `nodes`
/// nodes in layers of 100, each node after one of the layer before. Returns the big run's id
/// and the id of a run halfway down the list.
fn fill(db: &Path, runs: usize, nodes: usize) -> (String, String) {
    let options = Options::default().durability(Durability::Normal);
    let store = Store::open_with(db, options).expect("open");
    let mut ids = Vec::with_capacity(runs);
    for chunk in 0..runs.div_ceil(RUNS_PER_TX) {
        let count = RUNS_PER_TX.min(runs - chunk * RUNS_PER_TX);
        let made = store
            .transaction(move |tx| {
                let mut made = Vec::with_capacity(count);
                for n in 0..count {
                    let metadata =
                        json!({ "kind": "spindle-run", "pipeline": format!("p{}", n % 7) });
                    made.push(tx.exec(Create { metadata, parent: None })?);
                }
                Ok(TxOutcome::Commit(made))
            })
            .expect("create runs");
        ids.extend(made);
    }
    let big = store
        .graphs()
        .create(json!({ "kind": "spindle-run", "pipeline": "big" }))
        .expect("create the big run");
    let graph = big.clone();
    store
        .transaction(move |tx| {
            for n in 0..nodes {
                let spec = NodeSpec::task(json!({ "run": format!("step {n}") }));
                let options = NodeOptions::new().id(format!("n{n}"));
                tx.exec(AddNode { graph: graph.clone(), spec, options })?;
                if n >= 100 {
                    let (from, to) = (format!("n{}", n - 100), format!("n{n}"));
                    tx.exec(AddEdge { graph: graph.clone(), from, to, condition: None })?;
                }
            }
            Ok(TxOutcome::Commit(()))
        })
        .expect("the big run");
    store.close().expect("close");
    (big, ids[ids.len() / 2].clone())
}

/// A measured answer: its name, the dashboard's path, the library's reads.
type Case<'a> = (&'static str, String, Box<dyn Fn() + 'a>);

/// The median of `samples` timings of `work`, in ms.
fn median_ms(samples: usize, mut work: impl FnMut()) -> f64 {
    work(); // warm the caches both ways alike
    let mut times: Vec<f64> = (0..samples)
        .map(|_| {
            let began = Instant::now();
            work();
            began.elapsed().as_secs_f64() * 1_000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A `spindle ui` on the store, stopped when dropped.
struct Ui {
    child: Child,
    addr: String,
}

impl Ui {
    fn start(db: &Path) -> Self {
        let mut child = Command::new(BIN)
            .arg("--db")
            .arg(db)
            .args(["ui", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spindle ui");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("the address line");
        let addr = line
            .trim()
            .strip_prefix("spindle ui: http://")
            .and_then(|rest| rest.split('/').next())
            .expect("an address")
            .to_owned();
        Ui { child, addr }
    }

    /// Reads the whole answer to `GET path`, which must be 200.
    fn get(&self, path: &str) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr);
        stream.write_all(request.as_bytes()).expect("send");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("read");
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{path}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(300)])
        );
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
