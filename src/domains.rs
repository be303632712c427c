//! The one place that names every domain for the engine and the handle: what each needs from
//! them. Adding a domain adds a line here only if the engine must act for it (an alarm, a
//! stream only it may write, work at open); its accessor on `Store` lives in the domain.

use crate::core::actor::EngineHooks;
use crate::store::DomainHooks;
use crate::{graph, process, workflow};

/// The domains' hooks.
pub(crate) static HOOKS: DomainHooks = DomainHooks {
    engine: EngineHooks {
        alarm_job: Some(graph::alarm_job),
        owned_streams: &[process::owns_stream, workflow::owns_stream],
    },
    at_open: &[graph::at_open],
};

#[cfg(test)]
mod tests {
    use crate::Result;
    use crate::core::fresh::tests::KEPT_HERE;

    #[test]
    fn an_inline_store_that_wrote_in_every_domain_leaves_its_connection_as_a_spare() -> Result<()> {
        use serde_json::json;
        let options = crate::Options { inline: true, ..crate::Options::default() };
        let store = crate::Store::open_in_memory_with(options)?;
        let flows = store.workflows();
        flows.put_definition("w", "v1", json!({}))?;
        let execution = flows.create_execution("w", "v1", json!({}))?;
        flows.write_snapshot(&execution.id, 0, json!({}))?;
        let registration = crate::Registration::new("p", "tool", json!({}));
        store.processes().register(registration)?;
        store.processes().append_event("p", crate::AppendRequest::cancel_requested("test"))?;
        store.queue().enqueue(crate::NewItem::new("q", json!({})))?;
        let before = KEPT_HERE.with(std::cell::Cell::get);
        store.close()?;
        assert_eq!(KEPT_HERE.with(std::cell::Cell::get), before + 1, "wiped and kept");
        Ok(())
    }
}
