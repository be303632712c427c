//! The queue's set-based statements, PostgreSQL's only: a round's claims, completions,
//! failures, releases and renewals, and a batch's new items, each one statement over arrays
//! (`unnest`) whatever the number of items, where SQLite (no round trips) runs `sql.rs`'s
//! statements item by item.
//!
//! As there, every lease-holder write carries the fence and the `claimed` status in its own
//! `WHERE`. What moves an item into a finished status writes its count (`queue_counts`) in
//! the same statement, or, in a call that shares its tenant's turn, leaves it to the caller,
//! who writes it with the batch's commit (`Counted`, `Tx::write_late`).

use crate::core::db::{Arg, Db, Row, args};
use crate::error::Result;

use super::sql::{ItemRow, item_columns, item_from_row};

/// The `claimed` status a lease-holder's set-based write checks in its own `WHERE`, written
/// as a test of the comparison (the same for every row: `status` is never NULL) so that it
/// does not imply `queue_items_leases`'s predicate: such a write finds its rows by primary
/// key, a probe for each id of the arrays (a plan for known arrays on a small table without
/// statistics may instead read the tenant's keys once and hash them: cheap while the table
/// is small). An `item_id = ANY` of the ids beside the join was tried: its generic plan read
/// the ids' rows first and scanned the arrays again for each (a 3 ms completion in the
/// bench's rows became 18). Written plainly, without statistics the planner guessed one
/// claimed row, read every live lease of the tenant through that index and compared each
/// with every id (a completion of 212 items: 14.5 ms against 3 ms).
macro_rules! held_claimed {
    () => {
        "(q.status = 'claimed') IS TRUE"
    };
}

/// Texts as an array argument's elements.
pub(super) fn texts<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Option<&'a str>> {
    values.into_iter().map(Some).collect()
}

/// The claiming statement (`claim`) for the queues `$over` reads (before each queue's
/// `LATERAL` subquery; empty for one queue), each named `$queue` in those subqueries, and
/// `$named` in the settings' look-up.
macro_rules! claim_sql {
    ($over:expr, $queue:expr, $named:expr) => {
        concat!(
            "WITH expired AS (
           SELECT e.* FROM ",
            $over,
            " (
             SELECT ",
            item_columns!(),
            " FROM main.queue_items
             WHERE tenant_id = ?1 AND queue = ",
            $queue,
            " AND status = 'claimed'
               AND lease_expires_at_ms <= ?3
             ORDER BY lease_expires_at_ms, item_id LIMIT ?7
             FOR UPDATE SKIP LOCKED) AS e),
         gate AS (
           SELECT EXISTS (SELECT 1 FROM main.queue_settings
                          WHERE tenant_id = ?1 AND queue ",
            $named,
            "
                            AND (paused = 1 OR concurrency_max IS NOT NULL)) AS gated),
         due AS (
           SELECT d.item_id AS due_id
           FROM ",
            $over,
            " (
             SELECT item_id, priority, run_at_ms FROM main.queue_items
             WHERE tenant_id = ?1 AND queue = ",
            $queue,
            " AND status = 'pending'
               AND run_at_ms <= ?3
             ORDER BY priority DESC, run_at_ms, item_id LIMIT ?4
             FOR UPDATE SKIP LOCKED) AS d
           WHERE NOT EXISTS (SELECT 1 FROM expired) AND NOT (SELECT gated FROM gate)
           ORDER BY d.priority DESC, d.run_at_ms, d.item_id LIMIT ?4),
         claimed AS (
           UPDATE main.queue_items AS q
           SET status = 'claimed', attempt = q.attempt + 1, fence = q.fence + 1,
               worker_id = ?5, lease_expires_at_ms = ?6, updated_at_ms = ?3
           WHERE q.tenant_id = ?1 AND q.item_id = ANY(ARRAY(SELECT due_id FROM due))
           RETURNING ",
            item_columns!(),
            ")
         SELECT found.*, gate.gated FROM gate LEFT JOIN (
           SELECT *, 'claimed' AS kind FROM claimed
           UNION ALL SELECT *, 'expired' AS kind FROM expired) AS found ON true"
        )
    };
}

/// The claiming statement for several queues (`?2`, an array), each read in claim order
/// through its index and the heads merged.
const CLAIM_SQL: &str =
    claim_sql!("unnest(?2::text[]) AS n(queue) CROSS JOIN LATERAL", "n.queue", "= ANY(?2::text[])");

/// The claiming statement for one queue (`?2`, a text): the server keeps one generic plan of
/// it after its first few runs, where the array's (estimated at a hundred queues) kept it
/// planning every claim again (BENCHMARKS.md, session 18).
const CLAIM_ONE_SQL: &str = claim_sql!("", "?2", "= ?2");

/// What one claiming statement found (see `claim`).
pub(super) struct ClaimFound {
    /// The items it claimed, in no particular order; none when it swept or found a gate.
    pub(super) claimed: Vec<ItemRow>,
    /// The claimed items of `queues` whose lease had expired (up to the sweep's page of each
    /// queue), locked for this transaction and still to be settled, in no particular order.
    pub(super) expired: Vec<ItemRow>,
    /// Whether a queue of `queues` is paused or limited: its claims then go item by item, each
    /// under the claiming statement's gate (`gate_sql!`), instead of all in one.
    pub(super) gated: bool,
}

/// What a claim asks (see `claim`).
pub(super) struct Claiming<'a> {
    pub(super) worker_id: &'a str,
    pub(super) now_ms: i64,
    /// The lease's end for each item claimed.
    pub(super) expires_at_ms: i64,
    /// Most items to claim.
    pub(super) limit: usize,
    /// Most expired leases of each queue to sweep (0: none).
    pub(super) sweep: usize,
}

/// In one statement: locks up to `sweep` claimed items of each of `queues` whose lease has
/// expired, looks whether any of `queues` is paused or limited, and, if neither found
/// anything, claims up to `limit` due items of `queues` (each queue read in claim order
/// through its index, the heads merged), skipping rows another transaction holds.
///
/// A claim thus costs one round trip however many queues it names; the rare claim that
/// finds expired leases or a gate claims nothing here: its caller settles what it swept and
/// claims again (`sweep` 0), or goes item by item.
///
/// The due items are read through `queue_items_pending` alone, in its order, with the
/// `LIMIT` on the index scan: it is the only index of pending items whose predicate this
/// `WHERE` implies (`queue_items_schedule`'s also asks `lease_expires_at_ms IS NULL`), so
/// the planner cannot take another and sort every pending item, which it did on a table
/// without statistics (BENCHMARKS.md, issue 29). The `UPDATE` finds the chosen rows by
/// primary key (`= ANY` of their ids): a generic plan, whose `LIMIT` is a guess, cannot turn
/// it into a scan of the table. That `WHERE` names no status (the rows are `due`'s, locked by
/// this statement): with `status = 'pending'` it would imply `queue_items_pending`'s
/// predicate, and without statistics the planner read that whole index, the ids a filter.
pub(super) fn claim(
    db: Db<'_>,
    tenant: &str,
    queues: &[String],
    claiming: &Claiming<'_>,
) -> Result<ClaimFound> {
    let names = texts(queues.iter().map(String::as_str));
    let (sql, queues) = match queues {
        [queue] => (CLAIM_ONE_SQL, Arg::Text(queue)),
        _ => (CLAIM_SQL, Arg::Texts(&names)),
    };
    let rows = db.query_all(
        sql,
        args![
            tenant,
            queues,
            claiming.now_ms,
            claiming.limit as i64,
            claiming.worker_id,
            claiming.expires_at_ms,
            claiming.sweep as i64
        ],
        |row| {
            // The row after `item_columns!()`: what it is (NULL when the statement found
            // nothing: the gate's row alone), and the gate.
            let kind: Option<String> = row.get(24)?;
            let gated: bool = row.get(25)?;
            let item = match kind {
                Some(_) => Some(item_from_row(row)?),
                None => None,
            };
            Ok((kind, item, gated))
        },
    )?;
    let mut found = ClaimFound { claimed: Vec::new(), expired: Vec::new(), gated: false };
    for (kind, item, gated) in rows {
        found.gated |= gated;
        match (kind.as_deref(), item) {
            (Some("claimed"), Some(item)) => found.claimed.push(item),
            (Some(_), Some(item)) => found.expired.push(item),
            _ => {}
        }
    }
    Ok(found)
}

/// A held item's id, the fence of its holder's claim, and (for a completion or failure) text.
pub(super) struct Fenced<'a> {
    pub(super) id: &'a str,
    pub(super) fence: u64,
}

/// The ids and fences of `held` as array arguments' elements.
fn ids_and_fences<'a>(held: &[Fenced<'a>]) -> (Vec<Option<&'a str>>, Vec<i64>) {
    (texts(held.iter().map(|h| h.id)), held.iter().map(|h| h.fence as i64).collect())
}

/// What a set-based write returned of an item it changed: its id, queue and attempt.
pub(super) struct Changed {
    pub(super) id: String,
    pub(super) queue: String,
    pub(super) attempt: u32,
}

fn changed(row: &Row<'_>) -> Result<Changed> {
    Ok(Changed { id: row.get(0)?, queue: row.get(1)?, attempt: row.get(2)? })
}

/// The completing statement (`complete`) over the completions `$from` reads (`u(id, fence,
/// result)`), with `$counted`: a `counted` CTE that writes the count of what it completed, or
/// nothing (the caller counts them later).
macro_rules! complete_set_sql {
    ($from:expr, $counted:expr) => {
        concat!(
            "WITH done AS (
           UPDATE main.queue_items AS q
           SET status = 'completed', result = u.result, worker_id = NULL,
               lease_expires_at_ms = NULL, updated_at_ms = ?2, finished_at_ms = ?2
           FROM ",
            $from,
            "
           WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
             AND ",
            held_claimed!(),
            " AND q.lease_expires_at_ms > ?2
           RETURNING q.item_id, q.queue, q.attempt)",
            $counted,
            " SELECT item_id, queue, attempt FROM done"
        )
    };
}

/// Many completions, from arrays.
macro_rules! many_completions {
    () => {
        "unnest(?3::text[], ?4::bigint[], ?5::text[]) AS u(id, fence, result)"
    };
}

/// One completion, from plain values: one row for the planner, generic plan or not, so the
/// server keeps one plan of it (an array's hundred guessed rows kept it planning every call).
macro_rules! one_completion {
    () => {
        "(SELECT ?3::text, ?4::bigint, ?5::text) AS u(id, fence, result)"
    };
}

/// The count of what a completing statement completed, written by it.
macro_rules! completed_counted {
    () => {
        ",
         counted AS (
           INSERT INTO main.queue_counts AS c (tenant_id, queue, status, total)
           SELECT ?1, queue, 'completed', count(*) FROM done GROUP BY queue
           ON CONFLICT (tenant_id, queue, status) DO UPDATE SET total = c.total + excluded.total)"
    };
}

/// Completes and counts in one statement.
const COMPLETE_SQL: &str = complete_set_sql!(many_completions!(), completed_counted!());

/// Completes; the caller counts.
const COMPLETE_UNCOUNTED_SQL: &str = complete_set_sql!(many_completions!(), "");

/// Completes one item and counts it.
const COMPLETE_ONE_SQL: &str = complete_set_sql!(one_completion!(), completed_counted!());

/// Completes one item; the caller counts.
const COMPLETE_ONE_UNCOUNTED_SQL: &str = complete_set_sql!(one_completion!(), "");

/// Where the count of what a statement finishes is written (`queue_counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// In the statement itself.
    Here,
    /// By the caller, from what the statement returned (`sql::add_to_count_late`).
    ByCaller,
}

/// Completes the held items (each with its encoded result) whose fence still holds a live
/// lease, and counts them per queue where `counted` says; returns those it completed.
pub(super) fn complete(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    held: &[Fenced<'_>],
    results: &[&str],
    counted: Counted,
) -> Result<Vec<Changed>> {
    if let ([one], [result]) = (held, results) {
        let sql = match counted {
            Counted::Here => COMPLETE_ONE_SQL,
            Counted::ByCaller => COMPLETE_ONE_UNCOUNTED_SQL,
        };
        let fence = one.fence as i64;
        return db.query_all(sql, args![tenant, now_ms, one.id, fence, *result], changed);
    }
    let (ids, fences) = ids_and_fences(held);
    let results = texts(results.iter().copied());
    let sql = match counted {
        Counted::Here => COMPLETE_SQL,
        Counted::ByCaller => COMPLETE_UNCOUNTED_SQL,
    };
    db.query_all(
        sql,
        args![tenant, now_ms, Arg::Texts(&ids), Arg::Ints(&fences), Arg::Texts(&results)],
        changed,
    )
}

/// A failed attempt to record: retry at `run_at_ms`, or (`dead`) dead-letter.
pub(super) struct Failure<'a> {
    pub(super) held: Fenced<'a>,
    pub(super) dead: bool,
    pub(super) run_at_ms: i64,
    pub(super) error: &'a str,
}

/// The failing statement (`fail`), with `$counted` as in `complete_set_sql!`.
macro_rules! fail_set_sql {
    ($counted:expr) => {
        concat!(
            "WITH failed AS (
           UPDATE main.queue_items AS q
           SET status = u.status, run_at_ms = u.run_at_ms, last_error = u.error,
               worker_id = NULL, lease_expires_at_ms = NULL, updated_at_ms = ?2,
               finished_at_ms = CASE WHEN u.status = 'dead' THEN ?2 ELSE q.finished_at_ms END
           FROM unnest(?3::text[], ?4::bigint[], ?5::text[], ?6::bigint[], ?7::text[])
                AS u(id, fence, status, run_at_ms, error)
           WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
             AND ",
            held_claimed!(),
            "
           RETURNING q.item_id, q.queue, q.status)",
            $counted,
            " SELECT item_id FROM failed"
        )
    };
}

/// Fails and counts the dead letters in one statement.
const FAIL_SQL: &str = fail_set_sql!(
    ",
         counted AS (
           INSERT INTO main.queue_counts AS c (tenant_id, queue, status, total)
           SELECT ?1, queue, 'dead', count(*) FROM failed WHERE status = 'dead' GROUP BY queue
           ON CONFLICT (tenant_id, queue, status) DO UPDATE SET total = c.total + excluded.total)"
);

/// Fails; the caller counts the dead letters.
const FAIL_UNCOUNTED_SQL: &str = fail_set_sql!("");

/// Ends the failed attempts of claimed items (a retry, or a dead letter counted per queue
/// where `counted` says); returns the ids it changed.
pub(super) fn fail(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    failures: &[Failure<'_>],
    counted: Counted,
) -> Result<Vec<String>> {
    let ids = texts(failures.iter().map(|f| f.held.id));
    let fences: Vec<i64> = failures.iter().map(|f| f.held.fence as i64).collect();
    let statuses = texts(failures.iter().map(|f| if f.dead { "dead" } else { "pending" }));
    let run_ats: Vec<i64> = failures.iter().map(|f| f.run_at_ms).collect();
    let errors = texts(failures.iter().map(|f| f.error));
    let sql = match counted {
        Counted::Here => FAIL_SQL,
        Counted::ByCaller => FAIL_UNCOUNTED_SQL,
    };
    db.query_all(
        sql,
        args![
            tenant,
            now_ms,
            Arg::Texts(&ids),
            Arg::Ints(&fences),
            Arg::Texts(&statuses),
            Arg::Ints(&run_ats),
            Arg::Texts(&errors)
        ],
        |row| row.get(0),
    )
}

/// Returns the held items whose fence still holds a live lease to pending, their attempt
/// refunded; returns those it released (with the attempt they had).
pub(super) fn release(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    held: &[Fenced<'_>],
) -> Result<Vec<Changed>> {
    let (ids, fences) = ids_and_fences(held);
    db.query_all(
        concat!(
            "UPDATE main.queue_items AS q
         SET status = 'pending', attempt = q.attempt - 1, worker_id = NULL,
             lease_expires_at_ms = NULL, updated_at_ms = ?2
         FROM unnest(?3::text[], ?4::bigint[]) AS u(id, fence)
         WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
           AND ",
            held_claimed!(),
            " AND q.lease_expires_at_ms > ?2
         RETURNING q.item_id, q.queue, q.attempt + 1"
        ),
        args![tenant, now_ms, Arg::Texts(&ids), Arg::Ints(&fences)],
        changed,
    )
}

/// Moves the live leases of the held items to `expires_at_ms`; returns the ids and fences it
/// renewed (a list may name an item twice, with a stale fence once).
pub(super) fn renew(
    db: Db<'_>,
    tenant: &str,
    now_ms: i64,
    expires_at_ms: i64,
    held: &[Fenced<'_>],
) -> Result<Vec<(String, i64)>> {
    let (ids, fences) = ids_and_fences(held);
    db.query_all(
        concat!(
            "UPDATE main.queue_items AS q SET lease_expires_at_ms = ?3, updated_at_ms = ?2
         FROM unnest(?4::text[], ?5::bigint[]) AS u(id, fence)
         WHERE q.tenant_id = ?1 AND q.item_id = u.id AND q.fence = u.fence
           AND ",
            held_claimed!(),
            " AND q.lease_expires_at_ms > ?2
         RETURNING q.item_id, q.fence"
        ),
        args![tenant, now_ms, expires_at_ms, Arg::Texts(&ids), Arg::Ints(&fences)],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
}

/// The items `ids` of the tenant (those that exist), in no particular order.
pub(super) fn select_items(db: Db<'_>, tenant: &str, ids: &[&str]) -> Result<Vec<ItemRow>> {
    let ids = texts(ids.iter().copied());
    db.query_all(
        concat!(
            "SELECT ",
            item_columns!(),
            " FROM main.queue_items WHERE tenant_id = ?1 AND item_id = ANY(?2::text[])"
        ),
        args![tenant, Arg::Texts(&ids)],
        item_from_row,
    )
}

/// The columns of plain new items (no dedupe key, unique key, tags, metadata or run timeout),
/// one array each (see `insert`).
#[derive(Default)]
pub(super) struct NewRows<'a> {
    pub(super) ids: Vec<Option<&'a str>>,
    pub(super) queues: Vec<Option<&'a str>>,
    pub(super) payloads: Vec<Option<&'a str>>,
    pub(super) priorities: Vec<i64>,
    pub(super) run_ats: Vec<i64>,
    pub(super) max_attempts: Vec<i64>,
    pub(super) backoff_bases: Vec<i64>,
    pub(super) backoff_maxes: Vec<i64>,
    pub(super) execution_ids: Vec<Option<&'a str>>,
    pub(super) node_ids: Vec<Option<&'a str>>,
}

/// Inserts new plain pending items (see `NewRows`), in their order.
pub(super) fn insert(db: Db<'_>, tenant: &str, now_ms: i64, rows: &NewRows<'_>) -> Result<()> {
    db.execute(
        "INSERT INTO main.queue_items (tenant_id, item_id, queue, payload, payload_hash,
             priority, run_at_ms, attempt, max_attempts, backoff_base_ms, backoff_max_ms,
             dedupe_key, execution_id, node_id, status, fence, created_at_ms, updated_at_ms)
         SELECT ?1, u.id, u.queue, u.payload, NULL, u.priority, u.run_at_ms, 0, u.max_attempts,
                u.base_ms, u.max_ms, NULL, u.execution_id, u.node_id, 'pending', 0, ?2, ?2
         FROM unnest(?3::text[], ?4::text[], ?5::text[], ?6::bigint[], ?7::bigint[],
                     ?8::bigint[], ?9::bigint[], ?10::bigint[], ?11::text[], ?12::text[])
              WITH ORDINALITY AS u(id, queue, payload, priority, run_at_ms, max_attempts,
                                   base_ms, max_ms, execution_id, node_id, n)
         ORDER BY u.n",
        args![
            tenant,
            now_ms,
            Arg::Texts(&rows.ids),
            Arg::Texts(&rows.queues),
            Arg::Texts(&rows.payloads),
            Arg::Ints(&rows.priorities),
            Arg::Ints(&rows.run_ats),
            Arg::Ints(&rows.max_attempts),
            Arg::Ints(&rows.backoff_bases),
            Arg::Ints(&rows.backoff_maxes),
            Arg::Texts(&rows.execution_ids),
            Arg::Texts(&rows.node_ids)
        ],
    )?;
    Ok(())
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;
    use crate::Store;
    use crate::core::pg::rewrite;
    use crate::queue::NewItem;
    use postgres::{Client, NoTls};
    use serde_json::json;

    /// The plan of one claim of `limit` items of queue `q` on the schema `location` names,
    /// run and rolled back (`EXPLAIN ANALYZE` of the prepared statement; `generic`: the plan
    /// a prepared statement keeps once it stops planning for each call's values).
    fn claim_plan(location: &str, limit: i64, generic: bool, one: bool) -> String {
        let mut client = Client::connect(location, NoTls).expect("connect");
        let mode = if generic { "force_generic_plan" } else { "force_custom_plan" };
        let (sql, queues) = if one { (CLAIM_ONE_SQL, "q") } else { (CLAIM_SQL, "{q}") };
        client
            .batch_execute(&format!(
                "SET plan_cache_mode = {mode}; BEGIN; PREPARE claim AS {}",
                rewrite(sql)
            ))
            .expect("prepare");
        let explain = format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
             EXECUTE claim('default', '{queues}', {}, {limit}, 'w', {}, 100)",
            i64::MAX / 2,
            i64::MAX / 2
        );
        let rows = client.query(explain.as_str(), &[]).expect("explain");
        client.batch_execute("ROLLBACK").expect("rollback");
        rows.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
    }

    /// The plan of one completion of 200 items claimed for it in the same transaction,
    /// rolled back (as `claim_plan`).
    fn completion_plan(location: &str, generic: bool) -> String {
        let mut client = Client::connect(location, NoTls).expect("connect");
        let mode = if generic { "force_generic_plan" } else { "force_custom_plan" };
        client
            .batch_execute(&format!(
                "SET plan_cache_mode = {mode}; BEGIN; PREPARE complete AS {}; {}",
                rewrite(COMPLETE_SQL),
                rewrite(&format!(
                    "UPDATE main.queue_items SET status = 'claimed', attempt = 1, fence = 1,
                         worker_id = 'w', lease_expires_at_ms = {}
                     WHERE item_id IN (SELECT item_id FROM main.queue_items
                                       ORDER BY item_id LIMIT 300)",
                    i64::MAX / 2
                ))
            ))
            .expect("prepare");
        let claimed = "SELECT item_id FROM main.queue_items WHERE status = 'claimed' LIMIT 200";
        let ids: Vec<String> = client
            .query(rewrite(claimed).as_str(), &[])
            .expect("ids")
            .iter()
            .map(|row| row.get(0))
            .collect();
        // An EXPLAIN takes no parameters: the arrays are literals (ids are letters, digits
        // and dashes).
        let explain = format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
             EXECUTE complete('default', 5, '{{{}}}', array_fill(1::bigint, ARRAY[{n}]),
                              array_fill('null'::text, ARRAY[{n}]))",
            ids.join(","),
            n = ids.len()
        );
        let rows = client.query(explain.as_str(), &[]).expect("explain");
        client.batch_execute("ROLLBACK").expect("rollback");
        rows.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
    }

    /// With a server (`SPINDLE_TEST_PG`): on a fresh store's table of 20,000 items (the
    /// peer bench's size: with the old index the test fails there), never analysed, a claim
    /// reads its due items through `queue_items_pending` in claim order and stops at its
    /// limit (it once took `queue_items_schedule` and sorted every pending item), with the
    /// plan made for its values and with a generic one, for one queue and for several; and
    /// so it does once analysed. A completion of many items probes the primary key once for
    /// each (it once read every live lease through `queue_items_leases` and compared each
    /// with every id).
    #[test]
    fn a_claim_reads_only_its_items_from_the_index_with_or_without_statistics() -> Result<()> {
        let Ok(server) = std::env::var("SPINDLE_TEST_PG") else {
            return Ok(());
        };
        let schema = format!("c_{}", uuid::Uuid::now_v7().simple());
        let location = format!("{server} options='-csearch_path={schema}'");
        let store = Store::connect(&location)?;
        let items: Vec<NewItem> = (0..20_000)
            .map(|n| NewItem::new("q", json!({ "n": n, "pad": "x".repeat(80) })))
            .collect();
        for chunk in items.chunks(1_000) {
            store.queue().enqueue_batch(chunk.to_vec())?;
        }
        store.close()?;
        let mut client = Client::connect(&location, NoTls).expect("connect");
        // No autovacuum's ANALYZE while the test looks at the table without statistics.
        client
            .batch_execute("ALTER TABLE queue_items SET (autovacuum_enabled = off)")
            .expect("off");
        let mut plans = Vec::new();
        let mut completions = Vec::new();
        for analysed in [false, true] {
            if analysed {
                client.batch_execute("ANALYZE queue_items").expect("analyze");
            }
            for generic in [false, true] {
                for one in [false, true] {
                    let plan = claim_plan(&location, 10, generic, one);
                    plans
                        .push((format!("analysed {analysed}, generic {generic}, one {one}"), plan));
                }
                completions.push((analysed, generic, completion_plan(&location, generic)));
            }
        }
        client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).expect("drop");
        for (case, plan) in plans {
            let scan = plan
                .lines()
                .find(|line| line.contains("Index Scan using queue_items_pending"))
                .unwrap_or_else(|| panic!("{case}:\n{plan}"));
            assert!(scan.contains("rows=10 "), "{case}:\n{plan}");
            assert!(!plan.contains("queue_items_schedule"), "{case}:\n{plan}");
            assert!(!plan.contains("Seq Scan"), "{case}:\n{plan}");
        }
        for (analysed, generic, plan) in completions {
            // Without statistics the rows are found through the primary key (a probe per id,
            // or one scan of the tenant's keys), never by reading the tenant's live leases and
            // comparing each with every id. (Once analysed, this small table is read whole.)
            let context = format!("analysed {analysed}, generic {generic}:\n{plan}");
            assert!(!plan.contains("queue_items_leases"), "{context}");
            if !analysed {
                assert!(plan.contains("queue_items_pkey"), "{context}");
                assert!(!plan.contains("Seq Scan"), "{context}");
            }
        }
        Ok(())
    }
}
