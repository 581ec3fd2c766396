//! End to end for `certsync approve` and `certsync csr review`, through the
//! real binary. Kubelet serving CSRs are created by a client that
//! authenticates as the node (the API server fills `spec.username` and
//! `groups` from that), never by writing those fields.
//!
//! Against a real cluster (`CERTSYNC_E2E_KUBECONFIG`, an admin identity),
//! the node identity is obtained through the CSR API itself: a
//! `kubernetes.io/kube-apiserver-client` CSR for CN=`system:node:NAME`,
//! O=`system:nodes`, approved by the test and signed by the cluster.
//!
//! Each test is its own run: its Nodes, names and addresses are unique to
//! it (addresses from 198.18.0.0/15 and fdc5::/16, which no real cluster
//! routes), its CSRs carry a label with its run id and its approver
//! decides only those (`-l`), and what it created is deleted even when it
//! fails. So the suite runs in parallel, also against a real cluster
//! where other CSRs are pending.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use support::apiserver::ApiServer;
use support::forge;
use support::*;

/// The node networks the approver under test is given.
const NODE_NET: &str = "198.18.0.0/15";
const NODE_NET6: &str = "fdc5::/16";
/// The label that scopes a test's CSRs to its own approver.
const RUN_LABEL: &str = "certsync.dev/e2e-run";

struct Env {
    tmp: tempfile::TempDir,
    kubeconfig: PathBuf,
    admin: Client,
    fake: Option<ApiServer>,
    /// Unique to this test in this process and across runs.
    run: String,
    /// This run's block of 256 addresses in NODE_NET.
    block: u16,
    nodes: Vec<String>,
    csrs: Vec<String>,
    leases: Vec<String>,
}

const SERVING: &str = "kubernetes.io/kubelet-serving";

/// A number no other test of this or an earlier run has: the process id,
/// the time and a per-process counter, hashed.
fn unique() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.finish()
}

impl Env {
    /// On the cluster of `CERTSYNC_E2E_KUBECONFIG`, else the test API server.
    async fn new() -> Self {
        Self::on(false).await
    }

    /// On the test API server whatever `CERTSYNC_E2E_KUBECONFIG` says: for
    /// what only it can do ([`support::test_server`]).
    async fn test_server() -> Self {
        Self::on(true).await
    }

    async fn on(test_server: bool) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (kubeconfig, fake) = if test_server {
            support::test_server(tmp.path()).await
        } else {
            cluster(tmp.path()).await
        };
        let admin = kube_client(&kubeconfig).await;
        let n = unique();
        Self {
            tmp,
            kubeconfig,
            admin,
            fake,
            run: format!("{:08x}", n as u32),
            block: (n >> 32) as u16 % 512,
            nodes: Vec::new(),
            csrs: Vec::new(),
            leases: Vec::new(),
        }
    }

    /// A node name unique to this test run.
    fn node_name(&self, n: &str) -> String {
        format!("certsync-{n}-{}", self.run)
    }

    /// Address `i` of this run's block in NODE_NET.
    fn ip(&self, i: u8) -> String {
        format!("198.{}.{}.{i}", 18 + self.block / 256, self.block % 256)
    }

    /// Address `i` of this run's block in NODE_NET6.
    fn ip6(&self, i: u8) -> String {
        format!("fdc5:0:{:x}::{i:x}", self.block)
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
        let request = serving_request(name, dns, ips);
        self.create_csr(node, &request, &["digital signature", "server auth"])
            .await
    }

    async fn create_csr(&mut self, client: &Client, request: &str, usages: &[&str]) -> String {
        let csr = Csr {
            metadata: kube::api::ObjectMeta {
                generate_name: Some("certsync-e2e-".into()),
                labels: Some([(RUN_LABEL.to_owned(), self.run.clone())].into()),
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

    /// `certsync approve` deciding this run's CSRs, with its node networks.
    fn approver(&self, extra: &[&str], env: &[(&str, &str)]) -> Certsync {
        let mut cmd = std::process::Command::new(certsync_bin());
        cmd.args(["approve", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(["--node-cidr", NODE_NET, "--node-cidr", NODE_NET6])
            .args(["-l", &format!("{RUN_LABEL}={}", self.run)])
            .args(extra)
            .env("POD_NAMESPACE", "default");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Certsync::start_with(&mut cmd, self.tmp.path())
    }

    /// [`Env::approver`] without a Lease, its admin port on a free
    /// loopback port: (the approver, the port).
    fn approver_with_admin(&self) -> (Certsync, u16) {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        (
            self.approver(&["--lease-name", "", "--admin-addr", &addr], &[]),
            port,
        )
    }

    /// `certsync csr review` of this run's CSRs: (stdout, stderr, exit code).
    fn review(&self, args: &[&str]) -> (String, String, i32) {
        let out = std::process::Command::new(certsync_bin())
            .args(["csr", "review", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(["--node-cidr", NODE_NET, "--node-cidr", NODE_NET6])
            .args(["-l", &format!("{RUN_LABEL}={}", self.run)])
            .args(args)
            .output()
            .unwrap();
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
            out.status.code().unwrap_or(-1),
        )
    }

    /// The cluster's `kubernetes` Service IP and an address of the API
    /// server: an endpoint of its EndpointSlice when the cluster publishes
    /// one, else the address this run reaches it at (what the kubeconfig's
    /// server resolves to, which the approver counts as the API server's
    /// too). An API server advertised on a loopback address, as
    /// `realkube/up` runs it, publishes no EndpointSlice.
    async fn cluster_addresses(&self) -> (String, String) {
        let svc: k8s_openapi::api::core::v1::Service =
            Api::namespaced(self.admin.clone(), "default")
                .get("kubernetes")
                .await
                .unwrap();
        let service_ip = svc.spec.unwrap().cluster_ip.unwrap();
        let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
            Api::namespaced(self.admin.clone(), "default");
        let endpoint = slices
            .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
            .unwrap()
            .items
            .into_iter()
            .flat_map(|s| s.endpoints)
            .flat_map(|e| e.addresses)
            .next()
            .unwrap_or_else(|| server_addrs(&self.kubeconfig)[0].ip().to_string());
        (service_ip, endpoint)
    }

    async fn cleanup(mut self) {
        delete_all(
            &self.admin,
            &std::mem::take(&mut self.csrs),
            &std::mem::take(&mut self.nodes),
            &std::mem::take(&mut self.leases),
        )
        .await;
    }
}

async fn delete_all(admin: &Client, csrs: &[String], nodes: &[String], leases: &[String]) {
    let api: Api<Csr> = Api::all(admin.clone());
    for c in csrs {
        let _ = api.delete(c, &DeleteParams::default()).await;
    }
    let api: Api<Node> = Api::all(admin.clone());
    for n in nodes {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
    let api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), "default");
    for l in leases {
        let _ = api.delete(l, &DeleteParams::default()).await;
    }
}

/// A test that failed before `cleanup` still deletes what it created in a
/// real cluster (a test server goes with the test): Nodes left behind
/// would hold their addresses against the next run. On a thread of its
/// own, with a client of its own: the test's runtime may be unwinding.
impl Drop for Env {
    fn drop(&mut self) {
        if self.fake.is_some()
            || self.csrs.is_empty() && self.nodes.is_empty() && self.leases.is_empty()
        {
            return;
        }
        let (kubeconfig, csrs, nodes, leases) = (
            self.kubeconfig.clone(),
            std::mem::take(&mut self.csrs),
            std::mem::take(&mut self.nodes),
            std::mem::take(&mut self.leases),
        );
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let admin = kube_client(&kubeconfig).await;
                delete_all(&admin, &csrs, &nodes, &leases).await;
            });
        })
        .join();
    }
}

/// A kubelet's serving request (PEM) for node `name`, `dns` and `ips`,
/// with a fresh key.
fn serving_request(name: &str, dns: &[&str], ips: &[&str]) -> String {
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
    params.serialize_request(&key).unwrap().pem().unwrap()
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

/// `Node.status.addresses` of `node` set to `addresses`, written by
/// `client` (the node itself, as a compromised kubelet would).
async fn set_addresses(client: &Client, node: &str, addresses: &[(&str, &str)]) {
    let api: Api<Node> = Api::all(client.clone());
    // A real API server's controllers write the Node too (a 409 Conflict
    // on our resourceVersion, seen once in CI): read it again and retry.
    for attempt in 1.. {
        let mut n = api.get(node).await.unwrap();
        n.status.get_or_insert_with(Default::default).addresses = Some(
            addresses
                .iter()
                .map(|(t, a)| k8s_openapi::api::core::v1::NodeAddress {
                    type_: (*t).into(),
                    address: (*a).into(),
                })
                .collect(),
        );
        match api.replace_status(node, &PostParams::default(), &n).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 10 => continue,
            Err(e) => panic!("set the addresses of {node}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approves_what_passes_and_denies_what_definitely_fails() {
    let mut env = Env::new().await;
    let (n1, n2) = (env.node_name("n1"), env.node_name("n2"));
    let (ip1, ip2, ip6) = (env.ip(11), env.ip(12), env.ip6(0x11));
    // n1's IPv6 address spelled out; its kubelet asks for the short form.
    let ip6_long = ip6.replace("::", ":0:0:0:0:");
    env.add_node(
        &n1,
        &[
            ("InternalIP", &ip1),
            ("InternalIP", &ip6_long),
            ("Hostname", &n1),
        ],
    )
    .await;
    env.add_node(&n2, &[("InternalIP", &ip2), ("Hostname", &n2)])
        .await;
    let port = free_port();
    let admin_addr = format!("127.0.0.1:{port}");
    let approver = env.approver(
        &["--lease-name", "", "--admin-addr", &admin_addr, "--events"],
        &[],
    );
    let kubelet = env.node_client(&n1).await;

    let good = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&ip1, &ip6]).await;
    let (ty, reason, message) = env.decision(&good).await;
    assert_eq!(
        (ty.as_str(), reason.as_str()),
        ("Approved", "CertsyncApprove"),
        "{message}"
    );
    assert!(message.contains(&n1), "{message}");

    let stolen = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&ip2]).await;
    let (ty, reason, message) = env.decision(&stolen).await;
    assert_eq!((ty.as_str(), reason.as_str()), ("Denied", "CertsyncDeny"));
    assert!(
        message.starts_with("ip-san:") && message.contains(&format!("belongs to node \"{n2}\"")),
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
            .contains(&format!("deny: IP address {ip2} belongs to node")),
        "{}",
        approver.log()
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

/// The two shapes that made certsync see no names
/// while Go (the API server, the signer) sees all of them. The API server
/// accepts both; the approver must deny both, and `csr review` must not
/// show them as approvable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_read_differently_by_go_are_denied() {
    let mut env = Env::new().await;
    let (n1, n2) = (env.node_name("n1"), env.node_name("n2"));
    let (ip1, ip2) = (env.ip(21), env.ip(22));
    env.add_node(&n1, &[("InternalIP", &ip1), ("Hostname", &n1)])
        .await;
    env.add_node(&n2, &[("InternalIP", &ip2), ("Hostname", &n2)])
        .await;
    let (service_ip, _) = env.cluster_addresses().await;
    let kubelet = env.node_client(&n1).await;
    let loot = || {
        vec![
            forge::dns("kubernetes.default.svc"),
            forge::ip(&service_ip),
            forge::ip(&ip2),
        ]
    };
    // A harmless extensionRequest first, the names in a second one.
    let mut two = forge::Shape::kubelet(&n1, &[]);
    two.attributes = vec![
        forge::extension_request(&[forge::key_usage_digital()]),
        forge::extension_request(&[forge::san(&loot())]),
    ];
    // A UTF8String first in the SAN sequence: Go skips just that element.
    let mut names = vec![forge::utf8("x")];
    names.extend(loot());
    let utf8 = forge::Shape::kubelet(&n1, &names);
    let usages = ["digital signature", "server auth"];
    let two = env.create_csr(&kubelet, &two.pem(), &usages).await;
    let utf8 = env.create_csr(&kubelet, &utf8.pem(), &usages).await;

    let (table, _, code) = env.review(&[&two, &utf8]);
    assert_eq!(code, 0, "{table}");
    for (name, says) in [(&two, "deny: request"), (&utf8, "deny: sans")] {
        let row = table
            .lines()
            .find(|l| l.starts_with(name.as_str()))
            .unwrap_or_else(|| panic!("no row for {name} in\n{table}"));
        assert!(row.contains(says), "{row}");
    }

    let approver = env.approver(&["--lease-name", ""], &[]);
    let (ty, _, message) = env.decision(&two).await;
    assert_eq!(ty, "Denied", "{message}");
    assert!(message.contains("2 attributes"), "{message}");
    let (ty, _, message) = env.decision(&utf8).await;
    assert_eq!(ty, "Denied", "{message}");
    assert!(message.contains("UTF8String"), "{message}");
    drop(approver);
    env.cleanup().await;
}

/// A node writes its own Node status. Listing the
/// `kubernetes` Service IP, the API server's name or endpoint there gets
/// it nothing; listing another node's address gets that node's request
/// held for a person, never denied, and gets the lister nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addresses_a_node_writes_itself_are_not_proof() {
    let mut env = Env::new().await;
    let (n1, n2) = (env.node_name("n1"), env.node_name("n2"));
    let (ip1, ip2) = (env.ip(31), env.ip(32));
    env.add_node(&n1, &[("InternalIP", &ip1), ("Hostname", &n1)])
        .await;
    env.add_node(&n2, &[("InternalIP", &ip2), ("Hostname", &n2)])
        .await;
    let (service_ip, endpoint) = env.cluster_addresses().await;
    let evil = env.node_client(&n1).await;
    set_addresses(
        &evil,
        &n1,
        &[
            ("InternalIP", &ip1),
            ("InternalIP", &service_ip),
            ("InternalIP", &endpoint),
            ("InternalIP", &ip2),
            ("InternalDNS", "kubernetes.default.svc"),
            ("Hostname", &n1),
        ],
    )
    .await;
    let approver = env.approver(&["--lease-name", ""], &[]);
    let svc_ip = env.kubelet_asks(&evil, &n1, &[&n1], &[&service_ip]).await;
    let svc_name = env
        .kubelet_asks(&evil, &n1, &[&n1, "kubernetes.default.svc"], &[&ip1])
        .await;
    let apiserver = env.kubelet_asks(&evil, &n1, &[&n1], &[&endpoint]).await;
    for (csr, check) in [
        (&svc_ip, "ip-san:"),
        (&svc_name, "dns-san:"),
        (&apiserver, "ip-san:"),
    ] {
        let (ty, _, message) = env.decision(csr).await;
        assert_eq!(ty, "Denied", "{message}");
        assert!(
            message.starts_with(check) && message.contains("never a node's"),
            "{message}"
        );
    }
    // n2's own request for its own address, which n1 lists too: held.
    let kubelet2 = env.node_client(&n2).await;
    let victim = env.kubelet_asks(&kubelet2, &n2, &[&n2], &[&ip2]).await;
    let grab = env.kubelet_asks(&evil, &n1, &[&n1], &[&ip2]).await;
    approver.wait_log(&format!("csr={victim}"));
    approver.wait_log(&format!("csr={grab}"));
    approver.wait_log("lists it too");
    assert_eq!(
        env.conditions(&victim).await,
        0,
        "neither approved nor denied"
    );
    assert_eq!(
        env.conditions(&grab).await,
        0,
        "neither approved nor denied"
    );
    drop(approver);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_a_node_that_registers_later() {
    let mut env = Env::new().await;
    let n3 = env.node_name("n3");
    let ip = env.ip(13);
    let approver = env.approver(&["--lease-name", ""], &[]);
    let kubelet = env.node_client(&n3).await;
    let csr = env.kubelet_asks(&kubelet, &n3, &[&n3], &[&ip]).await;
    approver.wait_log(&format!("wait: node \"{n3}\" does not exist (yet)"));
    assert_eq!(env.conditions(&csr).await, 0, "neither approved nor denied");
    env.add_node(&n3, &[("InternalIP", &ip), ("Hostname", &n3)])
        .await;
    let (ty, _, _) = env.decision(&csr).await;
    assert_eq!(ty, "Approved");
    assert_eq!(
        approver
            .log()
            .matches(&format!("wait: node \"{n3}\""))
            .count(),
        1,
        "a wait is logged once"
    );
    drop(approver);
    env.cleanup().await;
}

/// A dry run decides, writes nothing and takes no Lease: started first, it
/// must not keep the real approver from deciding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_without_writing_or_taking_the_lease() {
    let mut env = Env::new().await;
    let n4 = env.node_name("n4");
    let ip = env.ip(14);
    env.add_node(&n4, &[("InternalIP", &ip), ("Hostname", &n4)])
        .await;
    let lease = format!("certsync-approver-{}", env.run);
    env.leases.push(lease.clone());
    let args = ["--lease-name", lease.as_str(), "--lease-duration", "4s"];
    let dry = env.approver(
        &[&args[..], &["--dry-run"]].concat(),
        &[("POD_NAME", "dry-run")],
    );
    dry.wait_log("approver started");
    let kubelet = env.node_client(&n4).await;
    let csr = env.kubelet_asks(&kubelet, &n4, &[&n4], &[&ip]).await;
    dry.wait_log(&format!("csr={csr}"));
    dry.wait_log("approve: every check passed");
    assert!(dry.log().contains("dry_run=true"));
    assert_eq!(env.conditions(&csr).await, 0, "nothing written");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.admin.clone(), "default");
    assert!(
        leases.get_opt(&lease).await.unwrap().is_none(),
        "a dry run took the Lease"
    );
    let real = env.approver(&args, &[("POD_NAME", "real")]);
    assert_eq!(env.decision(&csr).await.0, "Approved");
    drop(real);
    drop(dry);
    env.cleanup().await;
}

/// Two replicas with one Lease: one leader writes, and no CSR is decided
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvers_decide_each_csr_once() {
    let mut env = Env::new().await;
    let n5 = env.node_name("n5");
    let ip = env.ip(15);
    env.add_node(&n5, &[("InternalIP", &ip), ("Hostname", &n5)])
        .await;
    let lease = format!("certsync-approver-{}", env.run);
    env.leases.push(lease.clone());
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
        names.push(env.kubelet_asks(&kubelet, &n5, &[&n5], &[&ip]).await);
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
    let late = env.kubelet_asks(&kubelet, &n5, &[&n5], &[&ip]).await;
    assert_eq!(env.decision(&late).await.0, "Approved");
    assert_eq!(env.conditions(&late).await, 1);
    assert!(
        follower.log().contains(&format!("csr={late}")),
        "the other replica decided it"
    );
    drop(follower);
    env.cleanup().await;
}

/// A leader whose Lease was taken over (here: by the admin, for another
/// holder, for an hour) writes nothing, even before its election loop
/// notices: it reads the Lease before each write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_its_lease_writes_nothing() {
    let mut env = Env::new().await;
    let n8 = env.node_name("n8");
    let ip = env.ip(18);
    env.add_node(&n8, &[("InternalIP", &ip), ("Hostname", &n8)])
        .await;
    let lease = format!("certsync-approver-{}", env.run);
    env.leases.push(lease.clone());
    let approver = env.approver(
        &["--lease-name", &lease, "--lease-duration", "60s"],
        &[("POD_NAME", "approver-a")],
    );
    let kubelet = env.node_client(&n8).await;
    let first = env.kubelet_asks(&kubelet, &n8, &[&n8], &[&ip]).await;
    assert_eq!(env.decision(&first).await.0, "Approved");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.admin.clone(), "default");
    let mut l = leases.get(&lease).await.unwrap();
    let spec = l.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("someone-else".into());
    spec.lease_duration_seconds = Some(3600);
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases
        .replace(&lease, &PostParams::default(), &l)
        .await
        .unwrap();
    let second = env.kubelet_asks(&kubelet, &n8, &[&n8], &[&ip]).await;
    approver.wait_log("not writing");
    assert_eq!(
        env.conditions(&second).await,
        0,
        "written without the Lease"
    );
    drop(approver);
    env.cleanup().await;
}

/// `csr review`: a row per pending CSR with the verdict; `--approve`
/// approves exactly those that pass, `--deny` denies those that fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_shows_verdicts_and_approves_only_what_passes() {
    let mut env = Env::new().await;
    let (n6, n7) = (env.node_name("n6"), env.node_name("n7"));
    let (ip6, ip7, unlisted) = (env.ip(16), env.ip(17), env.ip(77));
    env.add_node(&n6, &[("InternalIP", &ip6), ("Hostname", &n6)])
        .await;
    env.add_node(&n7, &[("InternalIP", &ip7), ("Hostname", &n7)])
        .await;
    let kubelet = env.node_client(&n6).await;
    let good = env.kubelet_asks(&kubelet, &n6, &[&n6], &[&ip6]).await;
    let bad = env.kubelet_asks(&kubelet, &n6, &[&n6], &[&ip7]).await;
    let unknown = env.kubelet_asks(&kubelet, &n6, &[&n6], &[&unlisted]).await;
    let review = |extra: &[&str]| {
        let mut args = vec![good.as_str(), bad.as_str(), unknown.as_str()];
        args.extend(extra);
        let (out, err, code) = env.review(&args);
        assert_eq!(code, 0, "{err}");
        (out, err)
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
            "deny: ip-san IP address {ip7} belongs to node \"{n7}\""
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

/// `csr review` without a node network runs every other check and shows
/// a request passing them as `unchecked`, never `approve`; given the node
/// networks, an address the node lists outside them is denied, whatever
/// review does for the case without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_without_node_networks_approves_no_address() {
    let mut env = Env::new().await;
    let n8 = env.node_name("n8");
    let (inside, outside) = (env.ip(18), format!("fdc6:0:{:x}::18", env.block));
    env.add_node(
        &n8,
        &[
            ("InternalIP", &inside),
            ("InternalIP", &outside),
            ("Hostname", &n8),
        ],
    )
    .await;
    let kubelet = env.node_client(&n8).await;
    let csr = env
        .kubelet_asks(&kubelet, &n8, &[&n8], &[&inside, &outside])
        .await;
    let review = |networks: &[&str]| {
        let out = std::process::Command::new(certsync_bin())
            .args(["csr", "review", "--kubeconfig"])
            .arg(&env.kubeconfig)
            .args(networks)
            .args(["-l", &format!("{RUN_LABEL}={}", env.run), &csr])
            .output()
            .unwrap();
        let table = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{table}");
        let row = table.lines().find(|l| l.starts_with(&csr));
        row.unwrap_or_else(|| panic!("no row for {csr} in\n{table}"))
            .to_owned()
    };
    let unchecked = review(&[]);
    assert!(
        unchecked.contains("unchecked: passes every other check"),
        "{unchecked}"
    );
    let strict = review(&["--node-cidr", NODE_NET, "--node-cidr", NODE_NET6]);
    assert!(
        strict.contains(&format!(
            "deny: ip-san IP address {outside} is outside the node networks"
        )),
        "{strict}"
    );
    assert_eq!(env.conditions(&csr).await, 0, "review alone writes nothing");
    env.cleanup().await;
}

/// What a node puts in its request reaches the
/// operator's terminal escaped, in the table and in the approver's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_and_logs_escape_what_a_node_wrote() {
    let mut env = Env::new().await;
    let n9 = env.node_name("n9");
    let ip = env.ip(19);
    env.add_node(&n9, &[("InternalIP", &ip), ("Hostname", &n9)])
        .await;
    let kubelet = env.node_client(&n9).await;
    let shape = forge::Shape::kubelet(
        &n9,
        &[
            forge::dns(&format!("{n9}\u{1b}]0;pwned\u{7}\r\u{1b}[2K")),
            forge::ip(&ip),
        ],
    );
    let csr = env
        .create_csr(
            &kubelet,
            &shape.pem(),
            &["digital signature", "server auth"],
        )
        .await;
    let (table, err, code) = env.review(&[&csr]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !table.contains('\u{1b}') && !table.contains('\r') && !table.contains('\u{7}'),
        "raw control characters in\n{table:?}"
    );
    assert!(table.contains("\\u{1b}"), "{table}");
    assert!(table.contains("deny: sans"), "{table}");
    let approver = env.approver(&["--lease-name", ""], &[]);
    let (ty, _, message) = env.decision(&csr).await;
    assert_eq!(ty, "Denied");
    assert!(!message.chars().any(char::is_control), "{message:?}");
    approver.wait_log(&format!("csr={csr}"));
    let log = approver.log();
    assert!(
        !log.contains('\u{1b}') && !log.contains('\u{7}'),
        "raw control characters in the log"
    );
    drop(approver);
    env.cleanup().await;
}

/// Without a node network the approver would trust what nodes write about
/// themselves: it refuses to start unless told to, and says how; so does
/// `csr review` asked to approve or deny. Looking needs no flags: plain
/// `csr review` goes on to the API server (here a kubeconfig that does not
/// exist) and marks what it cannot check.
#[test]
fn approve_needs_node_networks_or_an_explicit_opt_in() {
    let out = std::process::Command::new(certsync_bin())
        .args(["csr", "review", "--kubeconfig", "/nonexistent"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent"), "{err}");
    for args in [
        &["approve", "--kubeconfig", "/nonexistent"][..],
        &["csr", "review", "--approve", "--kubeconfig", "/nonexistent"][..],
        &["csr", "review", "--deny", "--kubeconfig", "/nonexistent"][..],
    ] {
        let out = std::process::Command::new(certsync_bin())
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.contains("--node-cidr") && err.contains("--allow-any-node-address"),
            "{err}"
        );
    }
}

/// A cluster without the ServiceCIDR API (before Kubernetes 1.33): the
/// `kubernetes` Service's own IP is still refused, and `--service-cidr`
/// names the rest of the range. Test server only: a real cluster's API
/// cannot be switched off by a test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_servicecidr_api_the_service_range_comes_from_flags() {
    let mut env = Env::test_server().await;
    let fake = env.fake.as_ref().expect("the test API server");
    fake.serve_service_cidrs(false);
    let n1 = env.node_name("n1");
    let ip = env.ip(41);
    // The operator's Service range here is inside the node network, so
    // only --service-cidr can tell the approver it is not a node's.
    let range = format!("{}/30", env.ip(44));
    let in_range = env.ip(45);
    let (service_ip, _) = env.cluster_addresses().await;
    let kubelet = env.node_client(&n1).await;
    env.add_node(
        &n1,
        &[
            ("InternalIP", &ip),
            ("InternalIP", &service_ip),
            ("InternalIP", &in_range),
            ("Hostname", &n1),
        ],
    )
    .await;
    let approver = env.approver(
        &[
            "--lease-name",
            "",
            "--node-cidr",
            "10.0.0.0/8",
            "--service-cidr",
            &range,
        ],
        &[],
    );
    let svc = env
        .kubelet_asks(&kubelet, &n1, &[&n1], &[&service_ip])
        .await;
    let ranged = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&in_range]).await;
    let good = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&ip]).await;
    let (ty, _, message) = env.decision(&svc).await;
    assert_eq!(ty, "Denied");
    assert!(message.contains("the kubernetes Service's IP"), "{message}");
    let (ty, _, message) = env.decision(&ranged).await;
    assert_eq!(ty, "Denied");
    assert!(message.contains("--service-cidr"), "{message}");
    assert_eq!(env.decision(&good).await.0, "Approved");
    drop(approver);
    env.cleanup().await;
}

/// The conditions of `csr` once the approver has logged a verdict on it:
/// none (it waits) or the one decision written.
async fn verdict_written(env: &Env, approver: &Certsync, csr: &str) -> Vec<String> {
    approver.wait_log(&format!("csr={csr}"));
    // A decision is written right after it is logged.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api: Api<Csr> = Api::all(env.admin.clone());
    api.get(csr)
        .await
        .unwrap()
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| format!("{}: {}", c.type_, c.message.unwrap_or_default()))
        .collect()
}

/// Attack: before Kubernetes 1.33 (no networking.k8s.io/v1 ServiceCIDR)
/// and without `--service-cidr`, the approver knows one Service IP (the
/// `kubernetes` Service's) and decides anyway. With a node network that
/// covers the Service range (here kubeadm's 10.96.0.0/12 inside a
/// `--node-cidr 10.0.0.0/8`), a node that lists the cluster DNS Service's
/// IP gets a serving certificate for it, signed by the cluster CA. Fail
/// closed: a Service IP must be refused, or nothing decided, while the
/// Service ranges are unknown. Test server only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_service_ip_is_not_approved_while_the_service_range_is_unknown() {
    let mut env = Env::test_server().await;
    let fake = env.fake.as_ref().expect("the test API server");
    fake.serve_service_cidrs(false);
    let kube_dns = "10.96.0.10";
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.admin.clone(), "kube-system");
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {"clusterIP": kube_dns, "clusterIPs": [kube_dns], "type": "ClusterIP",
                 "ports": [{"name": "dns-tcp", "port": 53, "protocol": "TCP"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let n1 = env.node_name("n1");
    let ip = env.ip(51);
    env.add_node(
        &n1,
        &[
            ("InternalIP", &ip),
            ("InternalIP", kube_dns),
            ("Hostname", &n1),
        ],
    )
    .await;
    let kubelet = env.node_client(&n1).await;
    let approver = env.approver(&["--lease-name", "", "--node-cidr", "10.0.0.0/8"], &[]);
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[kube_dns]).await;
    // Fail closed: nothing is decided, and the log says what to pass.
    approver.wait_log("pass --service-cidr");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.conditions(&csr).await,
        0,
        "decided without a Service range"
    );
    let (_, err, code) = env.review(&[&csr]);
    assert_ne!(code, 0, "csr review decided without a Service range");
    assert!(err.contains("--service-cidr"), "{err}");
    drop(approver);
    env.cleanup().await;
}

/// Attack: the API server is reached through an address that is neither
/// the `kubernetes` Service's IP nor an EndpointSlice address: the
/// control-plane endpoint (kubeadm's `controlPlaneEndpoint`, a
/// keepalived/kube-vip VIP or a load balancer), published in
/// `kube-public/cluster-info` and in every kubeconfig. It is often inside
/// the node network. A node that lists it in its own status gets a
/// serving certificate for it, signed by the cluster CA that every
/// kubeconfig trusts for the API server: a man in the middle of every
/// client. Test server only (a real cluster's cluster-info is not ours
/// to rewrite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_the_control_plane_endpoint_is_never_a_nodes() {
    let mut env = Env::test_server().await;
    let vip = env.ip(60);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    \
         certificate-authority-data: \"\"\n    server: https://{vip}:6443\n\
         contexts: null\ncurrent-context: \"\"\nusers: null\n"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.admin.clone(), "kube-public");
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {"kubeconfig": kubeconfig},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let n1 = env.node_name("n1");
    let ip = env.ip(61);
    env.add_node(
        &n1,
        &[("InternalIP", &ip), ("InternalIP", &vip), ("Hostname", &n1)],
    )
    .await;
    let kubelet = env.node_client(&n1).await;
    let approver = env.approver(&["--lease-name", ""], &[]);
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&vip]).await;
    let written = verdict_written(&env, &approver, &csr).await;
    assert!(
        !written.iter().any(|c| c.starts_with("Approved")),
        "a certificate for the API server's control-plane endpoint {vip} was approved: {written:?}"
    );
    drop(approver);
    env.cleanup().await;
}

/// From a workstation (no pod, no POD_NAMESPACE): the kubeconfig comes
/// from `KUBECONFIG`, `--context` picks the context, and the Lease goes in
/// that context's namespace, as kubectl would put anything namespaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_goes_in_the_namespace_of_the_chosen_context() {
    let mut env = Env::new().await;
    let n9 = env.node_name("n9");
    let ip = env.ip(19);
    env.add_node(&n9, &[("InternalIP", &ip), ("Hostname", &n9)])
        .await;
    // The admin kubeconfig plus a context "picked" like its current one,
    // with the namespace `default`.
    let mut kc = kube::config::Kubeconfig::read_from(&env.kubeconfig).unwrap();
    let current = kc.current_context.clone().unwrap();
    let mut picked = kc
        .contexts
        .iter()
        .find(|c| c.name == current)
        .unwrap()
        .clone();
    picked.name = "picked".into();
    picked.context.as_mut().unwrap().namespace = Some("default".into());
    kc.contexts.push(picked);
    let file = env.tmp.path().join("contexts.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&kc).unwrap()).unwrap();

    let lease = format!("certsync-approver-{}", env.run);
    env.leases.push(lease.clone());
    let mut cmd = std::process::Command::new(certsync_bin());
    cmd.args(["approve", "--context", "picked", "--lease-name", &lease])
        .args(["--node-cidr", NODE_NET, "--admin-addr", "127.0.0.1:0"])
        .args(["-l", &format!("{RUN_LABEL}={}", env.run)])
        .env("KUBECONFIG", &file)
        .env_remove("POD_NAMESPACE")
        .env_remove("CERTSYNC_KUBECONFIG");
    let approver = Certsync::start_with(&mut cmd, env.tmp.path());
    let kubelet = env.node_client(&n9).await;
    let csr = env.kubelet_asks(&kubelet, &n9, &[&n9], &[&ip]).await;
    assert_eq!(env.decision(&csr).await.0, "Approved");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.admin.clone(), "default");
    let held = leases.get(&lease).await;
    assert!(
        held.is_ok(),
        "no Lease {lease} in default: {held:?}\n{}",
        approver.log()
    );
    drop(approver);
    env.cleanup().await;
}

/// An approver started while the API server is down stays up (alive, not
/// ready) and retries with backoff; once the server is up it takes its
/// Lease and decides. A Deployment's pod never crash-loops over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_started_before_the_api_server_waits_for_it() {
    let mut env = Env::test_server().await;
    let fake = env.fake.as_mut().expect("the test API server");
    fake.down();
    let lease = format!("certsync-approver-{}", env.run);
    env.leases.push(lease.clone());
    let port = free_port();
    let mut approver = env.approver(
        &[
            "--lease-name",
            &lease,
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ],
        &[],
    );
    approver.wait_log("not ready, retrying");
    assert!(approver.is_running(), "{}", approver.log());
    assert_eq!(http_get(port, "/livez").map(|r| r.0), Some(200));
    assert_eq!(http_get(port, "/readyz").map(|r| r.0), Some(503));

    env.fake.as_mut().unwrap().up().await;
    let n10 = env.node_name("n10");
    let ip = env.ip(20);
    env.add_node(&n10, &[("InternalIP", &ip), ("Hostname", &n10)])
        .await;
    let kubelet = env.node_client(&n10).await;
    let csr = env.kubelet_asks(&kubelet, &n10, &[&n10], &[&ip]).await;
    assert_eq!(env.decision(&csr).await.0, "Approved");
    wait_for("ready", || {
        (http_get(port, "/readyz").map(|r| r.0) == Some(200)).then_some(())
    });
    assert!(approver.is_running());
    drop(approver);
    env.cleanup().await;
}

/// `GET /livez` on the admin port, with a generous read timeout: `None`
/// when it does not answer within it (a stalled runtime).
fn livez(port: u16) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split(' ').nth(1)?.parse().ok()
}

/// Attack: one node (its kubelet credentials may create CSRs) floods the
/// approver: a thousand small requests that all wait (its Node is never
/// registered), and a few of ~700 KB (kube-apiserver takes bodies up to
/// ~3 MB). Before, every watch event re-decided every pending CSR, parsing
/// each on the runtime: another node's request waited minutes and
/// `/livez` stalled. Now each CSR is decided when it changes, off the
/// runtime, one per requester in turn; a requester's CSRs beyond the
/// oldest few pending are denied unread, and an oversized request is
/// denied unparsed. The honest node's request is decided within the usual
/// patience while the flood is there, and `/livez` answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_node_flooding_csrs_delays_no_other_node() {
    use futures::StreamExt;
    let mut env = Env::new().await;
    let (flooder, honest) = (env.node_name("flood"), env.node_name("honest"));
    let ip = env.ip(71);
    env.add_node(&honest, &[("InternalIP", &ip), ("Hostname", &honest)])
        .await;
    let flood_client = env.node_client(&flooder).await;
    let honest_client = env.node_client(&honest).await;
    let (approver, port) = env.approver_with_admin();
    wait_for("ready", || {
        (http_get(port, "/readyz").map(|r| r.0) == Some(200)).then_some(())
    });
    // The flood: valid requests for the flooder's own name, which wait for
    // a Node that never comes.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![flooder.clone()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{flooder}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let small = params.serialize_request(&key).unwrap().pem().unwrap();
    // ~700 KB: the same request followed by filler; first, so that they
    // are among the oldest and read (and refused for their size).
    let big = format!("{small}{}", "x".repeat(700 * 1024));
    let requests: Vec<String> = std::iter::repeat_n(big, 4)
        .chain(std::iter::repeat_n(small, 1000))
        .collect();
    let run = env.run.clone();
    let flooding = tokio::spawn(
        futures::stream::iter(requests)
            .map(move |request| {
                let (client, run) = (flood_client.clone(), run.clone());
                async move {
                    let csr = Csr {
                        metadata: kube::api::ObjectMeta {
                            generate_name: Some("certsync-e2e-flood-".into()),
                            labels: Some([(RUN_LABEL.to_owned(), run)].into()),
                            ..Default::default()
                        },
                        spec: k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec {
                            request: ByteString(request.into_bytes()),
                            signer_name: SERVING.into(),
                            usages: Some(vec!["digital signature".into(), "server auth".into()]),
                            ..Default::default()
                        },
                        status: None,
                    };
                    Api::<Csr>::all(client)
                        .create(&PostParams::default(), &csr)
                        .await
                        .unwrap()
                        .metadata
                        .name
                        .unwrap()
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<String>>(),
    );
    let count = |d: &str, r: &str| {
        metric(
            port,
            &format!("certsync_csr_decisions_total{{decision=\"{d}\",reason=\"{r}\"}}"),
        )
    };
    // While the flood is being decided, the honest node asks.
    // Eight requests at a time from a debug build beside the node tests:
    // a bound on a hang, not a speed.
    wait_for_within("the flood under way", Duration::from_secs(60), || {
        (count("deny", "too-many-pending") >= 20.0).then_some(())
    });
    assert_eq!(livez(port), Some(200), "/livez while the flood is decided");
    let csr = env
        .kubelet_asks(&honest_client, &honest, &[&honest], &[&ip])
        .await;
    let (ty, _, message) = env.decision(&csr).await;
    assert_eq!(ty, "Approved", "{message}");
    assert_eq!(livez(port), Some(200), "/livez while the flood is decided");
    let flood = flooding.await.unwrap();
    env.csrs.extend(flood.iter().cloned());
    // The flood itself: the extras denied unread (the oversized among the
    // oldest refused unparsed), the oldest few left waiting for their Node.
    // (The approver writes one verdict per requester per round, and a
    // real API server takes ~20 such writes a second: the test waits for a
    // good part of them, not all; beside CI's node tests on 2 cores that
    // took over 90 s. A bound on a hang, not a speed.)
    wait_for_within(
        "the flood's extras denied",
        Duration::from_secs(180),
        || (count("deny", "too-many-pending") >= 200.0).then_some(()),
    );
    let api: Api<Csr> = Api::all(env.admin.clone());
    let messages: Vec<String> = api
        .list(&kube::api::ListParams::default().labels(&format!("{RUN_LABEL}={}", env.run)))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.metadata.name.as_ref().is_some_and(|n| flood.contains(n)))
        .flat_map(|c| c.status.and_then(|s| s.conditions).unwrap_or_default())
        .filter_map(|c| c.message)
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("too-many-pending:") && m.contains(&flooder)),
        "{:?}",
        messages.first()
    );

    assert_eq!(livez(port), Some(200));
    drop(approver);
    let _ = api
        .delete_collection(
            &DeleteParams::default(),
            &kube::api::ListParams::default().labels(&format!("{RUN_LABEL}={}", env.run)),
        )
        .await;
    env.csrs.retain(|c| !flood.contains(c));
    env.cleanup().await;
}

/// Attack: a Service's external addresses (spec.externalIPs,
/// spec.loadBalancerIP, status.loadBalancer.ingress) are often inside the
/// node network. A node that lists one in its own status must not get a
/// serving certificate for it, signed by the cluster CA: the denial names
/// the Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_services_external_address_is_never_a_nodes() {
    let mut env = Env::new().await;
    let (external, ingress) = (env.ip(81), env.ip(82));
    let name = format!("certsync-e2e-lb-{}", env.run);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.admin.clone(), "default");
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "LoadBalancer", "externalIPs": [external],
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
    }))
    .unwrap();
    let mut svc = services.create(&PostParams::default(), &svc).await.unwrap();
    svc.status = serde_json::from_value(serde_json::json!({
        "loadBalancer": {"ingress": [{"ip": ingress}]}
    }))
    .unwrap();
    services
        .replace_status(&name, &PostParams::default(), &svc)
        .await
        .unwrap();
    let n1 = env.node_name("n1");
    let ip = env.ip(83);
    env.add_node(&n1, &[("InternalIP", &ip), ("Hostname", &n1)])
        .await;
    // n2 lists the Service's addresses as its own (k3s ServiceLB and
    // kube-vip publish node IPs as Service addresses): in dispute.
    let n2 = env.node_name("n2");
    let ip2 = env.ip(84);
    env.add_node(
        &n2,
        &[
            ("InternalIP", &ip2),
            ("ExternalIP", &external),
            ("ExternalIP", &ingress),
            ("Hostname", &n2),
        ],
    )
    .await;
    let kubelet = env.node_client(&n1).await;
    let kubelet2 = env.node_client(&n2).await;
    let approver = env.approver(&["--lease-name", ""], &[]);
    for address in [&external, &ingress] {
        // Also to a node that does not list it (a node listing it waits
        // for a person: a Service must not get a node's own address
        // denied to it).
        let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[address]).await;
        let (ty, _, message) = env.decision(&csr).await;
        assert_eq!(ty, "Denied", "{address}: {message}");
        assert!(
            message.starts_with("ip-san:") && message.contains(&format!("default/{name}")),
            "{address}: {message}"
        );
    }
    // The node's own address is still its own.
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&ip]).await;
    assert_eq!(env.decision(&csr).await.0, "Approved");
    // The node listing the Service's address waits for a person: its
    // older CSR is decided (waits) in a round before its newer one.
    let disputed = env
        .kubelet_asks(&kubelet2, &n2, &[&n2], &[&ip2, &external])
        .await;
    let own = env.kubelet_asks(&kubelet2, &n2, &[&n2], &[&ip2]).await;
    assert_eq!(env.decision(&own).await.0, "Approved");
    assert_eq!(env.conditions(&disputed).await, 0, "the disputed CSR waits");
    drop(approver);
    let _ = services.delete(&name, &DeleteParams::default()).await;
    env.cleanup().await;
}

/// The cluster facts are read at most
/// every 30 s, and a node that watches Services listed a new Service's
/// external IP and asked for it inside that window (4 of 6 approved).
/// Approvals are now decided again on facts read after the CSR was seen:
/// the claim waits for a person (a Service's address the node lists),
/// while the node's own request is approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_service_made_just_before_a_csr_is_seen_at_decision_time() {
    let mut env = Env::new().await;
    let n1 = env.node_name("n1");
    let ip = env.ip(91);
    env.add_node(&n1, &[("InternalIP", &ip), ("Hostname", &n1)])
        .await;
    let kubelet = env.node_client(&n1).await;
    let approver = env.approver(&["--lease-name", ""], &[]);
    // The approver has read the cluster facts once: n1 is approved.
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&ip]).await;
    assert_eq!(env.decision(&csr).await.0, "Approved");
    // Then, well inside the 30 s: a Service with a new external IP, a node
    // listing that IP as its own, and its request for it.
    let external = env.ip(92);
    let name = format!("certsync-e2e-race-{}", env.run);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.admin.clone(), "default");
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"externalIPs": [external],
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let n2 = env.node_name("n2");
    let ip2 = env.ip(93);
    env.add_node(
        &n2,
        &[
            ("InternalIP", &ip2),
            ("ExternalIP", &external),
            ("Hostname", &n2),
        ],
    )
    .await;
    let kubelet2 = env.node_client(&n2).await;
    let claimed = env
        .kubelet_asks(&kubelet2, &n2, &[&n2], &[&ip2, &external])
        .await;
    let own = env.kubelet_asks(&kubelet2, &n2, &[&n2], &[&ip2]).await;
    assert_eq!(env.decision(&own).await.0, "Approved");
    assert_eq!(
        env.conditions(&claimed).await,
        0,
        "the claim of the new Service's address waits for a person"
    );
    drop(approver);
    let _ = services.delete(&name, &DeleteParams::default()).await;
    env.cleanup().await;
}

#[path = "approve/rounds.rs"]
mod rounds;

#[path = "approve/services.rs"]
mod services;

#[path = "approve/kubeadm_config.rs"]
mod kubeadm_config;

#[path = "approve/addresses.rs"]
mod addresses;

#[path = "approve/admin.rs"]
mod admin;
