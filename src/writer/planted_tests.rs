//! Entries certsync keeps in a target (`..pin`, `..data`, `..history`, a
//! revision) that are not its own. Where a
//! target is writable by others (refused at start since; an operator's
//! `chmod` later), whoever may write it planted them and certsync obeyed.
//! Each is trusted only when certsync's user owns it and no one else may
//! write it; otherwise removed and made anew, never obeyed. Planted here
//! by the test's own user with a mode others may write (and, as root, by
//! another owner), which is what certsync can tell.

use super::{WriterError, layout::*, publish::*, revision::*, target::*};
use crate::bundle::{Bundle, KEY_FILE};
use crate::writer::RevisionInfo;
use std::fs;
use std::fs::Permissions;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

thread_local! {
    /// A step a test injects into [`history_dir`](super::history) at `at`:
    /// "open", before `..history` is opened; "made", after certsync made
    /// it and before it opens what it made.
    static HISTORY_SWAP: std::cell::RefCell<Option<(&'static str, Step)>> =
        const { std::cell::RefCell::new(None) };
}

type Step = Box<dyn FnOnce()>;

thread_local! {
    /// A name whose open (or look) in a target fails with an errno a test
    /// chose, once, after as many as it skips: certsync at its open-file
    /// limit for a moment.
    static FAILS: std::cell::RefCell<Option<(String, usize, i32)>> =
        const { std::cell::RefCell::new(None) };
}

/// The failure injected for `name` ([`fail_once`]), taken when due;
/// certsync's opens in a target call it in tests only.
pub(super) fn fails(name: &str) -> std::io::Result<()> {
    FAILS.with(|f| {
        let mut f = f.borrow_mut();
        match f.as_mut() {
            Some((n, 0, errno)) if n == name => {
                let e = std::io::Error::from_raw_os_error(*errno);
                *f = None;
                Err(e)
            }
            Some((n, skip, _)) if n == name => {
                *skip -= 1;
                Ok(())
            }
            _ => Ok(()),
        }
    })
}

fn fail_once(name: &str, skip: usize, errno: i32) {
    FAILS.with(|f| *f.borrow_mut() = Some((name.to_owned(), skip, errno)));
}

fn emfile(r: &Result<impl std::fmt::Debug, WriterError>) -> bool {
    let emfile = Some(nix::libc::EMFILE);
    matches!(r, Err(WriterError::Io { source, .. }) if source.raw_os_error() == emfile)
}

/// Runs the step injected at `at`, once (`history_dir` calls it in tests only).
pub(super) fn history_swap(at: &'static str) {
    let step = HISTORY_SWAP.with(|h| h.borrow_mut().take_if(|(when, _)| *when == at));
    if let Some((_, step)) = step {
        step();
    }
}

/// Injects `step` at `at` ([`history_swap`]).
fn swap_at(at: &'static str, step: impl FnOnce() + 'static) {
    HISTORY_SWAP.with(|s| *s.borrow_mut() = Some((at, Box::new(step))));
}

fn bundle(tag: &str) -> Bundle {
    let mut b = Bundle::default();
    b.insert(
        crate::bundle::CERT_FILE,
        crate::test_certs::Pair::new(&format!("planted-{tag}")).cert,
        "t",
    )
    .unwrap();
    b.insert(KEY_FILE, format!("key {tag}").into_bytes(), "t")
        .unwrap();
    b
}

fn setup() -> (tempfile::TempDir, Writer) {
    keeping(4)
}

/// The ways a planted entry differs from certsync's own: writable by
/// others, and (as root) another user's.
fn plantings() -> Vec<(&'static str, u32, Option<u32>)> {
    let mut ways = vec![("others may write it", 0o777, None)];
    if nix::unistd::geteuid().is_root() {
        ways.push(("another user's", 0o755, Some(65534)));
    }
    ways
}

fn plant(path: &Path, mode: u32, owner: Option<u32>) {
    if let Some(uid) = owner {
        std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    }
    if !fs::symlink_metadata(path).unwrap().file_type().is_symlink() {
        fs::set_permissions(path, Permissions::from_mode(mode)).unwrap();
    }
}

/// Asserts revision `number` is listed and each listing of it holds `b`,
/// else says `why` and what is listed under it (directory, file count).
fn assert_holds(w: &Writer, number: u64, b: &Bundle, why: &str) {
    let revs = w.revisions().unwrap();
    let of: Vec<_> = revs.iter().filter(|r| r.revision == number).collect();
    let same = |r: &&RevisionInfo| r.content.as_ref().is_ok_and(|c| c.hash() == b.hash());
    let shown = of
        .iter()
        .map(|r| (&r.dir, r.content.as_ref().map(|c| c.names().count())));
    let shown: Vec<_> = shown.collect();
    assert!(!of.is_empty() && of.iter().all(same), "{why}: {shown:?}");
}

/// A writer keeping `keep` revisions, in a new directory.
fn keeping(keep: usize) -> (tempfile::TempDir, Writer) {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        keep,
        ..Default::default()
    };
    let w = Writer::open(dir.path().join("target"), opts).unwrap();
    (dir, w)
}

/// A target (keep 4) where a, b, c, d and e were published: e is live,
/// revision 5.
fn five_published() -> (tempfile::TempDir, Writer, Bundle) {
    let (d, w) = setup();
    for t in ["a", "b", "c", "d"] {
        w.publish(&bundle(t)).unwrap();
    }
    let e = bundle("e");
    w.publish(&e).unwrap();
    (d, w, e)
}

fn live_name(w: &Writer) -> String {
    fs::read_link(w.target().join(DATA))
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn attack_a_pin_certsync_did_not_write_is_removed_never_obeyed() {
    for (how, mode, owner) in plantings() {
        let (_d, w) = setup();
        let (a, b) = (bundle("a"), bundle("b"));
        w.publish(&a).unwrap();
        // The user's pin: keep `a` while the source offers `b`.
        let pin = w.target().join(PIN);
        fs::write(
            &pin,
            format!("pinned {}\nreplaced {}\n", a.hash(), b.hash()),
        )
        .unwrap();
        plant(&pin, mode & 0o666, owner);
        assert_eq!(w.pin(), None, "{how}: a planted pin is reported as a pin");
        let out = w.publish(&b).unwrap();
        assert!(
            matches!(out, Outcome::Written { .. }),
            "{how}: the planted pin was obeyed: {out:?}"
        );
        assert!(live_name(&w).ends_with(&b.hash().short()), "{how}");
        assert!(!pin.exists(), "{how}: the planted pin stays");
    }
}

#[test]
fn attack_a_live_revision_certsync_did_not_make_is_replaced() {
    for (how, mode, owner) in plantings() {
        let (_d, w) = setup();
        let (a, b) = (bundle("a"), bundle("b"));
        w.publish(&a).unwrap();
        // The user's revision holding `b`, files as certsync writes them,
        // and `..data` pointing at it.
        let name = format!("{REV_PREFIX}{}", rev_name(9, &b.hash()));
        let planted = w.target().join(&name);
        fs::create_dir(&planted).unwrap();
        for (file, bytes) in b.files() {
            fs::write(planted.join(file), bytes).unwrap();
            let m = if file == KEY_FILE { 0o600 } else { 0o644 };
            fs::set_permissions(planted.join(file), Permissions::from_mode(m)).unwrap();
        }
        plant(&planted, mode, owner);
        let tmp = w.target().join("..data-new");
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        fs::rename(&tmp, w.target().join(DATA)).unwrap();
        let out = w.publish(&b).unwrap();
        assert!(
            matches!(out, Outcome::Written { drift: Some(_), .. }),
            "{how}: the planted revision was kept as live: {out:?}"
        );
        assert_ne!(live_name(&w), name, "{how}");
        let m = fs::metadata(w.target().join(live_name(&w))).unwrap();
        assert_eq!(
            (m.uid(), m.mode() & 0o022),
            (nix::unistd::geteuid().as_raw(), 0),
            "{how}"
        );
        // Removed, not kept in history for a rollback.
        assert!(!planted.exists(), "{how}");
        let history = w.history().unwrap();
        assert!(!history.keys().any(|n| *n == 9), "{how}: {history:?}");
    }
}

/// `..history` is judged as opened, never by a look at its name and then
/// an open of that name: a history swapped for a planted one in between
/// would receive the revision moved out of the live view.
#[test]
fn attack_a_history_swapped_between_its_check_and_its_open_is_not_used() {
    for (how, mode, owner) in plantings() {
        let (_d, w) = setup();
        w.publish(&bundle("a")).unwrap();
        w.publish(&bundle("b")).unwrap();
        let history = w.target().join(HISTORY);
        let (h, planted_mode) = (history.clone(), mode);
        swap_at("open", move || {
            fs::rename(&h, h.with_file_name("history-of-certsync")).unwrap();
            fs::create_dir(&h).unwrap();
            plant(&h, planted_mode, owner);
        });
        w.publish(&bundle("c")).unwrap();
        let ran = HISTORY_SWAP.with(|s| s.borrow().is_none());
        assert!(ran, "{how}: the swap did not run");
        let m = fs::metadata(&history).map(|m| (m.uid(), m.mode() & 0o777));
        let ours = (nix::unistd::geteuid().as_raw(), 0o700);
        assert_eq!(m.ok(), Some(ours), "{how}: the planted history was used");
        assert_eq!(w.history().unwrap().len(), 1, "{how}: b's revision is kept");
    }
}

/// What certsync made as `..history` is judged as opened too: one swapped
/// in between the `mkdir` and the open receives nothing.
#[test]
fn attack_a_history_swapped_between_its_creation_and_its_open_is_not_used() {
    for (how, mode, owner) in plantings() {
        let (_d, w) = setup();
        w.publish(&bundle("a")).unwrap();
        let history = w.target().join(HISTORY);
        fs::remove_dir_all(&history).ok();
        let h = history.clone();
        swap_at("made", move || {
            fs::rename(&h, h.with_file_name("made-by-certsync")).unwrap();
            fs::create_dir(&h).unwrap();
            plant(&h, mode, owner);
        });
        let published = w.publish(&bundle("b"));
        let ran = HISTORY_SWAP.with(|s| s.borrow().is_none());
        assert!(ran, "{how}: the swap did not run");
        assert!(
            matches!(published, Err(WriterError::Unowned { .. })),
            "{how}: {published:?}"
        );
        let entries = fs::read_dir(&history).map_or(0, |d| d.count());
        assert_eq!(entries, 0, "{how}: the planted history received a revision");
    }
}

/// A look at `..history`, or at an entry in it, that fails for a reason
/// that says nothing of what is there (EMFILE) is an error: never taken
/// for "not certsync's", which would remove the rollback revisions.
#[test]
fn attack_a_history_that_cannot_be_opened_for_a_moment_is_kept() {
    let (_d, w) = setup();
    for tag in ["a", "b", "c"] {
        w.publish(&bundle(tag)).unwrap();
    }
    let kept = w.history().unwrap();
    assert_eq!(kept.len(), 2);
    let entry = kept.values().next().unwrap().clone();
    for name in [entry, HISTORY.to_owned()] {
        fail_once(&name, 0, nix::libc::EMFILE);
        let opts = WriterOptions {
            keep: 4,
            ..Default::default()
        };
        let opened = Writer::open(w.target(), opts);
        assert!(
            FAILS.with(|f| f.borrow().is_none()),
            "{name}: not looked at"
        );
        assert!(emfile(&opened), "{name}: {:?}", opened.err());
        assert_eq!(w.history().unwrap(), kept, "{name}: history lost");
    }
}

/// The revision `..data` named before a flip that cannot be opened for a
/// moment (EMFILE) is kept where it is, never removed as not certsync's:
/// the next publish moves it into history, where a rollback finds it.
#[test]
fn attack_a_revision_that_cannot_be_opened_for_a_moment_is_not_removed() {
    let (_d, w) = setup();
    let a = bundle("a");
    w.publish(&a).unwrap();
    // Its first open is the look for drift before the write; the second, its retirement.
    fail_once(&live_name(&w), 1, nix::libc::EMFILE);
    let published = w.publish(&bundle("b"));
    assert!(emfile(&published), "{published:?}");
    w.publish(&bundle("c")).unwrap();
    let revisions = w.revisions().unwrap();
    let found = revisions.iter().any(|r| r.hash == a.hash().short());
    assert!(found, "a's revision is lost: {revisions:?}");
}

/// `..data` that cannot be opened for a moment (EMFILE) after the flip is
/// an error, never "no live revision of certsync's": taken for none, tidy
/// moved the revision just made live into history (with one kept, removed
/// it) while the publish said it was written, the consumer's files dangling.
#[test]
fn attack_a_data_link_that_cannot_be_opened_for_a_moment_never_retires_the_live_revision() {
    for keep in [4, 1] {
        let (_d, w) = keeping(keep);
        let b = bundle("b");
        w.publish(&bundle("a")).unwrap();
        let published = w.publish_then(&b, || fail_once(DATA, 0, nix::libc::EMFILE));
        assert!(
            FAILS.with(|f| f.borrow().is_none()),
            "keep {keep}: ..data not looked at"
        );
        assert!(emfile(&published), "keep {keep}: {published:?}");
        let live = fs::read(w.target().join(KEY_FILE));
        assert_eq!(
            live.ok(),
            b.get(KEY_FILE).map(<[u8]>::to_vec),
            "keep {keep}"
        );
        assert_holds(&w, 2, &b, &format!("keep {keep}: b, live, was lost"));
    }
}

/// The live revision that cannot be opened for a moment (EMFILE) at the
/// look for drift is not drift: taken for it, the unchanged content was
/// written again (a reload, a drift Event) and the oldest rollback
/// revision pruned.
#[test]
fn attack_a_live_revision_that_cannot_be_opened_for_a_moment_is_not_drift() {
    let (_d, w) = setup();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(bundle);
    for x in [&a, &b, &c, &d] {
        w.publish(x).unwrap();
    }
    // The same content again: nothing to write.
    assert!(matches!(w.publish(&d), Ok(Outcome::Unchanged { .. })));
    let before = w.revisions().unwrap();
    assert_eq!(before.len(), 4, "{before:?}");
    // The first open of the live revision is the look for drift.
    fail_once(&live_name(&w), 0, nix::libc::EMFILE);
    let published = w.publish(&d);
    assert!(
        FAILS.with(|f| f.borrow().is_none()),
        "the live revision was not looked at"
    );
    let revisions = w.revisions().unwrap();
    let found = revisions.iter().any(|r| r.hash == a.hash().short());
    assert!(found, "a's revision is lost ({published:?}): {revisions:?}");
    assert!(
        emfile(&published) || matches!(published, Ok(Outcome::Unchanged { .. })),
        "an open that failed for a moment was taken for drift: {published:?}"
    );
}

/// A pin that cannot be read for a reason of the process or the volume
/// (EMFILE; EIO of a failing disk, ESTALE or EINTR of a network volume:
/// nothing the pin's writer, certsync, caused) is an error, never taken for
/// "no pin" or "not certsync's": the publish of the content it replaced
/// would undo the operator's rollback.
#[test]
fn attack_a_pin_that_cannot_be_read_for_a_moment_is_not_taken_for_none() {
    use nix::libc::{EINTR, EIO, EMFILE, ESTALE};
    for errno in [EMFILE, EIO, ESTALE, EINTR] {
        let (_d, w) = setup();
        let (a, b) = (bundle("a"), bundle("b"));
        w.publish(&a).unwrap();
        w.publish(&b).unwrap();
        w.rollback(None, |_| Ok(())).unwrap();
        assert!(live_name(&w).ends_with(&a.hash().short()));
        fail_once(PIN, 0, errno);
        let published = w.publish(&b);
        assert!(FAILS.with(|f| f.borrow().is_none()), "the pin was not read");
        assert!(published.is_err(), "{errno}: {published:?}");
        assert!(
            w.target().join(PIN).exists(),
            "{errno}: the pin was removed"
        );
        let live = live_name(&w);
        assert!(
            live.ends_with(&a.hash().short()),
            "{errno}: rollback undone: {live}"
        );
    }
}

/// What says something of the file, not of the process (EWOULDBLOCK: a
/// write lease its owner holds, root's open included; EACCES: another
/// user's 0600 file, for a certsync that is not root) makes a `..pin`
/// not certsync's own: removed, never obeyed, never a stop of every
/// publish for as long as its planter keeps the lease.
#[test]
fn attack_a_pin_that_cannot_be_opened_is_not_certsyncs() {
    for errno in [nix::libc::EWOULDBLOCK, nix::libc::EACCES] {
        let (_d, w) = setup();
        let (a, b) = (bundle("a"), bundle("b"));
        w.publish(&a).unwrap();
        let pin = w.target().join(PIN);
        fs::write(
            &pin,
            format!("pinned {}\nreplaced {}\n", a.hash(), b.hash()),
        )
        .unwrap();
        fail_once(PIN, 0, errno);
        let out = w.publish(&b);
        assert!(
            matches!(out, Ok(Outcome::Written { .. })),
            "{errno}: {out:?}"
        );
        assert!(!pin.exists(), "{errno}: the pin stays");
    }
}

/// A revision file whose open fails for a reason of the file's (a lease
/// its owner holds: with `owner=` the consumer's on its own key; a found
/// file a planter left) is an unreadable revision: the live one is drift,
/// written anew, a listed one is shown unreadable. Only a failure of the
/// process (EMFILE) stops the look.
#[test]
fn attack_a_revision_file_that_cannot_be_opened_is_unreadable_not_a_stop() {
    let (_d, w) = setup();
    let (a, b) = (bundle("a"), bundle("b"));
    w.publish(&a).unwrap();
    fail_once(KEY_FILE, 0, nix::libc::EWOULDBLOCK);
    let live = w.live().unwrap().unwrap();
    assert!(live.problem.is_some(), "{live:?}");
    fail_once(KEY_FILE, 0, nix::libc::EWOULDBLOCK);
    let out = w.publish(&b);
    assert!(
        matches!(out, Ok(Outcome::Written { drift: Some(_), .. })),
        "{out:?}"
    );
    // Listed newest first: the live revision's key is read first, a's second.
    fail_once(KEY_FILE, 1, nix::libc::EACCES);
    let listed = w.revisions().unwrap();
    let of_a = listed.iter().find(|r| r.hash == a.hash().short()).unwrap();
    assert!(of_a.content.is_err(), "{listed:?}");
    fail_once(KEY_FILE, 1, nix::libc::EMFILE);
    assert!(emfile(&w.revisions()));
}

/// `..lock` that cannot be opened for a reason of the process or the
/// volume (EMFILE, EIO, ESTALE, EINTR: only certsync's user may open it)
/// is an error, never taken for "not a private lock file" and removed:
/// another writer holding its flock would then write beside the next one.
#[test]
fn attack_a_held_lock_file_that_cannot_be_opened_for_a_moment_is_not_removed() {
    use nix::libc::{EINTR, EIO, EMFILE, ESTALE};
    for errno in [EMFILE, EIO, ESTALE, EINTR] {
        let dir = tempfile::tempdir().unwrap();
        let opts = WriterOptions {
            keep: 4,
            lock_timeout: Some(std::time::Duration::from_millis(200)),
            ..Default::default()
        };
        let w = Writer::open(dir.path().join("target"), opts).unwrap();
        w.publish(&bundle("a")).unwrap();
        let lock = w.target().join(LOCK);
        let held = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&lock)
            .unwrap();
        let _held = nix::fcntl::Flock::lock(held, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        let ino = fs::metadata(&lock).unwrap().ino();
        fail_once(LOCK, 0, errno);
        let published = w.publish(&bundle("b"));
        assert!(published.is_err(), "{errno}: {published:?}");
        let now = fs::symlink_metadata(&lock).map(|m| m.ino()).ok();
        assert_eq!(now, Some(ino), "{errno}: the held lock file was removed");
    }
}

/// A root-level `..rev-` name planted while the target was writable (any
/// kind of entry) counts for nothing in the number of the next revision:
/// at the top of the range one past it overflowed (a panic in a debug
/// build; revision 0 in a release one, where tidy removed the revision just
/// replaced), and 18 nines made the next name one certsync could not parse
/// (its own live revision taken for none, written again, never retired).
#[test]
fn attack_a_planted_revision_number_is_not_counted() {
    for name in ["18446744073709551615", "999999999999999999"] {
        let (_d, w) = setup();
        let (a, b) = (bundle("a"), bundle("b"));
        w.publish(&a).unwrap();
        fs::write(w.target().join(format!("{REV_PREFIX}{name}-deadbeef")), "x").unwrap();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.publish(&b)));
        assert!(
            matches!(out, Ok(Ok(Outcome::Written { revision: 2, .. }))),
            "{out:?}"
        );
        let live = w.live().unwrap();
        assert!(
            live.is_some_and(|l| l.problem.is_none() && l.hash == b.hash()),
            "{name}"
        );
        assert!(
            matches!(w.publish(&b), Ok(Outcome::Unchanged { .. })),
            "{name}"
        );
    }
}

/// A planted `..rev-` directory whose number has more digits than certsync
/// writes (`..rev-0000000000000000001-…`) or does not fit a u64 is under
/// certsync's reserved prefix and not its own: removed at the next write,
/// never left in a target its planter may still write into.
#[test]
fn attack_a_planted_revision_with_a_long_number_is_removed() {
    let numbers = ["0000000000000000001", "99999999999999999999"];
    for ((why, mode, owner), number) in plantings()
        .into_iter()
        .flat_map(|p| numbers.map(|n| (p, n)))
    {
        let (_d, w) = setup();
        w.publish(&bundle("a")).unwrap();
        let planted = w.target().join(format!("{REV_PREFIX}{number}-deadbeef"));
        fs::create_dir(&planted).unwrap();
        fs::write(planted.join(KEY_FILE), "planted").unwrap();
        plant(&planted, mode, owner);
        let out = w.publish(&bundle("b")).unwrap();
        assert!(
            matches!(out, Outcome::Written { .. }),
            "{why} {number}: {out:?}"
        );
        let stays = fs::symlink_metadata(&planted).is_ok();
        assert!(!stays, "{why} {number}: the planted directory stays");
    }
}

/// A planted `..history` holding a chain of directories deeper than any
/// certsync makes is refused by name, never removed by a recursion
/// without bound (cap-std's overflowed the stack at a few thousand levels
/// and aborted the daemon at every publish); what certsync removes level
/// by level is removed whole.
#[test]
fn attack_a_planted_history_too_deep_to_remove_is_refused_not_a_crash() {
    let (_d, w) = setup();
    w.publish(&bundle("a")).unwrap();
    let history = w.target().join(HISTORY);
    fs::remove_dir_all(&history).ok();
    let deep = |levels: usize| {
        let mut p = history.clone();
        for _ in 0..levels {
            p.push("d");
        }
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("f"), "x").unwrap();
        plant(&history, 0o777, None);
    };
    deep(crate::beneath::MAX_DEPTH + 1);
    let refused = w.publish(&bundle("b"));
    assert!(
        matches!(&refused, Err(WriterError::Foreign { path, .. }) if path.ends_with("d")),
        "{refused:?}"
    );
    // Within the bound: removed whole and made certsync's own.
    fs::remove_dir_all(&history).unwrap();
    deep(crate::beneath::MAX_DEPTH - 1);
    w.publish(&bundle("c")).unwrap();
    let m = fs::metadata(&history).unwrap();
    assert_eq!(
        (m.uid(), m.mode() & 0o777),
        (nix::unistd::geteuid().as_raw(), 0o700)
    );
    assert!(!history.join("d").exists(), "the planted tree stays");
}

#[test]
fn attack_a_history_certsync_did_not_make_is_neither_read_nor_restored() {
    for (how, mode, owner) in plantings() {
        let (_d, w) = setup();
        let (a, b) = (bundle("a"), bundle("b"));
        w.publish(&a).unwrap();
        w.publish(&b).unwrap();
        // The user's `..history` in place of certsync's, holding a copy of
        // what certsync would restore (root's files, one link each, in the
        // attacker's report) under a name that matches.
        let history = w.target().join(HISTORY);
        fs::remove_dir_all(&history).unwrap();
        fs::create_dir(&history).unwrap();
        let entry = history.join(rev_name(7, &a.hash()));
        fs::create_dir(&entry).unwrap();
        for (file, bytes) in a.files() {
            fs::write(entry.join(file), bytes).unwrap();
        }
        plant(&history, mode, owner);
        let listed = w.revisions().unwrap();
        assert!(
            listed.iter().all(|r| r.revision != 7 || r.content.is_err()),
            "{how}: a planted history entry was read"
        );
        let rolled = w.rollback(Some(7), |_| Ok(()));
        assert!(rolled.is_err(), "{how}: restored from a planted history");
        assert!(live_name(&w).ends_with(&b.hash().short()), "{how}");
        assert_eq!(w.pin(), None, "{how}");
        // The daemon's next write removes it and keeps its own anew.
        w.publish(&a).unwrap();
        let m = fs::metadata(&history).unwrap();
        assert_eq!(
            (m.uid(), m.mode() & 0o022),
            (nix::unistd::geteuid().as_raw(), 0),
            "{how}"
        );
        assert!(!entry.exists(), "{how}: the planted entry stays");

        // An entry others may write inside certsync's own history.
        let own = fs::read_dir(&history)
            .unwrap()
            .map(|e| e.unwrap().path())
            .next()
            .unwrap();
        plant(&own, mode, owner);
        let number = w.history().unwrap().into_keys().next().unwrap();
        assert!(
            w.rollback(Some(number), |_| Ok(())).is_err(),
            "{how}: restored from a planted history entry"
        );
    }
}

/// The target itself made writable by others after start (start refuses
/// one that already is): root's `chmod g+w`, `o+w`, a sticky 1777, or (as
/// root) a `chown` to another user. Whoever may write it now may plant
/// what the entries above show, swap a revision between its write and
/// the flip, or rename the target away: each publish judges the opened
/// handle again and is refused, naming the target, its owner and mode;
/// the last good files stay live; once the mode is put back it publishes.
#[test]
fn attack_a_target_made_writable_after_start_is_never_published_into() {
    let mut ways = vec![(0o775, None), (0o757, None), (0o1777, None)];
    if nix::unistd::geteuid().is_root() {
        ways.push((0o755, Some(65534)));
    }
    for (mode, owner) in ways {
        let (_d, w) = setup();
        let (a, b) = (bundle("a"), bundle("b"));
        w.publish(&a).unwrap();
        let live = live_name(&w);
        fs::set_permissions(w.target(), Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(w.target(), Some(uid), None).unwrap();
        }
        let before: Vec<_> = fs::read_dir(w.target())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        let e = w
            .publish(&b)
            .expect_err(&format!("{mode:04o} {owner:?}: published into it"))
            .to_string();
        assert!(
            e.contains(&w.target().display().to_string())
                && e.contains(&format!("mode {mode:04o}"))
                && e.contains("other than root"),
            "{e}"
        );
        assert_eq!(live_name(&w), live, "{mode:04o}: the last good files stay");
        let after: Vec<_> = fs::read_dir(w.target())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(before, after, "{mode:04o}: nothing written");
        if owner.is_some() {
            std::os::unix::fs::chown(w.target(), Some(0), None).unwrap();
        }
        fs::set_permissions(w.target(), Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(w.publish(&b).unwrap(), Outcome::Written { .. }));
    }
}

mod numbers_tests;
