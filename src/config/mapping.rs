//! The mapping grammar (`KIND:SOURCE=TARGET[,OPTION=VALUE]...`, or the
//! same as a config file entry) → one validated [`super::Mapping`] per
//! source kind.

use super::*;
use crate::cli::{RunArgs, YEAR, duration, key_mode, parse_mode};

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::bundle::{CA_FILE, CERT_FILE, Item, KEY_FILE, Layout, check_file_name};
use crate::reload::verify::ServingCheck;
use crate::source::csr::{CaSource, CsrSpec, KeyAlg, USAGES as CSR_USAGES, default_usages};
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
                         bootstrap-kubeconfig, write-kubeconfig; for clustertrustbundle: \
                         label; files, allow-non-pem, optional; for tree: secret, configmap, \
                         optional-secret, optional-configmap)"
                    )));
                }
            }
        }
        Ok(m)
    }

    pub(crate) fn resolve(self, args: &RunArgs) -> Result<Mapping, ConfigError> {
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
            "clustertrustbundle" => {
                Source::TrustBundle(self.trust_bundle_selection(location).map_err(&err)?)
            }
            other => {
                return Err(err(format!(
                    "unknown source kind {other:?} (supported: dir, secret, configmap, csr, \
                     clustertrustbundle)"
                )));
            }
        };
        let csr_only = [
            ("cn", self.cn.is_some()),
            ("o", !self.o.is_empty()),
            ("dns", !self.dns.is_empty()),
            ("ip", !self.ip.is_empty()),
            ("key-alg", self.key_alg.is_some()),
            ("lifetime", self.lifetime.is_some()),
            ("usage", !self.usage.is_empty()),
            ("renew", self.renew.is_some()),
            ("approval-timeout", self.approval_timeout.is_some()),
            ("bootstrap-kubeconfig", self.bootstrap_kubeconfig.is_some()),
            ("write-kubeconfig", self.write_kubeconfig.is_some()),
        ];
        if !matches!(source, Source::Csr(_))
            && let Some((opt, _)) = csr_only.iter().find(|(_, set)| *set)
        {
            return Err(err(format!("{opt} applies to csr: sources only")));
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
                Source::Csr(_) => CA_FILE,
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
        Ok(Mapping {
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

    /// The `csr:SIGNER` options as a [`CsrSpec`].
    pub(crate) fn csr_spec(&self, signer: &str) -> Result<CsrSpec, String> {
        match signer.split_once('/') {
            Some((domain, path)) if !path.is_empty() && check_dns("name", domain, 253).is_ok() => {
                if signer == "kubernetes.io/legacy-unknown" {
                    return Err("the signer kubernetes.io/legacy-unknown cannot be requested in certificates.k8s.io/v1".into());
                }
            }
            _ => {
                return Err(format!(
                    "csr:{signer}: the signer name must be DOMAIN/PATH, e.g. \
                     csr:kubernetes.io/kube-apiserver-client"
                ));
            }
        }
        let key_alg: KeyAlg = match &self.key_alg {
            Some(s) => s.parse()?,
            None => KeyAlg::default(),
        };
        let ips = self
            .ip
            .iter()
            .map(|s| {
                s.parse::<std::net::IpAddr>()
                    .map_err(|_| format!("ip {s:?} is not an IPv4 or IPv6 address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for d in &self.dns {
            let wildcard = d.strip_prefix("*.").unwrap_or(d);
            check_dns("name", &wildcard.to_ascii_lowercase(), 253)
                .map_err(|_| format!("dns {d:?} is not a DNS name"))?;
        }
        if self.cn.as_deref().is_some_and(str::is_empty) || self.o.iter().any(String::is_empty) {
            return Err("cn and o may not be empty".into());
        }
        if self.cn.is_none() && self.dns.is_empty() && ips.is_empty() {
            return Err("a csr: mapping needs a subject: cn=, dns= or ip=".into());
        }
        let usages = if self.usage.is_empty() {
            default_usages(signer, key_alg).ok_or_else(|| {
                format!(
                    "signer {signer} is not one whose usages certsync knows; give them, e.g. \
                     usage=digital-signature,usage=server-auth"
                )
            })?
        } else {
            let mut usages: Vec<String> = Vec::new();
            for u in &self.usage {
                let u = u.replace('-', " ").to_ascii_lowercase();
                if !CSR_USAGES.contains(&u.as_str()) {
                    return Err(format!(
                        "usage {u:?} is not a Kubernetes key usage (known: {})",
                        CSR_USAGES.join(", ")
                    ));
                }
                if usages.contains(&u) {
                    return Err(format!("usage {u:?} is given twice"));
                }
                usages.push(u);
            }
            usages
        };
        let lifetime = self
            .lifetime
            .as_deref()
            .map(duration(600_000, YEAR * 100))
            .transpose()
            .map_err(|e| format!("lifetime: {e} (the API requires at least 10m)"))?;
        let approval_timeout = self
            .approval_timeout
            .as_deref()
            .map(duration(1000, YEAR))
            .transpose()
            .map_err(|e| format!("approval-timeout: {e}"))?
            .unwrap_or(Duration::from_secs(15 * 60));
        let renew = match &self.renew {
            Some(s) => parse_renew(s)?,
            None => (0.7, 0.9),
        };
        let ca = self
            .ca
            .as_deref()
            .map(|ca| parse_ca(ca, signer))
            .transpose()?;
        Ok(CsrSpec {
            signer: signer.to_owned(),
            common_name: self.cn.clone(),
            organizations: self.o.clone(),
            dns: self.dns.clone(),
            ips,
            key_alg,
            lifetime,
            usages,
            ca,
            renew,
            approval_timeout,
            bootstrap: self.bootstrap_kubeconfig.clone(),
            write_kubeconfig: self
                .write_kubeconfig
                .as_deref()
                .map(|f| {
                    check_file_name(f)
                        .map_err(|e| format!("write-kubeconfig: {e}"))
                        .and_then(|()| {
                            if [CERT_FILE, KEY_FILE, CA_FILE].contains(&f) {
                                Err(format!("write-kubeconfig: {f} is the pair's own file"))
                            } else {
                                Ok(f.to_owned())
                            }
                        })
                })
                .transpose()?,
        })
    }
}

/// `renew=LO-HI`: the renewal window as shares of the lifetime, as
/// fractions (`0.7-0.9`) or percentages (`70%-90%`).
pub(crate) fn parse_renew(s: &str) -> Result<(f64, f64), String> {
    let share = |p: &str| -> Option<f64> {
        let p = p.trim();
        let v = match p.strip_suffix('%') {
            Some(n) => n.parse::<f64>().ok()? / 100.0,
            None => p.parse::<f64>().ok()?,
        };
        (v > 0.0 && v < 1.0).then_some(v)
    };
    match s.split_once('-').map(|(a, b)| (share(a), share(b))) {
        Some((Some(lo), Some(hi))) if lo <= hi => Ok((lo, hi)),
        _ => Err(format!(
            "renew {s:?} is not a window LO-HI of the lifetime such as 0.7-0.9 or 70%-90% \
             (both above 0 and below 1, LO <= HI)"
        )),
    }
}

/// `ca=` of a csr: mapping: `file:PATH` (or an absolute path),
/// `configmap:NAMESPACE/NAME[/KEY]` (key `ca.crt` by default), or
/// `clustertrustbundle[:SIGNER]` (the mapping's own signer by default).
pub(crate) fn parse_ca(s: &str, signer: &str) -> Result<CaSource, String> {
    if s == "clustertrustbundle" {
        return Ok(CaSource::TrustBundles {
            signer: signer.to_owned(),
        });
    }
    if let Some(other) = s.strip_prefix("clustertrustbundle:") {
        if !other.contains('/') {
            return Err(format!(
                "ca={s}: a ClusterTrustBundle is selected by a signer name DOMAIN/PATH"
            ));
        }
        return Ok(CaSource::TrustBundles {
            signer: other.to_owned(),
        });
    }
    if let Some(path) = s.strip_prefix("file:").or(s.starts_with('/').then_some(s)) {
        if path.is_empty() {
            return Err("ca=file: needs a path".into());
        }
        return Ok(CaSource::File(PathBuf::from(path)));
    }
    if let Some(rest) = s.strip_prefix("configmap:") {
        let mut parts = rest.splitn(3, '/');
        let (namespace, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let key = parts.next().unwrap_or(CA_FILE);
        check_dns("namespace", namespace, 63)?;
        check_dns("name", name, 253)?;
        check_file_name(key).map_err(|e| format!("ca key: {e}"))?;
        return Ok(CaSource::ConfigMap {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        });
    }
    Err(format!(
        "ca {s:?}: for a csr: mapping give the signer's CA as file:PATH, \
         configmap:NAMESPACE/NAME[/KEY] or clustertrustbundle[:SIGNER]"
    ))
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
