//! certsync's static pod: its manifest, its generation token and the address
//! its probes ask; the node's manifest read back as [`Current`].

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use super::error::KubeadmError;
use super::manifest::CONFIG;
use super::options::DEFAULT_ADMIN_ADDR;
use super::seen::Seen;

pub const POD: &str = "/etc/kubernetes/manifests/certsync.yaml";

/// The token naming certsync's pod for a configuration, the CAs' trust and
/// the pod's `shape`, so adopt's gate counts only the pod it wrote, not an
/// earlier one answering on the same port.
pub fn generation(config: &[u8], trust: &str, shape: &str) -> String {
    let bytes = [config, trust.as_bytes(), shape.as_bytes()].join(&0);
    super::paths::digest(&bytes)[..16].to_owned()
}

/// Where to ask certsync listening on `admin`: an unspecified address on
/// loopback, as its probes do.
pub fn probe_addr(admin: SocketAddr) -> SocketAddr {
    let lo: IpAddr = match admin.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        _ => return admin,
    };
    SocketAddr::new(lo, admin.port())
}

/// certsync's pod as its manifest has it. Fails closed: a manifest that is
/// not a Pod with a certsync container mounts nothing and names no generation.
#[derive(Debug)]
pub struct Current {
    pub generation: Option<String>,
    /// Or why the probe cannot be asked.
    pub probe: Result<Probe, Seen>,
    /// Node paths its container mounts read-only from the same host path.
    read_only: Vec<String>,
}

/// The container's image and `--admin-addr` (escaped), and where its
/// readiness probe asks.
#[derive(Debug)]
pub struct Probe {
    pub image: Option<String>,
    pub admin: Option<String>,
    pub addr: SocketAddr,
}

impl Current {
    /// The manifest at [`POD`] on the node at `dir` (`None`: there is none).
    pub fn read(dir: &Path) -> Result<Option<Self>, KubeadmError> {
        Ok(super::node::read_optional(dir, POD)?.map(|bytes| Self::parse(&bytes)))
    }

    pub fn parse(bytes: &[u8]) -> Self {
        Self::typed(bytes).unwrap_or_else(|why| Self {
            generation: None,
            probe: Err(why),
            read_only: Vec::new(),
        })
    }

    fn typed(bytes: &[u8]) -> Result<Self, Seen> {
        use k8s_openapi::api::core::v1::Pod;
        // Not UTF-8: the kubelet's YAML reader refuses it, so no pod runs
        // from it; read past the bad bytes it would name mounts of none.
        let text = std::str::from_utf8(bytes).map_err(|_| Seen::NotUtf8)?;
        let pod: Pod = crate::files::parse_yaml(text).map_err(Seen::NotAPod)?;
        let spec = pod.spec.unwrap_or_default();
        let c = spec
            .containers
            .iter()
            .find(|c| c.name == "certsync")
            .ok_or(Seen::NoContainer)?;
        let arg = |flag: &str| c.args.iter().flatten().find_map(|a| a.strip_prefix(flag));
        let from_host = |name: &str, path: &str| {
            spec.volumes
                .iter()
                .flatten()
                .any(|v| v.name == name && v.host_path.as_ref().is_some_and(|h| h.path == path))
        };
        Ok(Self {
            generation: arg("--generation=").map(str::to_owned),
            probe: probe_addr_of(c).map(|addr| Probe {
                image: c.image.as_deref().map(|i| crate::escape(i).into_owned()),
                admin: arg("--admin-addr=").map(|a| crate::escape(a).into_owned()),
                addr,
            }),
            read_only: c
                .volume_mounts
                .iter()
                .flatten()
                .filter(|m| m.read_only == Some(true) && from_host(&m.name, &m.mount_path))
                .map(|m| m.mount_path.clone())
                .collect(),
        })
    }

    pub fn mounts_read_only(&self, node_path: &str) -> bool {
        self.read_only.iter().any(|p| p == node_path)
    }

    /// Where it is asked (no probe: the `--admin-addr` default) and its
    /// generation.
    pub fn asked(&self) -> (SocketAddr, Option<&str>) {
        let addr = self.probe.as_ref().map_or(DEFAULT_ADMIN_ADDR, |p| p.addr);
        (addr, self.generation.as_deref())
    }
}

fn probe_addr_of(c: &k8s_openapi::api::core::v1::Container) -> Result<SocketAddr, Seen> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let get = c
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .ok_or(Seen::NoHttpGet)?;
    let host = get.host.as_deref().unwrap_or("127.0.0.1");
    let ip: IpAddr = host.parse().map_err(|_| Seen::Host {
        host: crate::escape(host).into_owned(),
    })?;
    let port = match &get.port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(p) => p.parse().ok(),
    }
    .filter(|p| *p != 0)
    .ok_or(Seen::Port)?;
    Ok(SocketAddr::new(ip, port))
}

pub struct Spec<'a> {
    pub image: &'a str,
    pub admin: SocketAddr,
    pub generation: &'a str,
    pub config_hash: &'a str,
    pub mounts: Vec<super::manifest::Volume>,
}

/// certsync's static pod manifest, through a typed Pod: no value can change
/// its shape.
pub fn manifest(spec: &Spec) -> Result<String, serde_yaml_ng::Error> {
    use serde_json::json;
    let probe = probe_addr(spec.admin);
    let get = |path: &str| json!({"httpGet": {"host": probe.ip().to_string(), "path": path, "port": probe.port()}});
    let mut startup = get("/readyz");
    startup["failureThreshold"] = 60.into();
    startup["periodSeconds"] = 2.into();
    let (mounts, volumes): (Vec<_>, Vec<_>) =
        spec.mounts.iter().map(|m| m.json(m.read_only)).unzip();
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
    // A value of the wrong type is an error; the Pod's field order.
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_yaml_ng::from_value(serde_yaml_ng::to_value(pod)?)?;
    let body = serde_yaml_ng::to_string(&pod)?;
    Ok(format!(
        "# Written by `certsync kubeadm adopt` (docs/guides/kubeadm-control-plane.md).\n{body}"
    ))
}
