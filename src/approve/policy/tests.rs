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
    let mut listed: Vec<(&str, &str)> = vec![("InternalIP", "10.0.0.1"), ("InternalIP", "fd00::1")];
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

/// Attack: a DNS name that an IPv4 reader takes for an address. glibc's
/// `inet_aton` and the WHATWG URL parser (browsers, Go's and Rust's URL
/// crates follow it for `http://HOST/`) read a host whose last label is
/// a number, decimal or `0x` hex, as IPv4: `0x7f000001` is 127.0.0.1,
/// `127.1` is 127.0.0.1. A node named so (a Node name is any DNS
/// subdomain) would get a certificate for the loopback address under a
/// DNS SAN, past every IP check.
#[test]
fn attack_dns_names_an_ipv4_reader_takes_for_an_address_are_denied() {
    let mut nodes = nodes();
    let (name, mut n) = node(
        "0x7f000001",
        &[("InternalIP", "10.0.0.40"), ("Hostname", "0x7f000001")],
    );
    n.status
        .as_mut()
        .and_then(|s| s.addresses.as_mut())
        .unwrap()
        .extend(
            ["0x0a000001.nodes.example", "n1.0x7f", "n1.0X7F", "n1.0x"]
                .iter()
                .map(|a| NodeAddress {
                    type_: "InternalDNS".into(),
                    address: (*a).into(),
                }),
        );
    nodes.insert(name, n);
    let mut own = kubelet("0x7f000001");
    own.ips = vec!["10.0.0.40".parse().unwrap()];
    let (v, _) = decide(&csr(&own), &nodes, &the_cluster(), &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("deny", Some(Check::Sans)),
        "a node named 0x7f000001 asking for its own name: {}",
        v.describe()
    );
    for extra in ["n1.0x7f", "n1.0X7F", "n1.0x"] {
        let mut a = kubelet("0x7f000001");
        a.dns = vec![extra.into()];
        a.ips = vec!["10.0.0.40".parse().unwrap()];
        let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &policy());
        assert_eq!(
            (v.label(), v.check()),
            ("deny", Some(Check::Sans)),
            "{extra}: {}",
            v.describe()
        );
    }
    // The control: a hex-looking first label is a name (only the last
    // label makes an IPv4 reader take it), and `0xg` is not hex.
    let mut a = kubelet("0x7f000001");
    a.dns = vec!["0x0a000001.nodes.example".into()];
    a.ips = vec!["10.0.0.40".parse().unwrap()];
    let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &policy());
    assert_eq!(
        v,
        Verdict::Approve,
        "the control is not refused for its shape: {}",
        v.describe()
    );
    assert_eq!(
        crate::x509::dns_name("api.0x7f"),
        Err("DNS name \"api.0x7f\" looks like an IP address; an IP is an IP SAN".into())
    );
    assert_eq!(crate::x509::dns_name("api.0xg"), Ok(()));
}

/// Attack: kubeadm's `apiServer.certSANs` (and, less often,
/// `controlPlaneEndpoint`) may be a wildcard: `*.api.example` makes the
/// API server's certificate valid for every name one label under
/// `api.example`. A node that lists such a name, under a suffix the
/// operator allows, must not get it: clients would take it for the API
/// server. Every name under the wildcard's base is reserved, at any
/// depth (fail closed), and so is the base's wildcard itself.
#[test]
fn attack_names_under_a_wildcard_cert_san_are_never_a_nodes() {
    let mut cluster = the_cluster();
    cluster.names.push((
        "*.api.nodes.example".into(),
        "one of the API server's certSANs".into(),
    ));
    cluster.names.push((
        "*.lb.nodes.example".into(),
        "kubeadm's controlPlaneEndpoint".into(),
    ));
    let mut nodes = nodes();
    let n1 = nodes.get_mut("n1").unwrap();
    n1.status
        .as_mut()
        .and_then(|s| s.addresses.as_mut())
        .unwrap()
        .extend(
            [
                "x.api.nodes.example",
                "a.b.api.nodes.example",
                "x.lb.nodes.example",
                "xapi.nodes.example",
            ]
            .iter()
            .map(|a| NodeAddress {
                type_: "InternalDNS".into(),
                address: (*a).into(),
            }),
        );
    for name in [
        "x.api.nodes.example",
        "X.API.nodes.example",
        "a.b.api.nodes.example",
        "x.lb.nodes.example",
    ] {
        let mut a = kubelet("n1");
        a.dns.push(name.into());
        let (v, _) = decide(&csr(&a), &nodes, &cluster, &policy());
        assert_eq!(
            (v.label(), v.check()),
            ("deny", Some(Check::DnsSan)),
            "{name}: {}",
            v.describe()
        );
        assert!(
            v.describe().contains("certSANs") || v.describe().contains("controlPlaneEndpoint"),
            "{}",
            v.describe()
        );
    }
    // The control: a name that only ends with the same letters is not
    // under the wildcard.
    let mut a = kubelet("n1");
    a.dns.push("xapi.nodes.example".into());
    let (v, _) = decide(&csr(&a), &nodes, &cluster, &policy());
    assert_eq!(v, Verdict::Approve, "the control: {}", v.describe());
}

/// Attack: a request of ~700 KB (kube-apiserver takes bodies up to ~3 MB)
/// is refused for its size before any parsing; one just under the cap is
/// read as usual (and refused for what it is).
#[test]
fn attack_an_oversized_request_is_denied_unparsed() {
    let mut over = csr(&kubelet("node-a"));
    over.spec.request.0.extend(vec![b'x'; 700 * 1024]);
    match verdict_of(over) {
        Verdict::Deny {
            check: Check::Request,
            message,
        } => assert!(
            message.contains(&format!("at most {MAX_REQUEST_BYTES} read")),
            "{message}"
        ),
        v => panic!("{v:?}"),
    }
    let mut under = csr(&kubelet("node-a"));
    let room = MAX_REQUEST_BYTES - under.spec.request.0.len();
    under.spec.request.0.extend(vec![b'\n'; room]);
    let verdict = verdict_of(under);
    assert!(
        !verdict.describe().contains("at most"),
        "a request within the cap is read: {verdict:?}"
    );
}
