//! Reading a pipeline file by its extension: `.json` as it is, `.toml` turned into the same
//! JSON (tables in file order) and then checked by the same code, with the same errors. Kept
//! apart from `pipeline.rs`, which the fuzz harness includes without the `toml` crate.
//!
//! ```toml
//! name = "build"
//! env = { CC = "clang" }
//!
//! [nodes.compile]
//! run = "make TARGET=$SPINDLE_MATRIX_TARGET"
//! matrix = { target = ["x86", "arm"] }
//!
//! [nodes.package]
//! run = "cat \"$SPINDLE_OUTPUT_COMPILE_X86\""
//! after = ["compile"]
//! ```

use std::path::{Path, PathBuf};

use crate::pipeline::{self, BadPipeline, Pipeline};

/// The extensions a pipeline file may have.
const EXTENSIONS: &str = ".json or .toml";

/// Reads and checks the pipeline file at `path`, as its extension says.
pub fn read(path: &Path) -> Result<Pipeline, BadPipeline> {
    let file = path.display().to_string();
    let bad = |reason: String| BadPipeline { file: file.clone(), node: None, reason };
    let toml = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => false,
        Some("toml") => true,
        _ => {
            return Err(bad(format!(
                "a pipeline file's name ends in {EXTENSIONS} (which says how to read it): rename it"
            )));
        }
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let json = if toml { toml_to_json(&text).map_err(bad)? } else { text };
    let mut pipeline = pipeline::parse(&file, &json)?;
    pipeline.dir = path.parent().map_or_else(PathBuf::new, Path::to_path_buf);
    Ok(pipeline)
}

/// The JSON text of a TOML document, its tables' keys in file order; a syntax error is one
/// line with where it is.
pub fn toml_to_json(text: &str) -> Result<String, String> {
    let table: toml::Table = toml::from_str(text).map_err(|error| {
        let message = error.message().replace('\n', " ");
        match error.span() {
            Some(span) => format!("bad TOML at {}: {message}", line_and_column(text, span.start)),
            None => format!("bad TOML: {message}"),
        }
    })?;
    if let Some(key) = find_datetime(&table) {
        return Err(format!("{key:?} is a TOML date or time: a pipeline holds none (quote it)"));
    }
    serde_json::to_string(&table).map_err(|error| format!("cannot read the TOML: {error}"))
}

/// `line L, column C` (from 1) of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> String {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |rest| rest.chars().count()) + 1;
    format!("line {line}, column {column}")
}

/// The key of a date or time value anywhere in `table` (JSON has none).
fn find_datetime(table: &toml::Table) -> Option<String> {
    table.iter().find_map(|(key, value)| {
        datetime_in(value).then(|| key.clone()).or_else(|| value.as_table().and_then(find_datetime))
    })
}

/// Whether `value` is, or an array in it holds, a date or time (tables are searched apart).
fn datetime_in(value: &toml::Value) -> bool {
    match value {
        toml::Value::Datetime(_) => true,
        toml::Value::Array(values) => values
            .iter()
            .any(|value| datetime_in(value) || value.as_table().and_then(find_datetime).is_some()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_becomes_json_in_file_order() {
        let text = "name = \"p\"\n[nodes.zeta]\nrun = \"true\"\n[nodes.alpha]\nrun = \"true\"\nafter = [\"zeta\"]\n";
        let json = toml_to_json(text).expect("good TOML");
        let pipeline = pipeline::parse("p.toml", &json).expect("a good pipeline");
        let names: Vec<&str> = pipeline.nodes.iter().map(|step| step.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha"]);
        let again = pipeline::parse("p.toml", &toml_to_json(text).expect("good")).expect("good");
        assert_eq!(pipeline.hash, again.hash, "the same content, the same hash");
    }

    #[test]
    fn bad_toml_is_one_line_saying_where() {
        let error = toml_to_json("name = \"p\"\n[nodes.a\nrun = 1\n").expect_err("bad TOML");
        assert!(error.contains("line 2") && !error.contains('\n'), "{error}");
        let error = toml_to_json("name = \"p\"\nwhen = 1979-05-27\n").expect_err("a date");
        assert!(error.contains("\"when\""), "{error}");
    }
}
