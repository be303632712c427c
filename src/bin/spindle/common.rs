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
            spindle::Error::NotFound { kind, id } => {
                CliError::Bad(format!("no {kind} {id}{}", listing_hint(kind)))
            }
            spindle::Error::Conflict(message) => CliError::Bad(message),
            too_large @ spindle::Error::TooLarge { .. } => CliError::Bad(too_large.to_string()),
            other => CliError::Store(other),
        }
    }
}

/// Which command lists what there is of `kind`.
fn listing_hint(kind: &str) -> &'static str {
    match kind {
        "graph" => " (`spindle runs` and `spindle graphs` list them)",
        "node" => " (`spindle graph show RUN` lists a run's nodes)",
        "item" => " (`spindle queue dead` lists dead items)",
        "tenant" => " (`spindle tenants` lists them)",
        "token" => " (`spindle tokens list` lists them)",
        "process" => " (`spindle processes --all` lists them)",
        _ => "",
    }
}

/// Where results go: JSON or tables on stdout, notes on stderr.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
    /// Notes, progress and per-attempt lines are left out (errors still print).
    pub quiet: bool,
    /// Colour status words on stdout.
    pub color_stdout: bool,
    /// Colour status words on stderr.
    pub color_stderr: bool,
}

/// When to colour: `auto` on a terminal unless `NO_COLOR` is set (to anything but empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl Output {
    /// How a command prints, from its global flags and where its output goes.
    pub fn new(json: bool, quiet: bool, color: ColorChoice) -> Self {
        use std::io::IsTerminal;
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        let colored = |terminal: bool| match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && !no_color,
        };
        Output {
            json,
            quiet,
            color_stdout: colored(std::io::stdout().is_terminal()),
            color_stderr: colored(std::io::stderr().is_terminal()),
        }
    }

    /// A note for the person at the terminal (stderr, so stdout stays clean for `--json`).
    pub fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }

    /// `text`, coloured for stdout by the status word `status` names.
    pub fn paint(&self, status: &str, text: &str) -> String {
        paint(self.color_stdout, status, text)
    }

    /// `text`, coloured for stderr by the status word `status` names.
    pub fn paint_err(&self, status: &str, text: &str) -> String {
        paint(self.color_stderr, status, text)
    }

    /// One JSON document on stdout.
    pub fn print_json(&self, value: &serde_json::Value) {
        println!("{value}");
    }
}

/// `text` in the colour of a status: green for success, red for failure, yellow for what
/// is under way, dim for what was skipped or cancelled.
fn paint(enabled: bool, status: &str, text: &str) -> String {
    let code = match status.trim().to_ascii_lowercase().as_str() {
        "complete" | "ok" | "completed" => "32",
        "failed" | "dead" => "31",
        "running" | "ready" | "retry" | "pending" | "lost" | "wait" => "33",
        "skipped" | "cancelled" => "2",
        _ => return text.to_owned(),
    };
    if enabled { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
}

/// A time as `2026-12-04 05:10:03` (UTC).
pub fn human_time(epoch_ms: i64) -> String {
    let secs = epoch_ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}")
}

/// A duration as `850ms`, `4.2s`, `3m 05s` or `2h 03m`.
pub fn human_duration(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{}m {:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h {:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// The calendar date of a day counted from 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
        return Err(CliError::Bad(format!(
            "no store at {}: run a pipeline there first (`spindle run FILE`), or name another \
             with --db or SPINDLE_DB",
            path.display()
        )));
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

/// A stream named as `KIND:ID` (`graph:RUN`, `queue:NAME`, `custom:NAME`, `execution:ID`,
/// `process:ID`); the error says what a stream name is.
pub fn parse_stream(text: &str) -> Result<spindle::Stream, String> {
    use spindle::StreamKind;
    let bad = || {
        format!(
            "a stream is KIND:ID, KIND graph, queue, custom, execution or process, not {text:?}"
        )
    };
    let (kind, id) = text.split_once(':').ok_or_else(bad)?;
    let kind = match kind {
        "graph" => StreamKind::Graph,
        "queue" => StreamKind::Queue,
        "custom" => StreamKind::Custom,
        "execution" => StreamKind::Execution,
        "process" => StreamKind::Process,
        _ => return Err(bad()),
    };
    Ok(spindle::Stream::new(kind, id))
}

/// Every event of `stream`, read a page at a time.
pub fn read_stream(
    store: &Store,
    stream: &spindle::Stream,
) -> spindle::Result<Vec<spindle::Event>> {
    let mut events: Vec<spindle::Event> = Vec::new();
    loop {
        let after = events.last().map_or(0, |event| event.seq);
        let page = store.events().read(stream, after, 1000)?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_as_people_write_them() {
        assert_eq!(human_time(0), "1970-01-01 00:00:00");
        assert_eq!(human_time(1_796_361_003_000), "2026-12-04 05:10:03");
        assert_eq!(human_time(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(human_duration(850), "850ms");
        assert_eq!(human_duration(4_230), "4.2s");
        assert_eq!(human_duration(185_000), "3m 05s");
        assert_eq!(human_duration(7_380_000), "2h 03m");
    }

    #[test]
    fn status_words_are_coloured_only_when_asked() {
        assert_eq!(paint(true, "failed", "failed"), "\x1b[31mfailed\x1b[0m");
        assert_eq!(paint(true, "ok", "ok"), "\x1b[32mok\x1b[0m");
        assert_eq!(paint(false, "failed", "failed"), "failed");
        assert_eq!(paint(true, "anything", "text"), "text");
    }
}
