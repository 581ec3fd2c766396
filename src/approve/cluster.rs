//! What the approver reads from the cluster besides CSRs and Nodes: the
//! names and addresses that are the cluster's own (never a node's: the
//! API server's, every Service's).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::ListParams;
use kube::{Api, Client};

use super::api::api_err;
use super::error::ApproveError;
use super::policy::{Cidr, Cluster, Policy, dns_name};
use hostport::{Host, parse_ip_sloppy};

pub(crate) mod hostport;

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The Service ranges (ServiceCIDRs, absent before Kubernetes 1.33),
/// every Service's addresses, the API server's endpoints and the addresses
/// clients reach it by. An object that does not exist is skipped (not
/// every cluster is kubeadm's); any other error is an error: the approver
/// decides nothing without these. Fail closed on a Service range nobody
/// named (none read, none in `policy`): without it any Service IP could be
/// approved for a node that lists it.
pub async fn read(
    client: &Client,
    server: &http::Uri,
    policy: &Policy,
) -> Result<Cluster, ApproveError> {
    let mut cluster = Cluster::default();
    api_server_addresses(&mut cluster, client, server).await?;
    service_ranges(&mut cluster, client).await?;
    // Every Service's addresses: often inside the node network, where
    // --node-cidr does not keep them out.
    let services = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| api_err("list", "services", e))?;
    for svc in &services.items {
        service_addresses(&mut cluster, svc);
    }
    api_server_endpoints(&mut cluster, client).await?;
    if cluster.ranges.is_empty() && policy.service_cidrs.is_empty() {
        return Err(ApproveError::NoServiceRange);
    }
    Ok(cluster)
}

/// The addresses clients reach the API server by: `server`, the URL this
/// process uses, and where kubeadm publishes them (`cluster-info`, the
/// `controlPlaneEndpoint` and `apiServer.certSANs` of `kubeadm-config`).
async fn api_server_addresses(
    cluster: &mut Cluster,
    client: &Client,
    server: &http::Uri,
) -> Result<(), ApproveError> {
    if let Some(host) = server.host() {
        endpoint(cluster, host, "the API server address certsync uses");
    }
    if let Some(kubeconfig) = yaml_in(client, "kube-public", "cluster-info", "kubeconfig").await? {
        for c in kubeconfig["clusters"].as_sequence().into_iter().flatten() {
            let url = c["cluster"]["server"]
                .as_str()
                .and_then(|u| u.parse::<http::Uri>().ok());
            if let Some(host) = url.as_ref().and_then(http::Uri::host) {
                endpoint(cluster, host, "the API server's address in cluster-info");
            }
        }
    }
    let kubeadm = yaml_in(
        client,
        "kube-system",
        "kubeadm-config",
        "ClusterConfiguration",
    )
    .await?;
    if let Some(config) = kubeadm {
        control_plane_endpoint(cluster, &config["controlPlaneEndpoint"])?;
        for san in config["apiServer"]["certSANs"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
        {
            endpoint(cluster, san, "one of the API server's certSANs");
        }
    }
    Ok(())
}

/// The ranges of the ServiceCIDR objects; none when the API is absent.
async fn service_ranges(cluster: &mut Cluster, client: &Client) -> Result<(), ApproveError> {
    let list = match Api::<ServiceCIDR>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list,
        Err(e) if not_found(&e) => return Ok(()),
        Err(e) => return Err(api_err("list", "servicecidrs.networking.k8s.io", e)),
    };
    for sc in list.items {
        let name = sc.metadata.name.clone().unwrap_or_default();
        for c in sc.spec.and_then(|s| s.cidrs).unwrap_or_default() {
            let cidr: Cidr = c.parse().map_err(|_| ApproveError::ServiceCidr {
                name: name.clone(),
                cidr: c.clone(),
            })?;
            cluster.ranges.push((cidr, format!("ServiceCIDR {name}")));
        }
    }
    Ok(())
}

/// The addresses of the `default/kubernetes` Service's EndpointSlices.
async fn api_server_endpoints(cluster: &mut Cluster, client: &Client) -> Result<(), ApproveError> {
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .map_err(|e| api_err("list", "endpointslices default/kubernetes", e))?;
    for slice in slices.items {
        for ep in slice.endpoints {
            for ip in ep.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok()) {
                cluster
                    .addresses
                    .push((ip, "an API server endpoint".into()));
            }
        }
    }
    Ok(())
}

/// Records the addresses of `svc`, never a node's: cluster IPs, external
/// IPs, load balancer IP and ingress (IPs and hostnames).
fn service_addresses(cluster: &mut Cluster, svc: &Service) {
    let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let what = |kind: &str| {
        if ns == "default" && name == "kubernetes" {
            format!("the kubernetes Service's {kind}")
        } else {
            format!("Service {ns}/{name}'s {kind}")
        }
    };
    let add = |cluster: &mut Cluster, address: &str, kind: &str| {
        if !address.is_empty() {
            host(address).record(&mut cluster.services, &mut cluster.names, what(kind));
        }
    };
    if let Some(spec) = &svc.spec {
        for ip in spec
            .cluster_ips
            .iter()
            .flatten()
            .chain(spec.cluster_ip.iter())
        {
            // "None": a headless Service.
            if let Some(ip) = parse_ip_sloppy(ip) {
                cluster.addresses.push((ip, what("IP")));
            }
        }
        for ip in spec.external_ips.iter().flatten() {
            add(cluster, ip, "external IP");
        }
        if let Some(ip) = &spec.load_balancer_ip {
            add(cluster, ip, "load balancer IP");
        }
        // An ExternalName Service's name: any namespace user writes it.
        if let Some(name) = spec.external_name.as_deref().filter(|n| !n.is_empty()) {
            let (ips, names) = (&mut cluster.services, &mut cluster.service_names);
            host(name).record(ips, names, what("external name"));
        }
    }
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for i in ingress.into_iter().flatten() {
        if let Some(ip) = &i.ip {
            add(cluster, ip, "load balancer address");
        }
        if let Some(host) = &i.hostname {
            add(cluster, host, "load balancer hostname");
        }
    }
}

/// Key `key` of ConfigMap `ns/name`, read as YAML; `None` when the
/// ConfigMap does not exist.
async fn yaml_in(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
) -> Result<Option<serde_yaml_ng::Value>, ApproveError> {
    let object = format!("configmap {ns}/{name}");
    let cm = match Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
    {
        Ok(cm) => cm,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(api_err("get", &object, e)),
    };
    let text = cm.data.and_then(|mut d| d.remove(key)).unwrap_or_default();
    // Linear-time reading (no aliases, bounded nesting): see files::parse_yaml.
    crate::files::parse_yaml(&text)
        .map(Some)
        .map_err(|source| ApproveError::NotYaml {
            object,
            key: key.to_owned(),
            source,
        })
}

/// Records `text` (an IP, bracketed or not, or a DNS name: a URL's host
/// or a certSAN) as the API server's, read as kubeadm reads certSANs.
fn endpoint(cluster: &mut Cluster, text: &str, what: &str) {
    host(text.trim_start_matches('[').trim_end_matches(']')).record(
        &mut cluster.addresses,
        &mut cluster.names,
        what.to_owned(),
    );
}

/// `text`, an address (read as kubeadm reads it) or a DNS name, in the
/// form the policy compares.
fn host(text: &str) -> Host {
    match parse_ip_sloppy(text) {
        Some(ip) => Host::Ip(ip),
        None => Host::Name(dns_name(text)),
    }
}

/// Records kubeadm's `controlPlaneEndpoint` as kubeadm reads it. A value
/// kubeadm refuses, or not a string, is an error: what it would reserve is
/// unknown. Empty or absent: kubeadm uses the advertise address, which the
/// API server's endpoints name.
fn control_plane_endpoint(
    cluster: &mut Cluster,
    value: &serde_yaml_ng::Value,
) -> Result<(), ApproveError> {
    let text = match value {
        serde_yaml_ng::Value::Null => return Ok(()),
        serde_yaml_ng::Value::String(s) if s.is_empty() => return Ok(()),
        serde_yaml_ng::Value::String(s) => s,
        _ => return Err(ApproveError::EndpointNotString),
    };
    hostport::parse_host_port(text)?.record(
        &mut cluster.addresses,
        &mut cluster.names,
        "kubeadm's controlPlaneEndpoint".to_owned(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubeadm reads `certSANs` and `controlPlaneEndpoint` with
    /// `netutils.ParseIPSloppy`, so `192.168.001.063` is 192.168.1.63 in the
    /// API server's certificate: reserved as that address, not as a DNS name
    /// nobody asks for.
    #[test]
    fn leading_zero_ipv4_endpoints_are_read_as_kubeadm_reads_them() {
        let mut cluster = Cluster::default();
        endpoint(
            &mut cluster,
            "192.168.001.063",
            "one of the API server's certSANs",
        );
        control_plane_endpoint(&mut cluster, &"192.168.001.066:6443".into()).unwrap();
        let ips: Vec<IpAddr> = cluster.addresses.iter().map(|(ip, _)| *ip).collect();
        assert_eq!(
            ips,
            [
                "192.168.1.63".parse::<IpAddr>().unwrap(),
                "192.168.1.66".parse().unwrap()
            ],
            "{cluster:?}"
        );
        assert!(cluster.names.is_empty(), "{cluster:?}");
    }

    /// ParseIPSloppy takes any number of leading
    /// zeros per octet, also in the IPv4 part of an IPv6 form (checked
    /// with kubeadm v1.36: these are 192.168.1.66, .69, .74 and .72 in
    /// the API server's certificate), and hex groups of any length.
    #[test]
    fn any_leading_zeros_and_mapped_forms_are_read_as_kubeadm_reads_them() {
        let mut cluster = Cluster::default();
        control_plane_endpoint(&mut cluster, &"192.168.0001.066:6443".into()).unwrap();
        for san in [
            "192.168.1.0000069",
            "0192.0168.01.074",
            "::ffff:192.168.001.072",
            "::FFFF:0000c0a8:00154",
        ] {
            endpoint(&mut cluster, san, "one of the API server's certSANs");
        }
        let ips: Vec<String> = cluster
            .addresses
            .iter()
            .map(|(ip, _)| crate::approve::policy::canonical(*ip).to_string())
            .collect();
        assert_eq!(
            ips,
            [
                "192.168.1.66",
                "192.168.1.69",
                "192.168.1.74",
                "192.168.1.72",
                "192.168.1.84"
            ],
            "{cluster:?}"
        );
        assert!(cluster.names.is_empty(), "{cluster:?}");
        // What Go's reader refuses stays a name (never an address nobody
        // means): an octet over 255, five octets, a leading ellipsis
        // that stands for no group, an IPv4 part not at the end.
        for not_ip in [
            "192.168.1.256",
            "1.2.3.4.5",
            "1.2.3",
            "1:2:3:4:5:6:7:8::",
            "::1.2.3.4:1",
            "1::2::3",
            "0x7f.0.0.1",
        ] {
            assert_eq!(parse_ip_sloppy(not_ip), None, "{not_ip}");
        }
        assert_eq!(
            parse_ip_sloppy("1:2:3:4:5:6:1.2.3.004"),
            "1:2:3:4:5:6:102:304".parse().ok()
        );
        assert_eq!(parse_ip_sloppy("::"), "::".parse().ok());
    }

    /// The endpoint goes through kubeadm's `ParseHostPort`; absent, null or
    /// empty reserves nothing (kubeadm uses the advertise address); a value
    /// kubeadm does not read (not a string, or refused) is an error naming
    /// it, so nothing is decided.
    #[test]
    fn the_control_plane_endpoint_is_read_by_parse_host_port_or_refused() {
        let mut cluster = Cluster::default();
        control_plane_endpoint(&mut cluster, &"fd00:1::141".into()).unwrap();
        control_plane_endpoint(&mut cluster, &"api.example.com:6443".into()).unwrap();
        for nothing in [serde_yaml_ng::Value::Null, "".into()] {
            control_plane_endpoint(&mut cluster, &nothing).unwrap();
        }
        assert_eq!(
            cluster.addresses,
            [(
                "fd00:1::141".parse().unwrap(),
                "kubeadm's controlPlaneEndpoint".to_owned()
            )]
        );
        assert_eq!(
            cluster.names,
            [(
                "api.example.com".to_owned(),
                "kubeadm's controlPlaneEndpoint".to_owned()
            )]
        );
        let e = control_plane_endpoint(&mut cluster, &"[fd00:1::142]".into())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kube-system/kubeadm-config") && e.contains("\"[fd00:1::142]\""),
            "{e}"
        );
        let number: serde_yaml_ng::Value = serde_yaml_ng::from_str("6443").unwrap();
        let e = control_plane_endpoint(&mut cluster, &number)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a string"), "{e}");
        assert_eq!(cluster.addresses.len() + cluster.names.len(), 2);
    }

    /// An ExternalName Service's name is a Service's, whatever its case or
    /// a trailing dot: any namespace user writes it, and a node must not
    /// get it approved by listing it.
    #[test]
    fn an_external_name_service_reserves_its_name() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "prod"},
            "spec": {"type": "ExternalName", "externalName": "DB.Example.COM."},
        }))
        .unwrap();
        let mut cluster = Cluster::default();
        service_addresses(&mut cluster, &svc);
        assert_eq!(
            cluster.service_names,
            [(
                "db.example.com".to_owned(),
                "Service prod/db's external name".to_owned()
            )]
        );
    }
}
