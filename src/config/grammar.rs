//! The mapping grammar as data: every source kind and every mapping option
//! (name, kinds, shape of its value, help line), once. The config file's
//! mapping struct ([`MappingSpec`]), the `--sync` reader, the kind check,
//! `run --help` and the reference's table (made by `tests/docs.rs`) all
//! derive from these tables.

/// A source kind: the word before the mapping source's first `:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Dir,
    Secret,
    ConfigMap,
    Csr,
    Ca,
    ClusterTrustBundle,
    /// cert-syncer's layout: expanded into `secret:` and `configmap:`
    /// mappings before they are resolved.
    Tree,
}

use std::path::PathBuf;

use SourceKind::{Ca, ClusterTrustBundle as Ctb, ConfigMap, Csr, Dir, Secret, Tree};

impl SourceKind {
    pub const ALL: [SourceKind; 7] = [Dir, Secret, ConfigMap, Csr, Ca, Ctb, Tree];

    pub fn name(self) -> &'static str {
        match self {
            Dir => "dir",
            Secret => "secret",
            ConfigMap => "configmap",
            Csr => "csr",
            Ca => "ca",
            Ctb => "clustertrustbundle",
            Tree => "tree",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == word)
    }

    /// Its forms and what each reads, for the help.
    fn usage(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Dir => &[("dir:PATH", "a host directory (inotify, debounced, resync)")],
            Secret => &[(
                "secret:NAMESPACE/NAME",
                "one Secret, listed and watched by name",
            )],
            ConfigMap => &[(
                "configmap:NAMESPACE/NAME",
                "one ConfigMap, listed and watched by name",
            )],
            Csr => &[(
                "csr:SIGNER",
                "a certificate certsync requests and renews itself",
            )],
            Ca => &[(
                "ca:PREFIX",
                "a certificate certsync issues from PREFIX.crt/PREFIX.key",
            )],
            Ctb => &[
                (
                    "clustertrustbundle:NAME",
                    "one ClusterTrustBundle, as ca.crt",
                ),
                (
                    "clustertrustbundle:SIGNER",
                    "every ClusterTrustBundle of a signer (label=KEY=VALUE\n\
                     narrows it), joined in name order, as ca.crt",
                ),
            ],
            Tree => &[(
                "tree:NAMESPACE",
                "cert-syncer's layout: DEST/secrets/NAME/KEY and\n\
                 DEST/configmaps/NAME/KEY for secret=NAME, configmap=NAME,\n\
                 optional-secret=NAME, optional-configmap=NAME (repeatable)",
            )],
        }
    }

    /// What a kind publishes whatever the options say, told with an option
    /// it refuses.
    pub fn publishes(self) -> Option<&'static str> {
        match self {
            Csr => {
                Some("certsync makes the key and publishes tls.crt, tls.key and, with ca=, ca.crt")
            }
            Ca => Some(
                "certsync makes the key and publishes tls.crt, tls.key and the CA \
                 certificate as ca.crt; cert= and key= name the CA's files",
            ),
            Ctb => Some("the bundles are published as ca.crt"),
            Dir | Secret | ConfigMap | Tree => None,
        }
    }
}

/// The kinds as a list in words: `csr: and ca:`.
pub fn kinds_in_words(kinds: &[SourceKind]) -> String {
    let names: Vec<String> = kinds.iter().map(|k| format!("{}:", k.name())).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// The shape of an option's value in the `--sync` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `OPTION=VALUE`, a non-empty text, once.
    Text(&'static str),
    /// `OPTION=VALUE`, repeatable: each adds one.
    List(&'static str),
    /// `OPTION`, `OPTION=true` or `OPTION=false`.
    Switch,
    /// `OPTION=ID`, a numeric user or group id.
    Id,
}

impl Shape {
    /// What a value of this shape is, for a refusal.
    pub fn takes(self) -> &'static str {
        match self {
            Text(_) | List(_) => "a value",
            Switch => "no value, true or false",
            Id => "a numeric id",
        }
    }
}

#[derive(Debug)]
pub struct MappingOption {
    pub name: &'static str,
    pub shape: Shape,
    /// The kinds it applies to; any other refuses it.
    pub kinds: &'static [SourceKind],
    pub help: &'static str,
    /// The option it takes effect with: set without it, refused.
    pub needs: Option<&'static str>,
    /// Options it replaces: set with any of them, refused.
    pub excludes: &'static [&'static str],
}

/// The kinds a mapping is resolved as (every kind but `tree:`).
pub const RESOLVED: &[SourceKind] = &[Dir, Secret, ConfigMap, Csr, Ca, Ctb];
const ISSUING: &[SourceKind] = &[Csr, Ca];

impl MappingOption {
    /// As the help and the reference write it: `cn=NAME`, `keep-key`.
    pub fn synopsis(&self) -> String {
        match self.shape {
            Text(v) | List(v) => format!("{}={v}", self.name),
            Switch => self.name.to_owned(),
            Id => format!("{}=ID", self.name),
        }
    }

    /// Its help line with what it goes with and what it replaces, as the
    /// help and the reference show it, `repeatable` added to a list's.
    pub fn described(&self, repeatable: &str) -> String {
        let with = self
            .needs
            .map(|n| format!("with {n}=, "))
            .unwrap_or_default();
        let instead = if self.excludes.is_empty() {
            String::new()
        } else {
            format!("; not with {}", self.excludes.join(", "))
        };
        let repeat = if matches!(self.shape, List(_)) {
            repeatable
        } else {
            ""
        };
        format!("{with}{}{instead}{repeat}", self.help)
    }
}

use Shape::{Id, List, Switch, Text};

/// Declares every mapping option once: its field of [`MappingSpec`] (its
/// key in the config file) and its row of [`OPTIONS`].
macro_rules! options {
    (@or $default:expr) => { $default };
    (@or $default:expr, $given:expr) => { $given };
    ($($field:ident: $ty:ty = ($name:literal, $shape:expr, $kinds:expr, $help:literal
        $(, needs $needs:literal)? $(, excludes $excludes:expr)?),)*) => {
        /// One mapping as written by the user, in either form.
        #[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct MappingSpec {
            pub source: String,
            pub target: PathBuf,
            $(#[serde(default, rename = $name)] pub $field: $ty,)*
        }

        /// Every mapping option, in the order the help shows them.
        pub const OPTIONS: &[MappingOption] = &[$(MappingOption {
            name: $name,
            shape: $shape,
            kinds: $kinds,
            help: $help,
            needs: options!(@or None $(, Some($needs))?),
            excludes: options!(@or &[] $(, $excludes)?),
        },)*];
    };
}

options! {
    name: Option<String> = ("name", Text("NAME"), RESOLVED, "name in logs and metrics (default: the target path)"),
    cert: Option<String> = ("cert", Text("FILE"), &[Dir, Secret, ConfigMap, Ca], "source file or key of the chain (default tls.crt); ca: the CA certificate", excludes &["combined", "ca-only"]),
    key: Option<String> = ("key", Text("FILE"), &[Dir, Secret, ConfigMap, Ca], "source file or key of the key (default tls.key); ca: the CA key", excludes &["combined", "ca-only"]),
    ca: Option<String> = ("ca", Text("FILE"), &[Dir, Secret, ConfigMap, Csr], "source file or key of the CA bundle (default ca.crt, optional); csr: the signer CA, file:PATH | configmap:NS/NAME[/KEY] | clustertrustbundle[:SIGNER]"),
    combined: Option<String> = ("combined", Text("FILE"), &[Dir], "one PEM with chain and key (kubelet-server-current.pem)", excludes &["ca-only"]),
    ca_only: bool = ("ca-only", Switch, &[Dir, Secret, ConfigMap, Ctb], "a CA bundle only, no key"),
    cert_mode: Option<String> = ("cert-mode", Text("MODE"), RESOLVED, "the certificate files' mode (default --cert-mode)"),
    key_mode: Option<String> = ("key-mode", Text("MODE"), RESOLVED, "the key file's mode (default --key-mode)"),
    owner: Option<u32> = ("owner", Id, RESOLVED, "the files' owner (default --owner)"),
    group: Option<u32> = ("group", Id, RESOLVED, "the files' group (default --group)"),
    verify: Option<String> = ("verify", Text("HOST:PORT"), RESOLVED, "after a reload, check the consumer serves the new pair"),
    sni: Option<String> = ("sni", Text("NAME"), RESOLVED, "server name verify= sends", needs "verify"),
    files: Vec<String> = ("files", List("all|NAME[:TARGET]"), &[Dir, Secret, ConfigMap], "publish keys under their own names, each checked by content", excludes &["cert", "key", "ca", "combined", "ca-only"]),
    allow_non_pem: bool = ("allow-non-pem", Switch, &[Dir, Secret, ConfigMap], "publish non-PEM keys as they are", needs "files"),
    optional: bool = ("optional", Switch, &[Secret, ConfigMap], "an absent object leaves no files (cert-syncer)", needs "files"),
    label: Vec<String> = ("label", List("KEY=VALUE"), &[Ctb], "by signer: only the bundles with this label"),
    cn: Option<String> = ("cn", Text("NAME"), ISSUING, "subject common name"),
    o: Vec<String> = ("o", List("ORG"), ISSUING, "subject organization"),
    dns: Vec<String> = ("dns", List("NAME"), ISSUING, "DNS name SAN"),
    ip: Vec<String> = ("ip", List("ADDRESS"), ISSUING, "IP address SAN"),
    key_alg: Option<String> = ("key-alg", Text("ALG"), ISSUING, "ecdsa-p256 (default), ecdsa-p384, rsa-2048|3072|4096, ed25519"),
    lifetime: Option<String> = ("lifetime", Text("DURATION"), ISSUING, "csr: expirationSeconds (>= 10m); ca: default 365d, never past the CA"),
    usage: Vec<String> = ("usage", List("USAGE"), ISSUING, "e.g. digital-signature, server-auth (csr: defaults per kubernetes.io signer)"),
    renew: Option<String> = ("renew", Text("LO-HI"), ISSUING, "renewal window of the lifetime (default 70%-90%)"),
    update_kubeconfig: Option<PathBuf> = ("update-kubeconfig", Text("PATH"), ISSUING, "keep PATH's current user holding the pair, embedded (admin.conf)"),
    update_pair: Option<PathBuf> = ("update-pair", Text("PREFIX"), ISSUING, "keep PREFIX.crt and PREFIX.key holding the pair (kubeadm's copies)"),
    approval_timeout: Option<String> = ("approval-timeout", Text("DURATION"), &[Csr], "default 15m"),
    bootstrap_kubeconfig: Option<PathBuf> = ("bootstrap-kubeconfig", Text("FILE"), &[Csr], "first request with it, renewals with the issued pair"),
    write_kubeconfig: Option<String> = ("write-kubeconfig", Text("FILE"), &[Csr], "publish a kubeconfig that uses the pair"),
    template: Option<PathBuf> = ("template", Text("PATH"), &[Ca], "copy subject, SANs and usages from this certificate"),
    keep_key: bool = ("keep-key", Switch, &[Ca], "renewals keep the live key (kubeadm certs renew)"),
    allow_loose_ca_key: bool = ("allow-loose-ca-key", Switch, &[Ca], "use a CA key that group or others may read"),
    secret: Vec<String> = ("secret", List("NAME"), &[Tree], "a Secret, at DEST/secrets/NAME"),
    configmap: Vec<String> = ("configmap", List("NAME"), &[Tree], "a ConfigMap, at DEST/configmaps/NAME"),
    optional_secret: Vec<String> = ("optional-secret", List("NAME"), &[Tree], "a Secret that may be absent"),
    optional_configmap: Vec<String> = ("optional-configmap", List("NAME"), &[Tree], "a ConfigMap that may be absent"),
}

pub fn option(name: &str) -> Option<&'static MappingOption> {
    OPTIONS.iter().find(|o| o.name == name)
}

/// The grammar shown after `run -h` and `run --help`.
pub fn help() -> String {
    // Each help text wrapped at 60 columns beside a 29-column left side.
    let line = |out: &mut String, left: &str, text: &str| {
        let mut lines: Vec<String> = Vec::new();
        for given in text.lines() {
            let mut current = String::new();
            for word in given.split(' ') {
                if !current.is_empty() && current.len() + 1 + word.len() > 60 {
                    lines.push(std::mem::take(&mut current));
                }
                if !current.is_empty() {
                    current.push(' ');
                }
                current.push_str(word);
            }
            lines.push(current);
        }
        if left.len() >= 27 {
            out.push_str(&format!("  {left}\n"));
        }
        for (i, text) in lines.iter().enumerate() {
            let left = if i == 0 && left.len() < 27 { left } else { "" };
            out.push_str(&format!("  {left:<27}{text}\n"));
        }
    };
    let mut out = String::from(
        "Mappings (--sync KIND:SOURCE=TARGET[,OPTION=VALUE]..., or the config file's `mappings:`):\n",
    );
    for kind in SourceKind::ALL {
        for (form, what) in kind.usage() {
            line(&mut out, form, what);
        }
    }
    let mut groups: Vec<&[SourceKind]> = Vec::new();
    for o in OPTIONS {
        if !groups.contains(&o.kinds) {
            groups.push(o.kinds);
        }
    }
    for kinds in groups {
        let heading = match kinds {
            RESOLVED => "Options of every kind:".to_owned(),
            kinds => format!("Options of {} mappings:", kinds_in_words(kinds)),
        };
        out.push_str(&format!("\n{heading}\n"));
        for o in OPTIONS.iter().filter(|o| o.kinds == kinds) {
            line(&mut out, &o.synopsis(), &o.described(" (repeatable)"));
        }
    }
    out.push_str(
        "\nGuides: docs/guides/requesting-certificates.md (csr:), \
         docs/guides/kubeadm-control-plane.md (ca:)\n\
         \nExamples:\n  \
         certsync run --sync 'dir:/etc/kubernetes/pki=/etc/certs/apiserver,cert=apiserver.crt,key=apiserver.key'\n  \
         certsync run --sync 'secret:kube-system/scheduler-serving=/etc/certs/serving,verify=127.0.0.1:10259'\n  \
         certsync run --sync 'csr:kubernetes.io/kube-apiserver-client=/etc/certs/client,cn=system:kube-scheduler'",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_kind_is_named_once() {
        for (i, o) in OPTIONS.iter().enumerate() {
            assert!(
                OPTIONS[..i].iter().all(|p| p.name != o.name),
                "{} twice",
                o.name
            );
            assert!(!o.kinds.is_empty(), "{} applies to no kind", o.name);
        }
        for k in SourceKind::ALL {
            assert_eq!(SourceKind::parse(k.name()), Some(k));
        }
    }
}
