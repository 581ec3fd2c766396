//! Attacks on the policy: what a compromised node would try, and
//! generated requests of odd shapes.

use super::*;

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
    let approved = not_denied_under_any_node_address(&embedded);
    assert!(approved.is_empty(), "not denied: {approved:#?}");
}

/// Of `addresses`, each listed by n1 and asked for by it with
/// --allow-any-node-address, those not denied (`ip-san`), with the
/// verdict; n1's request without them is approved (the control).
fn not_denied_under_any_node_address(addresses: &[&str]) -> Vec<String> {
    let mut listed: Vec<(&str, &str)> = vec![("InternalIP", "10.0.0.1"), ("InternalIP", "fd00::1")];
    listed.extend(addresses.iter().map(|a| ("InternalIP", *a)));
    let nodes: BTreeMap<String, Node> = [node("n1", &listed)].into_iter().collect();
    let any = Policy {
        node_cidrs: vec![],
        any_node_address: true,
        ..policy()
    };
    let (v, _) = decide(&csr(&kubelet("n1")), &nodes, &the_cluster(), &any);
    assert_eq!(v, Verdict::Approve, "the control: {}", v.describe());
    let mut approved = Vec::new();
    for addr in addresses {
        let mut a = kubelet("n1");
        a.ips.push(addr.parse().unwrap());
        let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &any);
        if (v.label(), v.check()) != ("deny", Some(Check::IpSan)) {
            approved.push(format!("{addr}: {}", v.describe()));
        }
    }
    approved
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
    assert!(matches!(
        crate::x509::dns_name("api.0x7f"),
        Err(crate::x509::X509Error::DnsNameIp { .. })
    ));
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

/// Attack: a Node named after a parent domain
/// (`ec2.internal`; anyone with a bootstrap token gets a client
/// certificate for any node name) must not get every node named under
/// it denied its own name, nor a name that node lists; and it gets
/// another node's exact name for itself no more than before.
#[test]
fn attack_a_node_named_after_a_parent_domain_denies_no_one() {
    let victim = "ip-10-0-0-1.ec2.internal";
    let nodes: BTreeMap<String, Node> = [
        node(
            victim,
            &[
                ("InternalIP", "10.0.0.1"),
                ("InternalIP", "fd00::1"),
                ("InternalDNS", "web.ec2.internal"),
            ],
        ),
        node(
            "ec2.internal",
            &[("InternalIP", "10.0.0.9"), ("InternalDNS", victim)],
        ),
        // A short name that is the first label of the victim's.
        node("ip-10-0-0-1", &[("InternalIP", "10.0.0.8")]),
    ]
    .into_iter()
    .collect();
    let policy = Policy {
        allowed_dns: vec!["*.ec2.internal".into()],
        ..policy()
    };
    let mut honest = kubelet(victim);
    honest.dns.push("web.ec2.internal".into());
    let (v, _) = decide(&csr(&honest), &nodes, &the_cluster(), &policy);
    assert_eq!(v, Verdict::Approve, "{}", v.describe());
    // The attacker asks for its victim's name, which it lists: never
    // approved; in dispute, as any Node's name another node lists, and
    // denied once it does not list it.
    let mut attack = kubelet("ec2.internal");
    attack.ips = vec!["10.0.0.9".parse().unwrap()];
    attack.dns.push(victim.into());
    let (v, _) = decide(&csr(&attack), &nodes, &the_cluster(), &policy);
    assert_eq!(
        (v.label(), v.check()),
        ("wait", Some(Check::DnsSan)),
        "{}",
        v.describe()
    );
    let mut unlisted = nodes.clone();
    unlisted.insert(
        node("ec2.internal", &[("InternalIP", "10.0.0.9")]).0,
        node("ec2.internal", &[("InternalIP", "10.0.0.9")]).1,
    );
    let (v, _) = decide(&csr(&attack), &unlisted, &the_cluster(), &policy);
    assert_eq!(
        (v.label(), v.check()),
        ("deny", Some(Check::DnsSan)),
        "{}",
        v.describe()
    );
    // A name that the victim lists is the victim's.
    let mut attack = kubelet("ec2.internal");
    attack.ips = vec!["10.0.0.9".parse().unwrap()];
    attack.dns.push("web.ec2.internal".into());
    let (v, _) = decide(&csr(&attack), &nodes, &the_cluster(), &policy);
    assert_eq!(v.label(), "deny", "{}", v.describe());
}

/// Attack: a Service naming a node's own address
/// (k3s ServiceLB, kube-vip, or any namespace user) must not get that
/// node's request denied: the address is in dispute, a person decides;
/// a Service address the node does not list stays denied.
#[test]
fn attack_a_service_naming_a_nodes_own_address_is_a_dispute_not_a_denial() {
    let mut cluster = the_cluster();
    cluster.services.push((
        "10.0.0.1".parse().unwrap(),
        "Service default/on-node-ip's external IP".into(),
    ));
    let (v, _) = decide(&csr(&kubelet("n1")), &nodes(), &cluster, &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("wait", Some(Check::IpSan)),
        "{}",
        v.describe()
    );
    assert!(v.describe().contains("on-node-ip"), "{}", v.describe());
    // A Service address the requester does not list: denied.
    cluster.services.push((
        "10.0.5.5".parse().unwrap(),
        "Service default/other's external IP".into(),
    ));
    let mut a = kubelet("n2");
    a.dns = vec!["n2".into()];
    a.ips = vec!["10.0.0.2".parse().unwrap(), "10.0.5.5".parse().unwrap()];
    let (v, _) = decide(&csr(&a), &nodes(), &cluster, &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("deny", Some(Check::IpSan)),
        "{}",
        v.describe()
    );
}

/// Attack, at a scale the suite affords: nodes listing thousands of names
/// each, and a request with 1,300 SANs they list, to keep the approver busy.
/// Every entry is indexed (a cap left the rest no one's), one per distinct
/// name or address a Node lists, so building is linear in what the Nodes list
/// and deciding costs a lookup per SAN; the listing nodes' own requests wait
/// for a person, and an honest node's request is approved while the hostile
/// state exists.
#[test]
fn attack_nodes_listing_thousands_of_names_cost_a_bounded_index() {
    let mut nodes = nodes();
    let names: Vec<String> = (0..5_000).map(|i| format!("h{i}.nodes.example")).collect();
    for g in 0..4 {
        let ip = format!("10.0.1.{g}");
        // Each lists its own address, then the same 5,000 names.
        let addrs: Vec<(&str, &str)> = std::iter::once(("InternalIP", ip.as_str()))
            .chain(names.iter().map(|n| ("InternalDNS", n.as_str())))
            .collect();
        let (name, node) = node(&format!("g{g}"), &addrs);
        nodes.insert(name, node);
    }
    let index = Nodes::new(&nodes);
    let listed: usize = nodes
        .values()
        .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
        .map(Vec::len)
        .sum();
    assert!(
        entries(&index, &nodes) == listed,
        "{} entries indexed for {listed} listed",
        entries(&index, &nodes),
    );
    let mut hostile = kubelet("g0");
    hostile.ips = vec!["10.0.1.0".parse().unwrap()];
    // Names the other hostile nodes list too, past any cap.
    hostile
        .dns
        .extend(names.iter().skip(1_000).take(1_300).cloned());
    let (v, _) = decide_with(&csr(&hostile), &index, &the_cluster(), &policy());
    assert_eq!(v.label(), "wait", "{}", v.describe());
    assert!(v.describe().contains("node \"g1\""), "{}", v.describe());
    // Its own name and address alone: it lists too many to be decided.
    hostile.dns.truncate(1);
    let (v, _) = decide_with(&csr(&hostile), &index, &the_cluster(), &policy());
    assert_eq!(v.label(), "wait", "{}", v.describe());
    assert!(
        v.describe().contains("5001 addresses"),
        "the count is named: {}",
        v.describe()
    );
    let (v, _) = decide_with(&csr(&kubelet("n1")), &index, &the_cluster(), &policy());
    assert_eq!(v, Verdict::Approve, "{}", v.describe());
}

/// Attack: an ExternalName Service's name (any
/// namespace user writes it) was approved to a node that listed it under
/// an --allowed-dns pattern. It is a Service's: denied to a node that does
/// not list it; in dispute (a person decides) for one that lists it or is
/// named so, so that naming a node's name in a Service gets nobody's
/// renewal denied.
#[test]
fn attack_an_external_name_services_name_is_never_a_nodes() {
    let mut cluster = the_cluster();
    for (name, svc) in [
        ("n1.nodes.example", "web"),
        ("db.nodes.example", "db"),
        ("n2", "shadow"),
    ] {
        cluster
            .service_names
            .push((name.into(), format!("Service prod/{svc}'s external name")));
    }
    // n1 lists n1.nodes.example, and the pattern covers it.
    let mut a = kubelet("n1");
    a.dns.push("n1.nodes.example".into());
    let (v, _) = decide(&csr(&a), &nodes(), &cluster, &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("wait", Some(Check::DnsSan)),
        "{}",
        v.describe()
    );
    assert!(v.describe().contains("prod/web"), "{}", v.describe());
    // n2 does not list db.nodes.example: denied, naming the Service.
    let mut a = kubelet("n2");
    a.dns = vec!["n2".into(), "db.nodes.example".into()];
    a.ips = vec!["10.0.0.2".parse().unwrap()];
    let (v, _) = decide(&csr(&a), &nodes(), &cluster, &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("deny", Some(Check::DnsSan)),
        "{}",
        v.describe()
    );
    assert!(v.describe().contains("prod/db"), "{}", v.describe());
    // A Service named after node n2: its own name is in dispute, not
    // denied.
    a.dns = vec!["n2".into()];
    let (v, _) = decide(&csr(&a), &nodes(), &cluster, &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("wait", Some(Check::DnsSan)),
        "{}",
        v.describe()
    );
}

/// Attack: a Teredo address (2001:0::/32) carries
/// an IPv4 address, the client's with its bits inverted: the attacker's
/// `…:3f57:fecd` is 192.168.1.50. Under --allow-any-node-address a node
/// that listed one got it, though every other IPv6 form of an IPv4
/// address was denied. Denied, whatever IPv4 address it carries.
#[test]
fn attack_teredo_addresses_are_refused_under_allow_any_node_address() {
    let teredo = [
        "2001:0:4136:e378:8000:63bf:3f57:fecd",
        // Client 127.0.0.1 (inverted: 80ff:fffe).
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
        "2001::1",
    ];
    let approved = not_denied_under_any_node_address(&teredo);
    assert!(approved.is_empty(), "not denied: {approved:#?}");
    // Not every 2001::/16 address: 2001:db8::/32 is not Teredo.
    assert!(special("2001:db8::1".parse().unwrap()).is_none());
}

/// Attack: an ISATAP address (RFC 5214: any /64
/// prefix, interface identifier `0000:5efe` or `0200:5efe` then an IPv4
/// address) routes, over a host's ISATAP tunnel, to the IPv4 address it
/// carries: another node's, or a reserved one. Go does not read it as that
/// IPv4 address (`net.IP.To4` only takes the mapped form), so a TLS client
/// dialing the IPv4 address never matches it, but one dialing the ISATAP
/// address reaches the IPv4 host; kubelet takes any address that is not
/// loopback, link-local, multicast or unspecified as a node IP. Under
/// --allow-any-node-address a node that listed one got it; denied now as
/// Teredo is, with the group bit (`0100`, `0300`) too. 6to4 (2002::/16)
/// was already denied.
#[test]
fn attack_isatap_addresses_are_refused_under_allow_any_node_address() {
    let isatap = [
        "2001:db8::5efe:c0a8:10a",
        "2001:db8::200:5efe:c0a8:10a",
        "fd00:1::200:5efe:7f00:1",
        "fe80::5efe:c0a8:10a",
        "2001:db8:1:2:100:5efe:a00:1",
        "2001:db8:1:2:300:5efe:a00:1",
        "2002:c0a8:10a::1",
    ];
    let approved = not_denied_under_any_node_address(&isatap);
    assert!(approved.is_empty(), "not denied: {approved:#?}");
    // Controls: other interface identifiers are not ISATAP.
    for other in [
        "2001:db8::5eff:c0a8:10a",
        "2001:db8::400:5efe:c0a8:10a",
        "2001:db8::1:5efe:c0a8:10a",
        "2001:db8:0:5efe::1",
    ] {
        assert!(special(other.parse().unwrap()).is_none(), "{other}");
    }
}
