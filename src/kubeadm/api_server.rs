//! The wait adopt and revert end with: after either changed the API
//! server's manifest, the API server has restarted on the files it names,
//! so "adopted" or "reverted" is said only of a node that serves (an
//! operator who goes on at that line must not meet a node still
//! restarting, nor one that never will).

use std::path::Path;
use std::time::Duration;

use super::error::KubeadmError;
use super::paths::host;
use super::seen::NotBack;

/// A restart for a changed manifest shows within this: the kubelet reads
/// static pod manifests every 20 s, and the API server answers /readyz
/// with a failure from the moment it is told to stop. A manifest written
/// back to what runs (adopt right after a `kubeadm upgrade` the kubelet has
/// not noticed yet) restarts nothing: ready, with the certificate the
/// manifest names, and no gap by then is the API server as it should be.
const RESTART_SEEN_WITHIN: Duration = Duration::from_secs(60);

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
pub async fn back(
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
    // admin.conf read once: it does not change while the API server
    // restarts, so one that cannot be used ends the wait at once.
    let client = admin_client(dir, &addr)
        .await
        .map_err(|e| NotBack::NoAdmin {
            problem: e.to_string(),
        })?;
    let mut gap = false;
    super::wait::poll(timeout, Duration::from_secs(2), async |elapsed| {
        let seen = match served_as_named(dir, &cert, &check).await {
            Ok(()) => match readyz(&client).await {
                Ok(()) if gap || elapsed >= RESTART_SEEN_WITHIN => return Ok(()),
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
        Err(seen)
    })
    .await?;
    Ok((addr, cert))
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
    let pem = super::ready::read_beneath(dir, parent, name).map_err(|e| unread(e.to_string()))?;
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
    Ok(super::api::client(&config)?)
}

/// `GET /readyz` through `client` (from [`admin_client`]), within 5 s.
async fn readyz(client: &kube::Client) -> Result<(), AdminReadyz> {
    let request = http::Request::get("/readyz").body(Vec::new())?;
    match tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await {
        Err(_) => Err(AdminReadyz::Timeout),
        Ok(answer) => Ok(answer.map(|_| ())?),
    }
}
