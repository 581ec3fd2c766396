use super::*;
use super::{error::*, layout::*, publish::*, revision::*, rollback::*, target::*};
use crate::bundle::{Bundle, KEY_FILE};
use crate::bundle::{CA_FILE, CERT_FILE};
use nix::fcntl::{Flock, FlockArg};
use std::collections::BTreeMap;
use std::fs::Permissions;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// What only tests ask of the writer.
impl Writer {
    pub fn publish(&self, bundle: &Bundle) -> Result<Outcome, WriterError> {
        self.publish_then(bundle, || {})
    }

    pub fn history(&self) -> Result<BTreeMap<u64, String>, WriterError> {
        Ok(super::history::history(&self.root(false)?)?.1)
    }
}

impl CopyUpdate {
    pub fn replaced(&self) -> bool {
        matches!(self, Self::Replaced { .. })
    }
}

/// A real certificate, the same for the same tag: the writer gives
/// anything but certificate PEM the key mode.
fn cert(tag: &str) -> Vec<u8> {
    static MADE: std::sync::Mutex<BTreeMap<String, Vec<u8>>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut made = MADE.lock().unwrap();
    made.entry(tag.to_owned())
        .or_insert_with(|| crate::test_certs::Pair::new(&format!("cert-{tag}")).cert)
        .clone()
}

fn bundle(tag: &str) -> Bundle {
    let mut b = Bundle::default();
    b.insert(CERT_FILE, cert(tag), "t").unwrap();
    b.insert(KEY_FILE, format!("key {tag}").into_bytes(), "t")
        .unwrap();
    b
}

fn setup(keep: usize) -> (tempfile::TempDir, Writer) {
    let dir = tempfile::tempdir().unwrap();
    let w = Writer::open(
        dir.path().join("target"),
        WriterOptions {
            keep,
            ..Default::default()
        },
    )
    .unwrap();
    (dir, w)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The visible files resolve through `..data` to one complete revision
/// with exactly `b`'s bytes and the configured modes.
fn assert_live(w: &Writer, b: &Bundle) {
    let t = w.target();
    let data = fs::read_link(t.join(DATA)).unwrap();
    let data = data.to_str().unwrap();
    assert!(data.starts_with(REV_PREFIX), "{data}");
    assert!(data.ends_with(&b.hash().short()), "{data}");
    for (name, bytes) in b.files() {
        assert_eq!(
            fs::read_link(t.join(name)).unwrap(),
            Path::new(DATA).join(name)
        );
        assert_eq!(fs::read(t.join(name)).unwrap(), bytes, "{name}");
        let mode = fs::metadata(t.join(name)).unwrap().mode() & 0o7777;
        assert_eq!(mode, if name == KEY_FILE { 0o600 } else { 0o644 }, "{name}");
    }
    let in_rev = entries(&t.join(data));
    let want: Vec<_> = b.names().map(str::to_owned).collect();
    assert_eq!(in_rev, want, "revision holds exactly the bundle");
}

fn revisions_on_disk(w: &Writer) -> usize {
    let live = entries(w.target())
        .iter()
        .filter(|n| n.starts_with(REV_PREFIX))
        .count();
    live + w.history().unwrap().len()
}

#[test]
fn publish_rotate_and_prune() {
    let (_d, w) = setup(3);
    for i in 1..=10u64 {
        let b = bundle(&i.to_string());
        assert_eq!(
            w.publish(&b).unwrap(),
            Outcome::Written {
                revision: i,
                drift: None
            }
        );
        assert_live(&w, &b);
        assert_eq!(revisions_on_disk(&w), (i as usize).min(3));
    }
    let history: Vec<u64> = w.history().unwrap().into_keys().collect();
    assert_eq!(history, vec![8, 9]);
    // History keeps the files of each retired revision, key mode intact.
    let h9 = w
        .target()
        .join(HISTORY)
        .join(rev_name(9, &bundle("9").hash()));
    assert_eq!(fs::read(h9.join(KEY_FILE)).unwrap(), b"key 9");
    assert_eq!(
        fs::metadata(h9.join(KEY_FILE)).unwrap().mode() & 0o777,
        0o600
    );
}

#[test]
fn identical_content_creates_no_revision_even_after_reopen() {
    let (_d, w) = setup(3);
    let b = bundle("same");
    w.publish(&b).unwrap();
    let before = entries(w.target());
    assert_eq!(
        w.publish(&b).unwrap(),
        Outcome::Unchanged {
            revision: 1,
            repaired_links: 0
        }
    );
    let reopened = Writer::open(w.target(), WriterOptions::default()).unwrap();
    assert!(matches!(
        reopened.publish(&b).unwrap(),
        Outcome::Unchanged { revision: 1, .. }
    ));
    assert_eq!(entries(w.target()), before);
}

#[test]
fn keep_one_removes_old_files() {
    let (_d, w) = setup(1);
    for i in 0..4 {
        w.publish(&bundle(&i.to_string())).unwrap();
    }
    assert_eq!(revisions_on_disk(&w), 1);
    assert!(!w.target().join(HISTORY).exists() || w.history().unwrap().is_empty());
}

#[test]
fn files_that_disappear_lose_their_links() {
    let (_d, w) = setup(3);
    let mut with_ca = bundle("1");
    with_ca.insert(CA_FILE, cert("ca"), "t").unwrap();
    w.publish(&with_ca).unwrap();
    assert_eq!(fs::read(w.target().join(CA_FILE)).unwrap(), cert("ca"));
    let without = bundle("2");
    w.publish(&without).unwrap();
    assert_live(&w, &without);
    assert!(fs::symlink_metadata(w.target().join(CA_FILE)).is_err());
}

#[test]
fn crash_leftovers_are_cleaned_at_open() {
    let (_d, w) = setup(3);
    w.publish(&bundle("1")).unwrap();
    w.publish(&bundle("2")).unwrap();
    let t = w.target().to_owned();
    // A crash mid-write: an unfinished newer revision, temporary links,
    // and an older revision that was never moved to history.
    fs::create_dir(t.join("..rev-000009-00000000")).unwrap();
    fs::write(t.join("..rev-000009-00000000").join(CERT_FILE), b"half").unwrap();
    std::os::unix::fs::symlink("..rev-000009-00000000", t.join("..tmp-data")).unwrap();
    fs::create_dir(t.join("..tmp-stray")).unwrap();
    let old = format!("{REV_PREFIX}{}", rev_name(1, &bundle("1").hash()));
    fs::create_dir(t.join(&old)).unwrap();
    fs::write(t.join(&old).join(CERT_FILE), cert("1")).unwrap();

    let w = Writer::open(&t, WriterOptions::default()).unwrap();
    let names: Vec<_> = entries(&t)
        .into_iter()
        .filter(|n| n.starts_with(".."))
        .collect();
    let live = fs::read_link(t.join(DATA)).unwrap();
    assert_eq!(names, vec![DATA, HISTORY, LOCK, live.to_str().unwrap()]);
    assert_live(&w, &bundle("2"));
    // The next revision continues after the highest number ever seen.
    w.publish(&bundle("3")).unwrap();
    assert!(
        fs::read_link(t.join(DATA))
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("..rev-000003")
    );
}

#[test]
fn drift_is_repaired() {
    type Damage = fn(&Path, &str);
    let cases: Vec<(&str, Damage, bool)> = vec![
        (
            "visible link deleted",
            |t, _| fs::remove_file(t.join(CERT_FILE)).unwrap(),
            false,
        ),
        (
            "visible link replaced by a file",
            |t, _| {
                fs::remove_file(t.join(KEY_FILE)).unwrap();
                fs::write(t.join(KEY_FILE), b"edited").unwrap();
            },
            false,
        ),
        (
            "..data deleted",
            |t, _| fs::remove_file(t.join(DATA)).unwrap(),
            true,
        ),
        (
            "revision file edited",
            |t, live| fs::write(t.join(live).join(CERT_FILE), b"edited").unwrap(),
            true,
        ),
        (
            "revision file deleted",
            |t, live| fs::remove_file(t.join(live).join(KEY_FILE)).unwrap(),
            true,
        ),
        (
            "key mode loosened",
            |t, live| {
                fs::set_permissions(t.join(live).join(KEY_FILE), Permissions::from_mode(0o644))
                    .unwrap()
            },
            true,
        ),
        (
            "revision deleted",
            |t, live| fs::remove_dir_all(t.join(live)).unwrap(),
            true,
        ),
        (
            "..data replaced by a directory",
            |t, _| {
                fs::remove_file(t.join(DATA)).unwrap();
                fs::create_dir(t.join(DATA)).unwrap();
            },
            true,
        ),
    ];
    for (name, damage, new_revision) in cases {
        let (_d, w) = setup(3);
        let b = bundle("good");
        w.publish(&b).unwrap();
        let live = fs::read_link(w.target().join(DATA)).unwrap();
        damage(w.target(), live.to_str().unwrap());
        let out = w.publish(&b).unwrap();
        match out {
            Outcome::Written { revision: 2, .. } => assert!(new_revision, "{name}: {out:?}"),
            Outcome::Unchanged {
                revision: 1,
                repaired_links: 1,
            } => {
                assert!(!new_revision, "{name}: {out:?}")
            }
            other => panic!("{name}: unexpected {other:?}"),
        }
        assert_live(&w, &b);
    }
}

#[test]
fn planted_symlinks_are_not_followed_out_of_the_target() {
    let outside = tempfile::tempdir().unwrap();
    let outside_file = outside.path().join(CERT_FILE);
    fs::write(&outside_file, b"do not touch").unwrap();
    fs::set_permissions(&outside_file, Permissions::from_mode(0o640)).unwrap();

    // `..data` pointing outside the target.
    let (_d, w) = setup(3);
    w.publish(&bundle("1")).unwrap();
    fs::remove_file(w.target().join(DATA)).unwrap();
    std::os::unix::fs::symlink(outside.path(), w.target().join(DATA)).unwrap();
    assert_eq!(w.live().unwrap(), None, "an escaping ..data is not read");
    assert!(matches!(
        w.publish(&bundle("1")).unwrap(),
        Outcome::Written { .. }
    ));
    assert_live(&w, &bundle("1"));

    // The live revision directory replaced by a symlink to outside.
    let live = fs::read_link(w.target().join(DATA)).unwrap();
    fs::remove_dir_all(w.target().join(&live)).unwrap();
    std::os::unix::fs::symlink(outside.path(), w.target().join(&live)).unwrap();
    assert!(w.live().unwrap().unwrap().problem.is_some());
    w.publish(&bundle("1")).unwrap();
    assert_live(&w, &bundle("1"));

    // A file inside the live revision replaced by a symlink to outside.
    let live = fs::read_link(w.target().join(DATA)).unwrap();
    let planted = w.target().join(&live).join(CERT_FILE);
    fs::remove_file(&planted).unwrap();
    std::os::unix::fs::symlink(&outside_file, &planted).unwrap();
    w.publish(&bundle("1")).unwrap();
    assert_live(&w, &bundle("1"));

    // Outside stayed exactly as it was, through rotation and pruning.
    for i in 2..6 {
        w.publish(&bundle(&i.to_string())).unwrap();
    }
    assert_eq!(fs::read(&outside_file).unwrap(), b"do not touch");
    assert_eq!(fs::metadata(&outside_file).unwrap().mode() & 0o777, 0o640);
    assert_eq!(entries(outside.path()), vec![CERT_FILE.to_owned()]);
}

/// Every name certsync owns, planted as a symlink to a victim
/// directory or file (or as a FIFO): rotation and pruning neither
/// follow it nor hang on it, and the victim is untouched.
#[test]
fn planted_owned_names_are_replaced_not_followed() {
    let victim = tempfile::tempdir().unwrap();
    fs::write(victim.path().join(CERT_FILE), b"victim").unwrap();
    let fifo =
        |p: &Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let link = |p: &Path| std::os::unix::fs::symlink(victim.path(), p).unwrap();
    type Plant = fn(&Path, &str, &dyn Fn(&Path), &dyn Fn(&Path));
    let cases: Vec<(&str, Plant)> = vec![
        ("..history -> victim", |t, _, link, _| {
            fs::remove_dir_all(t.join(HISTORY)).unwrap();
            link(&t.join(HISTORY));
        }),
        ("..history/<live> -> victim", |t, live, link, _| {
            link(&t.join(HISTORY).join(live.trim_start_matches(REV_PREFIX)))
        }),
        ("..pin is a FIFO", |t, _, _, fifo| fifo(&t.join(PIN))),
        ("..pin -> victim file", |t, _, _, _| {
            std::os::unix::fs::symlink("/etc/hostname", t.join(PIN)).unwrap()
        }),
        ("..tmp-data.tmp -> victim", |t, _, link, _| {
            link(&t.join(revision::tmp_name(DATA)))
        }),
    ];
    for (name, plant) in cases {
        let (_d, w) = setup(3);
        w.publish(&bundle("1")).unwrap();
        w.publish(&bundle("2")).unwrap();
        let live = fs::read_link(w.target().join(DATA)).unwrap();
        plant(w.target(), live.to_str().unwrap(), &link, &fifo);
        for i in 3..7 {
            w.publish(&bundle(&i.to_string())).unwrap();
            assert_live(&w, &bundle(&i.to_string()));
        }
        assert_eq!(entries(victim.path()), vec![CERT_FILE.to_owned()], "{name}");
        assert_eq!(fs::read(victim.path().join(CERT_FILE)).unwrap(), b"victim");
        assert!(
            fs::symlink_metadata(w.target().join(HISTORY))
                .unwrap()
                .is_dir(),
            "{name}: ..history is a real directory again"
        );
        assert_eq!(
            w.history().unwrap().len(),
            2,
            "{name}: history pruned to keep-1"
        );
    }
}

#[test]
fn writers_are_serialized_by_a_flock_on_the_lock_file() {
    let (_d, w) = setup(3);
    w.publish(&bundle("1")).unwrap();
    // Another writer (`certsync rollback`, another process) holds it.
    let held = Flock::lock(
        File::open(w.target().join(LOCK)).unwrap(),
        FlockArg::LockExclusive,
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = Writer::existing(w.target()).unwrap();
    let t = std::thread::spawn(move || {
        let out = writer.publish(&bundle("2"));
        tx.send(()).unwrap();
        out
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "published while another writer held the lock"
    );
    assert_live(&w, &bundle("1"));
    drop(held);
    rx.recv().unwrap();
    t.join().unwrap().unwrap();
    assert_live(&w, &bundle("2"));
    let m = fs::symlink_metadata(w.target().join(LOCK)).unwrap();
    assert!(m.is_file(), "{m:?}");
    assert_eq!(m.mode() & 0o777, 0o600, "only certsync's user may open it");
    // A flock on the directory (anyone who can read it may take one) no
    // longer stops a writer.
    let dir = Flock::lock(File::open(w.target()).unwrap(), FlockArg::LockExclusive).unwrap();
    w.publish(&bundle("3")).unwrap();
    assert_live(&w, &bundle("3"));
    drop(dir);
}

#[test]
fn a_planted_lock_entry_is_replaced_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("victim"), b"victim").unwrap();
    type Plant<'a> = (&'a str, &'a dyn Fn(&Path));
    let plants: [Plant; 4] = [
        ("a file (an earlier build's)", &|p| {
            fs::write(p, b"").unwrap();
            fs::set_permissions(p, Permissions::from_mode(0o600)).unwrap()
        }),
        ("a symlink to a directory outside", &|p| {
            std::os::unix::fs::symlink(outside.path(), p).unwrap()
        }),
        ("a symlink to a file outside", &|p| {
            std::os::unix::fs::symlink(outside.path().join("victim"), p).unwrap()
        }),
        ("a FIFO", &|p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        }),
    ];
    for (what, plant) in plants {
        let (_d, w) = setup(3);
        w.publish(&bundle("1")).unwrap();
        fs::remove_file(w.target().join(LOCK)).unwrap();
        plant(&w.target().join(LOCK));
        let again = Writer::open(w.target(), WriterOptions::default()).unwrap();
        again.publish(&bundle("2")).unwrap();
        let m = fs::symlink_metadata(again.target().join(LOCK)).unwrap();
        assert!(m.is_file(), "{what}: {m:?}");
        assert_eq!(m.mode() & 0o777, 0o600, "{what}");
        assert_live(&again, &bundle("2"));
        assert_eq!(entries(outside.path()), vec!["victim".to_owned()], "{what}");
        assert_eq!(fs::read(outside.path().join("victim")).unwrap(), b"victim");
    }
}

/// Whoever can open the lock file can hold its flock and stop every
/// write: one that others may open, or that another user owns, is replaced
/// by a private one, and a flock someone took on it while it was open to
/// them stops nothing.
#[test]
fn a_lock_file_others_could_open_is_replaced() {
    let root = nix::unistd::geteuid().is_root();
    for (what, mode, uid) in [
        ("mode 0644", 0o644, None),
        ("mode 0660", 0o660, None),
        ("another user's", 0o600, Some(65534)),
    ] {
        if uid.is_some() && !root {
            continue;
        }
        let (_d, w) = setup(3);
        w.publish(&bundle("1")).unwrap();
        let lock = w.target().join(LOCK);
        fs::set_permissions(&lock, Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&lock, Some(uid), None).unwrap();
        }
        let old = fs::metadata(&lock).unwrap().ino();
        let held = Flock::lock(File::open(&lock).unwrap(), FlockArg::LockExclusive).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = Writer::existing(w.target()).unwrap();
        std::thread::spawn(move || tx.send(writer.publish(&bundle("2")).map(|_| ())));
        let out = rx.recv_timeout(std::time::Duration::from_secs(10));
        drop(held);
        out.expect("waited on a lock file others could open")
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_live(&w, &bundle("2"));
        let m = fs::symlink_metadata(&lock).unwrap();
        assert_ne!(m.ino(), old, "{what}: same file kept");
        assert_eq!(
            (m.mode() & 0o777, m.uid()),
            (0o600, nix::unistd::geteuid().as_raw()),
            "{what}"
        );
    }
}

#[test]
fn files_found_in_a_fresh_target_are_kept_in_history() {
    let (_d, w) = setup(3);
    fs::write(w.target().join(CERT_FILE), b"old cert").unwrap();
    fs::write(w.target().join(KEY_FILE), b"old key").unwrap();
    w.publish(&bundle("1")).unwrap();
    assert_live(&w, &bundle("1"));
    let history = w.history().unwrap();
    let kept = w.target().join(HISTORY).join(&history[&FOUND_REVISION]);
    assert_eq!(fs::read(kept.join(CERT_FILE)).unwrap(), b"old cert");
    assert_eq!(fs::read(kept.join(KEY_FILE)).unwrap(), b"old key");

    let (_d, w) = setup(1);
    fs::write(w.target().join(CERT_FILE), b"old cert").unwrap();
    let e = w.publish(&bundle("1")).unwrap_err().to_string();
    assert!(
        e.contains("did not write") && e.contains("--keep-revisions"),
        "{e}"
    );
    assert_eq!(fs::read(w.target().join(CERT_FILE)).unwrap(), b"old cert");
}

/// The pair found on the first publish (kubeadm's, revision 0) is the way
/// back to what was there before certsync: pruning never removes it.
#[test]
fn the_found_revision_is_never_pruned() {
    let (_d, w) = setup(2);
    fs::write(w.target().join(CERT_FILE), b"old cert").unwrap();
    fs::write(w.target().join(KEY_FILE), b"old key").unwrap();
    for i in 1..=5 {
        w.publish(&bundle(&i.to_string())).unwrap();
    }
    let history = w.history().unwrap();
    assert!(history.contains_key(&FOUND_REVISION), "{history:?}");
    assert_eq!(
        history.keys().copied().collect::<Vec<_>>(),
        vec![FOUND_REVISION, 4],
        "revision 0 kept beside the newest keep - 1"
    );
}

/// A pin on a target whose source issues its own certificates (`ca:`,
/// `csr:`) holds against any issued pair: only its removal releases it.
#[test]
fn a_pin_holds_against_issued_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let w = Writer::open(
        dir.path().join("target"),
        WriterOptions {
            keep: 4,
            issuing: true,
            ..Default::default()
        },
    )
    .unwrap();
    for tag in ["a", "b"] {
        w.publish(&bundle(tag)).unwrap();
    }
    w.rollback(None, |_| Ok(())).unwrap();
    assert_live(&w, &bundle("a"));
    assert!(matches!(
        w.publish(&bundle("new")).unwrap(),
        Outcome::Pinned { .. }
    ));
    assert_live(&w, &bundle("a"));
    assert!(w.pin().is_some());
    fs::remove_file(w.target().join(PIN)).unwrap();
    assert!(matches!(
        w.publish(&bundle("new")).unwrap(),
        Outcome::Written { .. }
    ));
    assert_live(&w, &bundle("new"));
}

#[test]
fn rollback_prunes_nothing_and_a_second_daemon_is_refused() {
    let (_d, w) = setup(10);
    for i in 1..=6 {
        w.publish(&bundle(&i.to_string())).unwrap();
    }
    Writer::existing(w.target())
        .unwrap()
        .rollback(None, |_| Ok(()))
        .unwrap();
    let numbers: Vec<u64> = w.revisions().unwrap().iter().map(|r| r.revision).collect();
    assert_eq!(
        numbers,
        vec![7, 6, 5, 4, 3, 2, 1],
        "nothing pruned by rollback"
    );

    let claim = w.claim().unwrap();
    let e = w.claim().unwrap_err().to_string();
    let me = std::process::id().to_string();
    assert!(
        e.contains("already managed by another certsync") && e.contains(&me),
        "{e}"
    );
    drop(claim);
    w.claim().unwrap();
}

#[test]
fn target_that_is_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("file");
    fs::write(&f, b"x").unwrap();
    let err = Writer::open(&f, WriterOptions::default()).unwrap_err();
    assert!(
        matches!(&err, WriterError::NotADirectory(p) if *p == f),
        "{err}"
    );
}

#[test]
fn modes_ignore_umask_and_owner_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let me = nix::unistd::getuid().as_raw();
    let w = Writer::open(
        dir.path().join("t"),
        WriterOptions {
            cert_mode: 0o640,
            key_mode: 0o400,
            owner: Some(me),
            group: Some(nix::unistd::getgid().as_raw()),
            ..Default::default()
        },
    )
    .unwrap();
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let r = w.publish(&bundle("1"));
    nix::sys::stat::umask(old);
    r.unwrap();
    let t = w.target();
    assert_eq!(
        fs::metadata(t.join(CERT_FILE)).unwrap().mode() & 0o7777,
        0o640
    );
    assert_eq!(
        fs::metadata(t.join(KEY_FILE)).unwrap().mode() & 0o7777,
        0o400
    );
    assert_eq!(fs::metadata(t.join(KEY_FILE)).unwrap().uid(), me);
    // Same content, same modes: nothing to do.
    assert!(matches!(
        w.publish(&bundle("1")).unwrap(),
        Outcome::Unchanged { .. }
    ));
}

/// What kube-apiserver's dynamic certificate loader does: an inotify
/// watch on the `tls.crt` path (landing on the file the symlinks resolve
/// to), re-added after a remove or move. Every flip must reach it, with
/// history kept and without, and a directory watch must see `..data`.
#[test]
fn every_flip_wakes_file_and_directory_watchers() {
    use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
    for keep in [3, 1] {
        let (_d, w) = setup(keep);
        w.publish(&bundle("0")).unwrap();
        let ino = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
        let cert_path = w.target().join(CERT_FILE);
        let mut file_wd = ino.add_watch(&cert_path, F::IN_ALL_EVENTS).unwrap();
        let dir_wd = ino.add_watch(w.target(), F::IN_MOVED_TO).unwrap();
        for i in 1..=5 {
            w.publish(&bundle(&i.to_string())).unwrap();
            let mut events = Vec::new();
            while let Ok(batch) = ino.read_events() {
                events.extend(batch);
            }
            let file_moved = events
                .iter()
                .any(|e| e.wd == file_wd && e.mask.intersects(F::IN_MOVE_SELF | F::IN_DELETE_SELF));
            assert!(
                file_moved,
                "keep={keep} flip {i}: no move/delete on tls.crt: {events:?}"
            );
            let data_flipped = events
                .iter()
                .any(|e| e.wd == dir_wd && e.name.as_deref() == Some(std::ffi::OsStr::new(DATA)));
            assert!(
                data_flipped,
                "keep={keep} flip {i}: no ..data event: {events:?}"
            );
            let _ = ino.rm_watch(file_wd); // may already be gone (IN_IGNORED)
            file_wd = ino.add_watch(&cert_path, F::IN_ALL_EVENTS).unwrap();
            assert_eq!(fs::read(&cert_path).unwrap(), cert(&i.to_string()));
        }
    }
}

/// Why a rollback was refused, once it is known to be one.
fn refusal(r: Result<RolledBack, WriterError>) -> WriterError {
    match r {
        Err(WriterError::Of {
            what: "target",
            problem,
            ..
        }) => *problem,
        other => panic!("not a rollback refusal: {other:?}"),
    }
}

#[test]
fn rollback_restores_history_and_pins_until_the_source_changes() {
    let (_d, w) = setup(4);
    for tag in ["a", "b", "c"] {
        w.publish(&bundle(tag)).unwrap();
    }
    let ok = |_: &Bundle| Ok(());
    let e = refusal(w.rollback(Some(9), ok));
    assert!(matches!(e, WriterError::NotInHistory(9)), "{e}");
    let expired = |_: &Bundle| {
        Err(crate::validate::ValidationError::Expired {
            file: CERT_FILE.into(),
            not_after: 0,
        })
    };
    let e = refusal(w.rollback(None, expired));
    assert!(
        matches!(
            e,
            WriterError::Refused {
                number: 2,
                problem: crate::validate::ValidationError::Expired { .. },
            }
        ),
        "{e}"
    );
    assert_live(&w, &bundle("c"));

    let done = w.rollback(None, ok).unwrap();
    assert_eq!(
        done,
        RolledBack {
            from_history: 2,
            revision: 4
        }
    );
    assert_live(&w, &bundle("b"));
    assert_eq!(
        w.pin(),
        Some((
            bundle("b").hash().to_string(),
            bundle("c").hash().to_string()
        ))
    );

    // The source still offers "c": the rollback holds, and is repaired.
    assert_eq!(
        w.publish(&bundle("c")).unwrap(),
        Outcome::Pinned { revision: 4 }
    );
    let live = fs::read_link(w.target().join(DATA)).unwrap();
    fs::remove_file(w.target().join(live).join(KEY_FILE)).unwrap();
    assert_eq!(
        w.publish(&bundle("c")).unwrap(),
        Outcome::Pinned { revision: 5 }
    );
    assert_live(&w, &bundle("b"));

    // New source content releases the pin.
    assert!(matches!(
        w.publish(&bundle("d")).unwrap(),
        Outcome::Written { revision: 6, .. }
    ));
    assert_live(&w, &bundle("d"));
    assert_eq!(w.pin(), None);
}

#[test]
fn rollback_keeps_the_modes_the_revision_had() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let w = Writer::open(
        &t,
        WriterOptions {
            key_mode: 0o640,
            ..Default::default()
        },
    )
    .unwrap();
    w.publish(&bundle("old")).unwrap();
    let w = Writer::open(&t, WriterOptions::default()).unwrap();
    w.publish(&bundle("new")).unwrap();
    Writer::existing(&t)
        .unwrap()
        .rollback(None, |_| Ok(()))
        .unwrap();
    assert_eq!(fs::read(t.join(KEY_FILE)).unwrap(), b"key old");
    assert_eq!(
        fs::metadata(t.join(KEY_FILE)).unwrap().mode() & 0o777,
        0o640
    );
    let revs = shown_live(&t);
    assert_eq!(revs, vec![(3, true), (2, false), (1, false)]);
}

/// Each revision `revisions` lists in `t`, newest first, and whether it is
/// shown live.
fn shown_live(t: &Path) -> Vec<(u64, bool)> {
    let revs = Writer::existing(t).unwrap().revisions().unwrap();
    revs.iter().map(|r| (r.revision, r.current)).collect()
}

#[test]
fn revision_names_parse() {
    assert_eq!(parse_rev("000042-3f9a1c2e"), Some((42, "3f9a1c2e")));
    assert_eq!(parse_rev("1234567-3f9a1c2e"), Some((1_234_567, "3f9a1c2e")));
    for bad in [
        "42-3f9a1c2e",
        "000042-3F9A1C2E",
        "000042-3f9a1c2",
        "x/000042-3f9a1c2e",
        "000042",
    ] {
        assert_eq!(parse_rev(bad), None, "{bad}");
    }
}

/// Attack: the target path is a symlink (or runs through one) that someone
/// swaps after start, to another directory (a CA's: the overlap checks ran
/// at start). The writer keeps writing where it started or nowhere.
#[test]
fn attack_a_target_symlink_swapped_after_start_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    fs::write(b.join("ca.crt"), "the other CA").unwrap();
    let link = d.path().join("target");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let w = Writer::open(&link, WriterOptions::default()).unwrap();
    w.publish(&bundle("one")).unwrap();

    let swap = d.path().join("swap");
    std::os::unix::fs::symlink(&b, &swap).unwrap();
    fs::rename(&swap, &link).unwrap();
    let err = w.publish(&bundle("two")).unwrap_err();
    assert!(
        matches!(&err, WriterError::Moved { now, .. } if *now == b),
        "{err}"
    );
    assert_eq!(
        entries(&b),
        ["ca.crt"],
        "nothing written into the other directory"
    );
    assert_eq!(fs::read(b.join("ca.crt")).unwrap(), b"the other CA");

    // The link put back: the same directory again, written into.
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&a, &link).unwrap();
    w.publish(&bundle("three")).unwrap();
    assert!(a.join("..data").exists());
    // The directory renamed away and another made where it was (kept
    // apart by the rename, so no inode number is reused): not the target
    // any more (whoever may write the directory above would otherwise
    // have certsync write into their own), nothing written into it.
    fs::rename(&a, d.path().join("a-old")).unwrap();
    fs::create_dir(&a).unwrap();
    let err = w.publish(&bundle("four")).unwrap_err();
    assert!(matches!(err, WriterError::Replaced { .. }), "{err}");
    assert!(entries(&a).is_empty());
}

/// A target renamed away and made again under its name (by hand, or by a user
/// who may write the directory above) is not written into; one that is simply
/// gone is made again by the writer and adopted.
#[test]
fn a_replaced_target_is_refused_a_removed_one_made_again() {
    let (dir, w) = setup(3);
    w.publish(&bundle("a")).unwrap();
    fs::rename(w.target(), dir.path().join("old")).unwrap();
    fs::create_dir(w.target()).unwrap();
    let err = w.publish(&bundle("b")).unwrap_err();
    assert!(
        matches!(&err, WriterError::Replaced { target, .. } if target == w.target()),
        "{err}"
    );
    assert!(entries(w.target()).is_empty());
    // A clone (the daemon's blocking task) shares what was opened.
    assert!(w.clone().publish(&bundle("b")).is_err());
    fs::remove_dir(w.target()).unwrap();
    w.publish(&bundle("b")).unwrap();
    assert_live(&w, &bundle("b"));
    // The one made again is now the target: a replacement of it is refused.
    fs::rename(w.target(), dir.path().join("old2")).unwrap();
    fs::create_dir(w.target()).unwrap();
    assert!(w.publish(&bundle("c")).is_err());
}

#[test]
fn attack_a_history_revision_rewritten_in_place_is_not_restored() {
    // With `owner=` the published files are
    // the consumer's; it kept a handle on the live pair, let it move to
    // history and wrote its own pair through the handle. Rollback read
    // the entry, found one link and one owner, and restored and pinned it.
    let (_d, w) = setup(4);
    w.publish(&bundle("a")).unwrap();
    w.publish(&bundle("b")).unwrap();
    let history = w.target().join(HISTORY);
    let entry = fs::read_dir(&history)
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .expect("revision 1 in history");
    let key = entry.join(KEY_FILE);
    let mut f = fs::OpenOptions::new().write(true).open(&key).unwrap();
    std::io::Write::write_all(&mut f, b"key evil").unwrap();
    drop(f);
    let e = refusal(w.rollback(None, |_| Ok(())));
    assert!(
        matches!(&e, WriterError::RevisionUntrusted {
            problem: RevisionProblem::Changed { path, .. },
            ..
        } if path.starts_with(&entry)),
        "{e}"
    );
    assert_live(&w, &bundle("b"));
    assert_eq!(w.pin(), None);
}

#[test]
fn attack_a_history_revision_owned_by_the_consumer_is_not_restored() {
    // The name's hash is 32 bits, and the
    // consumer (owner=) matched it with bytes after its key's END line,
    // then rewrote a history pair in place. Files that are not certsync's
    // own are not restored, whatever they hold.
    let dir = tempfile::tempdir().unwrap();
    let w = Writer::open(
        dir.path().join("target"),
        WriterOptions {
            owner: Some(65534),
            group: Some(65534),
            ..Default::default()
        },
    )
    .unwrap();
    w.publish(&bundle("a")).unwrap();
    w.publish(&bundle("b")).unwrap();
    let e = refusal(w.rollback(None, |_| Ok(())));
    assert!(
        matches!(
            e,
            WriterError::RevisionUntrusted {
                problem: RevisionProblem::NotCertsyncs { uid: 65534, .. },
                ..
            }
        ),
        "{e}"
    );
    assert_live(&w, &bundle("b"));
    assert_eq!(w.pin(), None);
}

/// A copy pair (`update-pair=`) is refused by the check for what is there,
/// each named by its variant; a leaf pair of certsync's user passes.
#[test]
fn a_copy_pair_is_refused_by_the_check_for_what_is_there() {
    use std::os::unix::fs::PermissionsExt as _;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().canonicalize().unwrap();
    let pair = crate::test_certs::Pair::new("copy");
    let problem = |prefix: &Path| match check_pair(prefix) {
        Err(WriterError::Of {
            what: "update-pair",
            problem,
            ..
        }) => *problem,
        other => panic!("{}: not refused: {other:?}", prefix.display()),
    };
    assert!(matches!(
        problem(Path::new("pki/apiserver")),
        WriterError::NotAbsolute
    ));
    assert!(matches!(problem(&dir.join(".hidden")), WriterError::NoStem));
    std::fs::write(dir.join("sa.key"), &pair.key).unwrap();
    assert!(matches!(
        problem(&dir.join("sa")),
        WriterError::LoneKey { key, .. } if key == "sa.key"
    ));
    std::fs::write(dir.join("ca.crt"), &pair.ca_cert).unwrap();
    assert!(matches!(problem(&dir.join("ca")), WriterError::Ca));
    std::fs::write(
        dir.join("two.crt"),
        [&pair.cert[..], &pair.cert[..]].concat(),
    )
    .unwrap();
    assert!(matches!(
        problem(&dir.join("two")),
        WriterError::NotOneCertificate { cert } if cert == "two.crt"
    ));
    std::fs::write(dir.join("loose.crt"), &pair.cert).unwrap();
    std::fs::set_permissions(dir.join("loose.crt"), Permissions::from_mode(0o666)).unwrap();
    assert!(matches!(
        problem(&dir.join("loose")),
        WriterError::CopyNotOwn { file, mode: 0o666, .. } if file == "loose.crt"
    ));
    std::fs::write(dir.join("ok.crt"), &pair.cert).unwrap();
    std::fs::write(dir.join("ok.key"), &pair.key).unwrap();
    std::fs::set_permissions(dir.join("ok.key"), Permissions::from_mode(0o600)).unwrap();
    check_pair(&dir.join("ok")).expect("a leaf pair");
}

/// The visible names are made before `..data` flips, so no moment (a
/// SIGKILL included) shows a flipped `..data` whose names are missing:
/// a name that cannot be made (a directory planted where `ca.crt`'s link
/// belongs) stops the publish with the live revision still live.
#[test]
fn visible_names_are_made_before_the_flip() {
    let (_d, w) = setup(3);
    let first = bundle("a");
    w.publish(&first).unwrap();
    fs::create_dir(w.target().join(CA_FILE)).unwrap();
    let mut with_ca = bundle("b");
    with_ca.insert(CA_FILE, cert("ca"), "t").unwrap();
    let err = w.publish(&with_ca).unwrap_err();
    assert!(matches!(err, WriterError::Foreign { .. }), "{err:?}");
    assert_live(&w, &first);
    // The new revision was never made live, and none is left behind.
    assert_eq!(revisions_on_disk(&w), 1);
}

/// Every name the bundle accepts (up to 253 characters, a Secret key's
/// limit) is published: its temporary entry fits the file system's 255.
#[test]
fn the_longest_name_the_bundle_accepts_is_published() {
    for len in [245usize, 246, 250, 253] {
        let (_d, w) = setup(3);
        w.publish(&bundle("a")).unwrap();
        let mut b = bundle("b");
        let name = "x".repeat(len);
        b.insert(&name, b"extra".to_vec(), "t").unwrap();
        w.publish(&b)
            .unwrap_or_else(|e| panic!("a name of {len} characters: {e}"));
        assert_eq!(fs::read(w.target().join(&name)).unwrap(), b"extra", "{len}");
    }
}

/// `..data` planted to name a history entry (the target is writable by
/// certsync's container) never makes `revisions` show that entry as live:
/// no entry shown live is itself a sign that the link is not certsync's.
#[test]
fn attack_a_planted_data_link_never_makes_a_history_entry_current() {
    let (dir, w) = setup(3);
    w.publish(&bundle("a")).unwrap();
    w.publish(&bundle("b")).unwrap();
    let t = dir.path().join("target");
    let hist = w.history().unwrap();
    let (_, old) = hist.iter().next().unwrap();
    fs::remove_file(t.join(DATA)).unwrap();
    std::os::unix::fs::symlink(old, t.join(DATA)).unwrap();
    let revs = shown_live(&t);
    assert_eq!(revs, vec![(2, false), (1, false)], "{old}");
}
