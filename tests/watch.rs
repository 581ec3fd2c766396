//! The one list/watch loop every Kubernetes source shares
//! (`source::watch`), through the binary, against the test API server: a
//! watch the server ends at once, without a single event, is a failure
//! (client-go's reflector's "very short watch"), backed off and warned about
//! once, for every kind of source. These faults cannot be made on a real
//! cluster, so the tests run against the test API server always.

mod support;

use std::time::Duration;

use support::apiserver::ApiServer;
use support::certs::Pair;
use support::*;

/// How long each test lets a server that ends every watch at once run.
const WINDOW: Duration = Duration::from_secs(3);
/// Watch requests allowed in [`WINDOW`]: with backoff from 0.8 s doubling,
/// three or four; without, thousands.
const HANDFUL: usize = 6;

/// The test API server, also when the other suites run against a real
/// cluster: only it ends watches at will.
async fn fake(dir: &std::path::Path) -> (ApiServer, std::path::PathBuf) {
    let fake = ApiServer::start().await;
    let kubeconfig = fake.kubeconfig(dir);
    (fake, kubeconfig)
}

fn count(fake: &ApiServer, prefix: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.starts_with(prefix))
        .count()
}

/// A `secret:ns/tls` mapping into `dir/t` whose Secret the server already
/// holds; returns once its pair is on disk (the watch fault, if any, set
/// before: the first list is not a watch).
async fn secret_mapping(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    tag: &str,
) -> Certsync {
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(kube_client(kubeconfig).await, "ns");
    let pair = Pair::new(tag);
    let secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
        "stringData": {
            "tls.crt": String::from_utf8(pair.cert.clone()).unwrap(),
            "tls.key": String::from_utf8(pair.key.clone()).unwrap(),
        },
    }))
    .unwrap();
    api.create(&Default::default(), &secret).await.unwrap();
    let target = dir.join("t");
    let spec = format!("secret:ns/tls={}", target.display());
    let cs = run_syncing(kubeconfig, dir, &spec);
    wait_pair(&target, &pair);
    cs
}

/// `certsync run --sync spec` against `kubeconfig`.
fn run_syncing(kubeconfig: &std::path::Path, dir: &std::path::Path, spec: &str) -> Certsync {
    Certsync::start(
        &[
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--sync",
            spec,
        ],
        dir,
    )
}

/// The loop's short-watch rule held for `what`: between 1 and `max`
/// requests starting with `prefix` in [`WINDOW`], and one warning naming
/// `what` for the streak.
fn assert_backed_off(fake: &ApiServer, cs: &Certsync, prefix: &str, what: &str, max: usize) {
    let requests = count(fake, prefix);
    assert!(
        (1..=max).contains(&requests),
        "{what}: {requests} {prefix:?} requests in {WINDOW:?}: {:?}",
        fake.requests()
    );
    assert_eq!(
        short_watch_warnings(cs, what),
        1,
        "{what}: warned once per streak: {}",
        cs.log()
    );
}

/// The warnings about watches ended at once that name `what`.
fn short_watch_warnings(cs: &Certsync, what: &str) -> usize {
    cs.log()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("without a single event") && l.contains(what))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_watch_the_server_ends_at_once_is_backed_off() {
    let d = tempfile::tempdir().unwrap();
    let (fake, kubeconfig) = fake(d.path()).await;
    fake.end_watches_at_once(true);
    let cs = secret_mapping(&kubeconfig, d.path(), "short").await;
    tokio::time::sleep(WINDOW).await;
    assert_backed_off(&fake, &cs, "watch secrets ns/tls", "secret ns/tls", HANDFUL);
    assert_eq!(
        count(&fake, "list secrets"),
        1,
        "a short watch resumes, not re-lists"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trust_bundle_watch_the_server_ends_at_once_is_backed_off() {
    let d = tempfile::tempdir().unwrap();
    let (fake, kubeconfig) = fake(d.path()).await;
    let ctbs = kube::Api::all(kube_client(&kubeconfig).await);
    let ca = String::from_utf8(Pair::new("ca").ca_cert).unwrap();
    ctbs.create(
        &Default::default(),
        &trust_bundle("example.com:short:a", "example.com/short", &ca, &[]),
    )
    .await
    .unwrap();
    fake.end_watches_at_once(true);

    let target = d.path().join("t");
    let spec = format!(
        "clustertrustbundle:example.com/short={},name=ctb",
        target.display()
    );
    let cs = run_syncing(&kubeconfig, d.path(), &spec);
    wait_for("the trust bundle", || {
        (std::fs::read_to_string(target.join("ca.crt")).ok()? == ca).then_some(())
    });
    tokio::time::sleep(WINDOW).await;
    assert_backed_off(
        &fake,
        &cs,
        "watch clustertrustbundles",
        "clustertrustbundles of signer example.com/short",
        HANDFUL,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_request_watch_the_server_ends_at_once_is_backed_off() {
    let d = tempfile::tempdir().unwrap();
    let (fake, kubeconfig) = fake(d.path()).await;
    let signer = support::signer::Signer::new(kube_client(&kubeconfig).await, "example.com/short");
    let ca_file = d.path().join("ca.crt");
    std::fs::write(&ca_file, &signer.ca_pem).unwrap();
    fake.end_watches_at_once(true);

    let spec = format!(
        "csr:{}={},name=svc,cn=svc.example,dns=svc.example,\
         usage=digital-signature,usage=server-auth,ca=file:{}",
        signer.name,
        d.path().join("t").display(),
        ca_file.display()
    );
    let cs = run_syncing(&kubeconfig, d.path(), &spec);
    let name = signer.next_request(&[]).await;
    cs.wait_log(&format!("kubectl certificate approve {name}"));
    tokio::time::sleep(WINDOW).await;
    // Only certsync reads the request by name (the signer lists them all);
    // a short watch resumes, so the watches are what is counted.
    assert_backed_off(
        &fake,
        &cs,
        &format!("watch certificatesigningrequests /{name} "),
        &format!("certificatesigningrequest {name}"),
        HANDFUL,
    );
    assert!(
        count(&fake, &format!("list certificatesigningrequests /{name} ")) <= 1,
        "a short watch resumes, not re-lists: {:?}",
        fake.requests()
    );
    drop(cs);
    signer.cleanup().await;
}

/// The approver's two watches (its signer's CSRs, every Node) go through
/// the same loop: ended at once, both are backed off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvers_watches_the_server_ends_at_once_are_backed_off() {
    let d = tempfile::tempdir().unwrap();
    let (fake, kubeconfig) = fake(d.path()).await;
    fake.end_watches_at_once(true);
    let port = free_port();
    let cs = Certsync::start(
        &[
            "approve",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--lease-name",
            "",
            "--node-cidr",
            "10.0.0.0/8",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ],
        d.path(),
    );
    wait_for("the approver ready", || {
        http_get(port, "/readyz").filter(|(code, _)| *code == 200)
    });
    tokio::time::sleep(WINDOW).await;
    for (prefix, what) in [
        (
            "watch certificatesigningrequests",
            "certificatesigningrequests",
        ),
        ("watch nodes", "nodes"),
    ] {
        assert_backed_off(&fake, &cs, prefix, what, HANDFUL);
    }
}

/// Attack: a server (or a proxy that cuts a stream after its first chunk)
/// that answers every watch with one BOOKMARK and ends it. A bookmark
/// counts as an event, so the short-watch rule never fires and nothing
/// backed off: certsync re-watched as fast as the server answered.
/// client-go's client is bounded by its rate limiter (5 requests a second,
/// bursts of 10); so must certsync's loop be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_watches_ending_after_one_bookmark_are_paced() {
    let d = tempfile::tempdir().unwrap();
    let (fake, kubeconfig) = fake(d.path()).await;
    fake.end_watches_after_one_bookmark(true);
    let _cs = secret_mapping(&kubeconfig, d.path(), "bookmark").await;
    let before = count(&fake, "watch secrets ns/tls");
    tokio::time::sleep(WINDOW).await;
    let watches = count(&fake, "watch secrets ns/tls") - before;
    assert!(
        watches <= 30,
        "{watches} watch requests in {WINDOW:?} against a server that ends every watch after one bookmark"
    );
}

/// Hundreds of mappings in one process start with at most
/// `source::watch::IN_FLIGHT` LISTs in flight (kube-apiserver's Priority and
/// Fairness gives one flow 6 queues of 50: a thousand at once were refused
/// with 429 on a real server), yet side by side, and every one converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_mappings_keep_their_lists_in_flight_bounded() {
    const MAPPINGS: usize = 240;
    let d = tempfile::tempdir().unwrap();
    // HTTPS with h2, as kube-apiserver serves: every request of the
    // process shares a few connections, nothing paces them.
    let serving = Pair::new("127.0.0.1");
    let fake = ApiServer::start_tls(&serving.cert, &serving.key).await;
    let ca = d.path().join("ca.crt");
    std::fs::write(&ca, &serving.ca_cert).unwrap();
    let kubeconfig = fake.tls_kubeconfig(d.path(), &ca);
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(kube_client(&kubeconfig).await, "ns");
    let pair = Pair::new("many");
    let mut config = String::from("mappings:\n");
    for i in 0..MAPPINGS {
        let secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("tls-{i}")}, "type": "kubernetes.io/tls",
            "stringData": {
                "tls.crt": String::from_utf8(pair.cert.clone()).unwrap(),
                "tls.key": String::from_utf8(pair.key.clone()).unwrap(),
            },
        }))
        .unwrap();
        api.create(&Default::default(), &secret).await.unwrap();
        let target = d.path().join(format!("t{i}"));
        config.push_str(&format!(
            "  - source: secret:ns/tls-{i}\n    target: {}\n",
            target.display()
        ));
    }
    let file = d.path().join("certsync.yaml");
    std::fs::write(&file, config).unwrap();
    // Slow enough that lists made at once overlap, as on a busy server.
    fake.slow_lists(Duration::from_millis(500));
    let _cs = Certsync::start(
        &[
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--config",
            file.to_str().unwrap(),
        ],
        d.path(),
    );
    for i in 0..MAPPINGS {
        wait_pair(&d.path().join(format!("t{i}")), &pair);
    }
    let lists = count(&fake, "list secrets ns/tls-");
    assert!(lists >= MAPPINGS, "{lists} lists for {MAPPINGS} mappings");
    let most = fake.lists_in_flight_max();
    let limit = certsync::source::watch::IN_FLIGHT;
    println!("{lists} lists, at most {most} in flight (limit {limit})");
    assert!(
        most <= limit,
        "{most} LISTs in flight at once, more than the limit of {limit}"
    );
    assert!(
        most > 1,
        "the limit serialized the lists: never more than {most} in flight"
    );
}
