//! certsync's benchmarks: `cargo bench --bench certsync [-- OPTIONS]`.
//!
//! Prints a table and, with `--json FILE`, writes the same figures as JSON.
//! Options: `--quick` (fewer iterations, for a smoke run), `--only NAME`
//! (writer, hostdir, idle, scale, secret-scale, secret, fanout, recovery),
//! `--processes N` (the fan-out bench's process count, default 100);
//! `CERTSYNC_BENCH_IDLE_PROCESSES` (default 1,10), `CERTSYNC_BENCH_SCALE`
//! (1,100,1000) and `CERTSYNC_BENCH_RECOVERY` (1,100) choose the sizes.
//! Against the test API server by default; against a real cluster when `CERTSYNC_E2E_KUBECONFIG` is set. The
//! targets are made under `CERTSYNC_BENCH_DIR` if set (another file system),
//! else under cargo's target/tmp.
//!
//! Latencies are measured without busy polling: the target directory is
//! watched with inotify and the pair read when `..data` moves, and reload
//! delivery is timestamped by a receiver process blocked in sigwait(2) (or
//! by a local HTTP server for the hook).

#[path = "../tests/support/mod.rs"]
mod support;

mod report;
use report::{Row, percentiles, print};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use certsync::bundle::{Bundle, CERT_FILE, KEY_FILE};
use certsync::writer::{Writer, WriterOptions};

/// A case's directory, removed when the bench ends rather than when the
/// case does.
///
/// On ext4 without a journal (this machine class's root filesystem) every
/// inode allocation skips the inodes freed in the last 60 s, 300 s while
/// their inode table block is dirty (`recently_deleted()` in
/// fs/ext4/ialloc.c: a crash must not reuse an inode whose deletion never
/// reached the disk). Each skipped inode costs a buffer lookup, so after a
/// run deleted its 1,000-target trees the next run's creations took up to
/// 4x the kernel time (first sync of 1,000 mappings: 1.6-1.8 s with
/// 1.1-1.5 s of system time settled, 2.3-3.9 s with 2.1-5.0 s after). Cases
/// therefore leave their trees until the end, and a first-sync case waits
/// for the last run's cleanup to age out (see [`settle`]).
struct BenchDir(Option<tempfile::TempDir>);

static KEPT: std::sync::Mutex<Vec<tempfile::TempDir>> = std::sync::Mutex::new(Vec::new());

impl BenchDir {
    fn new() -> Self {
        Self(Some(tempfile::tempdir_in(bench_root()).unwrap()))
    }

    fn path(&self) -> &Path {
        self.0.as_ref().unwrap().path()
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            KEPT.lock().unwrap().push(d);
        }
    }
}

/// Where the cases' trees go: `CERTSYNC_BENCH_DIR` (to measure another
/// file system, e.g. a node's journaled ext4 or XFS), else cargo's
/// target/tmp.
fn bench_root() -> PathBuf {
    std::env::var_os("CERTSYNC_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
}

/// When the bench last removed its trees (seconds since the epoch).
fn cleaned_marker() -> PathBuf {
    bench_root().join(".bench-cleaned-at")
}

/// Removes every case's tree and records when.
fn clean_up() {
    let dirs = std::mem::take(&mut *KEPT.lock().unwrap());
    if dirs.is_empty() {
        return;
    }
    drop(dirs);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    std::fs::write(cleaned_marker(), now.to_string()).unwrap();
}

/// Writes back every file system's dirty data before a measurement: a build
/// that just ended (the bench's own, before it starts) leaves hundreds of
/// megabytes for the kernel to write in the next 30 s, and every fsync of
/// certsync's would queue behind that write-back.
fn flush_writeback() {
    nix::unistd::sync();
}

/// Before a first-sync measurement: on ext4 without a journal, waits until
/// the inodes the previous run freed are no longer skipped ([`BenchDir`]).
/// Dirty data is written back first either way.
fn settle() {
    const AGE: u64 = 305;
    flush_writeback();
    if !ext4_without_journal(&bench_root()) {
        return;
    }
    let Some(at) = std::fs::read_to_string(cleaned_marker())
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let wait = (at + AGE).saturating_sub(now);
    if wait > 0 {
        eprintln!(
            "waiting {wait} s: the last bench run removed its files {} s ago, and ext4 without a journal skips recently freed inodes on every allocation",
            now.saturating_sub(at)
        );
        std::thread::sleep(Duration::from_secs(wait));
    }
}

/// Whether `path` is on an ext4 filesystem that has no journal (no jbd2
/// entry for its device).
fn ext4_without_journal(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPER
    let best = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let dash = f.iter().position(|x| *x == "-")?;
            Some((*f.get(4)?, *f.get(dash + 1)?, *f.get(dash + 2)?))
        })
        .filter(|(mount, _, _)| path.starts_with(mount))
        .max_by_key(|(mount, _, _)| mount.len());
    let Some((_, "ext4", source)) = best else {
        return false;
    };
    let dev = source.rsplit('/').next().unwrap_or(source);
    let journaled = std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{dev}-"))
        })
    });
    !journaled
}

struct Opts {
    quick: bool,
    /// Processes in the fan-out bench.
    fanout: usize,
    only: Option<String>,
    json: Option<String>,
}

fn opts() -> Opts {
    let args = report::Args::from_env();
    Opts {
        quick: args.has("--quick"),
        fanout: args
            .value("--processes")
            .map_or(100, |v| v.parse().expect("--processes N")),
        only: args.value("--only"),
        json: args.value("--json"),
    }
}

fn generation(i: usize) -> Bundle {
    let mut b = Bundle::default();
    b.insert(
        CERT_FILE,
        format!("cert {i}\n{}", "c".repeat(1200)).into_bytes(),
        "bench",
    )
    .unwrap();
    b.insert(
        KEY_FILE,
        format!("key {i}\n{}", "k".repeat(240)).into_bytes(),
        "bench",
    )
    .unwrap();
    b
}

/// Rotations per second through the writer with fsync, on the local disk
/// (the directory the bench runs in, not a tmpfs).
fn writer_throughput(o: &Opts) -> Vec<Row> {
    let n = if o.quick { 200 } else { 2000 };
    let dir = BenchDir::new();
    let w = Writer::open(dir.path().join("t"), WriterOptions::default()).unwrap();
    let mut each = Vec::with_capacity(n);
    // Until the new revision is live and durable (what a consumer waits
    // for; the old one is retired to history after that).
    let mut to_flip = Vec::with_capacity(n);
    settle();
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        w.publish_then(&generation(i), || {
            to_flip.push(t.elapsed().as_secs_f64() * 1e3)
        })
        .unwrap();
        each.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let total = start.elapsed().as_secs_f64();
    let mut figures = percentiles(each);
    for (k, v) in percentiles(to_flip) {
        figures.insert(format!("flip_{k}"), v);
    }
    figures.insert("rotations_per_s".into(), n as f64 / total);
    vec![Row {
        bench: "writer".into(),
        case: "publish with fsync, local disk".into(),
        n,
        figures,
        note: "revision dir + 2 files fsynced, ..data flip, parent fsynced, old files moved to history, prune".into(),
    }]
}

// ---- measuring helpers ---------------------------------------------------

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A process that blocks SIGHUP and sigwaits for it, printing the time of
/// each one: the bench binary re-executed with `--sigwait`.
fn sigwait_main() -> ! {
    use nix::sys::signal::{SigSet, Signal};
    use std::io::Write;
    let mut set = SigSet::empty();
    set.add(Signal::SIGHUP);
    set.thread_block().unwrap();
    let mut out = std::io::stdout();
    loop {
        if set.wait().is_ok() {
            let _ = writeln!(out, "{}", now_ns());
            let _ = out.flush();
        }
    }
}

/// Reload timestamps from a `--sigwait` child.
struct SignalReceiver {
    child: std::process::Child,
    times: Arc<Mutex<Vec<u128>>>,
    pidfile: PathBuf,
}

impl SignalReceiver {
    fn start(dir: &Path) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("--sigwait")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let times: Arc<Mutex<Vec<u128>>> = Arc::default();
        let t = times.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(ns) = line.trim().parse() {
                    t.lock().unwrap().push(ns);
                }
            }
        });
        std::thread::sleep(Duration::from_millis(200)); // SIGHUP blocked by now
        let pidfile = dir.join("receiver.pid");
        std::fs::write(&pidfile, child.id().to_string()).unwrap();
        Self {
            child,
            times,
            pidfile,
        }
    }
}

impl Drop for SignalReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A local HTTP hook that timestamps every request.
struct HookReceiver {
    url: String,
    times: Arc<Mutex<Vec<u128>>>,
}

fn hook_receiver(rt: &tokio::runtime::Handle) -> HookReceiver {
    let times: Arc<Mutex<Vec<u128>>> = Arc::default();
    let t = times.clone();
    let app = axum::Router::new().fallback(move || {
        let t = t.clone();
        async move {
            t.lock().unwrap().push(now_ns());
            "ok"
        }
    });
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/reload", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await });
    HookReceiver { url, times }
}

/// Reads the target the documented way (`..data` resolved once) and the
/// naive way (two separate opens of the visible names), counting empty
/// reads and certificate/key pairs from different generations.
struct TornReader {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<(u64, u64, u64)>>,
}

impl TornReader {
    fn start(target: &Path, pairs: Arc<Vec<support::certs::Pair>>) -> Self {
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (t, st) = (target.to_owned(), stop.clone());
        let handle = std::thread::spawn(move || {
            let matching = |c: &[u8], k: &[u8]| pairs.iter().any(|p| p.cert == c && p.key == k);
            let (mut reads, mut torn, mut naive_torn) = (0u64, 0u64, 0u64);
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some((_, c, k)) = support::read_live(&t) {
                    reads += 1;
                    if c.is_empty() || k.is_empty() || !matching(&c, &k) {
                        torn += 1;
                    }
                }
                let naive = (
                    std::fs::read(t.join(CERT_FILE)),
                    std::fs::read(t.join(KEY_FILE)),
                );
                if let (Ok(c), Ok(k)) = naive
                    && (c.is_empty() || k.is_empty() || !matching(&c, &k))
                {
                    naive_torn += 1;
                }
                std::thread::sleep(Duration::from_millis(1)); // a 1 ms poller
            }
            (reads, torn, naive_torn)
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> (u64, u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

fn ms_between(from: u128, to: u128) -> f64 {
    (to as f64 - from as f64) / 1e6
}

/// Precise CPU accounting for one process: its own cgroup (v1 cpuacct),
/// whose usage counts every thread in ns, threads that already exited
/// included. `None` where cgroups cannot be written.
struct CpuAcct(PathBuf);

impl CpuAcct {
    fn for_process(pid: u32) -> Option<Self> {
        let dir = PathBuf::from(format!("/sys/fs/cgroup/cpuacct/certsync-bench-{pid}"));
        std::fs::create_dir(&dir).ok()?;
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(Self(dir))
    }

    fn ms(&self) -> f64 {
        let ns: f64 = std::fs::read_to_string(self.0.join("cpuacct.usage"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0.0);
        ns / 1e6
    }
}

impl Drop for CpuAcct {
    fn drop(&mut self) {
        // Succeeds once the process has exited.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Resident memory and CPU time of a process: from `acct` when there is
/// one, else utime + stime (10 ms ticks, all threads).
fn usage(pid: u32, acct: Option<&CpuAcct>) -> (f64, f64) {
    let cpu_ms = match acct {
        Some(a) => a.ms(),
        None => {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
            let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
                .unwrap()
                .unwrap() as f64;
            (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) * 1000.0
                / ticks
        }
    };
    (rss_mib(pid), cpu_ms)
}

/// A `/proc/PID/status` field's number (kB for the memory fields).
fn status_field(pid: u32, name: &str) -> f64 {
    proc_field(pid, "status", name)
}

fn rss_mib(pid: u32) -> f64 {
    status_field(pid, "VmRSS:") / 1024.0
}

/// A `/proc/PID/smaps_rollup` field's number (kB).
fn rollup_field(pid: u32, name: &str) -> f64 {
    proc_field(pid, "smaps_rollup", name)
}

/// The number after `name` in `/proc/PID/file` (0 if the process is gone).
fn proc_field(pid: u32, file: &str, name: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Where resident memory goes, in MiB: RSS; its file-backed part (the
/// binary's code and read-only data, mapped in as touched, with
/// fault-around; shared by every process running the same binary and
/// reclaimable) and its anonymous part (heap, stacks, relocated data);
/// private dirty memory (what only this process holds and the kernel
/// cannot drop: what each more sidecar on a node costs); PSS (every page
/// divided by the number of processes mapping it); and the thread count.
fn memory_parts(pid: u32) -> BTreeMap<String, f64> {
    let mib = |kb: f64| kb / 1024.0;
    BTreeMap::from([
        ("rss_mib".to_owned(), mib(status_field(pid, "VmRSS:"))),
        (
            "rss_file_mib".to_owned(),
            mib(status_field(pid, "RssFile:")),
        ),
        (
            "rss_anon_mib".to_owned(),
            mib(status_field(pid, "RssAnon:")),
        ),
        (
            "private_dirty_mib".to_owned(),
            mib(rollup_field(pid, "Private_Dirty:")),
        ),
        ("pss_mib".to_owned(), mib(rollup_field(pid, "Pss:"))),
        ("threads".to_owned(), status_field(pid, "Threads:")),
    ])
}

// ---- the API-server side ----------------------------------------------------

struct Cluster {
    kubeconfig: PathBuf,
    api: kube::Api<k8s_openapi::api::core::v1::Secret>,
    ns: String,
    fake: Option<support::apiserver::ApiServer>,
}

async fn cluster(dir: &Path) -> Cluster {
    let (kubeconfig, ns, fake) = match std::env::var_os("CERTSYNC_E2E_KUBECONFIG") {
        Some(kc) => (
            PathBuf::from(kc),
            std::env::var("CERTSYNC_E2E_NAMESPACE").unwrap_or_else(|_| "default".into()),
            None,
        ),
        None => {
            // HTTPS with h2 and http/1.1 by ALPN, as kube-apiserver serves.
            let serving = support::certs::Pair::new("127.0.0.1");
            let fake = support::apiserver::ApiServer::start_tls(&serving.cert, &serving.key).await;
            let kc_dir = dir.join("kc");
            std::fs::create_dir_all(&kc_dir).unwrap();
            let ca = kc_dir.join("ca.crt");
            std::fs::write(&ca, &serving.ca_cert).unwrap();
            // As a real apiserver: a bookmark about once a minute per watch
            // (the test server's default, 500 ms, is for tests; with 1,000
            // watches it would be 2,000 events a second on the same cores).
            fake.bookmark_every(Duration::from_secs(60));
            (
                fake.tls_kubeconfig(&kc_dir, &ca),
                "bench".to_owned(),
                Some(fake),
            )
        }
    };
    let client = support::kube_client(&kubeconfig).await;
    Cluster {
        kubeconfig,
        api: kube::Api::namespaced(client, &ns),
        ns,
        fake,
    }
}

impl Cluster {
    /// Creates `names` as Secrets holding `p`, replacing any left over.
    fn create(&self, rt: &tokio::runtime::Runtime, names: &[String], p: &support::certs::Pair) {
        use kube::api::PostParams;
        self.delete(rt, names);
        rt.block_on(async {
            for name in names {
                let s = secret(name, p);
                self.api.create(&PostParams::default(), &s).await.unwrap();
            }
        });
    }

    /// Replaces Secret `name`'s pair with `p`; returns when the API server
    /// acknowledged it (ns since the epoch).
    fn update(&self, rt: &tokio::runtime::Runtime, name: &str, p: &support::certs::Pair) -> u128 {
        use kube::api::PostParams;
        rt.block_on(async {
            let mut s = self.api.get(name).await.unwrap();
            s.data = secret(name, p).data;
            self.api
                .replace(name, &PostParams::default(), &s)
                .await
                .unwrap();
        });
        now_ns()
    }

    /// [`Cluster::update`], retried while the bench's own client finds its
    /// pooled connection dead (the server has just come back).
    fn update_retrying(
        &self,
        rt: &tokio::runtime::Runtime,
        name: &str,
        p: &support::certs::Pair,
    ) -> u128 {
        use kube::api::PostParams;
        for _ in 0..50 {
            let done = rt.block_on(async {
                let mut s = self.api.get(name).await?;
                s.data = secret(name, p).data;
                self.api.replace(name, &PostParams::default(), &s).await
            });
            if done.is_ok() {
                return now_ns();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("could not update Secret {name}");
    }

    fn delete(&self, rt: &tokio::runtime::Runtime, names: &[String]) {
        rt.block_on(async {
            for name in names {
                let _ = self.api.delete(name, &Default::default()).await;
            }
        });
    }
}

fn secret(name: &str, p: &support::certs::Pair) -> k8s_openapi::api::core::v1::Secret {
    use k8s_openapi::ByteString;
    k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            [
                ("tls.crt".to_owned(), ByteString(p.cert.clone())),
                ("tls.key".to_owned(), ByteString(p.key.clone())),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// Secret → file and Secret → reload latency over `n` rotations `gap` apart.
fn secret_latency(rt: &tokio::runtime::Runtime, n: usize, gap: Duration, hook: bool) -> Row {
    let dir = BenchDir::new();
    let c = rt.block_on(cluster(dir.path()));
    let name = format!("bench-{}", std::process::id());
    let pairs: Arc<Vec<support::certs::Pair>> = Arc::new(
        (0..=n)
            .map(|i| support::certs::Pair::new(&format!("g{i}")))
            .collect(),
    );
    c.create(rt, std::slice::from_ref(&name), &pairs[0]);
    let target = dir.path().join("target");
    let flips = FlipWatch::start(std::slice::from_ref(&target));
    let signals = (!hook).then(|| SignalReceiver::start(dir.path()));
    let http = hook.then(|| hook_receiver(rt.handle()));
    let spec = format!("secret:{}/{name}={}", c.ns, target.display());
    let mut args = vec![
        "run".to_owned(),
        "--kubeconfig".into(),
        c.kubeconfig.display().to_string(),
        "--sync".into(),
        spec,
    ];
    let level = if std::env::var_os("CERTSYNC_BENCH_DEBUG").is_some() {
        "debug"
    } else {
        "warn"
    };
    args.extend([
        "--reload-quiet".into(),
        "1ms".into(),
        "--log-level".into(),
        level.into(),
    ]);
    match (&signals, &http) {
        (Some(s), _) => args.extend(["--reload-pidfile".into(), s.pidfile.display().to_string()]),
        (_, Some(h)) => args.extend(["--reload-url".into(), h.url.clone()]),
        _ => {}
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cs = support::Certsync::start(&args, dir.path());
    support::wait_for("the first sync", || flips.when(0, &pairs[0].cert));
    std::thread::sleep(Duration::from_millis(300));
    let reloads = || match (&signals, &http) {
        (Some(s), _) => s.times.lock().unwrap().clone(),
        (_, Some(h)) => h.times.lock().unwrap().clone(),
        _ => Vec::new(),
    };
    let before = reloads().len();
    flush_writeback();
    let torn = TornReader::start(&target, pairs.clone());
    let mut acks = Vec::with_capacity(n);
    for p in &pairs[1..] {
        acks.push(c.update(rt, &name, p));
        std::thread::sleep(gap);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (reads, torn_reads, naive_torn) = torn.finish();
    let to_file: Vec<f64> = pairs[1..]
        .iter()
        .zip(&acks)
        .filter_map(|(p, a)| flips.when(0, &p.cert).map(|t| ms_between(*a, t)))
        .collect();
    let r = reloads();
    let r = &r[before..];
    // The first reload after each acknowledgement.
    let to_reload: Vec<f64> = acks
        .iter()
        .filter_map(|a| r.iter().find(|t| **t > *a).map(|t| ms_between(*a, *t)))
        .collect();
    if std::env::var_os("CERTSYNC_BENCH_DEBUG").is_some() {
        eprintln!("acks (ns): {acks:?}\n{}", cs.log());
    }
    drop(cs);
    c.delete(rt, std::slice::from_ref(&name));
    let mut figures = BTreeMap::new();
    for (k, v) in percentiles(to_file.clone()) {
        figures.insert(format!("file_{k}"), v);
    }
    for (k, v) in percentiles(to_reload.clone()) {
        figures.insert(format!("reload_{k}"), v);
    }
    figures.insert("missed_flips".into(), (n - to_file.len()) as f64);
    figures.insert("reloads".into(), r.len() as f64);
    figures.insert("torn_reads".into(), torn_reads as f64);
    figures.insert("reads".into(), reads as f64);
    figures.insert("naive_two_open_straddles".into(), naive_torn as f64);
    let server = if c.fake.is_some() {
        "test API server"
    } else {
        "real cluster"
    };
    Row {
        bench: "secret".into(),
        case: format!("{} {} apart, {}", if hook { "http hook" } else { "signal" }, humantime::format_duration(gap), server),
        n,
        figures,
        note: "from the API server's acknowledgement; --reload-quiet 1ms (the default 200ms coalescing window adds up to that)".into(),
    }
}

/// Host directory: file change to flip and to reload, with `debounce`.
fn hostdir_latency(n: usize, debounce: &str) -> Row {
    let dir = BenchDir::new();
    let (src, target) = (dir.path().join("src"), dir.path().join("target"));
    std::fs::create_dir(&src).unwrap();
    let pairs: Vec<support::certs::Pair> = (0..=n)
        .map(|i| support::certs::Pair::new(&format!("h{i}")))
        .collect();
    let write = |p: &support::certs::Pair| {
        support::write_atomic(&src.join(CERT_FILE), &p.cert);
        support::write_atomic(&src.join(KEY_FILE), &p.key);
        now_ns()
    };
    write(&pairs[0]);
    let flips = FlipWatch::start(std::slice::from_ref(&target));
    let signals = SignalReceiver::start(dir.path());
    let spec = format!("dir:{}={}", src.display(), target.display());
    let pidfile = signals.pidfile.display().to_string();
    let cs = support::Certsync::start(
        &[
            "run",
            "--sync",
            &spec,
            "--debounce",
            debounce,
            "--reload-quiet",
            "1ms",
            "--reload-pidfile",
            &pidfile,
            "--log-level",
            "warn",
        ],
        dir.path(),
    );
    support::wait_for("the first sync", || flips.when(0, &pairs[0].cert));
    std::thread::sleep(Duration::from_millis(300));
    let before = signals.times.lock().unwrap().len();
    let wait = humantime::parse_duration(debounce).unwrap() + Duration::from_millis(200);
    let mut changes = Vec::new();
    for p in &pairs[1..] {
        changes.push(write(p));
        std::thread::sleep(wait);
    }
    std::thread::sleep(Duration::from_millis(300));
    let to_file: Vec<f64> = pairs[1..]
        .iter()
        .zip(&changes)
        .filter_map(|(p, t)| flips.when(0, &p.cert).map(|f| ms_between(*t, f)))
        .collect();
    let r = signals.times.lock().unwrap()[before..].to_vec();
    let to_reload: Vec<f64> = changes
        .iter()
        .filter_map(|t| r.iter().find(|x| **x > *t).map(|x| ms_between(*t, *x)))
        .collect();
    drop(cs);
    let mut figures = BTreeMap::new();
    for (k, v) in percentiles(to_file) {
        figures.insert(format!("file_{k}"), v);
    }
    for (k, v) in percentiles(to_reload) {
        figures.insert(format!("reload_{k}"), v);
    }
    Row {
        bench: "hostdir".into(),
        case: format!("debounce {debounce}"),
        n,
        figures,
        note: "from the rename of the key file (the last write) to the flip / the signal".into(),
    }
}

/// Memory and CPU of `processes` idle certsync processes of the same
/// binary running at once, each with its own Secret mapping: per process
/// (the mean over them), private memory, PSS and RSS. With more processes
/// the code pages are shared, so PSS drops towards the private part, while
/// RSS stays what one process alone shows.
fn idle_cost(rt: &tokio::runtime::Runtime, processes: usize, seconds: u64) -> Row {
    let dir = BenchDir::new();
    let c = rt.block_on(cluster(dir.path()));
    let names: Vec<String> = (0..processes)
        .map(|i| format!("idle-{}-{i}", std::process::id()))
        .collect();
    c.create(rt, &names, &support::certs::Pair::new("idle"));
    let running: Vec<support::Certsync> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let target = dir.path().join(format!("t{i}"));
            let cs = one_secret_process(&c, name, &target, dir.path());
            support::wait_for("the first sync", || support::read_live(&target));
            cs
        })
        .collect();
    std::thread::sleep(Duration::from_secs(5)); // settle
    let pids: Vec<u32> = running.iter().map(|cs| cs.child.id()).collect();
    let accts: Vec<Option<CpuAcct>> = pids.iter().map(|p| CpuAcct::for_process(*p)).collect();
    let before: Vec<(f64, f64)> = pids
        .iter()
        .zip(&accts)
        .map(|(p, a)| usage(*p, a.as_ref()))
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    let after: Vec<(f64, f64)> = pids
        .iter()
        .zip(&accts)
        .map(|(p, a)| usage(*p, a.as_ref()))
        .collect();
    let parts: Vec<BTreeMap<String, f64>> = pids.iter().map(|p| memory_parts(*p)).collect();
    drop(running);
    let source = if accts.iter().all(Option::is_some) {
        "cgroup cpuacct, ns"
    } else {
        "utime+stime, 10 ms ticks"
    };
    drop(accts);
    c.delete(rt, &names);
    let n = processes as f64;
    let mut figures = BTreeMap::new();
    for key in parts[0].keys() {
        let values: Vec<f64> = parts.iter().map(|m| m[key]).collect();
        figures.insert(key.clone(), values.iter().sum::<f64>() / n);
        if processes > 1 && key != "threads" {
            let max = values.iter().copied().fold(f64::MIN, f64::max);
            figures.insert(format!("{key}_max"), max);
        }
    }
    figures.insert(
        "rss_start_mib".into(),
        before.iter().map(|(rss, _)| rss).sum::<f64>() / n,
    );
    let cpu: f64 = before
        .iter()
        .zip(&after)
        .map(|((_, c0), (_, c1))| c1 - c0)
        .sum::<f64>()
        / n;
    figures.insert("cpu_ms_per_min".into(), cpu * 60.0 / seconds as f64);
    Row {
        bench: "idle".into(),
        case: format!("{processes} process(es), one Secret mapping each, {seconds} s"),
        n: processes,
        figures,
        note: format!(
            "per process (mean; _max the largest); CPU from {source}; default --resync 1m, --watch-timeout 1m; a bookmark a minute"
        ),
    }
}

/// A certsync process with one mapping, from Secret `name` to `target`.
fn one_secret_process(c: &Cluster, name: &str, target: &Path, dir: &Path) -> support::Certsync {
    let kc = c.kubeconfig.display().to_string();
    let spec = format!("secret:{}/{name}={}", c.ns, target.display());
    support::Certsync::start(
        &[
            "run",
            "--kubeconfig",
            &kc,
            "--sync",
            &spec,
            "--log-level",
            "warn",
        ],
        dir,
    )
}

/// The sizes a case runs: `var` as comma-separated numbers, else `default`.
fn sizes(var: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(var).map_or(default.to_vec(), |v| {
        v.split(',')
            .map(|n| n.parse().unwrap_or_else(|_| panic!("{var}: numbers")))
            .collect()
    })
}

/// One certsync process with a mapping from each of `sources` to
/// `dir/t{i}` (through a config file) and `extra` flags: the process, and
/// the time from its start until every target was live.
fn start_mappings(
    dir: &Path,
    sources: &[String],
    extra: &[&str],
) -> (support::Certsync, Duration, CpuTime) {
    settle();
    start_mappings_unsettled(dir, sources, extra)
}

/// [`start_mappings`] without waiting for the file system to settle, for
/// cases that do not measure the first sync.
fn start_mappings_unsettled(
    dir: &Path,
    sources: &[String],
    extra: &[&str],
) -> (support::Certsync, Duration, CpuTime) {
    let mut config = String::from("mappings:\n");
    for (i, source) in sources.iter().enumerate() {
        let target = dir.join(format!("t{i}"));
        config.push_str(&format!(
            "  - source: {source}\n    target: {}\n",
            target.display()
        ));
    }
    let file = dir.join("certsync.yaml");
    std::fs::write(&file, config).unwrap();
    let mut args = vec![
        "run",
        "--config",
        file.to_str().unwrap(),
        "--log-level",
        "warn",
    ];
    args.extend_from_slice(extra);
    let mut done = 0;
    let start = Instant::now();
    let cs = support::Certsync::start(&args, dir);
    let all = support::wait_for("all targets synced", || {
        synced_from(&mut done, sources.len(), |i| {
            dir.join(format!("t{i}/..data"))
        })
        .then(|| start.elapsed())
    });
    let cpu = cpu_time(cs.child.id());
    (cs, all, cpu)
}

/// Whether all `n` targets have flipped, checking from `done`, the first
/// not seen yet (a flipped target stays flipped). Checking all of them on
/// every poll cost the bench 0.3 s of CPU at 1,000 targets, on the two
/// cores certsync was being measured on.
fn synced_from(done: &mut usize, n: usize, data: impl Fn(usize) -> PathBuf) -> bool {
    while *done < n && data(*done).exists() {
        *done += 1;
    }
    *done == n
}

/// A process's CPU time so far, user and system (kernel).
struct CpuTime {
    user_s: f64,
    sys_s: f64,
}

impl CpuTime {
    /// As figures: a first sync that is slow in the kernel (file system
    /// work) reads differently from one slow in certsync's own code.
    fn record(&self, figures: &mut BTreeMap<String, f64>) {
        figures.insert("first_sync_cpu_user_s".into(), self.user_s);
        figures.insert("first_sync_cpu_sys_s".into(), self.sys_s);
    }
}

/// From /proc/PID/stat (utime and stime, in clock ticks of 1/100 s on
/// Linux).
fn cpu_time(pid: u32) -> CpuTime {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces: fields are counted after its ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 100.0
    };
    CpuTime {
        user_s: ticks(11),
        sys_s: ticks(12),
    }
}

/// N host-directory mappings in one process: time to the first complete
/// sync of all, steady RSS, and one rotation's latency among them.
fn scale(n: usize) -> Row {
    let dir = BenchDir::new();
    let pair = support::certs::Pair::new("scale");
    let sources: Vec<String> = (0..n)
        .map(|i| {
            let src = dir.path().join(format!("src{i}"));
            support::write_pair(&src, &pair);
            format!("dir:{}", src.display())
        })
        .collect();
    let flips = FlipWatch::start(&[dir.path().join("t0")]);
    let (cs, all, cpu) = start_mappings(dir.path(), &sources, &["--debounce", "10ms"]);
    std::thread::sleep(Duration::from_secs(3));
    let rss = rss_mib(cs.child.id());
    let next = support::certs::Pair::new("scale-2");
    let src0 = dir.path().join("src0");
    support::write_atomic(&src0.join(CERT_FILE), &next.cert);
    support::write_atomic(&src0.join(KEY_FILE), &next.key);
    let t0 = now_ns();
    let t1 = support::wait_for("the rotation", || flips.when(0, &next.cert));
    drop(cs);
    let mut figures = BTreeMap::new();
    figures.insert("first_sync_all_s".into(), all.as_secs_f64());
    cpu.record(&mut figures);
    figures.insert("rss_mib".into(), rss);
    figures.insert("rotation_ms".into(), ms_between(t0, t1));
    Row {
        bench: "scale".into(),
        case: format!("{n} host-directory mappings"),
        n,
        figures,
        note: "from process start; --debounce 10ms; rotation latency includes the debounce".into(),
    }
}

/// N Secret mappings in one process over HTTPS: first complete sync from
/// process start, steady RSS, TCP connections to the API server, and the
/// latency of rotations among them (API acknowledgement to new pair
/// readable).
fn secret_scale(rt: &tokio::runtime::Runtime, n: usize, rotations: usize) -> Row {
    let dir = BenchDir::new();
    let c = rt.block_on(cluster(dir.path()));
    let names: Vec<String> = (0..n)
        .map(|i| format!("scale-{}-{i}", std::process::id()))
        .collect();
    let pair = support::certs::Pair::new("scale");
    c.create(rt, &names, &pair);
    let sources: Vec<String> = names
        .iter()
        .map(|n| format!("secret:{}/{n}", c.ns))
        .collect();
    let flips = FlipWatch::start(&[dir.path().join("t0")]);
    let kc = c.kubeconfig.display().to_string();
    let (cs, all, cpu) = start_mappings(dir.path(), &sources, &["--kubeconfig", &kc]);
    std::thread::sleep(Duration::from_secs(5));
    let pid = cs.child.id();
    let memory = memory_parts(pid);
    let conns = support::tcp_connections(pid, &support::server_addrs(&c.kubeconfig));
    flush_writeback();
    let mut each = Vec::with_capacity(rotations);
    for r in 0..rotations {
        let next = support::certs::Pair::new(&format!("scale-r{r}"));
        let t0 = c.update(rt, &names[0], &next);
        let t1 = support::wait_for("the rotation", || flips.when(0, &next.cert));
        each.push(ms_between(t0, t1));
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_after = rss_mib(pid);
    drop(cs);
    c.delete(rt, &names);
    let mut figures = percentiles(each);
    figures.insert("first_sync_all_s".into(), all.as_secs_f64());
    cpu.record(&mut figures);
    figures.extend(memory);
    figures.insert("rss_after_rotations_mib".into(), rss_after);
    figures.insert("tcp_connections".into(), conns as f64);
    Row {
        bench: "scale".into(),
        case: format!("{n} Secret mappings, one process"),
        n,
        figures,
        note: format!(
            "HTTPS (h2 offered) {}; from process start; p50/p99 = {rotations} rotations of one Secret, API ack to new pair readable",
            if c.fake.is_some() {
                "test API server"
            } else {
                "real cluster"
            }
        ),
    }
}

/// Watch recovery: `n` Secret mappings spread over `processes` certsync
/// processes, the test API server down for `outage` with its history
/// compacted meanwhile (certsync's resumed watches get 410 Gone), then
/// serving again on the same port, and every Secret changed right then.
/// Reports the time from the server serving again to each change on disk
/// (the first, p50 and the last of the `n` mappings), waiting up to 3
/// minutes. One process's mappings come back together (the first watch
/// to hear from the server wakes the others); separate processes each
/// wait out their own jittered backoff, so they spread out.
fn recovery(
    rt: &tokio::runtime::Runtime,
    n: usize,
    processes: usize,
    outage: Duration,
) -> Option<Row> {
    let dir = BenchDir::new();
    let mut c = rt.block_on(cluster(dir.path()));
    c.fake.as_ref()?;
    let names: Vec<String> = (0..n)
        .map(|i| format!("recovery-{}-{i}", std::process::id()))
        .collect();
    c.create(rt, &names, &support::certs::Pair::new("recovery"));
    let kc = c.kubeconfig.display().to_string();
    let per = n.div_ceil(processes.max(1));
    let mut targets = Vec::new();
    let mut running_processes = Vec::new();
    for (p, chunk) in names.chunks(per).enumerate() {
        let pdir = dir.path().join(format!("p{p}"));
        std::fs::create_dir_all(&pdir).unwrap();
        let sources: Vec<String> = chunk
            .iter()
            .map(|name| format!("secret:{}/{name}", c.ns))
            .collect();
        targets.extend((0..chunk.len()).map(|i| pdir.join(format!("t{i}"))));
        let (cs, _, _) = start_mappings_unsettled(&pdir, &sources, &["--kubeconfig", &kc]);
        running_processes.push(cs);
    }
    let flips = FlipWatch::start(&targets);
    std::thread::sleep(Duration::from_secs(2));
    {
        let fake = c.fake.as_mut()?;
        fake.down();
        std::thread::sleep(outage);
        fake.compact();
        rt.block_on(fake.up());
    }
    let up = now_ns();
    let next = support::certs::Pair::new("recovery-2");
    let acks: Vec<u128> = names
        .iter()
        .map(|name| c.update_retrying(rt, name, &next))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut on_disk: Vec<Option<u128>> = vec![None; n];
    while Instant::now() < deadline && on_disk.iter().any(Option::is_none) {
        for (i, t) in on_disk.iter_mut().enumerate() {
            if t.is_none() {
                *t = flips.when(i, &next.cert);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = running_processes.iter_mut().all(|cs| cs.is_running());
    drop(running_processes);
    c.delete(rt, &names);
    let from_up: Vec<f64> = on_disk
        .iter()
        .flatten()
        .map(|t| ms_between(up, *t))
        .collect();
    let mut figures = BTreeMap::new();
    for (k, v) in percentiles(from_up.clone()) {
        figures.insert(format!("serving_to_file_{k}"), v);
    }
    figures.insert(
        "serving_to_file_first_ms".into(),
        from_up.iter().copied().fold(f64::MAX, f64::min),
    );
    figures.insert(
        "serving_to_last_change_acked_ms".into(),
        ms_between(up, acks.iter().copied().max().unwrap_or(up)),
    );
    figures.insert(
        "missed".into(),
        on_disk.iter().filter(|t| t.is_none()).count() as f64,
    );
    figures.insert("exited".into(), if running { 0.0 } else { 1.0 });
    Some(Row {
        bench: "recovery".into(),
        case: format!(
            "{n} Secret mapping(s), {processes} process(es), {} outage, history compacted",
            humantime::format_duration(outage)
        ),
        n,
        figures,
        note: "from the test API server listening again to each mapping's change on disk (every Secret changed right then); max = the last mapping; waits up to 180 s".into(),
    })
}

/// N certsync processes watching one Secret, each into its own target:
/// start-to-synced, fan-out latency (API acknowledgement to all N flipped)
/// over `updates` updates, and each process's RSS.
fn fanout(rt: &tokio::runtime::Runtime, n: usize, updates: usize) -> Row {
    let dir = BenchDir::new();
    let c = rt.block_on(cluster(dir.path()));
    let name = format!("fanout-{}", std::process::id());
    let pair = support::certs::Pair::new("fanout");
    c.create(rt, std::slice::from_ref(&name), &pair);
    let targets: Vec<PathBuf> = (0..n).map(|i| dir.path().join(format!("t{i}"))).collect();
    let flips = FlipWatch::start(&targets);
    settle();
    let start = Instant::now();
    let procs: Vec<support::Certsync> = targets
        .iter()
        .map(|t| {
            // Each on a free admin port (Certsync::start sets port 0).
            one_secret_process(&c, &name, t, dir.path())
        })
        .collect();
    let spawned = start.elapsed();
    let mut done = 0;
    let synced = support::wait_for("every process synced", || {
        synced_from(&mut done, targets.len(), |i| targets[i].join("..data"))
            .then(|| start.elapsed())
    });
    std::thread::sleep(Duration::from_secs(5));
    let mut each = Vec::with_capacity(updates);
    let mut first = Vec::with_capacity(updates);
    for u in 0..updates {
        let next = support::certs::Pair::new(&format!("fanout-{u}"));
        let t0 = c.update(rt, &name, &next);
        let times = support::wait_for("every target flipped", || {
            (0..n)
                .map(|i| flips.when(i, &next.cert))
                .collect::<Option<Vec<u128>>>()
        });
        let last = times.iter().max().copied().unwrap_or(t0);
        let earliest = times.iter().min().copied().unwrap_or(t0);
        each.push(ms_between(t0, last));
        first.push(ms_between(t0, earliest));
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut rss: Vec<f64> = procs.iter().map(|p| rss_mib(p.child.id())).collect();
    rss.sort_by(f64::total_cmp);
    let polling = procs.iter().filter(|p| p.log().contains("polling")).count();
    drop(procs);
    c.delete(rt, std::slice::from_ref(&name));
    let mut figures = percentiles(each);
    figures.insert("first_flip_p50_ms".into(), percentiles(first)["p50_ms"]);
    figures.insert("spawn_all_s".into(), spawned.as_secs_f64());
    figures.insert("start_to_all_synced_s".into(), synced.as_secs_f64());
    figures.insert("rss_p50_mib".into(), rss[rss.len() / 2]);
    figures.insert("rss_max_mib".into(), *rss.last().unwrap_or(&0.0));
    figures.insert("rss_total_mib".into(), rss.iter().sum());
    figures.insert("file_watch_polling".into(), polling as f64);
    Row {
        bench: "fanout".into(),
        case: format!("{n} processes, one Secret"),
        n,
        figures,
        note: format!(
            "p50/p99/max over {updates} updates: API ack to all {n} targets flipped; {}",
            if c.fake.is_some() {
                "test API server, HTTPS"
            } else {
                "real cluster"
            }
        ),
    }
}

/// (certificate bytes, nanoseconds since the epoch) per flip seen, per target.
type Flips = Arc<Mutex<Vec<Vec<(Vec<u8>, u128)>>>>;

/// Records, for every `..data` flip of each target, when the new
/// certificate became readable: one inotify instance for all targets, no
/// polling (a thread per target would distort a 1,000-process run).
struct FlipWatch {
    seen: Flips,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl FlipWatch {
    fn start(targets: &[PathBuf]) -> Self {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let ino = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
        let mut wds = std::collections::HashMap::new();
        for (i, t) in targets.iter().enumerate() {
            std::fs::create_dir_all(t).unwrap();
            wds.insert(ino.add_watch(t, AddWatchFlags::IN_MOVED_TO).unwrap(), i);
        }
        let seen: Flips = Arc::new(Mutex::new(vec![Vec::new(); targets.len()]));
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (targets, s, st) = (targets.to_vec(), seen.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::os::fd::AsFd;
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let mut fds = [nix::poll::PollFd::new(
                    ino.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(100u16)).unwrap_or(0) == 0
                {
                    continue;
                }
                let Ok(events) = ino.read_events() else {
                    continue;
                };
                for e in events {
                    if e.name.as_deref() != Some(std::ffi::OsStr::new("..data")) {
                        continue;
                    }
                    let Some(&i) = wds.get(&e.wd) else { continue };
                    if let Some((_, cert, _)) = support::read_live(&targets[i]) {
                        s.lock().unwrap()[i].push((cert, now_ns()));
                    }
                }
            }
        });
        Self { seen, stop }
    }

    fn when(&self, i: usize, cert: &[u8]) -> Option<u128> {
        self.seen.lock().unwrap()[i]
            .iter()
            .find(|(c, _)| c == cert)
            .map(|(_, t)| *t)
    }
}

impl Drop for FlipWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn main() {
    if std::env::args().any(|a| a == "--sigwait") {
        sigwait_main();
    }
    let o = opts();
    let run = |name: &str| o.only.as_deref().is_none_or(|x| x == name);
    let mut rows = Vec::new();
    if run("writer") {
        rows.extend(writer_throughput(&o));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    if run("secret") {
        let (n, bursts) = if std::env::var_os("CERTSYNC_BENCH_DEBUG").is_some() {
            (3, 3)
        } else if o.quick {
            (20, 40)
        } else {
            (200, 200)
        };
        for hook in
            [false, true]
                .into_iter()
                .take(if std::env::var_os("CERTSYNC_BENCH_DEBUG").is_some() {
                    1
                } else {
                    2
                })
        {
            rows.push(secret_latency(&rt, n, Duration::from_secs(1), hook));
            rows.push(secret_latency(
                &rt,
                bursts,
                Duration::from_millis(100),
                hook,
            ));
        }
    }
    if run("hostdir") {
        rows.push(hostdir_latency(if o.quick { 3 } else { 10 }, "2s"));
        rows.push(hostdir_latency(if o.quick { 20 } else { 200 }, "1ms"));
    }
    if run("idle") {
        // One process alone, then ten of the same binary at once.
        for n in sizes("CERTSYNC_BENCH_IDLE_PROCESSES", &[1, 10]) {
            rows.push(idle_cost(&rt, n, if o.quick { 10 } else { 60 }));
        }
    }
    if run("scale") {
        for n in [1, 10, 100, 1000] {
            rows.push(scale(n));
        }
    }
    if run("scale") || run("secret-scale") {
        let rotations = if o.quick { 20 } else { 200 };
        for n in sizes("CERTSYNC_BENCH_SCALE", &[1, 100, 1000]) {
            rows.push(secret_scale(&rt, n, rotations));
        }
    }
    if run("recovery") {
        let outage = Duration::from_secs(if o.quick { 5 } else { 20 });
        for n in sizes("CERTSYNC_BENCH_RECOVERY", &[1, 100]) {
            rows.extend(recovery(&rt, n, 1, outage));
        }
        // Many processes, one mapping each: spread by their own backoff.
        let processes = if o.quick { 5 } else { 20 };
        rows.extend(recovery(&rt, processes, processes, outage));
    }
    if run("fanout") {
        let updates = if o.quick { 10 } else { 20 };
        rows.push(fanout(&rt, o.fanout, updates));
    }
    clean_up();
    print(&rows);
    if let Some(path) = &o.json {
        report::write_json(path, &rows);
    }
}
