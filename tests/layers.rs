//! The shape of the code, read from its own `use` lines and paths: the engine (`src/core/`)
//! and the handle (`src/store.rs`, `src/subscription.rs`) name no domain; no domain names
//! another; the one place that names the domains for them is `src/domains.rs`, and the one
//! above them all is `src/metrics.rs` (every domain's counts for `Store::metrics`); the
//! command-line tool's modules (`cli/src/`, read by their paths) form no circle and share their
//! helpers through `common.rs`, and its dashboard (`ui/`) names nothing of the runner (`run/`)
//! or the pipeline file (`pipeline/`): what they share is in `names.rs` and `log_reader.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's modules that are not domains: the engine, the handle, the registry, the
/// metrics above every domain, and the leaf modules every layer may use.
const NOT_DOMAINS: &[&str] = &[
    "core",
    "domains",
    "metrics",
    "store",
    "subscription",
    "error",
    "hash",
    "ids",
    "limits",
    "options",
    "page",
    "setters",
];

/// The domains: every module `lib.rs` declares that is not in `NOT_DOMAINS` (a new domain is
/// checked as soon as it is declared).
fn domains() -> &'static [String] {
    static DOMAINS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    DOMAINS.get_or_init(read_domains)
}

fn read_domains() -> Vec<String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("read lib.rs");
    let declared = lib.lines().filter_map(|line| {
        let line = line.trim();
        let rest = line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("mod "))?;
        Some(rest.trim_end_matches(';').trim().to_owned())
    });
    let found: Vec<String> =
        declared.filter(|name| !NOT_DOMAINS.contains(&name.as_str())).collect();
    assert!(found.len() >= 6, "lib.rs declares the domains: {found:?}");
    found
}

/// The names `lib.rs` re-exports from each domain (`pub use crate::queue::{Queue, ..}`): naming
/// `crate::Queue` is naming the queue.
fn reexports() -> &'static BTreeMap<String, String> {
    static NAMES: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(read_reexports)
}

fn read_reexports() -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("read lib.rs");
    let code = without_comments(&lib);
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use crate::") else { continue };
        let module: String =
            rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let list = rest.split_once('{').map_or(rest, |(_, list)| list);
        for item in list.split([',', '{', '}']) {
            let name = item.split(" as ").last().unwrap_or("").trim();
            let name = name.rsplit("::").next().unwrap_or(name);
            if name.chars().next().is_some_and(char::is_uppercase) {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names
}

/// Every `.rs` file at or below `path`.
fn rust_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).expect("read a folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The files of a domain: `src/NAME.rs` or everything under `src/NAME/`.
fn domain_files(name: &str) -> Vec<PathBuf> {
    let file = src().join(format!("{name}.rs"));
    if file.exists() { vec![file] } else { rust_files(&src().join(name)) }
}

/// `text` without its `//` comments, as one line.
fn without_comments(text: &str) -> String {
    let lines = text.lines().map(|line| line.split("//").next().unwrap_or(""));
    lines.collect::<Vec<_>>().join(" ")
}

/// How many `super::` reach the crate root from `path` (under `root`): a file directly in the
/// root's folder, or a folder's `mod.rs`, is one level down.
fn depth(path: &Path, root: &Path) -> usize {
    let below = path.strip_prefix(root).expect("a file below the root").components().count();
    let is_mod = path.file_name().is_some_and(|name| name == "mod.rs");
    if is_mod { below - 1 } else { below }
}

/// The top-level names after each `crate::` of `code` (`crate::a::b` gives `a`; `crate::{a::b,
/// c}` gives `a` and `c`, over any number of lines), with `super::` paths that reach the crate
/// root read as `crate::`.
fn crate_paths(path: &Path, root: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).expect("read a source file");
    let mut code = without_comments(&text);
    let up = "super::".repeat(depth(path, root));
    if !up.is_empty() {
        code = code.replace(&up, "crate::");
    }
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = code[at + "crate::".len()..].trim_start();
        match rest.strip_prefix('{') {
            Some(group) => names.extend(top_level_names(group)),
            None => {
                names.insert(leading_name(rest));
            }
        }
    }
    names.remove("");
    names
}

/// The first name of each top-level item of a `{..}` group whose `{` was just read.
fn top_level_names(group: &str) -> Vec<String> {
    let (mut names, mut level, mut at_item) = (Vec::new(), 0usize, true);
    for (index, c) in group.char_indices() {
        match c {
            '{' => level += 1,
            '}' if level == 0 => break,
            '}' => level -= 1,
            ',' if level == 0 => at_item = true,
            c if at_item && !c.is_whitespace() => {
                names.push(leading_name(&group[index..]));
                at_item = false;
            }
            _ => {}
        }
    }
    names
}

fn leading_name(text: &str) -> String {
    text.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// The crate modules a library file names: its `crate::` paths, with the names `lib.rs`
/// re-exports from a domain read as that domain.
fn named_modules(path: &Path) -> BTreeSet<String> {
    let reexports = reexports();
    crate_paths(path, &src())
        .into_iter()
        .map(|name| reexports.get(&name).cloned().unwrap_or(name))
        .collect()
}

fn domains_named(path: &Path) -> Vec<String> {
    let domains = domains();
    named_modules(path).into_iter().filter(|name| domains.contains(name)).collect()
}

#[test]
fn the_engine_and_the_handle_name_no_domain() {
    let mut files = rust_files(&src().join("core"));
    files.push(src().join("store.rs"));
    files.push(src().join("subscription.rs"));
    let mut found = Vec::new();
    for file in &files {
        let named = domains_named(file);
        if !named.is_empty() {
            found.push(format!("{} names {named:?}", file.display()));
        }
        let upward = ["domains", "store", "subscription"];
        let named = named_modules(file);
        if file.starts_with(src().join("core")) && upward.iter().any(|m| named.contains(*m)) {
            found.push(format!("{} names the handle or the registry: {named:?}", file.display()));
        }
        // The registry opens stores with the domains' hooks; the handle never reads them back.
        if named.contains("domains") {
            found.push(format!("{} names the registry: {named:?}", file.display()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    assert!(files.len() > 10, "the engine's files were read");
}

#[test]
fn no_domain_names_another() {
    let mut found = Vec::new();
    for domain in domains() {
        let files = domain_files(domain);
        assert!(!files.is_empty(), "domain {domain} has files");
        for file in files {
            for other in domains_named(&file) {
                if other != *domain {
                    found.push(format!("{} ({domain}) names {other}", file.display()));
                }
            }
            if named_modules(&file).contains("domains") {
                found.push(format!("{} ({domain}) names the registry", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn only_the_registry_and_the_crate_root_name_every_domain() {
    let mut naming_two = Vec::new();
    for file in rust_files(&src()) {
        let named = domains_named(&file);
        let is_root = ["lib.rs", "domains.rs", "metrics.rs"].iter().any(|f| file == src().join(f));
        if named.len() > 1 && !is_root {
            naming_two.push(format!("{} names {named:?}", file.display()));
        }
    }
    assert!(naming_two.is_empty(), "{naming_two:#?}");
}

fn cli_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cli").join("src")
}

/// The command-line tool's module a file is, as a path: `run::attempt` for
/// `cli/src/run/attempt.rs`, `run` for `cli/src/run/mod.rs`, empty for `main.rs`.
fn cli_module(file: &Path) -> String {
    let relative = file.strip_prefix(cli_src()).expect("a file below cli/src");
    let mut names: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if names.last().is_some_and(|last| last == "mod" || last == "main") {
        names.pop();
    }
    names.join("::")
}

/// The paths after each `crate::` of `code`, in full (`crate::a::{b, c::d}` gives `a::b` and
/// `a::c::d`, over any number of lines).
fn full_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        expand("", &code[at + "crate::".len()..], &mut paths);
    }
    paths
}

/// Reads one path (`a::b`, or `a::{..}` read item by item) at the start of `text`, after
/// `prefix`.
fn expand(prefix: &str, text: &str, paths: &mut Vec<String>) {
    let mut path = prefix.to_owned();
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let (mut level, mut start) = (0usize, 0);
            for (index, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => {
                        expand(&path, &group[start..index], paths);
                        return;
                    }
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        expand(&path, &group[start..index], paths);
                        start = index + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name = leading_name(rest);
        if name.is_empty() || name == "self" {
            break;
        }
        if !path.is_empty() {
            path.push_str("::");
        }
        path.push_str(&name);
        rest = rest[name.len()..].trim_start();
        match rest.strip_prefix("::") {
            Some(more) => rest = more.trim_start(),
            None => break,
        }
    }
    if !path.is_empty() {
        paths.push(path);
    }
}

/// The modules of the command-line tool each of its modules names: its `crate::` paths (with
/// `super::` and `self::` read from where the file is), each read as the longest module it
/// starts with. Panics at a path that names no module (an item of `main.rs`).
fn cli_edges() -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(&cli_src());
    let modules: BTreeSet<String> = files.iter().map(|file| cli_module(file)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = cli_module(file);
        if module.is_empty() {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read a source file");
        // A test module's `use super::*` names the file it is in.
        let mut code = without_comments(&text).replace("use super::*;", "");
        let parts: Vec<&str> = module.split("::").collect();
        for up in (1..=parts.len()).rev() {
            let base = parts[..parts.len() - up].join("::");
            let to =
                if base.is_empty() { "crate::".to_owned() } else { format!("crate::{base}::") };
            code = code.replace(&"super::".repeat(up), &to);
        }
        code = code.replace(" self::", &format!(" crate::{module}::"));
        let named = edges.entry(module.clone()).or_default();
        for path in full_paths(&code) {
            let found = (1..=path.split("::").count()).rev().find_map(|n| {
                let prefix = path.split("::").take(n).collect::<Vec<_>>().join("::");
                modules.contains(&prefix).then_some(prefix)
            });
            let Some(found) = found else {
                panic!(
                    "{module} names `crate::{path}`, an item of main.rs: share it through common.rs"
                )
            };
            if found != module {
                named.insert(found);
            }
        }
    }
    edges
}

/// Whether `module` is `folder` or below it.
fn is_under(module: &str, folder: &str) -> bool {
    module == folder || module.starts_with(&format!("{folder}::"))
}

#[test]
fn the_dashboard_names_nothing_of_the_runner_or_the_pipeline_file() {
    let edges = cli_edges();
    let dashboard: Vec<&String> = edges.keys().filter(|module| is_under(module, "ui")).collect();
    assert!(dashboard.len() > 5, "the dashboard's modules were read: {dashboard:?}");
    let mut found = Vec::new();
    for module in dashboard {
        for named in &edges[module] {
            if is_under(named, "run") || is_under(named, "pipeline") {
                found.push(format!("{module} names {named}"));
            }
        }
    }
    assert!(found.is_empty(), "share it through names.rs or log_reader.rs: {found:#?}");
    for shared in ["names", "log_reader"] {
        let runner = edges[shared]
            .iter()
            .filter(|named| is_under(named, "run") || is_under(named, "pipeline"));
        assert_eq!(runner.count(), 0, "{shared} names {:?}", edges[shared]);
    }
    assert!(edges["names"].is_empty(), "names.rs uses no module: {:?}", edges["names"]);
}

#[test]
fn the_command_line_tools_modules_form_no_circle() {
    let edges = cli_edges();
    assert!(edges.len() > 20, "the command's modules were read: {edges:?}");
    assert!(edges.contains_key("common") && edges["common"].is_empty(), "common uses no module");
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = edges[start].iter().collect();
        while let Some(next) = stack.pop() {
            assert_ne!(next, start, "{start} reaches itself through the modules it uses");
            if seen.insert(next.clone()) {
                stack.extend(edges.get(next).into_iter().flatten());
            }
        }
    }
}

/// The engine's modules (`src/core/NAME.rs`, or a folder `src/core/NAME/`) each names: every
/// `crate::core::NAME` path in its code (not only `use` lines), and `super::NAME` in a file
/// directly under `src/core/`.
fn core_edges() -> BTreeMap<String, BTreeSet<String>> {
    let core = src().join("core");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&core) {
        let relative = file.strip_prefix(&core).expect("below core");
        let first = relative.components().next().expect("a name");
        let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        if module == "mod" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let mut code = without_comments(&text);
        if relative.components().count() == 1 {
            code = code.replace("super::", "crate::core::");
        }
        let named = edges.entry(module.clone()).or_default();
        for (at, _) in code.match_indices("crate::core::") {
            let rest = code[at + "crate::core::".len()..].trim_start();
            match rest.strip_prefix('{') {
                Some(group) => named.extend(top_level_names(group)),
                None => {
                    named.insert(leading_name(rest));
                }
            }
        }
        named.remove(&module);
        named.remove("");
    }
    edges
}

#[test]
fn only_the_stores_threads_name_the_actor_and_the_connection() {
    let edges = core_edges();
    assert!(edges.len() > 15, "the engine's modules were read: {edges:?}");
    let threads = ["actor", "readers", "writers"];
    let mut found = Vec::new();
    for (module, named) in &edges {
        for above in ["actor", "conn"] {
            if named.contains(above) && !threads.contains(&module.as_str()) {
                found.push(format!("core/{module} names core/{above}"));
            }
        }
    }
    assert!(found.is_empty(), "what both need belongs below them (state.rs, db.rs): {found:#?}");
}

/// What of the engine the domains may name: the op contract, the transaction, the statement
/// seam, the event store and the kept counts' audit. The rest of the engine (the actor, the
/// mailbox, the readers, the schema) is for the handle and the registry; the connections
/// (`core/conn.rs`, `core/sqlite/`, `core/postgres/`) are private to `core`, so the compiler
/// refuses them to everyone above it.
const DOMAINS_FACE: &[&str] = &["op", "tx", "db", "events", "counts"];

/// Modules `lib.rs` declares beside the domains that are tools over a whole store, not
/// domains: the copy of a store file into PostgreSQL (which reads the schema and opens the
/// file itself), and the fuzz harnesses' second compile of pure checks.
const TOOLS: &[&str] = &["migrate", "fuzzing"];

#[test]
fn domains_name_only_the_engines_face_for_them() {
    let (mut found, mut seen) = (Vec::new(), 0);
    for domain in domains().iter().filter(|name| !TOOLS.contains(&name.as_str())) {
        for file in domain_files(domain) {
            let text = std::fs::read_to_string(&file).expect("read a source file");
            let mut code = without_comments(&text);
            let up = "super::".repeat(depth(&file, &src()));
            if !up.is_empty() {
                code = code.replace(&up, "crate::");
            }
            for path in full_paths(&code) {
                let Some(rest) = path.strip_prefix("core::") else { continue };
                seen += 1;
                let module = rest.split("::").next().unwrap_or_default();
                // The queue's tests of its PostgreSQL statements run them as the server does.
                let rewrite_in_tests = file.ends_with("queue/set_sql.rs") && rest == "pg::rewrite";
                if !DOMAINS_FACE.contains(&module) && !rewrite_in_tests {
                    found.push(format!("{} ({domain}) names core::{rest}", file.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    assert!(seen > 50, "the domains' engine paths were read: {seen}");
}
