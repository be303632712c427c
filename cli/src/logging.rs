//! `-v` and `RUST_LOG`: the library's `tracing` events and batch spans printed on stderr.
//! Nothing is installed without either, so the command pays nothing for them.

use std::str::FromStr;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs a subscriber printing to stderr: `RUST_LOG` (a list of `target=level` or a
/// level, as `spindle=debug,warn`) if set and not empty, else the `-v` count (1 info, 2 debug,
/// 3 or more trace, for the `spindle` targets). Returns why `RUST_LOG` cannot be read.
pub(crate) fn install(verbose: u8, rust_log: Option<String>) -> Result<(), String> {
    let targets = match rust_log.filter(|text| !text.trim().is_empty()) {
        Some(text) => Targets::from_str(&text)
            .map_err(|error| format!("RUST_LOG={text:?} is not a filter: {error}"))?,
        None if verbose == 0 => return Ok(()),
        None => Targets::new().with_target("spindle", level(verbose)),
    };
    let printer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false);
    // Only fails if a subscriber is installed already, which nothing else here does.
    let _ = tracing_subscriber::registry().with(printer).with(targets).try_init();
    Ok(())
}

/// The most detailed level `-v` repeated `verbose` times shows.
fn level(verbose: u8) -> LevelFilter {
    match verbose {
        0 => LevelFilter::OFF,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v_shows_one_level_more() {
        assert_eq!(level(1), LevelFilter::INFO);
        assert_eq!(level(2), LevelFilter::DEBUG);
        assert_eq!(level(9), LevelFilter::TRACE);
    }

    #[test]
    fn a_rust_log_that_is_not_a_filter_is_refused_by_name() {
        let refused = install(0, Some("spindle=loud".into())).expect_err("not a level");
        assert!(refused.contains("RUST_LOG=\"spindle=loud\""), "{refused}");
    }
}
