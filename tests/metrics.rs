//! `Store::metrics` (issue 30 item 4): the tenant's counts equal what each domain's own count
//! reads, per tenant; every answered op is in the latency histogram and every writer
//! transaction in the batch histogram, counted before its caller is answered; the WAL's size
//! is told for a file store only; and the Prometheus text is well formed, with cumulative
//! buckets and escaped labels.

mod common;

use std::sync::Arc;

use common::{new_store, new_store_with, temp_store};
use serde_json::json;
use spindle::process::Registration;
use spindle::{
    GraphFilter, ManualClock, Metrics, NewItem, NodeOptions, NodeSpec, Options, Store, Stream,
};

fn fill(store: &Store) -> spindle::Result<()> {
    let queue = store.queue();
    for n in 0..5 {
        queue.enqueue(NewItem::new("mail", json!(n)).max_attempts(1))?;
    }
    queue.enqueue(NewItem::new("later", json!(0)).run_at_ms(i64::MAX / 2))?;
    let claimed = queue.claim_batch("w", &["mail"], 60_000, 3)?;
    queue.complete(&claimed[0].item.id, claimed[0].fence, json!("ok"))?;
    queue.fail(&claimed[1].item.id, claimed[1].fence, "boom", false)?;
    let graph = store.graphs().create(json!({ "kind": "build" }))?;
    store.graphs().add_node(&graph, NodeSpec::task(json!({})), NodeOptions::default())?;
    store.graphs().start(&graph)?;
    store.processes().register(Registration::new("agent-1", "agent", json!({})))?;
    let workflows = store.workflows();
    workflows.put_definition("deploy", "v1", json!({ "steps": ["a"] }))?;
    workflows.create_execution("deploy", "v1", json!({}))?;
    Ok(())
}

fn assert_counts_agree(store: &Store, metrics: &Metrics) -> spindle::Result<()> {
    assert_eq!(metrics.tenant, store.tenant_id());
    assert_eq!(metrics.queues, store.queue().stats()?);
    assert_eq!(metrics.graphs, store.graphs().count_by_status(&GraphFilter::default())?);
    assert_eq!(metrics.workflows, store.workflows().count_by_status()?);
    assert_eq!(metrics.processes, store.processes().count()?);
    Ok(())
}

#[test]
fn the_counts_are_each_domains_own_counts_of_the_views_tenant() -> spindle::Result<()> {
    // A clock that stands still: the oldest item's age reads the same in both counts.
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let store = new_store_with(Options::default().clock(clock));
    fill(&store)?;
    let other = store.tenant("other")?;
    other.queue().enqueue(NewItem::new("mail", json!("theirs")))?;
    let metrics = store.metrics()?;
    assert_counts_agree(&store, &metrics)?;
    let mail = metrics.queues.iter().find(|stats| stats.queue == "mail").expect("mail");
    assert_eq!((mail.pending, mail.claimed, mail.completed, mail.dead), (2, 1, 1, 1));
    assert_eq!(metrics.processes.running, 1);
    let theirs = other.metrics()?;
    assert_counts_agree(&other, &theirs)?;
    assert_eq!(theirs.queues.len(), 1);
    assert_eq!(theirs.queues[0].pending, 1, "the other tenant's item only");
    assert!(theirs.graphs.is_empty() && theirs.workflows.is_empty());
    store.close()
}

#[test]
fn every_answered_op_and_every_transaction_is_counted_before_its_answer() -> spindle::Result<()> {
    let store = new_store();
    let stream = Stream::custom("clicks");
    let before = store.metrics()?;
    for n in 0..10 {
        store.events().append(&stream, "click", json!(n))?;
    }
    let after = store.metrics()?;
    let answered = after.op_latency_seconds.count() - before.op_latency_seconds.count();
    assert_eq!(answered, 11, "ten appends and the second metrics read");
    let transactions = (after.commits + after.rollbacks) - (before.commits + before.rollbacks);
    assert!(transactions >= 10, "each append alone in its transaction: {transactions}");
    let batches = after.batch_ops.count() - before.batch_ops.count();
    assert_eq!(batches, transactions, "one batch size per transaction");
    assert!(after.op_latency_seconds.sum > before.op_latency_seconds.sum);
    // A failed op alone in its transaction rolls it back, and is answered and counted.
    let refused = store.queue().complete("no-such-item", 1, json!(null));
    assert!(refused.is_err());
    let last = store.metrics()?;
    assert_eq!(last.op_latency_seconds.count() - after.op_latency_seconds.count(), 2);
    // An op refused before it runs (a reader's write) is answered, and counted, too.
    let (secret, _) = store.auth().create_token("eyes", spindle::Role::Reader, None)?;
    let reader = store.authenticate(secret.expose())?;
    let before_refusal = store.metrics()?.op_latency_seconds.count();
    let refused = reader.events().append(Stream::custom("clicks"), "click", json!(0));
    assert!(matches!(refused, Err(spindle::Error::Forbidden(_))), "{refused:?}");
    let counted = store.metrics()?.op_latency_seconds.count() - before_refusal;
    assert_eq!(counted, 2, "the refused append and this metrics read");
    store.close()
}

#[test]
fn histograms_keep_one_count_per_bucket_and_the_text_makes_them_cumulative() -> spindle::Result<()>
{
    let store = new_store();
    fill(&store)?;
    let metrics = store.metrics()?;
    for histogram in [&metrics.batch_ops, &metrics.op_latency_seconds] {
        assert_eq!(histogram.counts.len(), histogram.bounds.len() + 1);
        assert!(histogram.bounds.windows(2).all(|pair| pair[0] < pair[1]), "ascending bounds");
    }
    let text = metrics.prometheus();
    let buckets: Vec<f64> = text
        .lines()
        .filter(|line| line.starts_with("spindle_op_latency_seconds_bucket{"))
        .map(|line| line.rsplit_once(' ').expect("a value").1.parse().expect("a number"))
        .collect();
    assert_eq!(buckets.len(), metrics.op_latency_seconds.bounds.len() + 1, "+Inf too");
    assert!(buckets.windows(2).all(|pair| pair[0] <= pair[1]), "cumulative: {buckets:?}");
    let total = metrics.op_latency_seconds.count() as f64;
    assert_eq!(buckets.last().copied(), Some(total));
    assert!(text.contains(&format!("spindle_op_latency_seconds_count {total}")));
    // Bounds in seconds as written by hand: 50 µs is 0.00005, not 0.000049999...
    assert!(text.contains("spindle_op_latency_seconds_bucket{le=\"0.00005\"}"), "{text}");
    assert!(text.contains("spindle_op_latency_seconds_bucket{le=\"0.025\"}"), "{text}");
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let (_, value) = line.rsplit_once(' ').expect("name and value");
        assert!(value.parse::<f64>().is_ok(), "a number: {line:?}");
    }
    store.close()
}

#[test]
fn label_values_are_escaped_in_the_text() -> spindle::Result<()> {
    let store = new_store();
    store.queue().enqueue(NewItem::new("say \"hi\" \\ there", json!(0)))?;
    let text = store.metrics()?.prometheus();
    let series =
        r#"spindle_queue_items{tenant="default",queue="say \"hi\" \\ there",state="pending"} 1"#;
    assert!(text.lines().any(|line| line == series), "{text}");
    store.close()
}

#[test]
fn the_wal_size_is_told_for_a_store_file_only() -> spindle::Result<()> {
    let file = temp_store();
    file.store.events().append(Stream::custom("s"), "e", json!(1))?;
    let wal_bytes = file.store.metrics()?.wal_bytes.expect("a store file has a WAL");
    let on_disk = std::fs::metadata(file.path.with_extension("db-wal")).map_or(0, |m| m.len());
    assert_eq!(wal_bytes, on_disk);
    assert!(wal_bytes > 0, "the append is in the WAL until a checkpoint copies it back");
    let memory = Store::open_in_memory()?;
    assert_eq!(memory.metrics()?.wal_bytes, None);
    assert!(!memory.metrics()?.prometheus().contains("spindle_wal_bytes"));
    file.store.close()?;
    memory.close()
}

#[test]
fn completions_and_dead_letters_are_counters_that_only_commits_move_and_pruning_does_not_lower()
-> spindle::Result<()> {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let store = new_store_with(Options::default().clock(clock.clone()));
    let queue = store.queue();
    for n in 0..4 {
        queue.enqueue(NewItem::new("mail", json!(n)).max_attempts(1))?;
    }
    let claimed = queue.claim_batch("w", &["mail"], 60_000, 4)?;
    queue.complete(&claimed[0].item.id, claimed[0].fence, json!("ok"))?;
    queue.complete(&claimed[1].item.id, claimed[1].fence, json!("ok"))?;
    queue.fail(&claimed[2].item.id, claimed[2].fence, "boom", false)?;
    // A completion refused (a stale fence) counts nothing.
    let stale = queue.complete(&claimed[3].item.id, claimed[3].fence + 1, json!("late"));
    assert!(stale.is_err(), "a stale fence is refused");
    // A completion inside a transaction the caller rolls back counts nothing either.
    let (id, fence) = (claimed[3].item.id.clone(), claimed[3].fence);
    store.transaction(move |tx| {
        tx.exec(spindle::queue::Complete { id, fence, result: json!("undone") })?;
        Ok(spindle::TxOutcome::Rollback(()))
    })?;
    let metrics = store.metrics()?;
    assert_eq!((metrics.completions, metrics.dead_letters), (2, 1));
    let text = metrics.prometheus();
    assert!(text.contains("spindle_queue_completions_total 2\n"), "{text}");
    assert!(text.contains("spindle_queue_dead_letters_total 1\n"), "{text}");
    // Pruning lowers the gauge of completed items, not the counter of completions.
    clock.advance_ms(10_000);
    assert_eq!(queue.prune_completed(1_000)?, 2);
    let after = store.metrics()?;
    assert_eq!(after.queues.iter().map(|q| q.completed).sum::<u64>(), 0);
    assert_eq!(after.completions, 2, "a counter only grows");
    Ok(())
}
