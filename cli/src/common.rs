//! What the command's modules share: errors and exit codes, output, where the store is (a
//! file, or a PostgreSQL database by URL) and opening it, and small parsers. Every other
//! module may use it; it uses none of them.

use std::path::{Path, PathBuf};

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
            // Another store held this one off while it recovered, or has the file open where
            // a restore would replace it: try again (once it is closed), not fix the path.
            held @ spindle::Error::StoreFile {
                kind: std::io::ErrorKind::WouldBlock | std::io::ErrorKind::ResourceBusy,
                ..
            } => CliError::Store(held),
            // A path that cannot hold a store, or a file this user may not use: say which.
            spindle::Error::StoreFile { message, .. } => CliError::Bad(message),
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

/// Where `--db` points: a store file, or a PostgreSQL database (a `postgres://` or
/// `postgresql://` URL; the store lives in the connection's schema, `?options=-csearch_path%3DNAME`).
#[derive(Debug, Clone)]
pub enum Location {
    /// A SQLite store file.
    File(PathBuf),
    /// A PostgreSQL database, by URL.
    Postgres(String),
}

/// Where runs' outputs directories go on a PostgreSQL store, unless `--runs-dir` says: in the
/// current directory (there is no store file to put them beside).
const POSTGRES_RUNS_DIR: &str = "spindle.runs";

impl Location {
    /// The location `--db` names.
    pub fn of(db: &Path) -> Self {
        let text = db.to_string_lossy();
        if names_postgres(&text) {
            Location::Postgres(text.into_owned())
        } else {
            Location::File(db.to_path_buf())
        }
    }

    /// The location for messages: a file's path, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            Location::File(path) => path.display().to_string(),
            Location::Postgres(url) => without_password(url),
        }
    }

    /// The directory that holds the runs' outputs directories (absolute: commands may run
    /// elsewhere): `explicit` (`--runs-dir`) if given, else `<db>.runs` beside a store file, or
    /// `spindle.runs` in the current directory for a PostgreSQL store.
    pub fn runs_dir(&self, explicit: Option<&Path>) -> Result<PathBuf, CliError> {
        let absolute = |path: &Path| {
            std::path::absolute(path).map_err(|error| {
                CliError::Internal(format!(
                    "cannot find the outputs file {}: {error}",
                    path.display()
                ))
            })
        };
        match (explicit, self) {
            (Some(dir), _) => absolute(dir),
            (None, Location::File(db)) => {
                let mut name = std::ffi::OsString::from(absolute(db)?.as_os_str());
                name.push(".runs");
                Ok(PathBuf::from(name))
            }
            (None, Location::Postgres(_)) => absolute(Path::new(POSTGRES_RUNS_DIR)),
        }
    }
}

/// Whether `text` names a PostgreSQL database: a `postgres://` (or `postgresql://`) URL, or a
/// `key=value` connection string (`host=/run/postgresql dbname=app`: its first word is a
/// lower-case key and `=`).
pub fn names_postgres(text: &str) -> bool {
    let url = ["postgres://", "postgresql://"].iter().any(|scheme| text.starts_with(scheme));
    let first = text.split_whitespace().next().unwrap_or_default();
    let conninfo = first.split_once('=').is_some_and(|(key, _)| {
        !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    });
    url || conninfo
}

/// `url` with every password in it replaced by `***`: its user info's (`user:pass@`), and a
/// `password=` parameter's, in a URL's query or a `key=value` connection string.
fn without_password(url: &str) -> String {
    mask_password_params(&mask_user_info(url))
}

/// `url` with the password of its user info, if any, replaced by `***`.
fn mask_user_info(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_owned() };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

/// `text` with the value of every `password=` parameter replaced by `***`: up to the next
/// `&` or space, or the closing quote of a quoted value.
fn mask_password_params(text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password=") {
        let value_start = at + "password=".len();
        let starts_param = at == 0 || rest[..at].ends_with(['?', '&', ' ']);
        masked.push_str(&rest[..value_start]);
        rest = &rest[value_start..];
        if starts_param {
            masked.push_str("***");
            rest = &rest[value_end(rest)..];
        }
    }
    masked.push_str(rest);
    masked
}

/// Where a parameter's value that starts `value` ends: after its closing quote if it is
/// quoted (a backslash escapes the next character), else at the next `&` or space.
fn value_end(value: &str) -> usize {
    if !value.starts_with('\'') {
        return value.find(['&', ' ']).unwrap_or(value.len());
    }
    let mut escaped = false;
    for (index, c) in value.char_indices().skip(1) {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '\'') => return index + 1,
            _ => {}
        }
    }
    value.len()
}

/// Opens the store at `db` for `access`, as the view of `tenant`. A command that does not
/// create the store refuses a location that holds none (a file that is missing, a schema
/// without a store) with exit 2.
pub fn open(db: &Location, tenant: &str, access: Access) -> Result<Store, CliError> {
    let creates = matches!(access, Access::Runner | Access::Administrator);
    let options = Options::default()
        .recover_on_open(matches!(access, Access::Runner))
        .read_only(matches!(access, Access::Reader));
    let store = match db {
        Location::File(path) => open_file(path, creates, options)?,
        Location::Postgres(url) => connect(url, creates, options)?,
    };
    Ok(store.tenant(tenant)?)
}

/// Opens the store file at `path` (which must exist unless the command `creates` it). What
/// else is wrong with the path (a directory, a device, a missing directory, a file this user
/// may not read or write) the library's open says, before it creates anything.
fn open_file(path: &Path, creates: bool, options: Options) -> Result<Store, CliError> {
    let missing =
        std::fs::metadata(path).is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound);
    if !creates && missing {
        let directory = path.parent().filter(|dir| !dir.as_os_str().is_empty());
        if let Some(directory) = directory.filter(|dir| !dir.is_dir()) {
            return Err(CliError::Bad(format!(
                "no store at {}: the directory {} does not exist",
                path.display(),
                directory.display()
            )));
        }
        return Err(CliError::Bad(format!(
            "no store at {}: run a pipeline there first (`spindle run FILE`), or name another \
             with --db or SPINDLE_DB",
            path.display()
        )));
    }
    Ok(Store::open_with(path, options)?)
}

/// Opens the store in the PostgreSQL database `url`; unless the command `creates` it, the
/// connection's schema must hold one already (exit 2 otherwise, and nothing is created).
#[cfg(feature = "postgres")]
fn connect(url: &str, creates: bool, options: Options) -> Result<Store, CliError> {
    let shown = Location::Postgres(url.to_owned()).describe();
    if !creates && !holds_store(url)? {
        return Err(CliError::Bad(format!(
            "no store at {shown}: run a pipeline there first (`spindle run FILE`), copy one \
             there (`spindle migrate`), or name another with --db or SPINDLE_DB"
        )));
    }
    Store::connect_with(url, options).map_err(|error| match error {
        spindle::Error::NotADatabase => CliError::Bad(format!(
            "the schema of {shown} holds tables that are not a store's (or a store of another \
             application): name another schema with ?options=-csearch_path%3DNAME"
        )),
        other => other.into(),
    })
}

#[cfg(not(feature = "postgres"))]
fn connect(url: &str, _: bool, _: Options) -> Result<Store, CliError> {
    let shown = Location::Postgres(url.to_owned()).describe();
    Err(needs_postgres(&format!("the PostgreSQL store at {shown}")))
}

/// What a binary built without the `postgres` feature answers when asked for `what`.
#[cfg(not(feature = "postgres"))]
pub fn needs_postgres(what: &str) -> CliError {
    CliError::Bad(format!(
        "{what} needs PostgreSQL support, which this spindle was built without: build it with \
         `cargo build --features postgres` (or `cargo install spindle --features postgres`)"
    ))
}

/// A raw connection to the PostgreSQL database `url`, for the reads the store's API does not
/// offer.
#[cfg(feature = "postgres")]
pub fn postgres_client(url: &str) -> Result<spindle::postgres::Client, CliError> {
    spindle::postgres::Client::connect(url, spindle::postgres::NoTls).map_err(postgres_error)
}

/// A PostgreSQL client's error, as a store error (exit 3).
#[cfg(feature = "postgres")]
pub fn postgres_error(error: spindle::postgres::Error) -> CliError {
    CliError::Store(spindle::Error::Postgres(error.to_string()))
}

/// Whether the schema of the connection to `url` holds a store (creates nothing).
#[cfg(feature = "postgres")]
fn holds_store(url: &str) -> Result<bool, CliError> {
    let sql = "SELECT current_schema() IS NOT NULL
               AND to_regclass(quote_ident(current_schema()) || '.spindle_meta') IS NOT NULL";
    let row = postgres_client(url)?.query_one(sql, &[]).map_err(postgres_error)?;
    Ok(row.get(0))
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

/// A metadata condition written `KEY=VALUE` (`--meta`, the dashboard's `meta=`): the key is
/// everything before the first `=`; the value is JSON if it parses as JSON (`n=1` a number,
/// `ok=true` a boolean, `n="1"` with its quotes a string, `k=null` null), else the text as a
/// string (`plan=pro`). An array or object parses, and the store refuses it.
pub fn parse_meta(text: &str) -> Result<(String, serde_json::Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("a metadata condition is KEY=VALUE, not {text:?}"))?;
    let value =
        serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
    Ok((key.to_owned(), value))
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
    fn a_postgres_url_is_a_database_and_its_password_is_not_shown() {
        assert!(matches!(Location::of(Path::new("spindle.db")), Location::File(_)));
        assert!(matches!(Location::of(Path::new("postgres://h/db")), Location::Postgres(_)));
        assert!(matches!(Location::of(Path::new("postgresql://h/db")), Location::Postgres(_)));
        let conninfo = Path::new("host=/tmp/pg dbname=app");
        assert!(matches!(Location::of(conninfo), Location::Postgres(_)));
        assert!(matches!(Location::of(Path::new("runs/a=b.db")), Location::File(_)));
        let url = "postgres://app:s3cret@db.internal:5432/app?options=-csearch_path%3Djobs";
        let shown = Location::of(Path::new(url)).describe();
        assert_eq!(shown, "postgres://app:***@db.internal:5432/app?options=-csearch_path%3Djobs");
        assert_eq!(without_password("postgres://app@h/db"), "postgres://app@h/db");
        assert_eq!(without_password("postgres://h/db?x=a@b:c"), "postgres://h/db?x=a@b:c");
        assert_eq!(
            without_password("postgres://app@h/db?password=s3cret&sslmode=disable"),
            "postgres://app@h/db?password=***&sslmode=disable"
        );
        assert_eq!(
            without_password(r"host=h user=app password='s3 \'cret' dbname=app"),
            "host=h user=app password=*** dbname=app"
        );
        assert_eq!(without_password("host=h password=s3cret"), "host=h password=***");
        assert_eq!(without_password("host=h mypassword=x"), "host=h mypassword=x");
    }

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
