//! The mapping grammar (`KIND:SOURCE=TARGET[,OPTION=VALUE]...`, or the
//! same as a config file entry) → one validated [`super::Mapping`] per
//! source kind.

use super::error::ConfigError;
pub use super::grammar::MappingSpec;
use super::grammar::SourceKind;
use super::options::options_apply;
use crate::cli::{RunArgs, key_mode, parse_mode};

use std::path::{Component, Path, PathBuf};

use crate::bundle::{CA_FILE, CERT_FILE, Item, KEY_FILE, Layout, check_file_name};
use crate::reload::verify::ServingCheck;
use crate::source::ca::CaSpec;
use crate::source::csr::CsrSpec;
use crate::source::secret::{Kind, ObjectRef};
use crate::source::trust_bundle::Selection;
use crate::validate::Expect;
use crate::writer::WriterOptions;

impl MappingSpec {
    pub(crate) fn resolve(self, args: &RunArgs) -> Result<Mapping, ConfigError> {
        let name = (self.name.clone()).unwrap_or_else(|| self.target.display().to_string());
        (self.checked(name.clone(), args))
            .map_err(|problem| ConfigError::of_mapping(&name, problem))
    }

    fn checked(mut self, name: String, args: &RunArgs) -> Result<Mapping, ConfigError> {
        let source_text = self.source.clone();
        let (kind, location) = (source_text.split_once(':'))
            .and_then(|(kind, location)| Some((SourceKind::parse(kind)?, location)))
            .ok_or_else(|| ConfigError::UnknownKind {
                given: self.source.clone(),
            })?;
        options_apply(&self, kind)?;
        let source = self.read_source(kind, location)?;
        let (expect, layout, items) = self.published(kind, source.issuing())?;
        let writer = self.writer_options(args, source.issuing())?;
        let verify = self.serving_check(expect)?;
        self.paths_as_written(kind, &name)?;
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

    fn read_source(&mut self, kind: SourceKind, location: &str) -> Result<Source, ConfigError> {
        let object = |kind| {
            let (namespace, obj) =
                location
                    .split_once('/')
                    .ok_or_else(|| ConfigError::NotNamespaced {
                        given: self.source.clone(),
                    })?;
            check_dns("namespace", namespace)?;
            check_dns("name", obj)?;
            Ok::<_, ConfigError>(ObjectRef {
                kind,
                namespace: namespace.to_owned(),
                name: obj.to_owned(),
            })
        };
        let source = match kind {
            SourceKind::Dir if !location.is_empty() => Source::Dir(PathBuf::from(location)),
            SourceKind::Dir => return Err(ConfigError::NoDirectory),
            SourceKind::Secret => Source::Kube(object(Kind::Secret)?),
            SourceKind::ConfigMap => Source::Kube(object(Kind::ConfigMap)?),
            SourceKind::Csr => Source::Csr(Box::new(self.csr_spec(location)?)),
            // cert= and key= name the CA's files; what is published keeps
            // the usual names.
            SourceKind::Ca => {
                let (cert, key) = (self.cert.take(), self.key.take());
                let spec = self.ca_spec(location, cert.as_deref(), key.as_deref());
                Source::Ca(Box::new(spec?))
            }
            SourceKind::ClusterTrustBundle => {
                let selection = self.trust_bundle_selection(location);
                Source::TrustBundle(selection?)
            }
            SourceKind::Tree => return Err(ConfigError::TreeUnexpanded),
        };
        Ok(source)
    }

    /// `clustertrustbundle:NAME` or `clustertrustbundle:SIGNER` (a name
    /// with `/`, which bundle names cannot contain) and its `label=` options.
    fn trust_bundle_selection(&self, location: &str) -> Result<Selection, ConfigError> {
        if location.contains('/') {
            let labels = self
                .label
                .iter()
                .map(|l| match l.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                    _ => Err(ConfigError::LabelNotKeyValue { label: l.clone() }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Selection::Signer {
                signer: location.to_owned(),
                labels,
            });
        }
        if !self.label.is_empty() {
            return Err(ConfigError::LabelWithName);
        }
        let plain = location.replace(':', "-");
        check_dns("name", &plain)?;
        Ok(Selection::Name(location.to_owned()))
    }

    /// What the target holds: what is validated, how the files are laid
    /// out, and which source file or key each published file comes from.
    fn published(
        &self,
        kind: SourceKind,
        issuing: bool,
    ) -> Result<(Expect, Layout, Vec<Item>), ConfigError> {
        let (expect, layout, items) = if self.files.is_empty() {
            self.pem_files(kind, issuing)?
        } else {
            let (layout, items) = self.named_files()?;
            let allow_non_pem = self.allow_non_pem;
            (Expect::Files { allow_non_pem }, layout, items)
        };
        for item in &items {
            check_file_name(&item.source).map_err(|source| ConfigError::FileName {
                option: None,
                source,
            })?;
        }
        Ok((expect, layout, items))
    }

    /// Without `files=`: a pair (cert and key, or combined) and its CA, or
    /// the CA alone (combined, cert= and key= excluded by the grammar).
    fn pem_files(
        &self,
        kind: SourceKind,
        issuing: bool,
    ) -> Result<(Expect, Layout, Vec<Item>), ConfigError> {
        let ca_only = self.ca_only || kind == SourceKind::ClusterTrustBundle;
        let expect = if ca_only {
            Expect::CaOnly
        } else {
            Expect::Pair
        };
        let mut items = Vec::new();
        let layout = match &self.combined {
            Some(file) => {
                check_file_name(file).map_err(ConfigError::file_name("combined"))?;
                Layout::Combined(file.clone())
            }
            None if ca_only => Layout::Files,
            None => {
                let cert = self.cert.as_deref().unwrap_or(CERT_FILE);
                let key = self.key.as_deref().unwrap_or(KEY_FILE);
                items = vec![
                    Item::new(cert, CERT_FILE, true),
                    Item::new(key, KEY_FILE, true),
                ];
                Layout::Files
            }
        };
        // An issuing kind's ca= names the signer's CA, not a file.
        let ca_item = match issuing {
            true => CA_FILE,
            false => self.ca.as_deref().unwrap_or(CA_FILE),
        };
        items.push(Item::new(ca_item, CA_FILE, ca_only));
        Ok((expect, layout, items))
    }

    /// `files=`: every key (`all`), or the named ones, each under its own
    /// or a new name, none twice.
    fn named_files(&self) -> Result<(Layout, Vec<Item>), ConfigError> {
        if self.files.iter().any(|f| f == "all") {
            if self.files.len() > 1 {
                return Err(ConfigError::AllAndNamed);
            }
            return Ok((Layout::All, Vec::new()));
        }
        let mut items: Vec<Item> = Vec::new();
        for f in &self.files {
            let (source_name, target_name) = f.split_once(':').unwrap_or((f, f));
            check_file_name(target_name).map_err(ConfigError::file_name(&format!("files={f}")))?;
            if items.iter().any(|i| i.target == target_name) {
                let (what, value) = ("published file", target_name.to_owned());
                return Err(ConfigError::Twice { what, value });
            }
            items.push(Item::new(source_name, target_name, true));
        }
        Ok((Layout::Files, items))
    }

    /// The writer's modes and ids: the mapping's own, else the flags'.
    fn writer_options(&self, args: &RunArgs, issuing: bool) -> Result<WriterOptions, ConfigError> {
        let writer = WriterOptions {
            keep: args.keep_revisions as usize,
            cert_mode: match &self.cert_mode {
                Some(s) => parse_mode(s)?,
                None => args.cert_mode,
            },
            key_mode: match &self.key_mode {
                Some(s) => key_mode(s)?,
                None => args.key_mode,
            },
            owner: self.owner.or(args.owner),
            group: self.group.or(args.group),
            issuing,
            lock_timeout: None,
        };
        // -1 means "leave unchanged" to chown(2): never a real id.
        if writer.owner == Some(u32::MAX) || writer.group == Some(u32::MAX) {
            return Err(ConfigError::NotRealId);
        }
        Ok(writer)
    }

    /// `verify=` and `sni=`: where the consumer serves the pair.
    fn serving_check(&self, expect: Expect) -> Result<Option<ServingCheck>, ConfigError> {
        let verify = self
            .verify
            .as_deref()
            .map(|addr| ServingCheck::parse(addr, self.sni.clone()))
            .transpose()?;
        if verify.is_some() && expect == Expect::CaOnly {
            return Err(ConfigError::VerifyCaOnly);
        }
        Ok(verify)
    }

    /// The paths a mapping names, as written: `update-kubeconfig=` and
    /// `update-pair=` absolute, without `..` and outside the mapping's own
    /// target, `update-pair=` a prefix, without `.crt` or `.key`; a `ca:`
    /// mapping's target without `..`, as the kernel resolves it after
    /// symlinks where the overlap checks cannot.
    fn paths_as_written(&self, kind: SourceKind, name: &str) -> Result<(), ConfigError> {
        let dot_dot = |p: &Path| p.components().any(|c| c == Component::ParentDir);
        let copies = [
            ("update-kubeconfig", &self.update_kubeconfig),
            ("update-pair", &self.update_pair),
        ];
        for (option, path) in copies {
            let Some(path) = path else { continue };
            let problem = if !path.is_absolute() {
                ConfigError::NotAbsolute
            } else if dot_dot(path) {
                ConfigError::DotDot
            } else if path.starts_with(&self.target) {
                ConfigError::InTarget {
                    file: path.clone(),
                    target: self.target.clone(),
                    other: name.to_owned(),
                    by_inode: false,
                }
            } else if option == "update-pair"
                && (path.extension()).is_some_and(|e| e == "crt" || e == "key" || e == "pem")
            {
                ConfigError::WithExtension
            } else {
                continue;
            };
            let (path, problem) = (path.clone(), Box::new(problem));
            return Err(ConfigError::PathOf {
                option,
                path,
                problem,
            });
        }
        if kind == SourceKind::Ca && dot_dot(&self.target) {
            let (path, problem) = (self.target.clone(), Box::new(ConfigError::DotDot));
            return Err(ConfigError::PathOf {
                option: "target",
                path,
                problem,
            });
        }
        Ok(())
    }
}

/// Where a mapping's content comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Dir(PathBuf),
    /// One Secret or ConfigMap.
    Kube(ObjectRef),
    Csr(Box<CsrSpec>),
    Ca(Box<CaSpec>),
    TrustBundle(Selection),
}

/// Where a kind's Events go with `--events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventsOn {
    /// Its own object (the Secret, ConfigMap or CSR).
    Object,
    /// certsync's Pod, when `POD_NAME` and `POD_NAMESPACE` name it.
    Pod,
    /// certsync's Pod, which must be named: a CA's issuances are otherwise
    /// recorded nowhere in the cluster.
    PodRequired,
}

impl Source {
    pub fn events_on(&self) -> EventsOn {
        match self {
            Source::Kube(_) | Source::Csr(_) => EventsOn::Object,
            Source::Dir(_) | Source::TrustBundle(_) => EventsOn::Pod,
            Source::Ca(_) => EventsOn::PodRequired,
        }
    }

    /// Whether certsync makes the key and the certificate itself (and
    /// so holds them while a rollback pin does).
    pub fn issuing(&self) -> bool {
        match self {
            Source::Csr(_) | Source::Ca(_) => true,
            Source::Dir(_) | Source::Kube(_) | Source::TrustBundle(_) => false,
        }
    }
}

/// [`check_dns`] of a name that goes into an API path, refused naming
/// `at`, the flag or variable that gave it.
pub(crate) fn api_name(at: &str, what: &'static str, s: &str) -> Result<(), ConfigError> {
    check_dns(what, s).map_err(|e| ConfigError::At {
        at: at.to_owned(),
        problem: Box::new(e),
    })
}

/// Checks a Kubernetes namespace (`IsDNS1123Label`, at most 63
/// characters) or object name (`IsDNS1123Subdomain`, at most 253): no
/// object is named otherwise, so every request about it would be answered
/// 404; `what` other than "name" takes no dot.
pub(crate) fn check_dns(what: &'static str, s: &str) -> Result<(), ConfigError> {
    use crate::approve::cluster::hostport::{dns1123_label, dns1123_subdomain};
    let (ok, max) = match what {
        "name" => (dns1123_subdomain(s), 253),
        _ => (dns1123_label(s), 63),
    };
    let value = s.to_owned();
    ok.then_some(())
        .ok_or(ConfigError::Name { what, value, max })
}

/// A validated mapping: one source, one target directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub name: String,
    pub source: Source,
    /// Where the main container serves this pair, to check it after a reload.
    pub verify: Option<ServingCheck>,
    pub layout: Layout,
    /// Shared by the mapping's source and sync tasks.
    pub items: std::sync::Arc<[Item]>,
    pub expect: Expect,
    pub target: PathBuf,
    pub writer: WriterOptions,
    /// An absent object publishes no files rather than an error.
    pub optional: bool,
    /// A kubeconfig outside the target whose current-context user is kept
    /// holding the live pair, embedded.
    pub update_kubeconfig: Option<PathBuf>,
    /// `PREFIX.crt` and `PREFIX.key` kept holding the live pair.
    pub update_pair: Option<PathBuf>,
}
