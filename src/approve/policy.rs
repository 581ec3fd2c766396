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
//! checks, in the order they are made:
//!
//! 1. `requester`: `spec.username` is `system:node:NAME` and `spec.groups`
//!    holds `system:nodes` (set by the API server from how the kubelet
//!    authenticated, never by the kubelet);
//! 2. `request` / `sans`: `spec.request` read strictly ([`crate::x509`]:
//!    one PEM block, strict DER, exactly one extensionRequest, known
//!    extensions once each, only DNS and IP SANs and at least one, two
//!    parsers agreeing);
//! 3. `key`: RSA ≥ 2048 bits, ECDSA P-256 or P-384, or Ed25519;
//! 4. `signature`: its signature verifies with its own public key;
//! 5. `subject`: exactly `CN=system:node:NAME` (the requester's NAME) and
//!    `O=system:nodes`, nothing else;
//! 6. `usages`: `spec.usages` exactly digital signature and server auth,
//!    plus key encipherment only for an RSA key; any key usage, extended
//!    key usage or basic constraints in the request itself within those
//!    (never client auth, never a CA);
//! 7. `expiration`: `expirationSeconds`, when set, within the maximum;
//! 8. `dns-san` / `ip-san`, denied: a name or address of the cluster's
//!    own (`kubernetes[.default[.svc[...]]]`, anything under `.svc`,
//!    `localhost` and the other /etc/hosts loopback names such as
//!    `localhost.localdomain`; an ExternalName Service's name the
//!    requester does not list; a Service range, the `kubernetes` Service's
//!    IP, an API server endpoint; loopback, link-local, multicast,
//!    unspecified, and IPv6 forms of IPv4 addresses other than the
//!    IPv4-mapped one: IPv4-compatible, IPv4-translated, NAT64, 6to4,
//!    Teredo, ISATAP);
//! 9. `dns-san` / `ip-san`, denied: another Node's name, or a name or
//!    address another Node lists, however many it lists (in dispute, a
//!    wait, when the requester lists it too; never the requester's own
//!    name: its credentials prove it);
//! 10. `ip-san`, denied: an address outside every `--node-cidr`;
//! 11. `node`: wait while Node NAME does not exist or lists no addresses;
//! 12. `ip-san` / `dns-san`, else wait: every IP is one Node NAME lists
//!     (compared parsed: `fd00::1` and `fd00:0:0::1` are one); every DNS
//!     name is NAME itself, or one Node NAME lists that also matches an
//!     `--allowed-dns` pattern (case-insensitively).

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;

use crate::source::csr::KeyAlg;
use crate::x509::{COMMON_NAME, ORGANIZATION, Request, RequestError, SERVER_AUTH};

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

/// A name or range that is never a node's, as `--reserved` takes it: an
/// IP address, a CIDR, or a DNS name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    Range(Cidr),
    Name(String),
}

/// A `--reserved` value or CIDR that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("{0:?} is not an IP address, a CIDR or a DNS name")]
    Reserved(String),
    #[error("{0:?} is not a CIDR such as 10.0.0.0/8 or fd00::/64")]
    Cidr(String),
}

impl std::str::FromStr for Reserved {
    type Err = RangeError;
    fn from_str(s: &str) -> Result<Self, RangeError> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            let bits = if ip.is_ipv4() { 32 } else { 128 };
            return format!("{ip}/{bits}").parse().map(Self::Range);
        }
        if s.contains('/') {
            return s.parse().map(Self::Range);
        }
        let name = s.trim_end_matches('.').to_ascii_lowercase();
        let ok = !name.is_empty()
            && name.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if ok {
            Ok(Self::Name(name))
        } else {
            Err(RangeError::Reserved(s.into()))
        }
    }
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
    /// balancer addresses) and which Service: never a node's, except that
    /// a node's own address can be one too (k3s ServiceLB and kube-vip
    /// publish node IPs; any namespace user can name one), so one the
    /// requester itself lists is in dispute, not denied.
    pub services: Vec<(IpAddr, String)>,
    /// Lower-case DNS names the API server is reached by (the
    /// control-plane endpoint, its certificate's extra names), and what
    /// they are.
    pub names: Vec<(String, String)>,
    /// Lower-case names Services stand for that any namespace user writes
    /// (an ExternalName Service's `spec.externalName`), and which Service:
    /// never a node's, except that one the requester lists, or its own
    /// name, is in dispute, as an address in [`Self::services`] is (a
    /// namespace user must not get a node's renewals denied by naming
    /// the node's name in a Service).
    pub service_names: Vec<(String, String)>,
}

/// An IP range `ADDR/BITS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl std::str::FromStr for Cidr {
    type Err = RangeError;
    fn from_str(s: &str) -> Result<Self, RangeError> {
        let bad = || RangeError::Cidr(s.into());
        let (addr, bits) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let bits: u8 = bits.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if bits > max {
            return Err(bad());
        }
        // An IPv4-mapped range (`::ffff:10.0.0.0/104`) is the IPv4 range
        // it maps: addresses are compared in their IPv4 form.
        if let IpAddr::V6(v6) = addr
            && let Some(v4) = v6.to_ipv4_mapped()
            && bits >= 96
        {
            return Ok(Self {
                addr: IpAddr::V4(v4),
                bits: bits - 96,
            });
        }
        Ok(Self { addr, bits })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

impl Cidr {
    /// `0.0.0.0/0` or `::/0`.
    pub fn is_everything(&self) -> bool {
        self.bits == 0
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (a, b, width) = match (self.addr, canonical(ip)) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                (u128::from(u32::from(a)), u128::from(u32::from(b)), 32)
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
            _ => return false,
        };
        let shift = width - u32::from(self.bits);
        shift >= width || (a >> shift) == (b >> shift)
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) as the IPv4 address they
/// are, so one address has one form.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
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

/// The verdict on `csr`, given every Node by name and the cluster's own
/// names and addresses.
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
    let mut facts = Facts {
        usages: csr.spec.usages.clone().unwrap_or_default(),
        key: "unknown".into(),
        ..Facts::default()
    };
    let verdict = check_all(csr, nodes, cluster, policy, &mut facts);
    (verdict, facts)
}

fn check_all(
    csr: &CertificateSigningRequest,
    nodes: &Nodes,
    cluster: &Cluster,
    policy: &Policy,
    facts: &mut Facts,
) -> Verdict {
    // 1. requester, from authentication.
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let Some(name) = username.strip_prefix(NODE_PREFIX).filter(|n| !n.is_empty()) else {
        return deny(
            Check::Requester,
            format!("requested by {username:?}, not a node (system:node:NAME)"),
        );
    };
    facts.node = Some(name.to_owned());
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    if !groups.iter().any(|g| g == NODES_GROUP) {
        return deny(
            Check::Requester,
            format!("requester {username:?} is not in group {NODES_GROUP}"),
        );
    }

    // 2. the request, read strictly, once; one larger than any kubelet's
    // is refused unread (kube-apiserver takes bodies up to ~3 MB).
    let size = csr.spec.request.0.len();
    if size > MAX_REQUEST_BYTES {
        return deny(
            Check::Request,
            format!("request of {size} bytes; at most {MAX_REQUEST_BYTES} read"),
        );
    }
    let req = match Request::read(&csr.spec.request.0) {
        Ok(req) => req,
        Err(e @ RequestError::Sans(_)) => return deny(Check::Sans, e.to_string()),
        Err(e) => return deny(Check::Request, e.to_string()),
    };
    facts.key = req
        .key
        .map_or_else(|| "unknown".to_owned(), |a| a.to_string());
    facts.dns = req.dns.iter().map(|d| d.to_ascii_lowercase()).collect();
    facts.ips = req.ips.iter().copied().map(canonical).collect();

    // 3-4. the key, then its signature: the verifier (ring) refuses weak
    // RSA keys outright, which would read as a forged signature.
    match req.key {
        Some(KeyAlg::Rsa(bits)) if bits < 2048 => {
            return deny(
                Check::Key,
                format!("RSA key of {bits} bits; at least 2048 required"),
            );
        }
        Some(_) => {}
        None => {
            return deny(
                Check::Key,
                "key type or curve not allowed (RSA >= 2048, ECDSA P-256/P-384, Ed25519)",
            );
        }
    }
    if let Err(e) = req.verify_signature() {
        return deny(Check::Signature, e.to_string());
    }

    // 5. subject: exactly CN=system:node:NAME, O=system:nodes.
    if req.subject.len() != 2
        || req.subject_values(COMMON_NAME) != [username]
        || req.subject_values(ORGANIZATION) != [NODES_GROUP]
    {
        let subject: Vec<String> = req
            .subject
            .iter()
            .map(|(oid, v)| format!("{oid}={v:?}"))
            .collect();
        return deny(
            Check::Subject,
            format!(
                "subject is [{}], not exactly CN={username:?}, O={NODES_GROUP}",
                subject.join(", ")
            ),
        );
    }

    // 6. usages, as the signer will issue them and as the request asks.
    let rsa = matches!(req.key, Some(KeyAlg::Rsa(_)));
    if let Some(v) = usages(&facts.usages, &req, rsa) {
        return v;
    }

    // 7. requested lifetime.
    if let (Some(max), Some(secs)) = (policy.max_expiration, csr.spec.expiration_seconds)
        && u64::try_from(secs).unwrap_or(0) > max.as_secs()
    {
        return deny(
            Check::Expiration,
            format!(
                "expirationSeconds {secs} is over the maximum of {}",
                max.as_secs()
            ),
        );
    }

    // 8. the cluster's own names and addresses.
    let own = nodes.listed(name);
    if let Some(v) = reserved(facts, nodes, own, cluster, policy) {
        return v;
    }

    // 9. another node's name or addresses: each a hash lookup (the
    // Nodes are indexed once per change, [`Nodes`]). An address or name
    // both Nodes list is in dispute: each node writes its own status, so
    // one could list the other's to get the other's requests denied;
    // neither gets it until a person decides. The requester's own name is
    // proven by its credentials: never in dispute, whatever other Nodes
    // are named or list.
    let own_name = name.to_ascii_lowercase();
    for ip in &facts.ips {
        if let Some(other) = nodes.listing_ip(ip, name) {
            return deny_unless_listed(
                Check::IpSan,
                format!("IP address {ip} belongs to node {other:?}"),
                own.is_some_and(|l| l.ips.contains(ip)),
                name,
            );
        }
    }
    for d in facts.dns.iter().filter(|d| **d != own_name) {
        // Another node's exact name is that node's (its credentials).
        // A name *under* another node's name is not: a node may be named
        // after a domain (`ec2.internal`, `example.com`; anyone with a
        // bootstrap token names a node), and a host name is no zone; such
        // a name is another node's only when that node lists it (below).
        // One the requester lists itself is in dispute, not denied:
        // whoever registers a Node chooses its
        // name, so a Node named `web1.example.com` must not get the
        // renewals of the node that listed that name first denied; a
        // person decides which is whose.
        if let Some(other) = nodes.named(d, name) {
            return deny_unless_listed(
                Check::DnsSan,
                format!("DNS name {d:?} is node {other:?}'s name"),
                own.is_some_and(|l| l.dns.contains(d)),
                name,
            );
        }
        if let Some(other) = nodes.listing_dns(d, name) {
            return deny_unless_listed(
                Check::DnsSan,
                format!("DNS name {d:?} belongs to node {other:?}"),
                own.is_some_and(|l| l.dns.contains(d)),
                name,
            );
        }
        // `n2.nodes.example` where a node is named `n2`: likely that
        // node's FQDN, which it need not list. In dispute, not denied: a
        // node choosing its name must not get another's listed alias
        // denied, nor get it.
        if let Some(other) = d
            .split_once('.')
            .and_then(|(first, _)| nodes.named(first, name))
        {
            return wait(
                Check::DnsSan,
                format!(
                    "DNS name {d:?} begins with node {other:?}'s name (perhaps its FQDN); a person decides"
                ),
            );
        }
    }

    // 10. the node networks.
    if !policy.any_node_address
        && let Some(ip) = facts
            .ips
            .iter()
            .find(|ip| !policy.node_cidrs.iter().any(|c| c.contains(**ip)))
    {
        let declared: Vec<String> = policy.node_cidrs.iter().map(ToString::to_string).collect();
        return deny(
            Check::IpSan,
            format!(
                "IP address {ip} is outside the node networks (--node-cidr {})",
                if declared.is_empty() {
                    "none declared".to_owned()
                } else {
                    declared.join(",")
                }
            ),
        );
    }

    // 11. the Node itself.
    let Some(Listed { ips, dns, over }) = own else {
        return wait(Check::Node, format!("node {name:?} does not exist (yet)"));
    };
    if let Some(count) = over {
        return wait(
            Check::Node,
            format!(
                "node {name:?} lists {count} addresses; no kubelet lists more than \
                 {MAX_NODE_ADDRESSES} (a person decides)"
            ),
        );
    }
    if ips.is_empty() && dns.is_empty() {
        return wait(
            Check::Node,
            format!("node {name:?} lists no addresses (yet)"),
        );
    }
    if let Some(v) = service_dispute(facts, cluster, ips, dns) {
        return v;
    }

    // 12. every SAN is one the node lists, within the operator's bounds.
    if let Some(ip) = facts.ips.iter().find(|ip| !ips.contains(ip)) {
        return wait(
            Check::IpSan,
            format!("IP address {ip} is not among node {name:?}'s addresses (yet)"),
        );
    }
    if let Some(d) = facts.dns.iter().find(|d| {
        **d != own_name
            && !(dns.contains(*d) && policy.allowed_dns.iter().any(|p| dns_matches(p, d)))
    }) {
        let why = if dns.contains(d.as_str()) {
            "matches no --allowed-dns pattern"
        } else {
            "is not among the node's addresses (yet)"
        };
        return wait(
            Check::DnsSan,
            format!("DNS name {d:?} is not node {name:?}'s own name and {why}"),
        );
    }
    Verdict::Approve
}

/// Check 9's verdict on another node's entry: denied, or in dispute (a
/// person decides) when the requester `name` lists it too.
fn deny_unless_listed(check: Check, message: String, listed: bool, name: &str) -> Verdict {
    if listed {
        wait(
            check,
            format!("{message}, and node {name:?} lists it too: in dispute, a person decides"),
        )
    } else {
        deny(check, message)
    }
}

/// Check 6: `spec.usages` (what the signer issues) and whatever usages the
/// request itself names.
fn usages(spec: &[String], req: &Request, rsa: bool) -> Option<Verdict> {
    let mut usages: Vec<&str> = spec.iter().map(String::as_str).collect();
    usages.sort_unstable();
    let exact = ["digital signature", "server auth"];
    let with_ke = ["digital signature", "key encipherment", "server auth"];
    if usages != exact && !(rsa && usages == with_ke) {
        let allowed = if rsa {
            "digital signature and server auth, optionally key encipherment (RSA)"
        } else {
            "exactly digital signature and server auth"
        };
        return Some(deny(
            Check::Usages,
            format!("usages {spec:?}; a kubelet serving certificate has {allowed}"),
        ));
    }
    let ku_ok = req
        .key_usage
        .iter()
        .all(|u| u == "DigitalSignature" || (rsa && u == "KeyEncipherment"));
    let eku_ok = req.ext_key_usage.iter().all(|o| *o == SERVER_AUTH);
    if !ku_ok || !eku_ok || req.ca == Some(true) {
        return Some(deny(
            Check::Usages,
            format!(
                "the request itself asks for key usages {:?}, extended key usages {:?}, CA {:?}; only digital signature{}, server auth and no CA are allowed",
                req.key_usage,
                req.ext_key_usage
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
                req.ca,
                if rsa { ", key encipherment" } else { "" },
            ),
        ));
    }
    None
}

/// A Service address the requester lists too, or a Service's name it
/// lists or is named (check 8 left them for here): in dispute, a person
/// decides.
fn service_dispute(
    facts: &Facts,
    cluster: &Cluster,
    own: &HashSet<IpAddr>,
    own_dns: &HashSet<String>,
) -> Option<Verdict> {
    let node = facts.node.as_deref().unwrap_or_default();
    let named = facts.dns.iter().find_map(|d| {
        let (_, what) = cluster.service_names.iter().find(|(n, _)| n == d)?;
        let how = if own_dns.contains(d) {
            "lists it as its own"
        } else {
            "is named so"
        };
        Some(wait(
            Check::DnsSan,
            format!(
                "DNS name {d:?} is {what}, and node {node:?} {how}: in dispute, a person decides"
            ),
        ))
    });
    named.or_else(|| facts.ips.iter().find_map(|ip| {
        let (_, what) = cluster
            .services
            .iter()
            .find(|(a, _)| canonical(*a) == *ip && own.contains(ip))?;
        Some(wait(
            Check::IpSan,
            format!(
                "IP address {ip} is {what}, and node {:?} lists it as its own: in dispute, a person decides",
                facts.node.as_deref().unwrap_or_default()
            ),
        ))
    }))
}

/// Check 8: names and addresses that are the cluster's, whatever the flags
/// (a Service address the requester lists is left to [`service_dispute`]).
fn reserved(
    facts: &Facts,
    nodes: &Nodes,
    own: Option<&Listed>,
    cluster: &Cluster,
    policy: &Policy,
) -> Option<Verdict> {
    let own_name = facts
        .node
        .as_deref()
        .unwrap_or_default()
        .to_ascii_lowercase();
    // A Service's name the requester lists, or is named, is left to
    // [`service_dispute`].
    let claims = |d: &str| d == own_name || own.is_some_and(|l| l.dns.contains(d));
    for d in &facts.dns {
        let labels: Vec<&str> = d.split('.').collect();
        let why = if labels[0] == "kubernetes"
            && (labels.len() == 1 || labels.get(1) == Some(&"default"))
        {
            Some("the API server's Service name")
        } else if labels[1..].contains(&"svc") || labels.last() == Some(&"svc") {
            Some("a Service name (under .svc)")
        } else if labels.last() == Some(&"localhost")
            || matches!(
                labels[0],
                "localhost" | "localhost4" | "localhost6" | "ip6-localhost" | "ip6-loopback"
            )
        {
            // /etc/hosts names of the loopback address
            // (localhost.localdomain, localhost4.localdomain4, ...).
            Some("localhost")
        } else {
            None
        };
        let why = why.map(str::to_owned).or_else(|| {
            cluster
                .names
                .iter()
                .find(|(n, _)| reserves(n, d))
                .map(|(n, what)| {
                    if n == d {
                        what.clone()
                    } else {
                        format!("under {n:?}, {what}")
                    }
                })
                .or_else(|| {
                    cluster
                        .service_names
                        .iter()
                        .find(|(n, _)| n == d && !claims(d))
                        .map(|(_, what)| what.clone())
                })
                .or_else(|| {
                    policy
                        .reserved
                        .iter()
                        .any(|r| *r == Reserved::Name(d.clone()))
                        .then(|| "reserved (--reserved)".to_owned())
                })
        });
        if let Some(why) = why {
            return Some(deny(
                Check::DnsSan,
                format!("DNS name {d:?} is {why}; never a node's"),
            ));
        }
    }
    for ip in &facts.ips {
        let why = special(*ip)
            .map(str::to_owned)
            .or_else(|| {
                cluster
                    .addresses
                    .iter()
                    .find(|(a, _)| canonical(*a) == *ip)
                    .map(|(_, what)| what.clone())
            })
            .or_else(|| {
                cluster
                    .services
                    .iter()
                    .find(|(a, _)| canonical(*a) == *ip)
                    .filter(|_| !own.is_some_and(|l| l.ips.contains(ip)))
                    .map(|(_, what)| what.clone())
            })
            .or_else(|| {
                cluster
                    .ranges
                    .iter()
                    .find(|(c, _)| c.contains(*ip))
                    .map(|(c, what)| format!("in Service range {c} ({what})"))
            })
            .or_else(|| {
                policy
                    .service_cidrs
                    .iter()
                    .find(|c| c.contains(*ip))
                    .map(|c| format!("in Service range {c} (--service-cidr)"))
            })
            .or_else(|| {
                policy.reserved.iter().find_map(|r| match r {
                    Reserved::Range(c) if c.contains(*ip) => {
                        Some(format!("in reserved range {c} (--reserved)"))
                    }
                    _ => None,
                })
            })
            .or_else(|| {
                nodes
                    .pod_range(*ip)
                    .map(|(c, n)| format!("in node {n:?}'s Pod range {c}"))
            });

        if let Some(why) = why {
            return Some(deny(
                Check::IpSan,
                format!("IP address {ip} is {why}; never a node's"),
            ));
        }
    }
    None
}

/// Whether the cluster's name `n` (the API server's) reserves `d`: the
/// same name, or, for a wildcard `*.BASE` (a certSAN or endpoint the API
/// server's certificate is valid for), any name under BASE at any depth:
/// the certificate covers one label, but a deeper name is as much the
/// API server's domain, and nothing is lost by refusing it to a node.
fn reserves(n: &str, d: &str) -> bool {
    match n.strip_prefix("*.") {
        Some(base) => d == n || d.strip_suffix(base).is_some_and(|head| head.ends_with('.')),
        None => n == d,
    }
}

/// Addresses no node can own: loopback, link-local, multicast,
/// unspecified, broadcast.
fn special(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(a) if a.is_loopback() => Some("a loopback address"),
        IpAddr::V4(a) if a.is_link_local() => Some("a link-local address"),
        IpAddr::V4(a) if a.is_multicast() => Some("a multicast address"),
        IpAddr::V4(a) if a.is_unspecified() => Some("the unspecified address"),
        IpAddr::V4(a) if a.is_broadcast() => Some("the broadcast address"),
        IpAddr::V6(a) if a.is_loopback() => Some("a loopback address"),
        IpAddr::V6(a) if a.is_unicast_link_local() => Some("a link-local address"),
        IpAddr::V6(a) if a.is_multicast() => Some("a multicast address"),
        IpAddr::V6(a) if a.is_unspecified() => Some("the unspecified address"),
        IpAddr::V6(a) if embeds_ipv4(a) => Some(
            "an IPv6 form of an IPv4 address (IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo or ISATAP)",
        ),
        _ => None,
    }
}

/// IPv6 addresses that stand for an IPv4 address (other than the
/// IPv4-mapped form, which [`canonical`] turns into that address): no
/// node has one as its own, and each can carry a reserved IPv4 address
/// past the IPv4 checks.
fn embeds_ipv4(a: std::net::Ipv6Addr) -> bool {
    let s = a.segments();
    // ::a.b.c.d (IPv4-compatible, deprecated), ::ffff:0:a.b.c.d (IPv4-translated)
    (s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1))
        || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0)
        // 64:ff9b::/96 (NAT64 well-known), 64:ff9b:1::/48 (local NAT64)
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || s[..3] == [0x64, 0xff9b, 1]
        // 2002::/16 (6to4)
        || s[0] == 0x2002
        // 2001:0::/32 (Teredo: a server's IPv4 address, and the client's
        // with its bits inverted)
        || s[..2] == [0x2001, 0]
        // ISATAP (RFC 5214), under any /64 prefix: interface identifier
        // 0000:5efe or 0200:5efe (the u bit), the g bit set too, then the
        // IPv4 address, which a host's ISATAP tunnel sends it to. Go does
        // not read it as that IPv4 address; kubelet takes it as a node IP.
        || (s[4] & !0x0300 == 0 && s[5] == 0x5efe)
}

/// `pattern` is an exact name or `*.SUFFIX` (any name under SUFFIX).
fn dns_matches(pattern: &str, name: &str) -> bool {
    let pattern = pattern.to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => name
            .strip_suffix(suffix)
            .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        None => pattern == name,
    }
}

mod index;
pub use index::{Listed, MAX_NODE_ADDRESSES, Nodes, Piece};

#[cfg(test)]
mod tests;
