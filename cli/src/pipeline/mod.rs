//! Pipelines: the file format (`format.rs`: parsing, validation, and the graph it becomes),
//! reading a file by its extension (`file.rs`: JSON or TOML), and drawing a plan or a run's
//! graph (`draw.rs`).

pub mod draw;
pub mod file;
mod format;

pub use self::format::*;
