//! The gate adopt passes before any component manifest names certsync's
//! targets: certsync's pod, started for this adoption, running and ready
//! on the node. A node whose components read files no running certsync
//! renews works until those files end and then stops (an image the node
//! could not pull was "adopted", exit 0, and nothing renewed the pairs).
//!
//! "This adoption's pod": adopt puts a generation token (a digest of
//! certsync's configuration and image, `pod::generation`) in the pod's
//! arguments, and certsync's `/readyz` answers with it
//! ([`crate::admin::GENERATION_HEADER`]); an earlier pod answering on the
//! same port (a re-adopt) is not taken for the new one. Then every target
//! must hold, on disk, a pair its CA issued that has not ended.
//!
//! This is a liveness gate, not a security boundary: it stops an image the
//! node cannot run or a configuration certsync refuses, not a process that
//! wants adopt to go on. A local process that binds the admin port first
//! can answer with the token (the configuration is predictable, the image
//! is on adopt's command line), and certsync's own container can also make
//! the pairs on disk (it reads the CA keys; it sees the new pod manifest
//! through its read-only mount of `manifests/`): a compromised container
//! can make a re-adopt go through with a new pod that never runs. It is
//! host root through the CA keys already (docs/security.md); what it cannot
//! do is make adopt or revert take its files for kubeadm's.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;

use super::plan;
use super::{KubeadmError, host, node};

/// Why the gate did not pass: what one look at certsync's admin port saw
/// when it was not this adoption's pod answering ready, or what else
/// stopped the pod's start. Said as `NotReady.seen`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Seen {
    #[error("no answer from {addr} within 3 s")]
    Silent { addr: SocketAddr },
    #[error("nothing answers on {addr} ({problem})")]
    Nothing { addr: SocketAddr, problem: String },
    /// The pod of this generation answers, not ready: why (escaped).
    #[error("certsync's pod (generation {generation}) runs but is not ready: {body}")]
    Starting { generation: String, body: String },
    #[error("an earlier certsync pod (generation {generation}) answers, not this adoption's")]
    Earlier { generation: String },
    #[error("a certsync without a generation answers (an earlier pod): {status} {body}")]
    Ungenerated { status: u16, body: String },
    #[error(
        "certsync's pod answers ready, but target {target} holds no live pair of its CA's: {why}"
    )]
    DeadTarget { target: String, why: String },
    /// A pod whose manifest was taken out still answering after `secs`.
    #[error("{pod} still answers on {addr} {secs} s after its manifest was taken out")]
    StillAnswers {
        pod: String,
        addr: SocketAddr,
        secs: u64,
    },
    /// A file certsync's pod mounts read-only, changed since adopt wrote it.
    #[error(
        "{path} is not what adopt wrote any more: something changed it while certsync's pod \
         started; no component was pointed at it"
    )]
    Changed { path: String },
    /// Writing or reading the pod's files failed.
    #[error("{0}")]
    Failed(String),
}

impl Seen {
    /// The pod of the generation looked for answers (ready or not).
    fn answers(&self) -> bool {
        matches!(self, Seen::Starting { .. })
    }
}

impl From<super::KubeadmError> for Seen {
    fn from(e: super::KubeadmError) -> Self {
        Seen::Failed(e.to_string())
    }
}

/// One `GET /readyz` on certsync's admin port, within 3 s: `Ok` when the
/// pod of `generation` answers ready.
pub async fn look(addr: SocketAddr, generation: &str) -> Result<(), Seen> {
    let (status, token, body) =
        match tokio::time::timeout(Duration::from_secs(3), get_readyz(addr)).await {
            Err(_) => return Err(Seen::Silent { addr }),
            Ok(Err(e)) => {
                return Err(Seen::Nothing {
                    addr,
                    problem: e.to_string(),
                });
            }
            Ok(Ok(answer)) => answer,
        };
    let body = crate::escape(body.trim()).into_owned();
    match token {
        Some(t) if t == generation && status == 200 => Ok(()),
        Some(t) if t == generation => Err(Seen::Starting {
            generation: t,
            body,
        }),
        Some(t) => Err(Seen::Earlier {
            generation: crate::escape(&t).into_owned(),
        }),
        None => Err(Seen::Ungenerated { status, body }),
    }
}

/// Why asking certsync's `/readyz` got no answer: said as
/// [`Seen::Nothing`] by adopt, and by `kubeadm status`.
#[derive(Debug, thiserror::Error)]
pub enum ReadyzError {
    #[error(transparent)]
    Connect(std::io::Error),
    #[error(transparent)]
    Http(hyper::Error),
    #[error(transparent)]
    Request(http::Error),
    #[error(transparent)]
    Uri(http::uri::InvalidUri),
    /// The pooled client's failure, said by its cause (the connection
    /// refused, not "client error (Connect)").
    #[error("{}", cause(.0))]
    Client(hyper_util::client::legacy::Error),
    #[error(transparent)]
    Body(Box<dyn std::error::Error + Send + Sync>),
    #[error("no answer within {secs}s")]
    Timeout { secs: u64 },
}

/// How long `/readyz` may take to answer, and how much of it is read.
const READYZ_TIMEOUT: Duration = Duration::from_secs(3);
const READYZ_LIMIT: usize = 64 << 10;

/// `GET http://ADDR/readyz` for `kubeadm status`: its status code and
/// (capped) body.
pub(super) async fn status_readyz(addr: SocketAddr) -> Result<(u16, String), ReadyzError> {
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Empty, Limited};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let uri: http::Uri = format!("http://{addr}/readyz")
        .parse()
        .map_err(ReadyzError::Uri)?;
    let ask = async {
        let resp = client.get(uri).await.map_err(ReadyzError::Client)?;
        let code = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), READYZ_LIMIT)
            .collect()
            .await
            .map_err(ReadyzError::Body)?
            .to_bytes();
        Ok((code, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(READYZ_TIMEOUT, ask)
        .await
        .map_err(|_| ReadyzError::Timeout {
            secs: READYZ_TIMEOUT.as_secs(),
        })?
}

/// What `e` says, by its cause when it has one.
fn cause(e: &dyn std::error::Error) -> String {
    e.source()
        .map_or_else(|| e.to_string(), ToString::to_string)
}

async fn get_readyz(addr: SocketAddr) -> Result<(u16, Option<String>, String), ReadyzError> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(ReadyzError::Connect)?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(ReadyzError::Http)?;
    let driver = tokio::spawn(conn);
    let req = http::Request::get("/readyz")
        .header(http::header::HOST, addr.to_string())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(ReadyzError::Request)?;
    let resp = send.send_request(req).await.map_err(ReadyzError::Http)?;
    let status = resp.status().as_u16();
    let token = resp
        .headers()
        .get(crate::admin::GENERATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = http_body_util::Limited::new(resp.into_body(), 16 * 1024)
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    driver.abort();
    Ok((status, token, body))
}

/// Targets whose live pair is missing, unreadable, not its CA's or has
/// ended: (node path, why). Empty when every one holds a live pair.
pub fn dead_targets(dir: &Path) -> Vec<(String, String)> {
    let now = x509_parser::time::ASN1Time::now();
    let mut dead = Vec::new();
    for (target, ca) in plan::target_cas(dir) {
        let read = |f: &str| read_beneath(dir, &target, f);
        let problem = match (read("tls.crt"), read("tls.key")) {
            (Err(e), _) | (_, Err(e)) => Some(e.to_string()),
            (Ok(crt), Ok(key)) => match node::sound_pair(dir, &crt, &key, &ca) {
                Err(e) => Some(e.to_string()),
                Ok(()) => match node::not_after(&crt) {
                    Err(e) => Some(e.to_string()),
                    Ok(t) if t <= now => Some(format!("ended at {t}")),
                    Ok(_) => None,
                },
            },
        };
        if let Some(p) = problem {
            dead.push((target, p));
        }
    }
    dead
}

/// The file `name` of the target at `target` (a node path), opened
/// beneath the target's handle: the pod writes the target, so a link it
/// left there never leads adopt (root) out of it. A regular file, 1 MiB at
/// most.
fn read_beneath(dir: &Path, target: &str, name: &str) -> Result<Vec<u8>, KubeadmError> {
    use std::io::Read as _;
    let at = Path::new(target).join(name);
    let opened = super::moves::open_beneath(dir, target).map_err(|e| match e {
        super::moves::Blocked::Absent => KubeadmError::file(Path::new(target), "missing"),
        e => KubeadmError::file(Path::new(target), e),
    })?;
    // The shared walker: links the pod left are followed only beneath the
    // target, and a FIFO it left is refused without an open that blocks.
    use std::os::fd::AsFd as _;
    let file = crate::beneath::walk(
        crate::beneath::Start::Beneath(opened.as_fd(), Path::new(target)),
        Path::new(name),
        crate::beneath::Links::Follow,
        &mut |_| Ok(()),
    )
    .and_then(|w| w.open_read())
    .map_err(|e| KubeadmError::file(&at, e))?;
    let mut bytes = Vec::new();
    file.take(1 << 20)
        .read_to_end(&mut bytes)
        .map_err(|e| KubeadmError::file(&at, e))?;
    Ok(bytes)
}

/// Waits up to `timeout` for the pod of `generation` to answer ready and
/// every target to hold a live pair. `Err`: what was last seen.
pub async fn wait(
    dir: &Path,
    addr: SocketAddr,
    generation: &str,
    timeout: Duration,
) -> Result<(), Seen> {
    let start = Instant::now();
    loop {
        let seen = match look(addr, generation).await {
            Ok(()) => match dead_targets(dir).into_iter().next() {
                None => return Ok(()),
                Some((target, why)) => Seen::DeadTarget { target, why },
            },
            Err(seen) => seen,
        };
        if start.elapsed() >= timeout {
            return Err(seen);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How long after its manifest is taken out a certsync pod is surely
/// stopped: the kubelet notices a removed static pod manifest within its
/// 20 s file check, then kills the container within its grace period
/// (adopt's pod gives 10 s; one an earlier certsync wrote, the default 30 s
/// less what the first check took).
pub const STOPPED_AFTER: Duration = Duration::from_secs(40);

/// certsync's pod whose manifest (its bytes) was taken out at `removed`,
/// stopped: it stops answering, and [`STOPPED_AFTER`] has passed since. A
/// file the host writes after this is out of reach of that container (a
/// rename over a file it mounts read-only leaves the new file writable to
/// it, and its read-write mounts are its own while it runs): the one wait
/// adopt and revert make before writing what the container could reach.
pub async fn stopped(manifest: &[u8], removed: Instant, pod: &str) -> Result<(), Seen> {
    let text = String::from_utf8_lossy(manifest);
    let addr = super::pod::probe(&text).map_or(super::pod::DEFAULT_PROBE, |(_, _, a)| a);
    let generation = super::pod::of_pod(manifest).unwrap_or_default();
    gone(addr, &generation, STOPPED_AFTER * 2, pod).await?;
    if let Some(left) = STOPPED_AFTER.checked_sub(removed.elapsed()) {
        tokio::time::sleep(left).await;
    }
    Ok(())
}

/// Waits until the pod of `generation` has stopped answering for 5 s in a
/// row (its manifest taken out: the kubelet stops it within its grace
/// period), at most `limit`; `pod` names it in the error.
pub async fn gone(
    addr: SocketAddr,
    generation: &str,
    limit: Duration,
    pod: &str,
) -> Result<(), Seen> {
    let start = Instant::now();
    let mut quiet_since = Instant::now();
    loop {
        let answers = match look(addr, generation).await {
            Ok(()) => true,
            Err(seen) => seen.answers(),
        };
        if answers {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(5) {
            return Ok(());
        }
        if start.elapsed() >= limit {
            return Err(Seen::StillAnswers {
                pod: pod.to_owned(),
                addr,
                secs: limit.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The kubelet's view of certsync's pod, where the API server can be
/// asked: its mirror pod `kube-system/certsync-NODE` (NODE from etcd's
/// `--name`, which kubeadm sets to the node's name). What to check on the
/// node otherwise.
pub async fn pod_state(dir: &Path) -> String {
    const ON_NODE: &str = "on the node: the kubelet's log (`journalctl -u kubelet`), \
        `crictl ps -a --name certsync` and `crictl logs` of its container";
    let Some(node_name) = node::read(dir, "/etc/kubernetes/manifests/etcd.yaml")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.trim().strip_prefix("- --name=").map(str::to_owned))
        })
    else {
        return format!("the node's name is unknown (no --name in etcd.yaml); check {ON_NODE}");
    };
    let name = format!("certsync-{node_name}");
    let ask = async {
        let config = super::admin::config(&host(dir, super::admin::ADMIN))
            .await
            .map_err(|e| e.to_string())?;
        let client = crate::source::client::ClientSettings::default()
            .client_for(&config)
            .map_err(|e| e.to_string())?;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client, "kube-system");
        pods.get_opt(&name).await.map_err(|e| e.to_string())
    };
    let pod = match tokio::time::timeout(Duration::from_secs(10), ask).await {
        Ok(Ok(Some(pod))) => pod,
        Ok(Ok(None)) => {
            return format!("no mirror pod kube-system/{name} in the API server; check {ON_NODE}");
        }
        Ok(Err(e)) => {
            return format!(
                "the API server could not be asked for kube-system/{name} ({}); check {ON_NODE}",
                crate::escape(&e)
            );
        }
        Err(_) => {
            return format!(
                "the API server did not answer for kube-system/{name} within 10 s; check {ON_NODE}"
            );
        }
    };
    let statuses = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default();
    let Some(c) = statuses.first() else {
        return format!("kube-system/{name} has no container status yet; check {ON_NODE}");
    };
    let state = |s: &k8s_openapi::api::core::v1::ContainerState| {
        if let Some(w) = &s.waiting {
            format!(
                "waiting: {} {}",
                w.reason.as_deref().unwrap_or(""),
                w.message.as_deref().unwrap_or("")
            )
        } else if let Some(t) = &s.terminated {
            format!(
                "terminated: {} (exit code {}) {}",
                t.reason.as_deref().unwrap_or(""),
                t.exit_code,
                t.message.as_deref().unwrap_or("")
            )
        } else {
            "running".to_owned()
        }
    };
    let mut said = format!(
        "kube-system/{name}: image {}, {}",
        c.image,
        c.state.as_ref().map(state).unwrap_or_default()
    );
    if let Some(last) = &c.last_state {
        said.push_str(&format!("; last {}", state(last)));
    }
    crate::escape(said.trim()).into_owned()
}

/// A restart for a changed manifest shows within this: the kubelet reads
/// static pod manifests every 20 s, and the API server answers /readyz
/// with a failure from the moment it is told to stop. A manifest written
/// back to what runs (adopt right after a `kubeadm upgrade` the kubelet has
/// not noticed yet) restarts nothing: ready, with the certificate the
/// manifest names, and no gap by then is the API server as it should be.
const RESTART_SEEN_WITHIN: Duration = Duration::from_secs(60);

/// What adopt or revert last saw of the API server it waited for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotBack {
    #[error("{manifest} names no --advertise-address or --tls-cert-file")]
    NoAddress { manifest: String },
    #[error("{path}: {problem}")]
    Unread { path: String, problem: String },
    /// Still serving another certificate (not restarted yet), or no TLS
    /// answer at all.
    #[error("{addr} serves {served}, not {path} ({expected})")]
    NotServing {
        addr: String,
        served: String,
        path: String,
        expected: String,
    },
    #[error("{addr} serves {path}, but /readyz through admin.conf: {problem}")]
    NotReady {
        addr: String,
        path: String,
        problem: String,
    },
    /// Serving and ready from the first look on, never seen stopping: the
    /// API server that ran before (same certificate) has not restarted yet.
    #[error("{addr} has answered ready since the manifest changed: not restarted on it yet")]
    NotRestarted { addr: String },
}

/// After adopt or revert changed the API server's manifest: the API server
/// has restarted on the files it names. At its own address (the
/// manifest's `--advertise-address` and `--secure-port`, not admin.conf's
/// server, which may be a load balancer in front of other nodes) it serves
/// the certificate its `--tls-cert-file` holds now (re-read each time:
/// certsync may renew it meanwhile; the API server still running on the
/// files of before answers /readyz too), and `/readyz` answers ok through
/// admin.conf, after it was seen not doing so at least once or once
/// [`RESTART_SEEN_WITHIN`] has passed: a change that keeps the certificate
/// (a trust annotation) is proven by the restart's gap, one that changes it
/// by the certificate. Returns the address and the certificate's path.
pub async fn api_server_back(
    dir: &Path,
    (manifest_path, manifest): (&str, &[u8]),
    timeout: Duration,
) -> Result<(String, String), NotBack> {
    let m = super::manifest::Manifest::parse(&String::from_utf8_lossy(manifest)).ok();
    let flag = |f: &str| m.as_ref().and_then(|m| m.flag(f));
    let (Some(ip), Some(cert)) = (flag("advertise-address"), flag(TLS_CERT_FILE)) else {
        return Err(NotBack::NoAddress {
            manifest: manifest_path.to_owned(),
        });
    };
    let port = flag("secure-port").unwrap_or_else(|| "6443".into());
    let addr = match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        _ => format!("{ip}:{port}"),
    };
    let check = crate::reload::verify::ServingCheck {
        addr: addr.clone(),
        sni: None,
    };
    // admin.conf read once: it does not change while the API server restarts.
    let client = admin_client(dir, &addr).await;
    let start = Instant::now();
    let mut gap = false;
    loop {
        let seen = match served_as_named(dir, &cert, &check).await {
            Ok(()) => match readyz(&client).await {
                Ok(()) if gap || start.elapsed() >= RESTART_SEEN_WITHIN => {
                    return Ok((addr, cert));
                }
                Ok(()) => NotBack::NotRestarted { addr: addr.clone() },
                Err(problem) => NotBack::NotReady {
                    addr: addr.clone(),
                    path: cert.clone(),
                    problem: problem.to_string(),
                },
            },
            Err(seen) => seen,
        };
        gap |= matches!(seen, NotBack::NotServing { .. } | NotBack::NotReady { .. });
        if start.elapsed() >= timeout {
            return Err(seen);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The API server's flag naming the certificate it serves.
const TLS_CERT_FILE: &str = "tls-cert-file";

/// The certificate an API server manifest serves (`--tls-cert-file`).
pub fn serving_cert(manifest: &[u8]) -> Option<String> {
    super::manifest::Manifest::parse(&String::from_utf8_lossy(manifest))
        .ok()?
        .flag(TLS_CERT_FILE)
}

/// Whether `check`'s address serves the certificate at the node path
/// `cert` (read beneath its directory's handle, as adopt's gate reads a
/// target: certsync's pod writes its targets).
async fn served_as_named(
    dir: &Path,
    cert: &str,
    check: &crate::reload::verify::ServingCheck,
) -> Result<(), NotBack> {
    use rustls_pki_types::{CertificateDer, pem::PemObject as _};
    let (parent, name) = cert.rsplit_once('/').unwrap_or(("/", cert));
    let unread = |problem: String| NotBack::Unread {
        path: cert.to_owned(),
        problem,
    };
    let pem = read_beneath(dir, parent, name).map_err(|e| unread(e.to_string()))?;
    let expected = CertificateDer::from_pem_slice(&pem)
        .map(|der| crate::bundle::sha256(&der))
        .map_err(|e| unread(e.to_string()))?;
    match check.served(Duration::from_secs(3)).await {
        Ok(fp) if fp == expected => Ok(()),
        served => Err(NotBack::NotServing {
            addr: check.addr.clone(),
            served: served.map_or_else(|e| e.to_string(), |fp| crate::reload::verify::short(&fp)),
            path: cert.to_owned(),
            expected: crate::reload::verify::short(&expected),
        }),
    }
}

/// Why `/readyz` through admin.conf did not answer ok.
#[derive(Debug, thiserror::Error)]
pub enum AdminReadyz {
    #[error("{0}")]
    Admin(Box<KubeadmError>),
    #[error("https://{addr}: {source}")]
    Url {
        addr: String,
        source: http::uri::InvalidUri,
    },
    #[error("{0}")]
    Client(#[from] crate::source::client::ClientError),
    #[error("{0}")]
    Request(#[from] http::Error),
    #[error("no answer within 5 s")]
    Timeout,
    #[error("{}", crate::error_chain(.0))]
    Answer(#[from] kube::Error),
}

/// A client for `addr` with admin.conf's credentials and CA data.
async fn admin_client(dir: &Path, addr: &str) -> Result<kube::Client, AdminReadyz> {
    let mut config = super::admin::config(&host(dir, super::admin::ADMIN))
        .await
        .map_err(|e| AdminReadyz::Admin(Box::new(e)))?;
    config.cluster_url = format!("https://{addr}")
        .parse()
        .map_err(|source| AdminReadyz::Url {
            addr: addr.to_owned(),
            source,
        })?;
    // certsync's own client, as every kubeadm command's: kube's default
    // one logs each 500 of a restarting API server as an ERROR line.
    Ok(crate::source::client::ClientSettings::default().client_for(&config)?)
}

/// `GET /readyz` through `client` (from [`admin_client`]; its error, when
/// it could not be built).
async fn readyz(client: &Result<kube::Client, AdminReadyz>) -> Result<(), ReadyzProblem<'_>> {
    let client = client.as_ref().map_err(ReadyzProblem::NoClient)?;
    let request = http::Request::get("/readyz").body(Vec::new())?;
    match tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await {
        Err(_) => Err(AdminReadyz::Timeout.into()),
        Ok(answer) => Ok(answer.map(|_| ())?),
    }
}

/// Why one `/readyz` through admin.conf failed: the client (built once)
/// or this answer.
#[derive(Debug, thiserror::Error)]
enum ReadyzProblem<'c> {
    #[error("{0}")]
    NoClient(&'c AdminReadyz),
    #[error("{0}")]
    Answer(#[from] AdminReadyz),
}

impl From<http::Error> for ReadyzProblem<'_> {
    fn from(e: http::Error) -> Self {
        Self::Answer(e.into())
    }
}

impl From<kube::Error> for ReadyzProblem<'_> {
    fn from(e: kube::Error) -> Self {
        Self::Answer(e.into())
    }
}
