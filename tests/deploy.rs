//! The manifests in deploy/ parse as Kubernetes objects and say what the
//! README promises.

use clap::Parser;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde::Deserialize;

fn documents(file: &str) -> Vec<serde_yaml_ng::Value> {
    let path = format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
        .collect()
}

/// RBAC grants only get/list/watch, only on named Secrets and ConfigMaps,
/// and binds it to the ServiceAccount it defines.
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
    assert_eq!((roles.len(), bindings.len(), accounts.len()), (1, 1, 1));
    for rule in roles[0].rules.as_deref().unwrap() {
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
    let b = &bindings[0];
    assert_eq!(b.role_ref.name, roles[0].metadata.name.clone().unwrap());
    let subject = &b.subjects.as_deref().unwrap()[0];
    assert_eq!(Some(&subject.name), accounts[0].metadata.name.as_ref());
}

/// The certsync containers of every Pod manifest in deploy/: their args are
/// accepted by certsync's own parser and make a valid configuration.
fn certsync_args(file: &str) -> Vec<Vec<String>> {
    documents(file)
        .into_iter()
        .filter(|d| d["kind"].as_str() == Some("Pod"))
        .map(|d| serde_yaml_ng::from_value::<Pod>(d).unwrap())
        .flat_map(|pod| pod.spec.unwrap().containers)
        .filter(|c| c.name == "certsync")
        .map(|c| c.args.unwrap_or_default())
        .collect()
}

fn check_args(args: &[String]) -> certsync::config::Config {
    let cli = certsync::config::Cli::try_parse_from(
        std::iter::once("certsync".to_owned()).chain(args.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let certsync::config::Command::Run(run) = cli.command else {
        panic!("not run")
    };
    certsync::config::Config::from_args(&run).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// File-watching mode for Kubernetes components: no reload method (they
/// must never be signalled), serving verification on the secure port.
#[test]
fn kube_scheduler_static_pod_uses_file_watching_mode() {
    let all = certsync_args("static-pod-kube-scheduler.yaml");
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
    let pods: Vec<Pod> = documents("static-pod-kube-scheduler.yaml")
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
    assert_eq!(binding.subjects.unwrap()[0].name, "certsync");
}
