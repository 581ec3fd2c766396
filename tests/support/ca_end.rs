//! What "the CAs' end passed unnoticed" means on a kubeadm node, checked
//! the same way on one node (tests/kubeadm_ca_end.rs) and three
//! (tests/kubeadm_ha.rs): a write, both leader leases renewed, a CSR signed
//! under `pki/ca.crt` (the renewed certificate, valid), and
//! `kubeadm certs check-expiration` reading every file.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;

use super::kubeadm_node::{Node, first_der, wait_long};

/// `kubectl --kubeconfig KUBECONFIG ARGS` (10 s per request): its stdout,
/// or its stderr when it fails.
pub fn kubectl_out(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=10s")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A client CSR for `name`, approved and signed by the controller-manager:
/// the certificate (DER).
pub fn signed_csr(kubectl: &Path, admin: &Path, name: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    let csr = p.serialize_request(&key).expect("csr").pem().expect("pem");
    let manifest = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\n\
         spec:\n  request: {}\n  signerName: kubernetes.io/kube-apiserver-client\n  \
         expirationSeconds: 600\n  usages: [client auth]\n",
        base64::engine::general_purpose::STANDARD.encode(csr)
    );
    let file = std::env::temp_dir().join(format!("{name}-{}.yaml", std::process::id()));
    std::fs::write(&file, manifest).expect("csr manifest");
    kubectl_out(
        kubectl,
        admin,
        &["create", "-f", file.to_str().expect("utf-8")],
    )
    .unwrap_or_else(|e| panic!("create CSR: {e}"));
    let _ = std::fs::remove_file(&file);
    kubectl_out(kubectl, admin, &["certificate", "approve", name])
        .unwrap_or_else(|e| panic!("approve: {e}"));
    let pem = wait_long("the CSR signed", Duration::from_secs(60), || {
        let b64 = kubectl_out(
            kubectl,
            admin,
            &["get", "csr", name, "-o", "jsonpath={.status.certificate}"],
        )
        .ok()?;
        base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .ok()
            .filter(|b| !b.is_empty())
    });
    first_der(&pem).expect("a certificate")
}

/// The kube-system lease's renewTime.
pub fn lease(kubectl: &Path, admin: &Path, name: &str) -> Option<String> {
    kubectl_out(
        kubectl,
        admin,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            name,
            "-o",
            "jsonpath={.spec.renewTime}",
        ],
    )
    .ok()
    .filter(|t| !t.is_empty())
}

/// Past the CAs' end, through `admin` (a kubeconfig of `node`'s cluster):
/// a write (ConfigMap `name`), the scheduler's and controller-manager's
/// leases renewed, a CSR `name` signed and verified under `node`'s
/// `pki/ca.crt`, which is valid now, and `kubeadm certs check-expiration`
/// on `node` reading every file.
pub fn serves_past_the_ca_end(kubectl: &Path, admin: &Path, node: &Node, name: &str) {
    kubectl_out(
        kubectl,
        admin,
        &["create", "configmap", name, "-n", "default"],
    )
    .unwrap_or_else(|e| panic!("a write past the CAs' end: {e}"));
    let leases = || {
        (
            lease(kubectl, admin, "kube-scheduler"),
            lease(kubectl, admin, "kube-controller-manager"),
        )
    };
    let before = leases();
    wait_long(
        "the scheduler's and controller-manager's leases renewed",
        Duration::from_secs(60),
        || {
            let now = leases();
            (now.0.is_some() && now.1.is_some() && now.0 != before.0 && now.1 != before.1)
                .then_some(())
        },
    );
    let issued = signed_csr(kubectl, admin, name);
    let ca_now = first_der(&std::fs::read(node.etc().join("pki/ca.crt")).expect("ca"))
        .expect("a certificate");
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_now).expect("ca");
    let (_, leaf) = x509_parser::parse_x509_certificate(&issued).expect("leaf");
    assert_eq!(leaf.issuer().as_raw(), ca.subject().as_raw());
    leaf.verify_signature(Some(ca.public_key()))
        .expect("the CSR's certificate chains to pki/ca.crt");
    assert!(ca.validity().is_valid(), "pki/ca.crt is the renewed one");
    let out = node.sh("kubeadm", &["certs", "check-expiration"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{said}");
    assert!(
        out.status.success() && !said.contains("invalid") && !said.contains("MISSING"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
