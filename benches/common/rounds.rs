//! What the benches that run the pool's round op (`Cycle`) share: the settlements that
//! complete every item a round claimed, for the next round to send.

use serde_json::json;
use spindle::queue::{Claimed, Completion, Settlement};

/// A completion (result `null`) of each of the items `claimed` holds.
pub fn completions(claimed: Vec<Claimed>) -> Vec<Settlement> {
    claimed
        .into_iter()
        .map(|c| {
            let (id, fence) = (c.item.id, c.fence);
            Settlement::Complete(Completion { id, fence, result: json!(null) })
        })
        .collect()
}
