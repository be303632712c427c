//! The ops of periodic jobs: put, remove and list schedules, and fire their due ticks (for one
//! tenant, or the store's own sweep across tenants).
//!
//! A firing reads a schedule's next tick, moves it on (only if it still holds that tick: see
//! `schedule_sql::advance`) and enqueues one item per tick it fires, in one transaction; so a
//! tick is fired once whichever process, thread or alarm gets to it first.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::notes::Notes;
use super::{check_new_item, check_queues, enqueue};
use crate::core::events::{self, Stream};
use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::page::Page;
use crate::queue::schedule::{
    self, BACKFILL_MAX, Cadence, CatchUp, SCHEDULES_MAX, Schedule, ScheduleInfo, Ticker,
};
use crate::queue::schedule_sql::{self as sql, ScheduleRow};
use crate::queue::{Backoff, NewItem, Unique};

/// Creates or replaces a schedule ([`Queue::put_schedule`](crate::Queue::put_schedule)).
#[derive(Debug, Clone, PartialEq)]
pub struct PutSchedule {
    /// The schedule.
    pub schedule: Schedule,
}

/// Removes a schedule ([`Queue::remove_schedule`](crate::Queue::remove_schedule)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveSchedule {
    /// The schedule's name.
    pub name: String,
}

/// A page of the view's tenant's schedules, by name
/// ([`Queue::schedules`](crate::Queue::schedules)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedules {
    /// Which page (the names after `after`).
    pub page: Page,
}

/// Fires the view's tenant's due ticks ([`Queue::run_schedules`](crate::Queue::run_schedules)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSchedules;

/// The store's own firing of every tenant's due ticks (its alarm, and at open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SweepSchedules;

/// The earliest tick of the view's tenant's schedules of `queues` (what an idle worker pool
/// and a blocking claim wake for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NextTick {
    pub(crate) queues: Vec<String>,
}

/// Schedules fired per pass of a firing (each enqueues at most its backfill of items); a
/// firing that leaves more due sets the alarm to fire them at once.
const FIRE_PAGE: usize = 32;

/// The longest cron expression a schedule takes, in bytes.
const CRON_BYTES_MAX: usize = 256;

/// Tenants a sweep fires per pass.
const TENANT_PAGE: usize = 100;

/// How long after a sweep that found another process sweeping (PostgreSQL) it tries again.
const SWEEP_RETRY_MS: i64 = 250;

/// The item template as stored: a new item's settings, without what a tick gives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Template {
    payload: Value,
    priority: i64,
    max_attempts: u32,
    backoff: Backoff,
    #[serde(default)]
    run_timeout_ms: Option<i64>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    metadata: Option<Value>,
}

impl Sealed for PutSchedule {}
impl Op for PutSchedule {
    type Output = ScheduleInfo;
    fn access(&self) -> Access {
        Access::Write
    }
    fn check_shape(&self, limits: &Limits) -> Result<()> {
        let item = &self.schedule.item;
        limits.check_depths(std::iter::once(&item.payload).chain(&item.metadata))
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ScheduleInfo> {
        let schedule = self.schedule;
        let ticker = check_schedule(tx, &schedule)?;
        let old = sql::select(tx.db(), tx.tenant(), &schedule.name)?;
        if old.is_none() && sql::count(tx.db(), tx.tenant())? >= SCHEDULES_MAX as i64 {
            return Err(Error::too_large("schedules", SCHEDULES_MAX, SCHEDULES_MAX + 1));
        }
        let row = row_to_put(tx, &schedule, &ticker, old)?;
        sql::upsert(tx.db(), tx.tenant(), &row)?;
        if let Some(next_ms) = row.next_tick_ms {
            tx.set_alarm(next_ms);
        }
        let payload = json!({ "name": row.name, "next_tick_ms": row.next_tick_ms });
        events::append(tx, &Stream::queue(&row.queue), "schedule_put", payload, None)?;
        info_of(row)
    }
}

impl Sealed for RemoveSchedule {}
impl Op for RemoveSchedule {
    type Output = bool;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<bool> {
        tx.limits().check_id("schedule name", &self.name)?;
        let Some(old) = sql::select(tx.db(), tx.tenant(), &self.name)? else {
            return Ok(false);
        };
        sql::delete(tx.db(), tx.tenant(), &self.name)?;
        let payload = json!({ "name": self.name });
        events::append(tx, &Stream::queue(&old.queue), "schedule_removed", payload, None)?;
        Ok(true)
    }
}

impl Sealed for Schedules {}
impl Op for Schedules {
    type Output = Vec<ScheduleInfo>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<ScheduleInfo>> {
        tx.limits().check_page(self.page.limit)?;
        let after = self.page.after.as_deref().unwrap_or("");
        let rows = sql::select_page(tx.db(), tx.tenant(), after, self.page.limit)?;
        rows.into_iter().map(info_of).collect()
    }
}

impl Sealed for RunSchedules {}
impl Op for RunSchedules {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Write
    }
    /// Under the tenant's own write lock (on PostgreSQL a batch takes it at its start), as the
    /// sweep's firing of the tenant is: the two never fire one tenant at once.
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        fire_due(tx)
    }
}

impl Sealed for SweepSchedules {}
impl Op for SweepSchedules {
    type Output = u64;
    fn access(&self) -> Access {
        Access::Admin
    }
    /// One process at a time sweeps (PostgreSQL); a tenant another process writes is passed
    /// over and tried again a moment later, as the graphs' deadline sweep does.
    fn apply(self, tx: &mut Tx<'_>) -> Result<u64> {
        let retry_ms = tx.now_ms().saturating_add(SWEEP_RETRY_MS);
        if !tx.db().try_lock_sweep("queue schedules")? {
            tx.set_alarm(retry_ms);
            return Ok(0);
        }
        let (mut fired, mut passed_over) = (0, false);
        let tenants = sql::select_tenants_due(tx.db(), tx.now_ms(), TENANT_PAGE)?;
        if tenants.len() == TENANT_PAGE {
            tx.set_alarm(tx.now_ms());
        }
        for tenant in tenants {
            // One tenant's failure is told and tried again; the others fire.
            match tx.as_tenant(&tenant, fire_due) {
                Ok(Some(count)) => fired += count,
                Ok(None) => passed_over = true,
                Err(error) => {
                    tracing::warn!(%tenant, %error, "spindle: a tenant's schedules did not fire");
                    passed_over = true;
                }
            }
        }
        let next_ms = sql::select_next_tick(tx.db())?;
        let next_ms = if passed_over { next_ms.map(|ms| ms.max(retry_ms)) } else { next_ms };
        if let Some(next_ms) = next_ms {
            tx.set_alarm(next_ms);
        }
        Ok(fired)
    }
}

impl Sealed for NextTick {}
impl Op for NextTick {
    type Output = Option<i64>;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Option<i64>> {
        check_queues(tx, &self.queues)?;
        let mut earliest: Option<i64> = None;
        for queue in &self.queues {
            let next = sql::select_next_tick_of(tx.db(), tx.tenant(), queue)?;
            earliest = earliest.into_iter().chain(next).min();
        }
        Ok(earliest)
    }
}

/// Fires the due ticks of the transaction's tenant, a page of schedules at a time; sets the
/// alarm for the next tick. How many items it enqueued.
fn fire_due(tx: &mut Tx<'_>) -> Result<u64> {
    let now_ms = tx.now_ms();
    let due = sql::select_due(tx.db(), tx.tenant(), now_ms, FIRE_PAGE)?;
    if due.len() == FIRE_PAGE {
        tx.set_alarm(now_ms);
    }
    let mut fired = 0;
    for row in due {
        fired += fire_one(tx, &row)?;
    }
    Ok(fired)
}

/// Fires one schedule's due ticks. A schedule that cannot fire (its template refused by
/// today's limits, say) is told to the logs and moved on to its next tick: one bad schedule
/// does not hold up the others, nor fire in a loop.
fn fire_one(tx: &mut Tx<'_>, row: &ScheduleRow) -> Result<u64> {
    let Some(fired_ms) = row.next_tick_ms else { return Ok(0) };
    let now_ms = tx.now_ms();
    let ticker = match Ticker::new(&cadence_of(row)) {
        Ok(ticker) => ticker,
        Err(error) => return stop(tx, row, fired_ms, &error),
    };
    let ticks = ticker.due(fired_ms, now_ms, ticks_max_of(row));
    let next_ms = ticker.next_after(now_ms);
    let last_ms = ticks.last().copied();
    if !sql::advance(tx.db(), tx.tenant(), &row.name, (fired_ms, next_ms, last_ms), now_ms)? {
        return Ok(0);
    }
    if let Some(next_ms) = next_ms {
        tx.set_alarm(next_ms);
    }
    match tx.nested(|tx| enqueue_ticks(tx, row, &ticks)) {
        Ok(count) => Ok(count),
        Err(error) => {
            tracing::warn!(
                tenant = tx.tenant(),
                schedule = %row.name,
                %error,
                "spindle: a schedule's ticks could not be enqueued; they are skipped"
            );
            Ok(0)
        }
    }
}

/// Stops a schedule whose cadence this Spindle cannot read (one a newer version put): it
/// keeps no next tick until it is put again. Told to the logs.
fn stop(tx: &mut Tx<'_>, row: &ScheduleRow, fired_ms: i64, error: &Error) -> Result<u64> {
    tracing::warn!(
        tenant = tx.tenant(),
        schedule = %row.name,
        %error,
        "spindle: a schedule's cadence does not read; it stops until it is put again"
    );
    let now_ms = tx.now_ms();
    sql::advance(tx.db(), tx.tenant(), &row.name, (fired_ms, None, None), now_ms)?;
    Ok(0)
}

/// Enqueues one item per tick of `ticks`; how many were new (a tick's item already there is
/// not enqueued again).
fn enqueue_ticks(tx: &mut Tx<'_>, row: &ScheduleRow, ticks: &[i64]) -> Result<u64> {
    let template: Template = serde_json::from_str(&row.template)?;
    let mut notes = Notes::default();
    let mut fired = 0;
    for &tick_ms in ticks {
        let mut item = item_of(&row.queue, template.clone());
        item.run_at_ms = Some(tick_ms);
        item.metadata = Some(schedule::fired_metadata(item.metadata.as_ref(), &row.name, tick_ms));
        item.unique = Some(Unique::new(schedule::tick_key(&row.name, tick_ms)));
        if !enqueue(tx, item, &mut notes)?.deduplicated {
            fired += 1;
        }
    }
    notes.append(tx)?;
    Ok(fired)
}

/// Checks everything `schedule` carries; its ticker.
fn check_schedule(tx: &Tx<'_>, schedule: &Schedule) -> Result<Ticker> {
    let limits = tx.limits();
    limits.check_id("schedule name", &schedule.name)?;
    limits.check_id("schedule name", &schedule::tick_key(&schedule.name, i64::MIN))?;
    if let Some(zone) = &schedule.zone_on_interval {
        return Err(Error::InvalidInput(format!(
            "an interval has no time zone (given {zone:?}); a cron expression has"
        )));
    }
    if let Cadence::Cron { expression, time_zone } = &schedule.cadence {
        check_text_len("cron expression", expression, CRON_BYTES_MAX)?;
        limits.check_id("time zone", time_zone)?;
    }
    let ticks_max = schedule.catch_up.ticks_max();
    if !(1..=BACKFILL_MAX).contains(&ticks_max) {
        return Err(Error::InvalidInput(format!(
            "a schedule backfills 1..={BACKFILL_MAX} ticks, not {ticks_max}"
        )));
    }
    check_template(tx, &schedule.item)?;
    Ticker::new(&schedule.cadence)
}

/// Refuses `text` past `max` bytes (before it is parsed or quoted in an error).
fn check_text_len(what: &'static str, text: &str, max: usize) -> Result<()> {
    if text.len() > max {
        return Err(Error::too_large(what, max, text.len()));
    }
    Ok(())
}

/// Checks the item template: what `enqueue` checks, and nothing a tick gives the item.
fn check_template(tx: &Tx<'_>, item: &NewItem) -> Result<()> {
    let given = [
        ("dedupe key", item.dedupe_key.is_some()),
        ("unique key", item.unique.is_some()),
        ("run time", item.run_at_ms.is_some()),
        ("execution", item.execution_id.is_some()),
        ("node", item.node_id.is_some()),
    ];
    if let Some((what, _)) = given.iter().find(|(_, given)| *given) {
        return Err(Error::InvalidInput(format!(
            "a schedule's item has no {what} (the schedule gives each tick its own)"
        )));
    }
    match &item.metadata {
        Some(Value::Object(object)) if object.contains_key(schedule::METADATA_KEY) => {
            return Err(Error::InvalidInput(format!(
                "a schedule's item metadata has no {:?} key (each tick's item gets it)",
                schedule::METADATA_KEY
            )));
        }
        _ => {}
    }
    // As a tick's item will be, so that what put accepts, firing accepts too (metadata that is
    // not an object stays, for the check to refuse).
    let mut first = item.clone();
    if item.metadata.as_ref().is_none_or(Value::is_object) {
        first.metadata = Some(schedule::fired_metadata(item.metadata.as_ref(), "", i64::MIN));
    }
    check_new_item(tx, &first).map(drop)
}

/// The row `schedule` is kept as: its next tick kept from `old` when the cadence is the same.
fn row_to_put(
    tx: &Tx<'_>,
    schedule: &Schedule,
    ticker: &Ticker,
    old: Option<ScheduleRow>,
) -> Result<ScheduleRow> {
    let now_ms = tx.now_ms();
    let item = &schedule.item;
    let template = Template {
        payload: item.payload.clone(),
        priority: item.priority,
        max_attempts: item.max_attempts,
        backoff: item.backoff,
        run_timeout_ms: item.run_timeout_ms,
        tags: item.tags.clone(),
        metadata: item.metadata.clone(),
    };
    let template = serde_json::to_string(&template)?;
    tx.limits().check_payload("schedule template bytes", &template)?;
    let (cron, time_zone, interval_ms) = match &schedule.cadence {
        Cadence::Cron { expression, time_zone } => {
            (Some(expression.clone()), Some(time_zone.clone()), None)
        }
        Cadence::Every { interval_ms } => (None, None, Some(*interval_ms)),
    };
    let mut row = ScheduleRow {
        name: schedule.name.clone(),
        queue: item.queue.clone(),
        cron,
        time_zone,
        interval_ms,
        backfill_max: i64::from(schedule.catch_up.ticks_max()),
        template,
        next_tick_ms: ticker.next_after(now_ms),
        last_tick_ms: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
    };
    if row.next_tick_ms.is_none() {
        return Err(Error::InvalidInput(format!(
            "schedule {:?}: its cron expression matches no time after now",
            schedule.name
        )));
    }
    if let Some(old) = old {
        row.created_at_ms = old.created_at_ms;
        row.last_tick_ms = old.last_tick_ms;
        let same = (&old.cron, &old.time_zone, old.interval_ms)
            == (&row.cron, &row.time_zone, row.interval_ms);
        if same {
            row.next_tick_ms = old.next_tick_ms.or(row.next_tick_ms);
        }
    }
    Ok(row)
}

/// A stored schedule as the caller sees it.
fn info_of(row: ScheduleRow) -> Result<ScheduleInfo> {
    let template: Template = serde_json::from_str(&row.template)?;
    let cadence = cadence_of(&row);
    let catch_up = CatchUp::from_ticks_max(ticks_max_of(&row));
    Ok(ScheduleInfo {
        item: item_of(&row.queue, template),
        name: row.name,
        cadence,
        catch_up,
        next_tick_ms: row.next_tick_ms,
        last_tick_ms: row.last_tick_ms,
        created_at_ms: row.created_at_ms,
        updated_at_ms: row.updated_at_ms,
    })
}

/// How many due ticks a firing enqueues, as stored (within 1..=BACKFILL_MAX).
fn ticks_max_of(row: &ScheduleRow) -> u32 {
    u32::try_from(row.backfill_max).unwrap_or(1).clamp(1, BACKFILL_MAX)
}

/// The stored cadence (a row has either a cron expression and zone, or an interval).
fn cadence_of(row: &ScheduleRow) -> Cadence {
    match (&row.cron, row.interval_ms) {
        (Some(expression), _) => Cadence::Cron {
            expression: expression.clone(),
            time_zone: row.time_zone.clone().unwrap_or_else(|| "UTC".to_owned()),
        },
        (None, interval_ms) => Cadence::Every { interval_ms: interval_ms.unwrap_or_default() },
    }
}

/// The new item a template makes for `queue`.
fn item_of(queue: &str, template: Template) -> NewItem {
    let mut item = NewItem::new(queue, template.payload);
    item.priority = template.priority;
    item.max_attempts = template.max_attempts;
    item.backoff = template.backoff;
    item.run_timeout_ms = template.run_timeout_ms;
    item.tags = template.tags;
    item.metadata = template.metadata;
    item
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{ManualClock, Options, Store, TxOutcome};

    /// A firing that read the schedule before another fired its tick (two processes at once)
    /// moves nothing and enqueues nothing: even once the tick's item, and with it its unique
    /// key, has been completed and pruned.
    #[test]
    fn a_firing_from_a_stale_read_writes_nothing() -> Result<()> {
        let clock = ManualClock::new(1_800_000_000_123);
        let options = Options { clock: Arc::new(clock.clone()), ..Options::default() };
        let store = Store::open_in_memory_with(options)?;
        let queue = store.queue();
        queue.put_schedule(Schedule::every("m", 60_000, NewItem::new("q", json!({}))))?;
        let read = |tx: &mut Tx<'_>| sql::select(tx.db(), tx.tenant(), "m");
        let stale = store.transaction(move |tx| Ok(TxOutcome::Commit(read(tx)?)))?;
        let stale = stale.ok_or_else(|| Error::not_found("schedule", "m"))?;
        clock.set_ms(1_800_000_060_000);
        queue.run_schedules()?;
        let claimed =
            queue.claim("w", &["q"], 1_000)?.ok_or_else(|| Error::not_found("item", "q"))?;
        queue.complete(&claimed.item.id, claimed.fence, json!(null))?;
        clock.advance_ms(1);
        assert_eq!(queue.prune_completed(0)?, 1, "the tick's item and its key are gone");
        let fired = store.transaction(move |tx| Ok(TxOutcome::Commit(fire_one(tx, &stale)?)))?;
        assert_eq!(fired, 0);
        assert!(queue.stats()?.iter().all(|stats| stats.pending + stats.scheduled == 0));
        let kept = queue.schedules(Page::first(1))?;
        assert_eq!(kept[0].next_tick_ms, Some(1_800_000_120_000), "moved on once");
        Ok(())
    }
}
