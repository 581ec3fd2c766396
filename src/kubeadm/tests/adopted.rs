//! An adopted node and kubeadm's files, made for the revert and
//! handback tests: CAs, pairs and kubeconfigs ending when a test says, a
//! node as adopt leaves it, an API server holding kubeadm-config.

use std::path::{Path, PathBuf};

use super::*;

/// The node's CA in these tests (written as each of kubeadm's three CAs,
/// pki/ca.crt, pki/etcd/ca.crt and pki/front-proxy-ca.crt, by
/// [`adopted_node`]): its certificate (PEM), issuer, and key (PEM).
pub(super) static CA: std::sync::LazyLock<(
    String,
    rcgen::Issuer<'static, rcgen::KeyPair>,
    String,
)> = std::sync::LazyLock::new(|| {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    let cert = p.self_signed(&key).expect("ca").pem();
    let pem = key.serialize_pem();
    (cert, rcgen::Issuer::new(p, key), pem)
});

/// The CA files adopt's record names issuers of (certificate, key).
pub(super) const CAS: [&str; 3] = [
    "/etc/kubernetes/pki/ca",
    "/etc/kubernetes/pki/etcd/ca",
    "/etc/kubernetes/pki/front-proxy-ca",
];

/// A certificate the node's CA issued and its key (PEM), ending `ends`
/// from now.
pub(super) fn pair_ending(ends: time::Duration) -> (String, String) {
    pair_by(ends, Some(&CA.1))
}

/// A self-signed certificate and its key, ending `ends` from now: what
/// someone who may write the node's files could put in place of a pair.
pub(super) fn forged_ending(ends: time::Duration) -> (String, String) {
    pair_by(ends, None)
}

/// A pair ending `ends` from now, signed by `issuer` or by its own key.
fn pair_by(
    ends: time::Duration,
    issuer: Option<&rcgen::Issuer<'static, rcgen::KeyPair>>,
) -> (String, String) {
    pair_from(kubeadm_params(ends), issuer)
}

/// A leaf as kubeadm makes one (KeyUsage digitalSignature and
/// keyEncipherment, ExtKeyUsage serverAuth, CA:FALSE, started 5 minutes
/// ago), ending `ends` from now; a test changes what it attacks.
pub(super) fn kubeadm_params(ends: time::Duration) -> rcgen::CertificateParams {
    let now = time::OffsetDateTime::now_utc();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + ends;
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    p.is_ca = rcgen::IsCa::ExplicitNoCa;
    p
}

/// The certificate `p` describes with a new key, signed by `issuer` or
/// self-signed, and the key (PEM).
pub(super) fn pair_from(
    p: rcgen::CertificateParams,
    issuer: Option<&rcgen::Issuer<'static, rcgen::KeyPair>>,
) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = match issuer {
        Some(issuer) => p.signed_by(&key, issuer),
        None => p.self_signed(&key),
    };
    (cert.expect("cert").pem(), key.serialize_pem())
}

/// A kubeadm kubeconfig with an embedded client certificate ending `ends`
/// from now; its server refuses connections at once.
pub(super) fn kubeconfig_ending(ends: time::Duration) -> String {
    kubeconfig_with(pair_ending(ends))
}

/// [`kubeconfig_ending`] with a self-signed pair.
pub(super) fn forged_kubeconfig(ends: time::Duration) -> String {
    kubeconfig_with(forged_ending(ends))
}

pub(super) fn kubeconfig_with((cert, key): (String, String)) -> String {
    use base64::Engine as _;
    let b64 = |pem: String| base64::engine::general_purpose::STANDARD.encode(pem);
    let (data, key) = (b64(cert), b64(key));
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"https://127.0.0.1:1\"}}\n  name: kubernetes\n\
         contexts:\n- context: {{cluster: kubernetes, user: kubernetes-admin}}\n  name: admin\ncurrent-context: admin\n\
         users:\n- name: kubernetes-admin\n  user: {{client-certificate-data: {data}, client-key-data: {key}}}\n"
    )
}

pub(super) const BACKUP: &str = "/etc/kubernetes/certsync/backup/20261124T000000Z";

/// A node as adopt leaves it: kubeadm's CAs (keys and all), each pair
/// and kubeconfig adopt keeps in step certsync's 10-minute copy with
/// kubeadm's year-long one in the backup (made now, so the test never
/// ages) and named in adopt's record, certsync's targets, configuration and
/// kubeconfigs.
pub(super) fn adopted_node() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = node_dir();
    let d = dir.path();
    let year = time::Duration::days(365);
    let minutes = time::Duration::minutes(10);
    let write = |node_path: &str, text: &str| {
        let p = host(d, node_path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    let backed_up = |node_path: &str| {
        plan::backup_path(d, BACKUP, node_path)
            .strip_prefix(d)
            .map(|rel| format!("/etc/kubernetes/{}", rel.display()))
            .expect("in the node")
    };
    for ca in CAS {
        write(&format!("{ca}.crt"), &CA.0);
        write(&format!("{ca}.key"), &CA.2);
        let key = host(d, &format!("{ca}.key"));
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let mut pairs = serde_json::Map::new();
    for p in plan::pairs() {
        let (crt, key) = (format!("{p}.crt"), format!("{p}.key"));
        let (kubeadms, certsyncs) = (pair_ending(year), pair_ending(minutes));
        write(&backed_up(&crt), &kubeadms.0);
        write(&backed_up(&key), &kubeadms.1);
        write(&crt, &certsyncs.0);
        write(&key, &certsyncs.1);
        pairs.insert(p, BACKUP.into());
    }
    let mut kubeconfigs = serde_json::Map::new();
    for f in ["admin.conf", "controller-manager.conf", "scheduler.conf"] {
        let k = format!("/etc/kubernetes/{f}");
        write(&backed_up(&k), &kubeconfig_ending(year));
        write(&k, &kubeconfig_ending(minutes));
        kubeconfigs.insert(k, BACKUP.into());
    }
    for f in ["controller-manager.conf", "scheduler.conf"] {
        write(&format!("/etc/kubernetes/certsync/{f}"), "certsync's\n");
    }
    for t in all_targets(d) {
        write(&format!("{t}/tls.crt"), &format!("target {t}\n"));
    }
    write(plan::CONFIG, "mappings: []\n");
    // The manifests as adopt writes them (what kubeadm generates for
    // certsync's flags and volumes), kubeadm's own in the backup.
    let mut manifests = serde_json::Map::new();
    for c in manifest::components() {
        let path = format!("/etc/kubernetes/manifests/{}.yaml", c.name);
        let ours = super::fixture(&format!("adopted/{}.yaml", c.name));
        let kept = plan::backup_path(d, BACKUP, &path);
        std::fs::create_dir_all(kept.parent().expect("parent")).expect("mkdir");
        std::fs::copy(host(d, &path), kept).expect("backup");
        write(&path, &ours);
        manifests.insert(path, serde_json::json!([BACKUP, digest(ours.as_bytes())]));
    }
    let state = serde_json::json!({
        "manifests": manifests,
        "backups": [BACKUP],
        "made_dirs": plan::MADE_DIRS,
        "kubeconfigs": kubeconfigs,
        "pairs": pairs,
    });
    write(plan::STATE, &state.to_string());
    dir
}

/// The pairs' and kubeconfigs' files adopt's record names (node paths).
pub(super) fn handed_back(d: &Path) -> Vec<String> {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(host(d, plan::STATE)).expect("state")).expect("json");
    let kubeconfigs = state["kubeconfigs"]
        .as_object()
        .expect("kubeconfigs")
        .keys();
    let pairs = state["pairs"].as_object().expect("pairs").keys();
    kubeconfigs
        .cloned()
        .chain(pairs.flat_map(|p| [format!("{p}.crt"), format!("{p}.key")]))
        .collect()
}

/// Every file below `dir` with its bytes, and every directory.
pub(super) fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut all = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                all.insert(p.clone(), b"<dir>".to_vec());
                todo.push(p);
            } else {
                all.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    all
}

pub(super) fn revert_options(dir: &Path) -> RevertOptions {
    RevertOptions {
        dir: dir.to_owned(),
        dry_run: false,
        purge: false,
        // No API server on a test's node directory.
        api_server_timeout: std::time::Duration::ZERO,
    }
}

/// revert refused, and the node unchanged: its reason.
pub(super) async fn revert_refusal(opts: &RevertOptions) -> RevertError {
    let before = snapshot(&opts.dir);
    let why = match revert(opts).await {
        Err(KubeadmError::Revert(e)) => *e,
        Err(e) => panic!("refused, but not as revert refuses: {e}"),
        Ok(out) => panic!("not refused:\n{out}"),
    };
    assert!(
        before == snapshot(&opts.dir),
        "refused, yet the node changed: {why}"
    );
    why
}

/// The DER of the one certificate in PEM `pem`.
pub(super) fn der_of(pem: &[u8]) -> Vec<u8> {
    crate::pem::exactly_one(pem, rustls_pki_types::pem::SectionKind::Certificate).expect("one")
}

/// The TBSCertificate of `der` (DER), serial and validity made fixed.
fn tbs_but_serial_and_validity(der: &[u8]) -> Vec<u8> {
    use x509_cert::der::{Decode, Encode};
    let mut tbs = x509_cert::Certificate::from_der(der)
        .expect("certificate")
        .tbs_certificate;
    tbs.serial_number = x509_cert::serial_number::SerialNumber::new(&[1]).expect("serial");
    tbs.validity =
        x509_cert::time::Validity::from_now(std::time::Duration::from_secs(1)).expect("validity");
    tbs.to_der().expect("der")
}

/// Checks that `new` (DER) is kubeadm's `old` (DER) issued again by the
/// test CA: the same TBSCertificate but serial and validity, lasting a
/// year from now, signed by the CA, read as Go reads it.
pub(super) fn assert_issued_again(old: &[u8], new: &[u8], what: &str) {
    assert_ne!(old, new, "{what}: not issued again");
    assert_eq!(
        tbs_but_serial_and_validity(old),
        tbs_but_serial_and_validity(new),
        "{what}: more than serial and validity changed"
    );
    let (_, cert) = x509_parser::parse_x509_certificate(new).expect("parse");
    let year_on = time::OffsetDateTime::now_utc().unix_timestamp() + 364 * 86_400;
    assert!(
        cert.validity().not_after.timestamp() > year_on,
        "{what}: ends {}",
        cert.validity().not_after
    );
    let ca = der_of(CA.0.as_bytes());
    let (_, ca) = x509_parser::parse_x509_certificate(&ca).expect("ca");
    cert.verify_signature(Some(ca.public_key()))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    crate::x509::strict_certificate(new).unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// The embedded client certificate (DER) of a kubeconfig and its
/// base64 as it stands in the text.
pub(super) fn embedded(text: &str) -> (Vec<u8>, String) {
    let (cert, _) = crate::writer::embedded_pair(text).expect("embedded pair");
    use base64::Engine as _;
    (
        der_of(&cert),
        base64::engine::general_purpose::STANDARD.encode(&cert),
    )
}

/// An API server holding the kubeadm-config ConfigMap, over plain HTTP:
/// GET answers it, anything else is refused; every request is kept.
pub(super) struct ConfigMapApi {
    pub(super) url: String,
    /// Each request as `METHOD path`, in order.
    pub(super) requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _task: Aborting,
}

/// A server's task, ended with the test.
pub(super) struct Aborting(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A JSON API on `listener`: `answer(method, path, body)` gives each
/// response's status and body.
pub(super) fn serve_json(
    listener: tokio::net::TcpListener,
    answer: impl Fn(http::Method, String, serde_json::Value) -> (u16, serde_json::Value)
    + Send
    + Sync
    + 'static,
) -> Aborting {
    use http_body_util::BodyExt as _;
    let answer = std::sync::Arc::new(answer);
    Aborting(tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let answer = answer.clone();
                    async move {
                        let (method, path) = (req.method().clone(), req.uri().path().to_owned());
                        let body = req.into_body().collect().await.expect("body").to_bytes();
                        let (code, json) = answer(
                            method,
                            path,
                            serde_json::from_slice(&body).unwrap_or_default(),
                        );
                        http::Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(bytes::Bytes::from(
                                json.to_string(),
                            )))
                            .map(Ok::<_, hyper::Error>)
                            .expect("response")
                    }
                });
            tokio::spawn(async move {
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            });
        }
    }))
}

/// A listener on a free loopback port and its `http://` URL.
pub(super) async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    (listener, url)
}

impl ConfigMapApi {
    /// An API server holding kubeadm's ClusterConfiguration.
    pub(super) async fn start() -> ConfigMapApi {
        Self::holding(&super::fixture("cluster-configuration.yaml")).await
    }

    /// An API server holding `cluster_configuration` as kubeadm-config's ClusterConfiguration.
    pub(super) async fn holding(cluster_configuration: &str) -> ConfigMapApi {
        let (listener, url) = bind().await;
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let stored = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubeadm-config", "namespace": "kube-system", "resourceVersion": "7"},
            "data": {"ClusterConfiguration": cluster_configuration},
        });
        let seen = requests.clone();
        let task = serve_json(listener, move |method, path, _| {
            seen.lock().expect("lock").push(format!("{method} {path}"));
            if path != "/api/v1/namespaces/kube-system/configmaps/kubeadm-config" {
                let not_found = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "reason": "NotFound", "code": 404,
                    "message": format!("{path} not found"),
                });
                (404, not_found)
            } else if method == http::Method::GET {
                (200, stored.clone())
            } else {
                (405, serde_json::json!({"kind": "Status", "code": 405}))
            }
        });
        ConfigMapApi {
            url,
            requests,
            _task: task,
        }
    }

    /// The requests made of it other than reads.
    pub(super) fn writes(&self) -> Vec<String> {
        let all = self.requests.lock().expect("lock");
        all.iter()
            .filter(|r| !r.starts_with("GET "))
            .cloned()
            .collect()
    }
}

/// An adopted node whose admin.conf (current and kubeadm's in the backup)
/// names `api`.
pub(super) fn adopted_node_on(api: &ConfigMapApi) -> tempfile::TempDir {
    let dir = adopted_node();
    let d = dir.path();
    for p in [
        d.join("admin.conf"),
        plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf"),
    ] {
        let text = std::fs::read_to_string(&p).expect("admin.conf");
        std::fs::write(&p, text.replace("https://127.0.0.1:1", &api.url)).expect("write");
    }
    dir
}

/// Checks that the node's four manifests are kubeadm's, byte for byte.
pub(super) fn assert_kubeadms_manifests(d: &Path) {
    for c in manifest::components() {
        let path = format!("/etc/kubernetes/manifests/{}.yaml", c.name);
        assert_eq!(
            std::fs::read(host(d, &path)).expect("manifest"),
            std::fs::read(super::fixtures().join(format!("manifests/{}.yaml", c.name)))
                .expect("kubeadm's"),
            "{path} is kubeadm's"
        );
    }
}

/// revert `--dry-run` with `opts`: its output, after checking that it
/// changed nothing on the node.
pub(super) async fn dry_run(opts: RevertOptions) -> String {
    let before = snapshot(&opts.dir);
    let out = revert(&RevertOptions {
        dry_run: true,
        ..opts.clone()
    })
    .await
    .expect("dry run");
    assert!(before == snapshot(&opts.dir), "dry run wrote: {out}");
    out
}
