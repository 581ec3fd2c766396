//! Each mapping's source, built from its spec and the process's settings,
//! and which mappings need the process's API client.

use std::sync::Arc;

use crate::config::{Config, Mapping, Source};
use crate::events::CsrRef;
use crate::metrics::Metrics;
use crate::source::ca::{CaSource, CaSpec};
use crate::source::csr::{CsrSource, CsrSpec};
use crate::source::hostdir::HostDir;
use crate::source::secret::{KubeObject, ObjectRef};
use crate::source::trust_bundle::{Selection, TrustBundles};

/// The directory source of a mapping.
pub(super) fn host_dir(m: &Mapping, dir: &std::path::Path) -> HostDir {
    HostDir {
        dir: dir.to_owned(),
        layout: m.layout.clone(),
        items: m.items.clone(),
    }
}

/// The API-server source of a mapping.
pub(super) fn kube_object(m: &Mapping, object: &ObjectRef, metrics: &Arc<Metrics>) -> KubeObject {
    KubeObject {
        object: object.clone(),
        items: m.items.clone(),
        all: m.layout == crate::bundle::Layout::All,
        optional: m.optional,
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        uid: Arc::default(),
    }
}

/// A source failure as (metric reason, message).
pub(super) type Failure = (&'static str, String);

pub(super) fn failure(e: &crate::source::SourceError) -> Failure {
    (e.reason(), e.to_string())
}

/// The ClusterTrustBundle source of a mapping.
pub(super) fn trust_bundles(
    m: &Mapping,
    selection: &Selection,
    metrics: &Arc<Metrics>,
) -> TrustBundles {
    TrustBundles {
        selection: selection.clone(),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
    }
}

/// Whether `run` needs the process's API client: a mapping's source uses
/// it, or Events go on the Pod (`ca:`, `dir:` with `--events`).
pub(super) fn needs_client(config: &Config) -> bool {
    config.events_pod.is_some()
        || config
            .mappings
            .iter()
            .any(|m| needs_process_client(&m.source))
}

/// Whether a source uses the process's API client (`--kubeconfig` or the
/// pod's): a `csr:` mapping with a bootstrap kubeconfig makes its own.
pub(super) fn needs_process_client(source: &Source) -> bool {
    match source {
        Source::Dir(_) | Source::Ca(_) => false,
        Source::Kube(_) | Source::TrustBundle(_) => true,
        Source::Csr(spec) => spec.bootstrap.is_none(),
    }
}

/// The CSR source of a mapping.
pub(super) fn csr_source(
    m: &Mapping,
    spec: &CsrSpec,
    metrics: &Arc<Metrics>,
    config: &Config,
) -> CsrSource {
    CsrSource {
        spec: Arc::new(spec.clone()),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        clock_skew: config.clock_skew,
        target: m.target.clone(),
        settings: config.client.clone(),
        current: CsrRef::default(),
        events: None,
        renew_floor: config.csr_renew_floor,
    }
}

/// The local-CA source of a mapping.
pub(super) fn ca_source(
    m: &Mapping,
    spec: &CaSpec,
    metrics: &Arc<Metrics>,
    config: &Config,
) -> CaSource {
    CaSource {
        spec: Arc::new(spec.clone()),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        clock_skew: config.clock_skew,
        renew_floor: config.csr_renew_floor,
        recheck: config.resync,
        events: None,
        template_due: Arc::default(),
        template_is_copy: m.update_pair.as_ref().is_some_and(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            spec.template.as_ref() == Some(&p.with_file_name(format!("{name}.crt")))
        }),
    }
}
