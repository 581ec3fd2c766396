//! The CAs' end on kubeadm's own clock: a node whose CAs last minutes
//! (`caCertificateValidityPeriod`), adopted, adopted again once a renewal
//! is due (the manifests change only in their trust annotation), run past
//! every CA's original end. Before adopt renewed the CAs, nine minutes past that end every API
//! request failed and two components had restarted. Now the API answers
//! through admin.conf, writes go through, the scheduler's and
//! controller-manager's leases are renewed, a CSR is signed and chains to
//! pki/ca.crt, no component restarts after adoption, and
//! `kubeadm certs check-expiration` shows the renewed CAs, and
//! `kube-public/cluster-info` (join discovery) holds the renewed CA,
//! signed for a bootstrap token, and verifies the API server, and a node
//! joins and serves; then revert
//! restores kubeadm's manifests byte for byte (it restored the first
//! adoption's, naming files it had moved away, before), and the node
//! still serves. Needs root and the realkube tools, as
//! tests/kubeadm.rs does (skips without them, fails under `CI=true`).

mod support;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use support::ca_end::{kubectl_out, serves_past_the_ca_end};
use support::certsync_bin;
use support::kubeadm_node::{
    Node, containers, kubeadm_cmd, kubectl, pem_not_after, ready, readyz, readyz_at, realkube,
    settled, unix_now, wait_long,
};

/// kubeadm's CAs' lifetime on the node: long enough to bring it up and
/// adopt it, short enough to wait for. kubeadm's other certificates last
/// two days (kubeadm warns that they outlast their CA): revert then hands
/// them back as they are, where a CA of minutes could issue nothing that
/// lasts the day revert requires.
const CA_VALIDITY: &str = "10m";
/// [`CA_VALIDITY`] in seconds: each renewal lasts as long again from its
/// adopt, and is due once less than 90% of it is left.
const CA_SECS: i64 = 600;

fn cert(pem: &[u8]) -> Vec<u8> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).expect("PEM");
    p.contents
}

fn not_after(der: &[u8]) -> i64 {
    let (_, c) = x509_parser::parse_x509_certificate(der).expect("certificate");
    c.validity().not_after.timestamp()
}

/// `kube-public/cluster-info`'s kubeconfig and its signatures
/// (`jws-kubeconfig-ID`, the bootstrap signer's), by token id.
fn cluster_info(kubectl: &Path, admin: &Path) -> (String, Vec<(String, String)>) {
    let text = kubectl_out(
        kubectl,
        admin,
        &[
            "get",
            "configmap",
            "cluster-info",
            "-n",
            "kube-public",
            "-o",
            "json",
        ],
    )
    .expect("cluster-info");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let data = v["data"].as_object().expect("data");
    let kubeconfig = data["kubeconfig"].as_str().expect("kubeconfig").to_owned();
    let jws = data
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.strip_prefix("jws-kubeconfig-")?.to_owned(),
                v.as_str()?.to_owned(),
            ))
        })
        .collect();
    (kubeconfig, jws)
}

/// The certificates (DER) of cluster-info's kubeconfig's CA data.
fn cluster_info_cas(kubeconfig: &str) -> Vec<Vec<u8>> {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(kubeconfig).expect("yaml");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(
            v["clusters"][0]["cluster"]["certificate-authority-data"]
                .as_str()
                .expect("CA data"),
        )
        .expect("base64");
    x509_parser::pem::Pem::iter_from_buffer(&pem)
        .map(|p| p.expect("PEM").contents)
        .collect()
}

/// Whether `jws` (detached, HS256) signs `kubeconfig` with the bootstrap
/// token secret, as `kubeadm join` discovery checks it.
fn signed_for(kubeconfig: &str, jws: &str, secret: &str) -> bool {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = jws.split('.');
    let (Some(header), Some(""), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let input = format!("{header}.{}", b64.encode(kubeconfig));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    b64.decode(sig)
        .is_ok_and(|sig| ring::hmac::verify(&key, input.as_bytes(), &sig).is_ok())
}

#[test]
fn a_node_adopted_before_its_cas_end_serves_past_that_end_with_no_restart() {
    let Some(realkube) = realkube() else { return };
    // A node joins after the old end (addresses below kubeadm_ha's).
    let node = Node::up_to_join(&realkube, "caend", 150, Some("48h"), Some(CA_VALIDITY));
    let image = format!("certsync={}", certsync_bin());
    let runner = ["--", "--image", image.as_str()];
    let etc = node.etc();
    let kubectl = kubectl(&realkube);
    let admin = etc.join("admin.conf");
    let cas = ["pki/ca.crt", "pki/front-proxy-ca.crt", "pki/etcd/ca.crt"];
    let originals: Vec<Vec<u8>> = cas
        .iter()
        .map(|c| cert(&std::fs::read(etc.join(c)).expect("CA")))
        .collect();
    let ca_end = originals.iter().map(|c| not_after(c)).max().expect("CAs");
    assert!(
        ca_end - unix_now() < CA_SECS + 60,
        "kubeadm's CAs last {CA_VALIDITY}"
    );

    let manifests = |etc: &std::path::Path| -> Vec<Vec<u8>> {
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ]
        .iter()
        .map(|c| std::fs::read(etc.join(format!("manifests/{c}.yaml"))).expect("manifest"))
        .collect()
    };
    let kubeadms_manifests = manifests(&etc);

    // Adopted with the defaults half-way through the CAs' span (a renewal
    // is due once less than 90% of it is left; this late, the renewal,
    // which lasts the span again from now, ends well after the old one):
    // every CA renewed with its own key.
    let wait = ca_end - CA_SECS / 2 - unix_now();
    if wait > 0 {
        std::thread::sleep(Duration::from_secs(wait as u64));
    }
    let before = containers(&node);
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--image", "certsync"]);
    assert!(ok, "{text}");
    eprintln!("{text}");
    for c in ["ca", "front-proxy-ca", "etcd-ca"] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{c} (")) && l.contains("renewed now")),
            "{c} not renewed:\n{text}"
        );
    }
    for (c, old) in cas.iter().zip(&originals) {
        let renewed = cert(&std::fs::read(etc.join(c)).expect("CA"));
        let (_, r) = x509_parser::parse_x509_certificate(&renewed).expect("renewed");
        let (_, o) = x509_parser::parse_x509_certificate(old).expect("old");
        assert_eq!(r.subject().as_raw(), o.subject().as_raw(), "{c}");
        assert_eq!(r.public_key().raw, o.public_key().raw, "{c}: its own key");
        assert!(
            not_after(&renewed) > ca_end + CA_SECS / 3,
            "{c} outlasts the old one"
        );
    }
    let fresh_since = |before: &[(String, u64, u64)]| {
        wait_long(
            "certsync's pod and the four components",
            Duration::from_secs(240),
            || {
                // Every component on its new manifest (a new pod, a new pid).
                let all = settled(&node, 5)?;
                let fresh = all.iter().all(|(name, pid, _)| {
                    name.starts_with("certsync-")
                        || before.iter().all(|(n, p, _)| n != name || p != pid)
                });
                (fresh
                    && all.iter().any(|(n, _, _)| n.starts_with("certsync-"))
                    && ready(&kubectl, &admin))
                .then_some(all)
            },
        )
    };
    let after_first = fresh_since(&before);
    // Join discovery trusts the renewed CA: cluster-info holds it, and the
    // bootstrap signer signed that content for a token made now.
    assert!(
        text.contains("updated ConfigMap kube-public/cluster-info"),
        "{text}"
    );
    let token = String::from_utf8_lossy(&node.sh("kubeadm", &["token", "create"]).stdout)
        .trim()
        .to_owned();
    let (id, secret) = token.split_once('.').expect("a token id.secret");
    let renewed_ca = cert(&std::fs::read(etc.join("pki/ca.crt")).expect("ca"));
    wait_long(
        "cluster-info signed for the new token with the renewed CA",
        Duration::from_secs(60),
        || {
            let (kubeconfig, jws) = cluster_info(&kubectl, &admin);
            let cas = cluster_info_cas(&kubeconfig);
            (cas.contains(&renewed_ca)
                && cas.contains(&originals[0])
                && jws
                    .iter()
                    .any(|(i, j)| i == id && signed_for(&kubeconfig, j, secret)))
            .then_some(())
        },
    );
    // A renewal comes due again (a tenth of the span later): adopt renews
    // the CAs of an adopted node, whose manifests change only in their
    // trust annotation; revert must still restore kubeadm's manifests
    // (before, it restored this adoption's from the newest backup).
    // Due once less than 90% of the span is left.
    let due = pem_not_after(&std::fs::read(etc.join("pki/ca.crt")).expect("ca")) - CA_SECS * 9 / 10;
    let wait = due - unix_now() + 5;
    if wait > 0 {
        std::thread::sleep(Duration::from_secs(wait as u64));
    }
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--image", "certsync"]);
    assert!(ok, "{text}");
    eprintln!("{text}");
    assert!(text.contains("renewed now"), "{text}");
    assert!(
        text.contains("stopped the previous certsync pod"),
        "a renewal replaces files the running pod mounts read-only:\n{text}"
    );
    let settled_after_adopt = fresh_since(&after_first);
    // status names the date by which what is off the node must trust the
    // renewal: the end of the certificate kept beside it.
    let (_, status) = kubeadm_cmd(&node, &["status"]);
    assert!(
        status.contains("the earlier certificate beside it ends"),
        "{status}"
    );
    // ...and the textfile has a series an alert fires on: this node's
    // kubelet.conf trusts only the certificate that ends.
    let (_, textfile) = kubeadm_cmd(&node, &["status", "-o", "prometheus"]);
    assert!(
        textfile.contains("certsync_kubeadm_status_warning{kind=\"kubelet-conf\"} 1"),
        "{textfile}"
    );

    // Past every CA's original end.
    let wait = ca_end - unix_now() + 30;
    if wait > 0 {
        std::thread::sleep(Duration::from_secs(wait as u64));
    }
    if let Err(e) = readyz(&kubectl, &admin) {
        panic!("the API through admin.conf past the CAs' end: {e}");
    }
    serves_past_the_ca_end(&kubectl, &admin, &node, "after-the-ca-end");
    // Nothing restarted since adoption settled.
    assert_eq!(
        containers(&node),
        settled_after_adopt,
        "no component restarted past the CAs' end"
    );
    // cluster-info's kubeconfig as it is (its server and CA data), with
    // admin.conf's client pair (kubectl prompts for a password without
    // one): Go (kubectl) verifies the API server past the old
    // certificate's end with that CA data.
    let (kubeconfig, _) = cluster_info(&kubectl, &admin);
    let mut joining: serde_yaml_ng::Value = serde_yaml_ng::from_str(&kubeconfig).expect("yaml");
    let admin_conf: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&admin).expect("admin.conf"))
            .expect("yaml");
    joining["clusters"][0]["name"] = "discovery".into();
    joining["users"] = admin_conf["users"].clone();
    let user = admin_conf["users"][0]["name"].clone();
    let mut context = serde_yaml_ng::Mapping::new();
    context.insert("cluster".into(), "discovery".into());
    context.insert("user".into(), user);
    let mut named = serde_yaml_ng::Mapping::new();
    named.insert("name".into(), "discovery".into());
    named.insert("context".into(), context.into());
    joining["contexts"] = serde_yaml_ng::Value::Sequence(vec![named.into()]);
    joining["current-context"] = "discovery".into();
    let joining_file = node.dir.join("cluster-info.conf");
    std::fs::write(
        &joining_file,
        serde_yaml_ng::to_string(&joining).expect("yaml"),
    )
    .expect("kubeconfig");
    kubectl_out(&kubectl, &joining_file, &["get", "--raw", "/version"])
        .unwrap_or_else(|e| panic!("cluster-info's kubeconfig past the old end: {e}"));
    // And a node joins (`kubeadm join --control-plane`'s phases, discovery
    // by token and CA key hash through cluster-info) and serves.
    let joined = Node::join(&realkube, "caend2", &node, &runner);
    wait_long(
        "the joined node's API server",
        Duration::from_secs(180),
        || {
            readyz_at(
                &kubectl,
                &admin,
                Some(&format!("https://{}:6443", joined.ip)),
            )
            .ok()
        },
    );
    // status: the one thing left is this node's kubelet.conf (what the
    // kubelet trusts has ended); done as the guide says, healthy.
    let (ok, status) = kubeadm_cmd(&node, &["status"]);
    eprintln!("{status}");
    assert!(
        status.contains("in the trust bundle components load at start"),
        "{status}"
    );
    let problems: Vec<&str> = status
        .lines()
        .filter(|l| l.starts_with("problem"))
        .collect();
    assert!(
        !ok && problems.len() == 1 && problems[0].contains("kubelet.conf trusts only"),
        "{status}"
    );
    let kubelet = etc.join("kubelet.conf");
    let mut conf: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubelet).expect("kubelet.conf"))
            .expect("yaml");
    conf["clusters"][0]["cluster"]["certificate-authority-data"] =
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(etc.join("pki/ca-bundle.crt")).expect("bundle"))
            .into();
    std::fs::write(&kubelet, serde_yaml_ng::to_string(&conf).expect("yaml")).expect("write");
    let (ok, status) = kubeadm_cmd(&node, &["status"]);
    assert!(ok, "status healthy past the CAs' end:\n{status}");

    // Revert: kubeadm's manifests trust pki/etcd/ca.crt, the renewed one.
    let (ok, text) = kubeadm_cmd(&node, &["revert"]);
    assert!(ok, "revert:\n{text}");
    assert!(
        manifests(&etc) == kubeadms_manifests,
        "revert restored kubeadm's manifests byte for byte"
    );
    wait_long(
        "the node serving on kubeadm's files after revert",
        Duration::from_secs(240),
        || {
            settled(&node, 4)?;
            ready(&kubectl, &admin).then_some(())
        },
    );
    // A write within a minute: with a second member joined, etcd needs
    // both for a quorum, and node 1's has just restarted on kubeadm's
    // manifest (one 10 s request timed out once in CI beside the suite).
    let mut last = String::new();
    wait_long("a write after revert", Duration::from_secs(60), || {
        kubectl_out(
            &kubectl,
            &admin,
            &["create", "configmap", "after-revert", "-n", "default"],
        )
        .map_err(|e| last = e)
        .ok()
        .or_else(|| last.contains("AlreadyExists").then(String::new))
    });
}
