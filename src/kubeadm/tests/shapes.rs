//! A current certificate the node's CA issued with kubeadm's subject and
//! names is kept in place of kubeadm's backup only when it is what
//! certsync issues for that mapping (the ninth review, F3: each shape
//! below was kept, and the node broke or held a sub-CA for a century).

use super::races::{node_keeping_a_pair, node_keeping_admin_conf, pair_in};
use super::revert::{CA, kubeadm_params, kubeconfig_with, pair_from, revert_options};
use super::*;

/// A change to a kubeadm-shaped leaf.
type Shape = fn(&mut rcgen::CertificateParams);

/// A year from 2036 on, whatever today is: not valid yet.
fn from_2036(p: &mut rcgen::CertificateParams) {
    let at = |t| time::OffsetDateTime::from_unix_timestamp(t).expect("time");
    // 2036-11-22 12:22:02Z and a year on.
    p.not_before = at(2_110_969_322);
    p.not_after = at(2_142_505_322);
}

fn ca_true(p: &mut rcgen::CertificateParams) {
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages.push(rcgen::KeyUsagePurpose::KeyCertSign);
}

#[tokio::test]
async fn attack_a_ca_signed_pair_with_kubeadms_names_but_another_shape_is_never_kept() {
    let cases: [(&str, Shape, &str); 8] = [
        (
            "notBefore in 2036",
            from_2036,
            "it is not valid before 2036-11-22 12:22Z",
        ),
        ("CA:TRUE", ca_true, "it is a CA certificate (CA:TRUE)"),
        (
            "codeSigning only",
            |p| p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning],
            "its extended key usage (codeSigning) is not kubeadm's (serverAuth)",
        ),
        (
            "cRLSign only",
            |p| p.key_usages = vec![rcgen::KeyUsagePurpose::CrlSign],
            "its key usage (",
        ),
        (
            "an unknown critical extension",
            |p| {
                let mut e = rcgen::CustomExtension::from_oid_content(
                    &[1, 3, 6, 1, 4, 1, 99999, 1],
                    vec![5, 0],
                );
                e.set_criticality(true);
                p.custom_extensions.push(e);
            },
            "it has a critical extension kubeadm's has not (1.3.6.1.4.1.99999.1)",
        ),
        (
            "100 years",
            |p| p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(36_500),
            "it lasts 36500 days, longer than certsync's lifetime for it (365 days)",
        ),
        (
            "name constraints",
            |p| {
                p.name_constraints = Some(rcgen::NameConstraints {
                    permitted_subtrees: vec![rcgen::GeneralSubtree::DnsName("example".into())],
                    excluded_subtrees: Vec::new(),
                })
            },
            "it has name constraints",
        ),
        (
            "longer than the year certsync's configuration gives it",
            |p| p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(400),
            "it lasts 400 days, longer than certsync's lifetime for it (365 days)",
        ),
    ];
    // Every shape is tried, and every one kept is named.
    let mut kept = Vec::new();
    for (what, shape, why) in cases {
        let (dir, kubeadms, _) = node_keeping_a_pair();
        let d = dir.path();
        let mut p = kubeadm_params(time::Duration::days(300));
        shape(&mut p);
        let (crt, key) = pair_from(p, Some(&CA.1));
        std::fs::write(d.join("pki/apiserver.crt"), &crt).expect("crt");
        std::fs::write(d.join("pki/apiserver.key"), &key).expect("key");
        let out = revert(&revert_options(d)).await.expect("revert");
        let said = "/etc/kubernetes/pki/apiserver.crt and .key: keeping kubeadm's backup (until ";
        if !(out.contains(said) && out.contains(why) && pair_in(d) == kubeadms) {
            kept.push(format!("{what}: {why:?} not in\n{out}"));
        }
    }
    assert!(kept.is_empty(), "{}", kept.join("\n"));

    // A second certificate after the leaf (the leaf as certsync issues it).
    let (dir, kubeadms, current) = node_keeping_a_pair();
    let d = dir.path();
    let extra = pair_from(kubeadm_params(time::Duration::days(300)), Some(&CA.1)).0;
    std::fs::write(d.join("pki/apiserver.crt"), format!("{}{extra}", current.0)).expect("crt");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        out.contains("not exactly one certificate (2 PEM blocks; exactly one is allowed)"),
        "{out}"
    );
    assert_eq!(pair_in(d), kubeadms);

    // The same pair is kept when certsync's configuration gives the
    // mapping that long a lifetime (as `adopt --set lifetime=` writes it).
    let (dir, _, _) = node_keeping_a_pair();
    let d = dir.path();
    let long = pair_from(kubeadm_params(time::Duration::days(400)), Some(&CA.1));
    std::fs::write(d.join("pki/apiserver.crt"), &long.0).expect("crt");
    std::fs::write(d.join("pki/apiserver.key"), &long.1).expect("key");
    std::fs::write(
        host(d, plan::CONFIG),
        "mappings:\n- name: apiserver\n  update-pair: /etc/kubernetes/pki/apiserver\n  lifetime: 500d\n",
    )
    .expect("config");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.contains("keeping certsync's (until "), "{out}");
    assert_eq!(pair_in(d), long);
}

#[tokio::test]
async fn attack_an_admin_conf_with_another_shape_of_client_certificate_is_never_kept() {
    // The same rules for the client certificate in a kubeconfig: CA:TRUE
    // or valid only from 2036 (root's kubectl refused) means kubeadm's.
    let shapes: [(Shape, &str); 3] = [
        (ca_true, "it is a CA certificate (CA:TRUE)"),
        (from_2036, "it is not valid before 2036-11-22 12:22Z"),
        (
            |p| p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(300),
            "it lasts 300 days, longer than certsync's lifetime for it (10m)",
        ),
    ];
    let mut kept = Vec::new();
    for (i, (shape, why)) in shapes.into_iter().enumerate() {
        let (dir, _, kubeadms) = node_keeping_admin_conf();
        let d = dir.path();
        let mut p = kubeadm_params(time::Duration::days(300));
        shape(&mut p);
        std::fs::write(
            d.join("admin.conf"),
            kubeconfig_with(pair_from(p, Some(&CA.1))),
        )
        .expect("write");
        if i == 2 {
            // adopted with `--set lifetime=10m`: a 300-day pair is not certsync's.
            std::fs::write(
                host(d, plan::CONFIG),
                "mappings:\n- update-kubeconfig: /etc/kubernetes/admin.conf\n  lifetime: 10m\n",
            )
            .expect("config");
        }
        let out = revert(&revert_options(d)).await.expect("revert");
        let said = "/etc/kubernetes/admin.conf: keeping kubeadm's backup (until ";
        let left = std::fs::read(d.join("admin.conf")).expect("read");
        if !(out.contains(said) && out.contains(why) && left == kubeadms) {
            kept.push(format!("{why:?} not in\n{out}"));
        }
    }
    assert!(kept.is_empty(), "{}", kept.join("\n"));
}

/// The ninth review's re-attack, G3: a pair signed with SHA-1 by the
/// node's CA, otherwise kubeadm's, was kept, and Go's clients refused it
/// (`insecure algorithm SHA1-RSA`). Another signature algorithm than
/// kubeadm's backup's is never kept (rcgen signs no SHA-1: the OID of
/// ecdsa-with-SHA256 is edited to ecdsa-with-SHA384, the same length, in
/// both places; shape() judges the shape, the CA's signature is judged
/// before it).
#[test]
fn attack_another_signature_algorithm_than_kubeadms_is_never_kept() {
    let kubeadms = rcgen::generate_simple_self_signed(vec!["kubernetes".into()])
        .expect("cert")
        .cert;
    let der = kubeadms.der().to_vec();
    let (sha256, sha384) = (
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02],
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03],
    );
    let mut edited = der.clone();
    let mut n = 0;
    while let Some(at) = edited.windows(8).position(|w| w == sha256) {
        edited[at..at + 8].copy_from_slice(&sha384);
        n += 1;
    }
    assert_eq!(n, 2, "the algorithm in the TBS and outside it");
    // rcgen's default validity runs to 4096: lifetime no limit here.
    let no_limit = i64::MAX / 4;
    let pem = |d: &[u8]| crate::bundle::certificate_pem(d).into_bytes();
    assert_eq!(
        super::super::kept::shape(&pem(&der), &pem(&der), no_limit),
        Ok(()),
        "the control: kubeadm's own shape is kept"
    );
    let e = super::super::kept::shape(&pem(&edited), &pem(&der), no_limit).unwrap_err();
    assert!(
        e.contains("signed with 1.2.840.10045.4.3.3, not kubeadm's 1.2.840.10045.4.3.2"),
        "{e}"
    );
}
