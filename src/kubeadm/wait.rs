//! adopt's and revert's waits: one [`poll`] with a deadline whose last look
//! is what was seen ([`Seen`]).
//!
//! adopt's gate ([`ready`]), passed before any component manifest names
//! certsync's targets: certsync's pod of this adoption answers `/readyz` with
//! the generation token adopt gave it (an earlier pod on the same port is not
//! taken for it), and every target holds a live pair its CA issued. A liveness
//! gate, not a security boundary: a local process can answer with the
//! (predictable) token, and certsync's container reads the CA keys, so it is
//! host root already (docs/security.md); what it cannot do is make adopt or
//! revert take its files for kubeadm's.
//!
//! [`api_server_back`] ends adopt and revert: "adopted" or "reverted" is said
//! only of a node whose API server serves again on the files its manifest names.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;

use super::admin::Admin;
use super::error::KubeadmError;
use super::manifest::Manifest;
use super::node;
use super::plan;
use super::seen::{Problem, Seen};
use super::trust::{CaEnd, in_place};
use crate::shutdown::poll;
use crate::validate::rfc3339;

/// `Ok` when the pod of `generation` answers ready.
async fn look(addr: SocketAddr, generation: &str) -> Result<(), Seen> {
    let answer = get_readyz(addr).await?;
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

const READYZ_TIMEOUT: Duration = Duration::from_secs(3);
const READYZ_LIMIT: usize = 64 << 10;

/// certsync's `/readyz` answer and its [`crate::admin::GENERATION_HEADER`].
pub(super) struct Readyz {
    pub status: u16,
    pub generation: Option<String>,
    pub body: String,
}

pub(super) async fn get_readyz(addr: SocketAddr) -> Result<Readyz, Seen> {
    let ask = async {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        let driver = tokio::spawn(conn);
        let req = http::Request::get("/readyz")
            .header(http::header::HOST, addr.to_string())
            .body(http_body_util::Empty::<bytes::Bytes>::new())?;
        let resp = send.send_request(req).await?;
        let status = resp.status().as_u16();
        let generation = resp
            .headers()
            .get(crate::admin::GENERATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = http_body_util::Limited::new(resp.into_body(), READYZ_LIMIT)
            .collect()
            .await?
            .to_bytes();
        driver.abort();
        Ok::<_, Problem>(Readyz {
            status,
            generation,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    match tokio::time::timeout(READYZ_TIMEOUT, ask).await {
        Err(_) => Err(Seen::Silent { addr }),
        Ok(answer) => answer.map_err(|problem| Seen::Nothing { addr, problem }),
    }
}

/// Targets without a live pair of their CA's (as the plan read them: `cas`): (node path, why).
pub fn dead_targets(dir: &Path, cas: &[CaEnd]) -> Vec<(String, String)> {
    let now = crate::validate::unix_seconds(std::time::SystemTime::now());
    let mut dead = Vec::new();
    for c in plan::certs(dir, None) {
        let (ca, target) = (c.ca_crt(), c.target);
        let ends = || -> Result<_, Problem> {
            let read = |f: &str| read_beneath(dir, &target, f);
            let (crt, key) = (read("tls.crt")?, read("tls.key")?);
            Ok(node::sound_pair(&crt, &key, &ca, in_place(cas, &ca)?)?)
        };
        match ends() {
            Err(e) => dead.push((target, e.to_string())),
            Ok(t) if t <= now => dead.push((target, format!("ended at {}", rfc3339(t)))),
            Ok(_) => {}
        }
    }
    dead
}

/// The file `name` of the directory `target` (a node path), opened beneath
/// its handle: a link the pod left there never leads adopt (root) out of it,
/// and a FIFO is refused without an open that blocks.
fn read_beneath(dir: &Path, target: &str, name: &str) -> Result<Vec<u8>, KubeadmError> {
    let opened = super::moves::open_beneath(dir, target)
        .map_err(|e| KubeadmError::file(Path::new(target), e))?;
    crate::beneath::walk(
        crate::beneath::Start::Beneath(std::os::fd::AsFd::as_fd(&opened), Path::new(target)),
        Path::new(name),
        crate::beneath::Links::Follow,
        &mut |_| Ok(()),
    )
    .and_then(|w| w.read(1 << 20))
    .map_err(|e| KubeadmError::file(&Path::new(target).join(name), e))
}

/// The first of `written` (node path, bytes written) holding other bytes now, read as every
/// node file is: something wrote it since, and no component may be pointed at it.
pub fn first_changed<'a>(
    dir: &Path,
    written: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Option<String>, KubeadmError> {
    for (node_path, bytes) in written {
        if node::read_optional(dir, node_path)?.as_deref() != Some(bytes) {
            return Ok(Some(node_path.to_owned()));
        }
    }
    Ok(None)
}

/// adopt's gate on the node `dir` (its CAs as the plan read them: `cas`), saying every
/// [`PROGRESS_EVERY`] what it saw and the pod's state, asked through `admin` (a wait of
/// minutes is never silent).
pub async fn ready(
    (dir, cas): (&Path, &[CaEnd]),
    addr: SocketAddr,
    generation: &str,
    (timeout, admin, mirror): Within<'_>,
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
    poll(timeout, Duration::from_secs(1), async |elapsed| {
        let Err(seen) = ready_now((dir, cas), addr, generation).await else {
            return Ok(());
        };
        if elapsed >= said + PROGRESS_EVERY && elapsed < timeout {
            let pod = pod_state(mirror, admin, PROGRESS_EVERY / 2).await;
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

/// One look: the pod of `generation` answers ready and every target holds a live pair.
pub async fn ready_now(
    (dir, cas): (&Path, &[CaEnd]),
    addr: SocketAddr,
    generation: &str,
) -> Result<(), Seen> {
    look(addr, generation).await?;
    match dead_targets(dir, cas).into_iter().next() {
        None => Ok(()),
        Some((target, why)) => Err(Seen::DeadTarget { target, why }),
    }
}

const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How long after its manifest is taken out a certsync pod is surely
/// stopped: the kubelet notices a removed static pod manifest within its
/// 20 s file check, then kills the container within its grace period
/// (adopt's pod gives 10 s; one an earlier certsync wrote, the default 30 s
/// less what the first check took).
pub const STOPPED_AFTER: Duration = Duration::from_secs(40);

/// certsync's pod `pod`, asked at `asked` (address, generation), taken out
/// by `take`, then stopped: silent for 5 s in a row within twice
/// [`STOPPED_AFTER`] (else [`Seen::StillAnswers`]), and [`STOPPED_AFTER`]
/// passed. Only then is a file the host writes out of that container's reach
/// (a rename over a file it mounts read-only leaves the new one writable to it).
pub async fn take_out<E>(
    take: impl FnOnce() -> Result<(), E>,
    asked: (SocketAddr, Option<&str>),
    pod: &str,
) -> Result<Result<(), Seen>, E> {
    let removed = Instant::now();
    take()?;
    let (addr, generation) = (asked.0, asked.1.unwrap_or_default());
    let limit = STOPPED_AFTER * 2;
    let mut quiet_since = Duration::ZERO;
    let stopped = poll(limit, Duration::from_secs(1), async |elapsed| {
        if still_answers(&look(addr, generation).await, asked.1.is_some()) {
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
    .await;
    if stopped.is_ok()
        && let Some(left) = STOPPED_AFTER.checked_sub(removed.elapsed())
    {
        tokio::time::sleep(left).await;
    }
    Ok(stopped)
}

/// Whether the pod taken out still answers: one of its generation; when that
/// is not `known`, any answer, since whose it is cannot be told.
fn still_answers(seen: &Result<(), Seen>, known: bool) -> bool {
    match seen {
        Ok(()) | Err(Seen::Starting { .. }) => true,
        Err(Seen::Earlier { .. } | Seen::Ungenerated { .. }) => !known,
        Err(_) => false,
    }
}

/// How a wait for certsync's pod asks after it: for how long, through which admin.conf,
/// and its mirror pod ([`super::plan::Plan::mirror`]).
pub type Within<'a> = (Duration, &'a Admin, Option<&'a str>);

/// The kubelet's view of certsync's pod within `limit`, asked through `admin`:
/// its mirror pod `kube-system/certsync-NODE` and its last log line; else what
/// to check on the node.
pub async fn pod_state(mirror: Option<&str>, admin: &Admin, limit: Duration) -> String {
    const ON_NODE: &str = "on the node: the kubelet's log (`journalctl -u kubelet`), \
        `crictl ps -a --name certsync` and `crictl logs` of its container";
    let Some(name) = mirror else {
        return format!("the node's name is unknown (no --name in etcd.yaml); check {ON_NODE}");
    };
    let ask = async {
        let client = super::admin::client(admin, None)?;
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, "kube-system");
        let Some(pod) = pods.get_opt(name).await? else {
            return Ok(None);
        };
        // Not running: the last line of the instance that ended is the cause.
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
        let log = pods.logs(name, &params).await.ok();
        Ok::<_, Problem>(Some((pod, log)))
    };
    match tokio::time::timeout(limit, ask).await {
        Ok(Ok(Some((pod, log)))) => described(name, &pod, log.as_deref()).unwrap_or_else(|| {
            format!("kube-system/{name} has no container status yet; check {ON_NODE}")
        }),
        Ok(Ok(None)) => {
            format!("no mirror pod kube-system/{name} in the API server; check {ON_NODE}")
        }
        Ok(Err(e)) => format!(
            "the API server could not be asked for kube-system/{name} ({}); check {ON_NODE}",
            crate::escape(&e.to_string())
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

/// The mirror pod `name`'s container in words; `None` without a status.
pub(super) fn described(name: &str, pod: &Pod, log: Option<&str>) -> Option<String> {
    const SAID_MAX: usize = 600;
    let c = container(pod)?;
    let or_none = |s: &Option<String>| s.clone().unwrap_or_default();
    let state = |s: &ContainerState| match (&s.waiting, &s.terminated) {
        (Some(w), _) => format!("waiting: {} {}", or_none(&w.reason), or_none(&w.message)),
        (None, Some(t)) => format!(
            "terminated: {} (exit code {}) {}",
            or_none(&t.reason),
            t.exit_code,
            or_none(&t.message)
        ),
        (None, None) => "running".to_owned(),
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
    // The container's words: white space folded (padding that wraps a forged
    // line onto a row of its own), cut, escaped.
    let folded: String = said.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = folded.chars().take(SAID_MAX).collect();
    Some(crate::escape(&cut).into_owned())
}

/// A changed manifest's restart shows within this (the kubelet reads them
/// every 20 s); one written back to what runs restarts nothing.
const RESTART_SEEN_WITHIN: Duration = Duration::from_secs(60);

/// After the API server's manifest `(path, bytes)` was written (`None` or a
/// zero `timeout`: no wait), the API server back on the `files` it names: at
/// its own address (admin.conf's server may be a load balancer) it serves
/// what its `--tls-cert-file` holds now (certsync may renew it), and `/readyz`
/// answers through admin.conf after a gap or once [`RESTART_SEEN_WITHIN`] has
/// passed (a change keeping the certificate is proven by the gap).
pub async fn api_server_back(
    dir: &Path,
    admin: &Admin,
    manifest: Option<(&str, &[u8])>,
    timeout: Duration,
    (files, did): (&str, &'static str),
) -> Result<String, KubeadmError> {
    let Some((manifest_path, manifest)) = manifest.filter(|_| !timeout.is_zero()) else {
        return Ok(String::new());
    };
    let start = Instant::now();
    let back = async {
        let m = Manifest::read(manifest).ok();
        let flag = |f: &str| m.as_ref().and_then(|m| m.flag(f));
        let (Some(ip), Some(cert)) = (flag("advertise-address"), flag("tls-cert-file")) else {
            return Err(Seen::NoAddress {
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
        // Made once: one admin.conf that cannot be used (or no URL) ends the wait.
        let client = (format!("https://{addr}").parse())
            .map_err(|e| format!("https://{}: {e}", crate::escape(&addr)).into())
            .and_then(|url| super::admin::client(admin, Some(url)))
            .map_err(|problem| Seen::NoAdmin { problem })?;
        let mut gap = false;
        poll(timeout, Duration::from_secs(2), async |elapsed| {
            let seen = match served_as_named(dir, &cert, &check).await {
                Ok(()) => match readyz(&client).await {
                    Ok(()) if gap || elapsed >= RESTART_SEEN_WITHIN => return Ok(()),
                    Ok(()) => Seen::NotRestarted { addr: addr.clone() },
                    Err(problem) => Seen::Readyz {
                        addr: addr.clone(),
                        path: cert.clone(),
                        problem,
                    },
                },
                Err(seen) => seen,
            };
            gap |= matches!(seen, Seen::NotServing { .. } | Seen::Readyz { .. });
            Err(seen)
        })
        .await?;
        Ok((addr, cert))
    };
    let (addr, cert) = back.await.map_err(|seen| KubeadmError::NotBack {
        did,
        waited: start.elapsed(),
        seen: Box::new(seen),
    })?;
    Ok(format!(
        "waited for the API server to restart on {files} files: {addr} serves {cert} and is \
         ready ({} s)\n",
        start.elapsed().as_secs()
    ))
}

/// Whether `check`'s address serves the certificate at node path `cert`
/// (read beneath its directory: the pod writes it).
async fn served_as_named(
    dir: &Path,
    cert: &str,
    check: &crate::reload::verify::ServingCheck,
) -> Result<(), Seen> {
    let (parent, name) = cert.rsplit_once('/').unwrap_or(("/", cert));
    let read = || -> Result<_, Problem> {
        let pem = read_beneath(dir, parent, name)?;
        Ok(crate::bundle::sha256(&crate::pem::first_certificate(&pem)?))
    };
    let expected = read().map_err(|problem| Seen::Unread {
        path: cert.to_owned(),
        problem,
    })?;
    match check.served(Duration::from_secs(3)).await {
        Ok(fp) if fp == expected => Ok(()),
        served => Err(Seen::NotServing {
            addr: check.addr.clone(),
            served: served.map_or_else(|e| e.to_string(), |fp| crate::reload::verify::short(&fp)),
            path: cert.to_owned(),
            expected: crate::reload::verify::short(&expected),
        }),
    }
}

async fn readyz(client: &kube::Client) -> Result<(), Problem> {
    let request = http::Request::get("/readyz").body(Vec::new())?;
    match tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await {
        Err(_) => Err("no answer within 5 s".into()),
        Ok(answer) => Ok(answer.map(|_| ())?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod whose manifest names no generation adopt can read (one that
    /// is not the Pod adopt writes) is taken for still running while
    /// anything answers on its address: an answer of another generation,
    /// or of none, may be it.
    #[test]
    fn attack_a_pod_of_unknown_generation_is_not_stopped_while_anything_answers() {
        let addr: SocketAddr = ([127, 0, 0, 1], 9).into();
        let earlier = || {
            Err(Seen::Earlier {
                generation: "x".into(),
            })
        };
        let ungenerated = || {
            Err(Seen::Ungenerated {
                status: 200,
                body: String::new(),
            })
        };
        assert!(still_answers(&earlier(), false));
        assert!(still_answers(&ungenerated(), false));
        assert!(!still_answers(&earlier(), true), "another generation's pod");
        assert!(still_answers(&Ok(()), true));
        assert!(
            !still_answers(&Err(Seen::Silent { addr }), false),
            "nothing answers"
        );
    }
}
