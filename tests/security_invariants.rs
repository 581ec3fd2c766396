//! certsync runs as root next to the control plane: nothing it is handed
//! may turn it against the node. One test per class of defect, through the
//! real binary (see docs/security.md, "File-system invariants").

mod support;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::certs::Pair;
use support::*;

/// `certsync run --sync SYNC --debounce 100ms EXTRA...`, logging into `dir`.
fn daemon(dir: &Path, sync: &str, extra: &[&str]) -> Certsync {
    let mut args = vec!["run", "--sync", sync, "--debounce", "100ms"];
    args.extend_from_slice(extra);
    Certsync::start(&args, dir)
}

/// A temporary directory with `src` and `t` (target) paths in it, and the
/// `--sync` spec mapping one to the other.
fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf, String) {
    let d = tempfile::tempdir().unwrap();
    let (src, target) = (d.path().join("src"), d.path().join("t"));
    let sync = format!("dir:{}={}", src.display(), target.display());
    (d, src, target, sync)
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// A symlink planted under any name certsync owns is replaced,
/// never followed; retired keys never land outside the target.
#[test]
fn planted_symlinks_in_owned_names_are_never_followed() {
    let (d, src, target, sync) = dirs();
    let victim = d.path().join("victim");
    fs::create_dir(&victim).unwrap();
    fs::write(victim.join("kubelet.conf"), b"do not touch").unwrap();
    let before = snapshot(&victim);
    let pairs: Vec<Pair> = (0..4).map(|i| Pair::new(&format!("gen{i}"))).collect();
    write_pair(&src, &pairs[0]);
    let cs = daemon(d.path(), &sync, &["--keep-revisions", "5"]);
    wait_pair(&target, &pairs[0]);
    // ..history itself, a history entry named after the live revision,
    // and the lock, all pointing at the victim directory. Each planted
    // while certsync is stopped: a repair between removing a name and
    // planting it would make the name again first.
    cs.while_stopped(|| {
        fs::create_dir_all(target.join("..history")).unwrap();
        fs::remove_dir_all(target.join("..history")).unwrap();
        symlink(&victim, target.join("..history")).unwrap();
    });
    write_pair(&src, &pairs[1]);
    let live = wait_pair(&target, &pairs[1]);
    // certsync replaces the planted ..history after the flip, as it retires
    // the old revision; planting the entry before that would have the test
    // itself write through its own link into the victim directory.
    wait_for("..history replaced by a directory", || {
        fs::symlink_metadata(target.join("..history"))
            .is_ok_and(|m| m.is_dir())
            .then_some(())
    });
    let entry = live.trim_start_matches("..rev-").to_owned();
    symlink(&victim, target.join("..history").join(&entry)).unwrap();
    // The write lock: a planted symlink is replaced, never opened.
    cs.while_stopped(|| {
        fs::remove_file(target.join("..lock")).unwrap();
        symlink(victim.join("kubelet.conf"), target.join("..lock")).unwrap();
    });
    write_pair(&src, &pairs[2]);
    wait_pair(&target, &pairs[2]);
    write_pair(&src, &pairs[3]);
    wait_pair(&target, &pairs[3]);

    assert_eq!(snapshot(&victim), before, "the victim directory changed");
    assert!(
        fs::symlink_metadata(target.join("..history"))
            .unwrap()
            .is_dir()
    );
    let lock = fs::symlink_metadata(target.join("..lock")).unwrap();
    assert!(
        lock.is_file() && lock.permissions().mode() & 0o777 == 0o600,
        "the planted ..lock was replaced by a private file: {lock:?}"
    );
    // The retired keys are in the target's own history.
    let history = fs::read_dir(target.join("..history")).unwrap().count();
    assert!(history >= 2, "history holds the retired revisions");
}

/// Overlap checks see through spellings (`./`, `..`, absolute)
/// and symlinks; exit 64 naming both mappings; the source is untouched.
#[test]
fn overlapping_paths_are_refused_whatever_their_spelling() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    write_pair(&src, &Pair::new("src"));
    symlink(&src, d.path().join("alias")).unwrap();
    let before = snapshot(&src);
    let abs = d.path().join("tgt");
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            vec!["dir:./src=./src".into()],
            vec!["its own source directory"],
        ),
        (
            vec!["dir:src=alias/../src/".into()],
            vec!["its own source directory"],
        ),
        (
            vec!["dir:src=alias/sub".into()],
            vec!["its own source directory"],
        ),
        (
            vec![
                "dir:src=tgt,name=first".into(),
                format!("dir:src2={},name=second", abs.display()),
            ],
            vec!["\"first\"", "\"second\"", "same directory"],
        ),
    ];
    for (specs, wants) in cases {
        let mut args = vec!["run", "--once"];
        for s in &specs {
            args.extend(["--sync", s.as_str()]);
        }
        let (code, _, err) = run_bounded(&args, d.path());
        assert_eq!(code, 64, "{specs:?}: {err}");
        for want in wants {
            assert!(err.contains(want), "{specs:?}: {err}");
        }
    }
    assert_eq!(
        snapshot(&src),
        before,
        "the source directory was written to"
    );
}

/// FIFOs (and devices) anywhere certsync reads never hang it.
#[test]
fn fifos_and_devices_never_hang_certsync() {
    let (d, src, _, sync) = dirs();
    write_pair(&src, &Pair::new("fifo"));
    fs::remove_file(src.join("tls.key")).unwrap();
    mkfifo(&src.join("tls.key"));
    let (code, _, err) = run_bounded(&["run", "--once", "--sync", &sync], d.path());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("tls.key") && err.contains("not a regular file"),
        "{err}"
    );

    for path in [src.join("tls.key"), PathBuf::from("/dev/zero")] {
        let (code, out, err) = run_bounded(&["check", path.to_str().unwrap()], d.path());
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains("not a regular file"), "{out}{err}");
    }

    // The daemon: not ready, and SIGTERM still ends it.
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let pidfile = d.path().join("app.pid");
    mkfifo(&pidfile);
    let cs = daemon(
        d.path(),
        &sync,
        &[
            "--admin-addr",
            &admin,
            "--reload-pidfile",
            pidfile.to_str().unwrap(),
        ],
    );
    cs.wait_log("not a regular file");
    wait_for("/readyz to say 503", || {
        http_get(port, "/readyz").filter(|(s, _)| *s == 503)
    });
    // A good pair now: published, and the pidfile FIFO is refused, not read.
    fs::remove_file(src.join("tls.key")).unwrap();
    write_pair(&src, &Pair::new("fifo"));
    // (Not "pidfile": the plan logged at start names it already.)
    cs.wait_log("is a FIFO");
    assert!(cs.terminate().success());
}

/// Rollback never prunes what the daemon keeps, and every
/// rollback the daemon adopts (including one back to the source's
/// content) reloads the consumer.
#[test]
fn rollbacks_keep_history_and_always_reload() {
    let (d, src, target, sync) = dirs();
    let rec = recorder(d.path(), &unique("rbk"), false);
    let pidfile = d.path().join("app.pid");
    fs::write(&pidfile, format!("{}\n", rec.child.id())).unwrap();
    let pairs: Vec<Pair> = (0..5).map(|i| Pair::new(&format!("r{i}"))).collect();
    write_pair(&src, &pairs[0]);
    let cs = daemon(
        d.path(),
        &sync,
        &[
            "--keep-revisions",
            "10",
            "--reload-pidfile",
            pidfile.to_str().unwrap(),
            "--reload-quiet",
            "50ms",
        ],
    );
    for (i, p) in pairs.iter().enumerate() {
        write_pair(&src, p);
        wait_pair(&target, p);
        wait_for("a reload per revision", || (rec.hups() > i).then_some(()));
    }
    let t = target.to_str().unwrap();
    let hups = rec.hups();
    let (code, out, err) = run_bounded(&["rollback", t], d.path());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored revision 4 as revision 6"), "{out}");
    wait_for("a reload after the rollback", || {
        (rec.hups() > hups).then_some(())
    });
    let (_, table, _) = run_bounded(&["revisions", t], d.path());
    assert_eq!(table.lines().count(), 1 + 6, "nothing pruned:\n{table}");

    // Back to the source's content: the daemon adopts it and reloads.
    let hups = rec.hups();
    let (code, out, err) = run_bounded(&["rollback", t], d.path());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored revision 5 as revision 7"), "{out}");
    wait_pair(&target, &pairs[4]);
    wait_for("a reload after the second rollback", || {
        (rec.hups() > hups).then_some(())
    });
    drop(cs);
}

/// A deleted target is recreated and watched again; one replaced by another
/// directory is not written into (whoever may write the directory above could
/// have made it); readiness follows whether the target holds valid files.
#[test]
fn deleted_targets_are_recreated_replaced_ones_refused() {
    let (d, src, target, sync) = dirs();
    let pair = Pair::new("recreate");
    write_pair(&src, &pair);
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    // A resync far away: only the re-armed watch can repair in time.
    let cs = daemon(d.path(), &sync, &["--admin-addr", &admin, "--resync", "1h"]);
    wait_pair(&target, &pair);
    cs.while_stopped(|| fs::remove_dir_all(&target).unwrap());
    wait_pair(&target, &pair);
    // Renamed away and made again by hand: not the directory certsync
    // opened, so nothing is written there; a restart adopts it.
    cs.while_stopped(|| {
        fs::rename(&target, d.path().join("t.old")).unwrap();
        fs::create_dir(&target).unwrap();
    });
    let pair = Pair::new("recreate-after");
    write_pair(&src, &pair);
    cs.wait_log(&format!(
        "target {} is no longer the directory certsync opened",
        target.display()
    ));
    assert!(fs::read_dir(&target).unwrap().next().is_none());
    drop(cs);
    let cs = daemon(d.path(), &sync, &["--admin-addr", &admin, "--resync", "1h"]);
    wait_pair(&target, &pair);
    // The new directory is watched: damage there is repaired.
    fs::remove_file(target.join("tls.crt")).unwrap();
    wait_for("the link to be restored", || {
        fs::read(target.join("tls.crt"))
            .ok()
            .filter(|c| *c == pair.cert)
    });
    wait_for("ready", || {
        http_get(port, "/readyz").filter(|(s, _)| *s == 200)
    });

    // A target that cannot be recreated: not ready, with the reason.
    cs.while_stopped(|| {
        fs::rename(&target, d.path().join("t.gone")).unwrap();
        fs::write(&target, b"a file").unwrap();
    });
    let (_, body) = wait_for("/readyz to say 503", || {
        http_get(port, "/readyz").filter(|(s, _)| *s == 503)
    });
    assert!(body.contains("no valid files"), "{body}");
    fs::remove_file(&target).unwrap();
    let next = Pair::new("recreate2");
    write_pair(&src, &next);
    wait_pair(&target, &next);
    wait_for("ready again", || {
        http_get(port, "/readyz").filter(|(s, _)| *s == 200)
    });
}

/// A file rewritten over and over next to the pair (a heartbeat)
/// does not postpone reading the pair (nor does a relative source path
/// leave it to the hourly resync).
/// A target certsync makes again (it was removed while the daemon ran)
/// is claimed again: a `run --once` on it afterwards exits 1 naming the
/// daemon, as on the target it opened first (otherwise the new
/// directory's `..owner` was free until a restart and `--once` wrote).
#[test]
fn a_recreated_target_stays_claimed_by_the_daemon() {
    let (d, src, target, sync) = dirs();
    let pair = Pair::new("reclaim");
    write_pair(&src, &pair);
    let cs = daemon(d.path(), &sync, &["--resync", "1h"]);
    wait_pair(&target, &pair);
    cs.while_stopped(|| fs::remove_dir_all(&target).unwrap());
    wait_pair(&target, &pair);
    let revisions = revision_names(&target);
    let pid = cs.child.id().to_string();
    let (code, _, err) = run_bounded(&["run", "--once", "--sync", &sync], d.path());
    assert_eq!(
        code, 1,
        "--once on a re-created target a daemon owns: {err}"
    );
    assert!(
        err.contains("already managed by another certsync") && err.contains(&pid),
        "{err}"
    );
    assert_eq!(revision_names(&target), revisions, "--once wrote nothing");
    // The daemon still publishes there.
    let next = Pair::new("reclaim-next");
    write_pair(&src, &next);
    wait_pair(&target, &next);
    drop(cs);
}

#[test]
fn a_chatty_source_directory_does_not_starve_the_sync() {
    let (d, src, target, _) = dirs();
    let quiet = Pair::new("quiet");
    write_pair(&src, &quiet);
    // Relative paths, as a user types them: watched all the same.
    let _cs = Certsync::start_with(
        Command::new(certsync_bin())
            .args([
                "run",
                "--sync",
                "dir:src=t",
                "--debounce",
                "1s",
                "--resync",
                "1h",
            ])
            .current_dir(d.path()),
        d.path(),
    );
    wait_pair(&target, &quiet);
    let stop = Arc::new(Mutex::new(false));
    let beat = {
        let (stop, file) = (Arc::clone(&stop), src.join("heartbeat"));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !*stop.lock().unwrap() {
                fs::write(&file, i.to_string()).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let next = Pair::new("rotated");
    write_pair(&src, &next);
    wait_pair(&target, &next);
    *stop.lock().unwrap() = true;
    beat.join().unwrap();
}

/// A one-shot HTTP server: answers every request with `response` and
/// records the request lines it saw.
fn canned_http(response: impl Into<String>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let response: String = response.into();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = Vec::new();
            let mut byte = [0u8; 1];
            while !buf.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                buf.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&buf).into_owned();
            s.lock()
                .unwrap()
                .push(text.lines().next().unwrap_or("").to_owned());
            if response.is_empty() {
                std::thread::sleep(Duration::from_secs(120)); // hang
            }
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (port, seen)
}

/// A daemon whose reload URL (`url(port)`) answers 302 to `location`, at
/// trace level, after one try: its log and the request lines the hook saw.
fn redirected_reload(
    tag: &str,
    location: &str,
    url: impl Fn(u16) -> String,
) -> (tempfile::TempDir, String, Arc<Mutex<Vec<String>>>) {
    let (d, src, _, sync) = dirs();
    write_pair(&src, &Pair::new(tag));
    let response = format!(
        "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let (port, seen) = canned_http(response);
    let url = url(port);
    let cs = daemon(
        d.path(),
        &sync,
        &[
            "--reload-url",
            &url,
            "--reload-retries",
            "1",
            "--log-level",
            "trace",
        ],
    );
    cs.wait_log("gave up");
    (d, cs.log(), seen)
}

/// Defects 7 and 8: a redirect is a failed reload naming its Location and
/// is not followed; user:password in the URL never reaches the log.
#[test]
fn the_hook_never_follows_redirects_or_logs_credentials() {
    let (_d, log, seen) =
        redirected_reload("hook", "http://admin:hunter2@127.0.0.1:1/login", |port| {
            format!("http://admin:s3cretpass@127.0.0.1:{port}/-/reload")
        });
    assert!(
        log.contains("redirect to http://***@127.0.0.1:1/login"),
        "{log}"
    );
    assert!(log.contains("not followed"), "{log}");
    assert!(
        !log.contains("s3cretpass") && !log.contains("hunter2"),
        "{log}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|l| l.contains("/-/reload")),
        "{seen:?}"
    );
}

/// A reload URL's query values and fragment (`?token=...`) are credentials
/// as much as its userinfo: never in a log line, the redirect's Location
/// included. The request itself still carries them.
#[test]
fn reload_url_query_values_never_reach_the_log() {
    let (_d, log, seen) = redirected_reload(
        "hook-query",
        "http://127.0.0.1:1/login?next=%2F&sig=hunter2#frag",
        |port| format!("http://127.0.0.1:{port}/-/reload?token=s3cret&mode=h4rdv4l#pw=fragsecret"),
    );
    assert!(
        log.contains("/-/reload?token=REDACTED&mode=REDACTED#REDACTED"),
        "{log}"
    );
    assert!(
        log.contains("redirect to http://127.0.0.1:1/login?next=REDACTED&sig=REDACTED#REDACTED"),
        "{log}"
    );
    for secret in ["s3cret", "h4rdv4l", "fragsecret", "hunter2"] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.is_empty()
            && seen
                .iter()
                .all(|l| l.contains("/-/reload?token=s3cret&mode=h4rdv4l")),
        "the hook gets the query: {seen:?}"
    );
}

/// A --reload-cmdline that matches the shell that started
/// certsync never signals it; a pidfile naming a process that started
/// after the pidfile was written (PID reuse) is refused.
#[test]
fn signals_never_reach_an_ancestor_or_a_reused_pid() {
    let (d, src, target, sync) = dirs();
    write_pair(&src, &Pair::new("sig"));
    let marker = unique("wrapmark");
    let script = format!(
        "{} run --sync {sync} --reload-cmdline {marker} --reload-find-timeout 0s; sleep 30",
        certsync_bin()
    );
    let mut wrapper = Command::new("bash")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("certsync under the wrapper to publish", || {
        read_live(&target)
    });
    std::thread::sleep(Duration::from_millis(500)); // the reload attempt
    let wrapper_alive = wrapper.try_wait().unwrap().is_none();
    // Clean up first (certsync may be orphaned if the wrapper died).
    let _ = Command::new("pkill").args(["-f", &marker]).status();
    let _ = wrapper.kill();
    let _ = wrapper.wait();
    assert!(wrapper_alive, "the wrapper shell was signalled");

    // A stale pidfile: written an hour before its PID's process started.
    let rec = recorder(d.path(), &unique("reuse"), false);
    let pidfile = d.path().join("stale.pid");
    fs::write(&pidfile, format!("{}\n", rec.child.id())).unwrap();
    fs::File::options()
        .write(true)
        .open(&pidfile)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let target2 = d.path().join("t2");
    let sync = format!("dir:{}={}", src.display(), target2.display());
    let cs = daemon(
        d.path(),
        &sync,
        &["--reload-pidfile", pidfile.to_str().unwrap()],
    );
    cs.wait_log("PID was reused");
    assert_eq!(rec.hups(), 0, "the reused PID was signalled");
}

/// With `fs.protected_hardlinks=0` the consumer may replace its pidfile with
/// a hard link to a root-owned pidfile naming a root process: the file is
/// root's, names a process of its owner, and passed every check. A pidfile
/// with more than one link is refused (no signal), naming it, through the
/// same path as every pidfile refusal; the same file with one link is
/// trusted (the control). The link is made by root here: the same inode
/// state, without changing the machine's sysctl.
#[test]
fn a_hard_linked_pidfile_is_refused() {
    let (d, src, target, sync) = dirs();
    let first = Pair::new("links");
    write_pair(&src, &first);
    let rec = recorder(d.path(), &unique("link"), false);
    let rootd = d.path().join("rootd.pid");
    fs::write(&rootd, format!("{}\n", rec.child.id())).unwrap();
    let pidfile = d.path().join("app.pid");
    fs::hard_link(&rootd, &pidfile).unwrap();
    let cs = daemon(
        d.path(),
        &sync,
        &["--reload-pidfile", pidfile.to_str().unwrap()],
    );
    wait_pair(&target, &first);
    cs.wait_log("hard link");
    let log = cs.log();
    assert!(
        log.contains(&pidfile.display().to_string()) && log.contains("links 2"),
        "{log}"
    );
    assert_eq!(
        rec.hups(),
        0,
        "a hard-linked pidfile's process was signalled"
    );
    // The control: one link again, the next change reloads.
    fs::remove_file(&rootd).unwrap();
    let next = Pair::new("one-link");
    write_pair(&src, &next);
    wait_pair(&target, &next);
    wait_for("a reload through a pidfile with one link", || {
        (rec.hups() > 0).then_some(())
    });
    assert!(cs.terminate().success());
}

/// Zero, negative and overflowing numbers, unsafe modes and
/// signals are usage errors (exit 64), never a panic.
#[test]
fn bad_numbers_modes_and_signals_are_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    for extra in [
        &["--resync", "0s"][..],
        &["--debounce", "9999999999years"],
        &["--keep-revisions", "0"],
        &["--cert-mode", "0777"],
        &["--key-mode", "4600"],
        &["--reload-signal", "KILL"],
        &["--reload-signal", "STOP"],
    ] {
        let mut args = vec!["run", "--once", "--sync", "dir:/nonexistent=/nonexistent-t"];
        args.extend_from_slice(extra);
        let (code, _, err) = run_bounded(&args, d.path());
        assert_eq!(code, 64, "{extra:?}: {err}");
        assert!(
            err.contains(extra[0]) && !err.contains("panicked"),
            "{extra:?}: {err}"
        );
    }
}

/// Every non-zero exit says why, once.
#[test]
fn every_failure_says_why_once() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    write_pair(&src, &Pair::new("why"));
    let file = d.path().join("a-file");
    fs::write(&file, b"x").unwrap();
    let sync = format!("dir:{}={}", src.display(), file.display());
    let (code, _, err) = run_bounded(&["run", "--once", "--sync", &sync], d.path());
    assert_eq!(code, 1);
    assert_eq!(err.matches("is not a directory").count(), 1, "{err}");
    assert!(err.contains(file.to_str().unwrap()), "{err}");
    let (code, _, err) = run_bounded(&["run", "--sync", &sync], d.path());
    assert_eq!(code, 1);
    assert_eq!(err.matches("is not a directory").count(), 1, "{err}");

    // A bad pair on a fresh target does not claim there are good files.
    let other = Pair::new("other");
    fs::write(src.join("tls.key"), &other.key).unwrap();
    let sync = format!("dir:{}={}", src.display(), d.path().join("fresh").display());
    let (code, _, err) = run_bounded(&["run", "--once", "--sync", &sync], d.path());
    assert_eq!(code, 1);
    assert!(err.contains("nothing published yet"), "{err}");
    assert!(!err.contains("keeping the last good files"), "{err}");

    // Expiry is said as a date; an oversized file as too_large.
    let old = Pair::with_validity("old", -7200, -3600);
    write_pair(&src, &old);
    let (_, _, err) = run_bounded(&["run", "--once", "--sync", &sync], d.path());
    assert!(
        err.contains("expired at 20") && !err.contains("Unix time"),
        "{err}"
    );
    fs::write(src.join("tls.crt"), vec![b'a'; 2 << 20]).unwrap();
    let (_, _, err) = run_bounded(&["run", "--once", "--sync", &sync], d.path());
    assert!(err.contains("too_large"), "{err}");
}

/// With every inotify instance of its user taken, certsync
/// warns once naming the sysctl, polls instead, and keeps syncing.
#[test]
fn inotify_exhaustion_falls_back_to_polling() {
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // certsync runs as nobody here: its target lies in nobody's own
    // directory (a directory others may write is refused at start).
    let home = d.path().join("nobody");
    fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    let (src, target) = (home.join("src"), home.join("t"));
    let sync = format!("dir:{}={}", src.display(), target.display());
    let first = Pair::new("poll");
    write_pair(&src, &first);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o755)).unwrap();
    for f in ["tls.crt", "tls.key"] {
        fs::set_permissions(src.join(f), fs::Permissions::from_mode(0o644)).unwrap();
    }
    // A process of the same (unprivileged) user holding every instance.
    let as_nobody = ["--reuid", "65534", "--regid", "65534", "--clear-groups"];
    let mut holder = Command::new("setpriv")
        .args(as_nobody)
        .arg(std::env::current_exe().unwrap())
        .args([
            "hold_every_inotify_instance",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("CERTSYNC_HOLD_INOTIFY", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(holder.stdout.take().unwrap());
    let held = std::io::BufRead::lines(out)
        .find_map(|l| l.ok()?.strip_prefix("holding ").map(str::to_owned));
    assert!(held.is_some(), "the holder did not start");

    let port = free_port();
    let mut cmd = Command::new("setpriv");
    cmd.args(as_nobody).arg(certsync_bin()).args([
        "run",
        "--sync",
        &sync,
        "--debounce",
        "100ms",
        "--resync",
        "1h",
        "--admin-addr",
        &format!("127.0.0.1:{port}"),
    ]);
    let mut cs = Certsync::start_with(&mut cmd, d.path());
    wait_pair(&target, &first);
    cs.wait_log("fs.inotify.max_user_instances");
    let next = Pair::new("poll2");
    fs::write(src.join("tls.crt"), &next.cert).unwrap();
    fs::write(src.join("tls.key"), &next.key).unwrap();
    wait_pair(&target, &next);
    let (_, metrics) = wait_for("metrics", || http_get(port, "/metrics"));
    assert_eq!(
        parse_metrics(&metrics).get("certsync_file_watch_polling"),
        Some(&1.0)
    );
    assert!(cs.is_running());
    drop(cs);
    let _ = holder.kill();
    let _ = holder.wait();
}

/// Not a test: the helper process of `inotify_exhaustion_falls_back_to_polling`.
#[test]
#[ignore]
fn hold_every_inotify_instance() {
    if std::env::var_os("CERTSYNC_HOLD_INOTIFY").is_none() {
        return;
    }
    let mut held = Vec::new();
    while let Ok(i) = nix::sys::inotify::Inotify::init(nix::sys::inotify::InitFlags::empty()) {
        held.push(i);
    }
    println!("holding {}", held.len());
    let _ = std::io::stdin().read(&mut [0u8; 1]); // until the test ends
}

/// Extras: a second daemon on a target is refused; a chmod of the live key
/// is repaired at once; SIGTERM during a hanging hook exits within the
/// grace period; JSON logs carry one `target` key.
#[test]
fn second_daemon_mode_drift_shutdown_and_json_logs() {
    let (d, src, target, sync) = dirs();
    let pair = Pair::new("extras");
    write_pair(&src, &pair);
    let (port, seen) = canned_http(""); // accepts, never answers
    let url = format!("http://127.0.0.1:{port}/reload");
    let cs = daemon(
        d.path(),
        &sync,
        &[
            "--resync",
            "1h",
            "--reload-url",
            &url,
            "--reload-timeout",
            "60s",
        ],
    );
    wait_pair(&target, &pair);

    let (code, _, err) = run_bounded(&["run", "--sync", &sync], d.path());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already managed by another certsync"), "{err}");
    // `--once` too: a one-shot run beside the daemon would flip under it.
    let (code, _, err) = run_bounded(&["run", "--once", "--sync", &sync], d.path());
    assert_eq!(code, 1, "--once on a target a daemon owns: {err}");
    assert!(err.contains("already managed by another certsync"), "{err}");

    let key = target.join("tls.key");
    fs::set_permissions(
        fs::canonicalize(&key).unwrap(),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    wait_for("the key mode to be restored", || {
        (fs::metadata(&key).ok()?.permissions().mode() & 0o777 == 0o600).then_some(())
    });

    wait_for("the hook to be called", || {
        (!seen.lock().unwrap().is_empty()).then_some(())
    });
    let start = Instant::now();
    assert!(cs.terminate().success());
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "SIGTERM took {:?} with a hanging hook (kubelet kills at 30 s)",
        start.elapsed()
    );

    let json_target = d.path().join("tj");
    let sync = format!("dir:{}={}", src.display(), json_target.display());
    let (code, _, err) = run_bounded(
        &["run", "--once", "--log-format", "json", "--sync", &sync],
        d.path(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("published new revision"), "{err}");
    for line in err.lines() {
        assert!(line.matches("\"target\":").count() <= 1, "{line}");
    }
}

/// A `dir:` mapping of [`dirs`] whose source holds a pair, served by
/// `certsync run --admin-addr 127.0.0.1:PORT` under `prlimit
/// --nofile=LIMITS` (no pre_exec: prlimit sets the limit and execs
/// certsync, so the child is certsync itself), once the pair is published.
/// `None` when prlimit is missing (skipped, or failed under CI).
struct Limited {
    d: tempfile::TempDir,
    src: PathBuf,
    target: PathBuf,
    cs: Certsync,
    port: u16,
}

fn daemon_with_nofile(limits: &str) -> Option<Limited> {
    if !tools::have(&["prlimit"]) {
        return None;
    }
    let (d, src, target, sync) = dirs();
    let first = Pair::new("first");
    write_pair(&src, &first);
    let port = free_port();
    let bin = certsync_bin();
    let addr = format!("127.0.0.1:{port}");
    let cs = Certsync::start_with(
        Command::new("prlimit").args([
            &format!("--nofile={limits}"),
            "--",
            &bin,
            "run",
            "--sync",
            &sync,
            "--debounce",
            "100ms",
            "--admin-addr",
            &addr,
        ]),
        d.path(),
    );
    wait_pair(&target, &first);
    Some(Limited {
        d,
        src,
        target,
        cs,
        port,
    })
}

/// The soft and hard `Max open files` of a process.
fn nofile_limits(pid: u32) -> (String, String) {
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut f = line["Max open files".len()..].split_whitespace();
    (f.next().unwrap().to_owned(), f.next().unwrap().to_owned())
}

/// Anyone who can reach the admin
/// port (every local user on loopback) held idle and header-trickling
/// connections until certsync's descriptors ran out; a rotation then
/// failed with "Too many open files" and `/livez` stopped answering. Here
/// with a 256-descriptor limit certsync may not raise (soft = hard), more
/// connections than the admin port's cap (64) and than the limit: the
/// rotation is published and `/livez` answers while they are held, every
/// one of them is closed by certsync (the oldest for each one over the
/// cap, the others by the header timeout), and the metric counts both.
#[test]
fn admin_connections_never_starve_the_file_work() {
    use std::net::TcpStream;
    let Some(Limited {
        d: _d,
        src,
        target,
        cs,
        port,
    }) = daemon_with_nofile("256:256")
    else {
        return;
    };
    wait_for("/livez", || {
        http_get(port, "/livez").filter(|(s, _)| *s == 200)
    });

    // Half idle (not a byte sent), half trickling a request header.
    const HELD: usize = 300;
    let mut held = Vec::new();
    let mut trickling = Vec::new();
    for i in 0..HELD {
        let s = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(5),
        )
        .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        if i % 2 == 1 {
            let mut w = s.try_clone().unwrap();
            // A refused connection may already be closed: errors are fine.
            let _ = w.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n");
            trickling.push(w);
        }
        held.push(s);
    }
    let stop = Arc::new(Mutex::new(false));
    let trickler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !*stop.lock().unwrap() {
                for s in &mut trickling {
                    let _ = s.write_all(b"X");
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };

    let next = Pair::new("during-flood");
    write_pair(&src, &next);
    wait_pair(&target, &next);
    // A probe is answered at its first try while they are held: it closes
    // the oldest held connection, not the other way round.
    assert_eq!(
        http_get(port, "/livez").map(|(status, _)| status),
        Some(200),
        "/livez while {HELD} connections are held"
    );

    // Every held connection ends on certsync's side: EOF or a reset, never
    // a read that waits past PATIENCE.
    for (i, mut s) in held.into_iter().enumerate() {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("held connection {i} still open after {PATIENCE:?}: {e}"),
            }
        }
    }
    *stop.lock().unwrap() = true;
    trickler.join().unwrap();
    let (status, _) = wait_for("/livez after the flood", || http_get(port, "/livez"));
    assert_eq!(status, 200);
    let (_, text) = wait_for("/metrics", || http_get(port, "/metrics"));
    let m = parse_metrics(&text);
    let closed = |reason: &str| {
        m.get(&format!(
            "certsync_admin_connections_closed_total{{reason=\"{reason}\"}}"
        ))
        .copied()
        .unwrap_or_else(|| panic!("no closed{{reason={reason}}} in\n{text}"))
    };
    assert!(closed("limit") >= (HELD - 64) as f64, "{text}");
    assert!(closed("timeout") >= 1.0, "{text}");
    assert!(!cs.log().contains("Too many open files"), "{}", cs.log());
}

/// The soft open-file limit is raised to the hard one at start (as Go
/// does), and said once: a systemd unit's 1024 is otherwise all a daemon
/// of many mappings has.
#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit_at_start() {
    let Some(Limited { d: _d, cs, .. }) = daemon_with_nofile("128:4096") else {
        return;
    };
    assert_eq!(
        nofile_limits(cs.child.id()),
        ("4096".to_owned(), "4096".to_owned())
    );
    assert_eq!(
        cs.log().matches("raised the open-file limit").count(),
        1,
        "{}",
        cs.log()
    );
}
