//! admin.conf, which a compromised certsync
//! container may replace, steers adopt and revert only in kubeadm's shape,
//! and once adopt has backed it up, to the backup's server and CA.

use std::sync::{Arc, Mutex};

use super::adopted::*;
use super::*;

/// A TCP listener standing in for the container's own: every byte any
/// connection sends it, kept.
struct Listener {
    url: String,
    seen: Arc<Mutex<Vec<u8>>>,
    _task: Aborting,
}

impl Listener {
    async fn start() -> Listener {
        use tokio::io::AsyncReadExt as _;
        let (listener, url) = bind().await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                s.lock().expect("lock").extend_from_slice(b"<connection>");
                let s = s.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = stream.read(&mut buf).await {
                        s.lock().expect("lock").extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
        Listener {
            url,
            seen,
            _task: Aborting(task),
        }
    }

    fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().expect("lock")).into_owned()
    }
}

/// kubeadm's admin.conf (a pair the node's CA issued) naming `server`,
/// with `cluster` and `user` fields added.
fn admin_conf(server: &str, cluster: &str, user: &str) -> String {
    let text = kubeconfig_ending(time::Duration::days(365));
    let text = text.replace(
        "cluster: {server: \"https://127.0.0.1:1\"}",
        &format!("cluster: {{server: \"{server}\"{cluster}}}"),
    );
    text.replace("user: {", &format!("user: {{{user}"))
}

#[tokio::test]
async fn attack_admin_conf_fields_kubeadm_never_writes_are_refused_naming_them() {
    let fake = Listener::start().await;
    // (field as refused, cluster fields, user fields)
    let cases = [
        ("tokenFile", "", "tokenFile: SECRET, "),
        ("token", "", "token: atk-token, "),
        ("username", "", "username: admin, "),
        ("password", "", "password: atk-password, "),
        (
            "client-certificate",
            "",
            "client-certificate: /etc/kubernetes/pki/apiserver.crt, ",
        ),
        (
            "client-key",
            "",
            "client-key: /etc/kubernetes/pki/apiserver.key, ",
        ),
        (
            "exec",
            "",
            "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}, ",
        ),
        ("auth-provider", "", "auth-provider: {name: oidc}, "),
        ("as (impersonation)", "", "as: system:admin, "),
        (
            "insecure-skip-tls-verify",
            ", insecure-skip-tls-verify: true",
            "",
        ),
        ("proxy-url", ", proxy-url: \"http://127.0.0.1:9\"", ""),
        ("disable-compression", ", disable-compression: true", ""),
        (
            "certificate-authority",
            ", certificate-authority: /etc/kubernetes/pki/ca.crt",
            "",
        ),
    ];
    for (field, cluster, user) in cases {
        // A one-line root-only host file an attacker wants to read.
        let secret_dir = tempfile::tempdir().expect("tempdir");
        let secret = secret_dir.path().join("secret.txt");
        std::fs::write(&secret, "ROOT-ONLY-SECRET").expect("secret");
        let user = user.replace("SECRET", &secret.display().to_string());
        let conf = admin_conf(&fake.url, cluster, &user);
        let said = format!("has {field}");

        // Read through it on an adopted node: refused, naming the field.
        let dir = adopted_node();
        std::fs::write(dir.path().join("admin.conf"), &conf).expect("write");
        let why = cluster_configuration(dir.path()).await.expect_err("read");
        assert!(
            matches!(&why, KubeadmError::File { path, problem }
                if path.ends_with("admin.conf")
                    && matches!(&**problem, FileProblem::Field { field: f, .. }
                        if f.starts_with(field))),
            "{field}: {why}"
        );
        // revert never reads it: it changes only the node's files and
        // hands kubeadm's admin.conf back over it.
        let out = revert(&revert_options(dir.path())).await.expect("revert");
        assert!(out.ends_with("reverted\n"), "{field}: {out}");

        // adopt on kubeadm's node (no backup yet): it needs no
        // ClusterConfiguration, so it plans without one, saying why it was
        // not read; the field was neither followed nor sent anywhere.
        let dir = node_dir();
        std::fs::write(dir.path().join("admin.conf"), &conf).expect("write");
        let before = snapshot(dir.path());
        match adopt(&options(dir.path())).await {
            // A user field is refused first by `certsync run`'s loader,
            // judging the configuration that would keep admin.conf renewed
            // (it names the user and the file, in its own words).
            Err(KubeadmError::Refused { reason, .. }) => {
                let Refusal::Config { source: e, .. } = *reason else {
                    panic!("{field}: refused, but not by certsync run's loader");
                };
                let why = e.to_string();
                assert!(
                    !user.is_empty() && why.contains("admin.conf: user \"kubernetes-admin\""),
                    "{field}: {why}"
                );
            }
            Err(e) => panic!("{field}: {e}"),
            Ok(out) => assert!(
                out.lines().any(
                    |l| l.starts_with("ClusterConfiguration: not read (") && l.contains(&said)
                ),
                "{field}: {out}"
            ),
        }
        assert!(before == snapshot(dir.path()), "{field}: a dry run wrote");
        assert_eq!(fake.seen(), "", "{field}: the listener was reached");
    }
}

/// The ClusterConfiguration read as adopt reads it, through the node's
/// admin.conf (and its backup, once adopt's record names one).
pub(super) async fn cluster_configuration(d: &Path) -> Result<serde_yaml_ng::Value, KubeadmError> {
    let state = crate::kubeadm::record::State::read(d)?.map(|(_, s)| s);
    let cas = crate::kubeadm::trust::Cas::read(d).all()?;
    let ca = state.as_ref().map(|s| (s, &cas[0].0));
    let access = crate::kubeadm::admin::Access::read(d, ca).await?;
    Ok(crate::kubeadm::api::kubeadm_config(&access).await?.0)
}

/// kubeadm reads the ClusterConfiguration with go-yaml, which merges a `<<` key: there
/// `certificatesDir` is `/srv/pki`, a layout adopt refuses, while a reader that takes `<<`
/// for a plain key sees kubeadm's default and would adopt.
#[tokio::test]
async fn attack_a_cluster_configuration_go_yaml_reads_otherwise_is_refused() {
    use crate::files::YamlError;
    let kubeadms = super::fixture("cluster-configuration.yaml");
    let merged = kubeadms.replace(
        "certificatesDir: /etc/kubernetes/pki\n",
        "<<: {certificatesDir: /srv/pki}\n",
    );
    assert_ne!(merged, kubeadms);
    let api = ConfigMapApi::holding(&merged).await;
    let dir = adopted_node_on(&api);
    let read = cluster_configuration(dir.path()).await;
    assert!(
        matches!(
            &read,
            Err(KubeadmError::File { problem, .. })
                if matches!(**problem, FileProblem::NotYaml(YamlError::MergeKey))
        ),
        "{read:?}"
    );
}

#[tokio::test]
async fn adopt_reaches_the_backups_server_not_the_one_admin_conf_names() {
    // The container points admin.conf at its own listener (the genuine
    // pair kept): a re-adopt must still reach the backup's server, or it
    // would judge the container's answer.
    let fake = Listener::start().await;
    let api = ConfigMapApi::start().await;
    let dir = adopted_node_on(&api);
    let d = dir.path();
    let live = std::fs::read_to_string(d.join("admin.conf")).expect("admin.conf");
    std::fs::write(d.join("admin.conf"), live.replace(&api.url, &fake.url)).expect("write");
    let read = cluster_configuration(d).await.expect("read");
    let kubeadms: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&super::fixture("cluster-configuration.yaml")).expect("yaml");
    assert_eq!(read, kubeadms, "the backup's API server answered");
    assert_eq!(fake.seen(), "", "admin.conf's server was reached");
}

#[tokio::test]
async fn attack_a_client_pair_the_nodes_ca_did_not_issue_is_refused() {
    let api = ConfigMapApi::start().await;
    let dir = adopted_node_on(&api);
    let d = dir.path();
    let forged = forged_kubeconfig(time::Duration::days(365));
    std::fs::write(
        d.join("admin.conf"),
        forged.replace("https://127.0.0.1:1", &api.url),
    )
    .expect("write");
    let why = cluster_configuration(d).await.expect_err("read");
    assert!(
        matches!(&why, KubeadmError::File { problem, .. }
            if matches!(&**problem, FileProblem::Named { what, source }
                if what == "its client certificate"
                    && matches!(&**source, FileProblem::Named { what, .. }
                        if what == "not issued by the node's CA"))),
        "{why}"
    );
    assert!(api.requests.lock().expect("lock").is_empty());
}

/// adopt reads each CA once and judges admin.conf's pair by it: a ca.crt
/// that cannot be read (a link the container made) is refused as its
/// reader said it, typed, before anything is asked of the API server.
#[tokio::test]
async fn attack_a_link_at_ca_crt_of_an_adopted_node_is_refused_as_read() {
    let api = ConfigMapApi::start().await;
    let dir = adopted_node_on(&api);
    let d = dir.path();
    fn private_keys(dir: &Path) {
        use std::os::unix::fs::PermissionsExt as _;
        for e in std::fs::read_dir(dir).expect("list").flatten() {
            let p = e.path();
            if p.is_dir() {
                private_keys(&p);
            } else if p.extension().is_some_and(|x| x == "key") {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                    .expect("chmod");
            }
        }
    }
    private_keys(d);
    let ca = d.join("pki/ca.crt");
    std::fs::rename(&ca, d.join("pki/ca.crt.real")).expect("move");
    std::os::unix::fs::symlink("ca.crt.real", &ca).expect("link");
    let Err(why) = plan::plan(&super::options(d)).await else {
        panic!("a link at ca.crt was not refused");
    };
    assert!(
        matches!(&why, KubeadmError::File { path, problem }
            if *path == ca && matches!(**problem, FileProblem::Link(_))),
        "{why:?}"
    );
    assert!(api.requests.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn adopt_changes_no_manifest_before_certsyncs_pod_is_ready() {
    // adopt wrote every manifest naming certsync's targets with no certsync
    // running them (an image the node could not pull). Now certsync's pod,
    // of this configuration and image, must answer ready first; here none
    // runs: adopt stops at the gate, writes nothing to the API server,
    // leaves kubeadm's manifests and takes its own files out.
    let api = ConfigMapApi::start().await;
    let dir = node_dir();
    let d = dir.path();
    std::fs::write(
        d.join("admin.conf"),
        kubeconfig_ending(time::Duration::days(365)).replace("https://127.0.0.1:1", &api.url),
    )
    .expect("admin.conf");
    // Modes of kubeadm's that adopt does not write itself: put back as they were.
    use std::os::unix::fs::PermissionsExt as _;
    for (f, mode) in [
        ("admin.conf", 0o400),
        ("scheduler.conf", 0o644),
        ("pki/ca.crt", 0o640),
    ] {
        std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let mut before = files_as_they_are(d);
    // A set-ID bit never comes back: undo writes a new inode, root's, and a bit that was
    // another owner's would become root's.
    let set_id = d.join("controller-manager.conf");
    std::fs::set_permissions(&set_id, std::fs::Permissions::from_mode(0o4644)).expect("chmod");
    before
        .get_mut("controller-manager.conf")
        .expect("kubeadm's")
        .1 = 0o644;
    // The plan read the ClusterConfiguration through the API server.
    let p = plan(&options(d)).await.expect("plan");
    let through = "ConfigMap kube-system/kubeadm-config, read through ";
    assert!(
        p.cluster_configuration_from.starts_with(through),
        "{}",
        p.text()
    );
    assert!(p.admin.is_ok(), "{}", p.text());
    // The cluster's CA certificates, not there yet, are to be written:
    // only after the gate.
    assert!(p.cluster_cas_new.is_some(), "{}", p.cluster_cas);
    let opts = Options {
        dry_run: false,
        ..options(d)
    };
    match adopt(&opts).await {
        Err(KubeadmError::NotReady(why)) => {
            assert_eq!(why.image, "certsync");
            assert!(
                why.undone.contains("No component manifest was changed"),
                "{}",
                why.undone
            );
        }
        Err(e) => panic!("not the gate: {e}"),
        Ok(out) => panic!("adopted with no certsync pod:\n{out}"),
    }
    assert_kubeadms_manifests(d);
    assert_eq!(
        api.writes(),
        Vec::<String>::new(),
        "a write before the gate"
    );
    for gone in [plan::POD, plan::CONFIG, plan::STATE] {
        assert!(!host(d, gone).exists(), "{gone} left behind");
    }
    // Every file of kubeadm's as it was, bytes and mode; new ones only in certsync's own
    // directory (its backups).
    let after = files_as_they_are(d);
    for (path, was) in &before {
        assert_eq!(after.get(path), Some(was), "{path} not as it was");
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        assert!(path.starts_with("certsync/"), "{path} left behind");
    }
}

/// Every regular file below `d`: its bytes and permission bits.
fn files_as_they_are(d: &Path) -> std::collections::BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut found = std::collections::BTreeMap::new();
    let mut dirs = vec![d.to_owned()];
    while let Some(at) = dirs.pop() {
        for e in std::fs::read_dir(&at).expect("read_dir") {
            let e = e.expect("entry");
            let meta = e.path().symlink_metadata().expect("lstat");
            if meta.is_dir() {
                dirs.push(e.path());
            } else if meta.is_file() {
                let rel = e
                    .path()
                    .strip_prefix(d)
                    .expect("below")
                    .display()
                    .to_string();
                let bytes = std::fs::read(e.path()).expect("read");
                found.insert(rel, (bytes, meta.permissions().mode() & 0o7777));
            }
        }
    }
    found
}

#[tokio::test]
async fn attack_set_id_files_and_open_directories_are_reported_never_removed() {
    // The container (uid 0, no capabilities) may make a file of its own
    // set-user-ID root, and chmod a directory 0777.
    use std::os::unix::fs::PermissionsExt as _;
    let plant = |d: &Path| {
        let suid = d.join(".planted-suid");
        std::fs::write(&suid, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let open = d.join("pki/open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        // A symlink's own mode (0777) is no finding; it is never followed.
        std::os::unix::fs::symlink("/", d.join("pki/root")).expect("symlink");
        (suid, open)
    };
    let expected = [
        "warning: /etc/kubernetes/.planted-suid is set-user-ID (mode 4755, owner uid ",
        "warning: /etc/kubernetes/pki/open is writable by its group, writable by others (mode 0777, owner uid ",
    ];
    // adopt (a dry run) on kubeadm's node, revert on an adopted one.
    let kubeadms = node_dir();
    let before_adopt = plant(kubeadms.path());
    let adopted = adopt(&options(kubeadms.path()))
        .await
        .expect("adopt --dry-run");
    let node = adopted_node();
    let before_revert = plant(node.path());
    let reverted = revert(&revert_options(node.path())).await.expect("revert");
    for (what, out, (suid, open)) in [
        ("adopt", &adopted, before_adopt),
        ("revert", &reverted, before_revert),
    ] {
        let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning:")).collect();
        assert_eq!(warnings.len(), 2, "{what}: {out}");
        for e in expected {
            assert!(
                warnings.iter().any(|w| w.starts_with(e)
                    && w.ends_with(
                        "(a compromised certsync container could have left it; inspect it)"
                    )),
                "{what}: no {e}: {out}"
            );
        }
        assert_eq!(
            std::fs::metadata(&suid).expect("kept").permissions().mode() & 0o7777,
            0o4755,
            "{what}"
        );
        assert!(open.is_dir(), "{what}: never removed");
    }
    assert!(
        adopted.starts_with("warning:"),
        "adopt warns first: {adopted}"
    );
}

#[test]
fn attack_a_fifo_in_a_target_never_blocks_adopts_gate() {
    // The pod writes its targets: a FIFO at tls.crt blocked adopt (root)
    // in an open that never returned, and its --ready-timeout never fired.
    // Read through the shared walker, it is a target with no live pair.
    let dir = adopted_node();
    let d = dir.path().to_owned();
    let crt = host(&d, "/etc/kubernetes/pki/certsync/apiserver").join("tls.crt");
    let _ = std::fs::remove_file(&crt);
    nix::unistd::mkfifo(&crt, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(crate::kubeadm::wait::dead_targets(&d, &[]));
    });
    let dead = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("dead_targets returned");
    assert!(
        dead.iter()
            .any(|(t, why)| t.ends_with("pki/certsync/apiserver") && why.contains("not a regular")),
        "{dead:?}"
    );
}

#[tokio::test]
async fn an_admin_conf_that_cannot_be_used_ends_the_api_server_wait_at_once() {
    // No admin.conf: no look can ever ask /readyz, so waiting out
    // --api-server-timeout (3 minutes) would only delay the same answer.
    let dir = tempfile::tempdir().expect("tempdir");
    let (listener, _) = bind().await;
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let manifest = fixture("manifests/kube-apiserver.yaml")
        .replace(
            "--advertise-address=10.77.0.11",
            "--advertise-address=127.0.0.1",
        )
        .replace("--secure-port=6443", &format!("--secure-port={port}"));
    let admin = crate::kubeadm::admin::Access::read(dir.path(), None).await;
    let back = crate::kubeadm::wait::api_server_back(
        dir.path(),
        &admin,
        Some((
            &crate::kubeadm::manifest::manifest_path("kube-apiserver"),
            manifest.as_bytes(),
        )),
        std::time::Duration::from_secs(600),
        ("kubeadm's", "reverted"),
    )
    .await
    .expect_err("no admin.conf, yet the API server was called back");
    assert!(
        matches!(&back, KubeadmError::NotBack { seen, .. }
            if matches!(**seen, crate::kubeadm::seen::Seen::NoAdmin { .. })),
        "{back}"
    );
}

#[tokio::test]
async fn a_readyz_answer_that_never_comes_leaves_no_connection_open() {
    // A process bound to certsync's admin port first reads the request and
    // never answers: adopt's gate asks again every second for minutes, and
    // each look must close its connection when it gives up (hyper ends a
    // connection whose request was dropped; a pooled client would keep it).
    use tokio::io::AsyncReadExt as _;
    let (listener, _) = bind().await;
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).await.expect("request");
        assert!(buf[..n].starts_with(b"GET /readyz"));
        // What follows the request: nothing until the client closes.
        stream.read(&mut buf).await.expect("read")
    });
    let asked = crate::kubeadm::wait::get_readyz(addr).await;
    assert!(
        matches!(asked, Err(crate::kubeadm::seen::Seen::Silent { .. })),
        "answered"
    );
    let after = tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("the connection stayed open after the look gave up")
        .expect("server");
    assert_eq!(after, 0, "the client sent more instead of closing");
}

/// A tree deeper than the walk goes is a problem the walk names, never a part skipped in
/// silence: adopt refuses to judge keys it could not see, and the audit says where.
#[test]
fn a_tree_too_deep_to_walk_is_named_never_skipped() {
    let dir = node_dir();
    let d = dir.path();
    let deep = (0..40).fold(d.join("pki"), |p, i| p.join(format!("d{i}")));
    std::fs::create_dir_all(&deep).expect("mkdir");
    let exposed = super::audit::exposed(d);
    assert!(
        exposed.iter().any(|r| matches!(
            r,
            Refusal::KeysUnreadable {
                problem: FileProblem::TooDeep(32),
                ..
            }
        )),
        "{exposed:?}"
    );
    let said = super::audit::warnings(d);
    assert!(said.contains("is deeper than 32 directories"), "{said}");
}

/// A pod answering `/readyz` at a free loopback address, `generation` in
/// certsync's header (none: `None`), to every request it is sent.
async fn readyz_answering(generation: Option<String>) -> (std::net::SocketAddr, Aborting) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (listener, _) = bind().await;
    let addr = listener.local_addr().expect("addr");
    let header = generation
        .map(|g| format!("{}: {g}\r\n", crate::admin::GENERATION_HEADER))
        .unwrap_or_default();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\n{header}content-length: 2\r\nconnection: close\r\n\r\nok"
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    (addr, Aborting(task))
}

#[tokio::test]
async fn an_empty_plan_writes_and_waits_for_nothing() {
    // An adopted node as adopt leaves it: nothing to write, change or trust. adopt looks at
    // certsync's pod once and says what it saw; it writes no file and no ConfigMap, and
    // never waits out --ready-timeout (an hour here).
    let api = ConfigMapApi::start().await;
    let dir = adopted_node_on(&api);
    let d = dir.path();
    // Keys 0600, as adopt leaves them (it refuses a node whose keys others may read).
    for (path, _) in files_as_they_are(d) {
        if path.ends_with(".key") {
            let only_root = std::os::unix::fs::PermissionsExt::from_mode(0o600);
            std::fs::set_permissions(d.join(path), only_root).expect("chmod");
        }
    }
    let mut opts = Options {
        dry_run: false,
        ready_timeout: std::time::Duration::from_secs(3600),
        ..options(d)
    };
    let mut p = plan(&opts).await.expect("plan");
    p.files.clear();
    p.manifests.clear();
    p.kubeconfigs_trusted.clear();
    p.cluster_cas_new = None;
    p.cluster_info_new = None;
    assert!(p.is_empty());
    for target in all_targets(d) {
        let (crt, key) = pair_ending(time::Duration::days(1));
        std::fs::write(host(d, &target).join("tls.crt"), crt).expect("crt");
        std::fs::write(host(d, &target).join("tls.key"), key).expect("key");
    }
    let before = files_as_they_are(d);

    // An earlier certsync (no generation) answers: not this adoption's pod, said at once.
    let (addr, _earlier) = readyz_answering(None).await;
    p.probe = addr;
    let mut out = Out::kept();
    match apply::apply(&opts, &p, &mut out).await {
        Err(KubeadmError::NotReady(why)) => {
            assert!(
                matches!(
                    why.seen,
                    crate::kubeadm::seen::Seen::Ungenerated { status: 200, .. }
                ),
                "{why}"
            );
            assert!(why.when.starts_with("when adopt looked"), "{why}");
            assert_eq!(why.undone, "Nothing was changed (the node is adopted)");
        }
        other => panic!("not the look's answer: {other:?}"),
    }

    // This adoption's pod answers ready, every target holding a live pair.
    let (addr, _pod) = readyz_answering(Some(p.generation.clone())).await;
    p.probe = addr;
    opts.json = false;
    let mut out = Out::kept();
    apply::apply(&opts, &p, &mut out).await.expect("adopted");
    assert_eq!(
        out.text(),
        format!(
            "certsync's pod is ready (generation {}): every target holds a live pair\n",
            p.generation
        )
    );
    assert_eq!(files_as_they_are(d), before, "an empty plan wrote a file");
    assert_eq!(
        api.writes(),
        Vec::<String>::new(),
        "an empty plan wrote to the API server"
    );

    // cluster-info's CA data to set is a change: that plan is not empty.
    p.cluster_info_new = Some(Default::default());
    assert!(!p.is_empty());
}

/// Attack (review of 6a5fd08 and the kubeadm module): on an adopted node
/// certsync's pod writes `/etc/kubernetes` (its `etc-kubernetes` mount is
/// read-write: admin.conf and super-admin.conf are replaced by rename), so
/// the live `controller-manager.conf` and `scheduler.conf` are the
/// container's bytes. adopt (root) takes the `server` of certsync's own
/// by-file kubeconfigs (`/etc/kubernetes/certsync/*.conf`, read-only to the
/// container, what the controller-manager and scheduler run with) from
/// those live files: the container chooses where both components connect
/// (their CA is already its target's `ca.crt`), and root writes that choice
/// where the container cannot. admin.conf's server is the backup's for the
/// same reason; these two must not be the container's either.
#[tokio::test]
async fn attack_a_server_certsyncs_container_wrote_never_reaches_certsyncs_own_kubeconfigs() {
    let dir = adopted_node();
    let d = dir.path();
    // Keys 0600, as adopt leaves them (it refuses a node whose keys others may read).
    for (path, _) in files_as_they_are(d) {
        if path.ends_with(".key") {
            let only_root = std::os::unix::fs::PermissionsExt::from_mode(0o600);
            std::fs::set_permissions(d.join(path), only_root).expect("chmod");
        }
    }
    // Control: as adopt left the node, certsync's kubeconfigs name kubeadm's server.
    let p = plan(&options(d)).await.expect("plan");
    let by_file = |p: &Plan, f: &str| {
        let path = format!("/etc/kubernetes/certsync/{f}");
        (p.files.iter().find(|w| w.path == path))
            .map(|w| String::from_utf8_lossy(&w.bytes).into_owned())
    };
    let written = by_file(&p, "controller-manager.conf").expect("written");
    assert!(written.contains("https://127.0.0.1:1"), "{written}");

    // The container points the live kubeconfigs (its to rewrite) at its own listener.
    const ITS_OWN: &str = "https://127.0.0.1:16443";
    for f in ["controller-manager.conf", "scheduler.conf"] {
        let live = std::fs::read_to_string(d.join(f)).expect("live");
        std::fs::write(d.join(f), live.replace("https://127.0.0.1:1", ITS_OWN)).expect("write");
    }
    let p = plan(&options(d)).await.expect("plan");
    for w in &p.files {
        let text = String::from_utf8_lossy(&w.bytes);
        assert!(
            !text.contains(ITS_OWN),
            "adopt (root) would write {} with the server certsync's container chose:\n{text}",
            w.path
        );
    }
    let written = by_file(&p, "scheduler.conf").expect("written");
    assert!(written.contains("https://127.0.0.1:1"), "{written}");
}
