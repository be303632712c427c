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
