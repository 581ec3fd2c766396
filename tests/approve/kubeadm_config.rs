//! What kubeadm's own configuration names is never a node's: the fourth
//! attacker review's finding 3, through the binary.

use super::*;

/// Fourth attacker review, finding 3: kubeadm reads `controlPlaneEndpoint`
/// and `apiServer.certSANs` with ParseIPSloppy (any number of leading
/// zeros per octet, also in `::ffff:a.b.c.d`), and puts the addresses in
/// the API server's certificate; certsync read only up to three digits per
/// octet and no mapped form, so a node listing those addresses was
/// approved (and issued) a certificate for them. Each is denied; the
/// node's own address alone is approved. Test server only (a real
/// cluster's kubeadm-config is not the test's to change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_kubeadm_addresses_with_leading_zeros_are_never_a_nodes() {
    let mut env = Env::test_server().await;
    let octets = |i: u8| -> Vec<String> { env.ip(i).split('.').map(str::to_owned).collect() };
    let (e, s1, s2, s3) = (octets(66), octets(69), octets(74), octets(72));
    let endpoint = format!("{}.{:0>4}.{}.{:0>3}:6443", e[0], e[1], e[2], e[3]);
    let sans = [
        format!("{}.{}.{}.{:0>7}", s1[0], s1[1], s1[2], s1[3]),
        format!("0{}.0{}.0{}.0{}", s2[0], s2[1], s2[2], s2[3]),
        format!("::ffff:{}.{}.{:0>3}.{:0>3}", s3[0], s3[1], s3[2], s3[3]),
    ];
    let config = format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
         controlPlaneEndpoint: \"{endpoint}\"\napiServer:\n  certSANs:\n{}",
        sans.iter()
            .map(|s| format!("  - \"{s}\"\n"))
            .collect::<String>()
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.admin.clone(), "kube-system");
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": config},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let n1 = env.node_name("n1");
    let own = env.ip(75);
    let theirs = [env.ip(66), env.ip(69), env.ip(74), env.ip(72)];
    let mut addrs = vec![("InternalIP", own.as_str()), ("Hostname", n1.as_str())];
    addrs.extend(theirs.iter().map(|ip| ("InternalIP", ip.as_str())));
    env.add_node(&n1, &addrs).await;
    let kubelet = env.node_client(&n1).await;
    let approver = env.approver(&["--lease-name", ""], &[]);
    for ip in &theirs {
        let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&own, ip]).await;
        let (ty, _, message) = env.decision(&csr).await;
        assert_eq!(
            ty, "Denied",
            "{ip}, which kubeadm puts in the API server's certificate ({endpoint}, {sans:?}): {message}"
        );
        assert!(message.starts_with("ip-san:"), "{message}");
    }
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&own]).await;
    assert_eq!(env.decision(&csr).await.0, "Approved");
    drop(approver);
    env.cleanup().await;
}
