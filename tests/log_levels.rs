//! What an operator must notice is logged at WARN, naming the file (at
//! INFO it went unseen): a live certificate that has ended, and a kept copy of
//! the pair (`update-pair=`, kubeadm's files) that someone else wrote over
//! (`kubeadm certs renew all` by mistake). certsync's own routine writes
//! stay at INFO.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::Duration;

use support::*;

/// The log lines at `level` (the text format: ` WARN `, ` INFO `).
fn at(log: &str, level: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(&format!(" {level} ")))
        .map(str::to_owned)
        .collect()
}

/// A `ca:` mapping keeping kubeadm-shaped `pki/apiserver.{crt,key}` in
/// step: the first takeover and every resync are INFO or quiet; a pair
/// written over them by another is put back with a WARN naming the prefix.
#[test]
fn a_kept_pair_written_over_by_another_is_a_warning_naming_it() {
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let ca = certs::ca_files(d.path(), 7200);
    let pki = d.path().join("pki");
    fs::create_dir(&pki).unwrap();
    fs::set_permissions(&pki, fs::Permissions::from_mode(0o755)).unwrap();
    let (crt, key) = (pki.join("apiserver.crt"), pki.join("apiserver.key"));
    // The key first, then the certificate, as kubeadm's WriteCertAndKey
    // writes them: certsync puts its own certificate back over a foreign
    // one, but never replaces a key it did not write, so a certificate
    // written first could be put back before the key came, leaving the
    // foreign key refused beside certsync's certificate.
    let put = |p: &certs::Pair| {
        fs::write(&key, &p.key).unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&crt, &p.cert).unwrap();
        fs::set_permissions(&crt, fs::Permissions::from_mode(0o644)).unwrap();
    };
    put(&certs::Pair::new("kube-apiserver"));
    let target = d.path().join("t");
    let spec = format!(
        "ca:{}={},name=apiserver,cn=kube-apiserver,dns=kubernetes,usage=server-auth,lifetime=1h,\
         update-pair={}",
        ca.display(),
        target.display(),
        pki.join("apiserver").display()
    );
    let mut cmd = Command::new(certsync_bin());
    cmd.args([
        "run",
        "--debounce",
        "100ms",
        "--resync",
        "500ms",
        "--sync",
        &spec,
    ])
    .env_remove("KUBECONFIG")
    .env_remove("KUBERNETES_SERVICE_HOST");
    let cs = Certsync::start_with(&mut cmd, d.path());
    let in_step = || {
        let (_, c, k) = read_live(&target)?;
        (fs::read(&crt).ok()? == c && fs::read(&key).ok()? == k).then_some(c)
    };
    let live = wait_for("the pair in step", in_step);
    // Several resyncs: nothing is said about the pair certsync keeps.
    std::thread::sleep(Duration::from_secs(2));
    let log = cs.log();
    assert!(
        log.contains("the pair's .crt and .key now hold the live pair"),
        "{log}"
    );
    let warned = at(&log, "WARN");
    assert!(
        warned.is_empty(),
        "warnings before anyone else wrote: {warned:#?}"
    );

    // `kubeadm certs renew all`, by mistake: a pair of its own over certsync's.
    put(&certs::Pair::new("kube-apiserver"));
    assert_eq!(wait_for("the pair put back", in_step), live);
    // Logged just after the file is written back: waited for.
    let overwritten = || -> Vec<String> {
        at(&cs.log(), "WARN")
            .into_iter()
            .filter(|l| l.contains("did not write"))
            .collect()
    };
    wait_for("the warning", || (!overwritten().is_empty()).then_some(()));
    std::thread::sleep(Duration::from_secs(1));
    let warned = overwritten();
    assert_eq!(warned.len(), 1, "said once: {warned:#?}");
    assert!(
        warned[0].contains(&pki.join("apiserver").display().to_string()),
        "{}",
        warned[0]
    );
    cs.terminate();
}

/// A target whose live certificate has ended (certsync was down while it
/// did): said at WARN at start, naming the certificate file.
#[test]
fn an_expired_live_certificate_is_a_warning_naming_its_file() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let target = d.path().join("t");
    let pair = certs::Pair::with_validity("short", -60, 3);
    write_pair(&src, &pair);
    let sync = format!("dir:{}={}", src.display(), target.display());
    let cs = Certsync::start(&["run", "--sync", &sync], d.path());
    wait_pair(&target, &pair);
    let warned = at(&cs.log(), "WARN");
    assert!(warned.is_empty(), "{warned:#?}");
    cs.terminate();
    std::thread::sleep(Duration::from_secs(4));

    let cs = Certsync::start(&["run", "--sync", &sync], d.path());
    let file = target.join("tls.crt").display().to_string();
    let line = wait_for("a warning about the expired certificate", || {
        at(&cs.log(), "WARN")
            .into_iter()
            .find(|l| l.contains("the live certificate has expired"))
    });
    assert!(line.contains(&file), "{line}");
    assert!(line.contains("mapping"), "{line}");
    cs.terminate();
}

/// A kubeconfig certsync keeps embedding its pair (`update-kubeconfig=`,
/// kubeadm's admin.conf), rewritten by another with a pair of its own: put
/// back with a WARN naming the file; the first takeover stays INFO.
#[test]
fn a_kept_kubeconfig_written_over_by_another_is_a_warning_naming_it() {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let ca = certs::ca_files(d.path(), 7200);
    let conf = d.path().join("admin.conf");
    let put = |p: &certs::Pair| {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  \
             name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: admin\n  \
             name: admin@kubernetes\ncurrent-context: admin@kubernetes\nusers:\n- name: admin\n  user:\n    \
             client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&p.cert),
            b64(&p.key)
        );
        write_atomic(&conf, text.as_bytes());
        fs::set_permissions(&conf, fs::Permissions::from_mode(0o600)).unwrap();
    };
    put(&certs::Pair::new("kubernetes-admin"));
    let target = d.path().join("t");
    let spec = format!(
        "ca:{}={},name=admin-client,cn=kubernetes-admin,usage=client-auth,lifetime=1h,\
         update-kubeconfig={}",
        ca.display(),
        target.display(),
        conf.display()
    );
    let mut cmd = Command::new(certsync_bin());
    cmd.args([
        "run",
        "--debounce",
        "100ms",
        "--resync",
        "500ms",
        "--sync",
        &spec,
    ])
    .env_remove("KUBECONFIG")
    .env_remove("KUBERNETES_SERVICE_HOST");
    let cs = Certsync::start_with(&mut cmd, d.path());
    let in_step = || {
        let (_, c, _) = read_live(&target)?;
        fs::read_to_string(&conf)
            .ok()?
            .contains(&b64(&c))
            .then_some(c)
    };
    let live = wait_for("the kubeconfig in step", in_step);
    std::thread::sleep(Duration::from_secs(2));
    let log = cs.log();
    assert!(log.contains("kubeconfig now embeds the live pair"), "{log}");
    let warned = at(&log, "WARN");
    assert!(
        warned.is_empty(),
        "warnings before anyone else wrote: {warned:#?}"
    );

    put(&certs::Pair::new("kubernetes-admin"));
    assert_eq!(wait_for("the kubeconfig put back", in_step), live);
    // Logged just after the file is written back: waited for.
    let overwritten = || -> Vec<String> {
        at(&cs.log(), "WARN")
            .into_iter()
            .filter(|l| l.contains("did not write"))
            .collect()
    };
    wait_for("the warning", || (!overwritten().is_empty()).then_some(()));
    std::thread::sleep(Duration::from_secs(1));
    let warned = overwritten();
    assert_eq!(warned.len(), 1, "said once: {warned:#?}");
    assert!(
        warned[0].contains(&conf.display().to_string()),
        "{}",
        warned[0]
    );
    cs.terminate();
}
