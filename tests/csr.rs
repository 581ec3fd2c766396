//! End to end for `csr:` mappings: certsync requests a certificate through
//! the CSR API, waits for approval, checks what is issued and publishes it,
//! then renews it. The signer (`support::signer`) acts only through the API,
//! so the suite runs against a real cluster too: set
//! `CERTSYNC_E2E_KUBECONFIG` (credentials that may approve and sign for
//! `example.com/*` signers); each test uses its own signer name and deletes
//! its requests.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::apiserver::ApiServer;
use support::signer::Signer;
use support::*;

struct Env {
    tmp: tempfile::TempDir,
    kubeconfig: PathBuf,
    signer: Signer,
    _fake: Option<ApiServer>,
}

/// Certificates issued in tests live this long unless a test says otherwise.
const HOUR: Duration = Duration::from_secs(3600);

impl Env {
    /// On the cluster of `CERTSYNC_E2E_KUBECONFIG`, else the test API server.
    async fn new(test: &str) -> Self {
        Self::on(test, false).await
    }

    /// On the test API server whatever `CERTSYNC_E2E_KUBECONFIG` says: for
    /// what only it can do ([`support::test_server`]).
    async fn test_server(test: &str) -> Self {
        Self::on(test, true).await
    }

    async fn on(test: &str, test_server: bool) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (kubeconfig, fake) = if test_server {
            support::test_server(tmp.path()).await
        } else {
            cluster(tmp.path()).await
        };
        let client = kube_client(&kubeconfig).await;
        let name = format!("example.com/certsync-{test}-{}", std::process::id());
        let signer = Signer::new(client, &name);
        std::fs::write(tmp.path().join("ca.crt"), &signer.ca_pem).unwrap();
        Self {
            tmp,
            kubeconfig,
            signer,
            _fake: fake,
        }
    }

    fn target(&self) -> PathBuf {
        self.tmp.path().join("target")
    }

    /// The mapping of most tests: a serving certificate from this test's
    /// signer, checked against its CA, renewed at 70-90 %.
    fn spec(&self, extra: &str) -> String {
        format!(
            "csr:{}={},name=svc,cn=svc.example,dns=svc.example,ip=10.0.0.7,\
             usage=digital-signature,usage=server-auth,ca=file:{}{extra}",
            self.signer.name,
            self.target().display(),
            self.tmp.path().join("ca.crt").display()
        )
    }

    fn start(&self, spec: &str, admin: Option<u16>) -> Certsync {
        self.start_with(spec, admin, &[])
    }

    fn start_with(&self, spec: &str, admin: Option<u16>, extra: &[&str]) -> Certsync {
        let admin = format!("127.0.0.1:{}", admin.unwrap_or(0));
        let mut args = vec![
            "run",
            "--kubeconfig",
            self.kubeconfig.to_str().unwrap(),
            "--sync",
            spec,
            "--admin-addr",
            &admin,
        ];
        args.extend(extra);
        Certsync::start(&args, self.tmp.path())
    }
}

fn live_cert(target: &Path) -> Option<Vec<u8>> {
    read_live(target).map(|(_, cert, _)| cert)
}

/// Waits until `target` serves the certificate `cert` (PEM).
/// The visible `tls.crt` link too: it is made just after `..data` flips,
/// and the kubeconfig beside the pair names it (a client built from it
/// right after the flip found no `tls.crt`, 1 run in the real-cluster stage).
fn wait_cert(target: &Path, cert: &str, what: &str) {
    // Every visible link, not only tls.crt: they are made one after
    // another after the flip, and a kubeconfig beside the pair names
    // tls.key (read too early once in CI: "tls.key: No such file").
    wait_for(what, || {
        let linked = std::fs::read(target.join("tls.crt")).ok()?;
        std::fs::metadata(target.join("tls.key")).ok()?;
        (live_cert(target)? == cert.as_bytes() && linked == cert.as_bytes()).then_some(())
    });
}

fn metrics(port: u16) -> std::collections::BTreeMap<String, f64> {
    http_get(port, "/metrics")
        .map(|(_, body)| parse_metrics(&body))
        .unwrap_or_default()
}

fn wait_metric(port: u16, name: &str, value: f64) {
    wait_for(&format!("{name} = {value}"), || {
        (metrics(port).get(name) == Some(&value)).then_some(())
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issues_after_approval_and_says_how_to_approve() {
    let env = Env::new("issue").await;
    let port = free_port();
    let cs = env.start(&env.spec(""), Some(port));
    let name = env.signer.next_request(&[]).await;

    // What was asked: our signer, usages, subject and SANs, from a key
    // made for it; the requester is who certsync authenticated as.
    let csr = env.signer.api.get(&name).await.unwrap();
    assert!(name.starts_with("certsync-svc-"), "{name}");
    assert_eq!(
        csr.spec.usages.as_deref().unwrap(),
        ["digital signature", "server auth"]
    );
    let pem = String::from_utf8(csr.spec.request.0.clone()).unwrap();
    let req = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
    let sans = format!("{:?}", req.params.subject_alt_names);
    assert!(
        sans.contains("svc.example") && sans.contains("10.0.0.7"),
        "{sans}"
    );

    // Waiting: one warning naming the command, and the pending metric.
    cs.wait_log(&format!("kubectl certificate approve {name}"));
    wait_metric(port, "certsync_csr_pending{mapping=\"svc\"}", 1.0);
    assert!(
        read_live(&env.target()).is_none(),
        "nothing before issuance"
    );

    let cert = env.signer.sign(&name, HOUR).await;
    let target = env.target();
    wait_cert(&target, &cert, "the issued certificate");
    let (rev, _, key) = read_live(&target).unwrap();
    let dir = target.join(rev);
    assert_eq!(
        std::fs::read(dir.join("ca.crt")).unwrap(),
        env.signer.ca_pem.as_bytes()
    );
    assert!(
        String::from_utf8(key)
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |f: &str| std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("tls.key"), mode("tls.crt")), (0o600, 0o644));
    // The pair on disk is one a consumer can load.
    let check = std::process::Command::new(certsync_bin())
        .args(["check", "--warn-within", "10m", target.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    wait_metric(port, "certsync_csr_pending{mapping=\"svc\"}", 0.0);
    assert_eq!(
        cs.log().matches("kubectl certificate approve").count(),
        1,
        "warned once"
    );
    assert!(!cs.log().contains("PRIVATE KEY"), "no key in the log");
    drop(cs);
    env.signer.cleanup().await;
}

/// The wait for approval and issuance watches the request with
/// `--watch-timeout`: a watch the API server has not ended 5 s after that
/// is given up and the request read again, instead of hanging until the
/// approval timeout (15 min). Against a real cluster, which cannot be
/// stalled on demand, the short watches are re-made until issuance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_is_given_up_while_waiting_for_the_certificate() {
    let env = Env::new("stall").await;
    let cs = env.start_with(&env.spec(""), None, &["--watch-timeout", "2s"]);
    let name = env.signer.next_request(&[]).await;
    cs.wait_log(&format!("kubectl certificate approve {name}"));
    if let Some(fake) = &env._fake {
        // Watches hang without a byte, and new requests wait, for longer
        // than the watch timeout and the margin.
        fake.stall(true);
        tokio::time::sleep(Duration::from_secs(9)).await;
        fake.stall(false);
        cs.wait_log("did not end the watch within its 2s timeout and 5s more");
    } else {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let cert = env.signer.sign(&name, HOUR).await;
    wait_cert(
        &env.target(),
        &cert,
        "the certificate issued after the stall",
    );
    drop(cs);
    env.signer.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_is_retried_and_the_retry_succeeds() {
    let env = Env::new("deny").await;
    let port = free_port();
    let cs = env.start_with(&env.spec(""), Some(port), &["--events"]);
    let first = env.signer.next_request(&[]).await;
    env.signer
        .deny(&first, "NotThisTime", "the operator wants a second try")
        .await;
    cs.wait_log("NotThisTime: the operator wants a second try");
    wait_metric(
        port,
        "certsync_csr_renewal_errors_total{mapping=\"svc\",reason=\"denied\"}",
        1.0,
    );
    let second = env.signer.next_request(std::slice::from_ref(&first)).await;
    let cert = env.signer.sign(&second, HOUR).await;
    let target = env.target();
    wait_cert(&target, &cert, "the retried certificate");

    // --events: the failure on the denied request, the flip on the issued
    // one (cluster-scoped objects' events live in `default`).
    use k8s_openapi::api::events::v1::Event;
    let events: kube::Api<Event> =
        kube::Api::namespaced(kube_client(&env.kubeconfig).await, "default");
    let about = |e: &Event| e.regarding.as_ref().and_then(|r| r.name.clone());
    let mut mine: Vec<Event> = Vec::new();
    for _ in 0..200 {
        mine = events.list(&Default::default()).await.unwrap().items;
        mine.retain(|e| [Some(&first), Some(&second)].contains(&about(e).as_ref()));
        if mine.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed = mine
        .iter()
        .find(|e| e.reason.as_deref() == Some("CertificateRequestFailed"))
        .unwrap_or_else(|| panic!("no CertificateRequestFailed in {mine:?}"));
    assert_eq!(about(failed).as_ref(), Some(&first));
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert!(failed.note.as_deref().unwrap().contains("NotThisTime"));
    let regarding = failed.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("CertificateSigningRequest"));
    assert_eq!(
        regarding.uid,
        env.signer.api.get(&first).await.unwrap().metadata.uid
    );
    let updated = mine
        .iter()
        .find(|e| e.reason.as_deref() == Some("CertificateUpdated"))
        .unwrap_or_else(|| panic!("no CertificateUpdated in {mine:?}"));
    assert_eq!(about(updated).as_ref(), Some(&second));
    drop(cs);
    for e in mine {
        let _ = events
            .delete(e.metadata.name.as_deref().unwrap(), &Default::default())
            .await;
    }
    env.signer.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_does_not_match_the_request_is_never_published() {
    let env = Env::new("forged").await;
    let port = free_port();
    let cs = env.start(&env.spec(""), Some(port));
    let target = env.target();

    // A certificate for the requested names but another key.
    let first = env.signer.next_request(&[]).await;
    env.signer.approve(&first).await;
    env.signer.issue_with(&first, HOUR, true, |_| {}).await;
    cs.wait_log(&format!(
        "certificatesigningrequest {first}: the issued certificate is refused"
    ));

    // One with a name nobody asked for.
    let mut seen = vec![first];
    let second = env.signer.next_request(&seen).await;
    env.signer.approve(&second).await;
    env.signer
        .issue_with(&second, HOUR, false, |params| {
            params.subject_alt_names.push(rcgen::SanType::DnsName(
                "kube-apiserver".try_into().unwrap(),
            ));
        })
        .await;
    cs.wait_log("DNS names are [\"kube-apiserver\", \"svc.example\"]");
    wait_metric(
        port,
        "certsync_csr_renewal_errors_total{mapping=\"svc\",reason=\"mismatch\"}",
        2.0,
    );
    assert!(
        !target.join("..data").exists(),
        "nothing was published: {:?}",
        std::fs::read_dir(&target).map(|d| d.count())
    );

    // The next request, answered properly, is published.
    seen.push(second);
    let third = env.signer.next_request(&seen).await;
    let cert = env.signer.sign(&third, HOUR).await;
    wait_cert(&target, &cert, "the proper certificate");
    assert_eq!(
        revision_names(&target).len(),
        1,
        "only the good pair was ever written"
    );
    drop(cs);
    env.signer.cleanup().await;
}

/// A signer that grants more than was asked (another subject attribute,
/// more usages, a CA certificate) is refused with the request and the
/// field named; nothing is published. Each case in a fresh process, which
/// asks at once (no backoff to wait out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_granting_more_than_was_asked_is_refused() {
    use rcgen::{ExtendedKeyUsagePurpose as Eku, KeyUsagePurpose as Ku};
    let env = Env::new("overreach").await;
    let target = env.target();
    type Tweak = fn(&mut rcgen::CertificateParams);
    let cases: [(&str, Tweak); 4] = [
        (
            "subject is [O=\"system:masters\", CN=\"svc.example\"], the mapping asks for exactly [CN=\"svc.example\"]",
            |p| {
                p.distinguished_name
                    .push(rcgen::DnType::OrganizationName, "system:masters");
            },
        ),
        (
            "extended key usage is [\"server auth\", \"client auth\", \"code signing\"]",
            |p| {
                p.extended_key_usages.push(Eku::ClientAuth);
                p.extended_key_usages.push(Eku::CodeSigning);
            },
        ),
        ("key usage is [\"digital signature\", \"cert sign\"]", |p| {
            p.key_usages.push(Ku::KeyCertSign)
        }),
        ("leaf certificate: basic constraints say CA:TRUE", |p| {
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }),
    ];
    let mut seen = Vec::new();
    for (want, tweak) in cases {
        let cs = env.start(&env.spec(""), None);
        let name = env.signer.next_request(&seen).await;
        env.signer.approve(&name).await;
        env.signer.issue_with(&name, HOUR, false, tweak).await;
        cs.wait_log(&format!(
            "certificatesigningrequest {name}: the issued certificate is refused: {want}"
        ));
        assert!(
            !target.join("..data").exists(),
            "nothing published after {want}"
        );
        seen.push(name);
        drop(cs);
    }
    env.signer.cleanup().await;
}

/// A signer whose certificates are already past their renewal point when
/// issued (clock skew, a CA about to expire): each is published while it
/// is valid, a warning says why, the renewal-error metric counts it, and no
/// new request comes before the renewal floor (5 min by default), however
/// fast the signer answers: one request over several seconds, not a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_already_due_for_renewal_is_not_renewed_in_a_loop() {
    let env = Env::new("due").await;
    let port = free_port();
    let cs = env.start(&env.spec(""), Some(port));
    let target = env.target();
    // Valid for ten more minutes, but issued ten hours ago: 70-90 % of its
    // lifetime is long past. Every request is answered at once, for 6 s.
    let sign_all = async {
        let until = std::time::Instant::now() + Duration::from_secs(6);
        let mut last = None;
        while std::time::Instant::now() < until {
            for c in env.signer.requests().await {
                if c.status
                    .as_ref()
                    .and_then(|s| s.certificate.as_ref())
                    .is_some()
                {
                    continue;
                }
                let name = c.metadata.name.unwrap();
                env.signer.approve(&name).await;
                let cert = env
                    .signer
                    .issue_with(&name, Duration::from_secs(600), false, |p| {
                        p.not_before = time::OffsetDateTime::now_utc() - time::Duration::hours(10);
                    })
                    .await;
                last = Some(cert);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        last.expect("a request was made")
    };
    let cert = sign_all.await;
    wait_cert(&target, &cert, "the issued certificate, valid for now");
    let requests = env.signer.requests().await.len();
    assert_eq!(requests, 1, "one request, not a loop");
    assert_eq!(revision_names(&target).len(), 1, "one revision");
    cs.wait_log("is already past");
    wait_metric(
        port,
        "certsync_csr_renewal_errors_total{mapping=\"svc\",reason=\"renewal_floor\"}",
        1.0,
    );
    drop(cs);
    env.signer.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renews_at_the_deadline_with_a_new_key() {
    let env = Env::new("rotate").await;
    let port = free_port();
    // The main container, told after every flip as for any mapping.
    let main = recorder(env.tmp.path(), &unique("csrmain"), false);
    let name = main.file.file_stem().unwrap().to_str().unwrap().to_owned();
    // A 20 s certificate renewed at 30-40 % of its life: 4-6 s after it
    // is issued, above a 1 s renewal floor (2 s: 10 % of the lifetime).
    let cs = env.start_with(
        &env.spec(",renew=0.3-0.4"),
        Some(port),
        &["--reload-process", &name, "--csr-renew-floor", "1s"],
    );
    let target = env.target();
    let first = env.signer.next_request(&[]).await;
    let cert1 = env.signer.sign(&first, Duration::from_secs(20)).await;
    wait_cert(&target, &cert1, "the first certificate");
    wait_for("a reload after the first flip", || {
        (main.hups() == 1).then_some(())
    });
    let (_, _, key1) = read_live(&target).unwrap();
    cs.wait_log("renewal scheduled");

    let second = env.signer.next_request(std::slice::from_ref(&first)).await;
    let cert2 = env.signer.sign(&second, HOUR).await;
    wait_cert(&target, &cert2, "the renewed certificate");
    let (_, _, key2) = read_live(&target).unwrap();
    assert_ne!(key1, key2, "every rotation has a new key");
    wait_for("a reload after the renewal", || {
        (main.hups() == 2).then_some(())
    });
    wait_metric(
        port,
        "certsync_csr_rotation_seconds_count{mapping=\"svc\"}",
        1.0,
    );
    drop(cs);
    env.signer.cleanup().await;
}

/// kube-controller-manager's signer backdates notBefore 5 minutes and
/// grants the `expirationSeconds` asked from now, so a `lifetime=10m`
/// certificate lives 900 s: certsync's window counts on the whole
/// validity, and its floor is a tenth of it (90 s), so `renew=0.44-0.45`
/// (396-405 s after notBefore, 96-105 s after issuance) is scheduled and
/// not held back. What `tests/real_signer.rs` checks on a real control
/// plane, here on any API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_backdated_as_kube_controller_managers_signer_does_renews_on_time() {
    let env = Env::new("kcmsigner").await;
    let cs = env.start_with(
        &env.spec(",lifetime=10m,renew=0.44-0.45"),
        None,
        &["--csr-renew-floor", "1s"],
    );
    let target = env.target();
    let first = env.signer.next_request(&[]).await;
    assert_eq!(
        env.signer.expiration_seconds(&first).await,
        Some(600),
        "lifetime=10m asks for expirationSeconds"
    );
    let cert1 = env.signer.sign_as_kube_controller_manager(&first).await;
    wait_cert(&target, &cert1, "the backdated certificate");
    assert_eq!(
        support::certs::validity_secs(cert1.as_bytes()),
        900,
        "600 s asked, 5 minutes backdated"
    );
    cs.wait_log("certificate is current; renewal scheduled");
    assert!(!cs.log().contains("renewal held back"), "{}", cs.log());
    let (_, _, key1) = read_live(&target).unwrap();

    // The renewal is due ~100 s after issuance: a bound on a hang, not a
    // measure.
    let start = std::time::Instant::now();
    let second = loop {
        let other = env
            .signer
            .requests()
            .await
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .find(|n| *n != first);
        if let Some(name) = other {
            break name;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "no renewal request within 180 s: {}",
            cs.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let cert2 = env.signer.sign_as_kube_controller_manager(&second).await;
    wait_cert(&target, &cert2, "the renewed certificate");
    let (_, _, key2) = read_live(&target).unwrap();
    assert_ne!(key1, key2, "every renewal has a new key");
    assert!(!cs.log().contains("renewal held back"), "{}", cs.log());
    drop(cs);
    env.signer.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_keep_a_good_pair_and_abandon_a_pending_request() {
    let env = Env::new("restart").await;
    let target = env.target();

    // Killed while its request is pending: the next process asks again
    // (the old key is gone), and the abandoned request's certificate, even
    // when issued, is never published.
    let cs = env.start(&env.spec(""), None);
    let abandoned = env.signer.next_request(&[]).await;
    drop(cs);
    let cs = env.start(&env.spec(""), None);
    let mut seen = vec![abandoned.clone()];
    let fresh = env.signer.next_request(&seen).await;
    env.signer.sign(&abandoned, HOUR).await;
    let cert = env.signer.sign(&fresh, HOUR).await;
    wait_cert(&target, &cert, "the fresh request's certificate");
    seen.push(fresh);
    drop(cs);

    // Restarted with a good live pair: no request.
    let cs = env.start(&env.spec(""), None);
    cs.wait_log("renewal scheduled");
    assert_eq!(
        env.signer.requests().await.len(),
        seen.len(),
        "no new request"
    );
    drop(cs);

    // A configuration the live certificate does not satisfy (a new SAN):
    // a request at once, published when issued.
    let spec = env.spec(",dns=new.example");
    let cs = env.start(&spec, None);
    cs.wait_log("does not satisfy the mapping");
    let changed = env.signer.next_request(&seen).await;
    let csr = env.signer.api.get(&changed).await.unwrap();
    let pem = String::from_utf8(csr.spec.request.0).unwrap();
    let req = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
    assert!(format!("{:?}", req.params.subject_alt_names).contains("new.example"));
    let cert = env.signer.sign(&changed, HOUR).await;
    wait_cert(&target, &cert, "the certificate with the new name");
    drop(cs);
    env.signer.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_deleted_request_is_retried() {
    let env = Env::new("failed").await;
    let cs = env.start(&env.spec(""), None);
    let first = env.signer.next_request(&[]).await;
    env.signer.approve(&first).await;
    cs.wait_log("approved; waiting for the signer");
    env.signer
        .fail(
            &first,
            "SignerValidationFailure",
            "the signer refused the subject",
        )
        .await;
    cs.wait_log("failed: SignerValidationFailure: the signer refused the subject");

    let mut seen = vec![first];
    let second = env.signer.next_request(&seen).await;
    env.signer
        .api
        .delete(&second, &Default::default())
        .await
        .unwrap();
    cs.wait_log(&format!(
        "certificatesigningrequest {second} was deleted before a certificate was issued"
    ));
    seen.push(second);
    let third = env.signer.next_request(&seen).await;
    let cert = env.signer.sign(&third, HOUR).await;
    let target = env.target();
    wait_cert(&target, &cert, "the certificate");
    drop(cs);
    env.signer.cleanup().await;
}

/// `ca=configmap:NS/NAME/KEY`: the issued chain is checked against the CA
/// in a ConfigMap (as `kube-root-ca.crt` holds one), which is published as
/// `ca.crt`; a chain to any other CA is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signer_ca_can_come_from_a_configmap() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = Env::new("cmca").await;
    let ns = support::e2e_namespace();
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(kube_client(&env.kubeconfig).await, &ns);
    let name = format!("certsync-signer-ca-{}", std::process::id());
    // Another signer's CA first: what this signer issues must not chain.
    let other = Signer::new(kube_client(&env.kubeconfig).await, "example.com/other");
    let cm = |pem: &str| -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "data": {"signer.crt": pem},
        }))
        .unwrap()
    };
    cms.create(&Default::default(), &cm(&other.ca_pem))
        .await
        .unwrap();
    let spec = format!(
        "csr:{}={},name=svc,cn=svc.example,usage=digital-signature,usage=server-auth,\
         ca=configmap:{ns}/{name}/signer.crt",
        env.signer.name,
        env.target().display()
    );
    let cs = env.start(&spec, None);
    let first = env.signer.next_request(&[]).await;
    env.signer.sign(&first, HOUR).await;
    cs.wait_log("does not chain to the signer CA");

    let mut fixed = cms.get(&name).await.unwrap();
    fixed.data = cm(&env.signer.ca_pem).data;
    cms.replace(&name, &Default::default(), &fixed)
        .await
        .unwrap();
    let second = env.signer.next_request(std::slice::from_ref(&first)).await;
    let cert = env.signer.sign(&second, HOUR).await;
    let target = env.target();
    wait_cert(&target, &cert, "the certificate");
    let (rev, _, _) = read_live(&target).unwrap();
    assert_eq!(
        std::fs::read(target.join(rev).join("ca.crt")).unwrap(),
        env.signer.ca_pem.as_bytes()
    );
    drop(cs);
    let _ = cms.delete(&name, &Default::default()).await;
    env.signer.cleanup().await;
}

/// `ca=clustertrustbundle`: the signer's ClusterTrustBundles, selected by
/// signer name and joined in name order, are the CA the chain must verify
/// against and are published as `ca.crt`. Without the API the error says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signer_ca_can_come_from_cluster_trust_bundles() {
    let env = Env::new("ctb").await;
    let client = kube_client(&env.kubeconfig).await;
    let Some(ctbs) = support::trust_bundles_api(client.clone(), "ctb").await else {
        return;
    };
    let prefix = env.signer.name.replace('/', ":");
    let other = Signer::new(client, "example.com/other");
    let bundle = |name: &str, pem: &str| {
        support::trust_bundle(&format!("{prefix}:{name}"), &env.signer.name, pem, &[])
    };
    // Name order: "a-next" (another CA, e.g. the next one in a rollover)
    // before "b-current" (the signer's).
    for (name, pem) in [("b-current", &env.signer.ca_pem), ("a-next", &other.ca_pem)] {
        ctbs.create(&Default::default(), &bundle(name, pem))
            .await
            .unwrap();
    }
    let cs = env.start(
        &env.spec("").replace(
            &format!("ca=file:{}", env.tmp.path().join("ca.crt").display()),
            "ca=clustertrustbundle",
        ),
        None,
    );
    let name = env.signer.next_request(&[]).await;
    let cert = env.signer.sign(&name, HOUR).await;
    let target = env.target();
    wait_cert(&target, &cert, "the certificate");
    let (rev, _, _) = read_live(&target).unwrap();
    let published = std::fs::read_to_string(target.join(rev).join("ca.crt")).unwrap();
    assert_eq!(
        published,
        format!(
            "{}\n{}\n",
            other.ca_pem.trim_end(),
            env.signer.ca_pem.trim_end()
        )
    );
    drop(cs);
    for n in ["a-next", "b-current"] {
        let _ = ctbs
            .delete(&format!("{prefix}:{n}"), &Default::default())
            .await;
    }
    env.signer.cleanup().await;
}

/// `clustertrustbundle:SIGNER` (and `:NAME`) mappings publish the
/// selected bundles as `ca.crt` and follow the selection as bundles come,
/// change and go; `label=` narrows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_bundle_mappings_follow_their_selection() {
    let env = Env::new("ctbsrc").await;
    let client = kube_client(&env.kubeconfig).await;
    let Some(ctbs) = support::trust_bundles_api(client.clone(), "ctbsrc").await else {
        return;
    };
    let signer = &env.signer.name;
    let prefix = signer.replace('/', ":");
    let cas: Vec<String> = (0..3)
        .map(|i| String::from_utf8(support::certs::Pair::new(&format!("ca{i}")).ca_cert).unwrap())
        .collect();
    let put = |name: &str, pem: &str, env_label: &str| {
        support::trust_bundle(
            &format!("{prefix}:{name}"),
            signer,
            pem,
            &[("env", env_label)],
        )
    };
    ctbs.create(&Default::default(), &put("b", &cas[1], "prod"))
        .await
        .unwrap();
    ctbs.create(&Default::default(), &put("c", &cas[2], "test"))
        .await
        .unwrap();
    let all = env.tmp.path().join("all");
    let prod = env.tmp.path().join("prod");
    let one = env.tmp.path().join("one");
    let cs = Certsync::start(
        &[
            "run",
            "--kubeconfig",
            env.kubeconfig.to_str().unwrap(),
            "--sync",
            &format!("clustertrustbundle:{signer}={},name=all", all.display()),
            "--sync",
            &format!(
                "clustertrustbundle:{signer}={},name=prod,label=env=prod",
                prod.display()
            ),
            "--sync",
            &format!("clustertrustbundle:{prefix}:c={},name=one", one.display()),
        ],
        env.tmp.path(),
    );
    let ca = |t: &Path| std::fs::read_to_string(t.join("ca.crt")).ok();
    let want = |pems: &[&String]| pems.iter().map(|p| p.as_str()).collect::<String>();
    wait_for("all of the signer's bundles, in name order", || {
        (ca(&all)? == want(&[&cas[1], &cas[2]])).then_some(())
    });
    wait_for("the prod bundle", || {
        (ca(&prod)? == want(&[&cas[1]])).then_some(())
    });
    wait_for("bundle c by name", || {
        (ca(&one)? == want(&[&cas[2]])).then_some(())
    });

    // A new bundle sorts first; a removed one leaves.
    ctbs.create(&Default::default(), &put("a", &cas[0], "prod"))
        .await
        .unwrap();
    wait_for("the new bundle", || {
        (ca(&all)? == want(&[&cas[0], &cas[1], &cas[2]])).then_some(())
    });
    wait_for("prod gains it", || {
        (ca(&prod)? == want(&[&cas[0], &cas[1]])).then_some(())
    });
    ctbs.delete(&format!("{prefix}:b"), &Default::default())
        .await
        .unwrap();
    wait_for("the removed bundle gone", || {
        (ca(&all)? == want(&[&cas[0], &cas[2]])).then_some(())
    });
    wait_for("prod loses it", || {
        (ca(&prod)? == want(&[&cas[0]])).then_some(())
    });
    assert_eq!(ca(&one).unwrap(), want(&[&cas[2]]));
    drop(cs);
    for n in ["a", "c"] {
        let _ = ctbs
            .delete(&format!("{prefix}:{n}"), &Default::default())
            .await;
    }
}

/// `count` distinct CA certificates as PEM, numbered from `first`: one
/// rcgen CA whose name is rewritten in its DER (same length, so it still
/// parses; nothing checks a trust anchor's own signature), so that
/// megabytes of them cost one key.
fn distinct_cas(first: usize, count: usize) -> Vec<String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    let template = support::certs::Pair::new("ctbfill-000000").ca_cert;
    let der = CertificateDer::from_pem_slice(&template).unwrap().to_vec();
    let name = b"ctbfill-000000";
    (first..first + count)
        .map(|i| {
            let mut d = der.clone();
            let new = format!("ctbfill-{i:06}");
            let at: Vec<usize> = (0..d.len() - name.len())
                .filter(|&k| &d[k..k + name.len()] == name)
                .collect();
            assert_eq!(at.len(), 2, "issuer and subject");
            for k in at {
                d[k..k + name.len()].copy_from_slice(new.as_bytes());
            }
            certsync::pem::encode("CERTIFICATE", &d)
        })
        .collect()
}

/// Each of a signer's ClusterTrustBundles may be as large as the API allows
/// (1 MiB); a `clustertrustbundle:SIGNER` mapping publishes them joined, each
/// certificate once, up to 4 MiB (docs/reference/mappings.md), and
/// refuses a selection past that by name, keeping the last good files and
/// counting it in `certsync_validation_failures_total`; the admin port
/// keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_size_trust_bundles_are_joined_up_to_the_documented_bound() {
    let env = Env::new("ctbbig").await;
    let client = kube_client(&env.kubeconfig).await;
    let Some(ctbs) = support::trust_bundles_api(client.clone(), "ctbbig").await else {
        return;
    };
    let signer = &env.signer.name;
    let prefix = signer.replace('/', ":");
    // From one template, so all are as long (another key's signature
    // may be a byte longer); more than needed, cut to five bundles.
    let cas = distinct_cas(0, 5 * 1024 * 1024 / 400);
    let per = 1024 * 1024 / cas[0].len();
    let bundles: Vec<String> = cas.chunks(per).take(5).map(|c| c.concat()).collect();
    assert!(
        bundles.len() == 5
            && bundles
                .iter()
                .all(|b| b.len() <= 1024 * 1024 && b.len() > 1000 * 1024)
    );
    let pp = kube::api::PostParams::default();
    let put = |name: &str, pem: &str| {
        support::trust_bundle(&format!("{prefix}:{name}"), signer, pem, &[])
    };
    for (i, b) in bundles.iter().enumerate().take(2) {
        ctbs.create(&pp, &put(&format!("b{i}"), b)).await.unwrap();
    }
    let target = env.tmp.path().join("all");
    let port = free_port();
    // A Pod never scheduled stands for certsync's own: a selection across
    // the cluster has no object of its own, its Events go there.
    let ns = support::e2e_namespace();
    let pod_name = unique("certsync-ctbbig");
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), &ns);
    let pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pod_name},
        "spec": {
            "schedulingGates": [{"name": "certsync.invalid/never"}],
            "containers": [{"name": "certsync", "image": "registry.k8s.io/pause:3.10"}],
        },
    }))
    .unwrap();
    pods.create(&pp, &pod).await.unwrap();
    let cs = Certsync::start_with(
        std::process::Command::new(certsync_bin())
            .args([
                "run",
                "--events",
                "--kubeconfig",
                env.kubeconfig.to_str().unwrap(),
                "--admin-addr",
                &format!("127.0.0.1:{port}"),
                "--sync",
                &format!("clustertrustbundle:{signer}={},name=all", target.display()),
            ])
            .env("POD_NAME", &pod_name)
            .env("POD_NAMESPACE", &ns),
        env.tmp.path(),
    );
    let ca = || std::fs::read_to_string(target.join("ca.crt")).ok();
    // Megabytes of PEM through a debug build: ~5 s alone, over 20 s beside
    // the rest of the suite on 2 cores (CI).
    let slow = Duration::from_secs(120);
    wait_for_within("two full-size bundles published", slow, || {
        (ca()? == bundles[..2].concat()).then_some(())
    });
    // A copy of b0 (sorting first) adds nothing: each certificate counts
    // once, so four distinct full-size bundles and the copy are published.
    ctbs.create(&pp, &put("a-copy", &bundles[0])).await.unwrap();
    for (i, b) in bundles.iter().enumerate().take(4).skip(2) {
        ctbs.create(&pp, &put(&format!("b{i}"), b)).await.unwrap();
    }
    wait_for_within("four distinct full-size bundles published", slow, || {
        (ca()? == bundles[..4].concat()).then_some(())
    });
    // A fifth is past the bound: refused, naming the selection.
    ctbs.create(&pp, &put("b4", &bundles[4])).await.unwrap();
    let counted = r#"certsync_validation_failures_total{mapping="all",reason="too_large"}"#;
    wait_for_within("the refusal counted", slow, || {
        http_get(port, "/metrics").filter(|(s, body)| *s == 200 && body.contains(counted))
    });
    cs.wait_log(&format!(
        "clustertrustbundles of signer {signer}: the selected bundles hold more than 4194304 bytes"
    ));
    assert_eq!(
        ca().unwrap(),
        bundles[..4].concat(),
        "the last good files stay"
    );
    assert_eq!(http_get(port, "/livez").map(|r| r.0), Some(200));
    // Named on certsync's Pod as other refusals are.
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), &ns);
    let rejected = event_about(&events, &pod_name, "CertificateRejected")
        .await
        .unwrap_or_else(|| panic!("no CertificateRejected Event on {pod_name}"));
    let note = rejected.note.unwrap_or_default();
    assert!(
        note.contains("too_large") && note.contains(&format!("signer {signer}")),
        "{note}"
    );
    let _ = events
        .delete(
            &rejected.metadata.name.unwrap_or_default(),
            &Default::default(),
        )
        .await;
    // Back within the bound, published again.
    for n in ["a-copy", "b0"] {
        ctbs.delete(&format!("{prefix}:{n}"), &Default::default())
            .await
            .unwrap();
    }
    wait_for_within("b1 to b4 published", slow, || {
        (ca()? == bundles[1..5].concat()).then_some(())
    });
    drop(cs);
    let _ = pods.delete(&pod_name, &Default::default()).await;
    for i in 1..5 {
        let _ = ctbs
            .delete(&format!("{prefix}:b{i}"), &Default::default())
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_trust_bundles_is_named_in_the_error() {
    // Only the test API server can stop serving an API.
    let env = Env::test_server("noctb").await;
    let fake = env._fake.as_ref().expect("the test API server");
    fake.serve_cluster_trust_bundles(false);
    let cs = env.start(
        &env.spec("").replace(
            &format!("ca=file:{}", env.tmp.path().join("ca.crt").display()),
            "ca=clustertrustbundle",
        ),
        None,
    );
    let name = env.signer.next_request(&[]).await;
    env.signer.sign(&name, HOUR).await;
    cs.wait_log("does not serve ClusterTrustBundles (certificates.k8s.io/v1beta1");
    assert!(
        read_live(&env.target()).is_none(),
        "nothing unchecked was published"
    );
    drop(cs);
    // A clustertrustbundle: mapping says the same.
    let bundle = env.tmp.path().join("bundle");
    let cs = Certsync::start(
        &[
            "run",
            "--kubeconfig",
            env.kubeconfig.to_str().unwrap(),
            "--sync",
            &format!(
                "clustertrustbundle:{}={}",
                env.signer.name,
                bundle.display()
            ),
        ],
        env.tmp.path(),
    );
    cs.wait_log("the API server does not serve ClusterTrustBundles");
    drop(cs);
    env.signer.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstraps_with_a_token_then_renews_with_its_own_certificate() {
    // Against a test API server of its own whatever CERTSYNC_E2E_KUBECONFIG
    // says: a real cluster's kube-controller-manager issues these, and its
    // bootstrap tokens are the cluster's own.
    use support::apiserver::ApiServer;
    use support::signer::TestCa;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The API server trusts client certificates from the signer's CA, as
    // kube-apiserver's --client-ca-file trusts kube-controller-manager's.
    let serving = support::certs::Pair::new("kube-apiserver.test");
    let ca = TestCa::new("kube-apiserver-client");
    let server =
        ApiServer::start_tls_client_ca(&serving.cert, &serving.key, ca.pem.as_bytes()).await;
    std::fs::write(dir.join("server-ca.crt"), &serving.ca_cert).unwrap();
    let admin = server.tls_kubeconfig(dir, &dir.join("server-ca.crt"));
    let text = std::fs::read_to_string(&admin).unwrap().replace(
        "    server:",
        "    tls-server-name: kube-apiserver.test\n    server:",
    );
    std::fs::write(&admin, &text).unwrap();
    let bootstrap = dir.join("bootstrap.kubeconfig");
    std::fs::write(&bootstrap, text.replace("test-token", "bootstrap-token")).unwrap();
    server.add_user(
        "bootstrap-token",
        support::apiserver::csr::User {
            name: "system:bootstrap:abcdef".into(),
            uid: "bootstrap-uid".into(),
            groups: vec!["system:bootstrappers".into()],
        },
    );
    let signer = Signer::with_ca(
        kube_client(&admin).await,
        "kubernetes.io/kube-apiserver-client",
        ca,
    );
    let target = dir.join("scheduler");
    let spec = format!(
        "csr:kubernetes.io/kube-apiserver-client={},name=sched,cn=system:kube-scheduler,\
         bootstrap-kubeconfig={},write-kubeconfig=kubeconfig,renew=0.3-0.4",
        target.display(),
        bootstrap.display()
    );
    // No --kubeconfig: the bootstrap kubeconfig is all it has.
    let cs = Certsync::start(&["run", "--sync", &spec, "--csr-renew-floor", "1s"], dir);

    let first = signer.next_request(&[]).await;
    let csr = signer.api.get(&first).await.unwrap();
    assert_eq!(
        csr.spec.username.as_deref(),
        Some("system:bootstrap:abcdef")
    );
    assert_eq!(
        csr.spec.usages.as_deref().unwrap(),
        ["digital signature", "client auth"]
    );
    let cert1 = signer.sign(&first, Duration::from_secs(20)).await;
    wait_cert(&target, &cert1, "the bootstrapped certificate");

    // The kubeconfig beside the pair authenticates as the certificate.
    let own = kube_client(&target.join("kubeconfig")).await;
    let api: kube::Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        kube::Api::all(own);
    let mine = api
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"generateName": "probe-"},
                "spec": {
                    "request": base64_of(support::certs::csr_pem("probe", "probe.example").as_bytes()),
                    "signerName": "example.com/probe",
                    "usages": ["client auth"],
                }
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(mine.spec.username.as_deref(), Some("system:kube-scheduler"));

    // The renewal is requested with the certificate, not the token.
    let second = signer.next_request(std::slice::from_ref(&first)).await;
    let csr = signer.api.get(&second).await.unwrap();
    assert_eq!(csr.spec.username.as_deref(), Some("system:kube-scheduler"));
    let cert2 = signer.sign(&second, HOUR).await;
    wait_cert(&target, &cert2, "the renewed certificate");
    drop(cs);
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `run --once` (an init container): waits for the certificate, publishes
/// it and exits 0; run again with the good pair in place, it requests
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_waits_for_the_certificate_then_exits() {
    let env = Env::new("once").await;
    let spec = env.spec("");
    let run_once = || {
        std::process::Command::new(certsync_bin())
            .args(["run", "--once", "--kubeconfig"])
            .arg(&env.kubeconfig)
            .args(["--sync", &spec])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let child = run_once();
    let name = env.signer.next_request(&[]).await;
    let cert = env.signer.sign(&name, HOUR).await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(live_cert(&env.target()).unwrap(), cert.as_bytes());

    let again = run_once().wait_with_output().unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(env.signer.requests().await.len(), 1, "no second request");
    assert_eq!(live_cert(&env.target()).unwrap(), cert.as_bytes());
    env.signer.cleanup().await;
}

#[test]
fn bad_csr_mappings_are_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path().join("t");
    let t = t.display();
    for (spec, want) in [
        (
            format!("csr:no-domain={t},cn=x"),
            "the signer name must be DOMAIN/PATH",
        ),
        (format!("csr:example.com/s={t}"), "needs a subject"),
        (
            format!("csr:example.com/s={t},cn=x"),
            "give them, e.g. usage=digital-signature,usage=server-auth",
        ),
        (
            format!("csr:kubernetes.io/kubelet-serving={t},cn=x,lifetime=5m"),
            "at least 10m",
        ),
        (
            format!("csr:kubernetes.io/kubelet-serving={t},cn=x,key-alg=dsa"),
            "key algorithm \"dsa\"",
        ),
        (
            format!("csr:kubernetes.io/kubelet-serving={t},cn=x,usage=root"),
            "usage \"root\" is not a Kubernetes key usage",
        ),
        (
            format!("csr:kubernetes.io/kubelet-serving={t},cn=x,key=tls.key"),
            "key does not apply to csr: sources",
        ),
        (
            format!("csr:kubernetes.io/kubelet-serving={t},cn=x,renew=0.9-0.7"),
            "renew \"0.9-0.7\"",
        ),
        (
            format!("dir:/etc={t},cn=x"),
            "cn applies to csr: and ca: sources only",
        ),
    ] {
        let out = std::process::Command::new(certsync_bin())
            .args(["run", "--once", "--sync", &spec])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{spec}: {err}");
        assert!(err.contains(want), "{spec}: want {want:?} in {err}");
    }
}

/// A `csr:` mapping's rollback pin holds across restarts: rolled back to
/// the pair found in the target (revision 0), a restarted certsync requests
/// nothing and keeps it, `certsync_rollback_pinned` is 1; once `..pin` is
/// removed the metric drops to 0 and the mapping requests and publishes
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_pin_holds_across_restarts_and_rm_pin_releases_it() {
    let env = Env::new("pin").await;
    let target = env.target();
    // The pair found in a fresh target: kept as revision 0.
    let found = support::certs::Pair::new("svc.example");
    std::fs::create_dir(&target).unwrap();
    write_pair(&target, &found);
    let cs = env.start(&env.spec(""), None);
    let first = env.signer.next_request(&[]).await;
    let cert = env.signer.sign(&first, HOUR).await;
    wait_cert(&target, &cert, "the first issued certificate");
    drop(cs);

    let t = target.to_str().unwrap();
    let out = std::process::Command::new(certsync_bin())
        .args(["rollback", "--to", "0", t])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(live_cert(&target).unwrap(), found.cert);

    let port = free_port();
    let cs = env.start_with(&env.spec(""), Some(port), &["--resync", "500ms"]);
    cs.wait_log("pinned by a rollback");
    wait_metric(port, "certsync_rollback_pinned{mapping=\"svc\"}", 1.0);
    // Several resyncs and rechecks later: nothing requested, nothing flipped.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(env.signer.requests().await.len(), 1, "{}", cs.log());
    assert_eq!(live_cert(&target).unwrap(), found.cert, "{}", cs.log());
    assert_eq!(
        metrics(port).get("certsync_rollback_pinned{mapping=\"svc\"}"),
        Some(&1.0)
    );

    std::fs::remove_file(target.join("..pin")).unwrap();
    wait_metric(port, "certsync_rollback_pinned{mapping=\"svc\"}", 0.0);
    let second = env.signer.next_request(std::slice::from_ref(&first)).await;
    let cert = env.signer.sign(&second, HOUR).await;
    wait_cert(
        &target,
        &cert,
        "a certificate issued after the pin was removed",
    );
    drop(cs);
    env.signer.cleanup().await;
}
