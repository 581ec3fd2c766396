use super::ranges::dns_matches;
use super::reserved::special;
use super::*;
use crate::source::csr::{CsrSpec, KeyAlg, pkcs10};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// The verdict on `csr`, given every Node by name and the cluster's own
/// names and addresses.
fn decide(
    csr: &CertificateSigningRequest,
    nodes: &BTreeMap<String, Node>,
    cluster: &Cluster,
    policy: &Policy,
) -> (Verdict, Facts) {
    decide_with(csr, &Nodes::new(nodes), cluster, policy)
}

/// How many addresses and names `index` holds for `nodes`.
fn entries(index: &Nodes, nodes: &BTreeMap<String, Node>) -> usize {
    let listed = nodes.keys().filter_map(|n| index.listed(n));
    listed.map(|l| l.ips.len() + l.dns.len()).sum()
}

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
        services: vec![],
        service_names: vec![],
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

mod attacks;
mod checks;
mod listed_addresses;

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
