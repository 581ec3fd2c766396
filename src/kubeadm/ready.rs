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

use super::error::KubeadmError;
use super::node;
use super::paths::host;
use super::plan;
use super::seen::Seen;

/// One `GET /readyz` on certsync's admin port, within 3 s: `Ok` when the
/// pod of `generation` answers ready.
pub async fn look(addr: SocketAddr, generation: &str) -> Result<(), Seen> {
    let answer = match get_readyz(addr).await {
        Err(ReadyzError::Timeout { .. }) => return Err(Seen::Silent { addr }),
        Err(e) => {
            return Err(Seen::Nothing {
                addr,
                problem: e.to_string(),
            });
        }
        Ok(answer) => answer,
    };
    let body = crate::escape(answer.body.trim()).into_owned();
    match answer.generation {
        Some(t) if t == generation && answer.status == 200 => Ok(()),
        Some(t) if t == generation => Err(Seen::Starting {
            generation: t,
            body,
        }),
        Some(t) => Err(Seen::Earlier {
            generation: crate::escape(&t).into_owned(),
        }),
        None => Err(Seen::Ungenerated {
            status: answer.status,
            body,
        }),
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
    Body(Box<dyn std::error::Error + Send + Sync>),
    #[error("no answer within {secs}s")]
    Timeout { secs: u64 },
}

/// How long `/readyz` may take to answer, and how much of it is read.
const READYZ_TIMEOUT: Duration = Duration::from_secs(3);
const READYZ_LIMIT: usize = 64 << 10;

/// What certsync's `/readyz` answered: its status, the generation of the
/// pod that answered ([`crate::admin::GENERATION_HEADER`]) and its body
/// (capped).
pub(super) struct Readyz {
    pub status: u16,
    pub generation: Option<String>,
    pub body: String,
}

/// `GET http://ADDR/readyz`, within [`READYZ_TIMEOUT`]: adopt's gate and
/// `kubeadm status` ask it the same way.
pub(super) async fn get_readyz(addr: SocketAddr) -> Result<Readyz, ReadyzError> {
    let ask = async {
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
        let generation = resp
            .headers()
            .get(crate::admin::GENERATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = http_body_util::Limited::new(resp.into_body(), READYZ_LIMIT)
            .collect()
            .await
            .map_err(ReadyzError::Body)?
            .to_bytes();
        driver.abort();
        Ok(Readyz {
            status,
            generation,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(READYZ_TIMEOUT, ask)
        .await
        .map_err(|_| ReadyzError::Timeout {
            secs: READYZ_TIMEOUT.as_secs(),
        })?
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
pub(super) fn read_beneath(dir: &Path, target: &str, name: &str) -> Result<Vec<u8>, KubeadmError> {
    use std::io::Read as _;
    let at = Path::new(target).join(name);
    let opened = super::moves::open_beneath(dir, target)
        .map_err(|e| KubeadmError::file(Path::new(target), e))?;
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
    out: &mut super::out::Out,
) -> Result<(), Seen> {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "waiting up to {} for certsync's pod (generation {generation}) to answer ready at {addr} \
         with a live pair in every target",
        humantime::format_duration(timeout)
    );
    let mut said = Duration::ZERO;
    super::wait::poll(timeout, Duration::from_secs(1), async |elapsed| {
        let seen = match look(addr, generation).await {
            Ok(()) => match dead_targets(dir).into_iter().next() {
                None => return Ok(()),
                Some((target, why)) => Seen::DeadTarget { target, why },
            },
            Err(seen) => seen,
        };
        // What it waits for and what it saw, every few seconds: a wait of
        // minutes is never silent.
        if elapsed >= said + PROGRESS_EVERY && elapsed < timeout {
            let pod = pod_state(dir, PROGRESS_EVERY / 2).await;
            let _ = writeln!(
                out,
                "  still waiting ({} s): {seen}; {pod}",
                elapsed.as_secs()
            );
            said = elapsed;
        }
        Err(seen)
    })
    .await
}

/// How often a wait says what it last saw.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

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
    let mut quiet_since = Duration::ZERO;
    super::wait::poll(limit, Duration::from_secs(1), async |elapsed| {
        let answers = match look(addr, generation).await {
            Ok(()) => true,
            Err(seen) => seen.answers(),
        };
        if answers {
            quiet_since = elapsed;
        } else if elapsed >= quiet_since + Duration::from_secs(5) {
            return Ok(());
        }
        Err(Seen::StillAnswers {
            pod: pod.to_owned(),
            addr,
            secs: limit.as_secs(),
        })
    })
    .await
}

/// The kubelet's view of certsync's pod, where the API server can be
/// asked within `limit`: its mirror pod `kube-system/certsync-NODE` (NODE
/// from etcd's `--name`, which kubeadm sets to the node's name), its
/// container's state and the last line it logged (of the instance that
/// ended, when it is restarting: the cause it gave). What to check on the
/// node otherwise.
pub async fn pod_state(dir: &Path, limit: Duration) -> String {
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
        let client = super::api::client(&config).map_err(|e| e.to_string())?;
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, "kube-system");
        let Some(pod) = pods.get_opt(&name).await.map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        // The instance that ended, when the container is not running: its
        // last line is the cause (`Cannot assign requested address`).
        let previous = container(&pod).is_some_and(|c| {
            c.restart_count > 0 && c.state.as_ref().is_none_or(|s| s.running.is_none())
        });
        let params = kube::api::LogParams {
            container: Some("certsync".into()),
            tail_lines: Some(1),
            limit_bytes: Some(64 * 1024),
            previous,
            ..Default::default()
        };
        let log = pods.logs(&name, &params).await.ok();
        Ok::<_, String>(Some((pod, log)))
    };
    match tokio::time::timeout(limit, ask).await {
        Ok(Ok(Some((pod, log)))) => described(&name, &pod, log.as_deref()).unwrap_or_else(|| {
            format!("kube-system/{name} has no container status yet; check {ON_NODE}")
        }),
        Ok(Ok(None)) => {
            format!("no mirror pod kube-system/{name} in the API server; check {ON_NODE}")
        }
        Ok(Err(e)) => format!(
            "the API server could not be asked for kube-system/{name} ({}); check {ON_NODE}",
            crate::escape(&e)
        ),
        Err(_) => format!(
            "the API server did not answer for kube-system/{name} within {} s; check {ON_NODE}",
            limit.as_secs()
        ),
    }
}

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};

fn container(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

/// The mirror pod `name`'s container in words: image, state, the state
/// it last ended in, and its last log line (the container's words,
/// escaped and cut: it may be anything); `None` without a status.
pub(super) fn described(name: &str, pod: &Pod, log: Option<&str>) -> Option<String> {
    const SAID_MAX: usize = 600;
    let c = container(pod)?;
    let state = |s: &ContainerState| {
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
    if let Some(line) = log.and_then(|l| l.lines().rfind(|l| !l.trim().is_empty())) {
        said.push_str(&format!("; its last log line: {line}"));
    }
    // Every field is the container's or the kubelet's words: runs of
    // white space folded (padding that wraps a forged line onto a row of
    // its own), cut, then escaped.
    let folded: String = said.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = folded.chars().take(SAID_MAX).collect();
    Some(crate::escape(&cut).into_owned())
}
