use super::super::revision::tmp_name;
use super::*;
use crate::beneath::PathError;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// A kubeconfig shaped as kubeadm writes `admin.conf`, with a second user
/// (a token) and a second context that must stay as they are.
pub(in crate::writer) const ADMIN_CONF: &str = "\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://192.168.0.10:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
- context:
    cluster: kubernetes
    user: robot
  name: robot@kubernetes
current-context: kubernetes-admin@kubernetes
kind: Config
preferences: {}
users:
- name: kubernetes-admin
  user:
    client-certificate-data: T0xEQ0VSVA==
    client-key-data: T0xES0VZ
- name: robot
  user:
    token: abc
";

pub(in crate::writer) const CERT: &[u8] =
    b"-----BEGIN CERTIFICATE-----\nTkVX\n-----END CERTIFICATE-----\n";
const KEY: &[u8] = b"-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n";

fn write(dir: &Path, text: &str, mode: u32) -> PathBuf {
    let path = dir.join("admin.conf");
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn keys(v: &Value) -> Vec<String> {
    v.as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect()
}

fn b64(b: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(b))
}

#[test]
fn the_current_users_data_is_replaced_and_everything_else_kept() {
    let d = tempfile::tempdir().unwrap();
    let path = write(d.path(), ADMIN_CONF, 0o640);
    // A group other than root's: the new file must keep it.
    std::os::unix::fs::chown(&path, None, Some(4321)).unwrap();
    let inode = fs::metadata(&path).unwrap().ino();

    assert!(update_kubeconfig(&path, CERT, KEY).unwrap().replaced());
    let after: Value = serde_yaml_ng::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let mut want: Value = serde_yaml_ng::from_str(ADMIN_CONF).unwrap();
    let user = want["users"][0]["user"].as_mapping_mut().unwrap();
    user.insert(CERT_DATA.into(), b64(CERT));
    user.insert(KEY_DATA.into(), b64(KEY));
    assert_eq!(after, want);
    // Mapping equality ignores order; the order of keys is kept too.
    assert_eq!(keys(&after), keys(&want));
    assert_eq!(
        keys(&after["users"][0]["user"]),
        [CERT_DATA, KEY_DATA],
        "the fields keep their places"
    );
    assert_eq!(after["users"][1], want["users"][1], "other users untouched");
    assert_eq!(embedded_of(&path).0, CERT);

    let m = fs::metadata(&path).unwrap();
    assert_ne!(m.ino(), inode, "renamed over, not written in place");
    assert_eq!(m.mode() & 0o7777, 0o640);
    assert_eq!((m.uid(), m.gid()), (nix::unistd::geteuid().as_raw(), 4321));
    let names: Vec<_> = fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["admin.conf"], "no temporary file left");

    // Holding the pair already: not written again.
    assert!(!update_kubeconfig(&path, CERT, KEY).unwrap().replaced());
    assert_eq!(fs::metadata(&path).unwrap().ino(), m.ino());
    // A user with no fields yet gets them.
    let bare = ADMIN_CONF.replace(
        "  user:\n    client-certificate-data: T0xEQ0VSVA==\n    client-key-data: T0xES0VZ\n",
        "  user: {}\n",
    );
    let path = write(d.path(), &bare, 0o600);
    assert!(update_kubeconfig(&path, CERT, KEY).unwrap().replaced());
    assert_eq!(embedded_of(&path).0, CERT);
}

#[test]
fn a_crash_leftover_temporary_file_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    let path = write(d.path(), ADMIN_CONF, 0o600);
    // A symlink planted under the temporary name is removed, not followed.
    let elsewhere = d.path().join("elsewhere");
    fs::write(&elsewhere, "keep").unwrap();
    std::os::unix::fs::symlink(&elsewhere, d.path().join(tmp_name("admin.conf"))).unwrap();
    assert!(update_kubeconfig(&path, CERT, KEY).unwrap().replaced());
    assert_eq!(fs::read_to_string(&elsewhere).unwrap(), "keep");
    assert!(!d.path().join(tmp_name("admin.conf")).exists());
}

/// The problem of `check_kubeconfig`'s error for `path`, once it is
/// known to name that path.
fn problem_of(path: &Path) -> WriterError {
    match check_kubeconfig(path).unwrap_err() {
        WriterError::Of {
            what: "update-kubeconfig",
            path: named,
            problem,
        } => {
            assert_eq!(named, path, "names the path");
            *problem
        }
        e => panic!("not a kubeconfig refusal: {e}"),
    }
}

/// `check_kubeconfig`'s problem for `text` in a fresh 0600 file.
fn refusal_of(text: &str) -> WriterError {
    let d = tempfile::tempdir().unwrap();
    let path = write(d.path(), text, 0o600);
    let e = problem_of(&path);
    // And nothing is written on update either.
    assert!(update_kubeconfig(&path, CERT, KEY).is_err());
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
    e
}

/// The field a kubeconfig refusal names as another authentication.
fn auth(e: &WriterError) -> &str {
    match e {
        WriterError::OtherAuth { key, .. } => key,
        e => panic!("not another authentication: {e}"),
    }
}

/// The pair embedded in the kubeconfig at `path`, as `certsync check` reads it.
fn embedded_of(path: &Path) -> (Vec<u8>, Option<Vec<u8>>) {
    embedded_pair(&fs::read_to_string(path).unwrap()).unwrap()
}

fn with_user_field(field: &str) -> String {
    ADMIN_CONF.replace(
        "    client-key-data: T0xES0VZ\n",
        &format!("    client-key-data: T0xES0VZ\n    {field}\n"),
    )
}

#[test]
fn refused_an_absent_file() {
    let d = tempfile::tempdir().unwrap();
    let e = problem_of(&d.path().join("admin.conf"));
    assert!(
        matches!(&e, WriterError::CopyUnreadable { file, problem }
            if file == "admin.conf" && problem.is_not_found()),
        "{e}"
    );
}

#[test]
fn refused_a_symlink_a_fifo_and_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let real = write(d.path(), ADMIN_CONF, 0o600);
    let link = d.path().join("link.conf");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let fifo = d.path().join("fifo.conf");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let sub = d.path().join("dir.conf");
    fs::create_dir(&sub).unwrap();
    for (path, what) in [(link, "a symlink"), (fifo, "a FIFO"), (sub, "a directory")] {
        let e = problem_of(&path);
        assert!(
            matches!(&e, WriterError::CopyUnreadable {
                problem: PathError::NotRegular { what: w, .. }, ..
            } if *w == what),
            "{e}"
        );
        assert!(update_kubeconfig(&path, CERT, KEY).is_err());
    }
    assert_eq!(fs::read_to_string(&real).unwrap(), ADMIN_CONF);
}

#[test]
fn refused_a_file_of_another_user() {
    let d = tempfile::tempdir().unwrap();
    let path = write(d.path(), ADMIN_CONF, 0o600);
    std::os::unix::fs::chown(&path, Some(4321), None).unwrap();
    let e = problem_of(&path);
    assert!(
        matches!(&e, WriterError::CopyNotOwn { uid: 4321, .. }),
        "{e}"
    );
}

#[test]
fn refused_a_file_group_or_others_may_write() {
    for mode in [0o620, 0o602] {
        let d = tempfile::tempdir().unwrap();
        let path = write(d.path(), ADMIN_CONF, mode);
        let e = problem_of(&path);
        assert!(
            matches!(&e, WriterError::CopyNotOwn { mode: m, .. } if *m == mode),
            "{e}"
        );
    }
}

#[test]
fn refused_a_directory_others_may_write_or_an_ancestor_they_could_recreate() {
    let d = tempfile::tempdir().unwrap();
    let open = d.path().join("open");
    fs::create_dir(&open).unwrap();
    let path = write(&open, ADMIN_CONF, 0o600);
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let e = problem_of(&path);
    assert!(
        matches!(&e, WriterError::DirOthersMayChange(PathError::Changeable { path, mode: 0o777, .. }) if *path == open),
        "{e}"
    );
    // Deeper: an ancestor writable by others (sticky, as /tmp).
    fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
    let deep = open.join("etc");
    fs::create_dir(&deep).unwrap();
    let path = write(&deep, ADMIN_CONF, 0o600);
    let e = problem_of(&path);
    assert!(
        matches!(&e, WriterError::DirOthersMayChange(PathError::Changeable { path, mode: 0o1777, .. }) if *path == open),
        "{e}"
    );
}

#[test]
fn refused_without_a_current_context() {
    let e = refusal_of(&ADMIN_CONF.replace("current-context: kubernetes-admin@kubernetes\n", ""));
    assert!(matches!(e, WriterError::NoCurrentContext), "{e}");
}

#[test]
fn refused_when_the_contexts_user_is_absent() {
    let e = refusal_of(&ADMIN_CONF.replace("- name: kubernetes-admin\n", "- name: someone\n"));
    assert!(
        matches!(&e, WriterError::OfUser { user, problem, .. }
            if user == "kubernetes-admin"
                && matches!(&**problem, WriterError::NoEntry { list, name }
                    if list == "users" && name == "kubernetes-admin")),
        "{e}"
    );
    let e = refusal_of(&ADMIN_CONF.replace(
        "current-context: kubernetes-admin@kubernetes",
        "current-context: gone",
    ));
    assert!(
        matches!(&e, WriterError::NoEntry { list, name } if list == "contexts" && name == "gone"),
        "{e}"
    );
}

#[test]
fn refused_a_user_with_a_token() {
    let e = refusal_of(&with_user_field("token: abc"));
    assert_eq!(auth(&e), "token");
    assert!(
        e.to_string()
            .contains("authenticates with a token (token) too"),
        "{e}"
    );
}

#[test]
fn refused_a_user_with_an_exec_plugin() {
    let e = refusal_of(&with_user_field("exec: {command: x}"));
    assert_eq!(auth(&e), "exec");
    assert!(e.to_string().contains("with an exec plugin too"), "{e}");
}

#[test]
fn refused_a_user_with_an_auth_provider() {
    let e = refusal_of(&with_user_field("auth-provider: {name: oidc}"));
    assert_eq!(auth(&e), "auth-provider");
    assert!(e.to_string().contains("with an auth provider too"), "{e}");
}

#[test]
fn refused_a_user_with_a_password() {
    let e = refusal_of(&with_user_field("username: admin"));
    assert_eq!(auth(&e), "username");
    assert!(
        e.to_string().contains("with a password (username) too"),
        "{e}"
    );
}

#[test]
fn refused_a_certificate_given_as_a_file() {
    let e = refusal_of(&with_user_field("client-certificate: /etc/x.crt"));
    assert_eq!(auth(&e), "client-certificate");
    let said = "gives its client certificate as a file (client-certificate)";
    assert!(e.to_string().contains(said), "{e}");
    let e = refusal_of(&with_user_field("client-key: /etc/x.key"));
    assert_eq!(auth(&e), "client-key");
    let said = "gives its client key as a file (client-key); replacing";
    assert!(e.to_string().contains(said), "{e}");
}

#[test]
fn refused_an_unknown_user_field() {
    let e = refusal_of(&with_user_field("impersonate: root"));
    assert_eq!(auth(&e), "impersonate");
    assert!(
        e.to_string()
            .contains("has \"impersonate\", which certsync"),
        "{e}"
    );
}

#[test]
fn refused_a_file_that_does_not_parse() {
    let e = refusal_of("users: [\n");
    assert!(matches!(e, WriterError::NotKubeconfig(_)), "{e}");
    let e = refusal_of("a: &x [1]\nb: *x\n");
    assert!(
        matches!(&e, WriterError::NotKubeconfig(p) if p.contains("alias")),
        "{e}"
    );
}

#[test]
fn refused_a_user_named_twice() {
    let e = refusal_of(&ADMIN_CONF.replace("- name: robot\n", "- name: kubernetes-admin\n"));
    assert!(
        matches!(&e, WriterError::OfUser { problem, .. }
            if matches!(&**problem, WriterError::Twice { .. })),
        "{e}"
    );
}

#[test]
fn errors_never_carry_key_bytes() {
    let d = tempfile::tempdir().unwrap();
    let path = write(d.path(), &with_user_field("token: abc"), 0o600);
    let e = update_kubeconfig(&path, CERT, KEY).unwrap_err().to_string();
    assert!(!e.contains("S0VZ") && !e.contains("PRIVATE"), "{e}");
}

/// The CA data is replaced where it stands, every other byte kept, and
/// only where that is the one value the edit changes.
#[test]
fn ca_data_is_replaced_in_place_or_refused() {
    let ca = |text: &str, cluster| with_ca_data(text, cluster, b"NEW");
    let want = ADMIN_CONF.replace("Q0E=", "TkVX");
    for cluster in [CaCluster::Current, CaCluster::One] {
        assert_eq!(ca(ADMIN_CONF, cluster).unwrap().as_deref(), Some(&*want));
        assert_eq!(ca(&want, cluster).unwrap(), None);
    }
    let refused = |text: &str, cluster| ca(text, cluster).expect_err(text);
    for field in [
        "certificate-authority: /ca.crt",
        "insecure-skip-tls-verify: true",
    ] {
        let text = ADMIN_CONF.replace("    server:", &format!("    {field}\n    server:"));
        let e = refused(&text, CaCluster::Current);
        assert!(matches!(e, WriterError::ClusterNamesCa(_)), "{e}");
    }
    let e = refused(&format!("{ADMIN_CONF}# Q0E=\n"), CaCluster::Current);
    assert!(
        matches!(e, WriterError::NotOnce("certificate-authority-data")),
        "{e}"
    );
    // The value written with an escape, its plain text standing once in a
    // comment: the edit would change the comment, not the field.
    let escaped = ADMIN_CONF.replace("Q0E=", "\"\\x51\\x30E=\"");
    let e = refused(&format!("{escaped}# Q0E=\n"), CaCluster::Current);
    assert!(
        matches!(e, WriterError::NotOnce("certificate-authority-data")),
        "{e}"
    );
    let two = ADMIN_CONF.replace("contexts:", "- cluster: {}\n  name: other\ncontexts:");
    assert_eq!(
        ca(&two, CaCluster::Current).unwrap(),
        Some(two.replace("Q0E=", "TkVX"))
    );
    let e = refused(&two, CaCluster::One);
    assert!(matches!(e, WriterError::Clusters(2)), "{e}");
}
