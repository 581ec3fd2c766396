//! A control-plane node that kubeadm v1.36 itself made
//! (`../shared/realkube/kubeadm/node.sh`), driven as a person on the node
//! would: up, `node.sh` subcommands, down on drop; and the certificates it
//! serves, read independently of certsync. Shared by tests/kubeadm.rs and
//! the kubeadm benchmark.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::tools;

/// The realkube tools, or `None` after saying why a test cannot run.
pub fn realkube() -> Option<PathBuf> {
    let dir = super::control_plane::tools_dir();
    if !dir.join("kubeadm/node.sh").is_file() {
        tools::skip(&format!(
            "needs the realkube environment ({}/kubeadm/node.sh; set CERTSYNC_REALKUBE)",
            dir.display()
        ));
        return None;
    }
    super::control_plane::binaries(&dir, &super::control_plane::current_test())?;
    if !nix::unistd::geteuid().is_root() {
        tools::skip("kubeadm nodes need root (network namespaces, bubblewrap)");
        return None;
    }
    if !tools::have(&["bwrap", "ip", "python3", "openssl", "xz"]) {
        return None;
    }
    Some(dir)
}

/// `kubeadm adopt` at an 8-minute lifetime renewed at 20-25 %: renewals
/// within a test, and more than the 5 minutes client-go needs left at each
/// (the guide's cautious first rollout).
pub const ADOPT_SHORT: [&str; 7] = [
    "adopt",
    "--image",
    "certsync",
    "--set",
    "lifetime=8m",
    "--set",
    "renew=20%-25%",
];

/// A node brought up by `node.sh up`; `node.sh down` and its DIR removed on
/// drop, so a failing test (a panic unwinds through it) leaves no runner,
/// namespace or address behind.
pub struct Node {
    pub node_sh: PathBuf,
    pub dir: PathBuf,
    /// The node's address, port and name (`DIR/run/node.env`).
    pub ip: String,
    pub name: String,
}

impl Node {
    /// `node.sh up $TMPDIR/h34d-TAG-PID ARGS` (the network namespace is
    /// named after the DIR's basename). The guard exists before `up`
    /// runs: a half-made node is taken down too.
    pub fn up(realkube: &Path, tag: &str, args: &[&str]) -> Node {
        let dir = std::env::temp_dir().join(format!("h34d-{tag}-{}", std::process::id()));
        Self::up_in(realkube, dir, args)
    }

    /// `node.sh up --config CONFIG -- --image certsync=BINARY`: a node
    /// made from the kubeadm configuration at `config` (removed once
    /// node.sh has copied it into the node), its image `certsync` the
    /// binary under test.
    pub fn up_with_config(realkube: &Path, tag: &str, config: &Path) -> Node {
        let image = format!("certsync={}", super::certsync_bin());
        let node = Self::up(
            realkube,
            tag,
            &[
                "--config",
                config.to_str().expect("utf-8"),
                "--",
                "--image",
                &image,
            ],
        );
        let _ = std::fs::remove_file(config);
        node
    }

    /// `node.sh up DIR ARGS` (a benchmark chooses its file system), with
    /// the same guard as [`Node::up`]. DIR's parent must exist and be
    /// writable only by root: certsync refuses targets below a directory
    /// others may write (/tmp).
    pub fn up_in(realkube: &Path, dir: PathBuf, args: &[&str]) -> Node {
        Self::made(realkube, dir, "up", args)
    }

    /// The first node of a cluster others join (its image `certsync` the
    /// binary under test): joining needs a controlPlaneEndpoint, so its
    /// address is chosen here, `10.77.0.(base + pid % 50)`, above the
    /// addresses node.sh hands out from .11 up (each test its own `base`);
    /// `certificates` and `cas` as [`clock_config`] takes them.
    pub fn up_to_join(
        realkube: &Path,
        tag: &str,
        base: u32,
        certificates: Option<&str>,
        cas: Option<&str>,
    ) -> Node {
        let ip = format!("10.77.0.{}", base + std::process::id() % 50);
        let cfg = clock_config_at(tag, certificates, cas, Some(&ip));
        let image = format!("certsync={}", super::certsync_bin());
        let node = Self::up(
            realkube,
            tag,
            &[
                "--ip",
                &ip,
                "--config",
                cfg.to_str().expect("utf-8"),
                "--",
                "--image",
                &image,
            ],
        );
        let _ = std::fs::remove_file(&cfg);
        node
    }

    /// `node.sh join $TMPDIR/h34d-TAG-PID --from FROM ARGS`: another
    /// control-plane node of FROM's cluster (stacked etcd), taken down on
    /// drop like [`Node::up`]'s.
    pub fn join(realkube: &Path, tag: &str, from: &Node, args: &[&str]) -> Node {
        let dir = std::env::temp_dir().join(format!("h34d-{tag}-{}", std::process::id()));
        let mut all = vec!["--from", from.dir.to_str().expect("utf-8 DIR")];
        all.extend(args);
        Self::made(realkube, dir, "join", &all)
    }

    fn made(realkube: &Path, dir: PathBuf, how: &str, args: &[&str]) -> Node {
        let mut node = Node {
            node_sh: realkube.join("kubeadm/node.sh"),
            dir,
            ip: String::new(),
            name: String::new(),
        };
        let out = node.sh(how, args);
        assert!(
            out.status.success(),
            "node.sh {how} {} failed:\n{}{}",
            node.dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let env = std::fs::read_to_string(node.dir.join("run/node.env")).expect("node.env");
        let fields: Vec<&str> = env.split_whitespace().collect();
        assert_eq!(fields.len(), 3, "node.env is `IP PORT NAME`: {env:?}");
        node.ip = fields[0].to_owned();
        node.name = fields[2].to_owned();
        node
    }

    pub fn sh(&self, cmd: &str, args: &[&str]) -> Output {
        Command::new(&self.node_sh)
            .arg(cmd)
            .arg(&self.dir)
            .args(args)
            .output()
            .expect("run node.sh")
    }

    /// The node's `/etc/kubernetes`.
    pub fn etc(&self) -> PathBuf {
        self.dir.join("etc-kubernetes")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let out = self.sh("down", &[]);
        if !out.status.success() {
            // Not a panic inside a drop during a panic: say it and keep
            // the DIR for whoever looks.
            eprintln!(
                "node.sh down {} failed:\n{}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first certificate of a PEM text, as DER.
pub fn first_der(pem: &[u8]) -> Option<Vec<u8>> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    Some(p.contents)
}

/// The certificate `addr` serves (what a TLS client is shown), read with
/// openssl s_client: independent of certsync. `client` is a pair to
/// present (etcd asks for one).
pub fn served(node: &Node, addr: &str, client: Option<(&Path, &Path)>) -> Option<Vec<u8>> {
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-connect", addr, "-servername", &node.name]);
    if let Some((c, k)) = client {
        cmd.arg("-cert").arg(c).arg("-key").arg(k);
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().ok()?;
    first_der(&out.stdout)
}

pub fn live_der(target: &Path) -> Option<Vec<u8>> {
    first_der(&std::fs::read(target.join("tls.crt")).ok()?)
}

pub fn certsync(args: &[&str]) -> Output {
    Command::new(super::certsync_bin())
        .args(args)
        .output()
        .expect("run certsync")
}

/// `DIR/restarts.log`, whole: node.sh's runner appends a line per
/// container restart, with its reason.
pub fn restarts(node: &Node) -> String {
    std::fs::read_to_string(node.dir.join("restarts.log")).unwrap_or_default()
}

/// A node's restarts from a point on: what restarted before the mark ran
/// on kubeadm's manifests before certsync touched the node (`kubeadm init`
/// or `join` on two cores beside the suite: an API server may time out on
/// an etcd still starting or catching up), kubeadm's to answer for. A test
/// marks before its adopt and judges [`Restarts::since`].
pub struct Restarts(usize);

impl Restarts {
    /// Marks where the log stands now, printing what it already holds.
    pub fn mark(node: &Node) -> Restarts {
        let before = restarts(node);
        if !before.is_empty() {
            eprintln!(
                "{} restarted before certsync touched it:\n{before}",
                node.name
            );
        }
        Restarts(before.len())
    }

    /// The lines appended since the mark.
    pub fn since(&self, node: &Node) -> String {
        restarts(node).get(self.0..).unwrap_or_default().to_owned()
    }
}

/// Every container the runner runs: (pod/container, pid, restarts).
pub fn containers(node: &Node) -> Vec<(String, u64, u64)> {
    let text = std::fs::read_to_string(node.dir.join("run/status.json")).unwrap_or_default();
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for pod in v["pods"].as_array().into_iter().flatten() {
        for c in pod["containers"].as_array().into_iter().flatten() {
            out.push((
                format!(
                    "{}/{}",
                    pod["name"].as_str().unwrap_or("?"),
                    c["name"].as_str().unwrap_or("?")
                ),
                c["pid"].as_u64().unwrap_or(0),
                c["restarts"].as_u64().unwrap_or(u64::MAX),
            ));
        }
    }
    out.sort();
    out
}

/// Polls `check` every second until it returns `Some`, or panics with
/// `what` after `limit` (node operations take seconds, not milliseconds).
pub fn wait_long<T>(
    what: &str,
    limit: std::time::Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// kubectl from the realkube binaries.
pub fn kubectl(realkube: &Path) -> PathBuf {
    let out = Command::new(realkube.join("bin")).output().expect("bin");
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8").trim()).join("kubectl")
}

/// `kubectl get --raw /readyz` through `kubeconfig` succeeds.
pub fn ready(kubectl: &Path, kubeconfig: &Path) -> bool {
    readyz(kubectl, kubeconfig).is_ok()
}

/// `/readyz` through `kubeconfig`, with kubectl's complaint when it fails.
pub fn readyz(kubectl: &Path, kubeconfig: &Path) -> Result<(), String> {
    readyz_at(kubectl, kubeconfig, None)
}

/// `/readyz` through `kubeconfig`, at `server` (`https://IP:6443`) when
/// given instead of the kubeconfig's: one API server of several.
pub fn readyz_at(kubectl: &Path, kubeconfig: &Path, server: Option<&str>) -> Result<(), String> {
    let mut cmd = Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(kubeconfig);
    if let Some(s) = server {
        cmd.args(["--server", s]);
    }
    let out = cmd
        .args(["get", "--raw", "/readyz?verbose", "--request-timeout=5s"])
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `certsync kubeadm ARGS --kubeadm-dir DIR/etc-kubernetes`, run in the
/// node's network namespace as on the node itself: adopt waits for
/// certsync's pod on the node's loopback (its admin port).
pub fn kubeadm_cmd(node: &Node, args: &[&str]) -> (bool, String) {
    let etc = node.etc();
    let net = std::fs::read_to_string(node.dir.join("run/net.env")).expect("net.env");
    let ns = net
        .lines()
        .find_map(|l| l.strip_prefix("NETNS="))
        .expect("NETNS in net.env");
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .arg("--")
        .arg(super::certsync_bin())
        .arg("kubeadm")
        .args(args)
        .args(["--kubeadm-dir", etc.to_str().expect("utf-8")])
        .output()
        .expect("run certsync in the node's network namespace");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The containers once every pod of `names` has a pid and is ready.
pub fn settled(node: &Node, count: usize) -> Option<Vec<(String, u64, u64)>> {
    let now = containers(node);
    (now.len() == count && now.iter().all(|(_, pid, _)| *pid > 0)).then_some(now)
}

/// The ClusterConfiguration in the kubeadm-config ConfigMap, as stored.
pub fn stored_cluster_configuration(kubectl: &Path, admin: &Path) -> String {
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(admin)
        .args([
            "get",
            "cm",
            "-n",
            "kube-system",
            "kubeadm-config",
            "-o",
            "jsonpath={.data.ClusterConfiguration}",
        ])
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// kubeadm's configuration for `node.sh up --config` on kubeadm's own
/// clock: no address (node.sh's, taken under its lock, is the one kubeadm
/// picks), kubeadm's certificates lasting `certificates` and its CAs `cas`
/// (kubeadm's defaults, a year and ten, when `None`). Written to a file of
/// its own under the temporary directory; node.sh copies it into the node.
pub fn clock_config(tag: &str, certificates: Option<&str>, cas: Option<&str>) -> PathBuf {
    clock_config_at(tag, certificates, cas, None)
}

/// [`clock_config`] for a node at `ip` (`node.sh up --ip IP`) that others
/// join: its address is the controlPlaneEndpoint.
pub fn clock_config_at(
    tag: &str,
    certificates: Option<&str>,
    cas: Option<&str>,
    ip: Option<&str>,
) -> PathBuf {
    let mut periods = String::new();
    let mut endpoint = String::new();
    if let Some(ip) = ip {
        endpoint = format!("localAPIEndpoint: {{advertiseAddress: {ip}, bindPort: 6443}}\n");
        periods.push_str(&format!("controlPlaneEndpoint: {ip}:6443\n"));
    }
    if let Some(c) = certificates {
        periods.push_str(&format!("certificateValidityPeriod: {c}\n"));
    }
    if let Some(c) = cas {
        periods.push_str(&format!("caCertificateValidityPeriod: {c}\n"));
    }
    let text = format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n{endpoint}\
         nodeRegistration: {{name: cp1, criSocket: \"unix:///var/run/containerd/containerd.sock\", \
         imagePullPolicy: IfNotPresent}}\n---\n\
         apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.36.2\n\
         clusterName: kubernetes\ncertificatesDir: /etc/kubernetes/pki\n{periods}\
         etcd: {{local: {{dataDir: /var/lib/etcd}}}}\n\
         networking: {{serviceSubnet: 10.96.0.0/12, dnsDomain: cluster.local}}\n"
    );
    let path = std::env::temp_dir().join(format!("{tag}-{}.yaml", std::process::id()));
    std::fs::write(&path, text).expect("kubeadm config");
    path
}

/// Now, in Unix seconds (certificates' times are compared in these).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// notAfter (Unix seconds) of the first certificate in `pem`.
pub fn pem_not_after(pem: &[u8]) -> i64 {
    let der = first_der(pem).expect("a PEM certificate");
    let (_, c) = x509_parser::parse_x509_certificate(&der).expect("certificate");
    c.validity().not_after.timestamp()
}
