//! One request per check of the policy, and forged requests of every
//! shape the checks must deny.

use super::*;

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
            "another node's exact name",
            Box::new(|a| a.dns.push("n2".into())),
            "deny",
            Some(Check::DnsSan),
        ),
        (
            "a name another node lists",
            Box::new(|a| a.dns.push("n2-alias.nodes.example".into())),
            "deny",
            Some(Check::DnsSan),
        ),
        (
            // In dispute (wait), not denied: a node may choose its name
            // to match the first label of another's alias.
            "another node's name under the suffix, listed by this node",
            Box::new(|a| a.dns.push("n2.nodes.example".into())),
            "wait",
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
