//! End to end for `certsync approve` and `certsync csr review`, through the
//! real binary. Kubelet serving CSRs are created by a client that
//! authenticates as the node (the API server fills `spec.username` and
//! `groups` from that), never by writing those fields.
//!
//! Against a real cluster (`CERTSYNC_E2E_KUBECONFIG`, an admin identity),
//! the node identity is obtained through the CSR API itself: a
//! `kubernetes.io/kube-apiserver-client` CSR for CN=`system:node:NAME`,
//! O=`system:nodes`, approved by the test and signed by the cluster. The
//! approver decides every pending kubelet-serving CSR of the cluster: run
//! these on a disposable cluster.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use support::apiserver::ApiServer;
use support::*;

struct Env {
    tmp: tempfile::TempDir,
    kubeconfig: PathBuf,
    admin: Client,
    fake: Option<ApiServer>,
    nodes: Vec<String>,
    csrs: Vec<String>,
}

const SERVING: &str = "kubernetes.io/kubelet-serving";

impl Env {
    async fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (kubeconfig, fake) = cluster(tmp.path()).await;
        let admin = kube_client(&kubeconfig).await;
        Self {
            tmp,
            kubeconfig,
            admin,
            fake,
            nodes: Vec::new(),
            csrs: Vec::new(),
        }
    }

    /// A node name unique to this test run.
    fn node_name(&self, n: &str) -> String {
        format!("certsync-{n}-{}", std::process::id())
    }

    /// Registers Node `name` with `addresses` (type, address).
    async fn add_node(&mut self, name: &str, addresses: &[(&str, &str)]) {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"addresses": addresses.iter()
                .map(|(t, a)| serde_json::json!({"type": t, "address": a}))
                .collect::<Vec<_>>()},
        }))
        .unwrap();
        let api: Api<Node> = Api::all(self.admin.clone());
        api.create(&PostParams::default(), &node).await.unwrap();
        self.nodes.push(name.to_owned());
    }

    /// A client authenticated as node `name` (system:node:NAME in group
    /// system:nodes).
    async fn node_client(&mut self, name: &str) -> Client {
        let user = format!("system:node:{name}");
        if let Some(fake) = &self.fake {
            let token = format!("node-token-{name}");
            fake.add_user(
                &token,
                support::apiserver::csr::User {
                    name: user,
                    uid: format!("uid-{name}"),
                    groups: vec!["system:nodes".into()],
                },
            );
            let path = self.tmp.path().join(format!("{name}.kubeconfig"));
            let text = std::fs::read_to_string(&self.kubeconfig)
                .unwrap()
                .replace("token: test-token", &format!("token: {token}"));
            std::fs::write(&path, text).unwrap();
            return kube_client(&path).await;
        }
        // A real cluster: a client certificate for the node's identity,
        // requested and approved by the admin, signed by the cluster.
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, user.as_str());
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let request = params.serialize_request(&key).unwrap().pem().unwrap();
        let csr_name = format!("certsync-e2e-identity-{name}");
        let api: Api<Csr> = Api::all(self.admin.clone());
        let csr: Csr = serde_json::from_value(serde_json::json!({
            "metadata": {"name": csr_name},
            "spec": {
                "request": base64(request.as_bytes()),
                "signerName": "kubernetes.io/kube-apiserver-client",
                "usages": ["digital signature", "client auth"],
                "expirationSeconds": 3600,
            }
        }))
        .unwrap();
        api.create(&PostParams::default(), &csr).await.unwrap();
        self.csrs.push(csr_name.clone());
        let mut csr = api.get(&csr_name).await.unwrap();
        csr.status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new)
            .push(
                serde_json::from_value(serde_json::json!({
                    "type": "Approved", "status": "True",
                    "reason": "CertsyncE2E", "message": "node identity for the approver tests",
                }))
                .unwrap(),
            );
        api.replace_subresource("approval", &csr_name, &PostParams::default(), &csr)
            .await
            .unwrap();
        let cert = loop {
            let c = api.get(&csr_name).await.unwrap();
            if let Some(cert) = c.status.and_then(|s| s.certificate) {
                break cert.0;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        config.auth_info = kube::config::AuthInfo {
            client_certificate_data: Some(base64(&cert)),
            client_key_data: Some(base64(key.serialize_pem().as_bytes()).into()),
            ..Default::default()
        };
        Client::try_from(config).unwrap()
    }

    /// Node `node` asks for a serving certificate for `dns` and `ips`,
    /// with `usages` (kubelet's by default); returns the CSR's name.
    async fn kubelet_asks(
        &mut self,
        node: &Client,
        name: &str,
        dns: &[&str],
        ips: &[&str],
    ) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                .unwrap();
        for ip in ips {
            params
                .subject_alt_names
                .push(rcgen::SanType::IpAddress(ip.parse().unwrap()));
        }
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("system:node:{name}"));
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let request = params.serialize_request(&key).unwrap().pem().unwrap();
        self.create_csr(node, &request, &["digital signature", "server auth"])
            .await
    }

    async fn create_csr(&mut self, client: &Client, request: &str, usages: &[&str]) -> String {
        let csr = Csr {
            metadata: kube::api::ObjectMeta {
                generate_name: Some("certsync-e2e-".into()),
                ..Default::default()
            },
            spec: k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec {
                request: ByteString(request.as_bytes().to_vec()),
                signer_name: SERVING.into(),
                usages: Some(usages.iter().map(|u| u.to_string()).collect()),
                // What a forger would write: the server replaces it.
                username: Some("system:node:someone-else".into()),
                groups: Some(vec!["system:nodes".into()]),
                ..Default::default()
            },
            status: None,
        };
        let api: Api<Csr> = Api::all(client.clone());
        let created = api.create(&PostParams::default(), &csr).await.unwrap();
        let name = created.metadata.name.unwrap();
        self.csrs.push(name.clone());
        name
    }

    /// The decision on `name`: (type, reason, message), once there is one.
    async fn decision(&self, name: &str) -> (String, String, String) {
        let api: Api<Csr> = Api::all(self.admin.clone());
        let start = std::time::Instant::now();
        loop {
            let csr = api.get(name).await.unwrap();
            let decided: Vec<_> = csr
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c.type_ == "Approved" || c.type_ == "Denied")
                .collect();
            if let Some(c) = decided.first() {
                assert_eq!(decided.len(), 1, "{name} decided once: {decided:?}");
                return (
                    c.type_.clone(),
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                );
            }
            assert!(start.elapsed() < PATIENCE, "no decision on {name}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn conditions(&self, name: &str) -> usize {
        let api: Api<Csr> = Api::all(self.admin.clone());
        api.get(name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .map_or(0, |c| c.len())
    }

    fn approver(&self, extra: &[&str], env: &[(&str, &str)]) -> Certsync {
        let mut cmd = std::process::Command::new(certsync_bin());
        cmd.args(["approve", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(extra)
            .env("POD_NAMESPACE", "default");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Certsync::start_with(&mut cmd, self.tmp.path())
    }

    async fn cleanup(self) {
        let csrs: Api<Csr> = Api::all(self.admin.clone());
        for c in &self.csrs {
            let _ = csrs.delete(c, &DeleteParams::default()).await;
        }
        let nodes: Api<Node> = Api::all(self.admin.clone());
        for n in &self.nodes {
            let _ = nodes.delete(n, &DeleteParams::default()).await;
        }
    }
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn metric(port: u16, name: &str) -> f64 {
    http_get(port, "/metrics")
        .map(|(_, body)| parse_metrics(&body))
        .and_then(|m| m.get(name).copied())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approves_what_passes_and_denies_what_definitely_fails() {
    let mut env = Env::new().await;
    let (n1, n2) = (env.node_name("n1"), env.node_name("n2"));
    // n1's IPv6 address spelled out; its kubelet asks for fd00::11.
    env.add_node(
        &n1,
        &[
            ("InternalIP", "10.0.0.11"),
            ("InternalIP", "fd00:0:0:0:0:0:0:11"),
            ("Hostname", &n1),
        ],
    )
    .await;
    env.add_node(&n2, &[("InternalIP", "10.0.0.12"), ("Hostname", &n2)])
        .await;
    let port = free_port();
    let admin_addr = format!("127.0.0.1:{port}");
    let approver = env.approver(
        &["--lease-name", "", "--admin-addr", &admin_addr, "--events"],
        &[],
    );
    let kubelet = env.node_client(&n1).await;

    let good = env
        .kubelet_asks(&kubelet, &n1, &[&n1], &["10.0.0.11", "fd00::11"])
        .await;
    let (ty, reason, message) = env.decision(&good).await;
    assert_eq!(
        (ty.as_str(), reason.as_str()),
        ("Approved", "CertsyncApprove"),
        "{message}"
    );
    assert!(message.contains(&n1), "{message}");

    let stolen = env
        .kubelet_asks(&kubelet, &n1, &[&n1], &["10.0.0.12"])
        .await;
    let (ty, reason, message) = env.decision(&stolen).await;
    assert_eq!((ty.as_str(), reason.as_str()), ("Denied", "CertsyncDeny"));
    assert!(
        message.starts_with("ip-san:") && message.contains(&format!("belongs to node {n2}")),
        "{message}"
    );

    // A CSR the admin creates, whatever its body claims, is the admin's.
    let request = {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec![n1.clone()]).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("system:node:{n1}"));
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        p.serialize_request(&key).unwrap().pem().unwrap()
    };
    let admin = env.admin.clone();
    let forged = env
        .create_csr(&admin, &request, &["digital signature", "server auth"])
        .await;
    let (ty, _, message) = env.decision(&forged).await;
    assert_eq!(ty, "Denied");
    assert!(message.starts_with("requester:"), "{message}");

    // Client auth is never a serving certificate's.
    let client_auth = env
        .create_csr(
            &kubelet,
            &request,
            &["digital signature", "server auth", "client auth"],
        )
        .await;
    let (ty, _, message) = env.decision(&client_auth).await;
    assert_eq!(ty, "Denied");
    assert!(message.starts_with("usages:"), "{message}");

    let count = |d: &str, r: &str| {
        metric(
            port,
            &format!("certsync_csr_decisions_total{{decision=\"{d}\",reason=\"{r}\"}}"),
        )
    };
    wait_for("the decisions counted", || {
        (count("approve", "ok") == 1.0
            && count("deny", "ip-san") == 1.0
            && count("deny", "requester") == 1.0
            && count("deny", "usages") == 1.0)
            .then_some(())
    });
    approver.wait_log(&format!("csr={stolen}"));
    assert!(
        approver
            .log()
            .contains("deny: IP address 10.0.0.12 belongs to node")
    );
    // Events on the decided CSRs (cluster-scoped: in `default`).
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.admin.clone(), "default");
    let about =
        |e: &k8s_openapi::api::events::v1::Event| e.regarding.as_ref().and_then(|r| r.name.clone());
    let mut reasons = Vec::new();
    for _ in 0..200 {
        reasons = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|e| {
                about(e).as_deref() == Some(good.as_str())
                    || about(e).as_deref() == Some(stolen.as_str())
            })
            .filter_map(|e| e.reason.clone())
            .collect();
        if reasons.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    reasons.sort();
    assert_eq!(reasons, ["CertificateApproved", "CertificateDenied"]);
    drop(approver);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_a_node_that_registers_later() {
    let mut env = Env::new().await;
    let n3 = env.node_name("n3");
    let approver = env.approver(&["--lease-name", ""], &[]);
    let kubelet = env.node_client(&n3).await;
    let csr = env
        .kubelet_asks(&kubelet, &n3, &[&n3], &["10.0.0.13"])
        .await;
    approver.wait_log(&format!("wait: node {n3} does not exist (yet)"));
    assert_eq!(env.conditions(&csr).await, 0, "neither approved nor denied");
    env.add_node(&n3, &[("InternalIP", "10.0.0.13"), ("Hostname", &n3)])
        .await;
    let (ty, _, _) = env.decision(&csr).await;
    assert_eq!(ty, "Approved");
    assert_eq!(
        approver.log().matches(&format!("wait: node {n3}")).count(),
        1,
        "a wait is logged once"
    );
    drop(approver);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_without_writing() {
    let mut env = Env::new().await;
    let n4 = env.node_name("n4");
    env.add_node(&n4, &[("InternalIP", "10.0.0.14"), ("Hostname", &n4)])
        .await;
    let approver = env.approver(&["--lease-name", "", "--dry-run"], &[]);
    let kubelet = env.node_client(&n4).await;
    let csr = env
        .kubelet_asks(&kubelet, &n4, &[&n4], &["10.0.0.14"])
        .await;
    approver.wait_log(&format!("csr={csr}"));
    approver.wait_log("approve: every check passed");
    assert!(approver.log().contains("dry_run=true"));
    assert_eq!(env.conditions(&csr).await, 0, "nothing written");
    drop(approver);
    env.cleanup().await;
}

/// Two replicas with one Lease: one leader writes, and no CSR is decided
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvers_decide_each_csr_once() {
    let mut env = Env::new().await;
    let n5 = env.node_name("n5");
    env.add_node(&n5, &[("InternalIP", "10.0.0.15"), ("Hostname", &n5)])
        .await;
    let lease = format!("certsync-approver-{}", std::process::id());
    let a = env.approver(
        &["--lease-name", &lease, "--lease-duration", "4s"],
        &[("POD_NAME", "approver-a")],
    );
    let b = env.approver(
        &["--lease-name", &lease, "--lease-duration", "4s"],
        &[("POD_NAME", "approver-b")],
    );
    let kubelet = env.node_client(&n5).await;
    let mut names = Vec::new();
    for _ in 0..5 {
        names.push(
            env.kubelet_asks(&kubelet, &n5, &[&n5], &["10.0.0.15"])
                .await,
        );
    }
    for n in &names {
        let (ty, _, _) = env.decision(n).await;
        assert_eq!(ty, "Approved");
        assert_eq!(env.conditions(n).await, 1, "{n}: exactly one condition");
    }
    let writers = [&a, &b]
        .iter()
        .filter(|p| p.log().contains("approve: every check passed"))
        .count();
    assert_eq!(writers, 1, "only the leader decided");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.admin.clone(), "default");
    let holder = leases
        .get(&lease)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let (leader, follower) = match holder.as_str() {
        "approver-a" => (a, b),
        "approver-b" => (b, a),
        other => panic!("lease holder {other:?}"),
    };
    assert!(leader.log().contains("approve: every check passed"));

    // The leader dies without releasing the Lease: the other replica takes
    // over once it expires and decides what arrives next.
    drop(leader);
    let late = env
        .kubelet_asks(&kubelet, &n5, &[&n5], &["10.0.0.15"])
        .await;
    assert_eq!(env.decision(&late).await.0, "Approved");
    assert_eq!(env.conditions(&late).await, 1);
    assert!(
        follower.log().contains(&format!("csr={late}")),
        "the other replica decided it"
    );
    drop(follower);
    let _ = leases.delete(&lease, &DeleteParams::default()).await;
    env.cleanup().await;
}

/// `csr review`: a row per pending CSR with the verdict; `--approve`
/// approves exactly those that pass, `--deny` denies those that fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_shows_verdicts_and_approves_only_what_passes() {
    let mut env = Env::new().await;
    let (n6, n7) = (env.node_name("n6"), env.node_name("n7"));
    env.add_node(&n6, &[("InternalIP", "10.0.0.16"), ("Hostname", &n6)])
        .await;
    env.add_node(&n7, &[("InternalIP", "10.0.0.17"), ("Hostname", &n7)])
        .await;
    let kubelet = env.node_client(&n6).await;
    let good = env
        .kubelet_asks(&kubelet, &n6, &[&n6], &["10.0.0.16"])
        .await;
    let bad = env
        .kubelet_asks(&kubelet, &n6, &[&n6], &["10.0.0.17"])
        .await;
    let unknown = env
        .kubelet_asks(&kubelet, &n6, &[&n6], &["192.168.77.7"])
        .await;
    let review = |extra: &[&str]| {
        let out = std::process::Command::new(certsync_bin())
            .args(["csr", "review", "--kubeconfig"])
            .arg(&env.kubeconfig)
            .args([good.as_str(), bad.as_str(), unknown.as_str()])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (table, _) = review(&[]);
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name} in\n{table}"))
            .to_owned()
    };
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        line(&good).contains(&format!("system:node:{n6}")),
        "{table}"
    );
    assert!(line(&good).trim_end().ends_with("approve"), "{table}");
    assert!(
        line(&bad).contains(&format!(
            "deny: ip-san IP address 10.0.0.17 belongs to node {n7}"
        )),
        "{table}"
    );
    assert!(line(&unknown).contains("wait: ip-san"), "{table}");

    let (json, _) = review(&["-o", "json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let verdicts: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["verdict"].as_str().unwrap()))
        .collect();
    assert!(
        verdicts.contains(&(good.as_str(), "approve")),
        "{verdicts:?}"
    );
    assert_eq!(rows[0]["key"], "ecdsa-p256");

    let (_, said) = review(&["--approve"]);
    let did: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("approved") || l.starts_with("denied"))
        .collect();
    assert_eq!(did, [format!("approved {good}")], "{said}");
    assert_eq!(env.decision(&good).await.0, "Approved");
    assert_eq!(env.conditions(&bad).await, 0);
    assert_eq!(env.conditions(&unknown).await, 0);

    let (_, said) = review(&["--deny"]);
    let did: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("approved") || l.starts_with("denied"))
        .collect();
    assert_eq!(did.len(), 1, "{said}");
    assert!(
        did[0].starts_with(&format!("denied {bad}: ip-san")),
        "{said}"
    );
    assert_eq!(env.decision(&bad).await.0, "Denied");
    assert_eq!(env.conditions(&unknown).await, 0, "a wait is never decided");
    env.cleanup().await;
}
