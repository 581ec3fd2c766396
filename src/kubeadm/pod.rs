//! certsync's static pod: its manifest, built as a typed Pod (no value, an
//! image or an address, can change its shape), the generation token adopt
//! gives it (a digest of its configuration and image) and the address its
//! probes, adopt and status ask. A leaf: adopt's plan writes these, its
//! gate, its undo and status read them.

use std::net::{IpAddr, SocketAddr};

use super::manifest::CONFIG;

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

/// Why a pod manifest names no address to ask certsync at.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("not a Pod ({0})")]
    NotAPod(#[source] crate::files::YamlError),
    #[error("no container named certsync")]
    NoContainer,
    #[error("no readinessProbe httpGet")]
    NoHttpGet,
    /// `host` escaped.
    #[error("readinessProbe host {host:?} is not an IP address")]
    Host { host: String },
    #[error("readinessProbe port is not a port number")]
    Port,
}

/// The image, `--admin-addr` and readiness probe address of the certsync
/// container in the pod manifest `text`.
pub fn probe(text: &str) -> Result<(Option<String>, Option<String>, SocketAddr), ProbeError> {
    use k8s_openapi::api::core::v1::Pod;
    let pod: Pod = crate::files::parse_yaml(text).map_err(ProbeError::NotAPod)?;
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "certsync"))
        .ok_or(ProbeError::NoContainer)?;
    let admin = container.args.iter().flatten().find_map(|a| {
        a.strip_prefix("--admin-addr=")
            .map(|v| crate::escape(v).into_owned())
    });
    let get = container
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .ok_or(ProbeError::NoHttpGet)?;
    let host = get.host.as_deref().unwrap_or("127.0.0.1");
    let ip: IpAddr = host.parse().map_err(|_| ProbeError::Host {
        host: crate::escape(host).into_owned(),
    })?;
    let port = match &get.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => u16::try_from(*p).ok(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(p) => p.parse().ok(),
    }
    .filter(|p| *p != 0)
    .ok_or(ProbeError::Port)?;
    Ok((
        container
            .image
            .as_deref()
            .map(|i| crate::escape(i).into_owned()),
        admin,
        SocketAddr::new(ip, port),
    ))
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

/// certsync's static pod manifest (YAML, after a comment line).
pub fn manifest(spec: &Spec) -> Result<String, serde_yaml_ng::Error> {
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let admin = spec.admin;
    // The probes ask where certsync listens; an unspecified address
    // (0.0.0.0, ::) listens on loopback too.
    let probe = probe_addr(admin);
    let get = |path: &str| core::HTTPGetAction {
        host: Some(probe.ip().to_string()),
        path: Some(path.to_owned()),
        port: IntOrString::Int(i32::from(probe.port())),
        ..Default::default()
    };
    let mounts = spec
        .mounts
        .iter()
        .map(|m| core::VolumeMount {
            mount_path: m.path.clone(),
            name: m.name.clone(),
            read_only: m.read_only.then_some(true),
            ..Default::default()
        })
        .collect();
    let volumes = spec
        .mounts
        .iter()
        .map(|m| core::Volume {
            name: m.name.clone(),
            host_path: Some(core::HostPathVolumeSource {
                path: m.path.clone(),
                type_: Some(m.kind.to_owned()),
            }),
            ..Default::default()
        })
        .collect();
    let generation = spec.generation;
    let quantity = |q: &str| Quantity(q.to_owned());
    let container = core::Container {
        name: "certsync".into(),
        image: Some(spec.image.to_owned()),
        args: Some(vec![
            "run".into(),
            format!("--config={CONFIG}"),
            format!("--admin-addr={admin}"),
            format!("--generation={generation}"),
        ]),
        liveness_probe: Some(core::Probe {
            http_get: Some(get("/livez")),
            ..Default::default()
        }),
        readiness_probe: Some(core::Probe {
            http_get: Some(get("/readyz")),
            ..Default::default()
        }),
        startup_probe: Some(core::Probe {
            http_get: Some(get("/readyz")),
            failure_threshold: Some(60),
            period_seconds: Some(2),
            ..Default::default()
        }),
        resources: Some(core::ResourceRequirements {
            limits: Some([("memory".into(), quantity("64Mi"))].into()),
            requests: Some(
                [
                    ("cpu".into(), quantity("10m")),
                    ("memory".into(), quantity("16Mi")),
                ]
                .into(),
            ),
            ..Default::default()
        }),
        security_context: Some(core::SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(core::Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            read_only_root_filesystem: Some(true),
            run_as_user: Some(0),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        ..Default::default()
    };
    let pod = core::Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("certsync".into()),
            namespace: Some("kube-system".into()),
            annotations: Some(
                [(
                    "certsync.io/config-sha256".into(),
                    spec.config_hash.to_owned(),
                )]
                .into(),
            ),
            labels: Some(
                [
                    ("component".into(), "certsync".into()),
                    ("tier".into(), "control-plane".into()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(core::PodSpec {
            automount_service_account_token: Some(false),
            containers: vec![container],
            host_network: Some(true),
            priority_class_name: Some("system-node-critical".into()),
            security_context: Some(core::PodSecurityContext {
                seccomp_profile: Some(core::SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            termination_grace_period_seconds: Some(10),
            volumes: Some(volumes),
            ..Default::default()
        }),
        status: None,
    };
    let body = serde_yaml_ng::to_string(&pod)?;
    Ok(format!(
        "# Written by `certsync kubeadm adopt` (docs/guides/kubeadm-control-plane.md).\n{body}"
    ))
}
