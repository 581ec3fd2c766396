//! Flip to served on a node kubeadm made: `cargo bench --bench kubeadm [-- OPTIONS]`.
//!
//! One `../shared/realkube/kubeadm/node.sh` node (kubeadm v1.36.2, every
//! component from its kubeadm manifest), adopted with `certsync kubeadm
//! adopt` (certsync as the node's static pod). The three serving
//! certificates are then renewed about once a minute, and for each renewal
//! the bench records the time from the target's `..data` flip (inotify,
//! as `benches/certsync.rs` does) to the component serving the new
//! certificate: after the flip it opens a TLS connection every 15 ms
//! (sleeping in between, one full handshake each: no session resumption,
//! the server verified against the node's CA) until the server's leaf is
//! the new live certificate.
//!
//! | component | endpoint | client certificate presented |
//! | --- | --- | --- |
//! | kube-apiserver | NODE:6443 | none |
//! | etcd, client port | NODE:2379 | kubeadm's `etcd/healthcheck-client` |
//! | etcd, peer port | NODE:2380 | kubeadm's `etcd/peer` |
//!
//! Options: `--flips N` (renewals measured per component, default 6;
//! `--quick` 3), `--lifetime D` and `--renew LO-HI` (the `ca:` options of
//! the three serving mappings, default `3m` and `30%-35%`: a renewal every
//! ~1 min), `--json FILE`. The client certificates keep `lifetime=8m`,
//! `renew=20%-25%` (more than the 5 minutes client-go's file reload needs
//! left at each renewal, so no component loses its API access). The node's
//! DIR goes under `CERTSYNC_BENCH_DIR` (default cargo's target/tmp; never
//! /tmp, whose sticky world-writable bit certsync refuses above a target),
//! the static pod runs `CERTSYNC_BIN` (default this build's certsync), the
//! tools are found as tests/kubeadm.rs finds them (`CERTSYNC_REALKUBE`).
//! Needs root; without root or realkube it says why and exits 0. Takes
//! ~8 min (node up, adopt, and certsync's renewal floor before the first
//! renewal at the shorter lifetime) plus a minute per flip.

#[path = "../tests/support/mod.rs"]
mod support;

mod report;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use report::{Row, percentiles, print};
use support::kubeadm_node::{Node, first_der, live_der, realkube};

/// Between two handshakes while waiting for the new certificate.
const POLL: Duration = Duration::from_millis(15);
/// A flip whose certificate is not served within this is counted missed.
const GIVE_UP: Duration = Duration::from_secs(90);

struct Opts {
    flips: usize,
    lifetime: String,
    renew: String,
    json: Option<String>,
}

fn opts() -> Opts {
    let args = report::Args::from_env();
    let quick = args.has("--quick");
    Opts {
        flips: args
            .value("--flips")
            .map_or(if quick { 3 } else { 6 }, |v| v.parse().expect("--flips N")),
        lifetime: args.value("--lifetime").unwrap_or_else(|| "3m".into()),
        renew: args.value("--renew").unwrap_or_else(|| "30%-35%".into()),
        json: args.value("--json"),
    }
}

/// One served certificate and how to reach it from the host.
struct Component {
    case: &'static str,
    /// certsync's target on the host.
    target: PathBuf,
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    reload: &'static str,
}

/// A client that verifies the server against `ca` (so a wrong certificate
/// is an error, not a mismatch), presents `client` when given, and never
/// resumes a session: a resumed TLS 1.2 session shows the certificate of
/// the handshake it resumes, not the one the server has now.
fn client_config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut cfg = match client {
        None => builder.with_no_client_auth(),
        Some((crt, key)) => {
            let chain = CertificateDer::pem_file_iter(crt)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
                .unwrap()
        }
    };
    cfg.resumption = rustls::client::Resumption::disabled();
    Arc::new(cfg)
}

/// The leaf `c` serves now: one full handshake.
fn served_now(c: &Component) -> Result<Vec<u8>, String> {
    let mut sock = TcpStream::connect_timeout(&c.addr, Duration::from_secs(2))
        .map_err(|e| format!("connect: {e}"))?;
    let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(2)));
    let name = rustls::pki_types::ServerName::IpAddress(c.addr.ip().into());
    let mut conn = rustls::ClientConnection::new(Arc::clone(&c.tls), name)
        .map_err(|e| format!("client: {e}"))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    let leaf = conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.to_vec())
        .ok_or("no certificate")?;
    conn.send_close_notify();
    let _ = conn.complete_io(&mut sock);
    Ok(leaf)
}

/// What one component's thread measured.
#[derive(Default)]
struct Measured {
    /// Flip to the new certificate served, per renewal.
    ms: Vec<f64>,
    /// Handshakes until then, per renewal (1: the first one after the
    /// flip already showed it).
    handshakes: Vec<f64>,
    /// How long the handshake that showed it took, per renewal: the
    /// resolution of `ms` (connect, handshake, the server's signature).
    last_handshake_ms: Vec<f64>,
    missed: usize,
    /// Flips that came after the certificate they replaced had expired
    /// (the component served an expired certificate until then).
    late: usize,
    errors: usize,
    first_error: Option<String>,
}

/// Waits for `flips` flips of `c`'s target (or `deadline`) and times each
/// to served.
fn measure(c: &Component, flips: usize, deadline: Instant) -> Measured {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use std::os::fd::AsFd;
    let ino = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).unwrap();
    ino.add_watch(&c.target, AddWatchFlags::IN_MOVED_TO)
        .unwrap();
    let mut m = Measured::default();
    let mut previous = live_der(&c.target);
    while m.ms.len() + m.missed < flips && Instant::now() < deadline {
        let mut fds = [nix::poll::PollFd::new(
            ino.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16)).unwrap_or(0) == 0 {
            continue;
        }
        let flipped = ino.read_events().is_ok_and(|events| {
            events
                .iter()
                .any(|e| e.name.as_deref() == Some(std::ffi::OsStr::new("..data")))
        });
        if !flipped {
            continue;
        }
        let t0 = Instant::now();
        let Some(live) = support::read_live(&c.target).and_then(|(_, crt, _)| first_der(&crt))
        else {
            continue;
        };
        let expired = |der: &[u8]| {
            x509_parser::parse_x509_certificate(der).is_ok_and(|(_, cert)| {
                cert.validity().not_after.timestamp()
                    < x509_parser::time::ASN1Time::now().timestamp()
            })
        };
        if previous.as_deref().is_some_and(expired) {
            m.late += 1;
        }
        previous = Some(live.clone());
        let mut tries = 0;
        loop {
            tries += 1;
            let t = Instant::now();
            match served_now(c) {
                Ok(leaf) if leaf == live => {
                    m.ms.push(t0.elapsed().as_secs_f64() * 1e3);
                    m.last_handshake_ms.push(t.elapsed().as_secs_f64() * 1e3);
                    m.handshakes.push(f64::from(tries));
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    m.errors += 1;
                    m.first_error.get_or_insert(e);
                }
            }
            if t0.elapsed() > GIVE_UP {
                m.missed += 1;
                break;
            }
            std::thread::sleep(POLL);
        }
    }
    m
}

/// certsync's configuration as adopt wrote it, with `lifetime` and
/// `renew` set on the named mappings and the client certificates' kept
/// long enough for client-go; certsync's static pod then restarted the
/// kubelet way (its manifest moved out until the pod is gone, and back).
fn set_lifetimes(node: &Node, serving: &[&str], lifetime: &str, renew: &str) {
    let etc = node.etc();
    let path = etc.join("certsync.yaml");
    let mut doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mappings = doc["mappings"].as_sequence_mut().expect("mappings");
    let mut set = 0;
    for m in mappings {
        let name = m["name"].as_str().unwrap_or_default().to_owned();
        let (l, r) = if serving.contains(&name.as_str()) {
            set += 1;
            (lifetime, renew)
        } else {
            ("8m", "20%-25%")
        };
        m["lifetime"] = l.into();
        m["renew"] = r.into();
    }
    assert_eq!(set, serving.len(), "mappings {serving:?} in {path:?}");
    std::fs::write(&path, serde_yaml_ng::to_string(&doc).unwrap()).unwrap();
    let manifest = etc.join("manifests/certsync.yaml");
    let away = node.dir.join("certsync-manifest.away");
    std::fs::rename(&manifest, &away).unwrap();
    let status = node.dir.join("run/status.json");
    wait("certsync's pod stopped", Duration::from_secs(60), || {
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&status).ok()?).ok()?;
        let pods = s["pods"].as_array()?;
        (!pods.iter().any(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("certsync-"))
        }))
        .then_some(())
    });
    std::fs::rename(&away, &manifest).unwrap();
}

/// Polls `check` every second until `Some`, or panics naming `what`.
fn wait<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn main() {
    let o = opts();
    let Some(realkube) = realkube() else {
        eprintln!("kubeadm bench: nothing measured");
        return;
    };
    let root = std::env::var_os("CERTSYNC_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join(format!("kubeadm-flip-{}", std::process::id()));
    let bin = support::certsync_bin();
    let image = format!("certsync={bin}");
    let started = Instant::now();
    let node = Node::up_in(&realkube, dir, &["--", "--image", &image]);
    let etc = node.etc();
    let out = Command::new(&bin)
        .args(["kubeadm", "adopt", "--image", "certsync"])
        .args(["--set", "lifetime=8m", "--set", "renew=20%-25%"])
        .arg("--kubeadm-dir")
        .arg(&etc)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "adopt: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    set_lifetimes(
        &node,
        &["apiserver", "etcd-server", "etcd-peer"],
        &o.lifetime,
        &o.renew,
    );

    let pki = etc.join("pki");
    let ip: IpAddr = node.ip.parse().unwrap();
    let etcd_tls = |pair: &str| {
        client_config(
            &pki.join("etcd/ca.crt"),
            Some((
                &pki.join(format!("etcd/{pair}.crt")),
                &pki.join(format!("etcd/{pair}.key")),
            )),
        )
    };
    let components = [
        Component {
            case: "kube-apiserver :6443",
            target: pki.join("certsync/apiserver"),
            addr: SocketAddr::new(ip, 6443),
            tls: client_config(&pki.join("ca.crt"), None),
            reload: "dynamic serving certificate controller: fsnotify on --tls-cert-file/--tls-private-key-file (the move of the old revision's files into ..history is the event), then the next handshake",
        },
        Component {
            case: "etcd client :2379",
            target: pki.join("etcd/certsync/server"),
            addr: SocketAddr::new(ip, 2379),
            tls: etcd_tls("healthcheck-client"),
            reload: "etcd reads --cert-file/--key-file at every handshake (client/pkg/transport TLSInfo GetCertificate)",
        },
        Component {
            case: "etcd peer :2380",
            target: pki.join("etcd/certsync/peer"),
            addr: SocketAddr::new(ip, 2380),
            tls: etcd_tls("peer"),
            reload: "etcd reads --peer-cert-file/--peer-key-file at every handshake (same TLSInfo)",
        },
    ];
    // Every component back on its adopted manifest and serving certsync's
    // current certificate before the first measured flip.
    for c in &components {
        wait(
            &format!("{} serving certsync's certificate", c.case),
            Duration::from_secs(300),
            || {
                let live = live_der(&c.target)?;
                served_now(c).ok().filter(|s| *s == live)
            },
        );
    }
    let ready = started.elapsed();
    let load_before = load1();
    eprintln!(
        "adopted and serving after {:.0} s (load1 {load_before}); measuring {} flips per component",
        ready.as_secs_f64(),
        o.flips
    );
    // The first renewal under the shorter lifetime waits for certsync's
    // renewal floor (5 min after the 8-minute pair adopt issued: a
    // shorter-lived pair never replaces a longer-lived one early), then one
    // every ~lifetime/3.
    let deadline = Instant::now() + Duration::from_secs(8 * 60 + 90 * o.flips as u64);
    let measured: Vec<Measured> = std::thread::scope(|s| {
        let handles: Vec<_> = components
            .iter()
            .map(|c| s.spawn(|| measure(c, o.flips, deadline)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let load_after = load1();
    let restarts = std::fs::read_to_string(node.dir.join("restarts.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    // The node's logs (certsync's among them) outlive it when anything
    // was off: removed with the node otherwise.
    if measured.iter().any(|m| m.missed + m.late + m.errors > 0) {
        let kept = root.join(format!("kubeadm-flip-{}-logs", std::process::id()));
        let _ = Command::new("cp")
            .arg("-a")
            .arg(node.dir.join("logs"))
            .arg(&kept)
            .status();
        eprintln!("node logs kept in {}", kept.display());
    }
    drop(node);

    let rows: Vec<Row> = components
        .iter()
        .zip(measured)
        .map(|(c, m)| {
            let mut figures: BTreeMap<String, f64> = percentiles(m.ms.clone());
            let most = m.handshakes.iter().copied().fold(0.0, f64::max);
            figures.insert("handshakes_until_served_max".into(), most);
            for (k, v) in percentiles(m.last_handshake_ms) {
                figures.insert(format!("last_handshake_{k}"), v);
            }
            figures.insert("missed".into(), m.missed as f64);
            figures.insert("flips_after_expiry".into(), m.late as f64);
            figures.insert("handshake_errors".into(), m.errors as f64);
            figures.insert("restarts_on_node".into(), restarts as f64);
            figures.insert("load1_before".into(), load_before);
            figures.insert("load1_after".into(), load_after);
            Row {
                bench: "kubeadm".into(),
                case: format!("{}, flip to served", c.case),
                n: m.ms.len(),
                figures,
                note: format!(
                    "lifetime={} renew={}; a full TLS handshake every {} ms after the ..data flip until the new leaf is served; {}{}",
                    o.lifetime,
                    o.renew,
                    POLL.as_millis(),
                    c.reload,
                    m.first_error
                        .map(|e| format!("; first handshake error: {e}"))
                        .unwrap_or_default()
                ),
            }
        })
        .collect();
    print(&rows);
    if let Some(path) = &o.json {
        report::write_json(path, &rows);
    }
}
