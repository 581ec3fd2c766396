//! The manifests in deploy/ parse as Kubernetes objects and say what the
//! README promises.

use k8s_openapi::api::core::v1::ServiceAccount;
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
