//! The manifests in deploy/ parse as Kubernetes objects and say what the
//! docs promise (docs/guides/, docs/reference/kubeadm.md, docs/install.md).

/// Only its skip rule (the tool checks are for other tests).
#[path = "support/tools.rs"]
#[allow(dead_code)]
mod tools;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde::Deserialize;

/// The static pods, each with its own kustomization (they share a name).
const SERVING_POD: &str = "static-pods/kube-scheduler-serving/kube-scheduler.yaml";
const CLIENT_CERT_POD: &str = "static-pods/kube-scheduler-client-cert/kube-scheduler.yaml";
const KUBEADM_POD: &str = "static-pods/kubeadm-ca/certsync.yaml";

/// The YAML documents of `file`, relative to deploy/.
fn documents(file: &str) -> Vec<serde_yaml_ng::Value> {
    let path = format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
        .collect()
}

/// RBAC grants only get/list/watch, only on named Secrets and ConfigMaps;
/// one ServiceAccount per workload, none mounting its token by itself,
/// each bound to its own Role.
#[test]
fn rbac_is_least_privilege() {
    let docs = documents("rbac.yaml");
    let kind = |d: &serde_yaml_ng::Value| d["kind"].as_str().unwrap_or_default().to_owned();
    let mut roles = Vec::new();
    let mut bindings = Vec::new();
    let mut accounts = Vec::new();
    for d in docs {
        match kind(&d).as_str() {
            "Role" => roles.push(serde_yaml_ng::from_value::<Role>(d).unwrap()),
            "RoleBinding" => bindings.push(serde_yaml_ng::from_value::<RoleBinding>(d).unwrap()),
            "ServiceAccount" => {
                accounts.push(serde_yaml_ng::from_value::<ServiceAccount>(d).unwrap())
            }
            other => panic!("unexpected kind {other} in rbac.yaml"),
        }
    }
    assert_eq!((roles.len(), bindings.len(), accounts.len()), (3, 3, 3));
    for role in &roles {
        for rule in role.rules.as_deref().unwrap() {
            assert_eq!(rule.verbs, ["get", "list", "watch"]);
            assert_eq!(rule.api_groups.as_deref(), Some(&[String::new()][..]));
            for r in rule.resources.as_deref().unwrap() {
                assert!(r == "secrets" || r == "configmaps", "{r}");
            }
            assert!(
                rule.resource_names.as_ref().is_some_and(|n| !n.is_empty()),
                "every rule names its objects"
            );
        }
    }
    let mut bound = Vec::new();
    for b in &bindings {
        assert!(
            roles
                .iter()
                .any(|r| r.metadata.name.as_ref() == Some(&b.role_ref.name)),
            "{b:?}"
        );
        let subjects = b.subjects.as_deref().unwrap();
        assert_eq!(subjects.len(), 1, "one workload per Role");
        bound.push(subjects[0].name.clone());
    }
    bound.sort();
    let mut names: Vec<String> = accounts
        .iter()
        .map(|a| a.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(bound, names, "each ServiceAccount bound to its own Role");
    for a in &accounts {
        assert_eq!(
            a.automount_service_account_token,
            Some(false),
            "{:?} mounts its token into every container",
            a.metadata.name
        );
    }
}

/// The certsync containers of every Pod manifest in deploy/: their args are
/// accepted by certsync's own parser and make a valid configuration.
fn certsync_args(file: &str) -> Vec<Vec<String>> {
    documents(file)
        .into_iter()
        .filter(|d| d["kind"].as_str() == Some("Pod"))
        .map(|d| serde_yaml_ng::from_value::<Pod>(d).unwrap())
        .flat_map(|pod| {
            let spec = pod.spec.unwrap();
            spec.containers
                .into_iter()
                .chain(spec.init_containers.into_iter().flatten())
        })
        .filter(|c| c.name == "certsync")
        .map(|c| c.args.unwrap_or_default())
        .collect()
}

/// The node's config file of the kubeadm static pod is the one its reference
/// page (docs/reference/kubeadm.md) shows: checked as certsync would read
/// it, from a file of its own.
const KUBEADM_CONFIG: &str = "/etc/kubernetes/certsync.yaml";

/// The YAML of the config file, as docs/reference/kubeadm.md shows it.
fn guide_yaml() -> String {
    let guide = std::fs::read_to_string(format!(
        "{}/docs/reference/kubeadm.md",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let after = guide
        .split_once(&format!("`{KUBEADM_CONFIG}` (`certsync run --config`):"))
        .expect("docs/reference/kubeadm.md shows the config file")
        .1;
    after
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a yaml block")
        .0
        .to_owned()
}

/// The kubeconfigs the guide's mappings keep updated (`update-kubeconfig:`).
fn guide_kubeconfigs() -> Vec<std::path::PathBuf> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&guide_yaml()).unwrap();
    doc["mappings"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|m| m.get("update-kubeconfig")?.as_str().map(Into::into))
        .collect()
}

/// The guide's config in `dir`, its kubeconfigs (which certsync refuses
/// unless they exist, kubeadm-shaped) moved into `dir` as kubeadm makes them.
fn guide_config(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let mut yaml = guide_yaml();
    for path in guide_kubeconfigs() {
        let user = path
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .replace(".conf", "");
        let local = dir.join(path.file_name().unwrap());
        std::fs::write(
            &local,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster: \
                 {{server: https://127.0.0.1:6443}}\ncontexts:\n- name: k\n  context: \
                 {{cluster: kubernetes, user: {user}}}\ncurrent-context: k\nusers:\n- name: \
                 {user}\n  user: {{client-certificate-data: eA==, client-key-data: eA==}}\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o600)).unwrap();
        yaml = yaml.replace(path.to_str().unwrap(), local.to_str().unwrap());
    }
    let file = dir.join("certsync.yaml");
    std::fs::write(&file, yaml).unwrap();
    file
}

fn check_args(args: &[String]) -> certsync::config::Config {
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.strip_prefix("--config=") {
            Some(KUBEADM_CONFIG) => format!("--config={}", guide_config(dir.path()).display()),
            _ => a.clone(),
        })
        .collect();
    let parsed = certsync::config::parse(
        std::iter::once("certsync".to_owned())
            .chain(args.iter().cloned())
            .map(Into::into)
            .collect(),
    )
    .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let certsync::cli::Command::Run(run) = parsed.cli.command else {
        panic!("not run")
    };
    certsync::config::Settings::load(*run, &parsed.flags)
        .and_then(|s| certsync::config::Config::build(&s))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// File-watching mode for Kubernetes components: no reload method (they
/// must never be signalled), serving verification on the secure port.
#[test]
fn kube_scheduler_static_pod_uses_file_watching_mode() {
    let all = certsync_args(SERVING_POD);
    assert_eq!(all.len(), 1);
    let config = check_args(&all[0]);
    assert!(
        config.reload.method.is_none(),
        "kube-scheduler must not be signalled"
    );
    let m = &config.mappings[0];
    assert_eq!(
        m.verify.as_ref().map(|v| v.addr.as_str()),
        Some("127.0.0.1:10259")
    );
    let pods: Vec<Pod> = documents(SERVING_POD)
        .into_iter()
        .map(|d| serde_yaml_ng::from_value(d).unwrap())
        .collect();
    let scheduler = &pods[0].spec.as_ref().unwrap().containers[0];
    let cert_flag = scheduler
        .command
        .as_ref()
        .unwrap()
        .iter()
        .find(|a| a.starts_with("--tls-cert-file="))
        .unwrap();
    assert!(
        cert_flag.ends_with(&format!("{}/tls.crt", m.target.display())),
        "kube-scheduler reads the file certsync publishes: {cert_flag}"
    );
}

/// The optional events Role grants exactly what kube's recorder uses, in
/// events.k8s.io, bound to the same ServiceAccount.
#[test]
fn events_rbac_is_separate_and_minimal() {
    let docs = documents("rbac-events.yaml");
    let role: Role = serde_yaml_ng::from_value(docs[0].clone()).unwrap();
    let binding: RoleBinding = serde_yaml_ng::from_value(docs[1].clone()).unwrap();
    let rules = role.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].api_groups.as_deref(),
        Some(&["events.k8s.io".to_owned()][..])
    );
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["events".to_owned()][..])
    );
    assert_eq!(rules[0].verbs, ["create", "patch"]);
    let subjects = subject_names(binding.subjects);
    assert_eq!(subjects, ["web", "prometheus", "web-signed"]);
}

/// A csr: mapping's ClusterRole is kubelet's bootstrapper role: create,
/// get, list and watch CertificateSigningRequests, nothing else (no
/// approval, no signing, no status).
#[test]
fn csr_rbac_grants_requesting_only() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let docs = documents("rbac-csr.yaml");
    let role: ClusterRole = serde_yaml_ng::from_value(docs[0].clone()).unwrap();
    let binding: ClusterRoleBinding = serde_yaml_ng::from_value(docs[1].clone()).unwrap();
    let rules = role.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].api_groups.as_deref(),
        Some(&["certificates.k8s.io".to_owned()][..])
    );
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["certificatesigningrequests".to_owned()][..])
    );
    assert_eq!(rules[0].verbs, ["create", "get", "list", "watch"]);
    assert_eq!(binding.role_ref.name, role.metadata.name.unwrap());
    let subjects = subject_names(binding.subjects);
    // The static pod's bootstrap group and the certificate it renews as.
    for who in [
        "web-signed",
        "system:bootstrappers:certsync",
        "system:kube-scheduler",
    ] {
        assert!(subjects.iter().any(|s| s == who), "{who} in {subjects:?}");
    }
}

/// The static pod's kube-scheduler authenticates with the kubeconfig
/// certsync writes beside the pair it requests as system:kube-scheduler.
#[test]
fn kube_scheduler_client_cert_pod_uses_the_written_kubeconfig() {
    let file = CLIENT_CERT_POD;
    let pod: Pod = serde_yaml_ng::from_value(documents(file).remove(0)).unwrap();
    let spec = pod.spec.unwrap();
    let certsync = &spec.init_containers.as_ref().unwrap()[0];
    let config = check_args(certsync.args.as_deref().unwrap());
    let m = &config.mappings[0];
    let certsync::config::Source::Csr(csr) = &m.source else {
        panic!("not a csr: mapping")
    };
    assert_eq!(csr.signer, "kubernetes.io/kube-apiserver-client");
    assert_eq!(csr.common_name.as_deref(), Some("system:kube-scheduler"));
    assert_eq!(csr.usages, ["digital signature", "client auth"]);
    assert!(csr.bootstrap.is_some());
    let kubeconfig = m.target.join(csr.write_kubeconfig.as_deref().unwrap());
    let scheduler = &spec.containers[0];
    let flag = format!("--kubeconfig={}", kubeconfig.display());
    assert!(
        scheduler.command.as_ref().unwrap().contains(&flag),
        "kube-scheduler uses {flag}"
    );
    assert!(config.reload.method.is_none(), "never signalled");
}

/// Every YAML file under deploy/, relative to it, sorted.
fn yaml_files() -> Vec<String> {
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let base = std::path::PathBuf::from(format!("{}/deploy", env!("CARGO_MANIFEST_DIR")));
    let mut out = Vec::new();
    walk(&base, &base, &mut out);
    out.sort();
    out
}

/// Every manifest (Kubernetes objects) under deploy/, relative to it:
/// every YAML file but kustomize's own.
fn manifests() -> Vec<String> {
    yaml_files()
        .into_iter()
        .filter(|f| !f.ends_with("kustomization.yaml"))
        .collect()
}

/// Every pod template in deploy/ (Pods and Deployments), by file.
fn pod_specs() -> Vec<(String, PodSpec)> {
    let mut out = Vec::new();
    for file in manifests() {
        for d in documents(&file) {
            match d["kind"].as_str() {
                Some("Pod") => out.push((
                    file.clone(),
                    serde_yaml_ng::from_value::<Pod>(d).unwrap().spec.unwrap(),
                )),
                Some("Deployment") => {
                    let dep: Deployment = serde_yaml_ng::from_value(d).unwrap();
                    out.push((file.clone(), dep.spec.unwrap().template.spec.unwrap()));
                }
                _ => {}
            }
        }
    }
    out
}

/// Secure and operable by default: every container has requests and a
/// memory limit, a read-only root filesystem and all capabilities dropped
/// (adding nothing); certsync's args are accepted by its own parser, and it
/// is probed on /livez and /readyz at its admin port.
#[test]
fn every_pod_template_is_hardened_and_runs_a_valid_certsync() {
    let specs = pod_specs();
    assert!(specs.len() >= 3, "{} pod templates", specs.len());
    for (file, spec) in &specs {
        let all: Vec<&Container> = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .collect();
        for c in &all {
            let what = format!("{file}: container {}", c.name);
            let res = c
                .resources
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: no resources"));
            assert!(
                res.requests
                    .as_ref()
                    .is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")),
                "{what}: requests"
            );
            assert!(
                res.limits
                    .as_ref()
                    .is_some_and(|l| l.contains_key("memory")),
                "{what}: memory limit"
            );
            let sc = c
                .security_context
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: no securityContext"));
            assert_eq!(
                sc.read_only_root_filesystem,
                Some(true),
                "{what}: readOnlyRootFilesystem"
            );
            assert_eq!(
                sc.allow_privilege_escalation,
                Some(false),
                "{what}: allowPrivilegeEscalation"
            );
            let caps = sc
                .capabilities
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: capabilities"));
            assert_eq!(
                caps.drop.as_deref(),
                Some(&["ALL".to_owned()][..]),
                "{what}: drop ALL"
            );
            assert!(
                caps.add.as_ref().is_none_or(|a| a.is_empty()),
                "{what}: adds capabilities"
            );
            assert!(c.liveness_probe.is_some(), "{what}: liveness probe");
        }
        let certsync: Vec<&&Container> = all.iter().filter(|c| c.name == "certsync").collect();
        assert_eq!(certsync.len(), 1, "{file}: one certsync container");
        let c = certsync[0];
        let args = c.args.as_deref().unwrap();
        if args.first().map(String::as_str) == Some("approve") {
            let approver = approver_config(args);
            assert_probes(file, c, approver.admin_addr.port());
            continue;
        }
        let config = check_args(args);
        // `run` opens no admin port unless asked: a probed one is given.
        let admin = config
            .run
            .admin_addr
            .unwrap_or_else(|| panic!("{file}: probes, but no --admin-addr"));
        let port = admin.port();
        assert_probes(file, c, port);
        // Every certsync sidecar, static pods' too, is a native sidecar
        // whose startup probe holds the main container back until a valid
        // pair is on disk. Alone in its pod (kubeadm's renewer), it is the
        // main container.
        if spec.containers.len() + spec.init_containers.iter().flatten().count() > 1 {
            assert_eq!(
                c.restart_policy.as_deref(),
                Some("Always"),
                "{file}: native sidecar"
            );
            assert!(
                spec.init_containers
                    .iter()
                    .flatten()
                    .any(|i| i.name == "certsync"),
                "{file}: certsync among the initContainers"
            );
        } else {
            assert_eq!(file, KUBEADM_POD, "{file}: certsync alone");
        }
        let startup = c
            .startup_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{file}: startupProbe"));
        assert_eq!(startup.path.as_deref(), Some("/readyz"), "{file}");
        if spec.host_network != Some(true) {
            assert!(
                admin.ip().is_unspecified(),
                "{file}: kubelet probes the pod IP"
            );
        }
        // A shared PID namespace exactly where something is signalled.
        let signals = config
            .reload
            .method
            .as_ref()
            .is_some_and(|m| matches!(m, certsync::reload::Method::Signal { .. }));
        assert_eq!(
            spec.share_process_namespace.unwrap_or(false),
            signals,
            "{file}: shareProcessNamespace only for signal mode"
        );
    }
}

/// Readiness and liveness probes on certsync's admin port.
fn assert_probes(file: &str, c: &Container, port: u16) {
    for (probe, path) in [
        (&c.readiness_probe, "/readyz"),
        (&c.liveness_probe, "/livez"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{file}: {path} probe"));
        assert_eq!(get.path.as_deref(), Some(path), "{file}");
        let probe_port = match &get.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => *p as u16,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name) => c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port as u16)
                .unwrap_or_else(|| panic!("{file}: no port named {name}")),
        };
        assert_eq!(probe_port, port, "{file}: {path} probes the admin port");
    }
}

/// `certsync approve`'s args, parsed by certsync itself.
fn approver_config(args: &[String]) -> certsync::approve::ApproverConfig {
    let cli = certsync::cli::Cli::try_parse_from(
        std::iter::once("certsync".to_owned()).chain(args.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let certsync::cli::Command::Approve(a) = cli.command else {
        panic!("not approve")
    };
    // What the binary checks before it starts.
    a.policy.check().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    a.config(|_| None)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The approver: read CSRs and Nodes, update only `/approval`, approve
/// only for the kubelet-serving signer, its own Lease by name, Events;
/// two replicas with leader election.
#[test]
fn approver_is_least_privilege_and_elects_a_leader() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
    let docs = documents("approver.yaml");
    let of = |kind: &str| -> Vec<serde_yaml_ng::Value> {
        docs.iter()
            .filter(|d| d["kind"].as_str() == Some(kind))
            .cloned()
            .collect()
    };
    let role: ClusterRole = serde_yaml_ng::from_value(of("ClusterRole").remove(0)).unwrap();
    let rules: Vec<PolicyRule> = role.rules.unwrap();
    let verbs = |resource: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| {
                r.resources
                    .as_deref()
                    .is_some_and(|rs| rs.iter().any(|x| x == resource))
            })
            .flat_map(|r| r.verbs.clone())
            .collect()
    };
    assert_eq!(
        verbs("certificatesigningrequests"),
        ["get", "list", "watch"]
    );
    assert_eq!(verbs("certificatesigningrequests/approval"), ["update"]);
    assert_eq!(verbs("nodes"), ["get", "list", "watch"]);
    assert_eq!(verbs("signers"), ["approve"]);
    assert_eq!(verbs("servicecidrs"), ["list"]);
    // Every Service's addresses (external, load balancer) are never a
    // node's: listed cluster-wide, read only.
    assert_eq!(verbs("services"), ["list"]);
    let signers = rules
        .iter()
        .find(|r| r.resources.as_deref() == Some(&["signers".to_owned()][..]))
        .unwrap();
    assert_eq!(
        signers.resource_names.as_deref(),
        Some(&["kubernetes.io/kubelet-serving".to_owned()][..])
    );
    assert_eq!(rules.len(), 6, "nothing else: {rules:?}");
    let roles: Vec<Role> = of("Role")
        .into_iter()
        .map(|d| serde_yaml_ng::from_value(d).unwrap())
        .collect();
    let lease = roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("certsync-approver-lease"))
        .unwrap();
    for rule in lease.rules.as_deref().unwrap() {
        if rule.verbs != ["create"] {
            assert_eq!(
                rule.resource_names.as_deref(),
                Some(&["certsync-approver".to_owned()][..]),
                "the Lease by name"
            );
        }
    }
    // The API server's EndpointSlices, in `default`, read only.
    let addresses = roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("certsync-approver-cluster-addresses"))
        .unwrap();
    assert_eq!(addresses.metadata.namespace.as_deref(), Some("default"));
    for rule in addresses.rules.as_deref().unwrap() {
        assert!(
            rule.verbs.iter().all(|v| v == "get" || v == "list"),
            "read only: {rule:?}"
        );
        assert_eq!(
            rule.resources.as_deref(),
            Some(&["endpointslices".to_owned()][..]),
            "only EndpointSlices in default: {rule:?}"
        );
    }
    let dep: Deployment = serde_yaml_ng::from_value(of("Deployment").remove(0)).unwrap();
    let spec = dep.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let c = &spec.template.spec.unwrap().containers[0];
    let config = approver_config(c.args.as_deref().unwrap());
    assert!(!config.policy.node_cidrs.is_empty() && !config.policy.any_node_address);
    let lease = config.lease.expect("leader election on");
    assert_eq!(lease.name, "certsync-approver");
    assert!(!config.dry_run);
}

/// The Containerfile builds a static binary and runs it from `scratch`
/// holding only the root filesystem deploy/image/rootfs.sh lays out, as a
/// non-root user, with an exec-form entrypoint and OCI labels that carry no
/// invented URLs. .ci/image builds this same runtime stage with buildah.
#[test]
fn containerfile_is_multi_stage_static_and_non_root() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/Containerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "multi-stage");
    assert_eq!(froms[1], "FROM scratch");
    assert!(text.contains("cargo build --locked --release --target \"$TARGET\""));
    assert!(text.contains("ARG TARGET=x86_64-unknown-linux-musl"));
    assert!(text.contains("deploy/image/rootfs.sh /rootfs"));
    let runtime = &text[text.find("FROM scratch").unwrap()..];
    // .ci/image rewrites exactly this line to read a local directory.
    assert_eq!(
        runtime
            .lines()
            .filter(|l| l.starts_with("COPY"))
            .collect::<Vec<_>>(),
        ["COPY --from=build /rootfs /"]
    );
    assert!(
        runtime.contains("ENTRYPOINT [\"/certsync\"]"),
        "exec-form entrypoint"
    );
    let user = runtime.lines().find(|l| l.starts_with("USER ")).unwrap();
    assert_eq!(user, "USER 65532:65532");
    for label in ["title", "description", "licenses"] {
        assert!(runtime.contains(&format!("org.opencontainers.image.{label}=")));
    }
    assert!(
        !runtime.contains("://"),
        "no URLs in the runtime stage's labels"
    );
    let ci = std::fs::read_to_string(format!("{root}/.ci/image")).unwrap();
    assert!(ci.contains("s|^COPY --from=build /rootfs /$|COPY rootfs /|"));
}

/// The rootfs script lays out exactly the runtime filesystem: the binary,
/// the CA roots, passwd and group with nonroot, its home and /tmp.
#[test]
fn rootfs_script_lays_out_the_runtime_filesystem() {
    use std::os::unix::fs::PermissionsExt;
    let root = env!("CARGO_MANIFEST_DIR");
    if !std::path::Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        tools::skip(
            "rootfs_script_lays_out_the_runtime_filesystem needs /etc/ssl/certs/ca-certificates.crt (apt-get install ca-certificates)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("rootfs");
    let status = std::process::Command::new(format!("{root}/deploy/image/rootfs.sh"))
        .arg(&dest)
        .arg(env!("CARGO_BIN_EXE_certsync"))
        .status()
        .unwrap();
    assert!(status.success());
    let mut files: Vec<String> = Vec::new();
    let mut stack = vec![dest.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(&dest).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
                files.push(format!("{rel}/"));
            } else {
                files.push(rel);
            }
        }
    }
    files.sort();
    assert_eq!(
        files,
        [
            "certsync",
            "etc/",
            "etc/group",
            "etc/passwd",
            "etc/ssl/",
            "etc/ssl/certs/",
            "etc/ssl/certs/ca-certificates.crt",
            "home/",
            "home/nonroot/",
            "tmp/",
        ]
    );
    let passwd = std::fs::read_to_string(dest.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    let mode = |p: &str| {
        std::fs::metadata(dest.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("tmp"), 0o1777);
    assert_eq!(mode("certsync"), 0o755);
    assert_eq!(
        std::fs::read(dest.join("certsync")).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_certsync")).unwrap()
    );
}

/// A kustomization file under deploy/ (relative), as YAML.
fn kustomization(dir: &str) -> serde_yaml_ng::Value {
    let file = if dir.is_empty() {
        "kustomization.yaml".to_owned()
    } else {
        format!("{dir}/kustomization.yaml")
    };
    documents(&file).remove(0)
}

fn strings(v: &serde_yaml_ng::Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// `rel` joined to `dir` with `..` resolved, as a path relative to deploy/.
fn join(dir: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for p in rel.split('/') {
        match p {
            ".." => {
                parts.pop().expect("stays inside deploy/");
            }
            "." | "" => {}
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// Every manifest is listed in exactly one kustomization and every listed
/// file exists; each kustomization takes the image from the one component
/// that sets it; the manifests name the placeholder `certsync` that it
/// rewrites. Static pods are not in the base applied to the API server:
/// each has its own kustomization (they share a name) that renders one Pod.
#[test]
fn kustomizations_list_every_manifest_and_set_the_image_in_one_place() {
    let kustomizations: Vec<String> = yaml_files()
        .into_iter()
        .filter(|f| f.ends_with("kustomization.yaml"))
        .map(|f| {
            f.trim_end_matches("kustomization.yaml")
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    assert!(
        kustomizations.contains(&String::new()),
        "deploy/kustomization.yaml"
    );

    let component = kustomization("image");
    assert_eq!(component["kind"].as_str(), Some("Component"));
    let images = component["images"].as_sequence().unwrap();
    assert_eq!(images.len(), 1, "one image entry");
    assert_eq!(images[0]["name"].as_str(), Some("certsync"));
    assert!(
        images[0]["newName"]
            .as_str()
            .is_some_and(|n| n.contains('/'))
    );
    assert!(images[0]["newTag"].as_str().is_some());

    let mut listed = Vec::new();
    for dir in kustomizations.iter().filter(|d| *d != "image") {
        let k = kustomization(dir);
        assert_eq!(k["kind"].as_str(), Some("Kustomization"), "{dir}");
        assert!(
            k.get("images").is_none(),
            "{dir}: the image is set in deploy/image only"
        );
        let components: Vec<String> = strings(&k["components"])
            .iter()
            .map(|c| join(dir, c))
            .collect();
        assert_eq!(components, ["image"], "{dir}: takes the image component");
        let resources = strings(&k["resources"]);
        assert!(!resources.is_empty(), "{dir}");
        let mut pods = 0;
        for r in &resources {
            let file = join(dir, r);
            assert!(
                std::path::Path::new(&format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR")))
                    .is_file(),
                "{dir}/kustomization.yaml lists {r}, which does not exist"
            );
            pods += documents(&file)
                .iter()
                .filter(|d| d["kind"].as_str() == Some("Pod"))
                .count();
            listed.push(file);
        }
        if dir.is_empty() {
            assert_eq!(pods, 0, "no static pod is applied through the API server");
        } else {
            assert_eq!(pods, 1, "{dir}: renders one static pod for kubelet");
        }
    }
    listed.sort();
    assert_eq!(listed, manifests(), "every manifest listed exactly once");

    for (file, spec) in pod_specs() {
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let image = c.image.as_deref().unwrap_or_default();
            if c.name == "certsync" {
                assert_eq!(
                    image, "certsync",
                    "{file}: the placeholder kustomize rewrites"
                );
            } else {
                assert!(!image.contains("certsync"), "{file}: {image}");
            }
        }
    }
}

const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The main containers cannot read certsync's API token: a pod with any
/// container but certsync mounts no token by itself (pod and
/// ServiceAccount say `automountServiceAccountToken: false`) and projects
/// it into certsync alone, which reads it where in-cluster clients look.
#[test]
fn main_containers_cannot_read_the_api_token() {
    let accounts: Vec<ServiceAccount> = manifests()
        .iter()
        .flat_map(|f| documents(f))
        .filter(|d| d["kind"].as_str() == Some("ServiceAccount"))
        .map(|d| serde_yaml_ng::from_value(d).unwrap())
        .collect();
    let mut checked = 0;
    for (file, spec) in pod_specs() {
        let Some(sa) = &spec.service_account_name else {
            // A static pod: no ServiceAccount, no token.
            assert_eq!(
                spec.host_network,
                Some(true),
                "{file}: names its ServiceAccount"
            );
            continue;
        };
        let all: Vec<&Container> = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .collect();
        if all.iter().all(|c| c.name == "certsync") {
            continue; // the approver: certsync is the main container
        }
        checked += 1;
        assert_eq!(
            spec.automount_service_account_token,
            Some(false),
            "{file}: the pod mounts the token into every container"
        );
        let account = accounts
            .iter()
            .find(|a| a.metadata.name.as_ref() == Some(sa))
            .unwrap_or_else(|| panic!("{file}: ServiceAccount {sa} is not created"));
        assert_eq!(account.automount_service_account_token, Some(false), "{sa}");
        let token_volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .filter(|v| {
                v.projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.service_account_token.is_some())
                })
            })
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(token_volumes.len(), 1, "{file}: one projected token");
        for c in &all {
            let mounts: Vec<_> = c
                .volume_mounts
                .iter()
                .flatten()
                .filter(|m| token_volumes.contains(&m.name.as_str()))
                .collect();
            if c.name == "certsync" {
                assert!(
                    mounts
                        .iter()
                        .any(|m| m.mount_path == TOKEN_PATH && m.read_only == Some(true)),
                    "{file}: certsync reads its token at {TOKEN_PATH}"
                );
            } else {
                assert!(mounts.is_empty(), "{file}: {} mounts the token", c.name);
            }
        }
    }
    assert_eq!(checked, 3, "the three example workloads");
}

/// Where certsync writes keys: memory-backed emptyDirs, never the node's
/// disk, except the static pod whose requested client key must survive a
/// reboot (as kubelet keeps its own in /var/lib/kubelet/pki), and the one
/// renewing kubeadm's certificates where kubeadm's components read them.
#[test]
fn key_volumes_are_memory_backed() {
    let mut checked = 0;
    for (file, spec) in pod_specs() {
        let Some(c) = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == "certsync")
        else {
            continue;
        };
        for m in c.volume_mounts.iter().flatten() {
            if m.read_only == Some(true) {
                continue; // kubeconfigs, the token: read, never written
            }
            checked += 1;
            let v = spec
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
                .unwrap_or_else(|| panic!("{file}: no volume {}", m.name));
            if let Some(e) = &v.empty_dir {
                assert_eq!(e.medium.as_deref(), Some("Memory"), "{file}: {}", v.name);
            } else {
                assert!(v.host_path.is_some(), "{file}: {} is neither", v.name);
                assert!(
                    file == CLIENT_CERT_POD || file == KUBEADM_POD,
                    "{file}: a key on the node's disk"
                );
            }
        }
    }
    assert!(checked >= 5, "checked {checked} volumes");
}

/// The kubeadm static pod writes only certsync's targets: the CA files (keys
/// included), the templates and the config file reach the container
/// read-only, every read-write mount is exactly one mapping's target, and
/// every path appears in the container where the documented configuration
/// names it.
#[test]
fn kubeadm_static_pod_writes_only_the_targets() {
    use certsync::config::Source;
    use std::path::{Path, PathBuf};
    let all = certsync_args(KUBEADM_POD);
    assert_eq!(all.len(), 1);
    let config = check_args(&all[0]);
    let (_, spec) = pod_specs()
        .into_iter()
        .find(|(f, _)| f == KUBEADM_POD)
        .expect("the kubeadm static pod");
    let c = spec
        .containers
        .iter()
        .find(|c| c.name == "certsync")
        .unwrap();
    // (host path, mount path, read-only) of every hostPath mount.
    let mounts: Vec<(PathBuf, PathBuf, bool)> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            let v = spec
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
                .unwrap();
            let host = &v.host_path.as_ref().expect("hostPath volumes only").path;
            (
                PathBuf::from(host),
                PathBuf::from(&m.mount_path),
                m.read_only == Some(true),
            )
        })
        .collect();
    for (host, mount, _) in &mounts {
        assert_eq!(host, mount, "paths in the config are the node's");
    }
    // The deepest mount holding `p` decides whether it is writable.
    let writable = |p: &Path| -> bool {
        let (_, _, ro) = mounts
            .iter()
            .filter(|(h, _, _)| p.starts_with(h))
            .max_by_key(|(h, _, _)| h.components().count())
            .unwrap_or_else(|| panic!("{} is not mounted", p.display()));
        !ro
    };
    let mut targets = Vec::new();
    for m in &config.mappings {
        let Source::Ca(ca) = &m.source else {
            panic!("{}: not a ca: mapping", m.name)
        };
        assert!(writable(&m.target), "{}: target read-only", m.name);
        for p in [&ca.ca_cert, &ca.ca_key]
            .into_iter()
            .chain(ca.template.as_ref())
        {
            assert!(!writable(p), "{}: {} writable", m.name, p.display());
        }
        targets.push(m.target.clone());
    }
    assert!(!writable(Path::new(KUBEADM_CONFIG)));
    // admin.conf and super-admin.conf are renamed over: their directory is
    // writable, the static pod manifests in it are not.
    let kubeconfigs = guide_kubeconfigs();
    assert_eq!(
        kubeconfigs.len(),
        2,
        "admin.conf and super-admin.conf: {kubeconfigs:?}"
    );
    assert_eq!(
        config
            .mappings
            .iter()
            .filter(|m| m.update_kubeconfig.is_some())
            .count(),
        2
    );
    let kubeconfig_dirs: Vec<PathBuf> = kubeconfigs
        .iter()
        .map(|k| k.parent().unwrap().to_owned())
        .collect();
    for k in &kubeconfigs {
        assert!(
            writable(k.parent().unwrap()),
            "{}: not writable",
            k.display()
        );
    }
    assert!(!writable(Path::new(
        "/etc/kubernetes/manifests/kube-apiserver.yaml"
    )));
    for (host, _, ro) in &mounts {
        assert!(
            *ro || targets.contains(host) || kubeconfig_dirs.contains(host),
            "{} is read-write and not a target or a kubeconfig's directory",
            host.display()
        );
    }
}

/// The approver keeps a replica through voluntary disruptions (drains).
#[test]
fn the_approver_has_a_pod_disruption_budget() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let docs = documents("approver.yaml");
    let pdb: PodDisruptionBudget = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("PodDisruptionBudget"))
        .map(|d| serde_yaml_ng::from_value(d.clone()).unwrap())
        .expect("a PodDisruptionBudget in approver.yaml");
    let dep: Deployment = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .map(|d| serde_yaml_ng::from_value(d.clone()).unwrap())
        .unwrap();
    assert_eq!(pdb.metadata.namespace, dep.metadata.namespace);
    let spec = pdb.spec.unwrap();
    let dep_spec = dep.spec.unwrap();
    assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
    assert!(
        dep_spec.replicas.unwrap_or(1) > 1,
        "a budget needs spare replicas"
    );
    let labels = dep_spec.template.metadata.unwrap().labels.unwrap();
    let wanted = spec.selector.unwrap().match_labels.unwrap();
    assert!(!wanted.is_empty());
    for (k, v) in &wanted {
        assert_eq!(
            labels.get(k),
            Some(v),
            "the budget selects the approver's pods"
        );
    }
}

/// Everything the base refers to is in it: the namespace of every object,
/// the ServiceAccount of every pod and of every binding, every ConfigMap
/// and Secret a pod mounts (kube-root-ca.crt is in every namespace).
#[test]
fn every_referenced_object_is_created() {
    let k = kustomization("");
    let mut objects: Vec<(String, String, String)> = Vec::new(); // kind, namespace, name
    let mut docs = Vec::new();
    for r in strings(&k["resources"]) {
        for d in documents(&r) {
            objects.push((
                d["kind"].as_str().unwrap().to_owned(),
                d["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                d["metadata"]["name"].as_str().unwrap().to_owned(),
            ));
            docs.push((r.clone(), d));
        }
    }
    let exists = |kind: &str, ns: &str, name: &str| {
        objects
            .iter()
            .any(|(k, n, m)| k == kind && n == ns && m == name)
    };
    for (file, d) in &docs {
        let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
        if !ns.is_empty() && !["default", "kube-system", "kube-public"].contains(&ns) {
            assert!(
                exists("Namespace", "", ns),
                "{file}: namespace {ns} is not created"
            );
        }
        for s in d["subjects"].as_sequence().into_iter().flatten() {
            if s["kind"].as_str() == Some("ServiceAccount") {
                let (sns, name) = (
                    s["namespace"].as_str().unwrap(),
                    s["name"].as_str().unwrap(),
                );
                assert!(
                    exists("ServiceAccount", sns, name),
                    "{file}: binds {sns}/{name}"
                );
            }
        }
        let spec = match d["kind"].as_str() {
            Some("Deployment") => {
                let dep: Deployment = serde_yaml_ng::from_value(d.clone()).unwrap();
                dep.spec.unwrap().template.spec.unwrap()
            }
            _ => continue,
        };
        if let Some(sa) = &spec.service_account_name {
            assert!(
                exists("ServiceAccount", ns, sa),
                "{file}: ServiceAccount {sa}"
            );
        }
        for v in spec.volumes.iter().flatten() {
            if let Some(cm) = &v.config_map {
                assert!(
                    exists("ConfigMap", ns, &cm.name),
                    "{file}: ConfigMap {}",
                    cm.name
                );
            }
            if let Some(sec) = &v.secret {
                let name = sec.secret_name.as_deref().unwrap();
                assert!(exists("Secret", ns, name), "{file}: Secret {name}");
            }
            for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
                if let Some(cm) = &src.config_map {
                    assert_eq!(cm.name, "kube-root-ca.crt", "{file}: projected ConfigMap");
                }
            }
        }
    }
}

/// Every file in deploy/ is described in docs/install.md's table (a
/// kustomization by its directory), so none is left for a user to guess.
#[test]
fn every_manifest_is_described_in_the_docs() {
    let doc =
        std::fs::read_to_string(format!("{}/docs/install.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for f in yaml_files() {
        let needle = match f.strip_suffix("kustomization.yaml") {
            Some(dir) if !dir.is_empty() => format!("deploy/{dir}"),
            _ => format!("deploy/{f}"),
        };
        assert!(
            doc.contains(&needle),
            "docs/install.md does not describe {f}"
        );
    }
}

/// The names of a binding's subjects, in order.
fn subject_names(subjects: Option<Vec<k8s_openapi::api::rbac::v1::Subject>>) -> Vec<String> {
    subjects.unwrap().into_iter().map(|s| s.name).collect()
}
