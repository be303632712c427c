//! Plain-Rust models of Spindle's domains (no I/O: `BTreeMap`s and the rules of DESIGN.md §5),
//! shared by the model-based tests (`tests/*_model.rs`, through `mod models;`) and by the
//! `ops` fuzz harness (`fuzz/harness/ops.rs`, through `#[path]`). They use only spindle's
//! public API, `serde_json` and std.
//!
//! Each model answers a call the way the store must: `Ok` with the expected value, or the
//! [`Refusal`] (the error variant) the store must give. Time is the store's: [`Stamp`] mirrors
//! the store's rule that its timestamps never go backwards while it is open, and start again
//! from the clock after a reopen.
#![allow(dead_code)]

pub mod events;
pub mod graph;
pub mod process;
pub mod queue;
pub mod workflow;

use std::fmt::Debug;

use spindle::Error;

/// The error variants the domains refuse with; anything else is a failure of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// `Error::NotFound`.
    NotFound,
    /// `Error::Conflict`.
    Conflict,
    /// `Error::InvalidInput`.
    InvalidInput,
    /// `Error::LeaseLost`.
    LeaseLost,
    /// `Error::TooLarge`.
    TooLarge,
    /// `Error::Forbidden`.
    Forbidden,
    /// `Error::TenantSuspended`.
    TenantSuspended,
    /// `Error::Unauthorized`.
    Unauthorized,
}

/// The refusal `error` is, if it is one of the refusals.
pub fn refusal(error: &Error) -> Option<Refusal> {
    match error {
        Error::NotFound { .. } => Some(Refusal::NotFound),
        Error::Conflict(_) => Some(Refusal::Conflict),
        Error::InvalidInput(_) => Some(Refusal::InvalidInput),
        Error::LeaseLost(_) => Some(Refusal::LeaseLost),
        Error::TooLarge { .. } => Some(Refusal::TooLarge),
        Error::Forbidden(_) => Some(Refusal::Forbidden),
        Error::TenantSuspended(_) => Some(Refusal::TenantSuspended),
        Error::Unauthorized => Some(Refusal::Unauthorized),
        _ => None,
    }
}

/// The answer a model expects: the value, or the refusal.
pub type Expect<T> = Result<T, Refusal>;

/// Panics unless `actual` failed with `expected`.
pub fn assert_refused<T: Debug>(context: &str, actual: &spindle::Result<T>, expected: Refusal) {
    match actual {
        Err(error) if refusal(error) == Some(expected) => {}
        other => panic!("{context}: expected {expected:?}, got {other:?}"),
    }
}

/// Panics unless `actual` equals `expected` (value or refusal); returns the refusal, if any.
pub fn compare<T: Debug + PartialEq>(
    context: &str,
    actual: spindle::Result<T>,
    expected: Expect<T>,
) -> Option<Refusal> {
    match expected {
        Ok(expected) => {
            let actual =
                actual.unwrap_or_else(|e| panic!("{context}: expected {expected:?}, got {e}"));
            assert_eq!(actual, expected, "{context}");
            None
        }
        Err(refused) => {
            assert_refused(context, &actual, refused);
            Some(refused)
        }
    }
}

/// The store's time as the models see it: the clock, but never earlier than the last time the
/// store used since it was opened (the store stamps every batch with
/// `max(last stamp, clock)`, and opening runs a batch: recovery).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    last_ms: i64,
}

impl Stamp {
    /// The stamp of a store just opened while the clock read `clock_ms`.
    pub fn opened(clock_ms: i64) -> Self {
        Self { last_ms: clock_ms }
    }

    /// The time of the next call, given the clock's reading; remembered as the last stamp.
    pub fn next(&mut self, clock_ms: i64) -> i64 {
        self.last_ms = self.last_ms.max(clock_ms);
        self.last_ms
    }

    /// The time the next call would get, without taking it.
    pub fn peek(&self, clock_ms: i64) -> i64 {
        self.last_ms.max(clock_ms)
    }

    /// The store was closed and opened again while the clock read `clock_ms`: its stamps
    /// start from the clock again.
    pub fn reopened(&mut self, clock_ms: i64) {
        self.last_ms = clock_ms;
    }
}

/// A scratch directory for store files, in a tmpfs (`/dev/shm`) where there is one, so that
/// reopening a file costs no disk I/O; removed with everything in it when dropped.
#[derive(Debug)]
pub struct Scratch {
    pub dir: std::path::PathBuf,
}

impl Scratch {
    /// A fresh, empty directory (unique per process and call).
    pub fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("spindle-model-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Self { dir }
    }

    /// The path of the store file in it.
    pub fn file(&self) -> std::path::PathBuf {
        self.dir.join("store.db")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How many sequences a model test runs per domain: `SPINDLE_MODEL_CASES`, default 2,000.
pub fn model_cases() -> u64 {
    match std::env::var("SPINDLE_MODEL_CASES") {
        Ok(text) => text.parse().expect("SPINDLE_MODEL_CASES is a number"),
        Err(_) => 2_000,
    }
}

/// Runs `run(seed)` for `SPINDLE_MODEL_CASES` seeds (or the one seed in `seed_var`, when set),
/// printing the failing seed and how to run it alone before the panic goes on. Returns
/// whether it ran the whole set (and the coverage floors apply).
pub fn run_cases(seed_var: &str, mut run: impl FnMut(u64)) -> bool {
    if let Ok(seed) = std::env::var(seed_var) {
        run(seed.parse().unwrap_or_else(|_| panic!("{seed_var} is a number")));
        return false;
    }
    for n in 1..=model_cases() {
        let seed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed)));
        if let Err(panic) = outcome {
            eprintln!("failing seed: {seed_var}={seed} (sequence {n})");
            std::panic::resume_unwind(panic);
        }
    }
    true
}

/// Prints the counts of the paths a run reached and fails unless each was reached at least
/// its floor times. The floors hold for the default 2,000 sequences; a smaller
/// `SPINDLE_MODEL_CASES` scales them down, a larger one keeps them.
pub fn assert_floors(domain: &str, counts: &[(&str, u64, u64)]) {
    let cases = model_cases();
    println!("{domain} coverage over {cases} sequences:");
    for (what, count, floor) in counts {
        println!("  {what}: {count} (floor {floor})");
    }
    for (what, count, floor) in counts {
        let floor = floor * cases.min(2_000) / 2_000;
        assert!(*count >= floor, "{domain}: only {count} {what} (at least {floor} expected)");
    }
}
