//! What kubeadm's own configuration names is never a node's, read as
//! kubeadm reads it (ParseIPSloppy, ParseHostPort), through the binary.

use super::*;

/// Stores `config` as kubeadm's `kube-system/kubeadm-config`
/// ClusterConfiguration, as `kubeadm init` uploads it (as written).
async fn kubeadm_config(env: &Env, config: &str) {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.admin.clone(), "kube-system");
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": config},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
}

/// A v1beta4 ClusterConfiguration with `controlPlaneEndpoint` and `rest`.
fn cluster_configuration(endpoint: &str, rest: &str) -> String {
    format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
         controlPlaneEndpoint: \"{endpoint}\"\n{rest}"
    )
}

/// With `config` stored as kubeadm's, a node listing its own address
/// `own` and every one of `theirs` asks for each of `theirs` (beside
/// `own`): each is denied by the `ip-san` check with a message holding
/// `naming`, and its request for `own` alone is approved.
async fn kubeadm_reserves(env: &mut Env, config: &str, own: &str, theirs: &[String], naming: &str) {
    kubeadm_config(env, config).await;
    let n1 = env.node_name("n1");
    let mut addrs = vec![("InternalIP", own), ("Hostname", n1.as_str())];
    addrs.extend(theirs.iter().map(|ip| ("InternalIP", ip.as_str())));
    env.add_node(&n1, &addrs).await;
    let kubelet = env.node_client(&n1).await;
    let approver = env.approver(&["--lease-name", ""], &[]);
    for ip in theirs {
        let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[own, ip]).await;
        let (ty, _, message) = env.decision(&csr).await;
        assert_eq!(
            ty, "Denied",
            "{ip}, which kubeadm puts in the API server's certificate ({config:?}): {message}"
        );
        assert!(
            message.starts_with("ip-san:") && message.contains(naming),
            "{message}"
        );
    }
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[own]).await;
    assert_eq!(env.decision(&csr).await.0, "Approved");
    drop(approver);
}

/// kubeadm reads `controlPlaneEndpoint`
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
    let config = cluster_configuration(
        &endpoint,
        &format!(
            "apiServer:\n  certSANs:\n{}",
            sans.iter()
                .map(|s| format!("  - \"{s}\"\n"))
                .collect::<String>()
        ),
    );
    let own = env.ip(75);
    let theirs = [env.ip(66), env.ip(69), env.ip(74), env.ip(72)];
    kubeadm_reserves(&mut env, &config, &own, &theirs, "").await;
    env.cleanup().await;
}

/// kubeadm reads `controlPlaneEndpoint`
/// with `ParseHostPort`, which takes the whole string as the host when
/// `net.SplitHostPort` fails, as it does on any bare IPv6 address; that
/// address (or the IPv4 address of a mapped form) is then in the API
/// server's certificate (checked with kubeadm v1.36.2: `fd00:1::141`,
/// `::ffff:192.168.1.146`). certsync read the endpoint as a URL's
/// authority, found no host, reserved nothing, and a node listing the
/// address was approved and issued a certificate for it. Each spelling
/// is denied as a certSAN is; the node's own address alone is approved.
/// Test server only (a real cluster's kubeadm-config is not the test's
/// to change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_bare_ipv6_control_plane_endpoint_is_never_a_nodes() {
    for (i, mapped) in [(0x41u8, false), (0x46, true)] {
        let mut env = Env::test_server().await;
        let (endpoint, address) = if mapped {
            // `::FFFF:a.b.c.0dd`: upper case, a leading zero.
            let v4 = env.ip(i);
            let (net, last) = v4.rsplit_once('.').unwrap();
            (format!("::FFFF:{net}.0{last}"), v4)
        } else {
            // The long form of a v6 address, zero runs written out.
            let v6 = env.ip6(i);
            let long: std::net::Ipv6Addr = v6.parse().unwrap();
            let groups: Vec<String> = long.segments().iter().map(|g| format!("{g:x}")).collect();
            (groups.join(":"), v6)
        };
        let config = cluster_configuration(&endpoint, "");
        let own = env.ip(0x4b);
        kubeadm_reserves(&mut env, &config, &own, &[address], "controlPlaneEndpoint").await;
        env.cleanup().await;
    }
}

/// An endpoint kubeadm's `ParseHostPort` refuses (here `[v6]` without a port:
/// SplitHostPort fails, and `[...]` is neither an IP nor a DNS name) names no
/// address certsync could reserve with certainty. Fail closed: nothing is
/// decided, not even a node's request for its own address, and the log
/// and `csr review` name the ConfigMap and the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_an_endpoint_kubeadm_refuses_means_nothing_is_decided() {
    let mut env = Env::test_server().await;
    let endpoint = format!("[{}]", env.ip6(0x42));
    kubeadm_config(&env, &cluster_configuration(&endpoint, "")).await;
    let n1 = env.node_name("n1");
    let own = env.ip(0x4c);
    env.add_node(&n1, &[("InternalIP", &own), ("Hostname", &n1)])
        .await;
    let kubelet = env.node_client(&n1).await;
    let approver = env.approver(&["--lease-name", ""], &[]);
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&own]).await;
    approver.wait_log("controlPlaneEndpoint");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.conditions(&csr).await,
        0,
        "decided although kubeadm's controlPlaneEndpoint {endpoint:?} could not be read"
    );
    let (_, err, code) = env.review(&[&csr]);
    assert_ne!(code, 0, "csr review decided: {err}");
    assert!(
        err.contains("kube-system/kubeadm-config") && err.contains(&endpoint),
        "{err}"
    );
    drop(approver);
    env.cleanup().await;
}
