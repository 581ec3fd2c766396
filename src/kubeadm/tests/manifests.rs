//! Component manifests as adopt reads and edits them: changed as kubeadm regenerates
//! them and back, and refused when what the kubelet would run is not what adopt reads.

use super::*;
use crate::files::YamlError;

#[test]
fn manifests_are_changed_as_kubeadm_regenerates_them_and_back() {
    for c in manifest::components() {
        let original = fixture(&format!("manifests/{}.yaml", c.name));
        let kubeadms = fixture(&format!("adopted/{}.yaml", c.name));
        let mut m = Manifest::read(original.as_bytes()).expect("parse");
        manifest::conflict(&c, &m).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let (flags, _) = manifest::adopt(&c, &mut m);
        assert_eq!(flags.len(), c.flags.len(), "{}", c.name);
        assert_eq!(
            m.render().expect("render"),
            kubeadms,
            "{}: byte for byte what kubeadm writes for certsync's extraArgs and extraVolumes",
            c.name
        );
        // Adopting what kubeadm regenerated changes nothing.
        let mut again = Manifest::read(kubeadms.as_bytes()).expect("parse");
        manifest::conflict(&c, &again).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let (flags, volumes) = manifest::adopt(&c, &mut again);
        assert!(flags.is_empty() && volumes.is_empty(), "{}", c.name);
        // And taking adopt's changes out gives kubeadm's original back.
        assert!(manifest::unadopt(&c, &mut again), "{}", c.name);
        assert_eq!(again.render().expect("render"), original, "{}", c.name);
    }
}

/// A manifest whose volumes or first container's mounts are something other than a list
/// (or null, which Kubernetes reads as none) is refused as it is read: adopt and revert
/// would otherwise write it back with an empty list, dropping every mount it named.
#[test]
fn attack_volumes_or_mounts_not_a_list_are_refused_never_emptied() {
    let original = fixture("manifests/kube-scheduler.yaml");
    let mounts = "    volumeMounts:\n    - mountPath: /etc/kubernetes/scheduler.conf\n      name: kubeconfig\n      readOnly: true\n";
    assert!(original.contains(mounts), "the fixture's mounts as written");
    let volumes = original
        .find("  volumes:\n")
        .expect("the fixture's volumes");
    for bad in ["{mountPath: /x, name: kubeconfig}", "kubeconfig", "7"] {
        let text = original.replace(mounts, &format!("    volumeMounts: {bad}\n"));
        assert!(
            matches!(Manifest::read(text.as_bytes()), Err(FileProblem::NotAPod)),
            "volumeMounts: {bad}"
        );
        let text = format!("{}  volumes: {bad}\n", &original[..volumes]);
        assert!(
            matches!(Manifest::read(text.as_bytes()), Err(FileProblem::NotAPod)),
            "volumes: {bad}"
        );
    }
    // Kubernetes' YAML reader applies merge keys, this one does not: the volumes or mounts
    // Kubernetes reads would be hidden from adopt, and its explicit list would shadow them.
    let merged = format!(
        "{}  <<: {{volumes: [{{hostPath: {{path: /etc/kubernetes/scheduler.conf}}, name: kubeconfig}}]}}\n",
        &original[..volumes]
    );
    let merged_mounts = original.replace(mounts, "    <<: {volumeMounts: []}\n");
    let tagged = original.replace("  volumes:\n", "  !x volumes:\n");
    // A tagged value: Kubernetes decodes `!!binary` (here a --tls-cert-file of its
    // choosing) where this reader saw no flag of that name.
    let command = "    - kube-scheduler\n";
    assert!(original.contains(command), "the fixture's command");
    let binary = original.replace(
        command,
        &format!("{command}    - !!binary LS10bHMtY2VydC1maWxlPS9ldGMvZXZpbA==\n"),
    );
    for text in [merged, merged_mounts, tagged, binary] {
        assert!(
            matches!(
                Manifest::read(text.as_bytes()),
                Err(FileProblem::NotYaml(YamlError::MergeKey | YamlError::Tag))
            ),
            "{text}"
        );
    }
    for none in ["    volumeMounts: null\n", ""] {
        let text = original.replace(mounts, none);
        Manifest::read(text.as_bytes()).unwrap_or_else(|e| panic!("{none:?}: {e}"));
    }
}

/// A `'` after a space inside a plain scalar (an annotation `the scheduler 's`) is text
/// to go-yaml (the kubelet), which then merges the `<<` below it and decodes `!!binary`;
/// a reader taking that quote for an opened string would skip both. Each is refused.
#[test]
fn attack_a_merge_key_or_tag_after_a_quote_inside_a_plain_scalar_is_still_refused() {
    let original = fixture("manifests/kube-scheduler.yaml");
    let labels = "  labels:\n";
    assert!(original.contains(labels), "the fixture's labels");
    let opened = original.replacen(
        labels,
        &format!("  annotations:\n    note: the scheduler 's\n{labels}"),
        1,
    );
    let mounts = "    volumeMounts:\n    - mountPath: /etc/kubernetes/scheduler.conf\n      name: kubeconfig\n      readOnly: true\n";
    assert!(opened.contains(mounts), "the fixture's mounts as written");
    // The kubelet mounts nothing here; adopt reads a container without volumeMounts
    // beside a key named `<<`.
    let merged_mounts = opened.replace(mounts, "    <<: {volumeMounts: []}\n");
    let tagged_key = opened.replace("  volumes:\n", "  !x volumes:\n");
    // `--tls-cert-file=/etc/evil` to the kubelet (go-yaml decodes `!!binary`), a flag
    // adopt would not see.
    let binary = "    - !!binary LS10bHMtY2VydC1maWxlPS9ldGMvZXZpbA==\n";
    let binary_flag = opened.replacen(
        "    - kube-scheduler\n",
        &format!("    - kube-scheduler\n{binary}"),
        1,
    );
    assert_ne!(binary_flag, opened, "the fixture's command");
    // The annotation alone is fine.
    Manifest::read(opened.as_bytes()).expect("the annotation alone is a plain manifest");
    for text in [merged_mounts, tagged_key, binary_flag] {
        let read = Manifest::read(text.as_bytes());
        assert!(
            matches!(
                read,
                Err(FileProblem::NotYaml(YamlError::MergeKey | YamlError::Tag))
            ),
            "read as {:?}:\n{text}",
            read.map(|_| "a manifest")
        );
    }
}

/// The API server's manifest fixture with `from` replaced by `to`, as adopt judges it.
fn api_server_conflict(from: &str, to: &str) -> Result<(), FileProblem> {
    let comps = manifest::components();
    let api = comps.iter().find(|c| c.name == "kube-apiserver");
    let text = fixture("manifests/kube-apiserver.yaml").replace(from, to);
    let m = Manifest::read(text.as_bytes()).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    manifest::conflict(api.expect("api"), &m)
}

#[test]
fn a_manifest_flag_with_a_third_value_or_a_foreign_volume_is_refused() {
    let comps = manifest::components();
    let why = api_server_conflict(
        "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt",
        "--tls-cert-file=/srv/certs/apiserver.crt",
    )
    .expect_err("refused");
    assert!(
        matches!(&why, FileProblem::FlagValue { flag: "tls-cert-file", found, kubeadm, ours }
            if found == "/srv/certs/apiserver.crt"
                && kubeadm == "/etc/kubernetes/pki/apiserver.crt"
                && ours == "/etc/kubernetes/pki/certsync/apiserver/tls.crt"),
        "{why}"
    );
    let why = api_server_conflict(
        "    - --tls-private-key-file=/etc/kubernetes/pki/apiserver.key\n",
        "",
    )
    .expect_err("refused");
    assert!(
        matches!(
            why,
            FileProblem::NoFlag {
                flag: "tls-private-key-file"
            }
        ),
        "{why}"
    );
    let sched = comps
        .iter()
        .find(|c| c.name == "kube-scheduler")
        .expect("sched");
    let text = fixture("manifests/kube-scheduler.yaml").replace(
        "  volumes:\n",
        "  volumes:\n  - hostPath:\n      path: /srv\n      type: Directory\n    name: certsync-client\n",
    );
    let why = manifest::conflict(sched, &Manifest::read(text.as_bytes()).expect("parse"))
        .expect_err("refused");
    assert!(
        matches!(&why, FileProblem::Volume { name, path, kind }
            if name == "certsync-client" && path == "/srv" && kind == "Directory"),
        "{why}"
    );
}

/// A manifest's flag value is printed in adopt's refusal, on an operator's terminal: a
/// control sequence in it is escaped, never written as is (it could rewrite the lines
/// before it).
#[test]
fn attack_a_flag_value_with_a_terminal_escape_is_quoted_escaped() {
    let why = api_server_conflict(
        "- --tls-cert-file=/etc/kubernetes/pki/apiserver.crt",
        "- \"--tls-cert-file=/srv/\\e[2Kok.crt\"",
    )
    .expect_err("refused");
    assert!(
        matches!(&why, FileProblem::FlagValue { flag: "tls-cert-file", found, .. }
            if found == "/srv/\\u{1b}[2Kok.crt"),
        "{why:?}"
    );
    assert!(!why.to_string().contains('\u{1b}'), "{why:?}");
}
