//! What the checks answer, what they judge by and what they found.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use super::index::Listed;
use super::ranges::{Cidr, Reserved};

/// The signer this policy is for.
pub const SIGNER: &str = crate::source::csr::KUBELET_SERVING;
pub const NODE_PREFIX: &str = "system:node:";
pub(super) const NODES_GROUP: &str = "system:nodes";

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    /// A check definitely failed.
    Deny {
        check: Check,
        message: String,
    },
    /// Not decidable yet.
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

/// The operator's bounds: `approve`'s and `csr review`'s flags, the
/// longest `expirationSeconds` approved among them (read with the other
/// flags' duration bounds, so set by the command line).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Policy {
    /// The node networks: an IP SAN is approved only inside one of these
    /// ranges (and only if the node's Node lists it); repeatable, e.g.
    /// `--node-cidr 192.168.10.0/24 --node-cidr fd00:10::/64`. Required
    /// unless --allow-any-node-address.
    #[arg(
        long = "node-cidr",
        env = "CERTSYNC_NODE_CIDR",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub node_cidrs: Vec<Cidr>,
    /// Declare no node network: approve any IP address a node's Node lists
    /// (never reserved ones, never another node's). A node writes its own
    /// Node status, so this lets a compromised node get a certificate for
    /// any free address in the cluster's networks.
    #[arg(
        long = "allow-any-node-address",
        env = "CERTSYNC_ALLOW_ANY_NODE_ADDRESS"
    )]
    pub any_node_address: bool,
    /// DNS SANs beyond the node's own name must match one of these
    /// patterns (a name, or `*.SUFFIX` for names under SUFFIX) and be
    /// listed by the node's Node; repeatable. A requested wildcard, a
    /// Service name or another node's name is denied whatever the pattern.
    // A pattern never widens what is reserved or another node's.
    #[arg(
        long = "allowed-dns",
        env = "CERTSYNC_ALLOWED_DNS",
        value_delimiter = ',',
        value_name = "PATTERN"
    )]
    pub allowed_dns: Vec<String>,
    /// A Service range to refuse besides those the cluster reports
    /// (ServiceCIDR objects, the `kubernetes` Service's IP); for clusters
    /// without the networking.k8s.io/v1 ServiceCIDR API; repeatable.
    #[arg(
        long = "service-cidr",
        env = "CERTSYNC_SERVICE_CIDR",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub service_cidrs: Vec<Cidr>,
    /// An IP address, CIDR or DNS name that is never a node's, besides
    /// what the approver reads from the cluster: a load balancer or VIP in
    /// front of the API server that its EndpointSlices, `cluster-info` and
    /// `kubeadm-config` do not name; repeatable.
    #[arg(
        long = "reserved",
        env = "CERTSYNC_RESERVED",
        value_delimiter = ',',
        value_name = "IP|CIDR|NAME"
    )]
    pub reserved: Vec<Reserved>,
    #[arg(skip)]
    pub max_expiration: Option<Duration>,
}

/// Names and addresses that belong to the cluster, as read from it
/// ([`crate::approve::cluster::read`]): never a node's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    /// Service ranges and where they were read.
    pub ranges: Vec<(Cidr, String)>,
    /// Single addresses (the `kubernetes` Service's IPs, the API server's
    /// endpoints, its control-plane endpoint) and what they are.
    pub addresses: Vec<(IpAddr, String)>,
    /// Addresses Services are reached at from outside (external IPs, load
    /// balancer addresses) and which Service: never a node's, but in
    /// dispute when the requester lists it (k3s ServiceLB and kube-vip
    /// publish node IPs; any namespace user can name one).
    pub services: Vec<(IpAddr, String)>,
    /// Lower-case DNS names the API server is reached by, and what they are.
    pub names: Vec<(String, String)>,
    /// Lower-case names Services stand for that any namespace user writes
    /// (an ExternalName Service's `spec.externalName`), and which Service:
    /// in dispute, as [`Self::services`], when the requester lists it or
    /// is named so.
    pub service_names: Vec<(String, String)>,
}

/// What a CSR asks for, read once. Strings come from the requester: escape
/// them before they are shown.
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
    /// What is known of `csr` before its request is read.
    pub fn unread(csr: &CertificateSigningRequest) -> Self {
        Self {
            usages: csr.spec.usages.clone().unwrap_or_default(),
            key: "unknown".into(),
            ..Self::default()
        }
    }
}

pub(super) fn deny(check: Check, message: impl Into<String>) -> Verdict {
    Verdict::Deny {
        check,
        message: message.into(),
    }
}

pub(super) fn wait(check: Check, message: impl Into<String>) -> Verdict {
    Verdict::Wait {
        check,
        message: message.into(),
    }
}

/// The largest `spec.request` read: a kubelet's PEM request is about 1 KB
/// (a handful of SANs), so 64 KiB leaves room for any real one and keeps
/// a hostile one from costing more than a few milliseconds to parse.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The requester as checks 8 to 12 see it (`own`: what its Node lists).
pub(super) struct Asker<'a> {
    pub(super) name: &'a str,
    pub(super) lower: String,
    pub(super) own: Option<&'a Listed>,
}

impl Asker<'_> {
    pub(super) fn lists_ip(&self, ip: &IpAddr) -> bool {
        self.own.is_some_and(|l| l.ips.contains(ip))
    }

    pub(super) fn lists_dns(&self, d: &str) -> bool {
        self.own.is_some_and(|l| l.dns.contains(d))
    }

    /// Its own name, or one its Node lists.
    pub(super) fn claims(&self, d: &str) -> bool {
        d == self.lower || self.lists_dns(d)
    }
}
