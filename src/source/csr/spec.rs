//! What a `csr:` mapping asks for, a validity `Window`, the `CsrSource`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::events::{CsrRef, EventSink};
use crate::metrics::Metrics;
use crate::source::client::ClientSettings;
use crate::x509::KeyAlg;

/// Where the signer's CA certificates come from (checked against, and
/// published as `ca.crt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    File(PathBuf),
    ConfigMap {
        namespace: String,
        name: String,
        key: String,
    },
    /// Every ClusterTrustBundle of a signer, in name order, as kubelet's
    /// projected volumes select them.
    TrustBundles {
        signer: String,
    },
}

impl std::fmt::Display for CaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => write!(f, "file {}", p.display()),
            Self::ConfigMap {
                namespace,
                name,
                key,
            } => write!(f, "configmap {namespace}/{name} key {key}"),
            Self::TrustBundles { signer } => write!(f, "clustertrustbundles of signer {signer}"),
        }
    }
}

/// What a `csr:` mapping asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrSpec {
    pub signer: String,
    pub common_name: Option<String>,
    pub organizations: Vec<String>,
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub key_alg: KeyAlg,
    /// `spec.expirationSeconds`; the signer's default when `None`.
    pub lifetime: Option<Duration>,
    pub usages: Vec<String>,
    pub ca: Option<CaSource>,
    /// Renewal point, as shares of the lifetime drawn uniformly from
    /// `[renew.0, renew.1]` (kubelet: 0.7 to 0.9).
    pub renew: (f64, f64),
    pub approval_timeout: Duration,
    /// Requests authenticate with this kubeconfig (a bootstrap token) until
    /// the mapping holds a valid pair, then with that pair.
    pub bootstrap: Option<PathBuf>,
    /// A kubeconfig written into the target beside the pair, pointing at it.
    pub write_kubeconfig: Option<String>,
}

// `renew` holds finite shares only (the config parser refuses anything
// else), so equality is an equivalence.
impl Eq for CsrSpec {}

/// A certificate's validity window, seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub not_before: i64,
    pub not_after: i64,
}

impl Window {
    /// When to renew: `not_before` plus a share of the lifetime drawn
    /// uniformly from `[lo, hi]` (kubelet's `nextRotationDeadline`).
    pub fn deadline(&self, (lo, hi): (f64, f64), draw: f64) -> SystemTime {
        let life = (self.not_after - self.not_before).max(0) as f64;
        let at = self.not_before as f64 + life * (lo + (hi - lo) * draw);
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0))
    }
}

/// A mapping's CSR source.
#[derive(Clone)]
pub struct CsrSource {
    pub spec: Arc<CsrSpec>,
    pub mapping: String,
    pub metrics: Arc<Metrics>,
    pub clock_skew: Duration,
    /// Where the live pair is, for self-renewal.
    pub target: PathBuf,
    pub settings: ClientSettings,
    /// The newest request (name, uid), for Events about it.
    pub current: CsrRef,
    pub events: Option<EventSink>,
    /// `--csr-renew-floor` ([`renewal::floor`](super::renewal::floor)).
    pub renew_floor: Duration,
}
