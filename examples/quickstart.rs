//! Quickstart: open a store file, write in a transaction, and follow a stream.
//!
//! Run with `cargo run --release --example quickstart` (the store is `spindle-quickstart.db` in
//! the current directory; run it twice and the stream goes on where it stopped).

use std::time::Duration;

use serde_json::json;
use spindle::{Store, Stream, TxOutcome};

fn main() -> spindle::Result<()> {
    let store = Store::open("spindle-quickstart.db")?;
    let orders = Stream::custom("orders");
    let start = store.events().head(&orders)?;

    // Follow the stream from where it stands now, on another thread.
    let mut follower = store.subscribe(&orders, start)?;
    let printer = std::thread::spawn(move || {
        for _ in 0..3 {
            match follower.recv_timeout(Duration::from_secs(5)) {
                Ok(Some(event)) => {
                    println!("seen  #{} {} {}", event.seq, event.event_type, event.payload)
                }
                other => return eprintln!("follower stopped: {other:?}"),
            }
        }
    });

    // Three events in one transaction: all of them commit, or none does.
    let order_id = start / 3 + 1;
    let stream = orders.clone();
    let last_seq = store.transaction(move |tx| {
        tx.append_event(&stream, "placed", json!({ "order": order_id, "items": 2 }))?;
        tx.append_event(&stream, "paid", json!({ "order": order_id, "cents": 4_200 }))?;
        let shipped = tx.append_event(&stream, "shipped", json!({ "order": order_id }))?;
        Ok(TxOutcome::Commit(shipped.seq))
    })?;
    println!("wrote order {order_id}; the stream's head is now {last_seq}");

    // Idempotent appends: the second one finds the first and writes nothing.
    let key = format!("invoice-{order_id}");
    let first = store.events().append_idempotent(
        Stream::custom("invoices"),
        "issued",
        json!({ "order": order_id }),
        &key,
    )?;
    let again = store.events().append_idempotent(
        Stream::custom("invoices"),
        "issued",
        json!({ "order": order_id }),
        &key,
    )?;
    println!("invoice event #{} (written again? {})", first.seq, !again.existed);

    let _ = printer.join();
    store.close()
}
