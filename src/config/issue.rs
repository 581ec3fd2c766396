//! The options `csr:` and `ca:` mappings share (subject, names, key
//! algorithm, usages, lifetime, renewal window), and each kind's own.

use super::error::ConfigError;
use super::grammar::SourceKind;
use super::mapping::{MappingSpec, check_dns};
use super::options::as_written;
use crate::cli::{YEAR, duration};

use std::path::PathBuf;
use std::time::Duration;

use crate::bundle::{CA_FILE, CERT_FILE, KEY_FILE, check_file_name};
use crate::source::ca::CaSpec;
use crate::source::csr::{CaSource, CsrSpec, KeyAlg, USAGES as CSR_USAGES, default_usages};

/// The renewal window without `renew=`: 70 % to 90 % of the lifetime, as
/// kubelet rotates.
const DEFAULT_RENEW: (f64, f64) = (0.7, 0.9);

/// A `ca:` certificate lives this long unless `lifetime=` says otherwise:
/// kubeadm's `CertificateValidity` (`cmd/kubeadm/app/constants`).
const CA_DEFAULT_LIFETIME: Duration = Duration::from_secs(365 * 86_400);

impl MappingSpec {
    /// The options both kinds share, as a [`CsrSpec`] without a signer (or
    /// its CA, approval timeout, bootstrap or kubeconfig). `min_lifetime`
    /// is in ms; `no_subject`: the error when there is no cn=, dns= or ip=
    /// (`None`: allowed); `usages` are the defaults when no `usage=` is given.
    fn issue_options(
        &self,
        min_lifetime: (u64, &'static str),
        no_subject: Option<ConfigError>,
        usages: impl FnOnce(KeyAlg) -> Result<Vec<String>, ConfigError>,
    ) -> Result<CsrSpec, ConfigError> {
        let key_alg: KeyAlg = match &self.key_alg {
            Some(s) => (s.parse()).map_err(|e| ConfigError::X509("key-alg", e))?,
            None => KeyAlg::default(),
        };
        let ips = self
            .ip
            .iter()
            .map(|s| {
                s.parse::<std::net::IpAddr>()
                    .map_err(|_| ConfigError::Ip { value: s.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Each dns= a host name (or a wildcard one), held to the rule templates
        // and issued certificates are held to too (no address as a name).
        for d in &self.dns {
            crate::x509::dns_name(d).map_err(|e| ConfigError::X509("dns", e))?;
        }
        if self.cn.as_deref().is_some_and(str::is_empty) || self.o.iter().any(String::is_empty) {
            return Err(ConfigError::EmptySubject);
        }
        if let Some(e) = no_subject
            && self.cn.is_none()
            && self.dns.is_empty()
            && ips.is_empty()
        {
            return Err(e);
        }
        let usages = if self.usage.is_empty() {
            usages(key_alg)?
        } else {
            self.given_usages()?
        };
        // A leaf's usages only: refused at start, not after a request.
        crate::source::csr::leaf_usages(usages.iter().map(String::as_str))
            .map_err(ConfigError::NotLeaf)?;
        let lifetime = duration_of(&self.lifetime, "lifetime", min_lifetime, YEAR * 100)?;
        let renew = match &self.renew {
            Some(s) => parse_renew(s)?,
            None => DEFAULT_RENEW,
        };
        Ok(CsrSpec {
            signer: String::new(),
            common_name: self.cn.clone(),
            organizations: self.o.clone(),
            dns: self.dns.clone(),
            ips,
            key_alg,
            lifetime,
            usages,
            ca: None,
            renew,
            approval_timeout: Duration::ZERO,
            bootstrap: None,
            write_kubeconfig: None,
        })
    }

    /// The `usage=` values as the CSR API spells them (`-` for a space, any
    /// case), each a usage it knows, none twice.
    fn given_usages(&self) -> Result<Vec<String>, ConfigError> {
        let mut usages: Vec<String> = Vec::new();
        for u in &self.usage {
            let u = u.replace('-', " ").to_ascii_lowercase();
            if !CSR_USAGES.contains(&u.as_str()) {
                return Err(ConfigError::UnknownUsage { usage: u });
            }
            if usages.contains(&u) {
                let (what, value) = ("usage", u);
                return Err(ConfigError::Twice { what, value });
            }
            usages.push(u);
        }
        Ok(usages)
    }

    /// The `csr:SIGNER` options as a [`CsrSpec`].
    pub(crate) fn csr_spec(&self, signer: &str) -> Result<CsrSpec, ConfigError> {
        // kubernetes.io/legacy-unknown cannot be requested in certificates.k8s.io/v1.
        let named = (signer.split_once('/'))
            .is_some_and(|(domain, path)| !path.is_empty() && check_dns("name", domain).is_ok());
        if !named || signer == "kubernetes.io/legacy-unknown" {
            let signer = signer.to_owned();
            return Err(ConfigError::SignerName { signer });
        }
        let mut spec = self.issue_options(
            (600_000, " (the API requires at least 10m)"),
            Some(ConfigError::NoSubject {
                kind: SourceKind::Csr,
            }),
            |key_alg| {
                default_usages(signer, key_alg).ok_or_else(|| ConfigError::UnknownSignerUsages {
                    signer: signer.to_owned(),
                })
            },
        )?;
        spec.signer = signer.to_owned();
        let timeout = duration_of(&self.approval_timeout, "approval-timeout", (1000, ""), YEAR)?;
        spec.approval_timeout = timeout.unwrap_or(Duration::from_secs(15 * 60));
        spec.ca = self
            .ca
            .as_deref()
            .map(|ca| parse_ca(ca, signer))
            .transpose()?;
        spec.bootstrap = self.bootstrap_kubeconfig.clone();
        if let Some(f) = self.write_kubeconfig.as_deref() {
            check_file_name(f).map_err(ConfigError::file_name("write-kubeconfig"))?;
            if [CERT_FILE, KEY_FILE, CA_FILE].contains(&f) {
                let file = f.to_owned();
                return Err(ConfigError::WriteKubeconfigPair { file });
            }
        }
        spec.write_kubeconfig = self.write_kubeconfig.clone();
        Ok(spec)
    }

    /// The `ca:PREFIX` options as a [`CaSpec`]: what to issue comes from the
    /// shared options or from `template=`, never both (a subject, name or
    /// usage given two ways has no right answer).
    pub(crate) fn ca_spec(
        &self,
        prefix: &str,
        cert: Option<&str>,
        key: Option<&str>,
    ) -> Result<CaSpec, ConfigError> {
        let path = |given: Option<&str>, ext: &str, option| match given {
            Some(p) => Ok(PathBuf::from(p)),
            None if !prefix.is_empty() => Ok(PathBuf::from(format!("{prefix}.{ext}"))),
            None => Err(ConfigError::NoCaPrefix { option }),
        };
        let (ca_cert, ca_key) = (path(cert, "crt", "cert")?, path(key, "key", "key")?);
        if ca_cert == ca_key {
            return Err(ConfigError::CaSameFile { path: ca_cert });
        }
        let template = self.template.clone();
        let written = as_written(self).map_err(ConfigError::Shape)?;
        let mut given = ["cn", "o", "dns", "ip", "usage"].into_iter();
        if let (Some(_), Some(option)) = (&template, given.find(|o| written.contains_key(*o))) {
            return Err(ConfigError::TemplateAndOption { option });
        }
        let no_subject = (template.is_none()).then_some(ConfigError::NoSubject {
            kind: SourceKind::Ca,
        });
        let mut issue = self.issue_options((1000, ""), no_subject, |_| match &template {
            Some(_) => Ok(Vec::new()),
            None => Err(ConfigError::NoCaUsages),
        })?;
        issue.signer = format!("ca:{}", ca_cert.display());
        issue.lifetime = Some(issue.lifetime.unwrap_or(CA_DEFAULT_LIFETIME));
        Ok(CaSpec {
            ca_cert,
            ca_key,
            key_alg_from_template: template.is_some() && self.key_alg.is_none(),
            template,
            issue,
            keep_key: self.keep_key,
            allow_loose_ca_key: self.allow_loose_ca_key,
        })
    }
}

/// `option=`'s duration, if given: at least `min_ms` (`why`: the reason
/// for that bound) and at most `max_ms`.
fn duration_of(
    given: &Option<String>,
    option: &'static str,
    (min_ms, why): (u64, &'static str),
    max_ms: u64,
) -> Result<Option<Duration>, ConfigError> {
    let parse = duration(min_ms, max_ms);
    let refused = |source| ConfigError::Duration {
        option,
        source,
        why,
    };
    given
        .as_deref()
        .map(|s| parse(s).map_err(refused))
        .transpose()
}

/// `renew=LO-HI`: the renewal window as shares of the lifetime, as
/// fractions (`0.7-0.9`) or percentages (`70%-90%`).
pub(crate) fn parse_renew(s: &str) -> Result<(f64, f64), ConfigError> {
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
        _ => Err(ConfigError::Renew {
            value: s.to_owned(),
        }),
    }
}

/// `ca=` of a csr: mapping: `file:PATH` (or an absolute path),
/// `configmap:NAMESPACE/NAME[/KEY]` (key `ca.crt` by default), or
/// `clustertrustbundle[:SIGNER]` (the mapping's own signer by default).
pub(crate) fn parse_ca(s: &str, signer: &str) -> Result<CaSource, ConfigError> {
    if s == "clustertrustbundle" {
        return Ok(CaSource::TrustBundles {
            signer: signer.to_owned(),
        });
    }
    if let Some(other) = s.strip_prefix("clustertrustbundle:")
        && other.contains('/')
    {
        return Ok(CaSource::TrustBundles {
            signer: other.to_owned(),
        });
    }
    if let Some(path) = s.strip_prefix("file:").or(s.starts_with('/').then_some(s))
        && !path.is_empty()
    {
        return Ok(CaSource::File(PathBuf::from(path)));
    }
    if let Some(rest) = s.strip_prefix("configmap:") {
        let mut parts = rest.splitn(3, '/');
        let (namespace, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let key = parts.next().unwrap_or(CA_FILE);
        check_dns("namespace", namespace)?;
        check_dns("name", name)?;
        check_file_name(key).map_err(ConfigError::file_name("ca key"))?;
        return Ok(CaSource::ConfigMap {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        });
    }
    Err(ConfigError::CaSource {
        value: s.to_owned(),
    })
}
