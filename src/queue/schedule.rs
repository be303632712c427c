//! Periodic jobs: a schedule, kept in the store, enqueues a copy of its item once per tick of a
//! cron expression (in a time zone) or of a fixed interval.
//!
//! A tick is fired once however many processes run: the firing moves the schedule's next tick
//! on in the same transaction as the items it enqueues, and only if the schedule still holds
//! the tick the firing read; each item also holds a unique key of its own tick
//! (`schedule:NAME:TICK_MS`). Who fires: the store itself (an alarm at the earliest tick it
//! knows, and at open), an idle worker pool or blocking claim of the schedule's queue (they
//! wake at the next tick of their queues, which also finds schedules another process made),
//! and [`Queue::run_schedules`]. A fired item is due at its tick, carries the template's
//! payload and settings, and `{"schedule": {"name", "tick_ms"}}` in its metadata.
//!
//! The types are here; the ops in `ops/schedules.rs`; the SQL in `schedule_sql.rs`.

use croner::Cron;
use croner::parser::CronParser;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use serde_json::Value;

use super::ops::{PutSchedule, RemoveSchedule, RunSchedules, Schedules};
use super::{NewItem, Queue};
use crate::error::{Error, Result};
use crate::page::Page;

/// Most schedules a tenant may keep.
pub const SCHEDULES_MAX: usize = 1_000;

/// Most missed ticks a schedule may backfill after downtime ([`CatchUp::Backfill`]).
pub const BACKFILL_MAX: u32 = 100;

/// The shortest interval of [`Cadence::Every`], in milliseconds.
pub const INTERVAL_MS_MIN: i64 = 1_000;

/// When a schedule's ticks fall.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cadence {
    /// Where a cron expression matches, on the wall clock of a time zone: 5 fields as crontab
    /// writes them (minute, hour, day of month, month, day of week), 6 with seconds first, or 7
    /// with a year last; names (`MON`, `JAN`), ranges, lists, steps, `L`, `W`, `#`, and
    /// nicknames (`@hourly`, `@daily`, ...); at most 256 bytes. A wall-clock time a
    /// daylight-saving change skips fires at the first instant after the gap. Of a wall-clock
    /// hour it repeats, an expression that names the hour (`30 2 * * *`) fires once, at the
    /// first pass; one that matches every hour (`*/30 * * * *`) matches both passes.
    Cron {
        /// The expression.
        expression: String,
        /// An IANA time zone name (`UTC`, `Europe/Paris`).
        time_zone: String,
    },
    /// Every `interval_ms`, at its multiples since the Unix epoch (every hour: on the hour,
    /// UTC), so that the ticks do not move when the schedule is put again. At least
    /// [`INTERVAL_MS_MIN`], at most a year.
    Every {
        /// The interval, in milliseconds.
        interval_ms: i64,
    },
}

/// What a schedule does with the ticks it missed: while no process ran it (the store closed),
/// or when a firing comes so late that the next tick is due too (a store busy past a whole
/// interval). On time, one tick is due at each firing and both enqueue it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CatchUp {
    /// Skips to now: only the latest tick due is enqueued, the earlier ones never.
    #[default]
    Skip,
    /// Enqueues the latest `n` ticks due (1..=[`BACKFILL_MAX`]), oldest first; `Backfill(1)`
    /// is `Skip`.
    Backfill(u32),
}

impl CatchUp {
    /// How many of the due ticks are enqueued.
    pub(crate) fn ticks_max(self) -> u32 {
        match self {
            CatchUp::Skip => 1,
            CatchUp::Backfill(n) => n,
        }
    }

    /// The policy that enqueues at most `ticks_max` ticks.
    pub(crate) fn from_ticks_max(ticks_max: u32) -> Self {
        match ticks_max {
            1 => CatchUp::Skip,
            n => CatchUp::Backfill(n),
        }
    }
}

/// A periodic job: `item` enqueued into its queue once per tick of `cadence`. Build one with
/// [`Schedule::cron`] or [`Schedule::every`]; put it with [`Queue::put_schedule`].
///
/// ```
/// # fn main() -> spindle::Result<()> {
/// use serde_json::json;
/// use spindle::{NewItem, Schedule, Store};
///
/// let store = Store::open_in_memory()?;
/// let nightly = Schedule::cron("nightly-report", "0 3 * * *", NewItem::new("reports", json!({})))
///     .time_zone("Europe/Paris")
///     .backfill(3);
/// let info = store.queue().put_schedule(nightly)?;
/// assert!(info.next_tick_ms.is_some());
/// assert_eq!(store.queue().schedules(spindle::Page::first(10))?, vec![info]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Schedule {
    /// The schedule's name, unique in its tenant (id-like, at most `Limits::id_len_max` less
    /// 30 bytes: the item's key per tick adds to it).
    pub name: String,
    /// When its ticks fall.
    pub cadence: Cadence,
    /// The item each tick enqueues: its queue, payload, priority, attempts, backoff, run
    /// timeout, tags and metadata (an object without a `schedule` key). No dedupe key, unique
    /// key, run time, execution or node: the schedule supplies the run time and the key.
    pub item: NewItem,
    /// What it does with the ticks it missed.
    pub catch_up: CatchUp,
    /// A time zone given to an interval, which has none: refused at put.
    pub(crate) zone_on_interval: Option<String>,
}

impl Schedule {
    /// `item` at every match of the cron `expression`, in UTC.
    pub fn cron(name: impl Into<String>, expression: impl Into<String>, item: NewItem) -> Self {
        let cadence = Cadence::Cron { expression: expression.into(), time_zone: "UTC".to_owned() };
        Self { name: name.into(), cadence, item, catch_up: CatchUp::Skip, zone_on_interval: None }
    }

    /// `item` every `interval_ms` (at the interval's multiples since the Unix epoch).
    pub fn every(name: impl Into<String>, interval_ms: i64, item: NewItem) -> Self {
        let cadence = Cadence::Every { interval_ms };
        Self { name: name.into(), cadence, item, catch_up: CatchUp::Skip, zone_on_interval: None }
    }

    /// Reads a cron expression on the wall clock of `time_zone` (an IANA name). Refused at
    /// [`Queue::put_schedule`] for an interval.
    pub fn time_zone(mut self, time_zone: impl Into<String>) -> Self {
        match &mut self.cadence {
            Cadence::Cron { time_zone: zone, .. } => *zone = time_zone.into(),
            Cadence::Every { .. } => self.zone_on_interval = Some(time_zone.into()),
        }
        self
    }

    /// Enqueues up to `ticks` of the ticks missed while no process ran the schedule.
    pub fn backfill(mut self, ticks: u32) -> Self {
        self.catch_up = CatchUp::Backfill(ticks);
        self
    }
}

/// A schedule as the store keeps it ([`Queue::schedules`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The schedule's name.
    pub name: String,
    /// When its ticks fall.
    pub cadence: Cadence,
    /// The item each tick enqueues (its queue, payload and settings).
    pub item: NewItem,
    /// What it does with missed ticks.
    pub catch_up: CatchUp,
    /// The earliest tick not fired yet (epoch ms); `None` when the cron expression matches no
    /// later time.
    pub next_tick_ms: Option<i64>,
    /// The latest tick fired, if any.
    pub last_tick_ms: Option<i64>,
    /// When it was first put.
    pub created_at_ms: i64,
    /// When it was last put or fired.
    pub updated_at_ms: i64,
}

impl Queue<'_> {
    /// Creates or replaces the schedule of `schedule.name`; returns it as kept. Putting the
    /// same cadence again (as an application does at every start) keeps its next tick, so no
    /// tick is skipped or fired twice by it; a new cadence starts at the first tick after now.
    ///
    /// # Errors
    /// `InvalidInput` for a cron expression that does not parse or matches no time to come,
    /// an unknown time zone, an interval out of bounds, a time zone on an interval, a backfill
    /// of 0 or past [`BACKFILL_MAX`], or an item with a dedupe or unique key, a run time, an
    /// execution, a node or a `schedule` metadata key; as `enqueue` for the item's own
    /// settings; `TooLarge` past [`SCHEDULES_MAX`]. Nothing is written then.
    pub fn put_schedule(&self, schedule: Schedule) -> Result<ScheduleInfo> {
        self.store.exec(PutSchedule { schedule })
    }

    /// Removes the schedule `name`; whether there was one. Items it enqueued stay.
    ///
    /// # Errors
    /// `InvalidInput` for a bad name.
    pub fn remove_schedule(&self, name: &str) -> Result<bool> {
        self.store.exec(RemoveSchedule { name: name.to_owned() })
    }

    /// A page of the view's tenant's schedules, by name: `Page::first(100)`, then
    /// `Page::after(last.name, 100)` (a tenant keeps at most [`SCHEDULES_MAX`]).
    ///
    /// # Errors
    /// `TooLarge` for a page past `Limits::page_size_max`.
    pub fn schedules(&self, page: Page) -> Result<Vec<ScheduleInfo>> {
        self.store.exec(Schedules { page })
    }

    /// Fires the view's tenant's due ticks now; returns how many items were enqueued. The store
    /// and the worker pool fire them by themselves: this is for a caller that drives time
    /// itself (a test on a `ManualClock`, a process that only enqueues).
    ///
    /// # Errors
    /// Only the store's own.
    pub fn run_schedules(&self) -> Result<u64> {
        self.store.exec(RunSchedules)
    }
}

/// A cadence made ready to compute ticks.
pub(crate) enum Ticker {
    Cron(Box<Cron>, TimeZone),
    Every(i64),
}

impl Ticker {
    /// Checks `cadence` and makes its ticker.
    pub(crate) fn new(cadence: &Cadence) -> Result<Self> {
        match cadence {
            Cadence::Cron { expression, time_zone } => {
                let cron = CronParser::new().parse(expression).map_err(|error| {
                    Error::InvalidInput(format!("cron expression {expression:?}: {error}"))
                })?;
                let zone = TimeZone::get(time_zone).map_err(|error| {
                    Error::InvalidInput(format!("time zone {time_zone:?}: {error}"))
                })?;
                Ok(Ticker::Cron(Box::new(cron), zone))
            }
            Cadence::Every { interval_ms } => {
                if !(INTERVAL_MS_MIN..=super::SNOOZE_MS_MAX).contains(interval_ms) {
                    return Err(Error::InvalidInput(format!(
                        "a schedule's interval is {INTERVAL_MS_MIN}..={} ms, not {interval_ms}",
                        super::SNOOZE_MS_MAX
                    )));
                }
                Ok(Ticker::Every(*interval_ms))
            }
        }
    }

    /// The first tick strictly after `after_ms`; `None` when there is none.
    pub(crate) fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Ticker::Every(interval_ms) => {
                after_ms.div_euclid(*interval_ms).checked_add(1)?.checked_mul(*interval_ms)
            }
            Ticker::Cron(cron, zone) => {
                let from = zoned(after_ms, zone)?;
                let next = cron.find_next_occurrence(&from, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }

    /// The latest ticks within `from_ms..=now_ms`, at most `max` of them, oldest first.
    pub(crate) fn due(&self, from_ms: i64, now_ms: i64, max: u32) -> Vec<i64> {
        let mut ticks = Vec::new();
        let mut at = self.latest_at_or_before(now_ms);
        while let Some(tick) = at.filter(|tick| *tick >= from_ms) {
            if ticks.len() >= max as usize {
                break;
            }
            ticks.push(tick);
            at = tick.checked_sub(1).and_then(|before| self.latest_at_or_before(before));
        }
        ticks.reverse();
        ticks
    }

    /// The latest tick at or before `at_ms`.
    fn latest_at_or_before(&self, at_ms: i64) -> Option<i64> {
        match self {
            Ticker::Every(interval_ms) => Some(at_ms - at_ms.rem_euclid(*interval_ms)),
            Ticker::Cron(cron, zone) => {
                let from = zoned(at_ms, zone)?;
                let previous = cron.find_previous_occurrence(&from, true).ok()?;
                Some(previous.timestamp().as_millisecond())
            }
        }
    }
}

/// `at_ms` on the wall clock of `zone`.
fn zoned(at_ms: i64, zone: &TimeZone) -> Option<Zoned> {
    Some(Timestamp::from_millisecond(at_ms).ok()?.to_zoned(zone.clone()))
}

/// The metadata key a fired item's schedule and tick go under.
pub(crate) const METADATA_KEY: &str = "schedule";

/// The fired item's metadata: the template's object and `schedule: {name, tick_ms}`.
pub(crate) fn fired_metadata(template: Option<&Value>, name: &str, tick_ms: i64) -> Value {
    let mut object = template.and_then(Value::as_object).cloned().unwrap_or_default();
    let tick = serde_json::json!({ "name": name, "tick_ms": tick_ms });
    object.insert(METADATA_KEY.to_owned(), tick);
    Value::Object(object)
}

/// The prefix of the unique keys of schedules' ticks, which callers' items may not use.
pub(crate) const TICK_KEY_PREFIX: &str = "schedule:";

/// The unique key of a schedule's tick: an item per tick, whoever fires it.
pub(crate) fn tick_key(name: &str, tick_ms: i64) -> String {
    format!("{TICK_KEY_PREFIX}{name}:{tick_ms}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: i64 = 3_600_000;

    #[test]
    fn an_interval_ticks_at_its_multiples_since_the_epoch() {
        let ticker = Ticker::Every(HOUR_MS);
        assert_eq!(ticker.next_after(HOUR_MS * 5 + 1), Some(HOUR_MS * 6));
        assert_eq!(ticker.next_after(HOUR_MS * 5), Some(HOUR_MS * 6), "strictly after");
        let due = ticker.due(HOUR_MS * 2, HOUR_MS * 5 + 7, 10);
        assert_eq!(due, vec![HOUR_MS * 2, HOUR_MS * 3, HOUR_MS * 4, HOUR_MS * 5]);
        assert_eq!(ticker.due(HOUR_MS * 2, HOUR_MS * 5 + 7, 2), vec![HOUR_MS * 4, HOUR_MS * 5]);
        assert!(ticker.due(HOUR_MS * 6, HOUR_MS * 5 + 7, 2).is_empty());
    }

    #[test]
    fn a_cron_expression_ticks_on_its_zones_wall_clock() -> Result<()> {
        let paris =
            Cadence::Cron { expression: "0 3 * * *".into(), time_zone: "Europe/Paris".into() };
        let ticker = Ticker::new(&paris)?;
        // 2026-01-10 00:00 UTC; 03:00 in Paris (UTC+1 in winter) is 02:00 UTC.
        let start_ms = 1_768_003_200_000;
        assert_eq!(ticker.next_after(start_ms), Some(start_ms + 2 * HOUR_MS));
        // Summer (UTC+2): 2026-07-10 00:00 UTC, 03:00 Paris is 01:00 UTC.
        let summer_ms = 1_783_641_600_000;
        assert_eq!(ticker.next_after(summer_ms), Some(summer_ms + HOUR_MS));
        let due = ticker.due(start_ms, start_ms + 3 * 24 * HOUR_MS, 10);
        let day_ms = 24 * HOUR_MS;
        assert_eq!(due, (0..3).map(|d| start_ms + 2 * HOUR_MS + d * day_ms).collect::<Vec<_>>());
        Ok(())
    }

    #[test]
    fn a_wall_clock_time_a_daylight_saving_change_skips_fires_once_after_the_gap() -> Result<()> {
        // Europe/Paris skips 02:00-03:00 on 2026-03-29 (01:00 UTC).
        let cadence =
            Cadence::Cron { expression: "30 2 * * *".into(), time_zone: "Europe/Paris".into() };
        let ticker = Ticker::new(&cadence)?;
        let day_before_ms = 1_774_656_000_000; // 2026-03-28 00:00 UTC
        let first = ticker.next_after(day_before_ms).expect("a tick");
        assert_eq!(first, day_before_ms + HOUR_MS + HOUR_MS / 2, "02:30 at UTC+1");
        let second = ticker.next_after(first).expect("a tick");
        assert!(second > first + 20 * HOUR_MS && second <= first + 24 * HOUR_MS, "{second}");
        Ok(())
    }

    #[test]
    fn bad_cadences_are_refused() {
        let bad = [
            Cadence::Cron { expression: "61 * * * *".into(), time_zone: "UTC".into() },
            Cadence::Cron { expression: "* * *".into(), time_zone: "UTC".into() },
            Cadence::Cron { expression: "0 3 * * *".into(), time_zone: "Mars/Olympus".into() },
            Cadence::Every { interval_ms: 999 },
            Cadence::Every { interval_ms: 0 },
            Cadence::Every { interval_ms: -HOUR_MS },
        ];
        for cadence in bad {
            assert!(matches!(Ticker::new(&cadence), Err(Error::InvalidInput(_))), "{cadence:?}");
        }
    }
}
