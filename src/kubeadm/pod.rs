//! What names certsync's static pod: the generation token adopt gives it
//! (a digest of its configuration and image) and the address its probes,
//! adopt and status ask. A leaf: adopt's plan writes these, its gate,
//! its undo and status read them.

use std::net::{IpAddr, SocketAddr};

/// The token that names certsync's pod for a configuration, the CAs'
/// trust (the bundles' digest: a renewed CA is a new pod, whose read-only
/// mount of the CA file is the renewed one) and an image.
pub fn generation(config: &[u8], trust: &str, image: &str) -> String {
    let mut bytes = config.to_vec();
    bytes.push(0);
    bytes.extend_from_slice(trust.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(image.as_bytes());
    super::digest(&bytes)[..16].to_owned()
}

/// The `--generation=` a pod manifest of adopt's gives certsync, if any
/// (one written before generations has none).
pub fn of_pod(manifest: &[u8]) -> Option<String> {
    String::from_utf8_lossy(manifest)
        .lines()
        .find_map(|l| l.trim().strip_prefix("- --generation="))
        .map(|g| g.trim().to_owned())
}

/// Where certsync listens when its pod names no address: the default of
/// `certsync kubeadm adopt --admin-addr` (a pod adopt wrote before the
/// option).
pub const DEFAULT_PROBE: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9814);

/// Where to ask certsync listening on `admin`: an unspecified address
/// (0.0.0.0, ::) on loopback, as its pod's probes do.
pub fn probe_addr(admin: SocketAddr) -> SocketAddr {
    match admin.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), admin.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), admin.port())
        }
        _ => admin,
    }
}

/// The image, `--admin-addr` and readiness probe address of the certsync
/// container in the pod manifest `text`.
pub fn probe(text: &str) -> Result<(Option<String>, Option<String>, SocketAddr), String> {
    use k8s_openapi::api::core::v1::Pod;
    let pod: Pod = crate::files::parse_yaml(text).map_err(|e| format!("not a Pod ({e})"))?;
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "certsync"))
        .ok_or("no container named certsync")?;
    let admin = container.args.iter().flatten().find_map(|a| {
        a.strip_prefix("--admin-addr=")
            .map(|v| crate::escape(v).into_owned())
    });
    let get = container
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .ok_or("no readinessProbe httpGet")?;
    let host = get.host.as_deref().unwrap_or("127.0.0.1");
    let ip: IpAddr = host.parse().map_err(|_| {
        format!(
            "readinessProbe host {:?} is not an IP address",
            crate::escape(host)
        )
    })?;
    let port = match &get.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => u16::try_from(*p).ok(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(p) => p.parse().ok(),
    }
    .filter(|p| *p != 0)
    .ok_or("readinessProbe port is not a port number")?;
    Ok((
        container
            .image
            .as_deref()
            .map(|i| crate::escape(i).into_owned()),
        admin,
        SocketAddr::new(ip, port),
    ))
}
