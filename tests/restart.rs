//! The watch faults of `tests/kube.rs` that a real cluster can produce,
//! against real kube-apiserver, kube-controller-manager and etcd v1.36:
//! the API server stopped (its pid killed, as a node loses it) and started
//! again with `realkube/up`, its history compacted meanwhile, or down when
//! certsync starts. Each test stops and starts a control plane of its own
//! (`support::control_plane`), never one other tests share; without the
//! realkube tools or root the tests skip, a failure under CI.

mod support;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;

use support::certs::Pair;
use support::control_plane::ControlPlane;
use support::*;

const NS: &str = "default";

/// What certsync logs (at debug, as tests run it) when a watch is refused
/// with `410 Gone` and it lists again (src/source/watch/reflector.rs).
const RELIST: &str = "resourceVersion expired; re-listing";

/// Creates or replaces `kubernetes.io/tls` Secret `default/name` holding `p`.
async fn put_pair(kubeconfig: &std::path::Path, name: &str, p: &Pair) {
    let api: Api<Secret> = Api::namespaced(kube_client(kubeconfig).await, NS);
    let mut secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name}, "type": "kubernetes.io/tls",
        "stringData": {
            "tls.crt": String::from_utf8(p.cert.clone()).unwrap(),
            "tls.key": String::from_utf8(p.key.clone()).unwrap(),
        },
    }))
    .unwrap();
    match api.get_opt(name).await.unwrap() {
        Some(old) => {
            secret.metadata.resource_version = old.metadata.resource_version;
            api.replace(name, &PostParams::default(), &secret)
                .await
                .unwrap();
        }
        None => {
            api.create(&PostParams::default(), &secret).await.unwrap();
        }
    }
}

fn run(kubeconfig: &std::path::Path, target: &std::path::Path, dir: &std::path::Path) -> Certsync {
    Certsync::start(
        &[
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--sync",
            &format!("secret:{NS}/tls={},name=tls", target.display()),
        ],
        dir,
    )
}

/// kube-apiserver killed and started again while the Secret changed and
/// etcd's history was compacted past the resourceVersion certsync holds:
/// certsync's resumed watch is refused with `410 Gone` by the real API
/// server, it re-lists (its debug log says so: the test fails if that path
/// did not run), converges on the change and stays up. It reaches the API
/// server through a proxy that refuses connections from the kill until
/// after the change, the compaction and a second restart, so the order is
/// certain. The second restart matters: kube-apiserver's watch cache,
/// started before the change, would replay it from the old version without
/// a 410; started after the compaction, it begins past that version and
/// etcd no longer has it either. (The same path against the test API
/// server, which records requests: kube.rs,
/// converges_after_a_restart_with_compacted_history.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_api_server_restarted_with_compacted_history() {
    let Some(cp) = ControlPlane::up("restart") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let proxy = FreezeProxy::start(cp.api).await;
    let via_proxy = cp.admin_via(proxy.addr, tmp.path());
    let first = Pair::new("before");
    put_pair(&cp.admin, "tls", &first).await;
    let target = tmp.path().join("target");
    let mut cs = run(&via_proxy, &target, tmp.path());
    wait_pair(&target, &first);

    proxy.refuse_new(true);
    cp.stop_api_server();
    cs.wait_log("reason=\"source_unavailable\"");
    cp.start();
    let newest = Pair::new("while-away");
    put_pair(&cp.admin, "tls", &newest).await;
    cp.compact();
    cp.stop_api_server();
    cp.start();
    assert_eq!(
        read_live(&target).map(|(_, c, _)| c),
        Some(first.cert.clone()),
        "nothing reached certsync yet"
    );
    assert!(
        !cs.log().contains(RELIST),
        "re-listed too early\n{}",
        cs.log()
    );
    proxy.refuse_new(false);
    // The watch comes back after its backoff and a relist: slower than a
    // plain update beside the node tests, still only a bound on a hang.
    wait_for_within(
        "the target to hold the pair written while the server was down",
        std::time::Duration::from_secs(60),
        || (read_live(&target)?.1 == newest.cert).then_some(()),
    );
    wait_pair(&target, &newest);
    assert!(cs.is_running(), "certsync exited\n{}", cs.log());
    assert!(
        cs.log().contains(RELIST),
        "converged without the 410 and re-list path\n{}",
        cs.log()
    );
}

/// certsync started while kube-apiserver is down keeps the files it has
/// and stays up; once the API server is back it converges on the Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_api_server_down_at_start_then_up() {
    let Some(cp) = ControlPlane::up("down-at-start") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let first = Pair::new("first");
    put_pair(&cp.admin, "tls", &first).await;
    let target = tmp.path().join("target");
    let cs = run(&cp.admin, &target, tmp.path());
    let rev = wait_pair(&target, &first);
    drop(cs);

    cp.stop_api_server();
    let mut cs = run(&cp.admin, &target, tmp.path());
    cs.wait_log("reason=\"source_unavailable\"");
    assert!(cs.is_running(), "{}", cs.log());
    assert_eq!(read_live(&target).unwrap().0, rev, "the good pair stays");

    cp.start();
    let second = Pair::new("second");
    put_pair(&cp.admin, "tls", &second).await;
    wait_pair(&target, &second);
    assert!(cs.is_running(), "{}", cs.log());
}
