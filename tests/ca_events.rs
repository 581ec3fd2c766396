//! `--events` with `ca:` mappings: a `ca:` mapping has no Kubernetes object
//! of its own, so its Events go on the Pod certsync runs in (`POD_NAME`,
//! `POD_NAMESPACE` from the downward API: for a static pod, its mirror
//! pod, which `kubectl describe pod` shows). Without those variables
//! `--events` is refused at start rather than sending nothing.
//!
//! Against the test API server, or a real cluster with
//! `CERTSYNC_E2E_KUBECONFIG` (and `CERTSYNC_E2E_NAMESPACE`, default
//! `default`): the test creates a Pod that is never scheduled (a scheduling
//! gate) to stand for certsync's own.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use support::certs::ca_files;
use support::*;

use support::certs::ca_spec as spec;

/// Runs `cmd` to its end, killed after [`PATIENCE`] (a run that was not
/// refused does not end by itself): exit code and stderr.
fn finish(cmd: &mut Command, dir: &Path) -> (Option<i32>, String) {
    let log = dir.join(unique("stderr-"));
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), fs::read_to_string(&log).unwrap_or_default())
}

/// `--events` with a `ca:` mapping but without the Pod's name and namespace:
/// refused at start (usage, 64), naming both variables and how to set them;
/// nothing is issued. `--print-config` refuses it too.
#[test]
fn events_for_a_ca_mapping_without_pod_name_and_namespace_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let sync = spec(&prefix, &target, "");
    for (env, extra) in [
        (vec![], vec![]),
        (vec![("POD_NAME", "certsync-node1")], vec![]),
        (vec![("POD_NAMESPACE", "kube-system")], vec![]),
        (vec![("POD_NAME", "")], vec!["--print-config"]),
    ] {
        let mut cmd = Command::new(certsync_bin());
        cmd.args(["run", "--events", "--sync", &sync])
            .args(&extra)
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .envs(env.iter().copied());
        let (code, err) = finish(&mut cmd, d.path());
        assert_eq!(code, Some(64), "{env:?} {extra:?}: {err}");
        for needle in [
            "POD_NAME",
            "POD_NAMESPACE",
            "fieldRef",
            "metadata.namespace",
        ] {
            assert!(err.contains(needle), "{env:?}: {needle} missing in {err}");
        }
        assert!(read_live(&target).is_none());
    }
    // A name the API would refuse is refused here, not at the first event.
    let (code, err) = finish(
        Command::new(certsync_bin())
            .args(["run", "--events", "--print-config", "--sync", &sync])
            .env("POD_NAME", "Certsync_Node1")
            .env("POD_NAMESPACE", "kube-system"),
        d.path(),
    );
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("POD_NAME") && err.contains("Certsync_Node1"),
        "{err}"
    );
}

/// The events a test's namespace holds about Pod `pod`, once `ready` says
/// they are all there.
async fn events_about(
    api: &Api<Event>,
    pod: &str,
    mut ready: impl FnMut(&[Event]) -> bool,
) -> Vec<Event> {
    let start = std::time::Instant::now();
    loop {
        let mine: Vec<Event> = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
            .collect();
        if ready(&mine) {
            return mine;
        }
        assert!(start.elapsed() < PATIENCE, "events about {pod}: {mine:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Pod to stand for the one certsync runs in, never scheduled (a
/// scheduling gate): namespace, API, name, uid.
async fn own_pod(
    client: &kube::Client,
    prefix: &str,
) -> (String, Api<Pod>, String, Option<String>) {
    let ns = support::e2e_namespace();
    let name = unique(prefix);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "schedulingGates": [{"name": "certsync.invalid/never"}],
            "containers": [{"name": "certsync", "image": "registry.k8s.io/pause:3.10"}],
        },
    }))
    .unwrap();
    let uid = pods
        .create(&Default::default(), &pod)
        .await
        .unwrap()
        .metadata
        .uid;
    assert!(uid.is_some());
    (ns, pods, name, uid)
}

/// A `dir:` mapping has no object either: with the Pod named, its flips
/// are recorded there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dir_events_are_recorded_on_the_pod_when_it_is_named() {
    let d = tempfile::tempdir().unwrap();
    let (kubeconfig, _fake) = cluster(d.path()).await;
    let client = kube_client(&kubeconfig).await;
    let (ns, pods, pod_name, uid) = own_pod(&client, "certsync-dir").await;
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    write_pair(&src, &support::certs::Pair::new("dir"));
    let target = d.path().join("target");
    let mut cmd = Command::new(certsync_bin());
    cmd.args(["run", "--events", "--debounce", "100ms", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--sync",
            &format!("dir:{}={}", src.display(), target.display()),
        ])
        .env("POD_NAME", &pod_name)
        .env("POD_NAMESPACE", &ns);
    let cs = Certsync::start_with(&mut cmd, d.path());
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let mine = events_about(&events, &pod_name, |es| {
        es.iter()
            .any(|e| e.reason.as_deref() == Some("CertificateUpdated"))
    })
    .await;
    let updated = &mine[0];
    assert_eq!(updated.regarding.as_ref().unwrap().uid, uid);
    let note = updated.note.as_deref().unwrap();
    assert!(note.contains(&target.display().to_string()), "{note}");
    drop(cs);
    clean_up(&events, mine, &pods, &pod_name).await;
}

/// A `ca:` mapping's events are on certsync's Pod (kind, namespace, name
/// and uid, which `kubectl describe pod` matches): `CertificateUpdated`
/// after issuance, and `CertificateRequestFailed` when a renewal fails
/// because the CA key's mode was loosened; the note names the key's path
/// and mode, never its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_events_are_recorded_on_the_pod() {
    let d = tempfile::tempdir().unwrap();
    let (kubeconfig, _fake) = cluster(d.path()).await;
    let client = kube_client(&kubeconfig).await;
    let (ns, pods, pod_name, uid) = own_pod(&client, "certsync-ca").await;

    let prefix = ca_files(d.path(), 3600);
    let key = prefix.with_extension("key");
    let target = d.path().join("target");
    let mut cmd = Command::new(certsync_bin());
    cmd.args(["run", "--events", "--debounce", "100ms"])
        .args(["--csr-renew-floor", "1s", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--sync", &spec(&prefix, &target, ",lifetime=5s")])
        .env("POD_NAME", &pod_name)
        .env("POD_NAMESPACE", &ns);
    let cs = Certsync::start_with(&mut cmd, d.path());

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let has = |reason: &'static str| {
        move |es: &[Event]| es.iter().any(|e| e.reason.as_deref() == Some(reason))
    };
    let mine = events_about(&events, &pod_name, has("CertificateUpdated")).await;
    let updated = mine
        .iter()
        .find(|e| e.reason.as_deref() == Some("CertificateUpdated"))
        .unwrap();
    assert_eq!(updated.type_.as_deref(), Some("Normal"));
    let regarding = updated.regarding.clone().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.api_version.as_deref(), Some("v1"));
    assert_eq!(regarding.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(regarding.uid, uid);
    assert_eq!(updated.reporting_controller.as_deref(), Some("certsync"));
    assert_eq!(
        updated.reporting_instance.as_deref(),
        Some(pod_name.as_str())
    );
    let note = updated.note.clone().unwrap();
    assert!(note.starts_with("revision 1 written to"), "{note}");
    assert!(note.contains(&target.display().to_string()), "{note}");

    // The renewal (due within 5 s) finds the key readable by others.
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    cs.wait_log("issuing a certificate failed");
    let mine = events_about(&events, &pod_name, has("CertificateRequestFailed")).await;
    let failed = mine
        .iter()
        .find(|e| e.reason.as_deref() == Some("CertificateRequestFailed"))
        .unwrap();
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.regarding.as_ref().unwrap().uid, uid);
    let note = failed.note.clone().unwrap();
    assert!(
        note.starts_with("ca_key:")
            && note.contains(&key.display().to_string())
            && note.contains("mode 0644"),
        "{note}"
    );
    let body = fs::read_to_string(&key).unwrap();
    let body = body.lines().nth(1).unwrap();
    for e in &mine {
        let note = e.note.as_deref().unwrap_or("");
        assert!(
            !note.contains(body) && !note.contains("PRIVATE KEY"),
            "{note}"
        );
    }
    drop(cs);
    clean_up(&events, mine, &pods, &pod_name).await;
}

/// Deletes the events a test saw and its Pod (a real cluster keeps them).
async fn clean_up(events: &Api<Event>, mine: Vec<Event>, pods: &Api<Pod>, pod: &str) {
    for e in mine {
        let _ = events
            .delete(e.metadata.name.as_deref().unwrap(), &Default::default())
            .await;
    }
    let _ = pods.delete(pod, &Default::default()).await;
}
