//! Each check [`super::walk`] and [`super::Trust`] make, with an input that
//! fails exactly that check.

use std::os::fd::AsFd as _;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

use nix::sys::stat::Mode;

use super::*;

thread_local! {
    /// A step a unit test injects into [`walk`] after it judged the way and
    /// before it opens the last name: a swap there is what an attacker
    /// racing the walk would do.
    pub(crate) static BETWEEN_CHECK_AND_OPEN: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs the step a unit test injected, once ([`walk`] calls it in tests only).
pub(super) fn between_check_and_open() {
    BETWEEN_CHECK_AND_OPEN.with(|h| {
        if let Some(step) = h.borrow_mut().take() {
            step();
        }
    });
}

fn set_mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

fn as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A 0755 directory holding `a/b/c/f` (0600, "judged").
fn tree() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    set_mode(d.path(), 0o755);
    let abc = d.path().join("a/b/c");
    std::fs::create_dir_all(&abc).unwrap();
    std::fs::write(abc.join("f"), "judged").unwrap();
    (d, abc.join("f"))
}

fn nothing(_: &Entry) -> Result<(), PathError> {
    Ok(())
}

fn read(w: &Walked) -> String {
    std::io::read_to_string(w.open_read().unwrap()).unwrap()
}

fn beneath_walk(base: &Path, rel: &str, links: Links) -> Result<Walked, PathError> {
    let held = std::fs::File::open(base).unwrap();
    walk(
        Start::Beneath(held.as_fd(), base),
        Path::new(rel),
        links,
        &mut nothing,
    )
}

#[test]
fn a_plain_path_is_walked_and_read_with_every_directory_judged() {
    let (d, f) = tree();
    let mut seen = Vec::new();
    let w = walk(Start::Path, &f, Links::Refuse, &mut |e| {
        seen.push(e.shown.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!(read(&w), "judged");
    assert_eq!(seen.first().map(PathBuf::as_path), Some(Path::new("/")));
    assert_eq!(seen.last(), Some(&d.path().join("a/b/c")));
    assert_eq!(w.shown, f);
}

#[test]
fn links_refuse_names_a_symlink_at_each_component_the_last_included() {
    for (i, at) in ["a", "a/b", "a/b/c", "a/b/c/f"].into_iter().enumerate() {
        let (d, _) = tree();
        let p = d.path().join(at);
        std::fs::rename(&p, d.path().join(format!("kept{i}"))).unwrap();
        symlink(format!("{}kept{i}", "../".repeat(i)), &p).unwrap();
        match beneath_walk(d.path(), "a/b/c/f", Links::Refuse) {
            Err(PathError::Link { path }) => assert_eq!(path, p),
            other => panic!("{at}: {other:?}"),
        }
        // Followed, the same path reads the same file.
        let w = beneath_walk(d.path(), "a/b/c/f", Links::Follow).unwrap();
        assert_eq!(read(&w), "judged", "{at}");
    }
}

#[test]
fn a_followed_symlink_is_judged_before_it_is_followed() {
    let (d, _) = tree();
    symlink(d.path().join("a/b"), d.path().join("l")).unwrap();
    let link = d.path().join("l");
    let e = walk(Start::Path, &link.join("c/f"), Links::Follow, &mut |e| {
        if e.link {
            Err(PathError::Link {
                path: e.shown.clone(),
            })
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(
        matches!(e, PathError::Link { ref path } if *path == link),
        "{e:?}"
    );
}

#[test]
fn a_refusing_judge_stops_the_walk_at_that_directory() {
    let (d, f) = tree();
    let b = d.path().join("a/b");
    let e = walk(Start::Path, &f, Links::Follow, &mut |e| {
        if e.shown == b {
            Err(PathError::Changeable {
                path: e.shown.clone(),
                uid: e.uid,
                mode: e.mode,
            })
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(
        matches!(e, PathError::Changeable { ref path, .. } if *path == b),
        "{e:?}"
    );
}

/// A directory swapped for a link to another (holding another file)
/// after the way was judged and before the last name is opened: what is
/// read is the file judged, through the held handle, never the other.
#[test]
fn a_directory_swapped_for_a_link_between_check_and_open_is_not_followed() {
    let (d, f) = tree();
    let other = d.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("f"), "other").unwrap();
    let c = d.path().join("a/b/c");
    for links in [Links::Follow, Links::Refuse] {
        let (from, to, old) = (c.clone(), other.clone(), d.path().join("c.old"));
        BETWEEN_CHECK_AND_OPEN.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                std::fs::rename(&from, &old).unwrap();
                symlink(&to, &from).unwrap();
            }))
        });
        let w = walk(Start::Path, &f, links, &mut nothing).unwrap();
        assert!(
            BETWEEN_CHECK_AND_OPEN.with(|h| h.borrow().is_none()),
            "the swap ran"
        );
        assert_eq!(read(&w), "judged");
        std::fs::remove_file(&c).unwrap();
        std::fs::rename(d.path().join("c.old"), &c).unwrap();
    }
}

#[test]
fn a_fifo_a_device_and_a_directory_are_not_opened_for_reading() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("fifo");
    nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
    for (p, what) in [
        (fifo.as_path(), "a FIFO"),
        (Path::new("/dev/null"), "a device"),
        (d.path(), "a directory"),
    ] {
        let w = walk(Start::Path, p, Links::Follow, &mut nothing).unwrap();
        match w.open_read() {
            Err(PathError::NotRegular { what: got, .. }) => assert_eq!(got, what),
            other => panic!("{}: {other:?}", p.display()),
        }
    }
}

#[test]
fn dot_dot_and_absolute_names_may_not_leave_a_beneath_start() {
    let (d, _) = tree();
    let a = d.path().join("a");
    for rel in ["../x", "b/../../x", "/etc/passwd"] {
        let e = beneath_walk(&a, rel, Links::Follow).unwrap_err();
        assert!(matches!(e, PathError::Escapes { .. }), "{rel}: {e:?}");
    }
    // Inside it, `..` is walked from the held directory.
    let w = beneath_walk(&a, "b/c/../c/f", Links::Follow).unwrap();
    assert_eq!(read(&w), "judged");
    // An absolute symlink leads out even to a place inside.
    symlink(a.join("b"), a.join("abs")).unwrap();
    let e = beneath_walk(&a, "abs/c/f", Links::Follow).unwrap_err();
    assert!(
        matches!(
            e,
            PathError::Escapes {
                what: "a symlink",
                ..
            }
        ),
        "{e:?}"
    );
    // A relative one that stays inside is followed.
    symlink("b", a.join("rel")).unwrap();
    assert_eq!(
        read(&beneath_walk(&a, "rel/c/f", Links::Follow).unwrap()),
        "judged"
    );
}

/// A volume start takes an absolute link naming it (as shown, or by its
/// real name when shown through a link) back into it, the rest of the
/// link walked beneath it; a link naming anything else, or leaving it by
/// `..` after naming it, is refused as beneath any start.
#[test]
fn an_absolute_link_naming_a_volume_start_leads_back_into_it() {
    let (d, _) = tree();
    let a = d.path().join("a");
    let alias = d.path().join("alias");
    symlink(&a, &alias).unwrap();
    let volume_walk = |shown: &Path, rel: &str| {
        let held = std::fs::File::open(shown).unwrap();
        walk(
            Start::Volume(held.as_fd(), shown),
            Path::new(rel),
            Links::Follow,
            &mut nothing,
        )
    };
    symlink(a.join("b/c/f"), a.join("by-real-name")).unwrap();
    symlink(alias.join("b/c/f"), a.join("by-shown-name")).unwrap();
    for shown in [&a, &alias] {
        assert_eq!(read(&volume_walk(shown, "by-real-name").unwrap()), "judged");
    }
    assert_eq!(
        read(&volume_walk(&alias, "by-shown-name").unwrap()),
        "judged"
    );
    let escapes = |e: Result<Walked, PathError>| matches!(e, Err(PathError::Escapes { .. }));
    // Named by a spelling that is neither: refused.
    assert!(escapes(volume_walk(&a, "by-shown-name")));
    for (name, target) in [
        ("out", d.path().join("a2")),
        ("up", a.join("../a/b/c/f")),
        ("etc", PathBuf::from("/etc/passwd")),
    ] {
        symlink(&target, a.join(name)).unwrap();
        assert!(escapes(volume_walk(&a, name)), "{target:?}");
    }
    // Beneath a plain start, the same link is refused.
    assert!(escapes(beneath_walk(&a, "by-real-name", Links::Follow)));
}

#[test]
fn attack_a_directory_renamed_mid_walk_does_not_take_dot_dot_out_of_the_start() {
    // `a/b` is moved out of the start (`a`) while the walk is in it, next
    // to a file of the attacker's: `..` from `b` now names `outside`.
    let (d, _) = tree();
    let a = d.path().join("a");
    std::fs::write(a.join("f"), "beneath").unwrap();
    let outside = d.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f"), "outside").unwrap();
    let (from, to) = (a.join("b"), outside.join("b"));
    let mut moved = false;
    let mut move_b = |e: &Entry| {
        if !moved && e.shown.ends_with("b") {
            std::fs::rename(&from, &to).unwrap();
            moved = true;
        }
        Ok(())
    };
    let held = std::fs::File::open(&a).unwrap();
    let w = walk(
        Start::Beneath(held.as_fd(), &a),
        Path::new("b/../f"),
        Links::Follow,
        &mut move_b,
    )
    .unwrap();
    assert!(to.exists(), "the rename ran");
    assert_eq!(read(&w), "beneath");
}

#[test]
fn a_way_deeper_than_max_depth_is_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let mut rel = PathBuf::new();
    for _ in 0..=MAX_DEPTH {
        rel.push("a");
    }
    std::fs::create_dir_all(d.path().join(&rel)).unwrap();
    std::fs::write(d.path().join(&rel).join("f"), "deep").unwrap();
    let e = beneath_walk(d.path(), rel.join("f").to_str().unwrap(), Links::Follow).unwrap_err();
    assert!(matches!(e, PathError::TooDeep { .. }), "{e:?}");
    // The deepest directory itself: MAX_DEPTH entered, walked.
    assert!(beneath_walk(d.path(), rel.to_str().unwrap(), Links::Follow).is_ok());
}

#[test]
fn a_file_on_the_way_and_a_symlink_loop_are_refused() {
    let (d, _) = tree();
    let e = beneath_walk(d.path(), "a/b/c/f/g", Links::Follow).unwrap_err();
    assert!(matches!(e, PathError::NotDir { .. }), "{e:?}");
    symlink("loop", d.path().join("loop")).unwrap();
    let e = beneath_walk(d.path(), "loop/x", Links::Follow).unwrap_err();
    assert!(matches!(e, PathError::Loop { .. }), "{e:?}");
    let e = beneath_walk(d.path(), "none/x", Links::Follow).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
}

fn entry(uid: u32, mode: u32) -> Entry {
    Entry {
        shown: PathBuf::from("/nowhere/x"),
        uid,
        mode,
        link: false,
        read_only: false,
    }
}

#[test]
fn trust_refuses_another_owner_and_group_or_other_write() {
    let me = nix::unistd::geteuid().as_raw();
    let t = Trust::STRICT;
    assert!(t.judge(&entry(0, 0o755)).is_ok());
    assert!(t.judge(&entry(me, 0o700)).is_ok());
    let other = if me == 4242 { 4243 } else { 4242 };
    assert_eq!(
        t.faults(&entry(other, 0o755)),
        Faults {
            owner: true,
            ..Faults::default()
        }
    );
    assert_eq!(
        t.faults(&entry(0, 0o775)),
        Faults {
            group_writable: true,
            ..Faults::default()
        }
    );
    assert_eq!(
        t.faults(&entry(0, 0o757)),
        Faults {
            others_writable: true,
            ..Faults::default()
        }
    );
    assert!(matches!(
        t.judge(&entry(other, 0o755)),
        Err(PathError::Changeable { uid, mode: 0o755, .. }) if uid == other
    ));
    // A symlink: its owner counts, its mode does not.
    let mut link = entry(0, 0o777);
    link.link = true;
    assert!(t.judge(&link).is_ok());
    link.uid = other;
    assert!(matches!(
        t.judge(&link),
        Err(PathError::LinkChangeable { .. })
    ));
}

#[test]
fn each_exception_excuses_only_what_it_names() {
    let other = 4242;
    let strict = Trust::STRICT;
    // Sticky: a root directory only, and only its mode.
    let sticky = Trust {
        sticky_root_ok: true,
        ..strict
    };
    assert!(strict.judge(&entry(0, 0o1777)).is_err());
    assert!(sticky.judge(&entry(0, 0o1777)).is_ok());
    assert!(sticky.judge(&entry(other, 0o1777)).is_err());
    assert!(sticky.judge(&entry(0, 0o0777)).is_err());
    // Writable tolerated: the owner still judged.
    let loose = Trust {
        writable_ok: true,
        ..strict
    };
    assert!(loose.judge(&entry(0, 0o777)).is_ok());
    assert!(loose.judge(&entry(other, 0o755)).is_err());
    // Read-only mount: `Writable` excuses a directory's mode, not its
    // owner nor a symlink's owner; `Everything` excuses all there.
    let mut ro = entry(other, 0o777);
    ro.read_only = true;
    let writable = Trust {
        read_only: ReadOnly::Writable,
        ..strict
    };
    let everything = Trust {
        read_only: ReadOnly::Everything,
        ..strict
    };
    assert!(strict.judge(&ro).is_err());
    assert!(writable.faults(&ro).owner && !writable.faults(&ro).others_writable);
    assert!(everything.judge(&ro).is_ok());
    ro.uid = 0;
    assert!(writable.judge(&ro).is_ok());
    ro.link = true;
    ro.uid = other;
    assert!(writable.judge(&ro).is_err());
    // Owners.
    let file_owner = Trust {
        owners: Owners::RootOr(other),
        ..strict
    };
    assert!(file_owner.judge(&entry(other, 0o755)).is_ok());
    assert!(file_owner.judge(&entry(other + 1, 0o755)).is_err());
    let anyone = Trust {
        owners: Owners::Anyone,
        ..strict
    };
    assert!(anyone.judge(&entry(other, 0o755)).is_ok());
    assert!(anyone.judge(&entry(other, 0o775)).is_err());
    let me = Trust {
        owners: Owners::Me,
        ..strict
    };
    let euid = nix::unistd::geteuid().as_raw();
    assert!(me.judge(&entry(euid, 0o755)).is_ok());
    assert_eq!(me.judge(&entry(0, 0o755)).is_ok(), euid == 0);
}

#[test]
fn a_volume_root_is_a_root_owned_not_sticky_mount_point() {
    let volume = Trust {
        volume_root_ok: true,
        ..Trust::STRICT
    };
    let at = |p: &str, uid, mode| Entry {
        shown: PathBuf::from(p),
        ..entry(uid, mode)
    };
    // `/` is a mount point; a fresh temporary directory is not.
    assert!(volume.judge(&at("/", 0, 0o777)).is_ok());
    assert!(Trust::STRICT.judge(&at("/", 0, 0o777)).is_err());
    assert!(volume.judge(&at("/", 0, 0o1777)).is_err());
    assert!(volume.judge(&at("/", 4242, 0o777)).is_err());
    let d = tempfile::tempdir().unwrap();
    assert!(
        volume
            .judge(&at(d.path().to_str().unwrap(), 0, 0o777))
            .is_err()
    );
}

/// Real owners on disk (root makes another user's entries): the judge a
/// reader passes sees the directory's and the link's own owners.
#[test]
fn another_users_directory_or_symlink_on_the_way_is_refused_by_the_rule() {
    if !as_root() {
        return; // needs root to make another user's entries
    }
    let (d, f) = tree();
    // Only below the test's directory (the way to it passes /tmp).
    let top = d.path().to_owned();
    let judge = |e: &Entry| {
        if e.shown.starts_with(&top) {
            Trust::STRICT.judge(e)?;
        }
        Ok(())
    };
    let b = d.path().join("a/b");
    std::os::unix::fs::lchown(&b, Some(65534), None).unwrap();
    let e = walk(Start::Path, &f, Links::Follow, &mut { judge }).unwrap_err();
    assert!(
        matches!(e, PathError::Changeable { ref path, uid: 65534, .. } if *path == b),
        "{e:?}"
    );
    std::os::unix::fs::lchown(&b, Some(0), None).unwrap();
    set_mode(&b, 0o777);
    let e = walk(Start::Path, &f, Links::Follow, &mut { judge }).unwrap_err();
    assert!(matches!(e, PathError::Changeable { .. }), "{e:?}");
    set_mode(&b, 0o755);
    let link = d.path().join("l");
    symlink(d.path().join("a"), &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), None).unwrap();
    let e = walk(Start::Path, &link.join("b/c/f"), Links::Follow, &mut {
        judge
    })
    .unwrap_err();
    assert!(
        matches!(e, PathError::LinkChangeable { uid: 65534, .. }),
        "{e:?}"
    );
}
