//! Reliability and security properties that tests try hard to break.
//! CI runs bounded versions; `CERTSYNC_SOAK=1` runs each ten times longer.

mod support;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use certsync::bundle::{Bundle, CERT_FILE, KEY_FILE};
use certsync::writer::{Writer, WriterOptions};

fn soak(n: u64) -> u64 {
    if std::env::var_os("CERTSYNC_SOAK").is_some() {
        n * 10
    } else {
        n
    }
}

/// A scratch directory under the tests' own temporary directory. Not
/// /dev/shm, though fsync is free there: it is sticky and writable by all,
/// and certsync refuses a target below a directory another user may write
/// (a user could re-create it).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Generation `i`: the certificate and key say which generation they are,
/// padded so a read is not a single tiny syscall.
fn generation(i: u64) -> Bundle {
    let pad = "x".repeat(4096);
    let mut b = Bundle::default();
    b.insert(CERT_FILE, format!("cert {i}\n{pad}").into_bytes(), "gen")
        .unwrap();
    b.insert(KEY_FILE, format!("key {i}\n{pad}").into_bytes(), "gen")
        .unwrap();
    b
}

fn gen_of(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.lines().next()?.split(' ').nth(1)?.parse().ok()
}

/// A reader that resolves `..data` once and reads both files through it
/// never sees a certificate of one generation beside a key of another,
/// across many flips (docs/reference/layout.md, "How consumers should read").
#[test]
fn readers_resolving_data_once_never_see_a_mixed_pair() {
    let dir = scratch();
    let target = dir.path().join("t");
    let w = Writer::open(&target, WriterOptions::default()).unwrap();
    w.publish_then(&generation(0), || {}).unwrap();
    let flips = soak(10_000);
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, mixed, retried) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (t, stop, reads, mixed, retried) = (
                target.clone(),
                stop.clone(),
                reads.clone(),
                mixed.clone(),
                retried.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(rev) = fs::read_link(t.join("..data")) else {
                        continue;
                    };
                    let dir = t.join(rev);
                    // The revision may be retired between the two opens:
                    // that is a retry, never a mix.
                    match (fs::read(dir.join(CERT_FILE)), fs::read(dir.join(KEY_FILE))) {
                        (Ok(c), Ok(k)) => {
                            reads.fetch_add(1, Ordering::Relaxed);
                            if gen_of(&c) != gen_of(&k) || gen_of(&c).is_none() {
                                mixed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => {
                            retried.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for i in 1..=flips {
        w.publish_then(&generation(i), || {}).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let (reads, mixed, retried) = (
        reads.load(Ordering::Relaxed),
        mixed.load(Ordering::Relaxed),
        retried.load(Ordering::Relaxed),
    );
    eprintln!(
        "flips: {flips}, pair reads: {reads}, mixed: {mixed}, retried (revision retired mid-read): {retried}"
    );
    assert_eq!(mixed, 0);
    assert!(reads > flips / 10, "the readers barely ran: {reads} reads");
}

/// A key file is never readable by group or others at any moment. A
/// scanner cannot see a microsecond window between create and chmod, so
/// the syscalls themselves are checked: under strace, every key file must
/// be *created* with a mode without group/other bits (the kernel only ever
/// narrows it by the umask), and never widened afterwards.
#[test]
fn key_files_are_created_with_their_final_mode_never_wider() {
    if !support::tools::have(&["strace"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    let trace = d.path().join("trace");
    let rounds = soak(5);
    for i in 0..rounds {
        let p = support::certs::Pair::new(&format!("round{i}"));
        fs::write(src.join(CERT_FILE), &p.cert).unwrap();
        fs::write(src.join(KEY_FILE), &p.key).unwrap();
        let status = std::process::Command::new("strace")
            .args([
                "-f",
                "-qq",
                "-e",
                "trace=openat,openat2,fchmod,chmod,fchmodat",
                "-o",
            ])
            .arg(&trace)
            .arg(support::certsync_bin())
            .args(["run", "--once", "--key-mode", "0600", "--sync"])
            .arg(format!(
                "dir:{}={}",
                src.display(),
                d.path().join("t").display()
            ))
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let text = fs::read_to_string(&trace).unwrap();
        // openat2(12, "tls.key", {flags=O_WRONLY|O_CREAT|..., mode=0600, resolve=...}, 24) = 13
        // (relative to the revision's fd), or openat(..., 0600) = 11
        let mut key_fds = Vec::new();
        for line in text.lines() {
            if line.contains("tls.key\"") && line.contains("O_CREAT") {
                let call = line.rsplit_once(") = ").map_or(line, |x| x.0);
                let mode = match call.split_once("mode=") {
                    Some((_, rest)) => rest.split([',', '}']).next().unwrap_or(""),
                    None => call.rsplit(", ").next().unwrap_or(""),
                };
                let mode = u32::from_str_radix(mode.trim_start_matches('0'), 8).unwrap_or(0o777);
                assert_eq!(mode & 0o077, 0, "key created with mode {mode:o}: {line}");
                let fd = line.rsplit("= ").next().unwrap().trim().to_owned();
                key_fds.push((line.split(' ').next().unwrap().to_owned(), fd));
            }
            if line.contains("fchmod(") {
                let pid = line.split(' ').next().unwrap();
                let args = line.split_once("fchmod(").unwrap().1;
                let (fd, mode) = args.split_once(", ").unwrap();
                let mode = u32::from_str_radix(mode.split(')').next().unwrap(), 8).unwrap();
                if key_fds.iter().any(|(p, f)| p == pid && f == fd) {
                    assert_eq!(mode & 0o077, 0, "key chmod-ed to {mode:o}: {line}");
                }
            }
        }
        assert!(
            !key_fds.is_empty(),
            "no key file creation seen in the trace:\n{text}"
        );
    }
    eprintln!("traced runs: {rounds}; every key file created 0600 and never widened");
}

mod hostile_input {
    use super::support::certs::Pair;
    use certsync::bundle::{Bundle, CERT_FILE, KEY_FILE};
    use certsync::validate::{Expect, Policy, validate};
    use proptest::prelude::*;
    use std::sync::OnceLock;
    use std::time::{Duration, SystemTime};

    fn policy() -> Policy {
        Policy {
            expect: Expect::Pair,
            now: SystemTime::now(),
            clock_skew: Duration::from_secs(300),
            max_size: certsync::validate::MAX_BUNDLE_SIZE,
        }
    }

    fn pair(cert: &[u8], key: &[u8]) -> Bundle {
        let mut b = Bundle::default();
        b.insert(CERT_FILE, cert.to_vec(), "c").unwrap();
        b.insert(KEY_FILE, key.to_vec(), "k").unwrap();
        b
    }

    /// Two unrelated valid pairs, made once.
    fn pairs() -> &'static (Pair, Pair) {
        static P: OnceLock<(Pair, Pair)> = OnceLock::new();
        P.get_or_init(|| (Pair::new("a"), Pair::new("b")))
    }

    /// Applies `edits` (position, byte) to `bytes` and cuts it at `cut`.
    fn mutate(bytes: &[u8], edits: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
        let mut v = bytes.to_vec();
        for (pos, b) in edits {
            if !v.is_empty() {
                let i = pos % v.len();
                v[i] = *b;
            }
        }
        if let Some(c) = cut {
            v.truncate(c % (v.len() + 1));
        }
        v
    }

    fn cases() -> u32 {
        if std::env::var_os("CERTSYNC_SOAK").is_some() {
            20_000
        } else {
            2_000
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

        /// Arbitrary bytes never panic validation and are never accepted.
        #[test]
        fn arbitrary_bytes_are_refused_without_panic(cert in proptest::collection::vec(any::<u8>(), 0..4096),
                                                     key in proptest::collection::vec(any::<u8>(), 0..4096)) {
            prop_assert!(validate(&pair(&cert, &key), &policy()).is_err());
        }

        /// Mutated valid PEM never panics, and a certificate of one pair is
        /// never accepted with (a mutation of) the other pair's key.
        #[test]
        fn mutated_pem_never_yields_a_mismatched_pair(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
                                                      cut in proptest::option::of(any::<usize>()),
                                                      mutate_cert in any::<bool>()) {
            let (a, b) = pairs();
            let (cert, key) = if mutate_cert {
                (mutate(&a.cert, &edits, cut), b.key.clone())
            } else {
                (a.cert.clone(), mutate(&b.key, &edits, cut))
            };
            prop_assert!(validate(&pair(&cert, &key), &policy()).is_err());
            // The matching pair, mutated, may be accepted only if the edits
            // left the key matching the leaf.
            let own = mutate(&a.key, &edits, cut);
            if let Ok(v) = validate(&pair(&a.cert, &own), &policy()) {
                prop_assert!(v.is_some());
                prop_assert_eq!(certsync::validate::key_matches(&a.cert, &own), Ok(true));
            }
        }
    }
}

/// A small deterministic PRNG (xorshift64*), so a failing run can be
/// replayed with the seed it prints.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed() -> u64 {
    std::env::var("CERTSYNC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_CE27)
}

/// While the source rotates continuously, certsync is SIGKILLed at random
/// moments and restarted. After every kill the target holds a complete,
/// matching pair the source really published; stray temporary entries do
/// not pile up; and once the source stops, the target converges to it.
#[test]
fn survives_sigkill_at_random_moments() {
    use support::certs::Pair;
    let seed = seed();
    let mut rng = Rng(seed);
    let d = scratch();
    let (src, target) = (d.path().join("src"), d.path().join("target"));
    fs::create_dir(&src).unwrap();
    let pool: Arc<Vec<Pair>> = Arc::new((0..8).map(|i| Pair::new(&format!("gen{i}"))).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let rotator = {
        let (src, pool, stop, last) = (src.clone(), pool.clone(), stop.clone(), last.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let p = &pool[(i % 8) as usize];
                // Certificate, then key: a non-atomic writer, as some are.
                support::write_atomic(&src.join(CERT_FILE), &p.cert);
                support::write_atomic(&src.join(KEY_FILE), &p.key);
                last.store(i % 8, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
            i
        })
    };
    let spec = format!("dir:{}={}", src.display(), target.display());
    let args = [
        "run",
        "--debounce",
        "1ms",
        "--resync",
        "20ms",
        "--reload-quiet",
        "1ms",
        "--sync",
        &spec,
    ];
    let kills = soak(300);
    let mut checked = 0;
    for k in 0..kills {
        let mut child = std::process::Command::new(support::certsync_bin())
            .args(args)
            .env("CERTSYNC_ADMIN_ADDR", "127.0.0.1:0")
            .env("CERTSYNC_LOG_LEVEL", "off")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_micros(rng.below(40_000)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if let Some((rev, cert, key)) = support::read_live(&target) {
            let matching = pool.iter().any(|p| p.cert == cert && p.key == key);
            assert!(
                matching,
                "kill {k} (seed {seed}): {rev} holds a pair the source never published"
            );
            // The visible names resolve, through ..data, to a published pair.
            let cert = fs::read(target.join(CERT_FILE)).unwrap();
            let key = fs::read(target.join(KEY_FILE)).unwrap();
            assert!(
                pool.iter().any(|p| p.cert == cert) && pool.iter().any(|p| p.key == key),
                "kill {k} (seed {seed}): visible files do not resolve to published content"
            );
            checked += 1;
        }
        let names: Vec<String> = fs::read_dir(&target)
            .map(|it| {
                it.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let tmp = names.iter().filter(|n| n.starts_with("..tmp")).count();
        let revs = names.iter().filter(|n| n.starts_with("..rev-")).count()
            + fs::read_dir(target.join("..history"))
                .map(|it| it.count())
                .unwrap_or(0);
        assert!(
            tmp <= 3,
            "kill {k} (seed {seed}): temporary entries pile up: {names:?}"
        );
        assert!(
            revs <= 5,
            "kill {k} (seed {seed}): revisions pile up ({revs}): {names:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let rotations = rotator.join().unwrap();
    let final_pair = &pool[last.load(Ordering::Relaxed) as usize];
    let cs = support::Certsync::start(&args, d.path());
    support::wait_for("convergence to the last published pair", || {
        support::read_live(&target)
            .filter(|(_, c, k)| *c == final_pair.cert && *k == final_pair.key)
    });
    drop(cs);
    eprintln!(
        "seed {seed}: {kills} SIGKILLs survived, {checked} post-kill checks of a live pair, {rotations} source rotations; converged"
    );
}

/// A tmpfs of `size` mounted on a new directory, unmounted on drop.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            // mode=0755: a tmpfs root is 1777 by default, which certsync
            // refuses above a target (anyone could re-create it).
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self(dir))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

/// The target's filesystem fills up mid-write: a clear error, the current
/// revision intact and still current, no partial revision left, and the
/// sync completed once space returns.
#[test]
fn disk_full_keeps_the_current_revision_and_recovers() {
    use support::certs::Pair;
    let Some(disk) = SmallDisk::mount("256k") else {
        // Mounting needs root (CAP_SYS_ADMIN); CI runs as root.
        assert!(
            !nix::unistd::geteuid().is_root(),
            "root but cannot mount a tmpfs"
        );
        support::tools::skip(
            "disk_full_keeps_the_current_revision_and_recovers needs root (to mount a small tmpfs)",
        );
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    let target = disk.path().join("target");
    let (a, b) = (Pair::new("before"), Pair::new("after"));
    fs::write(src.join(CERT_FILE), &a.cert).unwrap();
    fs::write(src.join(KEY_FILE), &a.key).unwrap();
    let spec = format!("dir:{}={}", src.display(), target.display());
    let cs = support::Certsync::start(
        &[
            "run",
            "--debounce",
            "50ms",
            "--resync",
            "300ms",
            "--sync",
            &spec,
        ],
        d.path(),
    );
    let live = support::wait_for("first sync", || support::read_live(&target));

    // Fill the disk to the last byte.
    let filler = disk.path().join("filler");
    let mut f = fs::File::create(&filler).unwrap();
    let block = vec![0u8; 4096];
    while std::io::Write::write_all(&mut f, &block).is_ok() {}
    while std::io::Write::write_all(&mut f, &[0]).is_ok() {}
    drop(f);

    support::write_atomic(&src.join(CERT_FILE), &b.cert);
    support::write_atomic(&src.join(KEY_FILE), &b.key);
    cs.wait_log("No space left on device");
    let line = cs
        .log()
        .lines()
        .find(|l| l.contains("No space left"))
        .unwrap()
        .to_owned();
    assert!(
        line.contains("reason=\"write_failed\"") && line.contains("keeping the last good files"),
        "{line}"
    );
    assert_eq!(
        support::read_live(&target).unwrap(),
        live,
        "the current revision is intact and current"
    );
    std::thread::sleep(std::time::Duration::from_millis(700)); // a few failed retries
    let revs: Vec<String> = fs::read_dir(&target)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("..rev-") || n.starts_with("..tmp"))
        .collect();
    assert_eq!(
        revs,
        vec![live.0.clone()],
        "no partial revision or temporary entry left"
    );

    fs::remove_file(&filler).unwrap();
    support::wait_for("the sync to complete once space returns", || {
        support::read_live(&target).filter(|(_, c, k)| *c == b.cert && *k == b.key)
    });
    eprintln!(
        "disk full: write refused with ENOSPC, revision {} kept, recovered after space returned",
        live.0
    );
}

/// No key material in any log line at any level: certsync runs at `trace`
/// through a Secret source (rotation, a rejection, events, a reload) and a
/// host directory, and the log is searched for every key's PEM body lines
/// and for the base64 the Secret's JSON carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_material_in_logs_at_any_level() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{ObjectMeta, PostParams};
    use support::certs::Pair;
    let d = tempfile::tempdir().unwrap();
    let server = support::apiserver::ApiServer::start().await;
    // The kubeconfig's directory is watched (credential rotation); the log
    // file must not live there, or notify's per-event trace lines about
    // the log's own writes would feed each other.
    let kc_dir = d.path().join("kc");
    fs::create_dir(&kc_dir).unwrap();
    let kubeconfig = server.kubeconfig(&kc_dir);
    let client = support::kube_client(&kubeconfig).await;
    let api: kube::Api<Secret> = kube::Api::namespaced(client, "ns");
    let pairs: Vec<Pair> = (0..3).map(|i| Pair::new(&format!("leak{i}"))).collect();
    let secret = |p: &Pair, key: &[u8]| Secret {
        metadata: ObjectMeta {
            name: Some("tls".into()),
            ..Default::default()
        },
        data: Some(
            [
                ("tls.crt".to_owned(), ByteString(p.cert.clone())),
                ("tls.key".to_owned(), ByteString(key.to_vec())),
            ]
            .into(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &secret(&pairs[0], &pairs[0].key))
        .await
        .unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join(CERT_FILE), &pairs[2].cert).unwrap();
    fs::write(src.join(KEY_FILE), &pairs[2].key).unwrap();

    let target = d.path().join("t");
    let kube_spec = format!("secret:ns/tls={}", target.display());
    let dir_spec = format!("dir:{}={}", src.display(), d.path().join("t2").display());
    let hook = format!("http://127.0.0.1:{}/reload", support::free_port());
    let mut cmd = std::process::Command::new(support::certsync_bin());
    cmd.args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--sync",
            &kube_spec,
            "--sync",
            &dir_spec,
            "--events",
            "--reload-url",
            &hook,
            "--reload-retries",
            "0",
        ])
        .args(["--log-level", "trace", "--debounce", "50ms"]);
    let cs = support::Certsync::start_with(&mut cmd, d.path());
    support::wait_for("first sync", || support::read_live(&target));
    let mut current = api.get("tls").await.unwrap();
    current.data = secret(&pairs[1], &pairs[1].key).data;
    api.replace("tls", &PostParams::default(), &current)
        .await
        .unwrap();
    support::wait_for("rotation", || {
        support::read_live(&target).filter(|l| l.1 == pairs[1].cert)
    });
    let mut current = api.get("tls").await.unwrap();
    current.data = secret(&pairs[1], &pairs[0].key).data; // mismatched
    api.replace("tls", &PostParams::default(), &current)
        .await
        .unwrap();
    cs.wait_log("reason=\"key_mismatch\"");
    cs.wait_log("reload failed");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let log = cs.log();
    drop(cs);

    use base64::Engine as _;
    let mut needles = Vec::new();
    for p in &pairs {
        let text = String::from_utf8(p.key.clone()).unwrap();
        // Every body line of the PEM (64 base64 characters each)...
        needles.extend(
            text.lines()
                .filter(|l| !l.starts_with("-----") && l.len() >= 16)
                .map(str::to_owned),
        );
        // ...and the base64 of the whole PEM, as the Secret's JSON carries it.
        let b64 = base64::engine::general_purpose::STANDARD.encode(&p.key);
        needles.extend(
            b64.as_bytes()
                .chunks(32)
                .map(|c| String::from_utf8(c.to_vec()).unwrap()),
        );
    }
    let lines = log.lines().count();
    assert!(lines > 50, "trace logging produced only {lines} lines");
    for n in &needles {
        assert!(
            !log.contains(n.as_str()),
            "key material {n:?} found in the log"
        );
    }
    assert!(!log.contains("PRIVATE KEY"), "a PEM key header was logged");
    eprintln!(
        "log lines searched at trace level: {lines}; key fragments searched: {}",
        needles.len()
    );
}

/// Against a flapping API server, a long stall, a 410 storm and a restart
/// that rewinds resourceVersions, while the Secret keeps changing:
/// certsync never writes an older object's content over a newer one (a
/// monitor samples the target every 2 ms), never exits, and converges to
/// the newest object after each fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_faults_never_go_back_in_time_and_converge() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{ObjectMeta, PostParams};
    use std::time::{Duration, Instant};
    use support::certs::Pair;

    let d = tempfile::tempdir().unwrap();
    let mut server = support::apiserver::ApiServer::start().await;
    let kc_dir = d.path().join("kc");
    fs::create_dir(&kc_dir).unwrap();
    let kubeconfig = server.kubeconfig(&kc_dir);
    let client = support::kube_client(&kubeconfig).await;
    let api: kube::Api<Secret> = kube::Api::namespaced(client, "ns");
    let flap_for = Duration::from_secs(soak(10));
    let generations: Vec<Pair> = (0..(flap_for.as_millis() / 200 + 20) as usize)
        .map(|i| Pair::new(&format!("g{i}")))
        .collect();
    let generations = Arc::new(generations);
    let data = |p: &Pair| {
        Some(
            [
                ("tls.crt".to_owned(), ByteString(p.cert.clone())),
                ("tls.key".to_owned(), ByteString(p.key.clone())),
            ]
            .into(),
        )
    };
    let obj = Secret {
        metadata: ObjectMeta {
            name: Some("tls".into()),
            ..Default::default()
        },
        data: data(&generations[0]),
        ..Default::default()
    };
    api.create(&PostParams::default(), &obj).await.unwrap();
    // Writes retry until the server takes them (it may be down).
    let put = |n: usize| {
        let (api, generations) = (api.clone(), generations.clone());
        async move {
            loop {
                if let Ok(mut s) = api.get("tls").await {
                    s.data = data(&generations[n]);
                    if api.replace("tls", &PostParams::default(), &s).await.is_ok() {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    let target = d.path().join("t");
    let spec = format!("secret:ns/tls={}", target.display());
    let mut cmd = std::process::Command::new(support::certsync_bin());
    cmd.args(["run", "--kubeconfig"]).arg(&kubeconfig).args([
        "--watch-timeout",
        "2s",
        "--sync",
        &spec,
    ]);
    let mut cs = support::Certsync::start_with(&mut cmd, d.path());

    // The monitor: which generation the target holds, sampled every 2 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (t, g, stop) = (target.clone(), generations.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<usize> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some((_, cert, _)) = support::read_live(&t)
                    && let Some(i) = g.iter().position(|p| p.cert == cert)
                    && seen.last() != Some(&i)
                {
                    seen.push(i);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        })
    };
    let converge = |n: usize, what: &str| {
        let (t, want) = (target.clone(), generations[n].cert.clone());
        let what = what.to_owned();
        tokio::task::spawn_blocking(move || {
            support::wait_for(&format!("convergence after {what}"), || {
                support::read_live(&t).filter(|l| l.1 == want)
            })
        })
    };
    converge(0, "start").await.unwrap();
    let mut n = 0;
    let mut faults = 0;

    // Flapping: connections dropped every 700 ms, the server down for
    // 300 ms every 2 s, while the object changes every 200 ms.
    let started = Instant::now();
    let mut next_drop = Instant::now();
    let mut next_down = Instant::now() + Duration::from_secs(2);
    while started.elapsed() < flap_for {
        if Instant::now() >= next_drop {
            server.drop_connections();
            faults += 1;
            next_drop += Duration::from_millis(700);
        }
        if Instant::now() >= next_down {
            server.down();
            tokio::time::sleep(Duration::from_millis(300)).await;
            server.up().await;
            faults += 1;
            next_down += Duration::from_secs(2);
        }
        n += 1;
        put(n).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    converge(n, "flapping").await.unwrap();

    // A long stall: watches hang without a byte for longer than the watch
    // timeout plus the dead-connection margin, while the object changes.
    server.stall(true);
    n += 1;
    put(n).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    server.stall(false);
    faults += 1;
    converge(n, "a long stall").await.unwrap();
    // The stalled watch was given up by certsync, not only ended by the
    // server once it spoke again.
    assert!(
        cs.log()
            .contains("did not end the watch within its 2s timeout and 5s more"),
        "no watch was taken for stalled"
    );

    // A 410 storm, then a restart that rewinds resourceVersions.
    server.gone_next(25);
    server.end_watches();
    n += 1;
    put(n).await;
    faults += 25;
    converge(n, "a 410 storm").await.unwrap();
    server.rewind();
    n += 1;
    put(n).await;
    faults += 1;
    converge(n, "rewound resourceVersions").await.unwrap();

    stop.store(true, Ordering::Relaxed);
    let seen = monitor.join().unwrap();
    assert!(cs.is_running(), "certsync exited");
    let backwards: Vec<_> = seen.windows(2).filter(|w| w[1] < w[0]).collect();
    assert!(
        backwards.is_empty(),
        "went back to older content: {backwards:?} in {seen:?}"
    );
    eprintln!(
        "API faults: {faults} injected over {:?}; {} object versions written, {} seen at the target, none older than one seen before",
        started.elapsed(),
        n + 1,
        seen.len()
    );
}

/// What a pre-existing entry under a certsync-owned name is.
#[derive(Debug, Clone, Copy)]
enum Planted {
    File,
    Dir,
    LinkToOutsideDir,
    LinkToOutsideFile,
    Dangling,
    Fifo,
}

/// Names certsync owns (or links), each possibly planted before it runs.
const OWNED: [&str; 13] = [
    "..data",
    "..history",
    "..lock",
    "..owner",
    "..pin",
    "..tmp-data.tmp",
    "..tmp-pin.tmp",
    "..rev-000001-aaaaaaaa",
    "..rev-000009-bbbbbbbb",
    "tls.crt",
    "tls.key",
    "..history/000001-aaaaaaaa",
    "..history/000002-cccccccc",
];

fn plant(target: &Path, name: &str, what: Planted, outside: &Path) {
    let path = target.join(name);
    if fs::symlink_metadata(&path).is_ok() || !path.parent().is_some_and(|p| p.is_dir()) {
        return; // taken already, or its parent is not a directory
    }
    match what {
        Planted::File => fs::write(&path, b"planted").unwrap(),
        Planted::Dir => {
            fs::create_dir(&path).unwrap();
            fs::write(path.join("tls.key"), b"planted inside").unwrap();
        }
        Planted::LinkToOutsideDir => {
            std::os::unix::fs::symlink(outside.join("dir"), &path).unwrap()
        }
        Planted::LinkToOutsideFile => {
            std::os::unix::fs::symlink(outside.join("dir/victim"), &path).unwrap()
        }
        Planted::Dangling => std::os::unix::fs::symlink(outside.join("nothing"), &path).unwrap(),
        Planted::Fifo => {
            nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: soak(64) as u32,
        failure_persistence: None,
        ..Default::default()
    })]

    /// Whatever sits under certsync's names before it runs (files, dirs,
    /// symlinks out of the target, FIFOs): nothing outside the target is
    /// created, modified or deleted, nothing hangs, and what the target
    /// serves after a publish is exactly the bundle offered.
    #[test]
    fn writer_never_escapes_the_target_whatever_it_finds(
        planted in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just(None),
                proptest::strategy::Just(Some(Planted::File)),
                proptest::strategy::Just(Some(Planted::Dir)),
                proptest::strategy::Just(Some(Planted::LinkToOutsideDir)),
                proptest::strategy::Just(Some(Planted::LinkToOutsideFile)),
                proptest::strategy::Just(Some(Planted::Dangling)),
                proptest::strategy::Just(Some(Planted::Fifo)),
            ],
            OWNED.len(),
        ),
        keep in 1usize..4,
        publishes in proptest::collection::vec(0u64..3, 1..5),
    ) {
        let dir = scratch();
        let outside = dir.path().join("outside");
        fs::create_dir_all(outside.join("dir")).unwrap();
        fs::write(outside.join("dir/victim"), b"victim").unwrap();
        let target = dir.path().join("t");
        fs::create_dir(&target).unwrap();
        for (name, what) in OWNED.iter().zip(&planted) {
            if let Some(what) = what {
                plant(&target, name, *what, &outside);
            }
        }
        let before = support::snapshot(&outside);
        let siblings = || {
            let mut n: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            n.sort();
            n
        };
        let siblings_before = siblings();

        let opts = WriterOptions { keep, ..Default::default() };
        if let Ok(w) = Writer::open(&target, opts) {
            for g in publishes {
                let offered = generation(g);
                if w.publish_then(&offered, || {}).is_ok() {
                    let (_, cert, key) = support::read_live(&target).expect("a live pair");
                    proptest::prop_assert_eq!(&cert, offered.get(CERT_FILE).unwrap());
                    proptest::prop_assert_eq!(&key, offered.get(KEY_FILE).unwrap());
                    proptest::prop_assert_eq!(fs::read(target.join(KEY_FILE)).unwrap(), key);
                }
            }
        }
        proptest::prop_assert_eq!(support::snapshot(&outside), before);
        proptest::prop_assert_eq!(siblings(), siblings_before);
    }
}
