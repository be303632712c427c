//! Model-based test of the event log: random sequences of appends (plain and idempotent),
//! truncations and reads over a few streams and two tenants, run against the store and a plain
//! in-memory model; every answer must agree. Seeds are printed in every failure message.

mod common;

use std::collections::BTreeMap;

use common::Dice;
use serde_json::{Value, json};
use spindle::{Error, Store, Stream};

/// One stream as the model sees it.
#[derive(Default)]
struct ModelStream {
    head: u64,
    events: BTreeMap<u64, (String, Value)>,
    keys: BTreeMap<String, (u64, String, Value)>,
}

type Key = (&'static str, u8);

fn run(seed: u64, steps: usize) {
    let store = Store::open_in_memory().expect("open");
    let views = [("default", store.clone()), ("other", store.tenant("other").expect("tenant"))];
    let mut dice = Dice(seed | 1);
    let mut model: BTreeMap<Key, ModelStream> = BTreeMap::new();
    for step in 0..steps {
        let context = format!("seed {seed}, step {step}");
        let (tenant, view) = &views[dice.below(2) as usize];
        let stream_no = dice.below(3) as u8;
        let stream = Stream::custom(format!("s{stream_no}"));
        let entry = model.entry((tenant, stream_no)).or_default();
        match dice.below(6) {
            0 | 1 => {
                let payload = json!({ "v": dice.below(3) });
                let appended =
                    view.events().append(&stream, "plain", payload.clone()).expect("append");
                entry.head += 1;
                assert_eq!(appended.seq, entry.head, "append at {context}");
                entry.events.insert(entry.head, ("plain".into(), payload));
            }
            2 | 3 => {
                let key = format!("k{}", dice.below(4));
                let event_type = ["a", "b"][dice.below(2) as usize];
                let payload = json!({ "v": dice.below(2) });
                let result =
                    view.events().append_idempotent(&stream, event_type, payload.clone(), &key);
                match entry.keys.get(&key) {
                    Some((seq, t, p)) if t == event_type && *p == payload => {
                        let appended = result.expect("replay");
                        assert!(appended.existed, "replay at {context}");
                        assert_eq!(appended.seq, *seq, "replay seq at {context}");
                    }
                    Some(_) => {
                        assert!(matches!(result, Err(Error::Conflict(_))), "conflict at {context}")
                    }
                    None => {
                        let appended = result.expect("first keyed append");
                        entry.head += 1;
                        assert_eq!(
                            (appended.seq, appended.existed),
                            (entry.head, false),
                            "at {context}"
                        );
                        entry.events.insert(entry.head, (event_type.into(), payload.clone()));
                        entry.keys.insert(key, (entry.head, event_type.into(), payload));
                    }
                }
            }
            4 => {
                let before = dice.below(entry.head + 2);
                let deleted = view.events().truncate(&stream, before).expect("truncate");
                let expected: Vec<u64> =
                    entry.events.range(..before).map(|(seq, _)| *seq).collect();
                assert_eq!(deleted, expected.len() as u64, "truncate at {context}");
                for seq in expected {
                    entry.events.remove(&seq);
                }
            }
            _ => {
                let after = dice.below(entry.head + 1);
                let read = view.events().read(&stream, after, 1000).expect("read");
                let got: Vec<(u64, String, Value)> =
                    read.into_iter().map(|e| (e.seq, e.event_type, e.payload)).collect();
                let expected: Vec<(u64, String, Value)> = entry
                    .events
                    .range(after + 1..)
                    .map(|(seq, (t, p))| (*seq, t.clone(), p.clone()))
                    .collect();
                assert_eq!(got, expected, "read at {context}");
                assert_eq!(
                    view.events().head(&stream).expect("head"),
                    entry.head,
                    "head at {context}"
                );
            }
        }
    }
}

#[test]
fn random_event_log_sequences_agree_with_the_model() {
    for seed in 1..=200_u64 {
        run(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 80);
    }
}
