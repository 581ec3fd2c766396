//! Helpers shared by the end-to-end tests: test certificates, running the
//! real `certsync` binary with its log captured, waiting for outcomes, and
//! reading a target the way a consumer would.
#![allow(dead_code)]

pub mod apiserver;
pub mod ca_end;
pub mod certs;
pub mod control_plane;
pub mod forge;
pub mod kubeadm_node;
pub mod local_user;
pub mod signer;
pub mod tools;
pub mod validation;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long an end-to-end outcome may take before a test gives up. Generous:
/// this bounds a hang, it measures nothing.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Polls `check` until it returns `Some`, or panics with `what` after
/// [`PATIENCE`].
pub fn wait_for<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_for_within(what, PATIENCE, check)
}

/// [`wait_for`] with a patience of its own, for work that is slow in a
/// debug build on a loaded machine (megabytes of PEM), still only a bound
/// on a hang.
pub fn wait_for_within<T>(
    what: &str,
    patience: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < patience, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs certsync to completion in `cwd`, failing the test (not hanging it)
/// if it does not exit within [`PATIENCE`]. Returns (exit code, stdout,
/// stderr). Output goes to files, so a chatty child never blocks on a full
/// pipe while the test waits for it.
pub fn run_bounded(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(certsync_bin())
        .args(args)
        .current_dir(cwd)
        .env("CERTSYNC_ADMIN_ADDR", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(err.reopen().unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "certsync {args:?} hung; stderr:\n{}",
                fs::read_to_string(err.path()).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.code().unwrap_or(-1),
        fs::read_to_string(out.path()).unwrap(),
        fs::read_to_string(err.path()).unwrap(),
    )
}

/// A running `certsync` whose stderr goes to a file; killed on drop.
pub struct Certsync {
    pub child: Child,
    log: PathBuf,
}

/// The binary under test: this build's, or `CERTSYNC_BIN` (e.g. the static
/// musl build the image ships, for benchmarks).
pub fn certsync_bin() -> String {
    std::env::var("CERTSYNC_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_certsync").to_owned())
}

impl Certsync {
    pub fn start(args: &[&str], log_dir: &Path) -> Self {
        Self::start_with(Command::new(certsync_bin()).args(args), log_dir)
    }

    pub fn start_with(cmd: &mut Command, log_dir: &Path) -> Self {
        let log = log_dir.join(format!("certsync-{}.log", rand_suffix()));
        let child = cmd
            .env("RUST_LOG", "certsync=debug")
            // Tests run in parallel: each gets a free admin port unless it
            // asks for one with --admin-addr.
            .env("CERTSYNC_ADMIN_ADDR", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn certsync");
        Self { child, log }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn wait_log(&self, needle: &str) {
        wait_for(&format!("log line containing {needle:?}"), || {
            self.log().contains(needle).then_some(())
        });
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Runs `f` while certsync is stopped (SIGSTOP, every thread seen
    /// stopped, then SIGCONT): a change made in several steps, such as
    /// `rm -r` of a target, reaches certsync as one, never half done under
    /// a repair it set off itself. The kernel keeps the inotify events.
    pub fn while_stopped<T>(&self, f: impl FnOnce() -> T) -> T {
        use nix::sys::signal::{Signal, kill};
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
        let tasks = format!("/proc/{pid}/task");
        wait_for("every certsync thread to stop", || {
            fs::read_dir(&tasks)
                .expect("certsync's threads")
                .flatten()
                .all(|t| {
                    // The state follows the ")" that ends the command name;
                    // a thread already exiting will not run again either.
                    fs::read_to_string(t.path().join("stat")).is_ok_and(|s| {
                        s.rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with(['T', 't', 'Z', 'X']))
                    })
                })
                .then_some(())
        });
        let out = f();
        kill(pid, Signal::SIGCONT).expect("SIGCONT");
        out
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let status = wait_for("certsync to exit", || {
            self.child.try_wait().expect("try_wait")
        });
        std::mem::forget(self); // already exited
        status
    }
}

impl Drop for Certsync {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failing test shows what certsync said (the last 100 lines).
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(100)..].join("\n");
            eprintln!("--- certsync log ({}) ---\n{tail}", self.log.display());
        }
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// What a consumer sees: `..data` resolved once, both files read through it.
pub fn read_live(target: &Path) -> Option<(String, Vec<u8>, Vec<u8>)> {
    let rev = fs::read_link(target.join("..data")).ok()?;
    let dir = target.join(&rev);
    let cert = fs::read(dir.join("tls.crt")).ok()?;
    let key = fs::read(dir.join("tls.key")).ok()?;
    Some((rev.to_string_lossy().into_owned(), cert, key))
}

/// Revision directories on disk: live ones and history entries.
pub fn revision_names(target: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(target)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.retain(|n| n.starts_with("..rev-"));
    if let Ok(h) = fs::read_dir(target.join("..history")) {
        names.extend(h.filter_map(|e| e.ok()?.file_name().into_string().ok()));
    }
    names.sort();
    names
}

/// Writes `cert` and `key` as `tls.crt` and `tls.key` in `dir` (created if
/// missing), each replaced atomically.
pub fn write_pair_files(dir: &Path, cert: &[u8], key: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    write_atomic(&dir.join("tls.crt"), cert);
    write_atomic(&dir.join("tls.key"), key);
}

/// [`write_pair_files`] with `p`'s certificate and key.
pub fn write_pair(dir: &Path, p: &certs::Pair) {
    write_pair_files(dir, &p.cert, &p.key);
}

/// Waits until `target` serves `p`; returns the live revision's name.
pub fn wait_pair(target: &Path, p: &certs::Pair) -> String {
    wait_for("the target to hold the expected pair", || {
        let (rev, cert, key) = read_live(target)?;
        // The visible links too: they are made just after `..data` flips,
        // and a test that damages one next must not race the publish.
        let linked = fs::read(target.join("tls.crt")).ok()? == p.cert
            && fs::read(target.join("tls.key")).ok()? == p.key;
        (cert == p.cert && key == p.key && linked).then_some(rev)
    })
}

/// Writes `bytes` to `path` atomically (temp file + rename), as a careful
/// rotating tool would.
pub fn write_atomic(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp-write");
    fs::write(&tmp, bytes).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// A TLS acceptor serving `cert` (PEM chain) with `key`, on ring.
/// Makes `at` a symlink to `to` in one step (a link made beside it, then
/// renamed over it), as an attacker would: removing `at` first leaves a
/// moment with no file, in which a running certsync rightly writes a new
/// one, and the test would then plant its link over certsync's write.
pub fn swap_in_symlink(to: &Path, at: &Path) {
    let beside = at.with_file_name(format!(
        ".{}.link",
        at.file_name().unwrap().to_string_lossy()
    ));
    std::os::unix::fs::symlink(to, &beside).unwrap();
    fs::rename(&beside, at).unwrap();
}

pub fn tls_acceptor(cert: &[u8], key: &[u8]) -> tokio_rustls::TlsAcceptor {
    tls_acceptor_alpn(cert, key, &[b"h2", b"http/1.1"])
}

/// A TLS acceptor offering exactly `alpn` (kube-apiserver offers `h2` and
/// `http/1.1`; an HTTP/1.1-only server offers only the latter).
pub fn tls_acceptor_alpn(cert: &[u8], key: &[u8], alpn: &[&[u8]]) -> tokio_rustls::TlsAcceptor {
    tls_acceptor_with(cert, key, alpn, None)
}

/// [`tls_acceptor_alpn`] that also accepts (without requiring) client
/// certificates issued by `client_ca` (PEM), as kube-apiserver's
/// `--client-ca-file` does.
pub fn tls_acceptor_with(
    cert: &[u8],
    key: &[u8],
    alpn: &[&[u8]],
    client_ca: Option<&[u8]>,
) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::sync::Arc;
    let certs = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca) {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .allow_unauthenticated()
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}

/// Serves one accepted connection with `app`, over TLS when `tls` is
/// given, HTTP/1.1 or HTTP/2 (by the client's preface) with at most
/// `max_streams` concurrent HTTP/2 streams. `negotiated` is told the
/// protocol: `h2` when ALPN chose it, else `http/1.1`.
pub async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    max_streams: u32,
    negotiated: impl FnOnce(&'static str),
) {
    match tls {
        Some(tls) => {
            let Ok(s) = tls.accept(stream).await else {
                return;
            };
            let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
            negotiated(if h2 { "h2" } else { "http/1.1" });
            let peer = Peer::of(s.get_ref().1.peer_certificates());
            serve_io(s, app.layer(axum::Extension(peer)), max_streams).await
        }
        None => {
            negotiated("http/1.1");
            serve_io(stream, app.layer(axum::Extension(Peer(None))), max_streams).await
        }
    }
}

/// Who a connection's verified client certificate says it is, as
/// kube-apiserver's x509 authenticator reads it: the user is the subject's
/// CN, the groups its organizations. Set from the TLS session only.
#[derive(Clone, Debug, Default)]
pub struct Peer(pub Option<(String, Vec<String>)>);

impl Peer {
    fn of(certs: Option<&[rustls::pki_types::CertificateDer<'_>]>) -> Self {
        let Some(leaf) = certs.and_then(|c| c.first()) else {
            return Self(None);
        };
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf) else {
            return Self(None);
        };
        let subject = cert.subject();
        let cn = subject
            .iter_common_name()
            .find_map(|a| a.as_str().ok())
            .unwrap_or_default()
            .to_owned();
        let groups = subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_owned))
            .collect();
        Self(Some((cn, groups)))
    }
}

async fn serve_io<I>(io: I, app: axum::Router, max_streams: u32)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use hyper_util::rt::TokioIo;
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let mut http =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    http.http2().max_concurrent_streams(max_streams);
    let _ = http.serve_connection(TokioIo::new(io), svc).await;
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:`port`: (status, body), or `None` if nothing
/// answers yet.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// The first Event in `api`'s namespace about the object named `name`
/// with reason `reason`, waited for up to [`PATIENCE`]; `None` if none came.
pub async fn event_about(
    api: &kube::Api<k8s_openapi::api::events::v1::Event>,
    name: &str,
    reason: &str,
) -> Option<k8s_openapi::api::events::v1::Event> {
    let start = Instant::now();
    while start.elapsed() < PATIENCE {
        let found = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.reason.as_deref() == Some(reason)
            });
        if found.is_some() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Parses OpenMetrics text into `name{labels}` → value.
pub fn parse_metrics(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            let v = match v {
                "+Inf" => f64::INFINITY,
                v => v.parse().ok()?,
            };
            Some((k.to_owned(), v))
        })
        .collect()
}

/// Where an end-to-end test runs: the real cluster of
/// `CERTSYNC_E2E_KUBECONFIG`, or a test API server started now, whose
/// kubeconfig is written into `dir`. The server (if any) must outlive the
/// test.
pub async fn cluster(dir: &Path) -> (PathBuf, Option<apiserver::ApiServer>) {
    match std::env::var_os("CERTSYNC_E2E_KUBECONFIG") {
        Some(kc) => (PathBuf::from(kc), None),
        None => test_server(dir).await,
    }
}

/// The test API server, started now whatever `CERTSYNC_E2E_KUBECONFIG`
/// says, its kubeconfig written into `dir`: for a test of what only it can
/// do (inject a fault, switch an API off), which a run against a real
/// cluster then runs too rather than skipping it.
pub async fn test_server(dir: &Path) -> (PathBuf, Option<apiserver::ApiServer>) {
    let fake = apiserver::ApiServer::start().await;
    (fake.kubeconfig(dir), Some(fake))
}

/// The namespace end-to-end tests put their objects in on a real cluster:
/// `CERTSYNC_E2E_NAMESPACE`, else `default`, which every cluster has.
pub fn e2e_namespace() -> String {
    std::env::var("CERTSYNC_E2E_NAMESPACE").unwrap_or_else(|_| "default".into())
}

/// A Kubernetes client from a kubeconfig file (the test server's or a real
/// cluster's).
pub async fn kube_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A process named `name` (a copy of bash, so `comm` is unique) that appends
/// each SIGHUP it receives to `<dir>/<name>.hup`. With `child`, it starts a
/// second process of the same name below itself (like nginx workers), which
/// records to `<dir>/<name>.child.hup`.
pub struct Recorder {
    pub child: Child,
    pub file: PathBuf,
    pub child_file: PathBuf,
}

pub fn recorder(dir: &Path, name: &str, with_child: bool) -> Recorder {
    recorder_as(dir, name, with_child, None)
}

/// [`recorder`] running as `uid` (and the same gid) when given, through
/// `setpriv`: the test must be root, and `dir` writable by that user.
pub fn recorder_as(dir: &Path, name: &str, with_child: bool, uid: Option<u32>) -> Recorder {
    let exe = dir.join(name);
    if !exe.exists() {
        fs::copy("/bin/bash", &exe).unwrap();
    }
    let file = dir.join(format!("{name}.hup"));
    let child_file = dir.join(format!("{name}.child.hup"));
    // Each process marks itself ready once its trap is installed: a SIGHUP
    // before that would kill it (bash's default), and on a loaded machine
    // bash can take well over any fixed sleep to get there.
    let ready = dir.join(format!("{name}.ready"));
    let child_ready = dir.join(format!("{name}.child.ready"));
    for f in [&ready, &child_ready] {
        let _ = fs::remove_file(f);
    }
    let loop_ = "while :; do sleep 0.05; done";
    let child = if with_child {
        format!(
            "{} -c 'trap \"echo HUP >> {}\" HUP; : > {}; {loop_}' &",
            exe.display(),
            child_file.display(),
            child_ready.display()
        )
    } else {
        String::new()
    };
    let script = format!(
        "trap 'echo HUP >> {}' HUP; : > {}; {child} {loop_}",
        file.display(),
        ready.display()
    );
    // `env --default-signal=HUP` first: a non-interactive bash cannot trap
    // a signal that was ignored when it started, and SIGHUP is ignored in
    // anything run under nohup (a CI runner, a detached shell).
    // A test thread that forks while `fs::copy` still holds the copy open
    // for writing leaves that fd open in its child until the child execs,
    // and env's exec of the copy then fails with ETXTBSY: start again.
    let mut tries = 0;
    let child = loop {
        let mut cmd = match uid {
            Some(uid) => {
                let mut c = Command::new("setpriv");
                c.args([
                    format!("--reuid={uid}"),
                    format!("--regid={uid}"),
                    "--clear-groups".into(),
                    "env".into(),
                ]);
                c
            }
            None => Command::new("env"),
        };
        let mut child = cmd
            .arg("--default-signal=HUP")
            .arg(&exe)
            .args(["-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let started = wait_for("the recorder's trap", || {
            if ready.exists() && (!with_child || child_ready.exists()) {
                return Some(true);
            }
            matches!(child.try_wait(), Ok(Some(_))).then_some(false)
        });
        if started {
            break child;
        }
        tries += 1;
        assert!(tries < 50, "the recorder {} would not start", exe.display());
        std::thread::sleep(Duration::from_millis(20));
    };
    Recorder {
        child,
        file,
        child_file,
    }
}

impl Recorder {
    pub fn hups(&self) -> usize {
        fs::read_to_string(&self.file)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Kill the whole group of this recorder (it and its child).
        let _ = Command::new("pkill")
            .arg("-P")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A unique process name of at most 15 bytes.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}{}",
        std::process::id() % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The bytes, modes and link targets of everything under `dir`.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let content = if m.file_type().is_symlink() {
                fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_dir() {
                stack.push(p.clone());
                Vec::new()
            } else if m.is_file() {
                fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            out.push((
                p,
                std::os::unix::fs::PermissionsExt::mode(&m.permissions()),
                content,
            ));
        }
    }
    out.sort();
    out
}

/// Established TCP connections of process `pid` to any of `remotes`, read
/// from /proc (the process's socket inodes joined with the namespace's
/// TCP tables), so it works against a real cluster too.
pub fn tcp_connections(pid: u32, remotes: &[std::net::SocketAddr]) -> usize {
    let inodes: std::collections::HashSet<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut n = 0;
    for table in ["tcp", "tcp6"] {
        let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // f[2] = remote "HEXIP:HEXPORT", f[3] = state (01 established), f[9] = inode.
            if f.len() < 10 || f[3] != "01" || !inodes.contains(f[9]) {
                continue;
            }
            if remotes.iter().any(|r| proc_addr(f[2]) == Some(*r)) {
                n += 1;
            }
        }
    }
    n
}

/// `/proc/net/tcp{,6}` address notation: the address as host-order 32-bit
/// words in hex, then the port.
fn proc_addr(s: &str) -> Option<std::net::SocketAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..ip.len() / 8)
        .map(|i| u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).map(u32::from_be))
        .collect::<Result<_, _>>()
        .ok()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => {
            let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(bytes.as_slice()).ok()?);
            // An IPv4 peer on a dual-stack socket.
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
}

/// A TCP proxy to `upstream` that can freeze: every connection open at the
/// time stops forwarding in both directions but stays open (a peer gone
/// without a FIN or RST, as after a network partition or a dead node);
/// connections made afterwards work.
pub struct FreezeProxy {
    pub addr: std::net::SocketAddr,
    epoch: tokio::sync::watch::Sender<u64>,
    /// While set, new connections are accepted and then held silent too (a
    /// server that accepts but never answers the TLS handshake).
    hold_new: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// While set, new connections are closed at once (a server that is
    /// not there).
    refuse_new: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl FreezeProxy {
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let epoch = tokio::sync::watch::channel(0u64).0;
        let frozen = epoch.clone();
        let hold_new: std::sync::Arc<std::sync::atomic::AtomicBool> = Default::default();
        let hold = std::sync::Arc::clone(&hold_new);
        let refuse_new: std::sync::Arc<std::sync::atomic::AtomicBool> = Default::default();
        let refuse = std::sync::Arc::clone(&refuse_new);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if refuse.load(std::sync::atomic::Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                if hold.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::spawn(async move {
                        let _client = client;
                        std::future::pending::<()>().await;
                    });
                    continue;
                }
                let mut rx = frozen.subscribe();
                let born = *rx.borrow();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let copy = async {
                        tokio::select! {
                            _ = tokio::io::copy(&mut cr, &mut sw) => {}
                            _ = tokio::io::copy(&mut sr, &mut cw) => {}
                        }
                    };
                    tokio::select! {
                        () = copy => {}
                        () = async { let _ = rx.wait_for(|e| *e > born).await; } => {
                            // Hold both sockets open, silent, until the test ends.
                            std::future::pending::<()>().await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            epoch,
            hold_new,
            refuse_new,
            accept,
        }
    }

    /// Closes every new connection at once while `on`.
    pub fn refuse_new(&self, on: bool) {
        self.refuse_new
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Freezes every connection open now.
    pub fn freeze(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Holds every new connection silent while `on`.
    pub fn hold_new(&self, on: bool) {
        self.hold_new.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for FreezeProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The addresses the kubeconfig's server URL resolves to.
pub fn server_addrs(kubeconfig: &Path) -> Vec<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let url: http::Uri = kc.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .unwrap()
        .parse()
        .unwrap();
    let port = url.port_u16().unwrap_or(443);
    (url.host().unwrap().trim_matches(['[', ']']), port)
        .to_socket_addrs()
        .unwrap()
        .collect()
}

/// The cluster's ClusterTrustBundle API, or `None` (the test skipped, as
/// [`tools::skip`] says: a failure under CI) when the cluster does not serve
/// certificates.k8s.io/v1beta1.
pub async fn trust_bundles_api(
    client: kube::Client,
    test: &str,
) -> Option<kube::Api<k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle>> {
    let api = kube::Api::all(client);
    if let Err(kube::Error::Api(e)) = api.list(&Default::default()).await
        && e.code == 404
    {
        tools::skip(&format!(
            "{test}: the cluster does not serve ClusterTrustBundles (certificates.k8s.io/v1beta1)"
        ));
        return None;
    }
    Some(api)
}

/// A ClusterTrustBundle object as a client sends it.
pub fn trust_bundle(
    name: &str,
    signer: &str,
    pem: &str,
    labels: &[(&str, &str)],
) -> k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).into()))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"signerName": signer, "trustBundle": pem},
    }))
    .unwrap()
}

/// `unit` repeated to `size` bytes, after `head`: a hostile input of a
/// given size (`tests/linear.rs`, `benches/linear.rs`).
pub fn fill(head: &[u8], unit: &[u8], size: usize) -> Vec<u8> {
    let mut v = head.to_vec();
    while v.len() + unit.len() <= size {
        v.extend_from_slice(unit);
    }
    v
}
