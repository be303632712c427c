//! `-v` and `RUST_LOG`: the library's `tracing` events and batch spans printed on stderr.
//! Nothing is installed without either, so the command pays nothing for them.

use std::str::FromStr;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs a subscriber printing to stderr: `RUST_LOG` (a list of `target=level` or a
/// level, as `spindle=debug,warn`) if set and not empty, else the `-v` count (1 info, 2 debug,
/// 3 or more trace, for the `spindle` targets). A `RUST_LOG` this syntax cannot read (one meant
/// for another program's filter) is left aside for `-v`: the warning to print is returned.
pub(crate) fn install(verbose: u8, rust_log: Option<String>) -> Option<String> {
    let rust_log = rust_log.filter(|text| !text.trim().is_empty());
    let (read, warning) = match rust_log.map(|text| (Targets::from_str(&text), text)) {
        Some((Ok(targets), _)) => (Some(targets), None),
        Some((Err(error), text)) => (
            None,
            Some(format!(
                "RUST_LOG={text:?} is not a filter of targets and levels ({error}); ignored"
            )),
        ),
        None => (None, None),
    };
    let targets = match read {
        Some(targets) => targets,
        None if verbose == 0 => return warning,
        None => Targets::new().with_target("spindle", level(verbose)),
    };
    // A batch's span is printed as it closes, with what it recorded by then: its outcome and
    // duration (at the span's level, debug: `-vv`).
    let printer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE);
    // Only fails if a subscriber is installed already, which nothing else here does.
    let _ = tracing_subscriber::registry().with(printer).with(targets).try_init();
    warning
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
    fn a_rust_log_that_is_not_a_filter_is_named_in_a_warning() {
        let warning = install(0, Some("spindle=loud".into())).expect("a warning");
        assert!(warning.contains("RUST_LOG=\"spindle=loud\""), "{warning}");
        assert_eq!(install(0, Some("  ".into())), None, "an empty RUST_LOG is no filter");
    }
}
