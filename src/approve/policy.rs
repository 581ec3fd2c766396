//! The kubelet-serving policy: a pure function from a CSR, the Nodes and
//! the operator's policy flags to a verdict. No I/O, no clock.
//!
//! Approve only when every check holds; deny when one is definitely
//! violated, naming it; wait when the answer depends on a Node that is
//! not there yet (or does not list the address yet). The checks, in the
//! order they are made:
//!
//! 1. `requester`: `spec.username` is `system:node:NAME` and `spec.groups`
//!    holds `system:nodes` (both set by the API server from how the kubelet
//!    authenticated, never by the kubelet);
//! 2. `request`: `spec.request` is one PEM `CERTIFICATE REQUEST`;
//! 3. `key`: RSA ≥ 2048 bits, ECDSA P-256 or P-384, or Ed25519;
//! 4. `signature`: its signature verifies with its own public key;
//! 5. `subject`: exactly `CN=system:node:NAME` (the requester's NAME) and
//!    `O=system:nodes`, nothing else;
//! 6. `usages`: exactly digital signature and server auth, plus key
//!    encipherment only for an RSA key (never client auth);
//! 7. `sans`: DNS names and IP addresses only (no email, URI or other);
//! 8. `expiration`: `expirationSeconds`, when set, within the maximum;
//! 9. `ip-san` / `dns-san`: a SAN that another Node lists is denied;
//! 10. `node`: wait while Node NAME does not exist or has no addresses;
//! 11. `ip-san` / `dns-san`: every SAN is one of Node NAME's addresses
//!     (IPs compared parsed, so `fd00::1` and `fd00:0:0::1` are one; DNS
//!     case-insensitively), or allowed by `--allowed-cidr` /
//!     `--allowed-dns`; otherwise wait (the Node may not list it yet).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use crate::source::csr::{KeyAlg, ip_of};

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

/// The operator's widening and limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// DNS names a node may have beyond its Node's addresses: exact names,
    /// or `*.SUFFIX` for any name directly or deeper under SUFFIX.
    pub allowed_dns: Vec<String>,
    /// IP ranges a node may have beyond its Node's addresses.
    pub allowed_cidrs: Vec<Cidr>,
    /// The longest `expirationSeconds` approved.
    pub max_expiration: Option<Duration>,
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
        Ok(Self { addr, bits })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

impl Cidr {
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
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// What a CSR asks for, read once (for the verdict and for `csr review`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// NAME of a `system:node:NAME` requester.
    pub node: Option<String>,
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

/// The verdict on `csr`, given every Node by name.
pub fn decide(
    csr: &CertificateSigningRequest,
    nodes: &BTreeMap<String, Node>,
    policy: &Policy,
) -> (Verdict, Facts) {
    let mut facts = Facts {
        usages: csr.spec.usages.clone().unwrap_or_default(),
        ..Facts::default()
    };
    let verdict = check_all(csr, nodes, policy, &mut facts);
    (verdict, facts)
}

fn check_all(
    csr: &CertificateSigningRequest,
    nodes: &BTreeMap<String, Node>,
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
            format!("requester {username} is not in group {NODES_GROUP}"),
        );
    }

    // 2-4. the request, its key and its signature.
    let der = match x509_parser::pem::parse_x509_pem(&csr.spec.request.0) {
        Ok((_, pem)) if pem.label == "CERTIFICATE REQUEST" => pem.contents,
        _ => {
            return deny(
                Check::Request,
                "spec.request is not a PEM CERTIFICATE REQUEST",
            );
        }
    };
    let req = match X509CertificationRequest::from_der(&der) {
        Ok((_, req)) => req,
        Err(e) => return deny(Check::Request, format!("the request does not parse: {e}")),
    };
    let spki = &req.certification_request_info.subject_pki;
    let alg = KeyAlg::of_spki(spki);
    facts.key = alg.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
    let mut sans_ok = true;
    for ext in req.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for n in &san.general_names {
                match n {
                    GeneralName::DNSName(d) => {
                        facts.dns.push(d.trim_end_matches('.').to_ascii_lowercase())
                    }
                    GeneralName::IPAddress(b) => match ip_of(b) {
                        Some(ip) => facts.ips.push(canonical(ip)),
                        None => sans_ok = false,
                    },
                    _ => sans_ok = false,
                }
            }
        }
    }
    // The key before its signature: the verifier (ring) refuses weak RSA
    // keys outright, which would read as a forged signature.
    match alg {
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
    if req.verify_signature().is_err() {
        return deny(
            Check::Signature,
            "the request's signature does not verify with its public key",
        );
    }

    // 5. subject: exactly CN=system:node:NAME, O=system:nodes.
    let subject = &req.certification_request_info.subject;
    let mut cn = Vec::new();
    let mut o = Vec::new();
    let mut other = 0;
    for attr in subject.iter_attributes() {
        let value = attr.as_str().unwrap_or_default().to_owned();
        match attr.attr_type().to_id_string().as_str() {
            "2.5.4.3" => cn.push(value),
            "2.5.4.10" => o.push(value),
            _ => other += 1,
        }
    }
    if cn != [username] || o != [NODES_GROUP] || other > 0 {
        return deny(
            Check::Subject,
            format!("subject is {subject}, not exactly CN={username}, O={NODES_GROUP}"),
        );
    }

    // 6. usages.
    let rsa = matches!(alg, Some(KeyAlg::Rsa(_)));
    let mut usages: Vec<&str> = facts.usages.iter().map(String::as_str).collect();
    usages.sort_unstable();
    let exact = ["digital signature", "server auth"];
    let with_ke = ["digital signature", "key encipherment", "server auth"];
    if usages != exact && !(rsa && usages == with_ke) {
        let allowed = if rsa {
            "digital signature and server auth, optionally key encipherment (RSA)"
        } else {
            "exactly digital signature and server auth"
        };
        return deny(
            Check::Usages,
            format!(
                "usages {:?}; a kubelet serving certificate has {allowed}",
                facts.usages
            ),
        );
    }

    // 7. SAN kinds.
    if !sans_ok {
        return deny(
            Check::Sans,
            "the request names an email address, URI or other SAN kind; only DNS names and IP addresses are allowed",
        );
    }

    // 8. requested lifetime.
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

    // 9. a SAN another Node lists is definitely not this node's.
    for (other, node) in nodes.iter().filter(|(n, _)| n.as_str() != name) {
        let (ips, dns) = addresses(node);
        if let Some(ip) = facts.ips.iter().find(|ip| ips.contains(ip)) {
            return deny(
                Check::IpSan,
                format!("IP address {ip} belongs to node {other}"),
            );
        }
        if let Some(d) = facts.dns.iter().find(|d| dns.contains(d)) {
            return deny(
                Check::DnsSan,
                format!("DNS name {d} belongs to node {other}"),
            );
        }
    }

    // 10. the Node itself.
    let Some(node) = nodes.get(name) else {
        return wait(Check::Node, format!("node {name} does not exist (yet)"));
    };
    let (ips, dns) = addresses(node);
    if ips.is_empty() && dns.is_empty() {
        return wait(Check::Node, format!("node {name} lists no addresses (yet)"));
    }

    // 11. every SAN is the node's, or allowed by policy.
    if let Some(ip) = facts
        .ips
        .iter()
        .find(|ip| !ips.contains(ip) && !policy.allowed_cidrs.iter().any(|c| c.contains(**ip)))
    {
        return wait(
            Check::IpSan,
            format!(
                "IP address {ip} is not among node {name}'s addresses (yet) nor in --allowed-cidr"
            ),
        );
    }
    if let Some(d) = facts
        .dns
        .iter()
        .find(|d| !dns.contains(d) && !policy.allowed_dns.iter().any(|p| dns_matches(p, d)))
    {
        return wait(
            Check::DnsSan,
            format!("DNS name {d} is not among node {name}'s addresses (yet) nor in --allowed-dns"),
        );
    }
    Verdict::Approve
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
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            lines.join("\n")
        )
        .into_bytes()
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
            let (_, block) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
            let mut der = block.contents;
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

    fn cluster() -> BTreeMap<String, Node> {
        [
            node(
                "n1",
                &[
                    ("InternalIP", "10.0.0.1"),
                    // The same address as the request's fd00::1, spelled out.
                    ("InternalIP", "fd00:0:0:0:0:0:0:1"),
                    ("Hostname", "N1"),
                ],
            ),
            node("n2", &[("InternalIP", "10.0.0.2"), ("Hostname", "n2")]),
        ]
        .into_iter()
        .collect()
    }

    /// One row per check: a request that fails exactly that check, and
    /// the verdict it gets; the first row passes everything.
    #[test]
    fn every_check_has_a_request_that_fails_it() {
        let email = {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(vec!["n1".to_owned()]).unwrap();
            p.distinguished_name = rcgen::DistinguishedName::new();
            p.distinguished_name
                .push(rcgen::DnType::CommonName, "system:node:n1");
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, "system:nodes");
            p.subject_alt_names
                .push(rcgen::SanType::Rfc822Name("root@n1".try_into().unwrap()));
            p.serialize_request(&key)
                .unwrap()
                .pem()
                .unwrap()
                .into_bytes()
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
                Box::new(move |a| a.pem = Some(email.clone())),
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
                "a node that does not exist yet",
                Box::new(|a| {
                    a.username = "system:node:n3".into();
                    a.cn = Some("system:node:n3".into());
                    a.dns = vec!["n3".into()];
                    a.ips = vec!["10.0.0.3".parse().unwrap()];
                }),
                "wait",
                Some(Check::Node),
            ),
            (
                "an IP the node does not list",
                Box::new(|a| a.ips.push("192.168.9.9".parse().unwrap())),
                "wait",
                Some(Check::IpSan),
            ),
            (
                "a name the node does not list",
                Box::new(|a| a.dns.push("n1.unknown.example".into())),
                "wait",
                Some(Check::DnsSan),
            ),
        ];
        let policy = Policy {
            max_expiration: Some(Duration::from_secs(30 * 86_400)),
            ..Policy::default()
        };
        let nodes = cluster();
        for (what, edit, want, check) in rows {
            let mut a = kubelet("n1");
            edit(&mut a);
            let (verdict, _) = decide(&csr(&a), &nodes, &policy);
            assert_eq!(
                (verdict.label(), verdict.check()),
                (want, check),
                "{what}: {}",
                verdict.describe()
            );
        }
    }

    #[test]
    fn policy_flags_widen_the_node_addresses() {
        let mut a = kubelet("n1");
        a.ips.push("192.168.9.9".parse().unwrap());
        a.dns.push("n1.nodes.example".into());
        let nodes = cluster();
        let policy = Policy {
            allowed_cidrs: vec!["192.168.0.0/16".parse().unwrap()],
            allowed_dns: vec!["*.nodes.example".into()],
            ..Policy::default()
        };
        let (verdict, facts) = decide(&csr(&a), &nodes, &policy);
        assert_eq!(verdict, Verdict::Approve, "{}", verdict.describe());
        assert_eq!(facts.node.as_deref(), Some("n1"));
        assert_eq!(facts.key, "ecdsa-p256");
        // A pattern matches names under it, not the suffix itself.
        assert!(!dns_matches("*.nodes.example", "nodes.example"));
        assert!(dns_matches("*.nodes.example", "a.b.nodes.example"));
        // A node without addresses yet: wait.
        let bare: BTreeMap<String, Node> = [node("n1", &[])].into_iter().collect();
        let (verdict, _) = decide(&csr(&kubelet("n1")), &bare, &Policy::default());
        assert_eq!(verdict.check(), Some(Check::Node));
        assert_eq!(verdict.label(), "wait");
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
}
