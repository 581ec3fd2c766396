//! A real Kubernetes v1.36 control plane of a test's own (etcd,
//! kube-apiserver, kube-controller-manager), made by the environment's
//! realkube tools (`CERTSYNC_REALKUBE`, else `../shared/realkube` beside the
//! checkout: see docs/development.md). For tests that stop and start the
//! API server, which they must not do to a cluster other tests share.
//! The tools are called, never copied.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where the realkube tools are looked for: `CERTSYNC_REALKUBE`, else
/// `shared/realkube` beside the checkout (`/work/shared/realkube` for a
/// checkout in `/work/NAME`).
pub fn tools_dir() -> PathBuf {
    std::env::var_os("CERTSYNC_REALKUBE").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap_or(Path::new("/"))
                .join("shared/realkube")
        },
        PathBuf::from,
    )
}

/// The realkube tools' directory, when there is one.
pub fn tools() -> Option<PathBuf> {
    let dir = tools_dir();
    dir.join("up").is_file().then_some(dir)
}

/// Whether this machine has the real Kubernetes binaries the realkube
/// tools run: `Some` when their `bin` finds every one (in `REALKUBE_BIN`,
/// default `/opt/realkube-bin`), else `None` after `test` said
/// `skipped: ...` naming `REALKUBE_BIN` ([`skip_without_binaries`]).
/// `bin` failing any other way (it is there and broken) fails the test.
pub fn binaries(tools: &Path, test: &str) -> Option<PathBuf> {
    let out = Command::new(tools.join("bin"))
        .output()
        .unwrap_or_else(|e| panic!("run {}/bin: {e}", tools.display()));
    match out.status.code() {
        Some(0) => Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())),
        Some(3) => {
            skip_without_binaries(test, String::from_utf8_lossy(&out.stderr).trim());
            None
        }
        _ => panic!(
            "{}/bin: {}: {}",
            tools.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A test that needs real Kubernetes binaries on a machine without them
/// (`why` is realkube's `bin` reason, which names `REALKUBE_BIN`): a skip
/// everywhere, CI included, since no machine is promised them. Said on
/// stderr (nextest shows these tests' output: .config/nextest.toml) and,
/// when `CERTSYNC_SKIP_LOG` names a file, appended to it as one line
/// `BINARY<TAB>TEST<TAB>WHY`, from which `.ci/run` prints how many tests
/// the run did not run. Any other missing tool stays [`super::tools::skip`].
pub fn skip_without_binaries(test: &str, why: &str) {
    use std::io::Write;
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            // Cargo names a test binary `NAME-HASH`.
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => s,
        })
        .unwrap_or_default();
    let why = why.replace(['\t', '\n'], " ");
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test}: needs real Kubernetes v1.36 binaries: {why} \
         (docs/development.md says how to provide them)"
    );
    if let Some(log) = std::env::var_os("CERTSYNC_SKIP_LOG") {
        // One write of a short line to an O_APPEND file: tests running at
        // once never interleave their lines.
        let line = format!("{binary}\t{test}\t{why}\n");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("open CERTSYNC_SKIP_LOG {}: {e}", log.display()));
        f.write_all(line.as_bytes()).unwrap();
    }
}

/// The running test's name, as the harness names its thread.
pub fn current_test() -> String {
    let t = std::thread::current();
    t.name().unwrap_or("a test").to_owned()
}

/// A running control plane in a directory of its own; stopped and removed
/// on drop.
pub struct ControlPlane {
    tools: PathBuf,
    pub dir: PathBuf,
    /// system:masters
    pub admin: PathBuf,
    pub api: SocketAddr,
    etcd: SocketAddr,
}

impl ControlPlane {
    /// Starts one for `test`, or says why not and returns `None`: without
    /// root or the realkube tools a [`super::tools::skip`] (a failure under
    /// CI, which has both), without the real binaries
    /// [`skip_without_binaries`].
    pub fn up(test: &str) -> Option<Self> {
        let Some(tools) = tools() else {
            super::tools::skip(&format!(
                "{test}: needs the realkube tools (CERTSYNC_REALKUBE or ../shared/realkube)"
            ));
            return None;
        };
        binaries(&tools, &current_test())?;
        if !nix::unistd::Uid::effective().is_root() {
            super::tools::skip(&format!("{test}: a real control plane needs root"));
            return None;
        }
        let dir = PathBuf::from(format!(
            "/tmp/certsync-test-{test}-{}-{}",
            std::process::id(),
            super::unique("")
        ));
        let mut cp = Self {
            admin: dir.join("admin.kubeconfig"),
            tools,
            dir,
            api: "127.0.0.1:0".parse().unwrap(),
            etcd: "127.0.0.1:0".parse().unwrap(),
        };
        // Owned from here: a failed start is still stopped and removed.
        cp.start();
        let env = std::fs::read_to_string(cp.dir.join("env")).unwrap();
        let port = |key: &str| -> SocketAddr {
            let p = env
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("no {key} in {}/env", cp.dir.display()));
            format!("127.0.0.1:{p}").parse().unwrap()
        };
        cp.api = port("API_PORT");
        cp.etcd = port("ETCD_PORT");
        Some(cp)
    }

    /// `up DIR`: starts what is not running (idempotent), returns once the
    /// API server is ready.
    pub fn start(&self) {
        let out = Command::new(self.tools.join("up"))
            .arg(&self.dir)
            .output()
            .expect("run realkube up");
        assert!(
            out.status.success(),
            "realkube up {}: {}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Kills kube-apiserver (its pid; SIGKILL, as a crash or a lost node
    /// ends it: on SIGTERM it drains open watches for up to a minute), and
    /// returns once it no longer accepts connections. etcd keeps the data.
    pub fn stop_api_server(&self) {
        let pidfile = self.dir.join("run/kube-apiserver.pid");
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        super::wait_for("kube-apiserver to exit", || {
            nix::sys::signal::kill(pid, None).is_err().then_some(())
        });
        assert!(
            std::net::TcpStream::connect_timeout(&self.api, Duration::from_secs(1)).is_err(),
            "something still listens on {}",
            self.api
        );
    }

    /// Compacts etcd's history up to its current revision (through etcd's
    /// JSON gateway), as kube-apiserver does every five minutes: a watch
    /// from an older resourceVersion gets `410 Gone`. Returns the revision.
    pub fn compact(&self) -> u64 {
        // A range read of any key answers with the current revision.
        let header = self.etcd_post("/v3/kv/range", r#"{"key":"AA=="}"#);
        let revision: u64 = header["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no revision in {header}"));
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        let answer = self.etcd_post("/v3/kv/compaction", &body);
        assert!(answer.get("error").is_none(), "compaction: {answer}");
        revision
    }

    fn etcd_post(&self, path: &str, body: &str) -> serde_json::Value {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.etcd).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "etcd {path}: {text}");
        // Chunked or not: the JSON object is between the outer braces.
        let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
        serde_json::from_str(json).unwrap()
    }

    /// The admin kubeconfig with its server moved to `addr` (a proxy in
    /// front of the API server; its certificate names 127.0.0.1), written
    /// into `dir`.
    pub fn admin_via(&self, addr: SocketAddr, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(&self.admin)
            .unwrap()
            .replace(&format!("https://{}", self.api), &format!("https://{addr}"));
        assert!(text.contains(&addr.to_string()), "{text}");
        let path = dir.join("via-proxy.kubeconfig");
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(self.tools.join("down"))
            .arg(&self.dir)
            .arg("--purge")
            .status();
        // `down` sends SIGTERM and does not wait; a kube-apiserver whose
        // etcd went first may never exit (two were found hours later).
        // Whatever still has a flag naming the directory goes now (`=DIR/`,
        // or `DIR/` as the next argument: etcd's `--data-dir DIR/etcd-data`).
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", "--"])
            .arg(format!("[= ]{}/", self.dir.display()))
            .status();
    }
}
