//! `--events` for mappings with no Kubernetes object of their own (`ca:`,
//! `dir:`, `clustertrustbundle:`): their Events go on the Pod certsync runs
//! in, named by the downward API (`POD_NAME`, `POD_NAMESPACE`).
//!
//! A `ca:` mapping needs both, or is refused at start (its issuances are
//! otherwise recorded nowhere); the others take the Pod only when both are
//! set, so a deployment that sets only POD_NAME keeps starting. Names set
//! but not valid are refused either way: they go into API paths.

use super::error::ConfigError;
use super::mapping::{EventsOn, Mapping};
use crate::events::PodRef;

/// The Pod that `ca:` and `dir:` mappings' Events go on, if any.
pub(super) fn events_pod(
    events: bool,
    once: bool,
    mappings: &[Mapping],
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<PodRef>, ConfigError> {
    // `--once` records no Events for any mapping.
    if !events || once {
        return Ok(None);
    }
    let ca = mappings
        .iter()
        .find(|m| m.source.events_on() == EventsOn::PodRequired);
    let dir = mappings
        .iter()
        .any(|m| m.source.events_on() == EventsOn::Pod);
    if ca.is_none() && !dir {
        return Ok(None);
    }
    let read = |var: &str| env(var).map(|v| v.trim().to_owned());
    let (name, namespace) = (read("POD_NAME"), read("POD_NAMESPACE"));
    match (name, namespace) {
        (Some(name), Some(namespace)) if !name.is_empty() && !namespace.is_empty() => {
            super::mapping::api_name("--events: POD_NAME", "name", &name)?;
            super::mapping::api_name("--events: POD_NAMESPACE", "namespace", &namespace)?;
            Ok(Some(PodRef { namespace, name }))
        }
        // Only dir: mappings: no Events for them (said at start).
        _ if ca.is_none() => Ok(None),
        _ => {
            let mapping = ca.map_or_else(String::new, |m| m.name.clone());
            Err(ConfigError::EventsNoPod { mapping })
        }
    }
}
