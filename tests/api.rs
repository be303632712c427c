//! The shape of the public API: what must be `Send`, `Sync` and `Clone` for the handle to be
//! shared across threads, checked at compile time.

mod common;

use spindle::{Error, Event, ManualClock, Options, Store, Stream, Subscription};

fn clone_send_sync<T: Clone + Send + Sync + 'static>() {}
fn send<T: Send + 'static>() {}

#[test]
fn handles_and_values_cross_threads() {
    clone_send_sync::<Store>();
    clone_send_sync::<Options>();
    clone_send_sync::<ManualClock>();
    clone_send_sync::<Stream>();
    clone_send_sync::<Event>();
    send::<Subscription>();
    send::<Error>();
    // A subscription moves to the thread that follows it.
    let store = common::new_store();
    let mut follower = store.subscribe(Stream::custom("s"), 0).expect("subscribe");
    let handle = std::thread::spawn(move || follower.recv().map(|event| event.seq));
    store.events().append(Stream::custom("s"), "e", serde_json::json!(1)).expect("append");
    assert_eq!(handle.join().expect("thread").expect("event"), 1);
}
