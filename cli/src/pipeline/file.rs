//! Reading a pipeline file by its extension: `.json` as it is, `.toml` turned into the same
//! JSON (tables in file order) and then checked by the same code, with the same errors. Kept
//! apart from `format.rs`, which the fuzz harness includes without the `toml` crate.
//!
//! A pipeline is read only from a regular file (a symlink to one is followed), of at most
//! [`FILE_BYTES_MAX`]: a FIFO, a device (`/dev/zero`) or a directory is refused before a byte
//! of it is read, and a file that grows while it is read stops at the cap.
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

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::pipeline::{self, BadPipeline, Pipeline};

/// The extensions a pipeline file may have.
const EXTENSIONS: &str = ".json or .toml";

/// The largest pipeline file read (16 MiB). A pipeline is bounded anyway (10,000 nodes,
/// commands of 64 KiB); this bounds what reading one costs before it is checked.
pub const FILE_BYTES_MAX: u64 = 16 * 1024 * 1024;

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
    let text = read_text(path).map_err(bad)?;
    let json = if toml { toml_to_json(&text).map_err(bad)? } else { text };
    let mut pipeline = pipeline::parse(&file, &json)?;
    pipeline.dir = path.parent().map_or_else(PathBuf::new, Path::to_path_buf);
    Ok(pipeline)
}

/// The text of the regular file at `path`, at most [`FILE_BYTES_MAX`] bytes of UTF-8. The
/// path is first opened with `O_PATH`, which names the file without opening it (a device's
/// driver is not called: opening some devices acts, a FIFO would wait for a writer); only once
/// that very file is seen to be regular is it opened for reading, through `/proc/self/fd`, so
/// a path swapped meanwhile changes nothing.
fn read_text(path: &Path) -> Result<String, String> {
    let cannot = |error: std::io::Error| format!("cannot read: {error}");
    let named = name_only(path).map_err(cannot)?;
    check_regular(&named.metadata().map_err(cannot)?)?;
    let file = File::open(format!("/proc/self/fd/{}", named.as_raw_fd())).map_err(cannot)?;
    check_regular(&file.metadata().map_err(cannot)?)?;
    let bytes = read_capped(file).map_err(cannot)?;
    if bytes.len() as u64 > FILE_BYTES_MAX {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| "cannot read: it is not UTF-8 text".to_owned())
}

/// The file at `path` (a symlink followed), named but not opened: `O_PATH`, and
/// `O_NOCTTY` for good measure.
fn name_only(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(nix::libc::O_PATH | nix::libc::O_NOCTTY);
    options.open(path)
}

/// Refuses what is not a regular file, and a file past [`FILE_BYTES_MAX`].
fn check_regular(metadata: &Metadata) -> Result<(), String> {
    if !metadata.is_file() {
        return Err(format!(
            "it is {}, not a regular file: a pipeline is read from a regular file (or a symlink to one)",
            file_kind(metadata)
        ));
    }
    if metadata.len() > FILE_BYTES_MAX {
        return Err(too_large());
    }
    Ok(())
}

/// At most one byte more than [`FILE_BYTES_MAX`] of `file`: a file that grows while it is read
/// is caught by its length.
fn read_capped(file: File) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(FILE_BYTES_MAX + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Why a file past [`FILE_BYTES_MAX`] is refused.
fn too_large() -> String {
    format!("it is larger than {} MiB, more than any pipeline needs", FILE_BYTES_MAX >> 20)
}

/// What a file that is not a regular one is, for an error.
fn file_kind(metadata: &Metadata) -> &'static str {
    let kind = metadata.file_type();
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something else"
    }
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
    fn only_a_regular_file_within_the_cap_is_read() {
        let dir = tempfile::tempdir().expect("a directory");
        let good = dir.path().join("good.json");
        std::fs::write(&good, r#"{"name":"p","nodes":{"a":{"run":"true"}}}"#).expect("write");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&good, &link).expect("a symlink");
        assert!(read(&link).is_ok(), "a symlink to a regular file is read");
        let zero = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("a symlink");
        let error = read(&zero).expect_err("a device").to_string();
        assert!(error.contains("a character device, not a regular file"), "{error}");
        let sub = dir.path().join("x.json");
        std::fs::create_dir(&sub).expect("a directory");
        let error = read(&sub).expect_err("a directory").to_string();
        assert!(error.contains("a directory, not a regular file"), "{error}");
        let big = dir.path().join("big.json");
        let file = File::create(&big).expect("create");
        file.set_len(FILE_BYTES_MAX + 1).expect("a sparse file past the cap");
        let error = read(&big).expect_err("too large").to_string();
        assert!(error.contains("larger than 16 MiB"), "{error}");
    }

    #[test]
    fn a_file_read_stops_one_byte_past_the_cap() {
        let bytes = read_capped(File::open("/dev/zero").expect("/dev/zero")).expect("read");
        assert_eq!(bytes.len() as u64, FILE_BYTES_MAX + 1);
    }

    #[test]
    fn bad_toml_is_one_line_saying_where() {
        let error = toml_to_json("name = \"p\"\n[nodes.a\nrun = 1\n").expect_err("bad TOML");
        assert!(error.contains("line 2") && !error.contains('\n'), "{error}");
        let error = toml_to_json("name = \"p\"\nwhen = 1979-05-27\n").expect_err("a date");
        assert!(error.contains("\"when\""), "{error}");
    }
}
