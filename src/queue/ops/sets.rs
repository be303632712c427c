//! PostgreSQL's set-based forms of the queue's operations over many items: a pool round's
//! completions, failures, releases, renewals and claims, and a batch's new items, each one
//! statement (`set_sql.rs`) whatever the number of items, and the op's events one `INSERT`.
//! SQLite keeps the item-by-item forms in `ops.rs` (a statement there costs no round trip).
//!
//! What each item is answered, and what it writes, is what the item-by-item form does: the
//! checks run first, each write carries the fence in its `WHERE`, an item the write did not
//! change is answered with the reason (`lease_lost`), and the events come in the same order.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::json;

use super::{
    CompletedEntry, EVENT_ERROR_BYTES_MAX, EnqueuedEntry, Notes, QueueEvent, check_new_item,
    check_text, entry, item_level, lease_lost_reason, lost_answer, shortened,
};
use crate::core::tx::{Tally, Tx};
use crate::error::{Error, Result};
use crate::queue::set_sql::{self, Counted, Failure, Fenced, NewRows};
use crate::queue::sql::{self, ItemRow};
use crate::queue::{Completion, Enqueued, Fail, FailOutcome, ItemStatus, NewItem, Release};

use super::{Lease, Settled, Settlement};

/// Whether `settle` can be settled a kind at a time: it names no item twice (a second
/// settlement of an item sees the first's write) and snoozes none (a snooze settles item by
/// item). Otherwise the item-by-item form runs.
pub(super) fn settles_at_once(settle: &[Settlement]) -> bool {
    let mut seen = HashSet::with_capacity(settle.len());
    let snoozes = settle.iter().any(|settlement| matches!(settlement, Settlement::Snooze(_)));
    !snoozes && settle.iter().all(|settlement| seen.insert(settlement.id()))
}

/// Settles a round's items, each kind in one statement; a refused item is answered with its
/// error in its place and writes nothing. Returns the answers and the events the round owes
/// (not appended yet: the round's claims add theirs), in the item-by-item form's order.
pub(super) fn settle_all(
    tx: &mut Tx<'_>,
    settle: &[Settlement],
) -> Result<(Vec<Result<Settled>>, Vec<QueueEvent>)> {
    let mut settled: Vec<Option<Result<Settled>>> = settle.iter().map(|_| None).collect();
    let (mut completions, mut failures, mut releases) = (Vec::new(), Vec::new(), Vec::new());
    for (index, settlement) in settle.iter().enumerate() {
        match settlement {
            Settlement::Complete(done) => match encoded_result(tx, &done.result) {
                Ok(result) => completions.push((index, done, result)),
                Err(error) => settled[index] = Some(item_level::<Settled>(Err(error))?),
            },
            Settlement::Fail(failure) => failures.push((index, failure)),
            Settlement::Release(release) => releases.push((index, release)),
            Settlement::Snooze(_) => {
                // `settles_at_once` sends a round with a snooze item by item.
                return Err(Error::Postgres("a snooze reached the set-based settlement".into()));
            }
        }
    }
    let mut notes = Notes::default();
    let mut singles = Vec::new();
    for (index, result) in complete_all(tx, &completions, &mut notes)? {
        settled[index] = Some(result);
    }
    for (index, result) in fail_all(tx, &failures, &mut singles)? {
        settled[index] = Some(result);
    }
    for (index, result) in release_all(tx, &releases, &mut singles)? {
        settled[index] = Some(result);
    }
    singles.sort_by_key(|(index, _)| *index);
    let mut events: Vec<QueueEvent> = singles.into_iter().map(|(_, single)| single).collect();
    events.extend(notes.into_events(tx)?);
    let settled = settled
        .into_iter()
        .map(|answer| answer.ok_or_else(|| Error::Postgres("a settlement was not answered".into())))
        .collect::<Result<_>>()?;
    Ok((settled, events))
}

/// A completion's result, encoded and checked against the payload limit.
fn encoded_result(tx: &Tx<'_>, result: &serde_json::Value) -> Result<String> {
    let encoded = serde_json::to_string(result)?;
    tx.limits().check_payload("result bytes", &encoded)?;
    Ok(encoded)
}

/// Completes the held items in one statement (their counts in it too, or, in a call that
/// shares its tenant's turn, with the batch's commit) and notes their events; each answered
/// in its place.
pub(super) fn complete_all(
    tx: &mut Tx<'_>,
    completions: &[(usize, &Completion, String)],
    notes: &mut Notes,
) -> Result<Vec<(usize, Result<Settled>)>> {
    if completions.is_empty() {
        return Ok(Vec::new());
    }
    let held: Vec<Fenced<'_>> =
        completions.iter().map(|(_, c, _)| Fenced { id: &c.id, fence: c.fence }).collect();
    let results: Vec<&str> = completions.iter().map(|(_, _, result)| result.as_str()).collect();
    let counted = counted_where(tx);
    let done = set_sql::complete(tx.db(), tx.tenant(), tx.now_ms(), &held, &results, counted)?;
    tx.tally(Tally::Completed, done.len() as u64);
    if counted == Counted::ByCaller {
        count_late(tx, done.iter().map(|c| c.queue.as_str()), ItemStatus::Completed)?;
    }
    let done: HashMap<&str, &set_sql::Changed> = done.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut answers = Vec::with_capacity(completions.len());
    for (index, completion, _) in completions {
        let answer = match done.get(completion.id.as_str()) {
            Some(changed) => {
                let entry = CompletedEntry {
                    attempt: changed.attempt,
                    fence: completion.fence,
                    id: &completion.id,
                };
                notes.note(&changed.queue, "completed", &entry)?;
                Ok(Settled::Completed)
            }
            None => lost_answer(tx, &completion.id, completion.fence)?,
        };
        answers.push((*index, answer));
    }
    Ok(answers)
}

/// Where a set-based statement's finished items are counted: in the statement, or, in a call
/// that shares its tenant's turn, late (`count_late`).
fn counted_where(tx: &Tx<'_>) -> Counted {
    if tx.writes_late() { Counted::ByCaller } else { Counted::Here }
}

/// Counts the items of `queues` (one entry per item) as now in `status`, per queue, at the
/// batch's end (`sql::add_to_count_late`).
fn count_late<'q>(
    tx: &mut Tx<'_>,
    queues: impl Iterator<Item = &'q str>,
    status: ItemStatus,
) -> Result<()> {
    let mut per_queue: BTreeMap<&str, i64> = BTreeMap::new();
    for queue in queues {
        *per_queue.entry(queue).or_default() += 1;
    }
    for (queue, added) in per_queue {
        sql::add_to_count_late(tx, queue, status, added)?;
    }
    Ok(())
}

/// Records the failed attempts in one statement (a retry after the backoff, or a dead
/// letter); each answered in its place, its event kept in `singles`.
fn fail_all(
    tx: &mut Tx<'_>,
    failures: &[(usize, &Fail)],
    singles: &mut Vec<(usize, QueueEvent)>,
) -> Result<Vec<(usize, Result<Settled>)>> {
    if failures.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = failures.iter().map(|(_, failure)| failure.id.as_str()).collect();
    let rows = rows_by_id(set_sql::select_items(tx.db(), tx.tenant(), &ids)?);
    let mut answers = Vec::with_capacity(failures.len());
    let mut writes = Vec::new();
    for (index, failure) in failures {
        let checked = check_text(tx, "error", &failure.error)
            .and_then(|()| held_among(tx, &rows, &failure.id, failure.fence));
        match item_level(checked)? {
            Ok(item) => writes.push((*index, failure, item, outcome(tx, item, failure.retryable))),
            Err(error) => answers.push((*index, Err(error))),
        }
    }
    let planned: Vec<Failure<'_>> = writes
        .iter()
        .map(|(_, failure, item, outcome)| Failure {
            held: Fenced { id: &failure.id, fence: failure.fence },
            dead: *outcome == FailOutcome::DeadLettered,
            run_at_ms: match outcome {
                FailOutcome::Retrying { run_at_ms } => *run_at_ms,
                FailOutcome::DeadLettered => item.run_at_ms,
            },
            error: &failure.error,
        })
        .collect();
    let counted = counted_where(tx);
    let changed: HashSet<String> =
        set_sql::fail(tx.db(), tx.tenant(), tx.now_ms(), &planned, counted)?.into_iter().collect();
    if counted == Counted::ByCaller {
        let dead = writes.iter().filter(|(_, failure, _, outcome)| {
            *outcome == FailOutcome::DeadLettered && changed.contains(&failure.id)
        });
        count_late(tx, dead.map(|(_, _, item, _)| item.queue.as_str()), ItemStatus::Dead)?;
    }
    for (index, failure, item, outcome) in writes {
        if !changed.contains(&failure.id) {
            Error::expect_one(0, "item", &failure.id)?;
        }
        if outcome == FailOutcome::DeadLettered {
            tx.tally(Tally::DeadLettered, 1);
        }
        singles.push((index, failure_event(item, &failure.error, outcome)?));
        // A retry is work again, and a dead letter frees a limited queue's place: either
        // wakes this process's waiting claimers.
        tx.ring_bell();
        answers.push((index, Ok(outcome)));
    }
    Ok(answers.into_iter().map(|(index, answer)| (index, answer.map(Settled::Failed))).collect())
}

/// What a failed attempt of `item` becomes: a retry after its backoff, or a dead letter.
fn outcome(tx: &Tx<'_>, item: &ItemRow, retryable: bool) -> FailOutcome {
    if retryable && item.attempt < item.max_attempts {
        let run_at_ms = tx.now_ms().saturating_add(item.backoff.delay_ms(item.attempt));
        FailOutcome::Retrying { run_at_ms }
    } else {
        FailOutcome::DeadLettered
    }
}

/// The event a failed attempt appends (the start of the error; the item keeps all of it).
fn failure_event(item: &ItemRow, error: &str, outcome: FailOutcome) -> Result<QueueEvent> {
    let error = shortened(error, EVENT_ERROR_BYTES_MAX);
    let (event_type, detail) = match outcome {
        FailOutcome::Retrying { run_at_ms } => {
            ("retried", json!({ "error": error, "run_at_ms": run_at_ms }))
        }
        FailOutcome::DeadLettered => ("dead_lettered", json!({ "error": error })),
    };
    let entry = serde_json::to_string(&entry(item, detail))?;
    Ok(QueueEvent::single(&item.queue, event_type, &entry))
}

/// Gives the held items back in one statement, their attempts refunded; each answered in its
/// place, its event kept in `singles`.
fn release_all(
    tx: &mut Tx<'_>,
    releases: &[(usize, &Release)],
    singles: &mut Vec<(usize, QueueEvent)>,
) -> Result<Vec<(usize, Result<Settled>)>> {
    if releases.is_empty() {
        return Ok(Vec::new());
    }
    let held: Vec<Fenced<'_>> =
        releases.iter().map(|(_, r)| Fenced { id: &r.id, fence: r.fence }).collect();
    let done = set_sql::release(tx.db(), tx.tenant(), tx.now_ms(), &held)?;
    let done: HashMap<&str, &set_sql::Changed> = done.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut answers = Vec::with_capacity(releases.len());
    for (index, release) in releases {
        let answer = match done.get(release.id.as_str()) {
            Some(changed) => {
                let entry = json!({ "id": release.id, "attempt": changed.attempt,
                                    "fence": release.fence });
                let entry = serde_json::to_string(&entry)?;
                let queue = changed.queue.clone();
                singles.push((*index, QueueEvent::single(&queue, "released", &entry)));
                tx.ring_bell();
                Ok(Settled::Released)
            }
            None => lost_answer(tx, &release.id, release.fence)?,
        };
        answers.push((*index, answer));
    }
    Ok(answers)
}

/// Renews the live leases in one statement; a lost one is answered with its error.
pub(super) fn renew_all(
    tx: &mut Tx<'_>,
    renew: &[Lease],
    lease_ms: i64,
) -> Result<Vec<Result<i64>>> {
    if renew.is_empty() {
        return Ok(Vec::new());
    }
    let expires_at_ms = tx.now_ms().saturating_add(lease_ms);
    let held: Vec<Fenced<'_>> =
        renew.iter().map(|l| Fenced { id: &l.id, fence: l.fence }).collect();
    let renewed: HashSet<(String, i64)> =
        set_sql::renew(tx.db(), tx.tenant(), tx.now_ms(), expires_at_ms, &held)?
            .into_iter()
            .collect();
    let mut answers = Vec::with_capacity(renew.len());
    for lease in renew {
        if renewed.contains(&(lease.id.clone(), lease.fence as i64)) {
            answers.push(Ok(expires_at_ms));
        } else {
            answers.push(lost_answer(tx, &lease.id, lease.fence)?);
        }
    }
    Ok(answers)
}

/// One claiming statement (`set_sql::claim`): sweeps up to `sweep` expired leases of each of
/// `queues`, and unless it found one or a paused or limited queue, claims up to `max_items`
/// due items. Returns the claimed items in claim order (priority desc, run_at asc, id asc),
/// the expired ones in the order SQLite's sweep takes them (queue by queue as `queues` names
/// them, oldest expiry first), and whether a queue is gated.
pub(super) fn claim_rows(
    tx: &Tx<'_>,
    worker_id: &str,
    queues: &[String],
    expires_at_ms: i64,
    max_items: usize,
    sweep: usize,
) -> Result<set_sql::ClaimFound> {
    let claiming = set_sql::Claiming {
        worker_id,
        now_ms: tx.now_ms(),
        expires_at_ms,
        limit: max_items,
        sweep,
    };
    let mut found = set_sql::claim(tx.db(), tx.tenant(), queues, &claiming)?;
    found.claimed.sort_by(|a, b| {
        b.priority.cmp(&a.priority).then(a.run_at_ms.cmp(&b.run_at_ms)).then(a.id.cmp(&b.id))
    });
    let place = |queue: &str| queues.iter().position(|named| named == queue);
    found.expired.sort_by(|a, b| {
        place(&a.queue)
            .cmp(&place(&b.queue))
            .then(a.lease_expires_at_ms.cmp(&b.lease_expires_at_ms))
            .then(a.id.cmp(&b.id))
    });
    // A queue named twice is swept twice: each item is settled once.
    found.expired.dedup_by(|a, b| a.id == b.id);
    Ok(found)
}

/// Whether a batch's items can be inserted in one statement: none has a dedupe key (each of
/// those looks for its live duplicate first, the batch's earlier items included), a unique
/// key, tags, metadata or a run timeout.
pub(super) fn insertable_at_once(items: &[NewItem]) -> bool {
    items.iter().all(|item| {
        // The one statement writes the plain columns only: an item with a unique key, tags,
        // metadata or a run timeout goes item by item, with its rows.
        item.dedupe_key.is_none()
            && item.unique.is_none()
            && item.tags.is_empty()
            && item.metadata.is_none()
            && item.run_timeout_ms.is_none()
    })
}

/// Checks and inserts a batch's items (none with a dedupe key) in one statement.
pub(super) fn enqueue_all(
    tx: &mut Tx<'_>,
    items: &[NewItem],
    notes: &mut Notes,
) -> Result<Vec<Enqueued>> {
    let encoded: Vec<String> =
        items.iter().map(|item| check_new_item(tx, item)).collect::<Result<_>>()?;
    let ids: Vec<String> = items.iter().map(|_| tx.new_id()).collect();
    let now_ms = tx.now_ms();
    let mut rows = NewRows::default();
    for ((item, id), payload) in items.iter().zip(&ids).zip(&encoded) {
        rows.ids.push(Some(id));
        rows.queues.push(Some(&item.queue));
        rows.payloads.push(Some(payload));
        rows.priorities.push(item.priority);
        rows.run_ats.push(item.run_at_ms.unwrap_or(now_ms));
        rows.max_attempts.push(i64::from(item.max_attempts));
        rows.backoff_bases.push(item.backoff.base_ms);
        rows.backoff_maxes.push(item.backoff.max_ms);
        rows.execution_ids.push(item.execution_id.as_deref());
        rows.node_ids.push(item.node_id.as_deref());
    }
    set_sql::insert(tx.db(), tx.tenant(), now_ms, &rows)?;
    for ((item, id), run_at_ms) in items.iter().zip(&ids).zip(&rows.run_ats) {
        let entry = EnqueuedEntry { id, priority: item.priority, run_at_ms: *run_at_ms };
        notes.note(&item.queue, "enqueued", &entry)?;
    }
    if !items.is_empty() {
        tx.ring_bell();
    }
    Ok(ids.into_iter().map(|id| Enqueued { id, deduplicated: false }).collect())
}

/// Items by id.
fn rows_by_id(rows: Vec<ItemRow>) -> HashMap<String, ItemRow> {
    rows.into_iter().map(|row| (row.id.clone(), row)).collect()
}

/// The claimed item `id` among `rows` if `fence` holds its live lease; otherwise why not (as
/// the item-by-item `held`).
fn held_among<'r>(
    tx: &Tx<'_>,
    rows: &'r HashMap<String, ItemRow>,
    id: &str,
    fence: u64,
) -> Result<&'r ItemRow> {
    tx.limits().check_id("item id", id)?;
    let item = rows.get(id).ok_or_else(|| Error::not_found("queue item", id))?;
    let live = item.status == ItemStatus::Claimed
        && item.fence == fence
        && item.lease_expires_at_ms.is_some_and(|at| at > tx.now_ms());
    if !live {
        return Err(lease_lost_reason(item, fence));
    }
    Ok(item)
}
