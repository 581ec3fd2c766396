use super::mapping::*;
use super::overlap::*;
use super::*;
use crate::bundle::{CA_FILE, CERT_FILE, Item, KEY_FILE, Layout};
use crate::cli::*;
use crate::events::{Kind, ObjectRef};
use crate::source::csr::{CaSource, KeyAlg};
use crate::validate::Expect;
use clap::Parser;
use std::path::Path;

fn run_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
    let cli = Cli::try_parse_from(["certsync", "run"].iter().chain(extra))?;
    let Command::Run(args) = cli.command else {
        panic!("not run")
    };
    Ok(*args)
}

/// `certsync run EXTRA` loaded as `run` loads it (the config file read,
/// flags and environment over it).
fn settings(extra: &[&str]) -> Result<Settings, ConfigError> {
    let argv = ["certsync", "run"].iter().chain(extra).map(Into::into);
    let Parsed { cli, flags } = parse(argv.collect()).unwrap();
    let Command::Run(args) = cli.command else {
        panic!("not run")
    };
    Settings::load(*args, &flags)
}

fn config(extra: &[&str]) -> Result<Config, ConfigError> {
    Config::build(&settings(extra)?)
}

/// What a refusal for paths that meet must be.
type Want<'a> = &'a dyn Fn(&ConfigError) -> bool;

/// The mapping named and the conflict, of a configuration refused for
/// paths that meet.
fn conflict(r: Result<impl std::fmt::Debug, ConfigError>) -> (String, ConfigError) {
    match r {
        Err(ConfigError::Mapping { mapping, problem }) => (mapping, *problem),
        other => panic!("not a conflict: {other:?}"),
    }
}

#[test]
fn flag_forms() {
    let c = config(&[
        "--sync",
        "dir:/etc/kubernetes/pki=/etc/certs/apiserver,cert=apiserver.crt,key=apiserver.key,name=apiserver",
        "--sync",
        "dir:/var/lib/kubelet/pki=/etc/certs/kubelet,combined=kubelet-server-current.pem,key-mode=0640,owner=1000",
    ])
    .unwrap();
    let [api, kubelet] = c.mappings.as_slice() else {
        panic!("two mappings")
    };
    assert_eq!(api.name, "apiserver");
    assert_eq!(api.source, Source::Dir("/etc/kubernetes/pki".into()));
    assert_eq!(
        *api.items,
        [
            Item::new("apiserver.crt", CERT_FILE, true),
            Item::new("apiserver.key", KEY_FILE, true),
            Item::new("ca.crt", CA_FILE, false),
        ]
    );
    assert_eq!(kubelet.name, "/etc/certs/kubelet");
    assert_eq!(
        kubelet.layout,
        Layout::Combined("kubelet-server-current.pem".into())
    );
    assert_eq!(kubelet.writer.key_mode, 0o640);
    assert_eq!(kubelet.writer.owner, Some(1000));
    assert_eq!(kubelet.writer.cert_mode, 0o644);
    assert_eq!(c.run.debounce, Duration::from_secs(2));

    let c = config(&[
        "--sync",
        "secret:openshift-kube-scheduler/kube-scheduler-client-cert-key=/t/client",
        "--sync",
        "configmap:kube-system/ca.bundle=/t/ca,ca-only,ca=ca-bundle.crt",
        "--tls-server-name",
        "api.example",
    ])
    .unwrap();
    assert_eq!(
        c.mappings[0].source,
        Source::Kube(ObjectRef {
            kind: Kind::Secret,
            namespace: "openshift-kube-scheduler".into(),
            name: "kube-scheduler-client-cert-key".into(),
        })
    );
    assert_eq!(
        *c.mappings[1].items,
        [Item::new("ca-bundle.crt", CA_FILE, true)]
    );
    assert_eq!(c.client.tls_server_name.as_deref(), Some("api.example"));
}

#[test]
fn config_file_and_flags_combine() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("certsync.yaml");
    std::fs::write(
        &file,
        "mappings:\n  - source: dir:/src/ca\n    target: /t/ca\n    ca-only: true\n    ca: ca-bundle.crt\n    cert-mode: \"0640\"\n",
    )
    .unwrap();
    let c = config(&[
        "--config",
        file.to_str().unwrap(),
        "--sync",
        "dir:/src/a=/t/a",
    ])
    .unwrap();
    assert_eq!(c.mappings.len(), 2);
    assert_eq!(c.mappings[0].expect, Expect::CaOnly);
    assert_eq!(
        *c.mappings[0].items,
        [Item::new("ca-bundle.crt", CA_FILE, true)]
    );
    assert_eq!(c.mappings[0].writer.cert_mode, 0o640);

    std::fs::write(
        &file,
        "mappings:\n  - source: dir:/a\n    target: /b\n    colour: red\n",
    )
    .unwrap();
    let e = config(&["--config", file.to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("certsync.yaml") && e.contains("colour"), "{e}");
}

/// A csr: mapping reads the same from the config file as from a flag,
/// lists and all.
#[test]
fn csr_mappings_in_either_form() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("certsync.yaml");
    std::fs::write(
        &file,
        "mappings:\n  - source: csr:kubernetes.io/kube-apiserver-client\n    target: /t/a\n    \
         cn: system:kube-scheduler\n    o: [team-a, team-b]\n    dns: [a.example]\n    \
         ip: [\"10.0.0.1\", \"fd00::1\"]\n    key-alg: rsa-3072\n    lifetime: 30d\n    \
         renew: 50%-60%\n    ca: clustertrustbundle\n",
    )
    .unwrap();
    let flag = "csr:kubernetes.io/kube-apiserver-client=/t/b,cn=system:kube-scheduler,\
                o=team-a,o=team-b,dns=a.example,ip=10.0.0.1,ip=fd00::1,key-alg=rsa-3072,\
                lifetime=30d,renew=0.5-0.6,ca=clustertrustbundle";
    let c = config(&["--config", file.to_str().unwrap(), "--sync", flag]).unwrap();
    let [Source::Csr(a), Source::Csr(b)] = [&c.mappings[0].source, &c.mappings[1].source] else {
        panic!("not csr: {:?}", c.mappings)
    };
    assert_eq!(a, b);
    assert_eq!(a.organizations, ["team-a", "team-b"]);
    assert_eq!(a.ips.len(), 2);
    assert_eq!(a.key_alg, KeyAlg::Rsa(3072));
    assert_eq!(
        a.usages,
        ["digital signature", "key encipherment", "client auth"]
    );
    assert_eq!(a.lifetime, Some(Duration::from_secs(30 * 86_400)));
    assert_eq!(a.renew, (0.5, 0.6));
    assert_eq!(
        a.ca,
        Some(CaSource::TrustBundles {
            signer: "kubernetes.io/kube-apiserver-client".into()
        })
    );
    assert_eq!(a.approval_timeout, Duration::from_secs(900));
}

#[test]
fn bad_mappings_are_refused_with_the_reason() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "no mappings"),
        (&["--sync", "dir:/a"], "expected KIND:SOURCE=TARGET"),
        (&["--sync", "dir:/a="], "expected KIND:SOURCE=TARGET"),
        (&["--sync", "/a=/b"], "unknown source kind in \"/a\""),
        (
            &["--sync", "nfs:/a=/b"],
            "unknown source kind in \"nfs:/a\"",
        ),
        (&["--sync", "nfs:/a=/b"], "ca, clustertrustbundle, tree"),
        (&["--sync", "secret:default=/b"], "expected NAMESPACE/NAME"),
        (
            &["--sync", "secret:Default/x=/b"],
            "namespace \"Default\" is not a valid",
        ),
        (
            &["--sync", "configmap:ns/x_y=/b"],
            "name \"x_y\" is not a valid",
        ),
        // Kubernetes' DNS-1123 subdomain: each dot-separated label starts
        // and ends with a letter or digit; no object is named otherwise.
        (
            &["--sync", "secret:ns/a..b=/b"],
            "name \"a..b\" is not a valid",
        ),
        (
            &["--sync", "configmap:ns/a.-b=/b"],
            "name \"a.-b\" is not a valid",
        ),
        (
            &["--sync", "secret:ns/x=/b,combined=c.pem"],
            "dir: sources only",
        ),
        (
            &["--sync", "dir:/a=/b,colour=red"],
            "unknown option \"colour\"",
        ),
        (&["--sync", "dir:/a=/b,cert="], "takes a value"),
        (&["--sync", "dir:/a=/b,cert=../x"], "not allowed"),
        (
            &["--sync", "dir:/a=/b,combined=c.pem,key=k"],
            "combined and key= exclude each other",
        ),
        (
            &["--sync", "dir:/a=/b,ca-only,cert=c"],
            "ca-only and cert= exclude each other",
        ),
        (
            &["--sync", "dir:/a=/b,key-mode=0644"],
            "readable by every user",
        ),
        (
            &["--sync", "dir:/a=/b,key-mode=999"],
            "not an octal file mode",
        ),
        (&["--sync", "dir:/a=/b,owner=root"], "numeric id"),
        (&["--sync", "dir:/a=/b,owner=4294967295"], "real ids"),
        (&["--sync", "dir:/a=/b,cert-mode=4644"], "setuid"),
        (
            &["--sync", "dir:/a=/b,cert-mode=0666"],
            "other than the owner write",
        ),
        (
            &["--sync", "dir:/a=/t", "--sync", "dir:/c=/t/sub"],
            "overlaps",
        ),
        (
            &["--sync", "dir:/a=/t,name=x", "--sync", "dir:/c=/u,name=x"],
            "used twice",
        ),
        (
            &["--sync", "dir:/a=/a/out"],
            "source and target directories overlap",
        ),
        (
            &[
                "--sync",
                "dir:/a=/b,update-kubeconfig=/etc/kubernetes/admin.conf",
            ],
            "update-kubeconfig applies to csr: and ca: sources only",
        ),
        (
            &[
                "--sync",
                "clustertrustbundle:x=/b,update-kubeconfig=/etc/kubernetes/admin.conf",
            ],
            "update-kubeconfig applies to csr: and ca: sources only",
        ),
        (
            &[
                "--sync",
                "csr:kubernetes.io/kube-apiserver-client=/b,cn=u,ca-only,update-kubeconfig=/k",
            ],
            "ca-only does not apply to csr:",
        ),
        (
            &[
                "--sync",
                "csr:kubernetes.io/kube-apiserver-client=/b,cn=u,update-kubeconfig=admin.conf",
            ],
            "give an absolute path",
        ),
        (
            &[
                "--sync",
                "csr:kubernetes.io/kube-apiserver-client=/b,cn=u,update-kubeconfig=/b/k.conf",
            ],
            "is inside the target",
        ),
        (&["--sync", "dir:/a=/b,verify=nohost"], "is not host:port"),
        (&["--sync", "dir:/a=/b,sni=x"], "sni goes with verify="),
        (
            &["--sync", "dir:/a=/b,allow-non-pem"],
            "allow-non-pem goes with files=",
        ),
        (
            &["--sync", "secret:ns/s=/b,optional"],
            "optional goes with files=",
        ),
        (
            &["--sync", "secret:ns/s=/b,files=all,cert=tls.crt"],
            "cert and files= exclude each other",
        ),
        (
            &["--sync", "dir:/a=/b,ca-only,verify=127.0.0.1:1"],
            "not a CA bundle",
        ),
        (
            &["--sync", "dir:/a=/b", "--reload-cmdline", "("],
            "--reload-cmdline",
        ),
        (
            &[
                "--sync",
                "dir:/a=/b",
                "--reload-url",
                "https://example.com/",
                "--reload-insecure-skip-verify",
            ],
            "loopback URLs only",
        ),
    ];
    for (args, want) in cases {
        let e = config(args).unwrap_err().to_string();
        assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
    }
}

/// Numbers, durations, modes and signals that would crash, overflow or
/// endanger the node are refused by the parser, naming the flag.
#[test]
fn unsafe_numbers_modes_and_signals_are_refused() {
    let cases: &[(&[&str], &str)] = &[
        (&["--resync", "0s"], "too short"),
        (&["--watch-timeout", "0s"], "too short"),
        (&["--reload-timeout", "0ms"], "too short"),
        (&["--verify-timeout", "0s"], "too short"),
        (&["--debounce", "500000000years"], "too long"),
        (&["--clock-skew", "2years"], "too long"),
        (&["--resync=-1s"], "--resync"),
        (&["--keep-revisions", "0"], "from 1 to 1000"),
        (
            &["--keep-revisions", "99999999999999999999"],
            "from 1 to 1000",
        ),
        (&["--reload-retries", "1000"], "from 0 to 100"),
        (&["--cert-mode", "0777"], "executable"),
        (&["--cert-mode", "2644"], "setuid"),
        (&["--cert-mode", "0664"], "other than the owner write"),
        (&["--key-mode", "0604"], "readable by every user"),
        (&["--key-mode", "0040"], "owner read"),
        (&["--reload-signal", "KILL"], "cannot be used to reload"),
        (&["--reload-signal", "SIGSTOP"], "cannot be used to reload"),
        (&["--reload-signal", "segv"], "cannot be used to reload"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["--sync", "dir:/a=/b"];
        args.extend_from_slice(extra);
        let e = run_args(&args).unwrap_err().to_string();
        let flag = extra[0].split('=').next().unwrap();
        assert!(e.contains(want) && e.contains(flag), "{extra:?}: {e}");
    }
    for ok in [
        ["--debounce", "0s"],
        ["--reload-signal", "usr2"],
        ["--cert-mode", "0440"],
    ] {
        let mut args = vec!["--sync", "dir:/a=/b"];
        args.extend_from_slice(&ok);
        run_args(&args).unwrap();
    }
}

#[test]
fn one_reload_method_at_most() {
    let e = config(&[
        "--sync",
        "dir:/a=/b",
        "--reload-process",
        "nginx",
        "--reload-url",
        "http://127.0.0.1/",
    ])
    .unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::ReloadMethods {
                first: "reload-process",
                second: "reload-url"
            }
        ),
        "{e}"
    );
    // One way from the config file, another from a flag: refused alike;
    // a pidfile's process may be named.
    let with_pidfile = |yaml: &str| {
        let (_dir, path) = config_file(yaml);
        let pidfile = ["--sync", "dir:/a=/b", "--reload-pidfile", "/run/x.pid"];
        config(&[&["--config", path.as_str()][..], &pidfile].concat())
    };
    let e = with_pidfile("reload-cmdline: nginx\n").unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::ReloadMethods {
                first: "reload-pidfile",
                second: "reload-cmdline"
            }
        ),
        "{e}"
    );
    let c = with_pidfile("reload-process: nginx\n").unwrap();
    assert!(matches!(
        c.reload.method,
        Some(Method::Signal {
            target: crate::reload::pid::Target::Pidfile { name: Some(_), .. },
            ..
        })
    ));
    let c = config(&[
        "--sync",
        "dir:/a=/b",
        "--reload-process",
        "nginx",
        "--reload-signal",
        "usr1",
    ])
    .unwrap();
    assert!(matches!(
        c.reload.method,
        Some(Method::Signal {
            signal: nix::sys::signal::Signal::SIGUSR1,
            ..
        })
    ));
    assert!(
        config(&["--sync", "dir:/a=/b"])
            .unwrap()
            .reload
            .method
            .is_none()
    );
}

#[test]
fn durations_and_octal_modes_parse() {
    // (CERTSYNC_* variables are tested through the binary, in
    // tests/hostdir.rs: setting the environment here would race.)
    let a = run_args(&[
        "--sync",
        "dir:/a=/b",
        "--debounce",
        "250ms",
        "--cert-mode",
        "640",
    ])
    .unwrap();
    assert_eq!(a.debounce, Duration::from_millis(250));
    assert_eq!(a.cert_mode, 0o640);
}

#[test]
fn ca_mappings() {
    let c = config(&[
        "--sync",
        "ca:/etc/kubernetes/pki/ca=/t/apiserver,template=/etc/kubernetes/pki/apiserver.crt,keep-key",
        "--sync",
        "ca:=/t/etcd,cert=/pki/etcd/ca.crt,key=/pki/etcd/ca.key,cn=cp-1,dns=cp-1,ip=127.0.0.1,\
         usage=digital-signature,usage=server-auth,usage=client-auth,lifetime=90d,key-alg=rsa",
    ])
    .unwrap();
    let [api, etcd] = c.mappings.as_slice() else {
        panic!("two mappings")
    };
    let Source::Ca(a) = &api.source else {
        panic!("{:?}", api.source)
    };
    assert_eq!(a.ca_cert, Path::new("/etc/kubernetes/pki/ca.crt"));
    assert_eq!(a.ca_key, Path::new("/etc/kubernetes/pki/ca.key"));
    assert!(a.keep_key && a.key_alg_from_template && !a.allow_loose_ca_key);
    assert_eq!(a.issue.lifetime, Some(Duration::from_secs(365 * 86_400)));
    assert!(a.issue.usages.is_empty() && a.issue.common_name.is_none());
    // cert= and key= name the CA's files; the target's names stay.
    assert_eq!(
        *etcd.items,
        [
            Item::new(CERT_FILE, CERT_FILE, true),
            Item::new(KEY_FILE, KEY_FILE, true),
            Item::new(CA_FILE, CA_FILE, false),
        ]
    );
    let Source::Ca(e) = &etcd.source else {
        panic!()
    };
    assert_eq!(e.ca_key, Path::new("/pki/etcd/ca.key"));
    assert_eq!(e.issue.key_alg, KeyAlg::Rsa(2048));
    assert_eq!(e.issue.lifetime, Some(Duration::from_secs(90 * 86_400)));

    for (flag, want) in [
        ("ca:/pki/ca=/t,cn=x", "needs its usages"),
        ("ca:/pki/ca=/t,usage=server-auth", "needs a subject"),
        ("ca:=/t,cn=x,usage=server-auth", "needs the CA as a prefix"),
        (
            "ca:/pki/ca=/t,cn=x,usage=server-auth,ca=/pki/ca.crt",
            "ca does not apply",
        ),
        (
            "ca:/pki/ca=/t,cn=x,usage=server-auth,approval-timeout=1m",
            "csr: sources only",
        ),
        (
            "csr:example.com/x=/t,cn=x,usage=server-auth,keep-key",
            "ca: sources only",
        ),
        ("dir:/src=/t,template=/a.crt", "ca: sources only"),
        ("dir:/src=/t,cn=x", "csr: and ca: sources only"),
        (
            "ca:/t/pki/ca=/t,cn=x,usage=server-auth",
            "lies in the target",
        ),
    ] {
        let e = config(&["--sync", flag]).unwrap_err().to_string();
        assert!(e.contains(want), "{flag}: {e}");
    }
}

/// `--events` and the Pod: a `ca:` mapping needs POD_NAME and
/// POD_NAMESPACE (refused without, naming both); `dir:` and
/// `clustertrustbundle:` mappings take the
/// Pod only when both are set; names are checked; `--once` and mappings
/// with objects of their own need neither.
#[test]
fn events_pod_for_mappings_without_an_object() {
    let maps = |spec: &str| config(&["--sync", spec]).unwrap().mappings;
    let ca = maps("ca:/pki/ca=/t/ca,cn=x,usage=server-auth");
    let dir = maps("dir:/src=/t/dir");
    let ctb = maps("clustertrustbundle:example.com/s=/t/ctb");
    let secret = maps("secret:ns/tls=/t/secret");
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let both = env(&[
        ("POD_NAME", "certsync-cp1"),
        ("POD_NAMESPACE", "kube-system"),
    ]);
    let pod = Some(crate::events::PodRef {
        namespace: "kube-system".into(),
        name: "certsync-cp1".into(),
    });
    let events_pod = pod::events_pod;
    assert_eq!(events_pod(true, false, &ca, both).unwrap(), pod);
    assert_eq!(events_pod(true, false, &dir, both).unwrap(), pod);
    assert_eq!(events_pod(true, false, &ctb, both).unwrap(), pod);
    for partial in [
        env(&[]),
        env(&[("POD_NAME", "certsync-cp1")]),
        env(&[("POD_NAME", " "), ("POD_NAMESPACE", "kube-system")]),
    ] {
        let e = events_pod(true, false, &ca, partial).unwrap_err();
        assert!(
            matches!(&e, ConfigError::EventsNoPod { mapping } if mapping == "/t/ca"),
            "{e}"
        );
        // The message says how to set both.
        let e = e.to_string();
        assert!(e.contains("POD_NAME") && e.contains("fieldRef"), "{e}");
        assert_eq!(events_pod(true, false, &dir, partial).unwrap(), None);
        assert_eq!(events_pod(true, false, &ctb, partial).unwrap(), None);
    }
    let bad = env(&[
        ("POD_NAME", "certsync-cp1"),
        ("POD_NAMESPACE", "kube/system"),
    ]);
    for m in [&ca, &dir] {
        let e = events_pod(true, false, m, bad).unwrap_err();
        assert!(
            matches!(&e, ConfigError::At { at, problem } if at == "--events: POD_NAMESPACE"
                && matches!(&**problem, ConfigError::Name { value, .. } if value == "kube/system")),
            "{e}"
        );
    }
    assert_eq!(events_pod(false, false, &ca, env(&[])).unwrap(), None);
    assert_eq!(events_pod(true, true, &ca, env(&[])).unwrap(), None);
    assert_eq!(events_pod(true, false, &secret, both).unwrap(), None);
}

/// A config file `text` in a fresh directory, and its path.
fn config_file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("certsync.yaml");
    std::fs::write(&file, text).unwrap();
    let path = file.to_str().unwrap().to_owned();
    (dir, path)
}

/// A flag on the command line wins over the config file's setting; a
/// setting the command line leaves out is the file's, and one neither
/// sets is the flag's default.
#[test]
fn a_flag_overrides_the_config_files_setting() {
    let (_dir, path) = config_file(
        "resync: 5m\nkey-mode: \"0640\"\nreload-header: [\"A: b\"]\nevents: true\n\
         mappings:\n  - source: dir:/a\n    target: /b\n",
    );
    let s = settings(&[
        "--config",
        &path,
        "--resync",
        "7m",
        "--reload-header",
        "C: d",
    ])
    .unwrap();
    assert_eq!(s.args.resync, Duration::from_secs(420));
    assert_eq!(s.args.reload_headers, ["C: d"]);
    assert_eq!(s.args.key_mode, 0o640);
    assert!(s.args.events);
    assert_eq!(s.args.debounce, Duration::from_secs(2));
    let c = Config::build(&s).unwrap();
    assert_eq!(c.run.resync, Duration::from_secs(420));
    assert_eq!(c.mappings[0].writer.key_mode, 0o640);
    let effective = |name: &str| {
        let flag = s.effective.iter().find(|f| f.name == name).unwrap();
        (flag.given, flag.texts.clone())
    };
    assert_eq!(effective("resync"), (true, vec!["7m".to_owned()]));
    assert_eq!(effective("key-mode"), (false, vec!["0640".to_owned()]));
    assert_eq!(effective("debounce"), (false, vec!["2s".to_owned()]));
}

/// A key of the config file that is no setting is refused by its line and
/// name; a value its flag's parser refuses, by its line and key.
#[test]
fn the_config_file_is_refused_by_the_line_of_its_unknown_key_or_bad_value() {
    let problem = |text: &str| {
        let (_dir, path) = config_file(text);
        match settings(&["--config", &path]) {
            Err(ConfigError::File { problem, .. }) => *problem,
            other => panic!("not refused for the file: {other:?}"),
        }
    };
    let e = problem("resync: 5m\nmappings: []\ncolour: red\n");
    assert!(
        matches!(&e, ConfigError::UnknownKey { line: 3, key } if key == "colour"),
        "{e}"
    );
    // What is no setting of the file is unknown there too.
    let e = problem("once: true\n");
    assert!(
        matches!(&e, ConfigError::UnknownKey { line: 1, key } if key == "once"),
        "{e}"
    );
    for (text, line, bad) in [
        ("resync: 5m\nkey-mode: \"0644\"\n", 2, "key-mode"),
        ("debounce: banana\n", 1, "debounce"),
        ("resync: [5m, 6m]\n", 1, "resync"),
        ("events: yes\n", 1, "events"),
        ("keep-revisions: 0\n", 1, "keep-revisions"),
    ] {
        let e = problem(text);
        assert!(
            matches!(&e, ConfigError::Setting { at, .. } if *at == format!("line {line}: {bad}")),
            "{text:?}: {e}"
        );
    }
}

/// Every setting reads the same from the config file as from its flag:
/// one parser for both, and no flag the file cannot hold.
#[test]
fn every_setting_reads_the_same_from_the_config_file_as_from_its_flag() {
    let samples: &[(&str, &[&str])] = &[
        ("once-timeout", &["2m"]),
        ("debounce", &["3s"]),
        ("resync", &["7m"]),
        ("keep-revisions", &["5"]),
        ("cert-mode", &["0640"]),
        ("key-mode", &["0400"]),
        ("owner", &["1000"]),
        ("group", &["2000"]),
        ("clock-skew", &["1m"]),
        ("csr-renew-floor", &["10m"]),
        ("kubeconfig", &["/k"]),
        ("context", &["c"]),
        ("tls-server-name", &["api.example"]),
        ("watch-timeout", &["2m"]),
        ("api-keepalive", &["10s"]),
        ("reload-process", &["nginx"]),
        ("reload-cmdline", &["^x"]),
        ("reload-pidfile", &["/run/x.pid"]),
        ("reload-url", &["http://127.0.0.1/"]),
        ("reload-signal", &["USR1"]),
        ("reload-method", &["PUT"]),
        ("reload-header", &["A: b", "C: d"]),
        ("reload-bearer-token-file", &["/t"]),
        ("reload-ca-file", &["/ca"]),
        ("reload-insecure-skip-verify", &["true"]),
        ("reload-timeout", &["1s"]),
        ("reload-retries", &["5"]),
        ("reload-find-timeout", &["1s"]),
        ("reload-quiet", &["1s"]),
        ("reload-max-delay", &["3s"]),
        ("verify-timeout", &["1s"]),
        ("verify-retries", &["4"]),
        ("admin-addr", &["127.0.0.1:9808"]),
        ("stale-fraction", &["0.5"]),
        ("generation", &["g-1"]),
        ("events", &["true"]),
    ];
    let known = super::settings::run_flags(None).unwrap();
    let names: Vec<&str> = known.iter().map(|f| f.name.as_str()).collect();
    let sampled: Vec<&str> = samples.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, sampled, "a sample for every setting, in order");

    let mut yaml = String::new();
    let mut flags = Vec::new();
    for ((name, values), flag) in samples.iter().zip(&known) {
        let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        yaml.push_str(&format!("{name}: [{}]\n", quoted.join(", ")));
        for v in *values {
            flags.push(match flag.switch {
                true => format!("--{name}"),
                false => format!("--{name}={v}"),
            });
        }
    }
    let (_dir, path) = config_file(&yaml);
    let mut from_file = settings(&["--config", &path]).unwrap().args;
    from_file.config = None;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let from_flags = settings(&flags).unwrap().args;
    assert_eq!(format!("{from_file:?}"), format!("{from_flags:?}"));
    assert_eq!(from_flags.reload_signal, nix::sys::signal::Signal::SIGUSR1);
}

/// Attack: a reload URL's credentials and header values shown by `{:?}` of
/// the configuration that is passed around (a `?config` log field would
/// print them); only `reload`, whose `Debug` hides them, holds them.
#[test]
fn attack_config_debug_never_shows_reload_credentials() {
    let c = config(&[
        "--sync",
        "dir:/src/dbg=/t/dbg",
        "--reload-url",
        "https://admin:pw-hunter2@127.0.0.1:8443/-/reload?token=s3cret",
        "--reload-header",
        "X-Api-Key: topsecret",
    ])
    .expect("a valid configuration");
    let shown = format!("{c:?}");
    for secret in ["pw-hunter2", "s3cret", "topsecret"] {
        assert!(
            !shown.contains(secret),
            "{secret} in Config's Debug:\n{shown}"
        );
    }
    assert!(matches!(c.reload.method, Some(Method::Http(_))), "{shown}");
}

mod paths;

/// The Lease's name and namespace go into the API path of every request the
/// approver makes for it: one with a `/` (from `--lease-namespace`,
/// `--lease-name` or `POD_NAMESPACE`) would address another object.
#[test]
fn attack_a_lease_name_or_namespace_that_is_not_a_kubernetes_name_is_refused() {
    let approve = |extra: &[&str]| {
        let argv = ["certsync", "approve", "--node-cidr", "10.0.0.0/8"];
        match Cli::try_parse_from(argv.iter().chain(extra))
            .unwrap()
            .command
        {
            Command::Approve(a) => a,
            _ => unreachable!(),
        }
    };
    let pod_ns = |ns: &'static str| move |v: &str| (v == "POD_NAMESPACE").then(|| ns.to_owned());
    let refused = |e: ConfigError, flag: &str, bad: &str| {
        matches!(&e, ConfigError::At { at, problem } if *at == flag
            && matches!(&**problem, ConfigError::Name { value, .. } if value == bad))
    };
    let a = approve(&["--lease-namespace", "kube-system/leases/x"]);
    let e = a.config(|_| None).unwrap_err();
    assert!(refused(e, "--lease-namespace", "kube-system/leases/x"));
    let a = approve(&["--lease-name", "x/../y"]);
    let e = a.config(|_| None).unwrap_err();
    assert!(refused(e, "--lease-name", "x/../y"));
    let e = approve(&[]).config(pod_ns("a/b")).unwrap_err();
    assert!(refused(e, "POD_NAMESPACE", "a/b"));
    // The names as Kubernetes makes them pass; without a Lease none is used.
    let ok = approve(&[]).config(pod_ns("kube-system")).unwrap();
    let lease = ok.lease.unwrap();
    assert_eq!(
        (lease.name.as_str(), lease.namespace.as_deref()),
        ("certsync-approver", Some("kube-system"))
    );
    assert!(
        approve(&["--lease-name", ""])
            .config(pod_ns("a/b"))
            .unwrap()
            .lease
            .is_none()
    );
}
