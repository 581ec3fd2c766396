//! `update-kubeconfig=PATH` through the binary, against a real Kubernetes
//! v1.36 API server (the environment's realkube): a `ca:` mapping keeps a
//! kubeadm-shaped `admin.conf` holding its pair, embedded, renewal after
//! renewal, and `kubectl` with that file keeps working; the file keeps its
//! owner, mode and everything else. Without the tools or root the test
//! skips (a failure under CI=true).

mod support;

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use support::control_plane::ControlPlane;
use support::*;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A kubeconfig shaped as kubeadm writes `super-admin.conf` (embedded CA
/// and pair, one context, `preferences: {}`), plus a second user that must
/// be kept as it is.
fn kubeadm_conf(server: &str, ca: &[u8], cert: &[u8], key: &[u8]) -> String {
    format!(
        "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {}
    server: {server}
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-super-admin
  name: kubernetes-super-admin@kubernetes
current-context: kubernetes-super-admin@kubernetes
kind: Config
preferences: {{}}
users:
- name: kubernetes-super-admin
  user:
    client-certificate-data: {}
    client-key-data: {}
- name: robot
  user:
    token: not-a-real-token
",
        b64(ca),
        b64(cert),
        b64(key)
    )
}

/// The embedded certificate of the current user, and the document.
fn embedded(path: &Path) -> (Vec<u8>, serde_yaml_ng::Value) {
    let doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&fs::read_to_string(path).unwrap()).expect("the file parses");
    let data = doc["users"][0]["user"]["client-certificate-data"]
        .as_str()
        .expect("client-certificate-data");
    let cert = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    (cert, doc)
}

/// `kubectl --kubeconfig FILE ARGS` succeeds; its stdout.
fn kubectl(bin: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_kubeadm_admin_conf_embeds_each_renewed_pair_and_keeps_working() {
    let Some(cp) = ControlPlane::up("update-kubeconfig") else {
        return;
    };
    let env = fs::read_to_string(cp.dir.join("env")).unwrap();
    let var = |key: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches(['"', '\'']).to_owned())
            .unwrap_or_else(|| panic!("no {key} in env"))
    };
    let bin = PathBuf::from(var("REALKUBE_BIN"));
    let server = var("API_URL");

    // The cluster's CA, copied where only root may change it (the control
    // plane's directory is under /tmp).
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let pki = cp.dir.join("pki");
    for f in ["ca.crt", "ca.key"] {
        fs::copy(pki.join(f), d.path().join(f)).unwrap();
    }
    fs::set_permissions(d.path().join("ca.key"), fs::Permissions::from_mode(0o600)).unwrap();
    // Starts with the cluster's own admin pair, as kubeadm's file does.
    let conf = d.path().join("super-admin.conf");
    let original = kubeadm_conf(
        &server,
        &fs::read(pki.join("ca.crt")).unwrap(),
        &fs::read(pki.join("admin.crt")).unwrap(),
        &fs::read(pki.join("admin.key")).unwrap(),
    );
    fs::write(&conf, &original).unwrap();
    // 0640 and a group of its own: both must survive every rewrite.
    fs::set_permissions(&conf, fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::chown(&conf, None, Some(4321)).unwrap();
    let (first, _) = embedded(&conf);
    assert!(kubectl(&bin, &conf, &["auth", "whoami"]).contains("admin"));

    let target = d.path().join("super-admin-client");
    let spec = format!(
        "ca:{}={},cn=kubernetes-super-admin,o=system:masters,usage=digital-signature,\
         usage=key-encipherment,usage=client-auth,key-alg=rsa-2048,lifetime=60s,renew=50%-60%,\
         update-kubeconfig={}",
        d.path().join("ca").display(),
        target.display(),
        conf.display()
    );
    let mut cmd = Command::new(certsync_bin());
    cmd.args(["run", "--debounce", "100ms", "--csr-renew-floor", "1s"])
        .args(["--sync", &spec])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    let cs = Certsync::start_with(&mut cmd, d.path());

    let mut seen = vec![first];
    for round in 0..3 {
        // The next pair, live in the target and embedded in the file. A
        // minute's lifetime: an RSA key took 18 s beside the node tests,
        // and a pair that has ended before kubectl runs proves nothing.
        let cert = wait_for_within(
            "the kubeconfig to embed a new live pair",
            Duration::from_secs(90),
            || {
                let (_, live, _) = read_live(&target)?;
                let (cert, _) = embedded(&conf);
                (cert == live && !seen.contains(&cert)).then_some(cert)
            },
        );
        let (_, doc) = embedded(&conf);
        let mut want: serde_yaml_ng::Value = serde_yaml_ng::from_str(&original).unwrap();
        let (_, live_key) = read_live(&target).map(|(_, c, k)| (c, k)).unwrap();
        let user = want["users"][0]["user"].as_mapping_mut().unwrap();
        user.insert("client-certificate-data".into(), b64(&cert).into());
        user.insert("client-key-data".into(), b64(&live_key).into());
        assert_eq!(doc, want, "round {round}: all but the pair kept");
        let m = fs::metadata(&conf).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640, "round {round}: mode kept");
        assert_eq!((m.uid(), m.gid()), (0, 4321), "round {round}: owner kept");
        // The API server accepts the new pair as the identity it names.
        assert_eq!(kubectl(&bin, &conf, &["get", "--raw", "/readyz"]), "ok");
        let who = kubectl(&bin, &conf, &["auth", "whoami"]);
        assert!(
            who.contains("kubernetes-super-admin"),
            "round {round}: {who}"
        );
        seen.push(cert);
    }
    let log = cs.log();
    cs.terminate();
    assert!(
        log.matches("kubeconfig now embeds the live pair").count() >= 3,
        "{log}"
    );
    assert!(!log.contains("PRIVATE KEY"), "no key bytes in the log");
    let names: Vec<_> = fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("certsync-tmp"))
        .collect();
    assert!(names.is_empty(), "temporary files left: {names:?}");
}

#[test]
fn a_kubeconfig_that_cannot_be_kept_is_refused_at_start_naming_it() {
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let prefix = support::certs::ca_files(d.path(), 3600);
    let conf = d.path().join("admin.conf");
    // A certificate given as a file: embedding data would change its meaning.
    let text = kubeadm_conf("https://127.0.0.1:1", b"ca", b"cert", b"key").replace(
        "    client-key-data: a2V5\n",
        "    client-key-data: a2V5\n    client-certificate: /etc/kubernetes/pki/admin.crt\n",
    );
    assert_ne!(
        text,
        kubeadm_conf("https://127.0.0.1:1", b"ca", b"cert", b"key")
    );
    fs::write(&conf, &text).unwrap();
    fs::set_permissions(&conf, fs::Permissions::from_mode(0o600)).unwrap();
    let spec = |extra: &str| {
        format!(
            "ca:{}={},cn=kubernetes-admin,usage=client-auth,update-kubeconfig={}{extra}",
            prefix.display(),
            d.path().join("t").display(),
            conf.display()
        )
    };
    let run = |spec: &str| {
        Command::new(certsync_bin())
            .args(["run", "--once", "--sync", spec])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let out = run(&spec(""));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains(&conf.display().to_string()) && err.contains("client-certificate"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&conf).unwrap(), text, "left as it was");
    assert!(!d.path().join("t").exists(), "nothing published");
    // Group-writable.
    fs::write(
        &conf,
        kubeadm_conf("https://127.0.0.1:1", b"ca", b"c", b"k"),
    )
    .unwrap();
    fs::set_permissions(&conf, fs::Permissions::from_mode(0o660)).unwrap();
    let out = run(&spec(""));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("0660"), "{err}");
    // Fine once it is the owner's only: published and embedded.
    fs::set_permissions(&conf, fs::Permissions::from_mode(0o600)).unwrap();
    let out = run(&spec(""));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, live, _) = read_live(&d.path().join("t")).unwrap();
    assert_eq!(embedded(&conf).0, live);
    // `certsync check` shows the embedded certificate, its key checked.
    let out = Command::new(certsync_bin())
        .args(["check", "-o", "json", "--warn-within", "1m"])
        .arg(&conf)
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["certificate"], conf.display().to_string());
    assert!(
        rows[0]["subject"]
            .as_str()
            .is_some_and(|s| s.contains("CN=kubernetes-admin")),
        "{rows:?}"
    );
    assert_eq!(rows[0]["key"], "matches", "{rows:?}");
    assert!(out.status.success(), "{rows:?}");
}

/// Made a symlink (or a FIFO) after start: an error of the mapping, said
/// once with the path, counted (`result="kubeconfig_error"`), /readyz 503
/// naming it, while renewals go on publishing into the target and nothing
/// is written through the link; the file put back is updated again and
/// the mapping is ready again.
#[test]
fn a_kubeconfig_replaced_by_a_symlink_or_fifo_later_is_an_error_not_followed() {
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let prefix = support::certs::ca_files(d.path(), 3600);
    let conf = d.path().join("admin.conf");
    let good = kubeadm_conf("https://127.0.0.1:1", b"ca", b"c", b"k");
    fs::write(&conf, &good).unwrap();
    fs::set_permissions(&conf, fs::Permissions::from_mode(0o600)).unwrap();
    let target = d.path().join("t");
    let port = free_port();
    let spec = format!(
        "ca:{}={},name=admin,cn=kubernetes-admin,usage=client-auth,lifetime=6s,renew=50%-60%,\
         update-kubeconfig={}",
        prefix.display(),
        target.display(),
        conf.display()
    );
    let mut cmd = Command::new(certsync_bin());
    cmd.args(["run", "--debounce", "100ms", "--csr-renew-floor", "1s"])
        .args(["--resync", "500ms", "--sync", &spec])
        .args(["--admin-addr", &format!("127.0.0.1:{port}")])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    let cs = Certsync::start_with(&mut cmd, d.path());
    wait_for("the pair embedded", || {
        let (_, live, _) = read_live(&target)?;
        (embedded(&conf).0 == live).then_some(())
    });
    wait_for("ready", || {
        (http_get(port, "/readyz")?.0 == 200).then_some(())
    });

    // A link to a file elsewhere: never written through.
    let elsewhere = d.path().join("elsewhere.conf");
    fs::write(&elsewhere, &good).unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o600)).unwrap();
    support::swap_in_symlink(&elsewhere, &conf);
    let body = wait_for("not ready", || {
        let (code, body) = http_get(port, "/readyz")?;
        (code == 503).then_some(body)
    });
    assert!(
        body.contains("mapping admin") && body.contains("a symlink"),
        "{body}"
    );
    let metrics = parse_metrics(&http_get(port, "/metrics").unwrap().1);
    let errors = metrics
        .get("certsync_syncs_total{mapping=\"admin\",result=\"kubeconfig_error\"}")
        .copied()
        .unwrap_or_default();
    assert!(errors >= 1.0, "{metrics:?}");
    // Renewals go on into the target meanwhile.
    let (_, before, _) = read_live(&target).unwrap();
    wait_for("a renewal while the kubeconfig is broken", || {
        (read_live(&target)?.1 != before).then_some(())
    });
    assert_eq!(fs::read_to_string(&elsewhere).unwrap(), good, "followed");
    let log = cs.log();
    let at_error: Vec<_> = log
        .lines()
        .filter(|l| l.contains(" ERROR ") && l.contains("kubeconfig_failed"))
        .collect();
    assert_eq!(at_error.len(), 1, "{log}");
    assert!(at_error[0].contains(&conf.display().to_string()), "{log}");

    // A FIFO in its place: refused without blocking, still not ready.
    fs::remove_file(&conf).unwrap();
    nix::unistd::mkfifo(&conf, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    wait_for("the FIFO refused", || {
        let (code, body) = http_get(port, "/readyz")?;
        (code == 503 && body.contains("a FIFO")).then_some(())
    });

    // Put back: updated again, ready again.
    fs::remove_file(&conf).unwrap();
    fs::write(&conf, &good).unwrap();
    fs::set_permissions(&conf, fs::Permissions::from_mode(0o600)).unwrap();
    wait_for("the pair embedded again", || {
        let (_, live, _) = read_live(&target)?;
        (embedded(&conf).0 == live).then_some(())
    });
    wait_for("ready again", || {
        (http_get(port, "/readyz")?.0 == 200).then_some(())
    });
    cs.terminate();
}
