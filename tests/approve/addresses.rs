//! IPv6 forms of another node's IPv4 address, through the binary, under
//! `--allow-any-node-address` (no node networks to keep them out).

use super::*;

/// With `--allow-any-node-address`, a
/// node that listed ISATAP addresses embedding another node's IPv4
/// address (`PREFIX::5efe:a.b.c.d`, `PREFIX::200:5efe:a.b.c.d`) got a
/// serving certificate for them (Approved), though Teredo, 6to4 and the
/// other embedding forms were denied. Over a host's ISATAP tunnel such an
/// address reaches the IPv4 host it carries. Denied now, naming the
/// check; the node's own address is still approved (the control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_isatap_forms_of_another_nodes_address_are_denied() {
    let mut env = Env::new().await;
    let (honest, evil) = (env.node_name("honest"), env.node_name("evil"));
    let (honest_ip, evil_ip) = (env.ip(81), env.ip(82));
    let v4: std::net::Ipv4Addr = honest_ip.parse().unwrap();
    let [a, b, c, d] = v4.octets();
    let low = format!(
        "{:x}:{:x}",
        u16::from_be_bytes([a, b]),
        u16::from_be_bytes([c, d])
    );
    let isatap = [
        format!("2001:db8::5efe:{low}"),
        format!("2001:db8::200:5efe:{low}"),
    ];
    env.add_node(
        &honest,
        &[("InternalIP", &honest_ip), ("Hostname", &honest)],
    )
    .await;
    env.add_node(
        &evil,
        &[
            ("InternalIP", &evil_ip),
            ("InternalIP", &isatap[0]),
            ("InternalIP", &isatap[1]),
            ("Hostname", &evil),
        ],
    )
    .await;
    let kubelet = env.node_client(&evil).await;
    let mut cmd = std::process::Command::new(certsync_bin());
    cmd.args(["approve", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .args(["--allow-any-node-address", "--lease-name", ""])
        .args(["-l", &format!("{RUN_LABEL}={}", env.run)])
        .env("POD_NAMESPACE", "default");
    let approver = Certsync::start_with(&mut cmd, env.tmp.path());
    let own = env
        .kubelet_asks(&kubelet, &evil, &[&evil], &[&evil_ip])
        .await;
    assert_eq!(env.decision(&own).await.0, "Approved", "{}", approver.log());
    for addr in &isatap {
        let csr = env.kubelet_asks(&kubelet, &evil, &[&evil], &[addr]).await;
        let (verdict, _, message) = env.decision(&csr).await;
        assert_eq!(verdict, "Denied", "{addr}: {message}");
        assert!(message.contains(addr.as_str()), "{addr}: {message}");
    }
    drop(approver);
    env.cleanup().await;
}
