//! What the command's modules share: errors and exit codes, output, opening the store, and
//! small parsers. Every other module may use it; it uses none of them.

use std::path::Path;

use spindle::{Graph, Options, Page, Store};

/// Why a command failed, and so its exit code.
#[derive(Debug)]
pub enum CliError {
    /// Bad input: exit 2.
    Bad(String),
    /// The store failed: exit 3.
    Store(spindle::Error),
    /// Something else went wrong on this machine (a thread, a process): exit 3.
    Internal(String),
}

impl From<spindle::Error> for CliError {
    fn from(error: spindle::Error) -> Self {
        match error {
            spindle::Error::InvalidInput(message) => CliError::Bad(message),
            spindle::Error::NotFound { kind, id } => CliError::Bad(format!("no {kind} {id}")),
            spindle::Error::Conflict(message) => CliError::Bad(message),
            too_large @ spindle::Error::TooLarge { .. } => CliError::Bad(too_large.to_string()),
            other => CliError::Store(other),
        }
    }
}

/// Where results go: JSON or tables on stdout, notes on stderr.
pub struct Output {
    pub json: bool,
}

impl Output {
    /// A note for the person at the terminal (stderr, so stdout stays clean for `--json`).
    pub fn note(&self, text: &str) {
        eprintln!("{text}");
    }

    /// One JSON document on stdout.
    pub fn print_json(&self, value: &serde_json::Value) {
        println!("{value}");
    }
}

/// How a command uses the store.
pub enum Access {
    /// Runs pipelines: recovers interrupted runs at open.
    Runner,
    /// Changes the store, leaving other processes' running nodes alone.
    Writer,
    /// Administers tenants and tokens: like `Writer`, and may create the store.
    Administrator,
    /// Only reads (the file must exist).
    Reader,
}

pub fn open(path: &Path, tenant: &str, access: Access) -> Result<Store, CliError> {
    let creates = matches!(access, Access::Runner | Access::Administrator);
    if !creates && !path.exists() {
        return Err(CliError::Bad(format!("no store at {}", path.display())));
    }
    let options = Options {
        recover_on_open: matches!(access, Access::Runner),
        read_only: matches!(access, Access::Reader),
        ..Options::default()
    };
    let store = Store::open_with(path, options)?;
    Ok(store.tenant(tenant)?)
}

/// `500ms`, `45s`, `30m`, `12h`, `7d` in milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<i64, CliError> {
    let bad = || CliError::Bad(format!("a duration is a number and ms, s, m, h or d: {text:?}"));
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| bad())?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    number.checked_mul(unit_ms).ok_or_else(bad)
}

/// The wall clock in epoch milliseconds (the store has its own clock; this is the caller's).
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}

/// Every graph of the view's tenant, read a page at a time.
pub fn all_graphs(store: &Store) -> spindle::Result<Vec<Graph>> {
    all_graphs_by(|page| store.graphs().list(page))
}

/// Every graph of the tenant, read a page at a time with `list`.
pub fn all_graphs_by(
    mut list: impl FnMut(Page) -> spindle::Result<Vec<Graph>>,
) -> spindle::Result<Vec<Graph>> {
    let mut all: Vec<Graph> = Vec::new();
    loop {
        let page = match all.last() {
            Some(last) => Page::after(last.id.clone(), 1000),
            None => Page::first(1000),
        };
        let graphs = list(page)?;
        if graphs.is_empty() {
            return Ok(all);
        }
        all.extend(graphs);
    }
}
