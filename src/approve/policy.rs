//! The kubelet-serving policy: a pure function from a CSR, the Nodes, the
//! cluster's own names and addresses and the operator's flags to a
//! verdict. No I/O, no clock.
//!
//! Approve only when every check holds; deny when one definitely fails,
//! naming it; wait when the answer depends on a Node that is not there
//! yet, or on a name or address nothing can prove (a person decides with
//! `csr review`). Data a node writes itself (its Node's
//! `status.addresses`) is necessary, never sufficient: every name and
//! address must also lie inside what the operator declared, and nothing
//! that belongs to the cluster or to another node is ever a node's. The
//! checks, in the order they are made (each where it is made):
//!
//! 1. `requester`: `system:node:NAME` in group `system:nodes` (set by the
//!    API server from how the kubelet authenticated, never by the kubelet);
//! 2. `request` / `sans`: `spec.request` read strictly ([`crate::x509`]:
//!    one PEM block, strict DER, known extensions once each, only DNS and
//!    IP SANs and at least one, two parsers agreeing);
//! 3. `key`: RSA ≥ 2048 bits, ECDSA P-256 or P-384, or Ed25519;
//! 4. `signature`: its signature verifies with its own public key;
//! 5. `subject`: exactly `CN=system:node:NAME`, `O=system:nodes`;
//! 6. `usages`: digital signature and server auth (key encipherment for
//!    RSA), in `spec.usages` and in the request itself; never a CA;
//! 7. `expiration`: `expirationSeconds` within the maximum;
//! 8. `dns-san` / `ip-san`, denied: a name or address of the cluster's
//!    own ([`reserved`]);
//! 9. `dns-san` / `ip-san`, denied: another Node's name, or a name or
//!    address another Node lists (in dispute, a wait, when the requester
//!    lists it too);
//! 10. `ip-san`, denied: an address outside every `--node-cidr`;
//! 11. `node`: wait while Node NAME does not exist or lists no addresses;
//! 12. `ip-san` / `dns-san`, else wait: every IP one Node NAME lists;
//!     every DNS name NAME itself, or one Node NAME lists that matches an
//!     `--allowed-dns` pattern.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;

/// The signer this policy is for.
pub const SIGNER: &str = crate::source::csr::KUBELET_SERVING;
pub const NODE_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";

/// A check, as named in logs, conditions, Events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Check {
    Requester,
    Request,
    Signature,
    Subject,
    Usages,
    Sans,
    Key,
    Expiration,
    Node,
    IpSan,
    DnsSan,
    /// The requester has more pending CSRs than any kubelet ever has.
    Pending,
}

impl Check {
    /// Metric label and the reason of a `Denied` condition's check.
    pub fn label(self) -> &'static str {
        match self {
            Self::Requester => "requester",
            Self::Request => "request",
            Self::Signature => "signature",
            Self::Subject => "subject",
            Self::Usages => "usages",
            Self::Sans => "sans",
            Self::Key => "key",
            Self::Expiration => "expiration",
            Self::Node => "node",
            Self::IpSan => "ip-san",
            Self::DnsSan => "dns-san",
            Self::Pending => "too-many-pending",
        }
    }
}

/// What to do with a pending CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    /// A check definitely failed.
    Deny {
        check: Check,
        message: String,
    },
    /// Not decidable yet; re-evaluated when a Node changes.
    Wait {
        check: Check,
        message: String,
    },
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Deny { .. } => "deny",
            Self::Wait { .. } => "wait",
        }
    }

    /// The failed check (`None` when approved).
    pub fn check(&self) -> Option<Check> {
        match self {
            Self::Approve => None,
            Self::Deny { check, .. } | Self::Wait { check, .. } => Some(*check),
        }
    }

    /// One line for humans: `approve`, `deny (usages): ...`.
    pub fn describe(&self) -> String {
        match self {
            Self::Approve => "approve".into(),
            Self::Deny { check, message } | Self::Wait { check, message } => {
                format!("{} ({}): {message}", self.label(), check.label())
            }
        }
    }
}

/// The operator's bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Patterns a DNS name beyond the node's own name must match (besides
    /// being listed by its Node): exact names, or `*.SUFFIX` for names
    /// under SUFFIX. Never widens what is reserved or another node's.
    pub allowed_dns: Vec<String>,
    /// The node networks: every IP SAN must lie inside one.
    pub node_cidrs: Vec<Cidr>,
    /// No node network declared, knowingly: any address a Node lists
    /// (and nothing reserved nor another node's) is accepted.
    pub any_node_address: bool,
    /// Service ranges the operator names (`--service-cidr`), for clusters
    /// without the ServiceCIDR API.
    pub service_cidrs: Vec<Cidr>,
    /// Other names and addresses that are never a node's (`--reserved`):
    /// a load balancer in front of the API server, an external name.
    pub reserved: Vec<Reserved>,
    /// The longest `expirationSeconds` approved.
    pub max_expiration: Option<Duration>,
}

/// Names and addresses that belong to the cluster, as read from it: never
/// a node's. Built by the controller ([`super::cluster::read`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    /// Service ranges and where they were read (`ServiceCIDR kubernetes`).
    pub ranges: Vec<(Cidr, String)>,
    /// Single addresses (the `kubernetes` Service's IPs, the API server's
    /// endpoints, its control-plane endpoint) and what they are.
    pub addresses: Vec<(IpAddr, String)>,
    /// Addresses Services are reached at from outside (external IPs, load
    /// balancer addresses) and which Service: never a node's, but in
    /// dispute when the requester lists it (k3s ServiceLB and kube-vip
    /// publish node IPs; any namespace user can name one).
    pub services: Vec<(IpAddr, String)>,
    /// Lower-case DNS names the API server is reached by (the
    /// control-plane endpoint, its certificate's extra names), and what
    /// they are.
    pub names: Vec<(String, String)>,
    /// Lower-case names Services stand for that any namespace user writes
    /// (an ExternalName Service's `spec.externalName`), and which Service:
    /// in dispute, as [`Self::services`], when the requester lists it or
    /// is named so.
    pub service_names: Vec<(String, String)>,
}

/// What a CSR asks for, read once (for the verdict and for `csr review`).
/// Strings come from the requester: escape them before they are shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// NAME of a `system:node:NAME` requester.
    pub node: Option<String>,
    /// Lower-case; empty when the request could not be read strictly.
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// e.g. `ecdsa-p256`, `rsa-1024`, `unknown`.
    pub key: String,
    pub usages: Vec<String>,
}

impl Facts {
    /// What is known of `csr` before its request is read: its usages, and
    /// the key unknown.
    pub fn unread(csr: &CertificateSigningRequest) -> Self {
        Self {
            usages: csr.spec.usages.clone().unwrap_or_default(),
            key: "unknown".into(),
            ..Self::default()
        }
    }
}

fn deny(check: Check, message: impl Into<String>) -> Verdict {
    Verdict::Deny {
        check,
        message: message.into(),
    }
}

fn wait(check: Check, message: impl Into<String>) -> Verdict {
    Verdict::Wait {
        check,
        message: message.into(),
    }
}

/// The largest `spec.request` read: a kubelet's PEM request is about 1 KB
/// (a handful of SANs), so 64 KiB leaves room for any real one and keeps
/// a hostile one from costing more than a few milliseconds to parse.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A denial for a requester's CSR beyond the oldest `cap` it has pending:
/// refused unread, so that one identity's flood costs no parsing.
pub fn too_many_pending(requester: &str, pending: usize, cap: usize) -> Verdict {
    deny(
        Check::Pending,
        format!(
            "{requester:?} has {pending} pending CSRs for this signer; only its oldest {cap} are \
             looked at (a kubelet has one or two)"
        ),
    )
}

/// The verdict on `csr`, given every Node by name and the cluster's own
/// names and addresses.
pub fn decide(
    csr: &CertificateSigningRequest,
    nodes: &BTreeMap<String, Node>,
    cluster: &Cluster,
    policy: &Policy,
) -> (Verdict, Facts) {
    decide_with(csr, &Nodes::new(nodes), cluster, policy)
}

/// [`decide`] with the Nodes indexed once ([`Nodes::new`]) for many
/// requests.
pub fn decide_with(
    csr: &CertificateSigningRequest,
    nodes: &Nodes,
    cluster: &Cluster,
    policy: &Policy,
) -> (Verdict, Facts) {
    let mut facts = Facts::unread(csr);
    let verdict = checks(csr, nodes, cluster, policy, &mut facts).err();
    (verdict.unwrap_or(Verdict::Approve), facts)
}

/// The requester as checks 8 to 12 see it: its name, lower-case, and what
/// its own Node lists (`None`: no such Node).
struct Asker<'a> {
    name: &'a str,
    lower: String,
    own: Option<&'a Listed>,
}

impl Asker<'_> {
    fn lists_ip(&self, ip: &IpAddr) -> bool {
        self.own.is_some_and(|l| l.ips.contains(ip))
    }

    fn lists_dns(&self, d: &str) -> bool {
        self.own.is_some_and(|l| l.dns.contains(d))
    }

    /// Its own name, or one its Node lists.
    fn claims(&self, d: &str) -> bool {
        d == self.lower || self.lists_dns(d)
    }
}

/// Every check, in the order of the list above: the first that fails is
/// the verdict.
fn checks(
    csr: &CertificateSigningRequest,
    nodes: &Nodes,
    cluster: &Cluster,
    policy: &Policy,
    facts: &mut Facts,
) -> Result<(), Verdict> {
    let name = request::requester(csr, facts)?;
    let req = request::read(csr, facts)?;
    request::key(&req)?;
    request::signature(&req)?;
    request::subject(&req, csr.spec.username.as_deref().unwrap_or_default())?;
    request::usages(&facts.usages, &req)?;
    request::expiration(csr, policy)?;
    let asker = Asker {
        name,
        lower: name.to_ascii_lowercase(),
        own: nodes.listed(name),
    };
    reserved::check(facts, &asker, nodes, cluster, policy)?;
    whose::other_nodes(facts, &asker, nodes)?;
    whose::node_networks(&facts.ips, policy)?;
    let listed = whose::node(&asker)?;
    whose::service_dispute(facts, &asker, listed, cluster)?;
    whose::listed_sans(facts, &asker, listed, policy)
}

mod index;
mod ranges;
mod request;
mod reserved;
mod whose;
pub use index::{Listed, MAX_NODE_ADDRESSES, Nodes, Piece};
pub use ranges::{Cidr, Reserved, canonical, dns_name};

#[cfg(test)]
mod tests;
