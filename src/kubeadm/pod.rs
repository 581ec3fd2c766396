//! certsync's static pod: its manifest, built as a typed Pod (no value, an
//! image or an address, can change its shape), the generation token adopt
//! gives it (a digest of its configuration and image) and the address its
//! probes, adopt and status ask. Adopt's plan writes these; its waits
//! and status read them.

use std::net::{IpAddr, SocketAddr};

use super::manifest::CONFIG;
use super::seen::Seen;

/// The token that names certsync's pod for a configuration, the CAs'
/// trust (the bundles' digest: a renewed CA is a new pod, whose read-only
/// mount of the CA file is the renewed one) and the pod itself as written
/// without its generation (`shape`: image, admin address, probes, mounts).
/// Every option that changes the pod changes it, so adopt's gate counts
/// only the pod it wrote: an earlier one answering on the same port, with
/// the same configuration but another address, is not it.
pub fn generation(config: &[u8], trust: &str, shape: &str) -> String {
    let mut bytes = config.to_vec();
    bytes.push(0);
    bytes.extend_from_slice(trust.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(shape.as_bytes());
    super::paths::digest(&bytes)[..16].to_owned()
}

/// Where certsync's pod of the manifest `bytes` is asked (its readiness
/// probe; in one adopt wrote before `--admin-addr`, none: the option's
/// default, where that pod listens) and the `--generation=` adopt gave
/// it, if any (one written before generations has none).
pub fn asked(bytes: &[u8]) -> (SocketAddr, Option<String>) {
    let text = String::from_utf8_lossy(bytes);
    let generation = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("- --generation="))
        .map(|g| g.trim().to_owned());
    (
        probe(&text).map_or(super::options::DEFAULT_ADMIN_ADDR, |(_, _, a)| a),
        generation,
    )
}

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
pub fn probe(text: &str) -> Result<(Option<String>, Option<String>, SocketAddr), Seen> {
    use k8s_openapi::api::core::v1::Pod;
    let pod: Pod = crate::files::parse_yaml(text).map_err(Seen::NotAPod)?;
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "certsync"))
        .ok_or(Seen::NoContainer)?;
    let admin = container.args.iter().flatten().find_map(|a| {
        a.strip_prefix("--admin-addr=")
            .map(|v| crate::escape(v).into_owned())
    });
    let get = container
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .ok_or(Seen::NoHttpGet)?;
    let host = get.host.as_deref().unwrap_or("127.0.0.1");
    let ip: IpAddr = host.parse().map_err(|_| Seen::Host {
        host: crate::escape(host).into_owned(),
    })?;
    let port = match &get.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => u16::try_from(*p).ok(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(p) => p.parse().ok(),
    }
    .filter(|p| *p != 0)
    .ok_or(Seen::Port)?;
    Ok((
        container
            .image
            .as_deref()
            .map(|i| crate::escape(i).into_owned()),
        admin,
        SocketAddr::new(ip, port),
    ))
}

/// Whether the certsync container of the pod manifest `text` has
/// `node_path` mounted read-only from that same host path. Anything
/// unparsable answers no: the caller refuses what it cannot prove.
pub fn mounts_read_only(text: &str, node_path: &str) -> bool {
    use k8s_openapi::api::core::v1::Pod;
    let Ok(pod) = crate::files::parse_yaml::<Pod>(text) else {
        return false;
    };
    let Some(spec) = pod.spec else { return false };
    let from_host = |name: &str| {
        spec.volumes
            .iter()
            .flatten()
            .any(|v| v.name == name && v.host_path.as_ref().is_some_and(|h| h.path == node_path))
    };
    spec.containers
        .iter()
        .filter(|c| c.name == "certsync")
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| m.mount_path == node_path && m.read_only == Some(true) && from_host(&m.name))
}

/// A hostPath volume of certsync's pod and its mount.
pub struct Mount {
    pub name: String,
    pub path: String,
    /// The hostPath type (`Directory`, `File`, `DirectoryOrCreate`).
    pub kind: &'static str,
    pub read_only: bool,
}

/// What certsync's static pod is made of.
pub struct Spec<'a> {
    pub image: &'a str,
    /// `--admin-addr`; the probes ask [`probe_addr`] of it.
    pub admin: SocketAddr,
    pub generation: &'a str,
    /// The configuration's digest (an annotation: a new one is a new pod).
    pub config_hash: &'a str,
    pub mounts: Vec<Mount>,
}

/// certsync's static pod manifest (YAML, after a comment line): a typed
/// Pod, so no value (an image, an address, a path) can change its shape.
pub fn manifest(spec: &Spec) -> Result<String, serde_yaml_ng::Error> {
    use serde_json::json;
    // The probes ask where certsync listens; an unspecified address
    // (0.0.0.0, ::) listens on loopback too.
    let probe = probe_addr(spec.admin);
    let get = |path: &str| json!({"httpGet": {"host": probe.ip().to_string(), "path": path, "port": probe.port()}});
    let mut startup = get("/readyz");
    startup["failureThreshold"] = 60.into();
    startup["periodSeconds"] = 2.into();
    let (mounts, volumes): (Vec<_>, Vec<_>) = spec
        .mounts
        .iter()
        .map(|m| {
            let mut mount = json!({"mountPath": m.path, "name": m.name});
            if m.read_only {
                mount["readOnly"] = true.into();
            }
            let volume = json!({"name": m.name, "hostPath": {"path": m.path, "type": m.kind}});
            (mount, volume)
        })
        .unzip();
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "certsync",
            "namespace": "kube-system",
            "annotations": {"certsync.io/config-sha256": spec.config_hash},
            "labels": {"component": "certsync", "tier": "control-plane"},
        },
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "certsync",
                "image": spec.image,
                "args": [
                    "run",
                    format!("--config={CONFIG}"),
                    format!("--admin-addr={}", spec.admin),
                    format!("--generation={}", spec.generation),
                ],
                "livenessProbe": get("/livez"),
                "readinessProbe": get("/readyz"),
                "startupProbe": startup,
                "resources": {
                    "limits": {"memory": "64Mi"},
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": true,
                    "runAsUser": 0,
                },
                "volumeMounts": mounts,
            }],
            "hostNetwork": true,
            "priorityClassName": "system-node-critical",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "terminationGracePeriodSeconds": 10,
            "volumes": volumes,
        },
    });
    // Through the typed Pod: a value of the wrong type is an error, and
    // the YAML is written in the Pod's own field order.
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_yaml_ng::from_value(serde_yaml_ng::to_value(pod)?)?;
    let body = serde_yaml_ng::to_string(&pod)?;
    Ok(format!(
        "# Written by `certsync kubeadm adopt` (docs/guides/kubeadm-control-plane.md).\n{body}"
    ))
}
