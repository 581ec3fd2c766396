//! The mapping grammar (`KIND:SOURCE=TARGET[,OPTION=VALUE]...`, or the
//! same as a config file entry) → one validated [`super::Mapping`] per
//! source kind.

use super::*;
use crate::cli::{RunArgs, key_mode, parse_mode};

use std::path::PathBuf;

use serde::Deserialize;

use crate::bundle::{CA_FILE, CERT_FILE, Item, KEY_FILE, Layout, check_file_name};
use crate::reload::verify::ServingCheck;
use crate::source::ca::CaSpec;
use crate::source::csr::CsrSpec;
use crate::source::secret::{Kind, ObjectRef};
use crate::source::trust_bundle::Selection;
use crate::validate::Expect;
use crate::writer::WriterOptions;

/// One mapping as written by the user, in either form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MappingSpec {
    pub source: String,
    pub target: PathBuf,
    pub name: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub ca: Option<String>,
    pub combined: Option<String>,
    #[serde(default)]
    pub ca_only: bool,
    pub cert_mode: Option<String>,
    pub key_mode: Option<String>,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    pub verify: Option<String>,
    pub sni: Option<String>,
    // csr: mappings only.
    pub cn: Option<String>,
    #[serde(default)]
    pub o: Vec<String>,
    #[serde(default)]
    pub dns: Vec<String>,
    #[serde(default)]
    pub ip: Vec<String>,
    pub key_alg: Option<String>,
    pub lifetime: Option<String>,
    #[serde(default)]
    pub usage: Vec<String>,
    pub renew: Option<String>,
    pub approval_timeout: Option<String>,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub write_kubeconfig: Option<String>,
    /// csr: and ca: mappings: a kubeconfig outside the target whose current
    /// user certsync keeps holding the live pair, embedded.
    pub update_kubeconfig: Option<PathBuf>,
    /// csr: and ca: mappings: `PREFIX.crt` and `PREFIX.key` outside the
    /// target that certsync keeps holding the live pair (kubeadm's copies).
    pub update_pair: Option<PathBuf>,
    // ca: mappings only.
    pub template: Option<PathBuf>,
    #[serde(default)]
    pub keep_key: bool,
    #[serde(default)]
    pub allow_loose_ca_key: bool,
    // clustertrustbundle: mappings by signer only.
    #[serde(default)]
    pub label: Vec<String>,
    /// `all`, or `NAME` / `NAME:TARGET`; repeatable.
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub allow_non_pem: bool,
    #[serde(default)]
    pub optional: bool,
    // tree: mappings (cert-syncer's layout).
    #[serde(default)]
    pub secret: Vec<String>,
    #[serde(default)]
    pub configmap: Vec<String>,
    #[serde(default)]
    pub optional_secret: Vec<String>,
    #[serde(default)]
    pub optional_configmap: Vec<String>,
}

impl MappingSpec {
    /// Parses the `--sync` form.
    pub fn parse_flag(spec: &str) -> Result<Self, ConfigError> {
        let err = |problem: String| ConfigError::Flag {
            spec: spec.to_owned(),
            problem,
        };
        let (source, rest) = spec
            .split_once('=')
            .ok_or_else(|| err("expected KIND:SOURCE=TARGET".into()))?;
        let mut parts = rest.split(',');
        let target = parts.next().unwrap_or_default();
        if target.is_empty() {
            return Err(err("the target directory is empty".into()));
        }
        let mut m = MappingSpec {
            source: source.to_owned(),
            target: PathBuf::from(target),
            ..Default::default()
        };
        for opt in parts {
            let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
            let value = || {
                if v.is_empty() {
                    Err(err(format!("option {k:?} needs a value ({k}=...)")))
                } else {
                    Ok(v.to_owned())
                }
            };
            let flag = || match v {
                "" | "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(err(format!("{k} takes no value or true/false, got {v:?}"))),
            };
            let number = || {
                v.parse::<u32>()
                    .map_err(|_| err(format!("option {k:?} needs a numeric id, got {v:?}")))
            };
            match k {
                "name" => m.name = Some(value()?),
                "cert" => m.cert = Some(value()?),
                "key" => m.key = Some(value()?),
                "ca" => m.ca = Some(value()?),
                "combined" => m.combined = Some(value()?),
                "ca-only" => {
                    m.ca_only = match v {
                        "" | "true" => true,
                        "false" => false,
                        _ => {
                            return Err(err(format!(
                                "ca-only takes no value or true/false, got {v:?}"
                            )));
                        }
                    }
                }
                "cert-mode" => m.cert_mode = Some(value()?),
                "key-mode" => m.key_mode = Some(value()?),
                "owner" => m.owner = Some(number()?),
                "verify" => m.verify = Some(value()?),
                "sni" => m.sni = Some(value()?),
                "group" => m.group = Some(number()?),
                "cn" => m.cn = Some(value()?),
                "o" => m.o.push(value()?),
                "dns" => m.dns.push(value()?),
                "ip" => m.ip.push(value()?),
                "key-alg" => m.key_alg = Some(value()?),
                "lifetime" => m.lifetime = Some(value()?),
                "usage" => m.usage.push(value()?),
                "renew" => m.renew = Some(value()?),
                "approval-timeout" => m.approval_timeout = Some(value()?),
                "bootstrap-kubeconfig" => m.bootstrap_kubeconfig = Some(value()?.into()),
                "write-kubeconfig" => m.write_kubeconfig = Some(value()?),
                "update-kubeconfig" => m.update_kubeconfig = Some(value()?.into()),
                "update-pair" => m.update_pair = Some(value()?.into()),
                "template" => m.template = Some(value()?.into()),
                "keep-key" => m.keep_key = flag()?,
                "allow-loose-ca-key" => m.allow_loose_ca_key = flag()?,
                "label" => m.label.push(value()?),
                "files" => m.files.push(value()?),
                "optional" => {
                    m.optional = match v {
                        "" | "true" => true,
                        "false" => false,
                        _ => {
                            return Err(err(format!(
                                "optional takes no value or true/false, got {v:?}"
                            )));
                        }
                    }
                }
                "secret" => m.secret.push(value()?),
                "configmap" => m.configmap.push(value()?),
                "optional-secret" => m.optional_secret.push(value()?),
                "optional-configmap" => m.optional_configmap.push(value()?),
                "allow-non-pem" => {
                    m.allow_non_pem = match v {
                        "" | "true" => true,
                        "false" => false,
                        _ => {
                            return Err(err(format!(
                                "allow-non-pem takes no value or true/false, got {v:?}"
                            )));
                        }
                    }
                }
                _ => {
                    return Err(err(format!(
                        "unknown option {k:?} (known: name, cert, key, ca, combined, ca-only, \
                         cert-mode, key-mode, owner, group, verify, sni; for csr: cn, o, dns, \
                         ip, key-alg, lifetime, usage, renew, approval-timeout, \
                         bootstrap-kubeconfig, write-kubeconfig, update-kubeconfig, update-pair; \
                         for ca: cn, o, dns, ip, key-alg, lifetime, usage, renew, template, \
                         keep-key, update-kubeconfig, update-pair, \
                         allow-loose-ca-key; for clustertrustbundle: \
                         label; files, allow-non-pem, optional; for tree: secret, configmap, \
                         optional-secret, optional-configmap)"
                    )));
                }
            }
        }
        Ok(m)
    }

    pub(crate) fn resolve(mut self, args: &RunArgs) -> Result<Mapping, ConfigError> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| self.target.display().to_string());
        let err = |problem: String| ConfigError::Mapping {
            mapping: name.clone(),
            problem,
        };
        let (kind, location) = self.source.split_once(':').ok_or_else(|| {
            err(format!(
                "source {:?} has no KIND: prefix (e.g. dir:/path)",
                self.source
            ))
        })?;
        let object = |kind| {
            let (namespace, obj) = location
                .split_once('/')
                .ok_or_else(|| err(format!("{:?}: expected NAMESPACE/NAME", self.source)))?;
            check_dns("namespace", namespace, 63).map_err(&err)?;
            check_dns("name", obj, 253).map_err(&err)?;
            Ok(ObjectRef {
                kind,
                namespace: namespace.to_owned(),
                name: obj.to_owned(),
            })
        };
        let source = match kind {
            "dir" if !location.is_empty() => Source::Dir(PathBuf::from(location)),
            "dir" => return Err(err("dir: needs a directory path".into())),
            "secret" => Source::Kube(object(Kind::Secret)?),
            "configmap" => Source::Kube(object(Kind::ConfigMap)?),
            "csr" => Source::Csr(Box::new(self.csr_spec(location).map_err(&err)?)),
            // cert= and key= name the CA's files; what is published keeps
            // the usual names.
            "ca" => {
                let (cert, key) = (self.cert.take(), self.key.take());
                let spec = self.ca_spec(location, cert.as_deref(), key.as_deref());
                Source::Ca(Box::new(spec.map_err(&err)?))
            }
            "clustertrustbundle" => {
                Source::TrustBundle(self.trust_bundle_selection(location).map_err(&err)?)
            }
            other => {
                return Err(err(format!(
                    "unknown source kind {other:?} (supported: dir, secret, configmap, csr, \
                     ca, clustertrustbundle, tree)"
                )));
            }
        };
        let issuing = [
            ("cn", self.cn.is_some()),
            ("o", !self.o.is_empty()),
            ("dns", !self.dns.is_empty()),
            ("ip", !self.ip.is_empty()),
            ("key-alg", self.key_alg.is_some()),
            ("lifetime", self.lifetime.is_some()),
            ("usage", !self.usage.is_empty()),
            ("renew", self.renew.is_some()),
            ("update-kubeconfig", self.update_kubeconfig.is_some()),
            ("update-pair", self.update_pair.is_some()),
        ];
        if !matches!(source, Source::Csr(_) | Source::Ca(_))
            && let Some((opt, _)) = issuing.iter().find(|(_, set)| *set)
        {
            return Err(err(format!("{opt} applies to csr: and ca: sources only")));
        }
        let csr_only = [
            ("approval-timeout", self.approval_timeout.is_some()),
            ("bootstrap-kubeconfig", self.bootstrap_kubeconfig.is_some()),
            ("write-kubeconfig", self.write_kubeconfig.is_some()),
        ];
        if !matches!(source, Source::Csr(_))
            && let Some((opt, _)) = csr_only.iter().find(|(_, set)| *set)
        {
            return Err(err(format!("{opt} applies to csr: sources only")));
        }
        let ca_kind_only = [
            ("template", self.template.is_some()),
            ("keep-key", self.keep_key),
            ("allow-loose-ca-key", self.allow_loose_ca_key),
        ];
        if !matches!(source, Source::Ca(_))
            && let Some((opt, _)) = ca_kind_only.iter().find(|(_, set)| *set)
        {
            return Err(err(format!("{opt} applies to ca: sources only")));
        }
        if matches!(source, Source::Ca(_)) {
            for (opt, set) in [
                ("ca", self.ca.is_some()),
                ("combined", self.combined.is_some()),
                ("ca-only", self.ca_only),
            ] {
                if set {
                    return Err(err(format!(
                        "{opt} does not apply to ca: sources (certsync makes the key and \
                         publishes tls.crt, tls.key and the CA certificate as ca.crt; \
                         cert= and key= name the CA's files)"
                    )));
                }
            }
        }
        if !matches!(source, Source::Dir(_) | Source::Csr(_)) && self.combined.is_some() {
            return Err(err("combined applies to dir: sources only".into()));
        }

        if !matches!(source, Source::TrustBundle(_)) && !self.label.is_empty() {
            return Err(err(
                "label applies to clustertrustbundle: sources only".into()
            ));
        }
        if matches!(source, Source::TrustBundle(_)) {
            for (opt, set) in [
                ("cert", self.cert.is_some()),
                ("key", self.key.is_some()),
                ("ca", self.ca.is_some()),
                ("combined", self.combined.is_some()),
            ] {
                if set {
                    return Err(err(format!(
                        "{opt} does not apply to clustertrustbundle: sources (the bundles are \
                         published as ca.crt)"
                    )));
                }
            }
        }
        if matches!(source, Source::Csr(_)) {
            for (opt, set) in [
                ("cert", self.cert.is_some()),
                ("key", self.key.is_some()),
                ("combined", self.combined.is_some()),
                ("ca-only", self.ca_only),
            ] {
                if set {
                    return Err(err(format!(
                        "{opt} does not apply to csr: sources (certsync makes the key and \
                         publishes tls.crt, tls.key and, with ca=, ca.crt)"
                    )));
                }
            }
        }
        if !self.files.is_empty() || self.allow_non_pem {
            if self.files.is_empty() {
                return Err(err("allow-non-pem goes with files=".into()));
            }
            if !matches!(source, Source::Dir(_) | Source::Kube(_)) {
                return Err(err(
                    "files= applies to dir:, secret: and configmap: sources".into(),
                ));
            }
            for (opt, set) in [
                ("cert", self.cert.is_some()),
                ("key", self.key.is_some()),
                ("ca", self.ca.is_some()),
                ("combined", self.combined.is_some()),
                ("ca-only", self.ca_only),
            ] {
                if set {
                    return Err(err(format!(
                        "{opt} and files= exclude each other (files= names every file published)"
                    )));
                }
            }
        }
        let ca_only = self.ca_only || matches!(source, Source::TrustBundle(_));
        let expect = if !self.files.is_empty() {
            Expect::Files {
                allow_non_pem: self.allow_non_pem,
            }
        } else if ca_only {
            Expect::CaOnly
        } else {
            Expect::Pair
        };
        let mut items = Vec::new();
        let layout = if self.files.iter().any(|f| f == "all") {
            if self.files.len() > 1 {
                return Err(err(
                    "files=all publishes every file; give no other files=".into()
                ));
            }
            Layout::All
        } else if !self.files.is_empty() {
            for f in &self.files {
                let (source_name, target_name) = f.split_once(':').unwrap_or((f, f));
                check_file_name(target_name).map_err(|e| err(format!("files={f}: {e}")))?;
                if items.iter().any(|i: &Item| i.target == target_name) {
                    return Err(err(format!("files=: {target_name} is published twice")));
                }
                items.push(Item::new(source_name, target_name, true));
            }
            Layout::Files
        } else {
            match (&self.combined, ca_only) {
                (Some(_), true) => {
                    return Err(err("combined and ca-only exclude each other".into()));
                }
                (Some(file), false) => {
                    if self.cert.is_some() || self.key.is_some() {
                        return Err(err(
                            "combined replaces cert and key; give one or the other".into()
                        ));
                    }
                    check_file_name(file).map_err(|e| err(format!("combined: {e}")))?;
                    Layout::Combined(file.clone())
                }
                (None, true) => {
                    if self.cert.is_some() || self.key.is_some() {
                        return Err(err("a ca-only mapping takes no cert or key".into()));
                    }
                    Layout::Files
                }
                (None, false) => {
                    items.push(Item::new(
                        self.cert.as_deref().unwrap_or(CERT_FILE),
                        CERT_FILE,
                        true,
                    ));
                    items.push(Item::new(
                        self.key.as_deref().unwrap_or(KEY_FILE),
                        KEY_FILE,
                        true,
                    ));
                    Layout::Files
                }
            }
        };
        if self.files.is_empty() {
            let ca_item = match &source {
                Source::Csr(_) | Source::Ca(_) => CA_FILE,
                _ => self.ca.as_deref().unwrap_or(CA_FILE),
            };
            items.push(Item::new(ca_item, CA_FILE, ca_only));
        }
        for item in &items {
            check_file_name(&item.source).map_err(|e| err(e.to_string()))?;
        }
        let writer = WriterOptions {
            keep: args.keep_revisions as usize,
            cert_mode: match &self.cert_mode {
                Some(s) => parse_mode(s).map_err(&err)?,
                None => args.cert_mode,
            },
            key_mode: match &self.key_mode {
                Some(s) => key_mode(s).map_err(&err)?,
                None => args.key_mode,
            },
            owner: self.owner.or(args.owner),
            group: self.group.or(args.group),
            issuing: matches!(source, Source::Csr(_) | Source::Ca(_)),
            lock_timeout: None,
        };
        // -1 means "leave unchanged" to chown(2): never a real id.
        if writer.owner == Some(u32::MAX) || writer.group == Some(u32::MAX) {
            return Err(err(
                "owner and group must be real ids, not 4294967295 (-1)".into()
            ));
        }
        if self.sni.is_some() && self.verify.is_none() {
            return Err(err("sni= goes with verify=HOST:PORT".into()));
        }
        let verify = self
            .verify
            .as_deref()
            .map(|addr| ServingCheck::parse(addr, self.sni.clone()))
            .transpose()
            .map_err(|e| err(format!("verify: {e}")))?;
        if verify.is_some() && expect == Expect::CaOnly {
            return Err(err(
                "verify= needs a certificate/key pair, not a CA bundle".into()
            ));
        }
        if self.optional && (!matches!(source, Source::Kube(_)) || self.files.is_empty()) {
            return Err(err(
                "optional applies to secret: and configmap: mappings with files= (an absent \
                 object then leaves no files, as cert-syncer does)"
                    .into(),
            ));
        }
        if let Some(path) = &self.update_kubeconfig {
            if !path.is_absolute() {
                return Err(err(format!(
                    "update-kubeconfig {}: give an absolute path (e.g. /etc/kubernetes/admin.conf)",
                    path.display()
                )));
            }
            if path.starts_with(&self.target) {
                return Err(err(format!(
                    "update-kubeconfig {} is inside the target {}; it names a kubeconfig \
                     elsewhere (write-kubeconfig= publishes one in the target)",
                    path.display(),
                    self.target.display()
                )));
            }
        }
        if let Some(prefix) = &self.update_pair {
            if !prefix.is_absolute() {
                return Err(err(format!(
                    "update-pair {}: give an absolute path without .crt/.key (e.g. \
                     /etc/kubernetes/pki/apiserver)",
                    prefix.display()
                )));
            }
            if prefix.starts_with(&self.target) {
                return Err(err(format!(
                    "update-pair {} is inside the target {}; it names kubeadm's copy of the \
                     pair elsewhere",
                    prefix.display(),
                    self.target.display()
                )));
            }
            if prefix
                .extension()
                .is_some_and(|e| e == "crt" || e == "key" || e == "pem")
            {
                return Err(err(format!(
                    "update-pair {}: give the path without its extension; certsync writes \
                     PREFIX.crt and PREFIX.key",
                    prefix.display()
                )));
            }
        }
        Ok(Mapping {
            update_kubeconfig: self.update_kubeconfig,
            update_pair: self.update_pair,
            optional: self.optional,
            name,
            source,
            verify,
            layout,
            items: items.into(),
            expect,
            target: self.target,
            writer,
        })
    }
}

/// Where a mapping's content comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A host directory.
    Dir(PathBuf),
    /// One Secret or ConfigMap.
    Kube(ObjectRef),
    /// Certificates requested through the CSR API.
    Csr(Box<CsrSpec>),
    /// Certificates issued from a CA on the node.
    Ca(Box<CaSpec>),
    /// ClusterTrustBundles, as a CA bundle.
    TrustBundle(Selection),
}

impl MappingSpec {
    /// `clustertrustbundle:NAME` or `clustertrustbundle:SIGNER` (a name
    /// with `/`, which bundle names cannot contain) and its `label=` options.
    pub(crate) fn trust_bundle_selection(&self, location: &str) -> Result<Selection, String> {
        if location.contains('/') {
            let labels = self
                .label
                .iter()
                .map(|l| match l.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                    _ => Err(format!("label {l:?} is not KEY=VALUE")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Selection::Signer {
                signer: location.to_owned(),
                labels,
            });
        }
        if !self.label.is_empty() {
            return Err("label= selects among a signer's bundles: give \
                        clustertrustbundle:SIGNER, not a bundle name"
                .into());
        }
        let plain = location.replace(':', "-");
        check_dns("name", &plain, 253)?;
        Ok(Selection::Name(location.to_owned()))
    }
}

/// Checks a Kubernetes namespace or object name (DNS-1123: lower-case
/// letters, digits, '-' and, for names, '.'; alphanumeric at both ends).
pub(crate) fn check_dns(what: &str, s: &str, max: usize) -> Result<(), String> {
    let dots = what == "name";
    let ok = !s.is_empty()
        && s.len() <= max
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
        })
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?} is not a valid Kubernetes {what} (lower-case DNS-1123, at most {max} characters)"
        ))
    }
}

impl MappingSpec {
    /// `tree:NAMESPACE=DEST,secret=A,configmap=B,optional-configmap=C`:
    /// cert-syncer's layout, `DEST/secrets/A/KEY` and
    /// `DEST/configmaps/B/KEY`, as one `files=all` mapping per object, each
    /// watched by name; optional objects leave no files while absent.
    pub(crate) fn expand_tree(self) -> Result<Vec<MappingSpec>, ConfigError> {
        let listed = !(self.secret.is_empty()
            && self.configmap.is_empty()
            && self.optional_secret.is_empty()
            && self.optional_configmap.is_empty());
        let Some(namespace) = self.source.strip_prefix("tree:") else {
            if listed {
                return Err(ConfigError::Mapping {
                    mapping: self.target.display().to_string(),
                    problem: "secret=, configmap=, optional-secret= and optional-configmap= \
                              belong to tree: mappings"
                        .into(),
                });
            }
            return Ok(vec![self]);
        };
        let err = |problem: String| ConfigError::Mapping {
            mapping: format!("tree:{namespace}"),
            problem,
        };
        check_dns("namespace", namespace, 63).map_err(&err)?;
        if !listed {
            return Err(err(
                "a tree: mapping lists its objects: secret=NAME, configmap=NAME (or optional-...)"
                    .into(),
            ));
        }
        let rest = MappingSpec {
            source: String::new(),
            target: PathBuf::new(),
            secret: Vec::new(),
            configmap: Vec::new(),
            optional_secret: Vec::new(),
            optional_configmap: Vec::new(),
            name: None,
            files: vec!["all".into()],
            ..self.clone()
        };
        if self.name.is_some() || !self.files.is_empty() {
            return Err(err(
                "a tree: mapping names each object itself and publishes every key (no name=, files=)"
                    .into(),
            ));
        }
        let lists = [
            ("secret", "secrets", &self.secret, false),
            ("configmap", "configmaps", &self.configmap, false),
            ("secret", "secrets", &self.optional_secret, true),
            ("configmap", "configmaps", &self.optional_configmap, true),
        ];
        let mut out = Vec::new();
        for (kind, dir, names, optional) in lists {
            for name in names {
                out.push(MappingSpec {
                    source: format!("{kind}:{namespace}/{name}"),
                    target: self.target.join(dir).join(name),
                    name: Some(format!("{namespace}/{dir}/{name}")),
                    optional,
                    ..rest.clone()
                });
            }
        }
        Ok(out)
    }
}
