//! The kubelet's bootstrap kubeconfig on an adopted node: kubeadm deletes
//! it after the join, and certsync's container may write /etc/kubernetes,
//! so one certsync's pod does not mount read-only is refused (adopt,
//! revert) or a problem (status), and the pod mounts it as the plan's one
//! look found it.

use super::adopted::*;
use super::readopt::{FIRST, backups, recorded};
use super::*;

/// The pod manifest adopt's plan for the node at `d` would write, written
/// where the node keeps it.
async fn adopts_pod_in_place(d: &Path) {
    let p = plan(&options(d)).await.expect("plan");
    let pod = p
        .files
        .iter()
        .find(|f| f.path == plan::POD)
        .expect("the pod");
    std::fs::write(host(d, plan::POD), &pod.bytes).expect("write the pod");
}

/// Whether the pod manifest `text` mounts `path` read-only, as adopt,
/// revert and status judge it.
fn mounts(text: &str, path: &str) -> bool {
    pod::Current::parse(text.as_bytes()).mounts_read_only(path)
}

#[tokio::test]
async fn a_pod_mounts_a_file_read_only_only_from_that_host_path() {
    let dir = node_dir();
    let d = dir.path();
    std::fs::write(d.join("bootstrap-kubelet.conf"), "kubeadm's\n").expect("write");
    adopts_pod_in_place(d).await;
    let text = std::fs::read_to_string(host(d, plan::POD)).expect("the pod");
    let path = "/etc/kubernetes/bootstrap-kubelet.conf";
    assert!(mounts(&text, path), "{text}");
    assert!(!mounts(&text, "/etc/kubernetes/other.conf"));
    // Each part of the proof taken away in turn.
    let mount = format!(
        "    - mountPath: {path}\n      name: bootstrap-kubelet-conf\n      readOnly: true\n"
    );
    assert!(text.contains(&mount), "{text}");
    let writable = text.replace(&mount, &mount.replace("readOnly: true", "readOnly: false"));
    assert!(!mounts(&writable, path));
    let volume = format!("path: {path}\n");
    assert_eq!(text.matches(&volume).count(), 1, "{text}");
    let elsewhere = text.replace(&volume, "path: /tmp/x\n");
    assert!(!mounts(&elsewhere, path));
    let other = text.replace("name: certsync\n", "name: other\n");
    assert_ne!(other, text);
    assert!(!mounts(&other, path));
    assert!(!mounts("not: [a pod", path));
    // A byte that is not UTF-8 (here in a comment): the kubelet's YAML
    // reader refuses the whole manifest, so no pod runs from it.
    let mut bytes = text.clone().into_bytes();
    bytes.extend_from_slice(b"# \xff\n");
    assert!(!pod::Current::parse(&bytes).mounts_read_only(path));
}

#[tokio::test]
async fn the_pod_mounts_the_kubelet_bootstrap_kubeconfig_as_the_one_look_found_it() {
    // The mount follows the look that judged the file (`lstat`), never a
    // second look by name: one that followed a link (or saw a file planted
    // since) would mount what was not judged, and the mount is what makes
    // the file acceptable later.
    let dir = node_dir();
    let d = dir.path();
    let at = d.join("bootstrap-kubelet.conf");
    std::fs::write(d.join("kubeadms.conf"), "kubeadm's\n").expect("write");
    std::os::unix::fs::symlink(d.join("kubeadms.conf"), &at).expect("symlink");
    adopts_pod_in_place(d).await;
    let text = std::fs::read_to_string(host(d, plan::POD)).expect("the pod");
    let path = "/etc/kubernetes/bootstrap-kubelet.conf";
    assert!(!mounts(&text, path), "{text}");
    std::fs::remove_file(&at).expect("rm");
    std::fs::rename(d.join("kubeadms.conf"), &at).expect("mv");
    std::fs::remove_file(host(d, plan::POD)).expect("rm the pod");
    adopts_pod_in_place(d).await;
    let text = std::fs::read_to_string(host(d, plan::POD)).expect("the pod");
    assert!(mounts(&text, path), "{text}");
}

#[tokio::test]
async fn attack_a_kubelet_bootstrap_kubeconfig_planted_after_adoption_is_refused() {
    // kubeadm deletes bootstrap-kubelet.conf once the kubelet has joined,
    // and certsync's container may write /etc/kubernetes: one it planted
    // there would have the kubelet bootstrap against the container's
    // server were the kubelet's client certificate to fail.
    let dir = node_dir();
    let d = dir.path();
    let at = d.join("bootstrap-kubelet.conf");
    let planted = std::fs::read_to_string(d.join("controller-manager.conf"))
        .expect("a kubeconfig")
        .replace("https://10.77.0.11:6443", "https://10.9.9.9:6443");
    adopts_pod_in_place(d).await;
    std::fs::create_dir_all(d.join("certsync")).expect("mkdir");
    recorded(d);
    plan(&options(d)).await.expect("re-adopt without one");
    let is_it = |why: &Refusal| {
        matches!(why, Refusal::KubeletBootstrap { path }
            if *path == "/etc/kubernetes/bootstrap-kubelet.conf")
    };
    std::fs::write(&at, &planted).expect("planted");
    let why = refusal(d).await;
    assert!(is_it(&why), "{why}");
    assert_eq!(backups(d), [FIRST], "nothing was written");
    // status names it as a problem of its certificates (exit 6).
    let s = status(d).await.expect("status");
    assert!(
        s.problems.iter().any(|p| p.cause == Cause::Certificate
            && p.message.contains("/etc/kubernetes/bootstrap-kubelet.conf")),
        "{:?}",
        s.problems
    );
    // Any entry by that name: a link (to kubeadm's own kubeconfig) or a
    // directory is not proven absent.
    std::fs::remove_file(&at).expect("rm");
    std::os::unix::fs::symlink(d.join("admin.conf"), &at).expect("symlink");
    assert!(is_it(&refusal(d).await));
    std::fs::remove_file(&at).expect("rm");
    std::fs::create_dir(&at).expect("mkdir");
    assert!(is_it(&refusal(d).await));
    std::fs::remove_dir(&at).expect("rmdir");
    // With certsync's pod manifest gone, nothing proves the file was out
    // of the container's reach: refused too.
    std::fs::write(&at, &planted).expect("planted");
    std::fs::remove_file(host(d, plan::POD)).expect("rm pod");
    assert!(is_it(&refusal(d).await));
    // One the node had when it was adopted is kubeadm's: the pod adopt
    // wrote then mounts it read-only, and adopting again takes it.
    std::fs::remove_file(host(d, plan::STATE)).expect("rm record");
    adopts_pod_in_place(d).await;
    recorded(d);
    plan(&options(d))
        .await
        .expect("mounted read-only since adoption");
    let s = status(d).await.expect("status");
    assert!(
        !s.problems
            .iter()
            .any(|p| p.message.contains("bootstrap-kubelet")),
        "{:?}",
        s.problems
    );
}

#[tokio::test]
async fn attack_revert_never_leaves_a_planted_kubelet_bootstrap_kubeconfig() {
    // certsync's container planted bootstrap-kubelet.conf (kubeadm deleted
    // its own after the join): revert would hand the node back with it,
    // and the next adopt, a first one, would take it for kubeadm's.
    let dir = adopted_node();
    let d = dir.path();
    let at = host(d, "/etc/kubernetes/bootstrap-kubelet.conf");
    std::fs::write(&at, "planted\n").expect("plant");
    match revert_refusal(&revert_options(d)).await {
        RevertError::Planted(r) => assert!(
            matches!(*r, Refusal::KubeletBootstrap { path }
                if path == "/etc/kubernetes/bootstrap-kubelet.conf"),
            "{r}"
        ),
        other => panic!("{other}"),
    }
    assert!(host(d, plan::STATE).exists(), "nothing was changed");
    std::fs::remove_file(&at).expect("rm");
    assert!(
        super::super::revert::plan(&revert_options(d))
            .expect("plan")
            .is_some()
    );
}
