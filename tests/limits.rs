//! Guarantee 8: every limit at its value passes and one past it is a typed error that writes
//! nothing; ids are checked for emptiness, length and control characters.

mod common;

use serde_json::json;
use spindle::{Error, Limits, Options, Store, Stream};

const MIB: usize = 1024 * 1024;

fn nothing_written(store: &Store) {
    assert!(store.events().read_all(0, 1000).expect("read_all").is_empty(), "nothing written");
}

fn is_too_large(result: &spindle::Result<impl std::fmt::Debug>, limit: u64, actual: u64) -> bool {
    matches!(result, Err(Error::TooLarge { limit: l, actual: a, .. }) if *l == limit && *a == actual)
}

#[test]
fn ids_at_256_bytes_pass_and_257_fail() -> spindle::Result<()> {
    let store = common::new_store();
    let long = "x".repeat(257);
    let s = Stream::custom(&long);
    assert!(is_too_large(&store.events().append(&s, "t", json!(1)), 256, 257));
    assert!(is_too_large(&store.events().append(Stream::custom("s"), &long, json!(1)), 256, 257));
    let keyed = store.events().append_idempotent(Stream::custom("s"), "t", json!(1), &long);
    assert!(is_too_large(&keyed, 256, 257));
    assert!(is_too_large(&store.tenant(&long).map(|_| ()), 256, 257));
    assert!(is_too_large(&store.subscribe(&s, 0).map(|_| ()), 256, 257));
    nothing_written(&store);

    let at_limit = "y".repeat(256);
    store.events().append_idempotent(Stream::custom(&at_limit), &at_limit, json!(1), &at_limit)?;
    store.tenant(&at_limit)?.events().append(Stream::custom("s"), "t", json!(1))?;
    Ok(())
}

#[test]
fn empty_ids_and_control_characters_are_invalid() -> spindle::Result<()> {
    let store = common::new_store();
    for bad in ["", "tab\there", "new\nline", "nul\0", "del\u{7f}"] {
        let s = Stream::custom(bad);
        assert!(matches!(store.events().append(&s, "t", json!(1)), Err(Error::InvalidInput(_))));
        let typed = store.events().append(Stream::custom("ok"), bad, json!(1));
        assert!(matches!(typed, Err(Error::InvalidInput(_))), "event type {bad:?}");
        assert!(matches!(store.tenant(bad), Err(Error::InvalidInput(_))), "tenant {bad:?}");
        assert!(matches!(store.events().head(&s), Err(Error::InvalidInput(_))));
    }
    nothing_written(&store);
    Ok(())
}

#[test]
fn payloads_at_one_mebibyte_pass_and_one_byte_more_fails() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::custom("p");
    // A JSON string encodes as its characters plus two quotes.
    let over = json!("z".repeat(MIB - 1));
    assert!(is_too_large(&store.events().append(&s, "t", over), MIB as u64, MIB as u64 + 1));
    nothing_written(&store);
    let at = json!("z".repeat(MIB - 2));
    assert_eq!(store.events().append(&s, "t", at)?.seq, 1);
    Ok(())
}

#[test]
fn pages_of_1000_pass_and_1001_fail() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::custom("pages");
    common::append_n(&store, &s, 1001);
    assert_eq!(store.events().read(&s, 0, 1000)?.len(), 1000);
    assert_eq!(store.events().read_all(0, 1000)?.len(), 1000);
    assert!(is_too_large(&store.events().read(&s, 0, 1001), 1000, 1001));
    assert!(is_too_large(&store.events().read_all(0, 1001), 1000, 1001));
    Ok(())
}

#[test]
fn subscriber_buffers_up_to_the_limit() -> spindle::Result<()> {
    let store = common::new_store();
    let s = Stream::custom("b");
    assert!(store.subscribe_with_buffer(&s, 0, 1024).is_ok());
    assert!(is_too_large(&store.subscribe_with_buffer(&s, 0, 1025).map(|_| ()), 1024, 1025));
    assert!(matches!(store.subscribe_with_buffer(&s, 0, 0), Err(Error::InvalidInput(_))));
    Ok(())
}

#[test]
fn configured_limits_are_enforced_and_bad_options_refused() -> spindle::Result<()> {
    let limits = Limits::default().id_len_max(64).payload_bytes_max(10);
    let store = common::new_store_with(Options::default().limits(limits));
    let long = Stream::custom("s".repeat(65));
    assert!(is_too_large(&store.events().append(long, "t", json!(1)), 64, 65));
    assert!(is_too_large(
        &store.events().append(Stream::custom("s"), "t", json!("123456789")),
        10,
        11
    ));
    nothing_written(&store);

    for bad in [
        Options::default().batch_max(0),
        Options::default().mailbox_capacity(0),
        Options::default().busy_timeout(std::time::Duration::MAX),
        Options::default().limits(Limits::default().page_size_max(0)),
        Options::default().limits(Limits::default().id_len_max(63)),
        Options::default().limits(Limits::default().json_depth_max(101)),
    ] {
        assert!(matches!(Store::open_in_memory_with(bad), Err(Error::InvalidInput(_))));
    }
    Ok(())
}

#[test]
fn open_subscriptions_are_capped_and_freed_on_drop() -> spindle::Result<()> {
    let limits = Limits::default().subscriptions_max(2);
    let store = common::new_store_with(Options::default().limits(limits));
    let s = Stream::custom("s");
    let first = store.subscribe(&s, 0)?;
    let _second = store.subscribe_all(0)?;
    assert!(is_too_large(&store.subscribe(&s, 0).map(|_| ()), 2, 3));
    drop(first);
    assert!(store.subscribe(&s, 0).is_ok());
    Ok(())
}

/// A value nested `depth` levels deep, built without recursion.
fn nested_value(depth: usize) -> serde_json::Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = serde_json::Value::Array(vec![value]); // not json!: it would serialise value
    }
    value
}

#[test]
fn values_nested_past_any_stack_are_refused_before_they_reach_the_store() -> spindle::Result<()> {
    // Serialising (on the store's thread) or dropping a value this deep would overflow a stack:
    // the refusal happens on the caller's thread and the refused op is not dropped.
    let depth = 300_000;
    let store = common::new_store();
    let deep_error = |result: spindle::Result<()>| matches!(result, Err(Error::TooLarge { actual, .. }) if actual as usize >= depth);
    let appended = store.events().append(Stream::custom("s"), "t", nested_value(depth));
    assert!(deep_error(appended.map(|_| ())));
    let item = spindle::NewItem::new("q", nested_value(depth));
    assert!(deep_error(store.queue().enqueue(item).map(|_| ())));
    store.workflows().put_definition("w", "v1", json!({}))?;
    let created = store.workflows().create_execution("w", "v1", nested_value(depth));
    assert!(deep_error(created.map(|_| ())));
    let mut selector = spindle::process::Selector::Payload;
    for _ in 0..depth {
        let fields = [("x".to_owned(), selector)].into();
        selector = spindle::process::Selector::Template { template: "{x}".into(), fields };
    }
    let wake = spindle::process::WakeSpec::new(selector);
    let registration = spindle::Registration::new("p", "tool", json!({}))
        .event_type(spindle::EventType::new("e").wake(wake));
    assert!(deep_error(store.processes().register(registration).map(|_| ())));
    let in_tx = store.transaction(move |tx| {
        tx.exec(spindle::log::Append {
            stream: Stream::custom("s"),
            event_type: "t".into(),
            payload: nested_value(depth),
            idem_key: None,
        })?;
        Ok(spindle::TxOutcome::Commit(()))
    });
    assert!(deep_error(in_tx), "refused on the store's thread too, without overflowing it");
    assert_eq!(store.events().head(Stream::custom("s"))?, 0, "nothing written");
    // A shallow refusal beside a deep value still names the deep one (so the op is not dropped).
    let beside =
        spindle::Registration::new("p", "tool", nested_value(depth)).definition(nested_value(65));
    assert!(deep_error(store.processes().register(beside).map(|_| ())));
    let items = vec![
        spindle::NewItem::new("q", nested_value(65)),
        spindle::NewItem::new("q", nested_value(depth)),
    ];
    assert!(deep_error(store.queue().enqueue_batch(items).map(|_| ())));
    let filter = spindle::ListFilter::default().definition(nested_value(depth));
    let listed = store.processes().list(&filter);
    assert!(deep_error(listed.map(|_| ())), "a read refuses it too");
    std::mem::forget(filter); // the caller's own value: dropping it would recurse as deep
    store.events().append(Stream::custom("s"), "t", nested_value(64))?;
    let past = store.events().append(Stream::custom("s"), "t", nested_value(65));
    assert!(matches!(past, Err(Error::TooLarge { limit: 64, actual: 65, .. })), "{past:?}");
    Ok(())
}

/// The depth limit is for what callers store; the queue's own item events (`{"items": [{..}]}`,
/// three deep) are written whatever it is, so the job cycle runs under the tightest one.
#[test]
fn the_queues_own_events_pass_under_the_tightest_depth_limit() -> spindle::Result<()> {
    let limits = Limits::default().json_depth_max(1);
    let store = common::new_store_with(Options::default().limits(limits));
    let queue = store.queue();
    assert!(matches!(
        queue.enqueue(spindle::NewItem::new("q", json!([[1]]))),
        Err(Error::TooLarge { .. })
    ));
    nothing_written(&store);
    queue.enqueue(spindle::NewItem::new("q", json!(1)))?;
    let claimed = queue.claim("w", &["q"], 10_000)?.expect("claimed");
    queue.complete(&claimed.item.id, claimed.fence, json!(null))?;
    let kinds: Vec<String> = store
        .events()
        .read(Stream::queue("q"), 0, 10)?
        .into_iter()
        .map(|event| event.event_type)
        .collect();
    assert_eq!(kinds, ["enqueued", "claimed", "completed"]);
    Ok(())
}
