//! A real TLS server reloads the pair certsync publishes, and verification
//! tells a server that reloaded from one that did not.
//!
//! nginx comes from Debian (`.ci/run` installs it); the served certificate
//! is read with `openssl s_client`, independently of certsync's own check.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use support::certs::Pair;
use support::*;

/// SHA-256 fingerprint of the leaf served at 127.0.0.1:`port`, as openssl
/// prints it (`AB:CD:...`), or `None` if nothing answers.
fn served_fingerprint(port: u16) -> Option<String> {
    let mut s_client = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let pem = s_client.stdout.take()?;
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256"])
        .stdin(pem)
        .output()
        .ok()?;
    let _ = s_client.wait();
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().split_once('=')?.1.to_owned())
}

fn fingerprint_of(cert_pem: &[u8], dir: &Path) -> String {
    let f = dir.join("fp.pem");
    fs::write(&f, cert_pem).unwrap();
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&f)
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .split_once('=')
        .unwrap()
        .1
        .to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process, killed when dropped.
struct Killed(Child);

/// certsync syncing `sync` and signalling the process whose command line
/// matches `pattern`, with short windows, plus `extra` flags.
fn start_signalling(sync: &str, pattern: &str, extra: &[&str], dir: &Path) -> Certsync {
    let mut args = vec![
        "run",
        "--debounce",
        "100ms",
        "--reload-quiet",
        "100ms",
        "--sync",
        sync,
    ];
    args.extend(["--reload-cmdline", pattern]);
    args.extend(extra);
    Certsync::start(&args, dir)
}

/// Starts `cmd` with no stdin and its output discarded.
fn spawn_quiet(cmd: &mut Command) -> Killed {
    Killed(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Without a tool a test skips, naming what to install; under CI it fails.
#[test]
fn a_missing_tool_skips_with_what_to_install_and_fails_under_ci() {
    let absent = "certsync-test-no-such-tool";
    let d = tempfile::tempdir().unwrap();
    let (bin, other) = (d.path().join("bin"), d.path().join("other"));
    fs::create_dir(&bin).unwrap();
    fs::create_dir(&other).unwrap();
    fs::write(bin.join("tool"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(
        bin.join("tool"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    fs::write(other.join("plain"), "not executable").unwrap();
    let path = std::env::join_paths([&other, &bin]).unwrap();
    assert_eq!(
        tools::missing_in(&["tool", "plain", absent], &path),
        ["plain", absent]
    );
    let mut said = Vec::new();
    assert!(tools::have_all(&[], true, &mut said));
    assert!(!tools::have_all(&[absent], false, &mut said), "skips");
    assert_eq!(
        String::from_utf8(said).unwrap(),
        format!("skipped: needs {absent} (apt-get install {absent}; .ci/run installs them)\n")
    );
    assert_eq!(
        tools::message(&["nginx", "openssl"]),
        "needs nginx and openssl (apt-get install nginx openssl; .ci/run installs them)"
    );
    let failed = std::panic::catch_unwind(|| tools::have_all(&[absent], true, &mut Vec::new()))
        .expect_err("a missing tool fails when tools are required");
    let text = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        text.contains(&format!("needs {absent} (apt-get install {absent}"))
            && text.contains("CI=true"),
        "{text}"
    );
}

/// nginx (master and `workers`) under `dir/nginx`, serving each target's
/// pair on its port: the process, and its prefix (in its title).
fn nginx(dir: &Path, servers: &[(u16, &Path)], workers: u32) -> (Killed, std::path::PathBuf) {
    let prefix = dir.join("nginx");
    fs::create_dir(&prefix).unwrap();
    let servers: String = servers
        .iter()
        .map(|(port, t)| {
            format!(
                "server {{ listen 127.0.0.1:{port} ssl;\n\
                 ssl_certificate {t}/tls.crt; ssl_certificate_key {t}/tls.key;\n\
                 location / {{ return 200 \"ok\\n\"; }} }}\n",
                t = t.display()
            )
        })
        .collect();
    let conf = prefix.join("nginx.conf");
    fs::write(
        &conf,
        format!(
            "daemon off; master_process on; worker_processes {workers};\n\
             pid {p}/nginx.pid; error_log {p}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; client_body_temp_path {p}/body; proxy_temp_path {p}/proxy;\n\
               fastcgi_temp_path {p}/fcgi; uwsgi_temp_path {p}/uwsgi; scgi_temp_path {p}/scgi;\n\
               {servers} }}\n",
            p = prefix.display(),
        ),
    )
    .unwrap();
    let process = spawn_quiet(
        Command::new("nginx")
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .args(["-e", "stderr"]),
    );
    (process, prefix)
}

/// `certsync run --once --sync SYNC`, which must succeed.
fn run_once(sync: &str) {
    let once = Command::new(certsync_bin())
        .args(["run", "--once", "--sync", sync])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&once.stderr);
    assert!(once.status.success(), "{err}");
}

#[test]
fn nginx_reloads_on_sighup_and_verification_sees_the_new_certificate() {
    if !tools::have(&["nginx", "openssl"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (src, target) = (d.path().join("src"), d.path().join("target"));
    fs::create_dir(&src).unwrap();
    let first = Pair::new("first.example");
    write_pair(&src, &first);
    let sync = format!("dir:{}={}", src.display(), target.display());

    // Init-container step: the target exists before nginx starts.
    run_once(&sync);

    let port = free_port();
    let (_nginx, prefix) = nginx(d.path(), &[(port, &target)], 2);
    let first_fp = fingerprint_of(&first.cert, d.path());
    wait_for("nginx to serve the first certificate", || {
        (served_fingerprint(port)? == first_fp).then_some(())
    });

    // nginx rewrites its title to "nginx: master process nginx -p <prefix> ...":
    // this pattern picks this test's master and none of its workers.
    let master = format!("master process.*{}", prefix.display());
    let sync_verify = format!("{sync},verify=127.0.0.1:{port}");
    let cs = start_signalling(&sync_verify, &master, &[], d.path());
    cs.wait_log("found current revision on disk");

    let second = Pair::new("second.example");
    write_pair(&src, &second);
    let second_fp = fingerprint_of(&second.cert, d.path());
    wait_for("nginx to serve the rotated certificate", || {
        (served_fingerprint(port)? == second_fp).then_some(())
    });
    cs.wait_log("verified the new certificate is served");
    let log = cs.log();
    let reloaded = log.lines().find(|l| l.contains("reloaded")).unwrap();
    assert!(reloaded.contains("sent SIGHUP to pid"), "{reloaded}");
}

#[test]
fn verification_catches_a_server_that_ignores_the_signal() {
    if !tools::have(&["openssl"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (src, target) = (d.path().join("src"), d.path().join("target"));
    fs::create_dir(&src).unwrap();
    let old = Pair::new("old.example");
    write_pair(&src, &old);
    // The server loads a private copy of the old pair and ignores SIGHUP.
    let frozen = d.path().join("frozen");
    fs::create_dir(&frozen).unwrap();
    write_pair(&frozen, &old);
    let port = free_port();
    let script = format!(
        "trap '' HUP; exec openssl s_server -quiet -accept 127.0.0.1:{port} -cert {f}/tls.crt -key {f}/tls.key -www",
        f = frozen.display()
    );
    let _server = spawn_quiet(Command::new("bash").args(["-c", &script]));
    let old_fp = fingerprint_of(&old.cert, d.path());
    wait_for("s_server to answer", || {
        (served_fingerprint(port)? == old_fp).then_some(())
    });

    let sync = format!(
        "dir:{}={},verify=127.0.0.1:{port}",
        src.display(),
        target.display()
    );
    let pattern = format!("s_server.*-accept 127.0.0.1:{port}");
    let cs = start_signalling(
        &sync,
        &pattern,
        &["--verify-timeout", "1s", "--verify-retries", "2"],
        d.path(),
    );
    // The first sync publishes what the server already serves: verified.
    cs.wait_log("verified the new certificate is served");

    write_pair(&src, &Pair::new("new.example"));
    cs.wait_log("the main container still serves the old certificate");
    let log = cs.log();
    let failed = log
        .lines()
        .find(|l| l.contains("still serves the old certificate"))
        .unwrap();
    assert!(
        failed.contains("reloads=3"),
        "1 reload + 2 retries: {failed}"
    );
    let signals = log
        .lines()
        .filter(|l| l.contains("reloaded") && l.contains("sent SIGHUP"))
        .count();
    assert_eq!(signals, 4, "initial reload + 3 for the rotation:\n{log}");
}

/// nginx serving two `ca:` targets, one renewed with a new key each time
/// and one with `keep-key`, reloaded by signal on every flip: each renewal
/// is what it serves next, as openssl reads it.
#[test]
fn nginx_serves_every_ca_renewal_with_new_and_kept_keys() {
    if !tools::have(&["nginx", "openssl"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let prefix = support::certs::ca_files(d.path(), 3600);
    let (new_key, kept) = (d.path().join("new-key"), d.path().join("kept"));
    let sync = |target: &Path, extra: &str| {
        format!(
            "ca:{}={},cn=web,dns=localhost,ip=127.0.0.1,usage=digital-signature,\
             usage=server-auth,lifetime=4s{extra}",
            prefix.display(),
            target.display()
        )
    };
    let specs = [sync(&new_key, ""), sync(&kept, ",keep-key")];
    for s in &specs {
        run_once(s);
    }
    let ports = [free_port(), free_port()];
    let (_nginx, nginx_dir) = nginx(d.path(), &[(ports[0], &new_key), (ports[1], &kept)], 1);
    let master = format!("master process.*{}", nginx_dir.display());
    let extra = ["--csr-renew-floor", "1s", "--sync", &specs[1]];
    let _cs = start_signalling(&specs[0], &master, &extra, d.path());
    for (port, target) in ports.iter().zip([&new_key, &kept]) {
        let mut served = Vec::new();
        let mut keys = Vec::new();
        while served.len() < 3 {
            // nginx serving the live certificate, a new one: read both
            // each time (a renewal waited for alone can be replaced by the
            // next before nginx reloads on it, on a loaded machine).
            let (fp, key) = wait_for("nginx to serve a renewal", || {
                let (_, cert, key) = read_live(target)?;
                let fp = fingerprint_of(&cert, d.path());
                (!served.contains(&fp) && served_fingerprint(*port)? == fp).then_some((fp, key))
            });
            served.push(fp);
            keys.push(key);
        }
        keys.dedup();
        let want = if target == &kept { 1 } else { 3 };
        assert_eq!(keys.len(), want, "{}: distinct keys", target.display());
    }
}
