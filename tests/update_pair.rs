//! `update-pair=PREFIX` through the binary: a `ca:` mapping keeps
//! kubeadm-shaped `PREFIX.crt` and `PREFIX.key` holding its live pair,
//! renewal after renewal (what `kubeadm certs check-expiration` reads once
//! certsync renews kubeadm's certificates); never writes through a link;
//! and a prefix it cannot keep is refused at start, naming it.

mod support;

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Command;

use support::*;

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// `pki/` (0755) holding a kubeadm-shaped apiserver pair: 0644 and 0600
/// (self-signed leaf: certsync replaces only a pair it can judge a leaf).
fn kubeadm_pki(d: &Path) -> std::path::PathBuf {
    let pki = d.join("pki");
    fs::create_dir(&pki).unwrap();
    fs::set_permissions(&pki, fs::Permissions::from_mode(0o755)).unwrap();
    let kubeadms = support::certs::Pair::new("kube-apiserver");
    fs::write(pki.join("apiserver.crt"), &kubeadms.cert).unwrap();
    fs::set_permissions(pki.join("apiserver.crt"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(pki.join("apiserver.key"), &kubeadms.key).unwrap();
    fs::set_permissions(pki.join("apiserver.key"), fs::Permissions::from_mode(0o600)).unwrap();
    pki
}

/// Each renewed pair lands in PREFIX.crt/.key (modes kept: 0644, 0600); a
/// key made a symlink later is an error of the mapping (counted as
/// `pair_error`, /readyz 503 naming it) while renewals go on and nothing is
/// written through the link; the link taken away, the pair is repaired.
#[test]
fn a_kubeadm_pair_is_kept_in_step_with_each_renewal_and_never_followed() {
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let prefix = support::certs::ca_files(d.path(), 3600);
    let pki = kubeadm_pki(d.path());
    let (crt, key) = (pki.join("apiserver.crt"), pki.join("apiserver.key"));
    let target = d.path().join("t");
    let port = free_port();
    let spec = format!(
        "ca:{}={},name=apiserver,cn=kube-apiserver,dns=kubernetes,usage=server-auth,lifetime=6s,renew=50%-60%,\
         update-pair={}",
        prefix.display(),
        target.display(),
        pki.join("apiserver").display()
    );
    let mut cmd = Command::new(certsync_bin());
    cmd.args(["run", "--debounce", "100ms", "--csr-renew-floor", "1s"])
        .args(["--resync", "500ms", "--sync", &spec])
        .args(["--admin-addr", &format!("127.0.0.1:{port}")])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    let cs = Certsync::start_with(&mut cmd, d.path());
    let in_step = || {
        let (_, c, k) = read_live(&target)?;
        (fs::read(&crt).ok()? == c && fs::read(&key).ok()? == k).then_some(c)
    };
    let first = wait_for("the pair in step", in_step);
    assert_eq!((mode(&crt), mode(&key)), (0o644, 0o600));
    let second = wait_for("a renewal in step", || in_step().filter(|c| *c != first));
    assert_ne!(first, second);
    let mut names: Vec<_> = fs::read_dir(&pki)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["apiserver.crt", "apiserver.key"],
        "nothing left beside"
    );

    // The key made a link to a file elsewhere: never written through.
    let elsewhere = d.path().join("elsewhere.key");
    fs::write(&elsewhere, b"not certsync's\n").unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o600)).unwrap();
    support::swap_in_symlink(&elsewhere, &key);
    let body = wait_for("not ready", || {
        let (code, body) = http_get(port, "/readyz")?;
        (code == 503).then_some(body)
    });
    assert!(
        body.contains("mapping apiserver") && body.contains("update-pair"),
        "{body}"
    );
    let metrics = parse_metrics(&http_get(port, "/metrics").unwrap().1);
    let errors = metrics
        .get("certsync_syncs_total{mapping=\"apiserver\",result=\"pair_error\"}")
        .copied()
        .unwrap_or_default();
    assert!(errors >= 1.0, "{metrics:?}");
    let (_, before, _) = read_live(&target).unwrap();
    wait_for("a renewal while the pair is broken", || {
        (read_live(&target)?.1 != before).then_some(())
    });
    assert_eq!(
        fs::read(&elsewhere).unwrap(),
        b"not certsync's\n",
        "followed"
    );
    assert!(fs::symlink_metadata(&key).unwrap().file_type().is_symlink());
    let log = cs.log();
    let at_error: Vec<_> = log
        .lines()
        .filter(|l| l.contains(" ERROR ") && l.contains("pair_failed"))
        .collect();
    assert_eq!(at_error.len(), 1, "said once: {log}");
    assert!(at_error[0].contains(&pki.display().to_string()), "{log}");

    // Taken away: repaired at the next resync, ready again.
    fs::remove_file(&key).unwrap();
    wait_for("repaired", in_step);
    wait_for("ready again", || {
        (http_get(port, "/readyz")?.0 == 200).then_some(())
    });
    assert_eq!(mode(&key), 0o600);
    cs.terminate();
}

/// `run(prefix)` exits 64 naming `prefix` and `why`, and `watched` is
/// left as it was.
fn refused_at_start(
    run: &dyn Fn(&Path) -> std::process::Output,
    prefix: &Path,
    why: &str,
    watched: &Path,
) {
    let before = snapshot(watched);
    let out = run(prefix);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{why}: {err}");
    assert!(
        err.contains(&prefix.display().to_string()) && err.contains(why),
        "{why}: {err}"
    );
    assert_eq!(snapshot(watched), before, "{why}: left as it was");
}

/// Refused at start (exit 64, naming the prefix and why), nothing written:
/// a directory group may write, a file of another user, a key that is a
/// symlink, a prefix with an extension, a prefix inside a target.
#[test]
fn a_pair_that_cannot_be_kept_is_refused_at_start_naming_it() {
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let ca = support::certs::ca_files(d.path(), 3600);
    let pki = kubeadm_pki(d.path());
    let target = d.path().join("t");
    let run = |prefix: &Path| {
        let spec = format!(
            "ca:{}={},cn=kube-apiserver,dns=kubernetes,usage=server-auth,update-pair={}",
            ca.display(),
            target.display(),
            prefix.display()
        );
        Command::new(certsync_bin())
            .args(["run", "--once", "--sync", &spec])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let refused = |prefix: &Path, why: &str| {
        refused_at_start(&run, prefix, why, &pki);
        assert!(!target.exists(), "{why}: nothing published");
    };
    let prefix = pki.join("apiserver");
    fs::set_permissions(&pki, fs::Permissions::from_mode(0o775)).unwrap();
    refused(&prefix, "writable");
    fs::set_permissions(&pki, fs::Permissions::from_mode(0o755)).unwrap();
    refused(&pki.join("apiserver.crt"), "without its extension");
    refused(&target.join("apiserver"), "inside the target");
    // A CA no mapping names (a typo such as
    // update-pair=/etc/kubernetes/pki/front-proxy-ca) is never written over.
    let other = d.path().join("other-ca");
    fs::create_dir(&other).unwrap();
    fs::set_permissions(&other, fs::Permissions::from_mode(0o755)).unwrap();
    let other_ca = support::certs::ca_files(&other, 3600);
    let before = fs::read(other_ca.with_extension("key")).unwrap();
    let out = run(&other_ca);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("is a CA certificate"), "{err}");
    assert_eq!(fs::read(other_ca.with_extension("key")).unwrap(), before);
    // A key with no certificate of its own beside it
    // is someone's signing key (kubeadm's sa.key has sa.pub; a CA kept as
    // ca.pem/ca.key): update-pair=/etc/kubernetes/pki/sa replaced sa.key
    // with a leaf's key, exit 0. A .crt certsync cannot read is not judged
    // safe to replace either.
    let sa = pki.join("sa");
    fs::write(sa.with_extension("key"), b"kubeadm's service-account key\n").unwrap();
    fs::set_permissions(sa.with_extension("key"), fs::Permissions::from_mode(0o600)).unwrap();
    refused_at_start(&run, &sa, "no sa.crt beside it", &pki);
    let pem_ca = other.join("pem-ca");
    fs::rename(other_ca.with_extension("crt"), pem_ca.with_extension("pem")).unwrap();
    fs::rename(other_ca.with_extension("key"), pem_ca.with_extension("key")).unwrap();
    refused_at_start(&run, &pem_ca, "no pem-ca.crt beside it", &other);
    fs::write(sa.with_extension("crt"), b"not a certificate\n").unwrap();
    refused_at_start(&run, &sa, "not one certificate certsync can read", &pki);
    // A CA without CA:TRUE (a certificate that may sign certificates) is a CA
    // all the same; and a key that is not its .crt's (sa.key beside an
    // unrelated sa.crt) is another's: refused when the update is judged, the
    // key left.
    let mut signer = rcgen::CertificateParams::new(vec!["signer".into()]).unwrap();
    signer.is_ca = rcgen::IsCa::ExplicitNoCa;
    signer.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let signer_key = rcgen::KeyPair::generate().unwrap();
    let signer_cert = signer.self_signed(&signer_key).unwrap();
    fs::write(sa.with_extension("crt"), signer_cert.pem()).unwrap();
    fs::write(sa.with_extension("key"), signer_key.serialize_pem()).unwrap();
    refused_at_start(&run, &sa, "keyCertSign", &pki);
    let unrelated = support::certs::Pair::new("unrelated");
    fs::write(sa.with_extension("crt"), &unrelated.cert).unwrap();
    fs::write(sa.with_extension("key"), b"kubeadm's service-account key\n").unwrap();
    let out = run(&sa);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("sa.key is not the key of sa.crt"), "{err}");
    assert_eq!(
        fs::read(sa.with_extension("key")).unwrap(),
        b"kubeadm's service-account key\n"
    );
    fs::remove_dir_all(&target).unwrap();
    for f in ["sa.crt", "sa.key"] {
        fs::remove_file(pki.join(f)).unwrap();
    }
    let crt = pki.join("apiserver.crt");
    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(&crt, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        refused(&prefix, "uid 65534");
        nix::unistd::chown(&crt, Some(nix::unistd::geteuid()), None).unwrap();
    }
    let key = pki.join("apiserver.key");
    fs::remove_file(&key).unwrap();
    let elsewhere = d.path().join("elsewhere.key");
    fs::write(&elsewhere, b"someone's key\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
    refused(&prefix, "symlink");
    // A link to the CA's own key is refused as what it is.
    fs::remove_file(&key).unwrap();
    std::os::unix::fs::symlink(ca.with_extension("key"), &key).unwrap();
    refused(&prefix, "is a CA file");
    // Fine once it is a plain file again: published and copied.
    fs::remove_file(&key).unwrap();
    let out = run(&prefix);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, c, k) = read_live(&target).unwrap();
    assert_eq!((fs::read(&crt).unwrap(), fs::read(&key).unwrap()), (c, k));
    assert_eq!((mode(&crt), mode(&key)), (0o644, 0o600));
}

/// A bind mount, taken away when dropped.
struct Bound(std::path::PathBuf);

impl Bound {
    fn new(from: &Path, at: &Path) -> Self {
        let ok = Command::new("mount")
            .arg("--bind")
            .args([from, at])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount --bind {} {}", from.display(), at.display());
        Self(at.to_owned())
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The copies' guard compared paths, so a bind mount (no symlink to see) of
/// another mapping's target, of the CA's directory, or of the CA's key file
/// alone (no `.crt` beside it to read CA:TRUE from) let update-pair write
/// there. Compared by device and inode now: each refused at start (64),
/// naming the option and what it would have written into, and nothing there
/// changed.
#[test]
fn a_pair_reached_through_a_bind_mount_is_refused_at_start() {
    if !nix::unistd::geteuid().is_root() {
        support::tools::skip("needs root (bind mounts)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let b = d.path();
    fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    let ca_dir = b.join("ca");
    fs::create_dir(&ca_dir).unwrap();
    let ca = support::certs::ca_files(&ca_dir, 3600);
    let other = b.join("other");
    fs::create_dir(&other).unwrap();
    let other_spec = format!(
        "ca:{}={},cn=o,usage=server-auth",
        ca.display(),
        other.display()
    );
    // `run --once` with a mapping into `t` carrying `copy`, beside the
    // other mapping.
    let run_with = |copy: String| {
        let spec = format!("ca:{}={},{copy}", ca.display(), b.join("t").display());
        Command::new(certsync_bin())
            .args(["run", "--once", "--sync", &spec, "--sync", &other_spec])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let run = |prefix: &Path| {
        run_with(format!(
            "cn=kube-apiserver,usage=server-auth,update-pair={}",
            prefix.display()
        ))
    };
    let refused = |prefix: &Path, why: &str, watched: &Path| {
        refused_at_start(&run, prefix, why, watched);
    };
    // Another mapping's target, by a directory bound elsewhere.
    let bt = b.join("bt");
    fs::create_dir(&bt).unwrap();
    {
        let _m = Bound::new(&other, &bt);
        refused(&bt.join("x"), "is inside the target", &other);
        // update-kubeconfig has the same guard: a kubeconfig in the other
        // target, named through the bind mount.
        let p = support::certs::Pair::new("admin");
        let b64 = |v: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v);
        let conf = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  \
             cluster:\n    server: https://127.0.0.1:6443\ncontexts:\n- name: c\n  context:\n    \
             cluster: k\n    user: u\nusers:\n- name: u\n  user:\n    \
             client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&p.cert),
            b64(&p.key)
        );
        fs::write(other.join("admin.conf"), conf).unwrap();
        fs::set_permissions(other.join("admin.conf"), fs::Permissions::from_mode(0o600)).unwrap();
        let run_kubeconfig = |conf: &Path| {
            run_with(format!(
                "cn=kubernetes-admin,usage=client-auth,update-kubeconfig={}",
                conf.display()
            ))
        };
        refused_at_start(
            &run_kubeconfig,
            &bt.join("admin.conf"),
            "is inside the target",
            &other,
        );
        fs::remove_file(other.join("admin.conf")).unwrap();
    }
    // The CA's directory bound elsewhere.
    let bind = b.join("bind");
    fs::create_dir(&bind).unwrap();
    {
        let _m = Bound::new(&ca_dir, &bind);
        refused(&bind.join("ca"), "is a CA file of mapping", &ca_dir);
    }
    // The CA's key file alone bound over a key of a pair whose .crt is
    // not there: nothing says CA:TRUE.
    let pki = b.join("pki");
    fs::create_dir(&pki).unwrap();
    fs::write(pki.join("x.key"), b"a key\n").unwrap();
    fs::set_permissions(pki.join("x.key"), fs::Permissions::from_mode(0o600)).unwrap();
    {
        let _m = Bound::new(&ca.with_extension("key"), &pki.join("x.key"));
        refused(&pki.join("x"), "is a CA file of mapping", &ca_dir);
    }
}
