//! Reloading the main container, end to end through the real binary: real
//! processes that record the signals they receive, and a local HTTP server
//! that records the requests it gets.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::certs::Pair;
use support::*;

struct Dirs {
    tmp: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Self {
        Self {
            tmp: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> &Path {
        self.tmp.path()
    }
    /// A source directory `name` holding `p`, and its mapping spec.
    fn source(&self, name: &str, p: &Pair, extra: &str) -> String {
        let src = self.path().join(name);
        fs::create_dir_all(&src).unwrap();
        write_pair(&src, p);
        format!(
            "dir:{}={}{extra}",
            src.display(),
            self.path().join(format!("{name}-target")).display()
        )
    }
    fn rotate(&self, name: &str, p: &Pair) {
        write_pair(&self.path().join(name), p);
    }
    fn target(&self, name: &str) -> PathBuf {
        self.path().join(format!("{name}-target"))
    }
    fn start(&self, specs: &[String], extra: &[&str]) -> Certsync {
        let mut args = vec!["run".to_owned(), "--debounce".into(), "100ms".into()];
        if !extra.contains(&"--reload-quiet") {
            args.extend(["--reload-quiet".into(), "100ms".into()]);
        }
        for s in specs {
            args.extend(["--sync".to_owned(), s.clone()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Certsync::start(&args, self.path())
    }
}

fn wait_count(what: &str, n: usize, count: impl Fn() -> usize) {
    wait_for(&format!("{what} to reach {n}"), || {
        (count() >= n).then_some(())
    });
}

#[test]
fn signal_by_name_reaches_only_the_top_most_process() {
    let d = Dirs::new();
    let name = unique("csn");
    let target = recorder(d.path(), &name, true);
    let spec = d.source("web", &Pair::new("one"), "");
    let mut cs = d.start(&[spec], &["--reload-process", &name]);
    wait_count("HUPs after the first sync", 1, || target.hups());

    d.rotate("web", &Pair::new("two"));
    wait_count("HUPs after a rotation", 2, || target.hups());
    cs.wait_log("reloaded");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(target.hups(), 2, "one reload per flip");
    assert!(
        !target.child_file.exists(),
        "the child (a worker) was signalled"
    );
    assert!(cs.is_running());
    let log = cs.log();
    let line = log.lines().find(|l| l.contains("reloaded")).unwrap();
    assert!(
        line.contains("method=\"signal\"") || line.contains("method=signal"),
        "{line}"
    );
    assert!(line.contains("latency_ms="), "{line}");
}

#[test]
fn certsync_never_signals_itself_even_when_its_command_line_matches() {
    let d = Dirs::new();
    let name = unique("css");
    let target = recorder(d.path(), &name, false);
    // The pattern is in certsync's own command line (it is an argument) and
    // in the recorder's (its path): only the recorder may be signalled.
    let pattern = format!("/{name}");
    let spec = d.source("web", &Pair::new("one"), "");
    let mut cs = d.start(&[spec], &["--reload-cmdline", &pattern]);
    wait_count("HUPs", 1, || target.hups());
    d.rotate("web", &Pair::new("two"));
    wait_count("HUPs", 2, || target.hups());
    assert!(
        cs.is_running(),
        "certsync signalled itself (SIGHUP ends it)"
    );
}

#[test]
fn pidfile_is_reread_so_a_restarted_process_is_found() {
    let d = Dirs::new();
    let pidfile = d.path().join("app.pid");
    let first = recorder(d.path(), &unique("csp"), false);
    fs::write(&pidfile, format!("{}\n", first.child.id())).unwrap();
    let spec = d.source("web", &Pair::new("one"), "");
    let _cs = d.start(&[spec], &["--reload-pidfile", pidfile.to_str().unwrap()]);
    wait_count("HUPs of the first process", 1, || first.hups());

    // The main container restarts: new process, new PID in the pidfile.
    drop(first);
    let second = recorder(d.path(), &unique("csp"), false);
    fs::write(&pidfile, format!("{}\n", second.child.id())).unwrap();
    d.rotate("web", &Pair::new("two"));
    wait_count("HUPs of the restarted process", 1, || second.hups());
}

#[test]
fn no_match_is_retried_then_reported_and_a_late_process_gets_the_next_reload() {
    let d = Dirs::new();
    let name = unique("csm");
    let spec = d.source("web", &Pair::new("one"), "");
    let mut cs = d.start(
        &[spec],
        &["--reload-process", &name, "--reload-find-timeout", "1s"],
    );
    cs.wait_log(&format!("no process matches process name \"{name}\""));
    assert!(cs.is_running());
    let late = recorder(d.path(), &name, false);
    d.rotate("web", &Pair::new("two"));
    wait_count("HUPs of the late process", 1, || late.hups());
}

#[test]
fn permission_denied_is_explained() {
    if !nix::unistd::geteuid().is_root() {
        support::tools::skip(
            "permission_denied_is_explained needs root (to run certsync as another user)",
        );
        return;
    }
    let d = Dirs::new();
    // certsync's own user may write the directory (not everyone: a target
    // below a directory others may write is refused).
    std::os::unix::fs::chown(d.path(), Some(65534), Some(65534)).unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let name = unique("csd");
    let target = recorder(d.path(), &name, false); // owned by root
    let spec = d.source("web", &Pair::new("one"), "");
    for entry in ["web", "web/tls.crt", "web/tls.key"] {
        fs::set_permissions(d.path().join(entry), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &certsync_bin(),
    ])
    .args([
        "run",
        "--debounce",
        "100ms",
        "--reload-quiet",
        "50ms",
        "--sync",
        &spec,
    ])
    .args(["--reload-process", &name]);
    let cs = Certsync::start_with(&mut cmd, d.path());
    cs.wait_log("permission denied sending SIGHUP to pid");
    assert!(cs.log().contains("without CAP_KILL"), "{}", cs.log());
    assert_eq!(target.hups(), 0);
}

/// An unprivileged uid of the test's own, used by no account: the
/// consumer's user.
fn test_uid() -> u32 {
    61_000 + std::process::id() % 4_000
}

/// Whoever writes the consumer's pidfile must not be
/// able to make root signal another user's process. The consumer runs as
/// an unprivileged user who owns its pidfile's directory (the normal case)
/// and rewrites the pidfile to name a root process, then replaces it with a
/// symlink to a root-owned pidfile naming that process: no signal reaches
/// it, the refusal names the pidfile, its owner and the process, a metric
/// counts it, and the new files are published all the same.
#[test]
fn a_pidfile_its_user_points_at_a_root_process_signals_nothing() {
    use std::os::unix::fs::{chown, lchown, symlink};
    if !nix::unistd::geteuid().is_root() {
        support::tools::skip(
            "a_pidfile_its_user_points_at_a_root_process_signals_nothing needs root (to run the \
             consumer as another user)",
        );
        return;
    }
    let uid = test_uid();
    let d = Dirs::new();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let app = d.path().join("app");
    fs::create_dir(&app).unwrap();
    chown(&app, Some(uid), Some(uid)).unwrap();
    let consumer = recorder_as(&app, &unique("csu"), false, Some(uid));
    let victim = recorder(d.path(), &unique("csv"), false); // root's
    let pidfile = app.join("app.pid");
    // What the consumer's user writes: its pidfile, owned by it.
    let write_as_user = |content: String| {
        let tmp = app.join("app.pid.tmp");
        fs::write(&tmp, content).unwrap();
        chown(&tmp, Some(uid), Some(uid)).unwrap();
        fs::rename(&tmp, &pidfile).unwrap();
    };
    write_as_user(format!("{}\n", consumer.child.id()));

    let port = free_port();
    let spec = d.source("web", &Pair::new("one"), "");
    let admin = format!("127.0.0.1:{port}");
    let cs = d.start(
        &[spec],
        &[
            "--reload-pidfile",
            pidfile.to_str().unwrap(),
            "--admin-addr",
            &admin,
        ],
    );
    wait_count("HUPs of the consumer (its own pidfile)", 1, || {
        consumer.hups()
    });

    let victim_pid = victim.child.id();
    let refused = |n: usize| {
        wait_for("the reload after the rotation", || {
            let log = cs.log();
            (victim.hups() > 0 || log.matches("refusing to signal").count() >= n).then_some(())
        });
        assert_eq!(victim.hups(), 0, "root's process was signalled");
        assert_eq!(consumer.hups(), 1);
    };

    // 1. The user names a root process in the pidfile it owns.
    write_as_user(format!("{victim_pid}\n"));
    let two = Pair::new("two");
    d.rotate("web", &two);
    wait_pair(&d.target("web"), &two);
    refused(1);
    let log = cs.log();
    let line = log
        .lines()
        .find(|l| l.contains("refusing to signal"))
        .unwrap();
    for needle in [
        pidfile.to_str().unwrap(),
        &format!("owned by uid {uid}"),
        &format!("process {victim_pid}"),
        "runs as uid 0",
    ] {
        assert!(line.contains(needle), "{needle:?} not in {line}");
    }

    // 2. The user replaces it with a symlink to a root-owned pidfile
    //    naming the same process: never followed.
    let root_pid = d.path().join("root.pid");
    fs::write(&root_pid, format!("{victim_pid}\n")).unwrap();
    fs::remove_file(&pidfile).unwrap();
    symlink(&root_pid, &pidfile).unwrap();
    lchown(&pidfile, Some(uid), Some(uid)).unwrap();
    let three = Pair::new("three");
    d.rotate("web", &three);
    wait_pair(&d.target("web"), &three);
    refused(2);
    assert!(
        cs.log().contains("symbolic link"),
        "the refusal does not say why: {}",
        cs.log()
    );

    let (_, text) = wait_for("metrics", || http_get(port, "/metrics"));
    let metrics = parse_metrics(&text);
    assert_eq!(
        metrics.get("certsync_reload_refusals_total{reason=\"user\"}"),
        Some(&1.0),
        "{text}"
    );
    assert_eq!(
        metrics.get("certsync_reload_refusals_total{reason=\"pidfile\"}"),
        Some(&1.0),
        "{text}"
    );
}

// ---- HTTP hook -----------------------------------------------------------

#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

/// A local HTTP(S) server that records requests and answers from a plan:
/// each entry is (status, delay); after the plan, 200 at once.
struct Hook {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    _rt: tokio::runtime::Runtime,
}

impl Hook {
    fn start(plan: Vec<(u16, Duration)>, tls: Option<&Pair>) -> Self {
        use axum::extract::State;
        use axum::http::{HeaderMap, Method, StatusCode, Uri};
        let rt = tokio::runtime::Runtime::new().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let plan = Arc::new(Mutex::new(
            plan.into_iter().collect::<std::collections::VecDeque<_>>(),
        ));
        type St = (
            Arc<Mutex<Vec<Seen>>>,
            Arc<Mutex<std::collections::VecDeque<(u16, Duration)>>>,
        );
        async fn handle(
            State((seen, plan)): State<St>,
            method: Method,
            uri: Uri,
            headers: HeaderMap,
        ) -> StatusCode {
            seen.lock().unwrap().push(Seen {
                method: method.to_string(),
                path: uri.path().to_owned(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                    .collect(),
            });
            let next = plan.lock().unwrap().pop_front();
            let (status, delay) = next.unwrap_or((200, Duration::ZERO));
            tokio::time::sleep(delay).await;
            StatusCode::from_u16(status).unwrap()
        }
        let app = axum::Router::new()
            .fallback(handle)
            .with_state((Arc::clone(&seen), plan));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tls.map(|p| support::tls_acceptor(&p.cert, &p.key));
        rt.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(support::serve_connection(
                    stream,
                    app.clone(),
                    acceptor.clone(),
                    250,
                    |_| {},
                ));
            }
        });
        Self {
            addr,
            seen,
            _rt: rt,
        }
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

#[test]
fn http_hook_sends_method_headers_and_token() {
    let hook = Hook::start(vec![], None);
    let d = Dirs::new();
    let token = d.path().join("token");
    fs::write(&token, "s3cret\n").unwrap();
    let spec = d.source("web", &Pair::new("one"), "");
    let url = format!("http://{}/-/reload", hook.addr);
    let cs = d.start(
        &[spec],
        &[
            "--reload-url",
            &url,
            "--reload-method",
            "put",
            "--reload-header",
            "X-Reason: cert-rotated",
            "--reload-bearer-token-file",
            token.to_str().unwrap(),
        ],
    );
    wait_count("hook calls", 1, || hook.count());
    let r = &hook.seen()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("PUT", "/-/reload"));
    assert_eq!(r.header("x-reason").as_deref(), Some("cert-rotated"));
    assert_eq!(r.header("authorization").as_deref(), Some("Bearer s3cret"));

    // A rotated token is used on the next call.
    fs::write(&token, "n3w\n").unwrap();
    d.rotate("web", &Pair::new("two"));
    wait_count("hook calls", 2, || hook.count());
    assert_eq!(
        hook.seen()[1].header("authorization").as_deref(),
        Some("Bearer n3w")
    );
    cs.wait_log("answered 200 after 1 attempt(s)");
}

#[test]
fn http_hook_retries_500s_and_timeouts_then_succeeds() {
    let hook = Hook::start(
        vec![
            (500, Duration::ZERO),
            (200, Duration::from_secs(3)),
            (503, Duration::ZERO),
        ],
        None,
    );
    let d = Dirs::new();
    let spec = d.source("web", &Pair::new("one"), "");
    let url = format!("http://{}/reload", hook.addr);
    let cs = d.start(
        &[spec],
        &[
            "--reload-url",
            &url,
            "--reload-timeout",
            "500ms",
            "--reload-retries",
            "3",
        ],
    );
    cs.wait_log("answered 200 after 4 attempt(s)");
    assert_eq!(hook.count(), 4, "500, timeout, 503, then 200");
}

#[test]
fn http_hook_gives_up_after_the_bound() {
    let hook = Hook::start(vec![(500, Duration::ZERO); 10], None);
    let d = Dirs::new();
    let spec = d.source("web", &Pair::new("one"), "");
    let url = format!("http://{}/reload", hook.addr);
    let mut cs = d.start(&[spec], &["--reload-url", &url, "--reload-retries", "2"]);
    cs.wait_log("gave up after 3 attempts; last: HTTP 500");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(hook.count(), 3);
    assert!(cs.is_running());
}

/// The hook's CA may be the ca.crt certsync itself publishes: it does not
/// exist when certsync starts and is read at call time.
#[test]
fn http_hook_over_https_trusts_the_synced_ca_file() {
    let serving = Pair::new("localhost");
    let hook = Hook::start(vec![], Some(&serving));
    let d = Dirs::new();
    let url = format!("https://localhost:{}/reload", hook.addr.port());
    let spec = d.source("web", &Pair::new("one"), "");
    fs::write(d.path().join("web/ca.crt"), &serving.ca_cert).unwrap();
    let synced_ca = d.target("web").join("ca.crt");
    assert!(!synced_ca.exists());
    let cs = d.start(
        std::slice::from_ref(&spec),
        &[
            "--reload-url",
            &url,
            "--reload-ca-file",
            synced_ca.to_str().unwrap(),
        ],
    );
    wait_count("hook calls over TLS", 1, || hook.count());
    drop(cs);

    // A CA that did not sign the hook's certificate: the TLS handshake
    // fails, nothing reaches the server, and the log says why.
    let other = d.path().join("other-ca.crt");
    fs::write(&other, Pair::new("x").ca_cert).unwrap();
    let spec = d.source("api", &Pair::new("two"), "");
    let cs = d.start(
        &[spec],
        &[
            "--reload-url",
            &url,
            "--reload-ca-file",
            other.to_str().unwrap(),
            "--reload-retries",
            "0",
        ],
    );
    cs.wait_log("gave up after 1 attempts");
    assert!(cs.log().contains("UnknownIssuer"), "{}", cs.log());
    assert_eq!(hook.count(), 1);
}

/// `user:password@` in the URL is sent as basic auth (percent-decoded) and
/// never logged; `--reload-insecure-skip-verify` reaches a loopback HTTPS
/// hook whose certificate nothing vouches for.
#[test]
fn http_hook_sends_url_userinfo_as_basic_auth_and_may_skip_verify_on_loopback() {
    use base64::Engine;
    let serving = Pair::new("localhost");
    let hook = Hook::start(vec![], Some(&serving));
    let d = Dirs::new();
    let url = format!("https://admin:p%40ss@localhost:{}/reload", hook.addr.port());
    let spec = d.source("web", &Pair::new("one"), "");
    let cs = d.start(
        &[spec],
        &["--reload-url", &url, "--reload-insecure-skip-verify"],
    );
    wait_count("hook calls over unverified TLS", 1, || hook.count());
    let auth = hook.seen()[0].header("authorization");
    let want = base64::engine::general_purpose::STANDARD.encode("admin:p@ss");
    assert_eq!(auth, Some(format!("Basic {want}")));
    cs.wait_log("answered 200");
    let log = cs.log();
    assert!(!log.contains("p%40ss") && !log.contains("p@ss"), "{log}");
    assert!(log.contains("https://***@localhost"), "{log}");
}

#[test]
fn three_mappings_rotated_together_produce_one_reload() {
    let hook = Hook::start(vec![], None);
    let d = Dirs::new();
    let specs: Vec<String> = ["serving", "client", "ca"]
        .iter()
        .map(|n| d.source(n, &Pair::new(n), ""))
        .collect();
    let url = format!("http://{}/reload", hook.addr);
    let cs = d.start(&specs, &["--reload-url", &url, "--reload-quiet", "300ms"]);
    wait_count("the first reload", 1, || hook.count());
    for n in ["serving", "client", "ca"] {
        wait_for("all three synced", || read_live(&d.target(n)));
    }
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        hook.count(),
        1,
        "the initial sync of three mappings is one reload"
    );

    for n in ["serving", "client", "ca"] {
        d.rotate(n, &Pair::new(&format!("{n}-2")));
    }
    wait_count("the second reload", 2, || hook.count());
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(hook.count(), 2, "three flips, one reload");
    cs.wait_log("mappings=");
}

/// The race a pidfile leaves: the process it names passes
/// every check, then exits and another process takes its PID before the
/// signal is sent. The signal must reach nothing: certsync holds the
/// checked process (a pidfd), not its number. Root picks the next PID
/// through `/proc/sys/kernel/ns_last_pid` to make the reuse happen.
#[test]
fn a_pid_reused_between_the_checks_and_the_signal_gets_nothing() {
    use certsync::reload::pid;
    use nix::sys::signal::Signal;
    if !nix::unistd::geteuid().is_root() {
        support::tools::skip("needs root (to choose the next PID through ns_last_pid)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("app.pid");
    let mut consumer = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = consumer.id() as i32;
    fs::write(&f, format!("{pid}\n")).unwrap();
    let target = pid::Target::Pidfile {
        path: f,
        name: None,
    };
    let chosen = pid::find(&target).unwrap();
    consumer.kill().unwrap();
    consumer.wait().unwrap();
    // Another process takes the PID (others on the machine may take it
    // first: try again).
    let mut reused = None;
    for _ in 0..1000 {
        fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1)).unwrap();
        let mut c = Command::new("sleep").arg("30").spawn().unwrap();
        if c.id() as i32 == pid {
            reused = Some(c);
            break;
        }
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let mut other = reused.unwrap_or_else(|| panic!("no process took PID {pid} in 1000 tries"));
    let sent = pid::send(&chosen, Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    let survived = other.try_wait().unwrap().is_none();
    let _ = other.kill();
    let _ = other.wait();
    assert!(
        survived,
        "the process that took PID {pid} after the checks got the signal ({sent:?})"
    );
    let e = sent.unwrap_err().to_string();
    assert!(
        e.contains(&format!("pid {pid}")) && e.contains("exited"),
        "{e}"
    );
}

/// The pidfile refusals the consumer's user can reach
/// besides a root process: a FIFO (a reader that would block), a file past
/// the size cap, and a root-owned pidfile naming a process of another
/// user. Each is refused (so nothing is sent) with its reason, naming the
/// pidfile.
#[test]
fn pidfiles_of_the_wrong_kind_size_or_user_are_refused() {
    use certsync::reload::ReloadError;
    use certsync::reload::pid;
    use std::os::unix::process::CommandExt;
    let d = tempfile::tempdir().unwrap();
    let refusal = |path: &Path| match pid::find(&pid::Target::Pidfile {
        path: path.to_owned(),
        name: None,
    }) {
        Err(e @ ReloadError::Refused { reason, .. }) => {
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("pidfile {}:", path.display())),
                "{text}"
            );
            (reason, text)
        }
        other => panic!("{}: not refused: {other:?}", path.display()),
    };
    let fifo = d.path().join("fifo.pid");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let (reason, text) = refusal(&fifo);
    assert_eq!(reason, "pidfile", "{text}");
    assert!(text.contains("not a regular file"), "{text}");

    let big = d.path().join("big.pid");
    let mut content = format!("{}\n", std::process::id()).into_bytes();
    content.resize(4096, b' ');
    fs::write(&big, &content).unwrap();
    let (reason, text) = refusal(&big);
    assert_eq!(reason, "pidfile", "{text}");

    if !nix::unistd::geteuid().is_root() {
        support::tools::skip("needs root (a root-owned pidfile naming another user's process)");
        return;
    }
    let mut nobody = Command::new("sleep")
        .arg("30")
        .uid(65534)
        .gid(65534)
        .spawn()
        .unwrap();
    let rooted = d.path().join("root.pid");
    std::thread::sleep(Duration::from_millis(100));
    fs::write(&rooted, format!("{}\n", nobody.id())).unwrap();
    let (reason, text) = refusal(&rooted);
    let _ = nobody.kill();
    let _ = nobody.wait();
    assert_eq!(reason, "user", "{text}");
    assert!(
        text.contains("owned by uid 0") && text.contains(&format!("process {}", nobody.id())),
        "{text}"
    );
}
