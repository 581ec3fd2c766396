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
//!    `localhost.localdomain`; a Service range, the `kubernetes` Service's
//!    IP, an API server endpoint; loopback, link-local, multicast,
//!    unspecified, and IPv6 forms of IPv4 addresses other than the
//!    IPv4-mapped one: IPv4-compatible, IPv4-translated, NAT64, 6to4);
//! 9. `dns-san` / `ip-san`, denied: another Node's name (or a name under
//!    it) or a name or address another Node lists (never the requester's
//!    own name: its credentials prove it);
//! 10. `ip-san`, denied: an address outside every `--node-cidr`;
//! 11. `node`: wait while Node NAME does not exist or lists no addresses;
//! 12. `ip-san` / `dns-san`, else wait: every IP is one Node NAME lists
//!     (compared parsed: `fd00::1` and `fd00:0:0::1` are one); every DNS
//!     name is NAME itself, or one Node NAME lists that also matches an
//!     `--allowed-dns` pattern (case-insensitively).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;

use crate::source::csr::KeyAlg;
use crate::x509::{COMMON_NAME, ORGANIZATION, Request, RequestError, SERVER_AUTH};

/// The signer this policy is for.
pub const SIGNER: &str = crate::source::csr::KUBELET_SERVING;
const NODE_PREFIX: &str = "system:node:";
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

impl std::str::FromStr for Reserved {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
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
            Err(format!("{s:?} is not an IP address, a CIDR or a DNS name"))
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
    /// Lower-case DNS names the API server is reached by (the
    /// control-plane endpoint, its certificate's extra names), and what
    /// they are.
    pub names: Vec<(String, String)>,
}

/// An IP range `ADDR/BITS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a CIDR such as 10.0.0.0/8 or fd00::/64");
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

/// The addresses a Node lists, as IPs and lower-case DNS names.
fn addresses(node: &Node) -> (Vec<IpAddr>, Vec<String>) {
    let (mut ips, mut dns) = (Vec::new(), Vec::new());
    for a in node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or(&[])
    {
        match a.address.parse::<IpAddr>() {
            Ok(ip) => ips.push(canonical(ip)),
            Err(_) => dns.push(a.address.trim_end_matches('.').to_ascii_lowercase()),
        }
    }
    (ips, dns)
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
pub fn decide(
    csr: &CertificateSigningRequest,
    nodes: &BTreeMap<String, Node>,
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
    nodes: &BTreeMap<String, Node>,
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

    // 2. the request, read strictly, once.
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
    if let Some(v) = reserved(facts, nodes, cluster, policy) {
        return v;
    }

    // 9. another node's name or addresses. An address both Nodes list is
    // in dispute: each node writes its own status, so one could list the
    // other's address to get the other's requests denied; neither gets it
    // until a person decides.
    let (own_ips, own_dns) = nodes.get(name).map(addresses).unwrap_or_default();
    let own_name = name.to_ascii_lowercase();
    for (other, node) in nodes.iter().filter(|(n, _)| n.as_str() != name) {
        let other_lc = other.to_ascii_lowercase();
        let (ips, dns) = addresses(node);
        if let Some(ip) = facts.ips.iter().find(|ip| ips.contains(ip)) {
            let message = format!("IP address {ip} belongs to node {other:?}");
            return if own_ips.contains(ip) {
                wait(
                    Check::IpSan,
                    format!("{message}, and node {name:?} lists it too"),
                )
            } else {
                deny(Check::IpSan, message)
            };
        }
        if let Some(d) = facts.dns.iter().find(|d| {
            **d == other_lc
                || d.starts_with(&format!("{other_lc}."))
                || d.ends_with(&format!(".{other_lc}"))
        }) {
            return deny(
                Check::DnsSan,
                format!("DNS name {d:?} is node {other:?}'s name or under it"),
            );
        }
        // The requester's own name is proven by its credentials: another
        // Node listing it proves nothing and must not get it denied.
        if let Some(d) = facts
            .dns
            .iter()
            .find(|d| **d != own_name && dns.contains(d))
        {
            let message = format!("DNS name {d:?} belongs to node {other:?}");
            return if own_dns.contains(d) {
                wait(
                    Check::DnsSan,
                    format!("{message}, and node {name:?} lists it too"),
                )
            } else {
                deny(Check::DnsSan, message)
            };
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
    let Some(node) = nodes.get(name) else {
        return wait(Check::Node, format!("node {name:?} does not exist (yet)"));
    };
    let (ips, dns) = addresses(node);
    if ips.is_empty() && dns.is_empty() {
        return wait(
            Check::Node,
            format!("node {name:?} lists no addresses (yet)"),
        );
    }

    // 12. every SAN is one the node lists, within the operator's bounds.
    if let Some(ip) = facts.ips.iter().find(|ip| !ips.contains(ip)) {
        return wait(
            Check::IpSan,
            format!("IP address {ip} is not among node {name:?}'s addresses (yet)"),
        );
    }
    let own = name.to_ascii_lowercase();
    if let Some(d) = facts.dns.iter().find(|d| {
        **d != own && !(dns.contains(d) && policy.allowed_dns.iter().any(|p| dns_matches(p, d)))
    }) {
        let why = if dns.contains(d) {
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

/// Check 8: names and addresses that are the cluster's, whatever the flags.
fn reserved(
    facts: &Facts,
    nodes: &BTreeMap<String, Node>,
    cluster: &Cluster,
    policy: &Policy,
) -> Option<Verdict> {
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
                .find(|(n, _)| n == d)
                .map(|(_, what)| what.clone())
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
            .or_else(|| pod_range(nodes, *ip));

        if let Some(why) = why {
            return Some(deny(
                Check::IpSan,
                format!("IP address {ip} is {why}; never a node's"),
            ));
        }
    }
    None
}

/// A Pod address: inside a Node's `spec.podCIDRs` (set by the controller
/// manager, not by the node), whichever Node's.
fn pod_range(nodes: &BTreeMap<String, Node>, ip: IpAddr) -> Option<String> {
    nodes.iter().find_map(|(name, node)| {
        let spec = node.spec.as_ref()?;
        let ranges = spec.pod_cidrs.iter().flatten().chain(spec.pod_cidr.iter());
        ranges
            .filter_map(|c| c.parse::<Cidr>().ok())
            .find(|c| c.contains(ip))
            .map(|c| format!("in node {name:?}'s Pod range {c}"))
    })
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
            "an IPv6 form of an IPv4 address (IPv4-compatible, IPv4-translated, NAT64 or 6to4)",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::csr::{CsrSpec, pkcs10};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    /// A request as a kubelet makes it, changed by the test.
    struct Ask {
        username: String,
        groups: Vec<String>,
        cn: Option<String>,
        o: Vec<String>,
        dns: Vec<String>,
        ips: Vec<IpAddr>,
        alg: KeyAlg,
        usages: Vec<String>,
        expiration: Option<i32>,
        /// A PEM made elsewhere, instead of one built from the above.
        pem: Option<Vec<u8>>,
        tamper: bool,
    }

    fn kubelet(node: &str) -> Ask {
        Ask {
            username: format!("system:node:{node}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            cn: Some(format!("system:node:{node}")),
            o: vec!["system:nodes".into()],
            dns: vec![node.into()],
            ips: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            alg: KeyAlg::EcdsaP256,
            usages: vec!["digital signature".into(), "server auth".into()],
            expiration: None,
            pem: None,
            tamper: false,
        }
    }

    fn pem_of(der: &[u8]) -> Vec<u8> {
        crate::forge::pem("CERTIFICATE REQUEST", der).into_bytes()
    }

    /// A 1024-bit RSA request, which ring refuses to sign: signed with the
    /// `rsa` crate (tests only).
    fn weak_rsa(spec: &CsrSpec) -> Vec<u8> {
        use rsa::pkcs8::EncodePublicKey;
        use rsa::signature::{SignatureEncoding, Signer};
        let key = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 1024).unwrap();
        let spki = key.to_public_key().to_public_key_der().unwrap();
        let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key);
        pkcs10(spec, spki.as_bytes(), &|tbs| Ok(signer.sign(tbs).to_vec()))
            .unwrap()
            .into_bytes()
    }

    fn csr(a: &Ask) -> CertificateSigningRequest {
        let spec = CsrSpec {
            signer: SIGNER.into(),
            common_name: a.cn.clone(),
            organizations: a.o.clone(),
            dns: a.dns.clone(),
            ips: a.ips.clone(),
            key_alg: a.alg,
            lifetime: None,
            usages: a.usages.clone(),
            ca: None,
            renew: (0.7, 0.9),
            approval_timeout: Duration::from_secs(900),
            bootstrap: None,
            write_kubeconfig: None,
        };
        let mut pem = match (&a.pem, a.alg) {
            (Some(p), _) => p.clone(),
            (None, KeyAlg::Rsa(1024)) => weak_rsa(&spec),
            (None, _) => crate::source::csr::new_request(&spec)
                .unwrap()
                .csr_pem
                .into_bytes(),
        };
        if a.tamper {
            let mut der =
                crate::pem::exactly_one(&pem, rustls_pki_types::pem::SectionKind::Csr).unwrap();
            let last = der.len() - 1;
            der[last] ^= 0x55;
            pem = pem_of(&der);
        }
        CertificateSigningRequest {
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem),
                signer_name: SIGNER.into(),
                usages: Some(a.usages.clone()),
                username: Some(a.username.clone()),
                groups: Some(a.groups.clone()),
                expiration_seconds: a.expiration,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn node(name: &str, addrs: &[(&str, &str)]) -> (String, Node) {
        let node = Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                addresses: Some(
                    addrs
                        .iter()
                        .map(|(t, a)| NodeAddress {
                            type_: (*t).into(),
                            address: (*a).into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        (name.to_owned(), node)
    }

    /// Node n1 lists its own addresses, and also (a node writes its own
    /// status) names and addresses that are the cluster's: listing them
    /// must prove nothing.
    fn nodes() -> BTreeMap<String, Node> {
        [
            node(
                "n1",
                &[
                    ("InternalIP", "10.0.0.1"),
                    // The same address as the request's fd00::1, spelled out.
                    ("InternalIP", "fd00:0:0:0:0:0:0:1"),
                    ("InternalIP", "10.0.0.7"),
                    // Also n2's: in dispute.
                    ("InternalIP", "10.0.0.3"),
                    // In n2's Pod range.
                    ("InternalIP", "10.0.128.7"),
                    ("InternalIP", "10.0.9.9"),
                    ("InternalDNS", "api.nodes.example"),
                    ("InternalDNS", "lb.nodes.example"),
                    ("InternalDNS", "shared.nodes.example"),
                    ("Hostname", "N1"),
                    ("InternalDNS", "n1.nodes.example"),
                    ("InternalDNS", "n1.elsewhere.example"),
                    ("InternalDNS", "n2.nodes.example"),
                    ("InternalIP", "10.96.0.1"),
                    ("InternalIP", "10.100.0.5"),
                    ("InternalIP", "10.0.0.250"),
                    ("InternalIP", "127.0.0.1"),
                    ("InternalIP", "192.168.9.9"),
                    ("InternalDNS", "kubernetes.default.svc"),
                    ("InternalDNS", "web.prod.svc.cluster.local"),
                ],
            ),
            node(
                "n2",
                &[
                    ("InternalIP", "10.0.0.2"),
                    ("InternalIP", "10.0.0.3"),
                    ("Hostname", "n2"),
                    ("InternalDNS", "n2-alias.nodes.example"),
                    ("InternalDNS", "shared.nodes.example"),
                ],
            ),
        ]
        .into_iter()
        .collect()
    }

    /// What a kubeadm cluster reports: its Service range, the
    /// `kubernetes` Service's IP, the API server's endpoint.
    fn the_cluster() -> Cluster {
        Cluster {
            ranges: vec![(
                "10.96.0.0/12".parse().unwrap(),
                "ServiceCIDR kubernetes".into(),
            )],
            addresses: vec![
                (
                    "10.96.0.1".parse().unwrap(),
                    "the kubernetes Service's IP".into(),
                ),
                (
                    "10.0.0.250".parse().unwrap(),
                    "an API server endpoint".into(),
                ),
            ],
            names: vec![(
                "api.nodes.example".into(),
                "kubeadm's controlPlaneEndpoint".into(),
            )],
        }
    }

    fn policy() -> Policy {
        Policy {
            node_cidrs: vec!["10.0.0.0/16".parse().unwrap(), "fd00::/64".parse().unwrap()],
            allowed_dns: vec!["*.nodes.example".into()],
            max_expiration: Some(Duration::from_secs(30 * 86_400)),
            ..Policy::default()
        }
    }

    fn verdict_of(request: CertificateSigningRequest) -> Verdict {
        let mut nodes = nodes();
        if let Some(n2) = nodes.get_mut("n2") {
            n2.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
                pod_cidrs: Some(vec!["10.0.128.0/24".into()]),
                ..Default::default()
            });
        }
        let policy = Policy {
            reserved: vec![
                "lb.nodes.example".parse().unwrap(),
                "10.0.9.0/24".parse().unwrap(),
            ],
            ..policy()
        };
        decide(&request, &nodes, &the_cluster(), &policy).0
    }

    /// A request n1 sends with a forged shape (see tests/support/forge.rs).
    fn forged(shape: &crate::forge::Shape) -> CertificateSigningRequest {
        let mut a = kubelet("n1");
        a.pem = Some(shape.pem().into_bytes());
        csr(&a)
    }

    /// One row per check: a request that fails exactly that check, and
    /// the verdict it gets; the first rows pass everything.
    #[test]
    fn every_check_has_a_request_that_fails_it() {
        let email = {
            use crate::forge::*;
            Shape::kubelet("n1", &[dns("n1"), email("root@n1")])
        };
        type Edit = Box<dyn Fn(&mut Ask)>;
        let rows: Vec<(&str, Edit, &str, Option<Check>)> = vec![
            ("a kubelet's request", Box::new(|_| {}), "approve", None),
            (
                "RSA with key encipherment",
                Box::new(|a| {
                    a.alg = KeyAlg::Rsa(2048);
                    a.usages.push("key encipherment".into());
                }),
                "approve",
                None,
            ),
            (
                "Ed25519",
                Box::new(|a| a.alg = KeyAlg::Ed25519),
                "approve",
                None,
            ),
            (
                "a listed name under an allowed suffix",
                Box::new(|a| a.dns.push("N1.nodes.example".into())),
                "approve",
                None,
            ),
            (
                "another user",
                Box::new(|a| a.username = "system:admin".into()),
                "deny",
                Some(Check::Requester),
            ),
            (
                "not in system:nodes",
                Box::new(|a| a.groups = vec!["system:authenticated".into()]),
                "deny",
                Some(Check::Requester),
            ),
            (
                "not a PEM request",
                Box::new(|a| a.pem = Some(b"garbage".to_vec())),
                "deny",
                Some(Check::Request),
            ),
            (
                "a forged signature",
                Box::new(|a| a.tamper = true),
                "deny",
                Some(Check::Signature),
            ),
            (
                "CN of another node",
                Box::new(|a| a.cn = Some("system:node:n2".into())),
                "deny",
                Some(Check::Subject),
            ),
            (
                "an extra organization",
                Box::new(|a| a.o.push("system:masters".into())),
                "deny",
                Some(Check::Subject),
            ),
            (
                "client auth",
                Box::new(|a| a.usages.push("client auth".into())),
                "deny",
                Some(Check::Usages),
            ),
            (
                "key encipherment with ECDSA",
                Box::new(|a| a.usages.push("key encipherment".into())),
                "deny",
                Some(Check::Usages),
            ),
            (
                "no server auth",
                Box::new(|a| a.usages = vec!["digital signature".into()]),
                "deny",
                Some(Check::Usages),
            ),
            (
                "an email SAN",
                Box::new(move |a| a.pem = Some(email.pem().into_bytes())),
                "deny",
                Some(Check::Sans),
            ),
            (
                "no SAN at all",
                Box::new(|a| {
                    a.dns.clear();
                    a.ips.clear();
                }),
                "deny",
                Some(Check::Sans),
            ),
            (
                "a wildcard under an allowed suffix",
                Box::new(|a| a.dns.push("*.nodes.example".into())),
                "deny",
                Some(Check::Sans),
            ),
            (
                "RSA 1024",
                Box::new(|a| a.alg = KeyAlg::Rsa(1024)),
                "deny",
                Some(Check::Key),
            ),
            (
                "a lifetime over the maximum",
                Box::new(|a| a.expiration = Some(90 * 86_400)),
                "deny",
                Some(Check::Expiration),
            ),
            (
                "the API server's Service name, listed by the node",
                Box::new(|a| a.dns.push("kubernetes.default.svc".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "a bare kubernetes",
                Box::new(|a| a.dns.push("kubernetes".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "a Service name, listed by the node",
                Box::new(|a| a.dns.push("web.prod.svc.cluster.local".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "localhost",
                Box::new(|a| a.dns.push("localhost".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "the kubernetes Service IP, listed by the node",
                Box::new(|a| a.ips.push("10.96.0.1".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "an IP in the Service range, listed by the node",
                Box::new(|a| a.ips.push("10.100.0.5".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "the API server's endpoint, inside the node network and listed",
                Box::new(|a| a.ips.push("10.0.0.250".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "loopback, listed by the node",
                Box::new(|a| a.ips.push("127.0.0.1".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "IPv6 loopback",
                Box::new(|a| a.ips.push("::1".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "link-local",
                Box::new(|a| a.ips.push("169.254.169.254".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "IPv4-mapped loopback",
                Box::new(|a| a.ips.push("::ffff:127.0.0.1".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "another node's IP",
                Box::new(|a| a.ips.push("10.0.0.2".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "another node's name",
                Box::new(|a| a.dns.push("n2".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "the API server's control-plane endpoint name, listed and allowed",
                Box::new(|a| a.dns.push("api.nodes.example".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "a name the operator reserved",
                Box::new(|a| a.dns.push("lb.nodes.example".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "an address in a range the operator reserved",
                Box::new(|a| a.ips.push("10.0.9.9".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "an address in another node's Pod range",
                Box::new(|a| a.ips.push("10.0.128.7".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "an IP both nodes list",
                Box::new(|a| a.ips.push("10.0.0.3".parse().unwrap())),
                "wait",
                Some(Check::IpSan),
            ),
            (
                "a name both nodes list",
                Box::new(|a| a.dns.push("shared.nodes.example".into())),
                "wait",
                Some(Check::DnsSan),
            ),
            (
                "a name another node lists",
                Box::new(|a| a.dns.push("n2-alias.nodes.example".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "another node's name under the suffix, listed by this node",
                Box::new(|a| a.dns.push("n2.nodes.example".into())),
                "deny",
                Some(Check::DnsSan),
            ),
            (
                "an address outside the node networks, listed by the node",
                Box::new(|a| a.ips.push("192.168.9.9".parse().unwrap())),
                "deny",
                Some(Check::IpSan),
            ),
            (
                "a node that does not exist yet",
                Box::new(|a| {
                    a.username = "system:node:n3".into();
                    a.cn = Some("system:node:n3".into());
                    a.dns = vec!["n3".into()];
                    a.ips = vec!["10.0.0.33".parse().unwrap()];
                }),
                "wait",
                Some(Check::Node),
            ),
            (
                "an IP in the node network the node does not list",
                Box::new(|a| a.ips.push("10.0.0.9".parse().unwrap())),
                "wait",
                Some(Check::IpSan),
            ),
            (
                "a name the node does not list",
                Box::new(|a| a.dns.push("n1a.nodes.example".into())),
                "wait",
                Some(Check::DnsSan),
            ),
            (
                "a name the node lists that matches no pattern",
                Box::new(|a| a.dns.push("n1.elsewhere.example".into())),
                "wait",
                Some(Check::DnsSan),
            ),
        ];
        for (what, edit, want, check) in rows {
            let mut a = kubelet("n1");
            edit(&mut a);
            let verdict = verdict_of(csr(&a));
            assert_eq!(
                (verdict.label(), verdict.check()),
                (want, check),
                "{what}: {}",
                verdict.describe()
            );
        }
    }

    /// Every shape a forger can send that Go reads one way and a lax
    /// reader another: each is denied, naming the check.
    #[test]
    fn forged_shapes_are_denied() {
        use crate::forge::*;
        let names = || vec![dns("n1"), ip("10.0.0.1")];
        let ku = key_usage_digital();
        let base = Shape::kubelet("n1", &names());
        let mut rows: Vec<(&str, Shape, Check, &str)> = Vec::new();
        // The one that was approved before: a harmless extensionRequest
        // first, the names in a second one that x509-parser never read.
        let mut two = base.clone();
        two.attributes = vec![
            extension_request(std::slice::from_ref(&ku)),
            extension_request(&[san(&[dns("kubernetes.default.svc"), ip("10.96.0.1")])]),
        ];
        rows.push((
            "two extensionRequest attributes",
            two,
            Check::Request,
            "2 attributes",
        ));
        // A UTF8String inside the SAN sequence: Go skips it and reads the
        // rest; x509-parser rejected the whole extension.
        let utf8_in_san = Shape::kubelet(
            "n1",
            &[utf8("x"), dns("kubernetes.default.svc"), ip("10.96.0.1")],
        );
        rows.push((
            "a UTF8String among the SANs",
            utf8_in_san,
            Check::Sans,
            "UTF8String",
        ));
        let mut challenge = base.clone();
        challenge
            .attributes
            .push(seq(&[oid(CHALLENGE_PASSWORD), set(&[utf8("secret")])]));
        rows.push((
            "a challengePassword beside the extensions",
            challenge,
            Check::Request,
            "2 attributes",
        ));
        let mut only_other = base.clone();
        only_other.attributes = vec![seq(&[oid(CHALLENGE_PASSWORD), set(&[utf8("secret")])])];
        rows.push((
            "an attribute other than extensionRequest",
            only_other,
            Check::Request,
            "only extensionRequest",
        ));
        let mut two_values = base.clone();
        two_values.attributes = vec![seq(&[
            oid(EXTENSION_REQUEST),
            set(&[seq(std::slice::from_ref(&ku)), seq(&[san(&names())])]),
        ])];
        rows.push((
            "an extensionRequest with two values",
            two_values,
            Check::Request,
            "2 values",
        ));
        let mut dup = base.clone();
        dup.attributes = vec![extension_request(&[san(&names()), san(&[dns("n2")])])];
        rows.push(("the SAN extension twice", dup, Check::Request, "twice"));
        let mut unknown = base.clone();
        unknown.attributes = vec![extension_request(&[
            san(&names()),
            ext("1.2.3.4", false, utf8("?")),
        ])];
        rows.push((
            "an extension certsync does not read",
            unknown,
            Check::Request,
            "1.2.3.4",
        ));
        let mut bad_ku = base.clone();
        bad_ku.attributes = vec![extension_request(&[
            san(&names()),
            ext(KEY_USAGE, true, utf8("not a bit string")),
        ])];
        rows.push((
            "a key usage that does not parse",
            bad_ku,
            Check::Request,
            "keyUsage",
        ));
        let mut client_eku = base.clone();
        client_eku.attributes = vec![extension_request(&[
            san(&names()),
            ext(EXT_KEY_USAGE, false, seq(&[oid("1.3.6.1.5.5.7.3.2")])),
        ])];
        rows.push((
            "client auth asked in the request",
            client_eku,
            Check::Usages,
            "extended key usages",
        ));
        let mut ca = base.clone();
        ca.attributes = vec![extension_request(&[
            san(&names()),
            ext(BASIC_CONSTRAINTS, true, seq(&[vec![0x01, 0x01, 0xff]])),
        ])];
        rows.push((
            "CA:TRUE asked in the request",
            ca,
            Check::Usages,
            "CA Some(true)",
        ));
        let mut trailing = base.clone();
        trailing.trailing = vec![0x05, 0x00];
        rows.push(("trailing bytes", trailing, Check::Request, "trailing"));
        let mut two_attr_rdn = base.clone();
        two_attr_rdn.subject = vec![set(&[
            seq(&[oid(O), utf8("system:nodes")]),
            seq(&[oid(CN), utf8("system:node:n1")]),
        ])];
        rows.push((
            "an RDN of two attributes",
            two_attr_rdn,
            Check::Request,
            "2 attributes",
        ));
        let mut teletex = base.clone();
        teletex.subject = vec![
            rdn(O, tlv(0x14, b"system:nodes")),
            rdn(CN, utf8("system:node:n1")),
        ];
        rows.push((
            "a T61String in the subject",
            teletex,
            Check::Request,
            "TeletexString",
        ));
        let bad_ip = Shape::kubelet("n1", &[dns("n1"), tlv(0x87, &[10, 0, 0])]);
        rows.push(("an IP SAN of 3 bytes", bad_ip, Check::Sans, "3 bytes"));
        let uri = Shape::kubelet("n1", &[dns("n1"), uri("spiffe://cluster/ns/x")]);
        rows.push(("a URI SAN", uri, Check::Sans, "a URI"));
        let esc = Shape::kubelet("n1", &[dns("n1\u{1b}[2J\rn1")]);
        rows.push((
            "an escape sequence in a DNS name",
            esc,
            Check::Sans,
            "\\u{1b}",
        ));
        let numeric = Shape::kubelet("n1", &[dns("n1"), dns("10.96.0.1")]);
        rows.push((
            "a DNS name that reads as an IP",
            numeric,
            Check::Sans,
            "looks like an IP address",
        ));
        let trailing_dot = Shape::kubelet("n1", &[dns("n1.")]);
        rows.push((
            "a trailing dot",
            trailing_dot,
            Check::Sans,
            "not a host name",
        ));
        let empty_san = Shape::kubelet("n1", &[]);
        rows.push(("an empty SAN", empty_san, Check::Sans, "names no DNS name"));
        let mut tampered = base.clone();
        tampered.tamper = true;
        rows.push((
            "a forged signature",
            tampered,
            Check::Signature,
            "signature",
        ));
        for (what, shape, check, says) in rows {
            let verdict = verdict_of(forged(&shape));
            assert_eq!(verdict.label(), "deny", "{what}: {}", verdict.describe());
            assert_eq!(
                verdict.check(),
                Some(check),
                "{what}: {}",
                verdict.describe()
            );
            assert!(
                verdict.describe().contains(says),
                "{what}: {:?} does not say {says:?}",
                verdict.describe()
            );
            assert!(
                !verdict.describe().chars().any(char::is_control),
                "{what}: control characters in {:?}",
                verdict.describe()
            );
        }
        // The forger's shape, well formed, passes: the rows fail for what
        // they change, not for the forge.
        assert_eq!(verdict_of(forged(&base)), Verdict::Approve);
    }

    /// A BER encoding (a long-form length where the short form fits) of
    /// an otherwise good request: x509-parser reads it, DER forbids it.
    #[test]
    fn a_non_der_length_is_denied() {
        use crate::forge::*;
        let good = Shape::kubelet("n1", &[dns("n1")]).der();
        // Rewrite the outer SEQUENCE's length in one more byte than needed.
        let (len_bytes, body) = match good[1] {
            0x82 => (vec![0x83, 0x00, good[2], good[3]], &good[4..]),
            0x81 => (vec![0x82, 0x00, good[2]], &good[3..]),
            n => panic!("unexpected length form {n:#x}"),
        };
        let mut ber = vec![0x30];
        ber.extend(len_bytes);
        ber.extend_from_slice(body);
        let mut a = kubelet("n1");
        a.pem = Some(crate::forge::pem("CERTIFICATE REQUEST", &ber).into_bytes());
        let verdict = verdict_of(csr(&a));
        assert_eq!(
            verdict.check(),
            Some(Check::Request),
            "{}",
            verdict.describe()
        );
        assert_eq!(verdict.label(), "deny");
    }

    #[test]
    fn patterns_and_the_node_network_bound_what_a_node_lists() {
        // Without a pattern, a listed name beyond the node's own waits.
        let mut a = kubelet("n1");
        a.dns.push("n1.nodes.example".into());
        let strict = Policy {
            allowed_dns: vec![],
            ..policy()
        };
        let (v, facts) = decide(&csr(&a), &nodes(), &the_cluster(), &strict);
        assert_eq!(v.check(), Some(Check::DnsSan), "{}", v.describe());
        assert_eq!(v.label(), "wait");
        assert_eq!(facts.node.as_deref(), Some("n1"));
        assert_eq!(facts.key, "ecdsa-p256");
        // A pattern matches names under it, not the suffix itself.
        assert!(!dns_matches("*.nodes.example", "nodes.example"));
        assert!(dns_matches("*.nodes.example", "a.b.nodes.example"));
        // --allow-any-node-address: no network bound, still only listed
        // addresses, still nothing reserved.
        let any = Policy {
            node_cidrs: vec![],
            any_node_address: true,
            ..policy()
        };
        let mut a = kubelet("n1");
        a.ips.push("192.168.9.9".parse().unwrap());
        let (v, _) = decide(&csr(&a), &nodes(), &the_cluster(), &any);
        assert_eq!(v, Verdict::Approve, "{}", v.describe());
        a.ips.push("10.96.0.1".parse().unwrap());
        let (v, _) = decide(&csr(&a), &nodes(), &the_cluster(), &any);
        assert_eq!((v.label(), v.check()), ("deny", Some(Check::IpSan)));
        // Neither: every IP is outside the (empty) node networks.
        let none = Policy {
            node_cidrs: vec![],
            ..policy()
        };
        let (v, _) = decide(&csr(&kubelet("n1")), &nodes(), &the_cluster(), &none);
        assert_eq!((v.label(), v.check()), ("deny", Some(Check::IpSan)));
        // An operator-declared Service range.
        let reserved = Policy {
            service_cidrs: vec!["10.0.0.0/24".parse().unwrap()],
            ..policy()
        };
        let (v, _) = decide(&csr(&kubelet("n1")), &nodes(), &the_cluster(), &reserved);
        assert_eq!(
            (v.label(), v.check()),
            ("deny", Some(Check::IpSan)),
            "{}",
            v.describe()
        );
        // A node without addresses yet: wait.
        let bare: BTreeMap<String, Node> = [node("n1", &[])].into_iter().collect();
        let (v, _) = decide(&csr(&kubelet("n1")), &bare, &the_cluster(), &policy());
        assert_eq!((v.label(), v.check()), ("wait", Some(Check::Node)));
    }

    #[test]
    fn cidrs_parse_and_match() {
        let c: Cidr = "fd00::/64".parse().unwrap();
        assert!(c.contains("fd00::1".parse().unwrap()));
        assert!(!c.contains("fd01::1".parse().unwrap()));
        assert!(!c.contains("10.0.0.1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(
            all.contains("::ffff:10.1.2.3".parse().unwrap()),
            "IPv4-mapped"
        );
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("10.0.0.0".parse::<Cidr>().is_err());
    }

    /// Attack: a node's own name is proven by its credentials, not by any
    /// Node's status. A compromised node that lists another node's name
    /// in its own status must not get that node's request for its own
    /// name denied (the threat model: "It cannot get another node's
    /// legitimate request denied by listing that node's address in its
    /// own status"). Here the victim's Node does not list its own name
    /// (a cloud whose Hostname address differs from the node name).
    #[test]
    fn attack_listing_another_nodes_name_does_not_get_its_request_denied() {
        let nodes: BTreeMap<String, Node> = [
            node(
                "n1",
                &[
                    ("InternalIP", "10.0.0.1"),
                    ("InternalIP", "fd00::1"),
                    ("Hostname", "ip-10-0-0-1"),
                ],
            ),
            // The compromised node lists its victim's name.
            node("n2", &[("InternalIP", "10.0.0.2"), ("Hostname", "n1")]),
        ]
        .into_iter()
        .collect();
        let (v, _) = decide(&csr(&kubelet("n1")), &nodes, &the_cluster(), &policy());
        assert_ne!(
            v.label(),
            "deny",
            "n2 listing n1's name got n1's own request denied: {}",
            v.describe()
        );
    }

    /// Attack: `localhost.localdomain` (and the other /etc/hosts names of
    /// the loopback address: `localhost4`, `localhost6`, `ip6-localhost`,
    /// ...) resolves to 127.0.0.1/::1 on every RHEL or Debian host, like
    /// `localhost`. A cluster whose nodes are `*.localdomain` (RHEL's
    /// default domain) allows that suffix; a node that lists the name
    /// must still not get it.
    #[test]
    fn attack_loopback_host_names_are_never_a_nodes() {
        let nodes: BTreeMap<String, Node> = [node(
            "n1",
            &[
                ("InternalIP", "10.0.0.1"),
                ("InternalIP", "fd00::1"),
                ("Hostname", "n1.localdomain"),
                ("InternalDNS", "localhost.localdomain"),
                ("InternalDNS", "localhost4.localdomain4"),
                ("InternalDNS", "localhost6.localdomain6"),
            ],
        )]
        .into_iter()
        .collect();
        let local = Policy {
            allowed_dns: vec![
                "*.localdomain".into(),
                "*.localdomain4".into(),
                "*.localdomain6".into(),
            ],
            ..policy()
        };
        let mut a = kubelet("n1");
        a.dns.push("n1.localdomain".into());
        let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &local);
        assert_eq!(v, Verdict::Approve, "the control: {}", v.describe());
        for name in [
            "localhost.localdomain",
            "localhost4.localdomain4",
            "localhost6.localdomain6",
        ] {
            let mut a = kubelet("n1");
            a.dns.push(name.into());
            let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &local);
            assert_eq!(
                (v.label(), v.check()),
                ("deny", Some(Check::DnsSan)),
                "{name}: {}",
                v.describe()
            );
        }
    }

    /// Attack: a range written in its IPv4-mapped IPv6 form
    /// (`::ffff:10.96.0.0/108`, as Go's net.ParseCIDR and some tools
    /// print it) reserves nothing: requested IPs are canonicalised to
    /// IPv4, the range is not, so `contains` is false for every address
    /// in it. A reserved range must reserve whatever its spelling.
    #[test]
    fn attack_a_reserved_range_in_ipv4_mapped_form_still_reserves() {
        let mapped: Cidr = "::ffff:10.0.0.0/120".parse().unwrap();
        assert!(
            mapped.contains("10.0.0.7".parse().unwrap()),
            "{mapped} does not contain 10.0.0.7"
        );
        let reserved = Policy {
            service_cidrs: vec![mapped],
            ..policy()
        };
        let mut a = kubelet("n1");
        a.ips = vec!["10.0.0.7".parse().unwrap()];
        let (v, _) = decide(&csr(&a), &nodes(), &the_cluster(), &reserved);
        assert_eq!(
            (v.label(), v.check()),
            ("deny", Some(Check::IpSan)),
            "{}",
            v.describe()
        );
    }

    /// Attack: IPv6 forms that embed an IPv4 address other than the
    /// IPv4-mapped one (IPv4-compatible `::a.b.c.d`, IPv4-translated
    /// `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::`)
    /// carry loopback, link-local or the API server's Service IP past the
    /// reserved checks. Under --allow-any-node-address (or a broad IPv6
    /// --node-cidr) a node that lists one gets it.
    #[test]
    fn attack_ipv4_embedding_forms_of_reserved_addresses_are_refused() {
        let embedded = [
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::169.254.169.254",
            "64:ff9b::10.96.0.1",
            "2002:7f00:1::1",
            "2002:a60:1::1",
        ];
        let mut listed: Vec<(&str, &str)> =
            vec![("InternalIP", "10.0.0.1"), ("InternalIP", "fd00::1")];
        listed.extend(embedded.iter().map(|a| ("InternalIP", *a)));
        let nodes: BTreeMap<String, Node> = [node("n1", &listed)].into_iter().collect();
        let any = Policy {
            node_cidrs: vec![],
            any_node_address: true,
            ..policy()
        };
        let (v, _) = decide(&csr(&kubelet("n1")), &nodes, &the_cluster(), &any);
        assert_eq!(v, Verdict::Approve, "the control: {}", v.describe());
        let mut approved = Vec::new();
        for addr in embedded {
            let mut a = kubelet("n1");
            a.ips.push(addr.parse().unwrap());
            let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &any);
            if v.label() != "deny" {
                approved.push(format!("{addr}: {}", v.describe()));
            }
        }
        assert!(approved.is_empty(), "not denied: {approved:#?}");
    }

    mod generated {
        //! Requests of every odd shape: whatever the policy approves, the
        //! names Go would read from it (every extensionRequest, every SAN
        //! element it knows, unknown ones skipped) are n1's own.
        use super::*;
        use crate::forge::*;
        use proptest::prelude::*;

        fn san_element() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                // Names n1 is owed, often, so that many requests pass and
                // the property is tested on approvals, not only denials.
                8 => prop::sample::select(vec![
                    "n1", "N1", "n1.nodes.example",
                ]).prop_map(dns),
                8 => prop::sample::select(vec!["10.0.0.1", "fd00::1", "10.0.0.7"]).prop_map(ip),
                4 => prop::sample::select(vec![
                    "n1", "N1", "n2", "n1.nodes.example", "n2.nodes.example",
                    "kubernetes", "kubernetes.default.svc", "a.b.svc", "*.nodes.example",
                    "localhost", "n1.elsewhere.example", "x.n2",
                ]).prop_map(dns),
                4 => prop::sample::select(vec![
                    "10.0.0.1", "fd00::1", "10.0.0.7", "10.0.0.2", "10.96.0.1",
                    "10.100.0.5", "10.0.0.250", "127.0.0.1", "192.168.9.9", "::ffff:10.0.0.2",
                ]).prop_map(ip),
                1 => Just(utf8("x")),
                1 => Just(email("a@n1")),
                1 => Just(uri("https://n2")),
                1 => Just(tlv(0x87, &[10, 0, 0])),
            ]
        }

        fn extension() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                8 => prop::collection::vec(san_element(), 0..4).prop_map(|e| san(&e)),
                1 => Just(key_usage_digital()),
                1 => Just(ext(EXT_KEY_USAGE, false, seq(&[oid("1.3.6.1.5.5.7.3.1")]))),
                1 => Just(ext("1.2.3.4", false, utf8("?"))),
            ]
        }

        fn attribute() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                6 => prop::collection::vec(extension(), 0..3)
                    .prop_map(|e| extension_request(&e)),
                1 => Just(seq(&[oid(CHALLENGE_PASSWORD), set(&[utf8("pw")])])),
                1 => prop::collection::vec(prop::collection::vec(extension(), 0..2), 2..3)
                    .prop_map(|vs| seq(&[oid(EXTENSION_REQUEST), set(&vs.iter().map(|v| seq(v)).collect::<Vec<_>>())])),
            ]
        }

        fn shape() -> impl Strategy<Value = Shape> {
            (
                prop_oneof![
                    3 => prop::collection::vec(attribute(), 1..2),
                    1 => prop::collection::vec(attribute(), 0..4),
                ],
                prop::bool::weighted(0.1),
            )
                .prop_map(|(attributes, trailing)| Shape {
                    subject: node_subject("n1"),
                    attributes,
                    trailing: if trailing { vec![0, 0] } else { Vec::new() },
                    tamper: false,
                })
        }

        /// What n1 may be certified for under `policy()` and `nodes()`.
        fn entitled(name: &GoName) -> bool {
            match name {
                GoName::Dns(d) => {
                    let d = d.to_ascii_lowercase();
                    d == "n1" || d == "n1.nodes.example"
                }
                GoName::Ip(ip) => ["10.0.0.1", "fd00::1", "10.0.0.7"]
                    .iter()
                    .any(|a| a.parse::<IpAddr>().unwrap() == canonical(*ip)),
                GoName::Email(_) | GoName::Uri(_) => false,
            }
        }

        #[test]
        fn never_approves_a_name_the_node_is_not_entitled_to() {
            let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
                cases: 512,
                ..ProptestConfig::default()
            });
            let approved = std::cell::Cell::new(0);
            runner
                .run(&shape(), |shape| {
                    let der = shape.der();
                    let verdict = verdict_of(forged(&shape));
                    if verdict == Verdict::Approve {
                        approved.set(approved.get() + 1);
                        let names = go_names(&der);
                        prop_assert!(!names.is_empty(), "approved with no name Go would read");
                        for n in &names {
                            prop_assert!(entitled(n), "approved {n:?}");
                        }
                    }
                    Ok(())
                })
                .unwrap();
            // The property holds of approvals, so there must be some: a
            // generator whose every request is denied proves nothing.
            // (About 5 % are approved: some 25 of 512.)
            assert!(approved.get() > 0, "no generated request was approved");
        }
    }
}
