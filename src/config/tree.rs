//! `tree:` mappings: cert-syncer's layout of a namespace's listed Secrets
//! and ConfigMaps, expanded into one mapping per object before any is
//! resolved.

use super::error::ConfigError;
use super::mapping::{MappingSpec, check_dns};

use std::path::PathBuf;

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
        // Elsewhere, secret= and the others are refused by the grammar.
        let Some(namespace) = self.source.strip_prefix("tree:") else {
            return Ok(vec![self]);
        };
        let err = |problem| ConfigError::of_mapping(&format!("tree:{namespace}"), problem);
        check_dns("namespace", namespace, 63).map_err(err)?;
        if !listed {
            return Err(err(ConfigError::TreeLists));
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
        // Each object's name, files=all and whether it is optional are the
        // tree's to set: one given here would be overridden without a word.
        if self.name.is_some() || !self.files.is_empty() || self.optional {
            return Err(err(ConfigError::TreeNamesItself));
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
