//! `csr:` with kube-controller-manager's own signer (v1.36, a control plane
//! of the test's own from the realkube tools: `support::control_plane`),
//! not a signer the test plays: what it issues (its backdating, the
//! lifetime it grants) is what certsync meets in a cluster. Without the
//! tools or root the test skips, a failure under CI.
//!
//! realkube's `up` passes no flags to kube-controller-manager, so its
//! `--cluster-signing-duration` stays at the default (a year). The short
//! lifetime comes from the request, as the API allows anyone to ask:
//! `expirationSeconds` 600 (`lifetime=10m`, the API's minimum), which the
//! signer honours as the shorter of the two.

mod support;

use std::time::Duration;

use support::control_plane::ControlPlane;
use support::signer::Signer;
use support::*;

/// [`wait_for`] with patience `secs`: kube-controller-manager's controllers
/// start after `up` returns (here up to half a minute on a loaded machine),
/// and a renewal waits out its floor. This bounds a hang; it measures
/// nothing.
fn wait_long<T>(what: &str, secs: u64, mut check: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// notAfter minus notBefore of a PEM certificate.
fn validity(pem: &[u8]) -> Duration {
    Duration::from_secs(support::certs::validity_secs(pem).unsigned_abs())
}

/// A client certificate from `kubernetes.io/kube-apiserver-client`, asked
/// for 600 s and renewed at 44-45 % of its life with a new key, each
/// request approved as `kubectl certificate approve` does and signed by
/// kube-controller-manager; checked against the CA the cluster publishes
/// in `kube-root-ca.crt` (realkube signs with its cluster CA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renews_through_kube_controller_managers_signer() {
    let Some(cp) = ControlPlane::up("signer") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    let signer = Signer::new(
        kube_client(&cp.admin).await,
        "kubernetes.io/kube-apiserver-client",
    );
    // kube-controller-manager publishes kube-root-ca.crt in each namespace
    // once its controllers run, which may be after `up` returns. Without
    // it certsync's first issued certificate has no CA to check against
    // and it requests again, which this test would not approve.
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(kube_client(&cp.admin).await, "default");
    let start = std::time::Instant::now();
    while configmaps
        .get_opt("kube-root-ca.crt")
        .await
        .ok()
        .flatten()
        .is_none()
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "kube-controller-manager never published default/kube-root-ca.crt"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let spec = format!(
        "csr:kubernetes.io/kube-apiserver-client={},name=client,cn=certsync-renew,\
         usage=digital-signature,usage=client-auth,lifetime=10m,renew=0.44-0.45,\
         ca=configmap:default/kube-root-ca.crt",
        target.display()
    );
    let cs = Certsync::start(
        &[
            "run",
            "--kubeconfig",
            cp.admin.to_str().unwrap(),
            "--sync",
            &spec,
            "--csr-renew-floor",
            "1s",
        ],
        tmp.path(),
    );
    let first = signer.next_request(&[]).await;
    assert_eq!(
        signer.expiration_seconds(&first).await,
        Some(600),
        "lifetime=10m asks for expirationSeconds"
    );
    signer.approve(&first).await;
    let (rev1, cert1, key1) = wait_long("kube-controller-manager's certificate", 60, || {
        read_live(&target)
    });
    // 600 s from issuance, notBefore 5 min back (the signer's backdate):
    // a 900 s lifetime, so certsync's renewal floor is 90 s (a tenth of
    // it); 44-45 % of 900 s is 96-105 s after issuance, just past it.
    assert_eq!(validity(&cert1), Duration::from_secs(900));
    let ca = std::fs::read(cp.dir.join("pki/ca.crt")).unwrap();
    assert_eq!(
        std::fs::read(target.join(&rev1).join("ca.crt")).unwrap(),
        ca,
        "ca.crt is the CA in kube-root-ca.crt"
    );
    cs.wait_log("certificate is current; renewal scheduled");
    assert!(!cs.log().contains("renewal held back"), "{}", cs.log());

    let mut second = None;
    for _ in 0..1300 {
        let all = signer.requests().await;
        second = all
            .into_iter()
            .find(|c| c.metadata.name.as_ref() != Some(&first));
        if second.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = second
        .expect("a renewal request within 130 s")
        .metadata
        .name
        .unwrap();
    signer.approve(&second).await;
    let (_, cert2, key2) = wait_long("the renewed certificate", 60, || {
        read_live(&target).filter(|(rev, _, _)| *rev != rev1)
    });
    assert_ne!(cert1, cert2);
    assert_ne!(key1, key2, "every renewal has a new key");
    assert_eq!(validity(&cert2), Duration::from_secs(900));
    drop(cs);
}
