//! certsync on control-plane nodes that kubeadm v1.36 itself made:
//! `../shared/realkube/kubeadm/node.sh` runs kubeadm's init phases in a
//! network namespace of the node's own and a kubelet stand-in in which every
//! static pod sees only the hostPath mounts its manifest declares. Driven
//! through the binary, as a person on the node would.
//!
//! The environment's tools are found at `CERTSYNC_REALKUBE`, else at
//! `shared/realkube` beside the checkout (`/work/shared/realkube` for a
//! checkout in `/work/NAME`). Without them, or without root, a test skips
//! (and fails under `CI=true`: CI always has them). Each node takes ~10-20 s
//! to come up; nodes get their own DIR under the temp dir and the lowest free
//! address (node.sh allocates it under a lock), so tests run in parallel.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::certsync_bin;
use support::kubeadm_node::{
    ADOPT_SHORT, Node, Restarts, certsync, containers, first_der, kubeadm_cmd, kubectl, live_der,
    ready, readyz, realkube, served, settled, stored_cluster_configuration, wait_long,
};

/// What `kubeadm init` makes, as `certsync check -o json` must report it:
/// (file under pki/, subject, issuer). Every one with its key beside it.
const KUBEADM_CERTS: [(&str, &str, &str); 10] = [
    (
        "apiserver-etcd-client.crt",
        "CN=kube-apiserver-etcd-client",
        "CN=etcd-ca",
    ),
    (
        "apiserver-kubelet-client.crt",
        "CN=kube-apiserver-kubelet-client",
        "CN=kubernetes",
    ),
    ("apiserver.crt", "CN=kube-apiserver", "CN=kubernetes"),
    ("ca.crt", "CN=kubernetes", "CN=kubernetes"),
    (
        "front-proxy-ca.crt",
        "CN=front-proxy-ca",
        "CN=front-proxy-ca",
    ),
    (
        "front-proxy-client.crt",
        "CN=front-proxy-client",
        "CN=front-proxy-ca",
    ),
    ("etcd/ca.crt", "CN=etcd-ca", "CN=etcd-ca"),
    (
        "etcd/healthcheck-client.crt",
        "CN=kube-etcd-healthcheck-client",
        "CN=etcd-ca",
    ),
    ("etcd/peer.crt", "CN={node}", "CN=etcd-ca"),
    ("etcd/server.crt", "CN={node}", "CN=etcd-ca"),
];

const DAY: i64 = 86_400;

/// The row `check -o json` printed for `path`.
fn row<'a>(rows: &'a [serde_json::Value], path: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["certificate"] == path)
        .unwrap_or_else(|| panic!("no row for {path}"))
}

#[test]
fn check_reports_every_certificate_kubeadm_made() {
    let Some(realkube) = realkube() else { return };
    let node = Node::up(&realkube, "check", &["--no-addons"]);
    let pki = node.etc().join("pki");
    let pki_s = pki.to_str().expect("utf-8 temp dir");
    let etcd_s = format!("{pki_s}/etcd");

    let out = certsync(&["check", "-o", "json", pki_s, &etcd_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check on a fresh kubeadm node must pass: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).expect("check -o json");
    let mut seen: Vec<String> = rows
        .iter()
        .map(|r| r["certificate"].as_str().expect("certificate").to_owned())
        .collect();
    seen.sort();
    let mut want: Vec<String> = KUBEADM_CERTS
        .iter()
        .map(|(f, _, _)| format!("{pki_s}/{f}"))
        .collect();
    want.sort();
    assert_eq!(
        seen, want,
        "exactly kubeadm's certificates, sa.pub is no certificate"
    );

    for (file, subject, issuer) in KUBEADM_CERTS {
        let path = format!("{pki_s}/{file}");
        let row = row(&rows, &path);
        assert_eq!(
            row["subject"],
            subject.replace("{node}", &node.name),
            "{file}"
        );
        assert_eq!(row["issuer"], issuer, "{file}");
        assert_eq!(
            row["key"], "matches",
            "{file}: kubeadm wrote its key beside it"
        );
        assert!(row["problem"].is_null(), "{file}: {row}");
        // CAs live ten years, leaves one (kubeadm's defaults), minus the
        // seconds since `init`.
        let left = row["residual_seconds"].as_i64().expect("residual_seconds");
        let years = if file.ends_with("ca.crt") { 10 } else { 1 };
        let life = years * 365 * DAY;
        assert!(
            left <= life && left > life - 3 * DAY,
            "{file}: {left} s left, kubeadm issues for {years} year(s)"
        );
    }
    // The serving certificates name the node as kubeadm saw it: its name
    // and address (and the Service address for the API server).
    let sans = |file: &str| -> Vec<String> {
        let path = format!("{pki_s}/{file}");
        let row = row(&rows, &path);
        row["sans"]
            .as_array()
            .expect("sans")
            .iter()
            .map(|s| s.as_str().expect("san").to_owned())
            .collect()
    };
    for (file, must) in [
        (
            "apiserver.crt",
            vec![
                node.name.as_str(),
                node.ip.as_str(),
                "10.96.0.1",
                "kubernetes",
            ],
        ),
        (
            "etcd/server.crt",
            vec![
                node.name.as_str(),
                node.ip.as_str(),
                "localhost",
                "127.0.0.1",
            ],
        ),
        ("etcd/peer.crt", vec![node.name.as_str(), node.ip.as_str()]),
    ] {
        let have = sans(file);
        for m in must {
            assert!(have.iter().any(|s| s == m), "{file}: {m} not in {have:?}");
        }
    }

    // A year is within 400 days: check exits 1 for every leaf, naming it,
    // and not for the CAs.
    let out = certsync(&[
        "check",
        "-o",
        "json",
        "--warn-within",
        "400d",
        pki_s,
        &etcd_s,
    ]);
    assert_eq!(out.status.code(), Some(1), "leaves expire within 400 days");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("check -o json");
    for (file, _, _) in KUBEADM_CERTS {
        let path = format!("{pki_s}/{file}");
        let row = row(&rows, &path);
        assert_eq!(
            row["problem"].is_null(),
            file.ends_with("ca.crt"),
            "{file}: {row}"
        );
    }
}

/// kubeadm's config documents of the node (`DIR/kubeadm.yaml`: its
/// InitConfiguration and ClusterConfiguration).
fn kubeadm_config(node: &Node) -> Vec<serde_yaml_ng::Value> {
    let text = std::fs::read_to_string(node.dir.join("kubeadm.yaml")).expect("kubeadm.yaml");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .collect()
}

/// `docs` written as one kubeadm config file `DIR/NAME` for `--config`.
fn config_file(node: &Node, docs: &[serde_yaml_ng::Value], name: &str) -> PathBuf {
    let file = node.dir.join(name);
    let text: Vec<String> = docs
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).expect("yaml"))
        .collect();
    std::fs::write(&file, text.join("---\n")).expect("write");
    file
}

/// The manifests regenerated from a ClusterConfiguration (`docs`), as a
/// stand-in for `kubeadm upgrade` (a real upgrade is not run here):
/// `kubeadm init phase PHASE --dry-run` for each phase writes them into a
/// directory of their own (`KUBEADM_INIT_DRYRUN_DIR`, checked on a node.sh
/// node: byte for byte what the phase writes in place), and only a
/// manifest that differs from the one in place replaces it, by rename.
/// (A plain `init phase` truncates each file before writing it, so a
/// kubelet reading in between may see a changed manifest.) Returns the
/// names of the manifests that changed.
fn regenerate(node: &Node, docs: &[serde_yaml_ng::Value], phases: &[&[&str]]) -> Vec<String> {
    let manifests = node.etc().join("manifests");
    let mut changed = Vec::new();
    for (name, new) in generate(node, docs, phases) {
        if std::fs::read(manifests.join(&name)).ok().as_deref() == Some(&new[..]) {
            continue;
        }
        // A dot-file is never read as a manifest; the rename is atomic.
        let tmp = manifests.join(format!(".{name}.new"));
        std::fs::write(&tmp, &new).expect("write");
        std::fs::rename(&tmp, manifests.join(&name)).expect("rename");
        changed.push(name);
    }
    changed.sort();
    changed
}

/// The manifests kubeadm writes from `docs` for `phases` (`kubeadm init
/// phase PHASE --dry-run` into a directory of their own), by name, sorted;
/// nothing on the node changes.
fn generate(
    node: &Node,
    docs: &[serde_yaml_ng::Value],
    phases: &[&[&str]],
) -> Vec<(String, Vec<u8>)> {
    let file = config_file(node, docs, "kubeadm-adopted.yaml");
    let generated = node.dir.join("regenerated");
    let _ = std::fs::remove_dir_all(&generated);
    std::fs::create_dir(&generated).expect("mkdir");
    for phase in phases {
        let mut a = vec!["init", "phase"];
        a.extend(*phase);
        a.extend(["--dry-run", "--config", file.to_str().expect("utf-8")]);
        let out = Command::new(&node.node_sh)
            .args(["kubeadm".as_ref(), node.dir.as_os_str()])
            .args(&a)
            .env("KUBEADM_INIT_DRYRUN_DIR", &generated)
            .output()
            .expect("run node.sh");
        assert!(
            out.status.success(),
            "kubeadm {a:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut all = Vec::new();
    for entry in std::fs::read_dir(&generated).expect("generated") {
        let name = entry.expect("entry").file_name();
        let name = name.to_str().expect("utf-8").to_owned();
        if name.ends_with(".yaml") {
            let bytes = std::fs::read(generated.join(&name)).expect("read");
            all.push((name, bytes));
        }
    }
    all.sort();
    all
}

/// The ClusterConfiguration stored in kubeadm-config, as the node's
/// kubeadm config documents (its InitConfiguration kept): what `kubeadm
/// upgrade` or a joining node's kubeadm generates manifests from.
fn stored_docs(node: &Node, kubectl: &Path, admin: &Path) -> Vec<serde_yaml_ng::Value> {
    let stored: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&stored_cluster_configuration(kubectl, admin))
            .expect("ClusterConfiguration");
    let mut docs = kubeadm_config(node);
    for d in docs
        .iter_mut()
        .filter(|d| d["kind"] == "ClusterConfiguration")
    {
        *d = stored.clone();
    }
    docs
}

/// kubeadm's four manifests as adopt's first backup holds them.
fn kubeadms_manifests(node: &Node) -> Vec<(String, Vec<u8>)> {
    let backups = node.etc().join("certsync/backup");
    let mut dirs: Vec<_> = std::fs::read_dir(&backups)
        .expect("backups")
        .map(|e| e.expect("entry").path())
        .collect();
    dirs.sort();
    manifest_bytes(&dirs[0])
}

/// The four component manifests under `etc` (a node's /etc/kubernetes or
/// a backup of it), by name.
fn manifest_bytes(etc: &Path) -> Vec<(String, Vec<u8>)> {
    [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    .iter()
    .map(|c| {
        let name = format!("{c}.yaml");
        let bytes = std::fs::read(etc.join("manifests").join(&name)).expect("manifest");
        (name, bytes)
    })
    .collect()
}

/// On kubeadm's own etcd manifest: a target under
/// pki/certsync (where the guide used to put etcd's) is a path etcd cannot
/// open, since its pod mounts only pki/etcd and /var/lib/etcd: etcd exits
/// naming the file and is restarted, again and again. (The layout that
/// works is the next test's.)
#[test]
fn etcd_cannot_open_a_target_outside_pki_etcd() {
    use std::time::Duration;
    let Some(realkube) = realkube() else { return };
    let node = Node::up(&realkube, "etcdmount", &["--no-addons"]);
    let etc = node.etc();
    let e = etc.to_str().expect("utf-8");
    let target = etc.join("pki/certsync/etcd-server");
    let config = etc.join("certsync-etcd.yaml");
    std::fs::write(
        &config,
        format!(
            "mappings:\n  - {{source: \"ca:{e}/pki/etcd/ca\", target: {e}/pki/certsync/etcd-server, template: {e}/pki/etcd/server.crt}}\n"
        ),
    )
    .expect("config");
    let _daemon = support::Certsync::start(
        &["run", "--config", config.to_str().expect("utf-8")],
        &node.dir,
    );
    wait_long(
        "the target's first revision",
        Duration::from_secs(120),
        || live_der(&target),
    );
    let mut docs = kubeadm_config(&node);
    let cc = docs
        .iter_mut()
        .find(|d| d["kind"] == "ClusterConfiguration")
        .expect("ClusterConfiguration");
    let crt = "/etc/kubernetes/pki/certsync/etcd-server/tls.crt";
    let key = "/etc/kubernetes/pki/certsync/etcd-server/tls.key";
    cc["etcd"]["local"]["extraArgs"] = serde_yaml_ng::from_str(&format!(
        "[{{name: cert-file, value: {crt}}}, {{name: key-file, value: {key}}}]"
    ))
    .expect("args");
    assert_eq!(
        regenerate(&node, &docs, &[&["etcd", "local"]]),
        ["etcd.yaml"]
    );
    let log = node
        .dir
        .join("logs")
        .join(format!("etcd-{}_etcd.log", node.name));
    let restarted = wait_long("etcd restarted", Duration::from_secs(120), || {
        containers(&node)
            .into_iter()
            .find(|(name, _, restarts)| name.starts_with("etcd-") && *restarts > 0)
    });
    let text = std::fs::read_to_string(&log).expect("etcd log");
    assert!(
        text.contains(&format!("open {crt}: no such file or directory")),
        "{restarted:?}: etcd names the file it cannot see:\n{}",
        &text[text.len().saturating_sub(2000)..]
    );
}

/// Where each certificate lives once certsync renews it, inside the node
/// (`/etc/kubernetes` as the components see it): each component sees its
/// targets through the mounts kubeadm's manifests already have plus what
/// ClusterConfiguration carries across `kubeadm upgrade`.
/// (mapping target under /etc/kubernetes, CA prefix under pki/, template
/// under pki/ or the client identity).
const P: &str = "/etc/kubernetes/pki/certsync";
const PE: &str = "/etc/kubernetes/pki/etcd/certsync";

/// On a real node, through `certsync kubeadm
/// adopt` (the layout the guide's "What adopt does, by hand" describes):
/// etcd's targets under pki/etcd (the only part of pki its manifest mounts;
/// etcd.local has no extraVolumes) named by etcd.local.extraArgs; the API
/// server's under pki/certsync (pki is mounted); the scheduler's and
/// controller-manager's client certificates in targets that a kubeconfig of
/// certsync's references by file, that kubeconfig and (scheduler) the
/// target given to them by scheduler/controllerManager extraArgs +
/// extraVolumes in the node's manifests. certsync runs as a static pod of the node, seeing only its
/// mounts. The ClusterConfiguration stays kubeadm's (what kubeadm generates
/// from it is kubeadm's own manifests: a node can join). Then `kubeadm
/// certs renew all` by mistake, and renewals at an 8-minute lifetime: every
/// component goes on with zero restarts, the served certificates of etcd
/// and the API server follow each flip, and the scheduler's and
/// controller-manager's leases are renewed after the first client
/// certificates expired (client-go re-read the files: it polls them every 5
/// minutes, so a client certificate needs more than 5 minutes left at its
/// renewal point).
#[test]
fn every_component_follows_renewals_in_adopts_layout() {
    use std::time::{Duration, Instant, SystemTime};
    let Some(realkube) = realkube() else { return };
    let image = format!("certsync={}", certsync_bin());
    let node = Node::up(&realkube, "layout", &["--", "--image", &image]);
    let etc = node.etc();
    let host = |inside: &str| etc.join(inside.strip_prefix("/etc/kubernetes/").expect("inside"));
    let kubectl = kubectl(&realkube);
    let admin = etc.join("admin.conf");
    let ready = |kc: &Path| ready(&kubectl, kc);

    let before = containers(&node);
    let restarted = Restarts::mark(&node);
    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "{text}");
    let manifests = std::fs::read_to_string(etc.join("manifests/etcd.yaml")).expect("etcd.yaml");
    assert!(
        manifests.contains(&format!("--cert-file={PE}/server/tls.crt")),
        "{manifests}"
    );

    // Every kubeadm pod restarted once for its new manifest (new pids),
    // certsync's pod runs beside them.
    let adopted_pids = wait_long("the adopted pods", Duration::from_secs(180), || {
        let now = containers(&node);
        let fresh = now.len() == 5
            && now.iter().all(|(name, pid, _)| {
                *pid > 0 && before.iter().all(|(n, p, _)| n != name || p != pid)
            });
        (fresh && ready(&admin)).then_some(now)
    });
    assert!(
        adopted_pids
            .iter()
            .any(|(n, _, _)| n.starts_with("certsync-")),
        "{adopted_pids:?}"
    );

    // `kubeadm certs renew all` by mistake (certsync's next resync puts its
    // pairs back in kubeadm's files); the manifests stay adopt's.
    let manifests_dir = etc.join("manifests");
    let read_manifests = || -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&manifests_dir)
            .expect("manifests")
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).expect("read"),
                )
            })
            .collect();
        v.sort();
        v
    };
    let adopted_manifests = read_manifests();
    let out = node.sh("kubeadm", &["certs", "renew", "all"]);
    assert!(
        out.status.success(),
        "certs renew all: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The ClusterConfiguration holds nothing of certsync's: what kubeadm
    // generates from it (at a join, or an upgrade) is kubeadm's own
    // manifests, naming only files kubeadm makes.
    let generated = generate(
        &node,
        &stored_docs(&node, &kubectl, &admin),
        &[&["control-plane", "all"], &["etcd", "local"]],
    );
    assert!(
        generated == kubeadms_manifests(&node),
        "kubeadm generates its own manifests from the stored ClusterConfiguration"
    );
    assert!(read_manifests() == adopted_manifests);

    // Renewals: at least two of each serving certificate, each served; the
    // client certificates the components started with expire meanwhile.
    let first_client_expiry = SystemTime::now() + Duration::from_secs(8 * 60);
    let healthcheck = host(&format!("{PE}/healthcheck-client"));
    let (hc_crt, hc_key) = (healthcheck.join("tls.crt"), healthcheck.join("tls.key"));
    let etcd_addr = format!("{}:2379", node.ip);
    let api_addr = format!("{}:6443", node.ip);
    let mut seen_api = std::collections::BTreeSet::new();
    let mut seen_etcd = std::collections::BTreeSet::new();
    let mut calls = 0;
    let mut not_ready = 0;
    let start = Instant::now();
    while SystemTime::now() < first_client_expiry + Duration::from_secs(60) {
        // The API answers through admin.conf (which certsync rewrites).
        // One /readyz may fail on a starved machine (four nodes of this
        // suite share two cores with the rest of CI: etcd's check times
        // out); the API must be back within the minute, and no component
        // may have restarted (checked below).
        if let Err(why) = readyz(&kubectl, &admin) {
            eprintln!("/readyz after {:?}: {why}", start.elapsed());
            not_ready += 1;
            wait_long(
                "the API through admin.conf",
                Duration::from_secs(60),
                || ready(&admin).then_some(()),
            );
        }
        calls += 1;
        for (target, addr, client, seen) in [
            (
                host(&format!("{P}/apiserver")),
                &api_addr,
                None,
                &mut seen_api,
            ),
            (
                host(&format!("{PE}/server")),
                &etcd_addr,
                Some((hc_crt.as_path(), hc_key.as_path())),
                &mut seen_etcd,
            ),
        ] {
            // Served within seconds of a flip (at the next handshake).
            let got = wait_long(
                "the live certificate served",
                Duration::from_secs(20),
                || {
                    let live = live_der(&target)?;
                    served(&node, addr, client).filter(|s| *s == live)
                },
            );
            seen.insert(got);
        }
        std::thread::sleep(Duration::from_secs(5));
    }
    assert!(
        seen_api.len() >= 3,
        "API server served {} certificates",
        seen_api.len()
    );
    assert!(
        seen_etcd.len() >= 3,
        "etcd served {} certificates",
        seen_etcd.len()
    );

    // The scheduler and controller-manager still renew their leases: their
    // first client certificates are expired, so client-go re-read the files.
    for lease in ["kube-scheduler", "kube-controller-manager"] {
        wait_long(
            &format!("{lease}'s lease renewed"),
            Duration::from_secs(30),
            || {
                let out = Command::new(&kubectl)
                    .arg("--kubeconfig")
                    .arg(&admin)
                    .args([
                        "get",
                        "lease",
                        "-n",
                        "kube-system",
                        lease,
                        "-o",
                        "jsonpath={.spec.renewTime}",
                    ])
                    .output()
                    .ok()?;
                let t = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                let renewed =
                    time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339)
                        .ok()?;
                (SystemTime::from(renewed) > first_client_expiry).then_some(())
            },
        );
    }
    // kubeadm's own view agrees with certsync's: every certificate
    // `kubeadm certs check-expiration` lists ends when certsync's live one
    // does (kubeadm's pairs and kubeconfigs are kept in step, also after
    // the `certs renew all` above).
    let agreed = wait_long(
        "check-expiration and certsync check agree",
        Duration::from_secs(120),
        || expirations_agree(&node).map_err(|e| eprintln!("{e}")).ok(),
    );
    assert_eq!(agreed, 11, "every certificate kubeadm renews");
    // Zero restarts: the same processes as right after adoption.
    assert_eq!(containers(&node), adopted_pids, "no container restarted");
    let since = restarted.since(&node);
    assert!(since.is_empty(), "restarted since adoption:\n{since}");
    assert!(
        not_ready * 10 <= calls,
        "/readyz failed {not_ready} times in {calls}"
    );
    eprintln!(
        "{calls} API calls ({not_ready} /readyz failures, each recovered), {} API server and {} etcd certificates served",
        seen_api.len(),
        seen_etcd.len()
    );
}

/// Each certificate `kubeadm certs check-expiration` lists on `node` and
/// the target certsync renews it in, as `certsync check -o json` reports
/// it.
const KUBEADM_ROWS: [(&str, &str); 11] = [
    ("admin.conf", "/etc/kubernetes/pki/certsync/admin-client"),
    ("apiserver", "/etc/kubernetes/pki/certsync/apiserver"),
    (
        "apiserver-etcd-client",
        "/etc/kubernetes/pki/certsync/apiserver-etcd-client",
    ),
    (
        "apiserver-kubelet-client",
        "/etc/kubernetes/pki/certsync/apiserver-kubelet-client",
    ),
    (
        "controller-manager.conf",
        "/etc/kubernetes/pki/certsync/controller-manager-client",
    ),
    (
        "etcd-healthcheck-client",
        "/etc/kubernetes/pki/etcd/certsync/healthcheck-client",
    ),
    ("etcd-peer", "/etc/kubernetes/pki/etcd/certsync/peer"),
    ("etcd-server", "/etc/kubernetes/pki/etcd/certsync/server"),
    (
        "front-proxy-client",
        "/etc/kubernetes/pki/certsync/front-proxy-client",
    ),
    (
        "scheduler.conf",
        "/etc/kubernetes/pki/certsync/scheduler-client",
    ),
    (
        "super-admin.conf",
        "/etc/kubernetes/pki/certsync/super-admin-client",
    ),
];

/// Whether `kubeadm certs check-expiration` (run on the node, with its
/// minute-precision `Jan 02, 2006 15:04 MST`) and `certsync check` of each
/// target say the same end for every certificate of [`KUBEADM_ROWS`]; the
/// count agreed, or what differs.
fn expirations_agree(node: &Node) -> Result<usize, String> {
    let out = node.sh("kubeadm", &["certs", "check-expiration"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "check-expiration failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let etc = node.etc();
    let paths: Vec<String> = KUBEADM_ROWS
        .iter()
        .map(|(_, t)| {
            let t = t.strip_prefix("/etc/kubernetes/").expect("inside");
            etc.join(t).join("tls.crt").display().to_string()
        })
        .collect();
    let mut args = vec!["check", "-o", "json", "--warn-within", "1s"];
    args.extend(paths.iter().map(String::as_str));
    let ours = certsync(&args);
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&ours.stdout).map_err(|e| format!("check -o json: {e}"))?;
    let format = time::format_description::parse_borrowed::<1>(
        "[month repr:short] [day], [year] [hour]:[minute] UTC",
    )
    .expect("format");
    let mut agreed = 0;
    for ((name, _), path) in KUBEADM_ROWS.iter().zip(&paths) {
        let theirs = text
            .lines()
            .find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some(*name)).then(|| words.take(5).collect::<Vec<_>>().join(" "))
            })
            .ok_or_else(|| format!("{name}: not in check-expiration: {text}"))?;
        let expires = row(&rows, path)["expires"]
            .as_str()
            .ok_or_else(|| format!("{path}: no expiry"))?;
        let ours =
            time::OffsetDateTime::parse(expires, &time::format_description::well_known::Rfc3339)
                .map_err(|e| format!("{path}: {expires}: {e}"))?
                .format(&format)
                .expect("format");
        if ours != theirs {
            return Err(format!("{name}: kubeadm says {theirs}, certsync {ours}"));
        }
        agreed += 1;
    }
    Ok(agreed)
}

/// kubeadm's files that certsync's pod keeps in step with a target (below
/// the node's /etc/kubernetes): each of kubeadm's seven pairs under pki/
/// (`update-pair:`) and the four kubeconfigs embedding a client pair
/// (`update-kubeconfig:`). The pod rewrites them at each renewal, at any
/// time of a test: 20-25 % of 8 minutes is under two minutes.
const KEPT_IN_STEP: [(&[&str], &str); 11] = [
    (
        &["pki/apiserver.crt", "pki/apiserver.key"],
        "pki/certsync/apiserver",
    ),
    (
        &[
            "pki/apiserver-kubelet-client.crt",
            "pki/apiserver-kubelet-client.key",
        ],
        "pki/certsync/apiserver-kubelet-client",
    ),
    (
        &[
            "pki/apiserver-etcd-client.crt",
            "pki/apiserver-etcd-client.key",
        ],
        "pki/certsync/apiserver-etcd-client",
    ),
    (
        &["pki/front-proxy-client.crt", "pki/front-proxy-client.key"],
        "pki/certsync/front-proxy-client",
    ),
    (
        &["pki/etcd/server.crt", "pki/etcd/server.key"],
        "pki/etcd/certsync/server",
    ),
    (
        &["pki/etcd/peer.crt", "pki/etcd/peer.key"],
        "pki/etcd/certsync/peer",
    ),
    (
        &[
            "pki/etcd/healthcheck-client.crt",
            "pki/etcd/healthcheck-client.key",
        ],
        "pki/etcd/certsync/healthcheck-client",
    ),
    (&["admin.conf"], "pki/certsync/admin-client"),
    (&["super-admin.conf"], "pki/certsync/super-admin-client"),
    (
        &["controller-manager.conf"],
        "pki/certsync/controller-manager-client",
    ),
    (&["scheduler.conf"], "pki/certsync/scheduler-client"),
];

/// The live certificate of each [`KEPT_IN_STEP`] target.
fn lives(etc: &Path) -> Vec<Option<Vec<u8>>> {
    KEPT_IN_STEP
        .iter()
        .map(|(_, t)| live_der(&etc.join(t)))
        .collect()
}

/// Whether each [`KEPT_IN_STEP`] file holds its target's live pair: a
/// pair's certificate is the live one, a kubeconfig embeds it.
fn kept_in_step(etc: &Path) -> Result<(), String> {
    use base64::Engine as _;
    for (files, target) in KEPT_IN_STEP {
        let live = std::fs::read(etc.join(target).join("tls.crt"))
            .map_err(|e| format!("{target}: {e}"))?;
        let held = std::fs::read(etc.join(files[0])).map_err(|e| format!("{}: {e}", files[0]))?;
        let in_step = match files {
            [_] => String::from_utf8_lossy(&held)
                .contains(&base64::engine::general_purpose::STANDARD.encode(&live)),
            _ => first_der(&held).is_some() && first_der(&held) == first_der(&live),
        };
        if !in_step {
            return Err(format!("{} does not yet hold the live {target}", files[0]));
        }
    }
    Ok(())
}

/// The node's files ([`tree`]) once certsync's pod has written every
/// [`KEPT_IN_STEP`] file for the live pairs, with those pairs: no copy
/// is half-way through a renewal in it.
fn settled_tree(etc: &Path) -> (Tree, Vec<Option<Vec<u8>>>) {
    wait_long(
        "every kubeadm pair and kubeconfig in step with certsync's",
        std::time::Duration::from_secs(120),
        || {
            kept_in_step(etc).map_err(|e| eprintln!("{e}")).ok()?;
            let live = lives(etc);
            let files = tree(etc);
            (kept_in_step(etc).is_ok() && lives(etc) == live).then_some((files, live))
        },
    )
}

/// The paths of `after` that differ from `before` and that certsync's pod
/// did not write: a [`KEPT_IN_STEP`] file changes only where its target
/// was renewed in between (`live_before` against now).
fn written_besides_renewals(
    etc: &Path,
    (before, live_before): &(Tree, Vec<Option<Vec<u8>>>),
    after: &Tree,
) -> Vec<PathBuf> {
    let live_after = lives(etc);
    let renewed: Vec<PathBuf> = KEPT_IN_STEP
        .iter()
        .zip(live_before.iter().zip(&live_after))
        .filter(|(_, (a, b))| a != b)
        .flat_map(|((files, _), _)| files.iter().map(|f| etc.join(f)))
        .collect();
    changed(before, after)
        .into_iter()
        .filter(|p| !renewed.contains(p))
        .collect()
}

/// The paths whose bytes differ between two [`tree`]s (or that only one
/// has), for a failure message.
fn changed(a: &Tree, b: &Tree) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = a
        .iter()
        .filter(|(p, bytes)| b.get(*p) != Some(*bytes))
        .map(|(p, _)| p.clone())
        .collect();
    out.extend(b.keys().filter(|p| !a.contains_key(*p)).cloned());
    out
}

/// Every file below a directory with its bytes.
type Tree = std::collections::BTreeMap<PathBuf, Vec<u8>>;

/// Every file below `dir` with its bytes, except certsync's targets (a
/// running certsync renews them).
fn tree(dir: &Path) -> Tree {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let path = e.path();
            let t = e.file_type().expect("type");
            if t.is_dir() {
                if !(path.ends_with("pki/certsync") || path.ends_with("pki/etcd/certsync")) {
                    todo.push(path);
                }
            } else if t.is_file() {
                out.insert(path.clone(), std::fs::read(&path).expect("read"));
            } else {
                out.insert(path.clone(), Vec::new());
            }
        }
    }
    out
}

/// `certsync kubeadm adopt` and `revert` on a node kubeadm made,
/// through the binary: `--dry-run` prints the plan and changes no file
/// (every file hashed before and after) nor the ClusterConfiguration;
/// adopt runs certsync as a static pod of the node and points every
/// component at its targets (the API server and etcd then serve
/// certsync's certificates); a second adopt changes nothing; revert gives
/// back kubeadm's manifests byte for byte and its ClusterConfiguration, the
/// components serve kubeadm's certificates again, and a second revert has
/// nothing to do; adopt again works; `kubeadm upgrade`'s regenerated
/// manifests are kubeadm's (the node serves on kubeadm's files, which
/// certsync keeps renewed), and adopt again restores the adoption.
#[test]
fn adopt_dry_run_then_adopt_twice_then_revert_twice() {
    use std::time::Duration;
    let Some(realkube) = realkube() else { return };
    let bin = certsync_bin();
    let image = format!("certsync={bin}");
    let node = Node::up(&realkube, "adopt", &["--", "--image", &image]);
    let etc = node.etc();
    let kubectl = kubectl(&realkube);
    let admin = etc.join("admin.conf");
    let original_cc = stored_cluster_configuration(&kubectl, &admin);
    let before = tree(&etc);

    // --dry-run: the plan, nothing written.
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--dry-run", "--image", "certsync"]);
    assert!(ok, "{text}");
    for line in [
        "create /etc/kubernetes/certsync.yaml",
        "create /etc/kubernetes/manifests/certsync.yaml",
        "--tls-cert-file: /etc/kubernetes/pki/apiserver.crt -> /etc/kubernetes/pki/certsync/apiserver/tls.crt",
        "--cert-file: /etc/kubernetes/pki/etcd/server.crt -> /etc/kubernetes/pki/etcd/certsync/server/tls.crt",
        "ClusterConfiguration (kubeadm-config): stays kubeadm's",
        "renew in place /etc/kubernetes/admin.conf",
        "renew in place /etc/kubernetes/super-admin.conf",
        "dry run: nothing was changed",
    ] {
        assert!(text.contains(line), "{line:?} not in the plan:\n{text}");
    }
    let now = tree(&etc);
    assert!(
        now == before,
        "--dry-run changed {:?}",
        changed(&before, &now)
    );
    assert_eq!(stored_cluster_configuration(&kubectl, &admin), original_cc);
    let (ok, json) = kubeadm_cmd(
        &node,
        &["adopt", "--dry-run", "--image", "certsync", "-o", "json"],
    );
    assert!(ok, "{json}");
    let plan: serde_json::Value = serde_json::from_str(&json).expect("-o json");
    assert_eq!(
        plan["manifests"].as_array().map(Vec::len),
        Some(4),
        "{plan}"
    );

    // Adopt.
    let kubeadms_pods = containers(&node);
    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "{text}");
    assert!(text.ends_with("adopted\n"), "{text}");
    // adopt said `adopted` once the API server served certsync's pair.
    assert!(
        text.contains("waited for the API server to restart on certsync's files: ")
            && text
                .contains(" serves /etc/kubernetes/pki/certsync/apiserver/tls.crt and is ready ("),
        "{text}"
    );
    // certsync runs in the node, and every component comes back on its new
    // manifest (a new pid each: the kubelet stops the old pods one by one,
    // etcd's within its 30 s grace), serving certsync's certificates.
    let pids = wait_long("five pods running", Duration::from_secs(180), || {
        let now = settled(&node, 5)?;
        now.iter()
            .any(|(n, _, _)| n.starts_with("certsync-"))
            .then_some(())?;
        let fresh = now
            .iter()
            .all(|(name, pid, _)| kubeadms_pods.iter().all(|(n, p, _)| n != name || p != pid));
        (fresh && ready(&kubectl, &admin)).then_some(now)
    });
    let api_target = etc.join("pki/certsync/apiserver");
    let etcd_target = etc.join("pki/etcd/certsync/server");
    let hc = etc.join("pki/etcd/certsync/healthcheck-client");
    let (hc_crt, hc_key) = (hc.join("tls.crt"), hc.join("tls.key"));
    // kubeadm's own apiserver.crt, as before adoption: certsync keeps the
    // file in step with its target since (update-pair).
    let kubeadm_api = first_der(before.get(&etc.join("pki/apiserver.crt")).expect("crt"));
    wait_long(
        "kubeadm's apiserver.crt in step with certsync's",
        Duration::from_secs(90),
        || {
            let copy = first_der(&std::fs::read(etc.join("pki/apiserver.crt")).ok()?)?;
            (Some(copy) == live_der(&api_target)).then_some(())
        },
    );
    for (target, addr, client) in [
        (&api_target, format!("{}:6443", node.ip), None),
        (
            &etcd_target,
            format!("{}:2379", node.ip),
            Some((hc_crt.as_path(), hc_key.as_path())),
        ),
    ] {
        wait_long(
            &format!("{addr} serving certsync's certificate"),
            Duration::from_secs(60),
            || {
                let live = live_der(target)?;
                served(&node, &addr, client).filter(|s| *s == live)
            },
        );
    }
    let config = std::fs::read_to_string(etc.join("certsync.yaml")).expect("certsync.yaml");
    assert_eq!(config.matches("lifetime: 8m").count(), 11, "{config}");
    // admin.conf and super-admin.conf embed certsync's pairs, and work.
    for (conf, target) in [
        ("admin.conf", "admin-client"),
        ("super-admin.conf", "super-admin-client"),
    ] {
        let text = std::fs::read_to_string(etc.join(conf)).expect("kubeconfig");
        let live = std::fs::read_to_string(etc.join("pki/certsync").join(target).join("tls.crt"))
            .expect("live");
        use base64::Engine as _;
        let embedded = base64::engine::general_purpose::STANDARD.encode(live.as_bytes());
        assert!(
            text.contains(&embedded),
            "{conf} embeds the live {target} pair"
        );
        assert!(ready(&kubectl, &etc.join(conf)), "{conf} works");
    }
    assert_eq!(
        stored_cluster_configuration(&kubectl, &admin),
        original_cc,
        "adopt adds nothing to the ClusterConfiguration"
    );

    // Adopt again: nothing to change, nothing written, nothing restarted.
    // certsync's pod may renew a pair meanwhile (every 2 minutes here) and
    // write kubeadm's copy of it: that file is its doing, not adopt's.
    let adopted = settled_tree(&etc);
    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "{text}");
    assert!(
        text.contains("already adopted: nothing to change"),
        "{text}"
    );
    let written = written_besides_renewals(&etc, &adopted, &tree(&etc));
    assert!(written.is_empty(), "a second adopt wrote {written:?}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        containers(&node),
        pids,
        "a second adopt restarted something"
    );

    // revert --dry-run: what revert would do (never what it did), each
    // pair and kubeconfig kubeadm's copy from the backup (year-long:
    // nothing to issue again), and the node still adopted.
    let (ok, text) = kubeadm_cmd(&node, &["revert", "--dry-run"]);
    assert!(ok, "{text}");
    for line in [
        "would remove /etc/kubernetes/manifests/certsync.yaml",
        "would restore /etc/kubernetes/pki/apiserver.crt from ",
        "would restore /etc/kubernetes/pki/apiserver.key from ",
        "would restore /etc/kubernetes/admin.conf from ",
        "would restore /etc/kubernetes/manifests/kube-apiserver.yaml from ",
        "would remove /etc/kubernetes/pki/certsync/ (adopt made it; empty once certsync's files are out)",
        "would remove /etc/kubernetes/pki/etcd/certsync/ (adopt made it; empty once certsync's files are out)",
        "would wait up to 3m for the API server to restart on kubeadm's files (serving /etc/kubernetes/pki/apiserver.crt, /readyz ok through admin.conf)",
    ] {
        assert!(text.contains(line), "{line:?} not in the dry run:\n{text}");
    }
    assert!(
        text.ends_with("dry run: nothing was changed\n")
            && !text
                .lines()
                .any(|l| ["restored", "removed", "moved", "took"]
                    .iter()
                    .any(|w| l.starts_with(w))),
        "{text}"
    );
    assert!(
        etc.join("manifests/certsync.yaml").is_file(),
        "the dry run reverted"
    );

    // Revert: kubeadm's manifests byte for byte, its ClusterConfiguration,
    // certsync's pod gone, kubeadm's certificate served again.
    let (ok, text) = kubeadm_cmd(&node, &["revert"]);
    assert!(ok, "{text}");
    assert!(text.ends_with("reverted\n"), "{text}");
    // revert said `reverted` once the API server served kubeadm's
    // certificate again and was ready, not before.
    assert!(
        text.contains("waited for the API server to restart on kubeadm's files: ")
            && text.contains(" serves /etc/kubernetes/pki/apiserver.crt and is ready ("),
        "{text}"
    );
    assert!(
        text.contains("restored /etc/kubernetes/pki/apiserver.crt from ")
            && !text.contains("again"),
        "{text}"
    );
    for m in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let path = etc.join(format!("manifests/{m}.yaml"));
        assert!(
            std::fs::read(&path).ok() == before.get(&path).cloned(),
            "{m}.yaml is not kubeadm's again"
        );
    }
    assert!(!etc.join("manifests/certsync.yaml").exists());
    for conf in [
        "admin.conf",
        "super-admin.conf",
        "controller-manager.conf",
        "scheduler.conf",
        "pki/apiserver.crt",
        "pki/apiserver.key",
        "pki/etcd/server.crt",
    ] {
        let path = etc.join(conf);
        assert!(
            std::fs::read(&path).ok() == before.get(&path).cloned(),
            "{conf} is not kubeadm's again"
        );
    }
    wait_long("four pods, ready", Duration::from_secs(180), || {
        let now = settled(&node, 4)?;
        ready(&kubectl, &admin).then_some(now)
    });
    // revert restores the manifests last (after certsync has stopped and
    // kubeadm's files are back): the kubelet's next look at them, the old
    // containers' 30 s grace and the new start may take past a minute.
    wait_long(
        "kubeadm's certificate served again",
        Duration::from_secs(180),
        || {
            let want = kubeadm_api.clone()?;
            served(&node, &format!("{}:6443", node.ip), None).filter(|s| *s == want)
        },
    );
    // Read from the API server restarted on kubeadm's manifest (the one
    // revert left may still be stopping).
    assert_eq!(stored_cluster_configuration(&kubectl, &admin), original_cc);
    // certsync's files moved into the backup (without --purge): kept for
    // inspection, where nothing starts on them.
    assert!(!etc.join("certsync.yaml").exists(), "left in place");
    assert!(
        !etc.join("pki/certsync/apiserver").exists(),
        "left in place"
    );
    // ... and the directories adopt made for them removed, empty: pki/ is
    // kubeadm's tree again, neither left behind empty.
    for made in ["pki/certsync", "pki/etcd/certsync"] {
        assert!(!etc.join(made).exists(), "{made} left behind:\n{text}");
    }
    let kept = std::fs::read_dir(etc.join("certsync/backup"))
        .expect("backups")
        .filter_map(Result::ok)
        .any(|b| {
            b.path().join("certsync.yaml").is_file()
                && b.path().join("pki/certsync/apiserver").is_dir()
        });
    assert!(kept, "certsync's configuration and targets in a backup");

    // Revert again: nothing to do.
    let reverted = tree(&etc);
    let (ok, text) = kubeadm_cmd(&node, &["revert"]);
    assert!(ok, "{text}");
    assert!(text.contains("nothing to do"), "{text}");
    let again = tree(&etc);
    assert!(
        again == reverted,
        "a second revert wrote {:?}",
        changed(&reverted, &again)
    );

    // Adopt again after the revert (the first adoption's backup is still
    // there), then what `kubeadm upgrade` does to the manifests: regenerated
    // from the stored ClusterConfiguration, they are kubeadm's own again,
    // and the components restart on kubeadm's files, which certsync keeps
    // renewed in place: the API server serves certsync's live pair from
    // pki/apiserver.crt. Adopt again puts the adoption back.
    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "adopt after revert:\n{text}");
    assert!(text.ends_with("adopted\n"), "{text}");
    let adopted_manifests = manifest_bytes(&etc);
    wait_long("five pods again", Duration::from_secs(180), || {
        let now = settled(&node, 5)?;
        now.iter()
            .any(|(n, _, _)| n.starts_with("certsync-"))
            .then_some(())?;
        let live = live_der(&api_target)?;
        served(&node, &format!("{}:6443", node.ip), None).filter(|s| *s == live)?;
        ready(&kubectl, &admin).then_some(now)
    });
    let upgraded = stored_docs(&node, &kubectl, &admin);
    assert_eq!(
        regenerate(
            &node,
            &upgraded,
            &[&["control-plane", "all"], &["etcd", "local"]]
        ),
        [
            "etcd.yaml",
            "kube-apiserver.yaml",
            "kube-controller-manager.yaml",
            "kube-scheduler.yaml"
        ],
        "an upgrade gives kubeadm's manifests back"
    );
    wait_long(
        "the API server on kubeadm's files, serving certsync's live pair",
        Duration::from_secs(180),
        || {
            settled(&node, 5)?;
            let kubeadms = first_der(&std::fs::read(etc.join("pki/apiserver.crt")).ok()?);
            let live = live_der(&api_target)?;
            (kubeadms == Some(live.clone())).then_some(())?;
            served(&node, &format!("{}:6443", node.ip), None).filter(|s| *s == live)?;
            ready(&kubectl, &admin).then_some(())
        },
    );
    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "adopt after an upgrade:\n{text}");
    assert!(text.ends_with("adopted\n"), "{text}");
    assert!(
        manifest_bytes(&etc) == adopted_manifests,
        "adopt again puts the same manifests back"
    );
}

/// Revert on a node whose kubeadm certificate is near its
/// end: kubeadm's own apiserver.crt was renewed by kubeadm with a 2-hour
/// lifetime (`certificateValidityPeriod`) before adoption, so adopt's
/// backup of it ends within a day; certsync keeps the pair in step at 8
/// minutes. revert refused (and `--force` handed back the 2-hour pair);
/// now it issues kubeadm's certificate again from the backup, on the host,
/// the API server serves it with /readyz ok, and `kubeadm certs renew all`
/// then renews it as usual.
#[test]
fn revert_issues_kubeadms_certificate_near_its_end_again() {
    use std::time::Duration;
    let Some(realkube) = realkube() else { return };
    let image = format!("certsync={}", certsync_bin());
    let node = Node::up(&realkube, "revert-end", &["--", "--image", &image]);
    let etc = node.etc();
    let kubectl = kubectl(&realkube);
    let admin = etc.join("admin.conf");

    // kubeadm renews apiserver.crt for 2 hours: what a certificate near its
    // end looks like to revert.
    let mut docs = kubeadm_config(&node);
    for d in &mut docs {
        if d["kind"] == "ClusterConfiguration"
            && let serde_yaml_ng::Value::Mapping(m) = d
        {
            m.insert("certificateValidityPeriod".into(), "2h0m0s".into());
        }
    }
    let file = config_file(&node, &docs, "kubeadm-2h.yaml");
    let out = node.sh(
        "kubeadm",
        &[
            "certs",
            "renew",
            "apiserver",
            "--config",
            file.to_str().expect("utf-8"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "{text}");
    let api_target = etc.join("pki/certsync/apiserver");
    let api = format!("{}:6443", node.ip);
    wait_long(
        "the API server serving certsync's certificate, kubeadm's copy in step",
        Duration::from_secs(180),
        || {
            settled(&node, 5)?;
            let live = live_der(&api_target)?;
            let copy = first_der(&std::fs::read(etc.join("pki/apiserver.crt")).ok()?)?;
            (copy == live).then_some(())?;
            served(&node, &api, None).filter(|s| *s == live)
        },
    );

    let backup = std::fs::read_dir(etc.join("certsync/backup"))
        .expect("backup")
        .next()
        .expect("one backup")
        .expect("entry")
        .path();
    let kubeadms_2h =
        first_der(&std::fs::read(backup.join("pki/apiserver.crt")).expect("backup")).expect("crt");
    let (ok, text) = kubeadm_cmd(&node, &["revert"]);
    assert!(ok, "{text}");
    assert!(text.ends_with("reverted\n"), "{text}");
    assert!(
        text.contains("issued /etc/kubernetes/pki/apiserver.crt again from kubeadm's copy in "),
        "{text}"
    );
    let again =
        first_der(&std::fs::read(etc.join("pki/apiserver.crt")).expect("crt")).expect("crt");
    let (_, old) = x509_parser::parse_x509_certificate(&kubeadms_2h).expect("parse");
    let (_, new) = x509_parser::parse_x509_certificate(&again).expect("parse");
    assert_eq!(new.subject().as_raw(), old.subject().as_raw());
    assert_eq!(
        new.public_key().raw,
        old.public_key().raw,
        "kubeadm's key kept"
    );
    assert!(
        new.validity().not_after.timestamp() - old.validity().not_after.timestamp() > 86_400,
        "issued for longer than a day"
    );
    wait_long(
        "the certificate issued again served, /readyz ok",
        Duration::from_secs(180),
        || {
            settled(&node, 4)?;
            served(&node, &api, None).filter(|s| *s == again)?;
            ready(&kubectl, &admin).then_some(())
        },
    );

    let out = node.sh("kubeadm", &["certs", "renew", "all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubeadms = first_der(&std::fs::read(etc.join("pki/apiserver.crt")).expect("crt"));
    wait_long(
        "kubeadm's renewed certificate served, /readyz ok",
        Duration::from_secs(180),
        || {
            settled(&node, 4)?;
            let want = kubeadms.clone()?;
            served(&node, &api, None).filter(|s| *s == want)?;
            ready(&kubectl, &admin).then_some(())
        },
    );
}
