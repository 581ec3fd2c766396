//! Kubeconfigs read as every file certsync is handed and what they name
//! judged (files put inline, token files checked, `exec` plugins held to
//! what only root may change); merging, contexts and auth are kube's.

use std::path::PathBuf;

use kube::config::Kubeconfig;

use super::error::ClientError;

/// Kubeconfigs with embedded certificates are a few KiB; 4 MiB is generous.
pub(super) const KUBECONFIG_LIMIT: u64 = 4 << 20;

/// A kubeconfig judged as the API client reads it (at start).
pub fn check_kubeconfig(path: &std::path::Path) -> Result<(), ClientError> {
    read_kubeconfigs(&[path.to_owned()], false).map(drop)
}

/// Kubeconfig files merged as kubectl merges `KUBECONFIG`, each file's
/// relative paths against its own directory. With `listed`, missing files
/// are skipped, unless every one is missing. Also the paths read.
pub(super) fn read_kubeconfigs(
    paths: &[PathBuf],
    listed: bool,
) -> Result<(Kubeconfig, String), ClientError> {
    let all = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let mut merged = Kubeconfig::default();
    let mut read = Vec::new();
    for path in paths {
        let err = |problem| ClientError::Kubeconfig {
            path: path.display().to_string(),
            problem: Box::new(problem),
        };
        let text = match crate::files::read_steering(path, KUBECONFIG_LIMIT)
            .map_err(ClientError::Unreadable)
            .and_then(|b| String::from_utf8(b).map_err(|_| ClientError::NotUtf8))
        {
            Ok(text) => text,
            Err(e) if listed && !path.exists() => {
                tracing::debug!(path = %path.display(), error = %e, "KUBECONFIG path skipped: no such file");
                continue;
            }
            Err(e) => return Err(err(e)),
        };
        let mut kc = parse_kubeconfig(&text).map_err(err)?;
        let dir = path.parent().unwrap_or(std::path::Path::new(""));
        inline_files(&mut kc, dir).map_err(err)?;
        merged = merged.merge(kc).map_err(|e| err(ClientError::Kube(e)))?;
        read.push(path.display().to_string());
    }
    if read.is_empty() {
        return Err(ClientError::Kubeconfig {
            path: all,
            problem: Box::new(ClientError::NoFile),
        });
    }
    Ok((merged, read.join(":")))
}

/// The CA, client certificate and key files a kubeconfig names, read by
/// [`crate::files::read_steering`] and put inline, so kube never opens them
/// (its read follows any FIFO or device, uncapped). Token files stay files
/// (kube re-reads them as they rotate) but are checked the same way at
/// start. Relative names are resolved against `dir`, the kubeconfig's.
fn inline_files(kc: &mut Kubeconfig, dir: &std::path::Path) -> Result<(), ClientError> {
    use base64::Engine as _;
    let beside = |p: &str| dir.join(p).to_string_lossy().into_owned();
    let check = |p: &str| {
        crate::files::read_steering(std::path::Path::new(p), KUBECONFIG_LIMIT).map_err(|problem| {
            ClientError::Named {
                path: p.into(),
                problem,
            }
        })
    };
    let read = |path: &Option<String>| -> Result<Option<String>, ClientError> {
        let encode = |b: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(b);
        path.as_deref()
            .map(|p| check(&beside(p)).map(encode))
            .transpose()
    };
    for cluster in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        if cluster.certificate_authority_data.is_none() {
            cluster.certificate_authority_data = read(&cluster.certificate_authority)?;
        }
        cluster.certificate_authority = None;
    }
    for user in kc
        .auth_infos
        .iter_mut()
        .filter_map(|u| u.auth_info.as_mut())
    {
        if user.client_certificate_data.is_none() {
            user.client_certificate_data = read(&user.client_certificate)?;
        }
        user.client_certificate = None;
        if user.client_key_data.is_none() {
            user.client_key_data = read(&user.client_key)?.map(secrecy::SecretString::from);
        }
        user.client_key = None;
        if let Some(token_file) = user.token_file.as_mut() {
            *token_file = beside(token_file);
            check(token_file)?;
        }
        if let Some(exec) = user.exec.as_mut()
            && let Some(command) = exec.command.as_mut()
        {
            // A command is a file beside the kubeconfig only when it holds
            // a separator; a bare name is looked up in PATH.
            if command.contains(std::path::MAIN_SEPARATOR) {
                *command = beside(command);
            }
            if nix::unistd::geteuid().is_root() {
                let path = exec
                    .env
                    .iter()
                    .flatten()
                    .find(|e| e.get("name").map(String::as_str) == Some("PATH"))
                    .and_then(|e| e.get("value").cloned())
                    .or_else(|| std::env::var("PATH").ok())
                    .unwrap_or_default();
                *command = root_may_run(command, &path)?;
            }
        }
    }
    Ok(())
}

/// The program an `exec` credential plugin names, found as `execvp` finds
/// it (only `path`'s absolute entries) and held to
/// [`crate::files::only_root_may_change`], so root never runs what another
/// user wrote or can swap in. Returned absolute, so no later `PATH` search
/// runs something else.
fn root_may_run(command: &str, path: &str) -> Result<String, ClientError> {
    use std::os::unix::fs::PermissionsExt as _;
    let refused = |at: &str, problem| ClientError::Exec {
        command: at.into(),
        problem: Box::new(problem),
    };
    let shown = crate::escape(command);
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if command.contains('/') {
        std::path::PathBuf::from(command)
    } else {
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(command))
            .find(|p| executable(p))
            .ok_or_else(|| refused(&shown, ClientError::ExecNotFound))?
    };
    let at = crate::escape(&found.to_string_lossy()).into_owned();
    if !found.is_absolute() {
        return Err(refused(&at, ClientError::ExecNotAbsolute));
    }
    if !executable(&found) {
        return Err(refused(&at, ClientError::ExecNotExecutable));
    }
    crate::files::only_root_may_change(&found)
        .map_err(|e| refused(&at, ClientError::ExecOthersMayChange(e)))?;
    found
        .into_os_string()
        .into_string()
        .map_err(|_| refused(&at, ClientError::ExecNotUtf8))
}

/// A kubeconfig for `config`'s cluster that authenticates with the client
/// certificate and key at `cert` and `key` (relative to the kubeconfig).
pub fn client_cert_kubeconfig(config: &kube::Config, cert: &str, key: &str) -> String {
    use base64::Engine as _;
    let mut cluster = serde_json::json!({ "server": config.cluster_url.to_string() });
    match (&config.root_cert_file, &config.root_cert) {
        // A CA file (the pod's service-account CA, which rotates) by path.
        (Some(file), _) => cluster["certificate-authority"] = file.display().to_string().into(),
        (None, Some(roots)) => {
            let pem: String = roots
                .iter()
                .map(|d| crate::pem::encode("CERTIFICATE", d))
                .collect();
            let data = base64::engine::general_purpose::STANDARD.encode(pem);
            cluster["certificate-authority-data"] = data.into();
        }
        (None, None) => {}
    }
    if let Some(name) = &config.tls_server_name {
        cluster["tls-server-name"] = name.clone().into();
    }
    let user = serde_json::json!({ "client-certificate": cert, "client-key": key });
    serde_yaml_ng::to_string(&one_context(["default"; 3], cluster, user)).unwrap_or_default()
}

/// The one way certsync builds a kubeconfig: one context, named `context`, joining the
/// cluster `cluster_name` and the user `user`, each with the fields given.
pub fn one_context(
    [cluster_name, user_name, context]: [&str; 3],
    cluster: serde_json::Value,
    user: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": cluster_name, "cluster": cluster }],
        "users": [{ "name": user_name, "user": user }],
        "contexts": [{ "name": context,
            "context": { "cluster": cluster_name, "user": user_name } }],
        "current-context": context,
    })
}

/// A kubeconfig, its YAML documents merged as `Kubeconfig::from_yaml`
/// does, read with certsync's own YAML parser (kube-rs' would stay
/// resident, half a MiB, for the process's life).
pub fn parse_kubeconfig(text: &str) -> Result<Kubeconfig, ClientError> {
    use serde::Deserialize;
    // Checked before libyaml reads it for what Go reads otherwise (and
    // libyaml is quadratic in flow depth): see `files::check_documents`.
    crate::files::check_documents(text).map_err(ClientError::Yaml)?;
    let mut merged = Kubeconfig::default();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let kc = Kubeconfig::deserialize(doc)?;
        merged = merged.merge(kc).map_err(ClientError::Kube)?;
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Zm9v
    tls-server-name: api.test
users:
- name: u
  user:
    token: t0ken
contexts:
- name: x
  context: {cluster: c, user: u, namespace: ns}
current-context: x
";

    #[test]
    fn kubeconfig_reads_as_kube_reads_it() {
        let ours = parse_kubeconfig(KUBECONFIG).unwrap();
        let kubes = Kubeconfig::from_yaml(KUBECONFIG).unwrap();
        assert_eq!(format!("{ours:?}"), format!("{kubes:?}"));
        assert_eq!(ours.current_context.as_deref(), Some("x"));
        let cluster = ours.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(cluster.tls_server_name.as_deref(), Some("api.test"));
    }

    #[test]
    fn files_named_relative_to_the_kubeconfig_are_read_beside_it() {
        use base64::Engine as _;
        let d = tempfile::tempdir().unwrap();
        for (name, bytes) in [
            ("ca.crt", "CA"),
            ("c.crt", "CERT"),
            ("c.key", "KEY"),
            ("tok", "t"),
        ] {
            std::fs::write(d.path().join(name), bytes).unwrap();
        }
        let path = d.path().join("config");
        std::fs::write(
            &path,
            "clusters:\n- name: c\n  cluster: {server: https://a, certificate-authority: ca.crt}\n\
             users:\n- name: u\n  user: {client-certificate: c.crt, client-key: c.key, tokenFile: tok}\n",
        )
        .unwrap();
        // Read from elsewhere: the files are found beside the kubeconfig,
        // not in the working directory.
        let (kc, _) = read_kubeconfigs(&[path], false).unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority_data, Some(b64("CA")));
        assert_eq!(cluster.certificate_authority, None);
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate_data, Some(b64("CERT")));
        assert_eq!(
            user.token_file.as_deref(),
            Some(d.path().join("tok").to_str().unwrap())
        );
    }

    #[test]
    fn documents_merge_first_wins_as_in_kube() {
        let two = format!(
            "{KUBECONFIG}---\ncurrent-context: other\nclusters:\n- name: d\n  cluster: {{server: https://d}}\n"
        );
        let ours = parse_kubeconfig(&two).unwrap();
        let kubes = Kubeconfig::from_yaml(&two).unwrap();
        assert_eq!(format!("{ours:?}"), format!("{kubes:?}"));
        assert_eq!(ours.current_context.as_deref(), Some("x"));
        assert_eq!(ours.clusters.len(), 2);
    }

    /// An exec credential plugin runs as root: a program another user may
    /// change (the file, or a directory on the way, writable by others) is
    /// refused, naming it; one only root may change is kept, by its absolute
    /// path, found through PATH's absolute directories as execvp would.
    #[test]
    fn an_exec_plugin_runs_only_what_only_root_may_change() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        let open = dir.path().join("open");
        std::fs::create_dir(&good).unwrap();
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        for d in [&good, &open] {
            let f = d.join("login");
            std::fs::write(&f, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let writable = good.join("writable");
        std::fs::write(&writable, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o757)).unwrap();
        let path =
            |ds: &[&std::path::Path]| std::env::join_paths(ds).unwrap().into_string().unwrap();
        let (g, o) = (good.as_path(), open.as_path());
        // Only judged as root (the kernel limits any other user).
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let ok = root_may_run("login", &path(&[std::path::Path::new("rel"), g, o])).unwrap();
        assert_eq!(ok, g.join("login").to_str().unwrap());
        for (command, path_var, why) in [
            ("login", path(&[o, g]), "a directory another user may write"),
            (
                o.join("login").to_str().unwrap(),
                path(&[g]),
                "named by path",
            ),
            (writable.to_str().unwrap(), path(&[g]), "the file itself"),
            ("absent", path(&[g]), "not found"),
            (
                "login",
                "rel:also-rel".to_owned(),
                "only relative PATH entries",
            ),
            (g.to_str().unwrap(), path(&[g]), "a directory"),
        ] {
            let e = root_may_run(command, &path_var).expect_err(why);
            assert!(matches!(e, ClientError::Exec { .. }), "{why}: {e}");
        }
    }

    /// The `'` of `the admin 's` is text to go-yaml (client-go, kubectl),
    /// which merges the `<<` mapping below it over the cluster certsync
    /// reads, and reads a second byte-order mark as part of the first key:
    /// each is refused, whatever a quote inside plain text looks like.
    #[test]
    fn attack_a_merge_key_or_tag_after_a_quote_in_a_kubeconfig_is_refused() {
        let opened = "apiVersion: v1\nkind: Config\nx-note: the admin 's\n";
        let mut read = Vec::new();
        for text in [
            format!(
                "{opened}clusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n  \
                 <<: {{cluster: {{server: https://evil.test:6443}}}}\n"
            ),
            format!(
                "{opened}clusters:\n- name: c\n  cluster:\n    server: !x https://10.0.0.1:6443\n"
            ),
            format!("\u{feff}\u{feff}{KUBECONFIG}"),
        ] {
            let one = crate::files::parse_yaml::<serde_yaml_ng::Value>(&text);
            assert!(one.is_err(), "the one reader refuses it: {text}");
            if let Ok(kc) = parse_kubeconfig(&text) {
                read.push(format!("{text}: read as {:?}", kc.clusters));
            }
        }
        assert!(read.is_empty(), "{read:#?}");
    }

    /// A core tag granit-parser does not see (after a U+2028 inside a
    /// comment, or after `?` inside `{ }`: YAML 1.1 and 1.2 read both
    /// differently) is resolved by libyaml without a trace: certsync reads a
    /// key `c2VydmVy` it ignores and server 10.0.0.1, while go-yaml
    /// (client-go, kubectl) decodes the key to `server` and takes the later
    /// one, evil.test.
    #[test]
    fn attack_a_tag_granit_does_not_see_in_a_kubeconfig_is_refused() {
        let head = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n";
        let mut read = Vec::new();
        for text in [
            format!(
                "{head}    server: https://10.0.0.1:6443 # primary\u{2028}    \
                 !!binary c2VydmVy: https://evil.test:6443\n"
            ),
            format!(
                "{head}    {{server: https://10.0.0.1:6443, \
                 ?!!binary c2VydmVy: https://evil.test:6443}}\n"
            ),
        ] {
            if let Ok(kc) = parse_kubeconfig(&text) {
                read.push(format!("{text:?}: read as {:?}", kc.clusters));
            }
        }
        assert!(read.is_empty(), "{read:#?}");
    }

    #[test]
    fn a_broken_kubeconfig_is_an_error_with_the_place() {
        use crate::files::YamlError;
        let e = parse_kubeconfig("clusters: [\n  - name: c\n").unwrap_err();
        assert!(
            matches!(&e, ClientError::Yaml(YamlError::Syntax(s)) if s.marker().line() >= 2),
            "{e}"
        );
    }
}
