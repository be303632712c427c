//! The shape of the code, read from its own `use` lines and paths: the engine (`src/core/`)
//! and the handle (`src/store.rs`, `src/subscription.rs`) name no domain; no domain names
//! another; the one place that names the domains for them is `src/domains.rs`; the
//! command-line tool's modules form no circle and share their helpers through `common.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The domains: a module each, a file or a folder under `src/`.
const DOMAINS: &[&str] = &["log", "auth", "queue", "graph", "process", "workflow"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
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

/// The crate modules `path` names in its code (`crate::NAME`, comments aside).
fn named_modules(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).expect("read a source file");
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            names.insert(name);
        }
        // `use crate::{a, b::c}`: the names inside the braces.
        if let Some(inside) = code.split("crate::{").nth(1) {
            for part in inside.split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

fn domains_named(path: &Path) -> Vec<String> {
    named_modules(path).into_iter().filter(|name| DOMAINS.contains(&name.as_str())).collect()
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
        if file.starts_with(src().join("core")) && named_modules(file).contains("domains") {
            found.push(format!("{} names the domain registry", file.display()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    assert!(files.len() > 10, "the engine's files were read");
}

#[test]
fn no_domain_names_another() {
    let mut found = Vec::new();
    for domain in DOMAINS {
        let files = domain_files(domain);
        assert!(!files.is_empty(), "domain {domain} has files");
        for file in files {
            for other in domains_named(&file) {
                if other != *domain {
                    found.push(format!("{} ({domain}) names {other}", file.display()));
                }
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
        let is_root = file == src().join("lib.rs") || file == src().join("domains.rs");
        let in_cli = file.starts_with(src().join("bin"));
        if named.len() > 1 && !is_root && !in_cli {
            naming_two.push(format!("{} names {named:?}", file.display()));
        }
    }
    assert!(naming_two.is_empty(), "{naming_two:#?}");
}

#[test]
fn the_command_line_tools_modules_form_no_circle() {
    let folder = src().join("bin").join("spindle");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&folder) {
        let module = file.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_owned();
        if module == "main" {
            continue;
        }
        let named = named_modules(&file);
        // A module that names an item of `main.rs` (not a module) would close a circle.
        let modules: BTreeSet<String> = rust_files(&folder)
            .iter()
            .filter_map(|f| f.file_stem().and_then(|s| s.to_str()).map(str::to_owned))
            .collect();
        for name in &named {
            assert!(
                modules.contains(name),
                "{module} names `crate::{name}`, an item of main.rs: share it through common.rs"
            );
        }
        edges.insert(module, named);
    }
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
