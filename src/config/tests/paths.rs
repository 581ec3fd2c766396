//! Paths as the kernel resolves them: targets, CA files and copies that meet,
//! and paths others may change, refused.

use super::*;

/// Paths are compared as the kernel resolves them: the same directory
/// spelled differently, through `..` or through a symlink is caught.
#[test]
fn overlaps_are_found_through_spellings_and_symlinks() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().canonicalize().unwrap();
    let src = base.join("src");
    std::fs::create_dir(&src).unwrap();
    std::os::unix::fs::symlink(&src, base.join("alias")).unwrap();
    let b = base.display();
    let own = |c: &ConfigError| matches!(c, ConfigError::SourceAndTarget { other: None, .. });
    let cases: [(Vec<String>, Want); 7] = [
        (vec![format!("dir:{b}/src={b}/src")], &own),
        (vec![format!("dir:{b}/src={b}/src/./")], &own),
        (vec![format!("dir:{b}/src={b}/src/new/../")], &own),
        (vec![format!("dir:{b}/src={b}/alias/out")], &own),
        (vec![format!("dir:{b}/src={b}/new/../src/x")], &own),
        (
            vec![
                format!("dir:{b}/a={b}/t,name=one"),
                format!("dir:{b}/c={b}/./t,name=two"),
            ],
            &|c| matches!(c, ConfigError::Targets { other, same: true, .. } if other == "two"),
        ),
        (
            vec![
                format!("dir:{b}/a={b}/t,name=one"),
                format!("dir:{b}/src={b}/t2,name=two"),
                format!("dir:{b}/e={b}/alias,name=three"),
            ],
            &|c| {
                matches!(c, ConfigError::SourceAndTarget { other: Some(o), dir, .. }
                    if o == "two" && dir.ends_with("src"))
            },
        ),
    ];
    for (specs, want) in cases {
        let mut args = vec![];
        for s in &specs {
            args.push("--sync");
            args.push(s.as_str());
        }
        let (_, c) = conflict(config(&args));
        assert!(want(&c), "{specs:?}: {c}");
    }
    // Among many mappings (one sorted pass, not all pairs): a nesting
    // is found however many siblings sort between the two directories,
    // and sources may share or nest in each other.
    let many = |extra: &[String]| {
        let mut specs: Vec<String> = (0..40)
            .map(|i| format!("dir:{b}/s/{}=/{b}/t/a{i}", i % 3))
            .collect();
        specs.push(format!("dir:{b}/s=/{b}/u"));
        specs.extend_from_slice(extra);
        let args: Vec<&str> = specs.iter().flat_map(|s| ["--sync", s.as_str()]).collect();
        config(&args).map(|c| c.mappings.len())
    };
    assert_eq!(many(&[]).unwrap(), 41);
    let targets = |c: &ConfigError| matches!(c, ConfigError::Targets { same: false, .. });
    let source = |c: &ConfigError| matches!(c, ConfigError::SourceAndTarget { other: Some(_), .. });
    for (extra, want) in [
        (format!("dir:{b}/x={b}/t"), &targets as Want),
        (format!("dir:{b}/x={b}/t/a7/in"), &targets),
        (format!("dir:{b}/t/a39/x={b}/y"), &source),
        (format!("dir:{b}/x={b}/s/2/out"), &source),
    ] {
        let (_, c) = conflict(many(std::slice::from_ref(&extra)));
        assert!(want(&c), "{extra}: {c}");
    }
    // Relative spellings resolve against the working directory.
    assert_eq!(
        resolve_path(Path::new(".")),
        std::env::current_dir().unwrap()
    );
}

/// Attack: a config file with `ca:` mappings in a ConfigMap volume (or a
/// file another user may write) lets whoever edits it have the CA sign
/// any identity (`O=system:masters`, a key readable by any uid). Refused;
/// `--sync` flags and a root-only file on the node are fine.
#[test]
fn attack_ca_mappings_from_a_file_others_may_change_are_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let yaml = "mappings:\n  - source: ca:/etc/kubernetes/pki/ca\n    target: /t/x\n    cn: evil\n    o: [system:masters]\n    usage: [client-auth]\n";
    let load = |file: &Path| config(&["--config", file.to_str().unwrap()]).map(|_| ());
    let problem = |r: Result<(), ConfigError>| match r {
        Err(ConfigError::File { problem, .. }) => *problem,
        other => panic!("not refused for the file: {other:?}"),
    };
    let d = tempfile::tempdir().unwrap();

    let ok = d.path().join("ok");
    std::fs::create_dir(&ok).unwrap();
    std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(ok.join("certsync.yaml"), yaml).unwrap();
    std::fs::set_permissions(
        ok.join("certsync.yaml"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    load(&ok.join("certsync.yaml")).unwrap();

    // kubelet's layout of a ConfigMap volume.
    let vol = d.path().join("vol");
    std::fs::create_dir_all(vol.join("..2026_11_24")).unwrap();
    std::fs::write(vol.join("..2026_11_24/certsync.yaml"), yaml).unwrap();
    std::os::unix::fs::symlink("..2026_11_24", vol.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/certsync.yaml", vol.join("certsync.yaml")).unwrap();
    let e = problem(load(&vol.join("certsync.yaml")));
    assert!(matches!(e, ConfigError::CaInVolume), "{e}");

    let loose = d.path().join("loose");
    std::fs::create_dir(&loose).unwrap();
    std::fs::write(loose.join("certsync.yaml"), yaml).unwrap();
    std::fs::set_permissions(
        loose.join("certsync.yaml"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let e = problem(load(&loose.join("certsync.yaml")));
    // Refused by the reader every config file goes through.
    assert!(
        matches!(
            e,
            ConfigError::Unread(crate::beneath::PathError::FileChangeable { mode: 0o666, .. })
        ),
        "{e:?}"
    );
    std::fs::set_permissions(
        loose.join("certsync.yaml"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = problem(load(&loose.join("certsync.yaml")));
    // The directory on the way, named.
    assert!(
        matches!(
            e,
            ConfigError::Unread(crate::beneath::PathError::Changeable { mode: 0o777, .. })
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("loose") && e.to_string().contains("mode 0777"),
        "{e}"
    );

    // Through a symlink from a root-only place into the volume.
    let etc = d.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    std::os::unix::fs::symlink(vol.join("certsync.yaml"), etc.join("certsync.yaml")).unwrap();
    let e = problem(load(&etc.join("certsync.yaml")));
    assert!(matches!(e, ConfigError::CaInVolume), "{e}");

    // A file of settings alone (owner: who may read the key) goes with a
    // ca: mapping given as a flag.
    let settings = d.path().join("settings");
    std::fs::create_dir_all(settings.join("..2026_11_24")).unwrap();
    std::fs::write(settings.join("..2026_11_24/certsync.yaml"), "owner: 4242\n").unwrap();
    std::os::unix::fs::symlink("..2026_11_24", settings.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/certsync.yaml", settings.join("certsync.yaml")).unwrap();
    let file = settings.join("certsync.yaml");
    let e = problem(
        config(&[
            "--config",
            file.to_str().unwrap(),
            "--sync",
            "ca:/etc/kubernetes/pki/ca=/t/z,cn=a,usage=client-auth",
        ])
        .map(|_| ()),
    );
    assert!(matches!(e, ConfigError::CaInVolume), "{e}");

    // Other kinds from such a file stay fine (their sources are what the
    // cluster says anyway).
    std::fs::write(
        vol.join("..2026_11_24/certsync.yaml"),
        "mappings:\n  - source: secret:ns/tls\n    target: /t/y\n",
    )
    .unwrap();
    load(&vol.join("certsync.yaml")).unwrap();
}

/// `dns=` is held to the rule templates and issued certificates are (no
/// empty label, no address written as a name), and a leaf's usages never
/// include a CA's (keyCertSign, cRLSign): refused at start, for `csr:` and
/// `ca:` alike, not after a request was made.
#[test]
fn dns_names_and_usages_are_checked_as_for_issued_certificates() {
    for (opts, says) in [
        ("dns=a..b", "dns"),
        ("dns=10.96.0.1", "dns"),
        ("dns=svc,usage=cert-sign", "keyCertSign"),
        (
            "dns=svc,usage=digital-signature,usage=crl-sign",
            "keyCertSign",
        ),
    ] {
        for kind in ["csr:example.com/signer", "ca:/pki/ca"] {
            let flag = format!("{kind}=/t/x,{opts},usage=server-auth");
            let e = config(&["--sync", &flag])
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{flag}: {e}");
        }
    }
    config(&[
        "--sync",
        "csr:example.com/signer=/t/x,dns=svc.example,usage=server-auth",
    ])
    .unwrap();
}

/// Attack: a ca: mapping's target, template or CA files reached through a
/// directory another user may change (rename the target away and put a
/// CA's directory in its place; swap a symlink on the way to the CA key;
/// edit the template), or a target with `..` (resolved by the kernel after
/// symlinks, past the overlap checks): refused at start.
#[test]
fn attack_ca_paths_others_may_change_are_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let d = tempfile::tempdir().unwrap();
    let open = d.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let safe = d.path().join("safe");
    std::fs::create_dir(&safe).unwrap();
    let (ca, t, o) = (
        safe.join("ca").display().to_string(),
        safe.join("t").display().to_string(),
        open.display().to_string(),
    );
    let id = "cn=a,usage=digital-signature,usage=client-auth";
    config(&["--sync", &format!("ca:{ca}={t},{id}")]).unwrap();
    // Each refused by the check for its path (`None`: the `..` rule).
    for (flag, what) in [
        (format!("ca:{ca}={o}/t,{id}"), Some("target")),
        (format!("ca:{ca}={t}/../x,{id}"), None),
        (format!("ca:{o}/ca={t},{id}"), Some("CA key")),
        (
            format!("ca:{ca}={t},template={o}/apiserver.crt"),
            Some("template"),
        ),
    ] {
        let problem = match config(&["--sync", &flag]) {
            Err(ConfigError::Mapping { problem, .. }) => problem,
            other => panic!("{flag}: not refused by a guard: {other:?}"),
        };
        match (what, &*problem) {
            (Some(want), ConfigError::Changeable { what, risk, .. }) => {
                assert_eq!(*what, want, "{flag}");
                assert!(risk.contains("what the CA signs"), "{flag}: {problem}");
            }
            (
                None,
                ConfigError::PathOf {
                    option: "target",
                    problem,
                    ..
                },
            ) if matches!(**problem, ConfigError::DotDot) => {}
            _ => panic!("{flag}: {problem}"),
        }
    }
    // allow-loose-ca-key takes the CA's files out of the rule, not the rest.
    config(&["--sync", &format!("ca:{o}/ca={t},{id},allow-loose-ca-key")]).unwrap();
}

#[test]
fn copies_outside_the_targets_are_one_mappings_each_and_in_no_target() {
    let d = tempfile::tempdir().unwrap();
    let b = d.path().canonicalize().unwrap();
    let b = b.display();
    let csr = |name: &str, target: &str, extra: &str| {
        format!("csr:kubernetes.io/kube-apiserver-client={b}/{target},name={name},cn=u{extra}")
    };
    let cases: [([String; 2], Want); 4] = [
        (
            [
                csr("one", "t1", &format!(",update-pair={b}/p")),
                csr("two", "t2", &format!(",update-pair={b}/p")),
            ],
            &|c| matches!(c, ConfigError::PathOf { problem, .. } if matches!(problem.as_ref(), ConfigError::CopyTwice { other, theirs: "update-pair" } if other == "two")),
        ),
        (
            [
                csr("one", "t1", &format!(",update-kubeconfig={b}/p.crt")),
                csr("two", "t2", &format!(",update-pair={b}/p")),
            ],
            &|c| {
                matches!(
                    c,
                    ConfigError::PathOf { option: "update-kubeconfig", problem, .. }
                        if matches!(problem.as_ref(), ConfigError::CopyTwice { theirs: "update-pair", .. })
                )
            },
        ),
        (
            [
                csr("one", "t1", ""),
                csr("two", "t2", &format!(",update-pair={b}/t1/p")),
            ],
            &|c| matches!(c, ConfigError::PathOf { problem, .. } if matches!(problem.as_ref(), ConfigError::InTarget { other, by_inode: false, .. } if other == "one")),
        ),
        (
            [
                csr("one", "t1", ""),
                csr(
                    "two",
                    "t2",
                    &format!(",update-kubeconfig={b}/t1/admin.conf"),
                ),
            ],
            &|c| {
                matches!(c, ConfigError::PathOf { option: "update-kubeconfig", problem, .. }
                    if matches!(problem.as_ref(), ConfigError::InTarget { other, .. } if other == "one"))
            },
        ),
    ];
    for (specs, want) in cases {
        let args: Vec<&str> = specs.iter().flat_map(|s| ["--sync", s.as_str()]).collect();
        let (mapping, c) = conflict(config(&args));
        // Said on the first mapping of the two that meet.
        assert!(want(&c), "{specs:?}: {mapping}: {c}");
    }
    // Attack: a copy written over a CA's own files, directly or through a
    // symlink, or over a target reached through a symlink.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir(d.path().join("pki")).unwrap();
    for f in ["ca.crt", "ca.key"] {
        std::fs::write(d.path().join("pki").join(f), "x").unwrap();
        std::fs::set_permissions(
            d.path().join("pki").join(f),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink(d.path().join("pki"), d.path().join("pki-link")).unwrap();
    std::fs::create_dir(d.path().join("t1")).unwrap();
    std::os::unix::fs::symlink(d.path().join("t1"), d.path().join("t1-link")).unwrap();
    let ca = |extra: &str| format!("ca:{b}/pki/ca={b}/t3,name=three,cn=x,usage=client-auth{extra}");
    let over_ca = |c: &ConfigError| matches!(c, ConfigError::PathOf { problem, .. } if matches!(problem.as_ref(), ConfigError::OverCa { other, by_inode: false, .. } if other == "three"));
    let cases: [(Vec<String>, Want); 5] = [
        (vec![ca(&format!(",update-pair={b}/pki/ca"))], &over_ca),
        (vec![ca(&format!(",update-pair={b}/pki-link/ca"))], &over_ca),
        (
            vec![
                csr("one", "t1", ""),
                csr("two", "t2", &format!(",update-pair={b}/t1-link/p")),
            ],
            &|c| matches!(c, ConfigError::PathOf { problem, .. } if matches!(problem.as_ref(), ConfigError::InTarget { other, by_inode: false, .. } if other == "one")),
        ),
        // The symlink hidden behind a directory that does not exist yet.
        (
            vec![
                csr("one", "t1", ""),
                csr("two", "t2", &format!(",update-pair={b}/t1-link/new/p")),
            ],
            &|c| matches!(c, ConfigError::PathOf { problem, .. } if matches!(problem.as_ref(), ConfigError::InTarget { other, by_inode: false, .. } if other == "one")),
        ),
        (
            vec![csr("one", "t1", &format!(",update-pair={b}/x/../p"))],
            &|c| {
                matches!(
                    c,
                    ConfigError::PathOf { option: "update-pair", problem, .. }
                        if matches!(problem.as_ref(), ConfigError::DotDot)
                )
            },
        ),
    ];
    for (specs, want) in cases {
        let args: Vec<&str> = specs.iter().flat_map(|s| ["--sync", s.as_str()]).collect();
        let (_, c) = conflict(config(&args));
        assert!(want(&c), "{specs:?}: {c}");
    }
}
