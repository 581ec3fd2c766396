//! What Services name is never a node's, through the binary.

use super::*;

/// An ExternalName Service's `spec.externalName` (any namespace user writes
/// it) was approved to a node that listed it, under an `--allowed-dns`
/// pattern covering it. It is the Service's: denied to a node that does not
/// list it, and in dispute (no verdict written, a person decides) for the
/// node that does, whose own request is still approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_an_external_name_services_name_is_never_a_nodes() {
    let mut env = Env::new().await;
    let target = format!("db-{}.e2e.example", env.run);
    let name = format!("certsync-e2e-db-{}", env.run);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.admin.clone(), "default");
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "ExternalName", "externalName": target},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let (n1, n2) = (env.node_name("n1"), env.node_name("n2"));
    let (ip1, ip2) = (env.ip(151), env.ip(152));
    env.add_node(
        &n1,
        &[
            ("InternalIP", &ip1),
            ("Hostname", &n1),
            ("InternalDNS", &target),
        ],
    )
    .await;
    env.add_node(&n2, &[("InternalIP", &ip2), ("Hostname", &n2)])
        .await;
    let kubelet1 = env.node_client(&n1).await;
    let kubelet2 = env.node_client(&n2).await;
    let approver = env.approver(&["--lease-name", "", "--allowed-dns", "*.e2e.example"], &[]);
    let listed = env
        .kubelet_asks(&kubelet1, &n1, &[&n1, &target], &[&ip1])
        .await;
    let written = verdict_written(&env, &approver, &listed).await;
    assert!(
        written.is_empty(),
        "the ExternalName Service's name {target} was decided for the node listing it: {written:?}"
    );
    approver.wait_log("in dispute, a person decides");
    let unlisted = env
        .kubelet_asks(&kubelet2, &n2, &[&n2, &target], &[&ip2])
        .await;
    let (ty, _, message) = env.decision(&unlisted).await;
    assert_eq!(ty, "Denied", "{message}");
    assert!(
        message.starts_with("dns-san:") && message.contains(&format!("default/{name}")),
        "{message}"
    );
    let own = env.kubelet_asks(&kubelet1, &n1, &[&n1], &[&ip1]).await;
    assert_eq!(env.decision(&own).await.0, "Approved");
    assert_eq!(env.conditions(&listed).await, 0, "the disputed CSR waits");
    drop(approver);
    let _ = services.delete(&name, &DeleteParams::default()).await;
    env.cleanup().await;
}
