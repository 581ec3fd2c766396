//! `tree:` mappings: cert-syncer's layout of a namespace's listed Secrets
//! and ConfigMaps, expanded into one mapping per object before any is
//! resolved.

use super::error::ConfigError;
use super::mapping::{MappingSpec, check_dns};

impl MappingSpec {
    /// `tree:NAMESPACE=DEST,secret=A,configmap=B,optional-configmap=C`:
    /// cert-syncer's layout, `DEST/secrets/A/KEY` and
    /// `DEST/configmaps/B/KEY`, as one `files=all` mapping per object, each
    /// watched by name; optional objects leave no files while absent.
    pub(crate) fn expand_tree(mut self) -> Result<Vec<MappingSpec>, ConfigError> {
        // Elsewhere, secret= and the others are refused by the grammar.
        let Some(namespace) = self.source.strip_prefix("tree:").map(str::to_owned) else {
            return Ok(vec![self]);
        };
        let err = |problem| ConfigError::of_mapping(&format!("tree:{namespace}"), problem);
        check_dns("namespace", &namespace).map_err(err)?;
        let take = std::mem::take;
        let lists = [
            ("secret", take(&mut self.secret), false),
            ("configmap", take(&mut self.configmap), false),
            ("secret", take(&mut self.optional_secret), true),
            ("configmap", take(&mut self.optional_configmap), true),
        ];
        if lists.iter().all(|(_, names, _)| names.is_empty()) {
            return Err(err(ConfigError::TreeLists));
        }
        // Each object's name, files=all and whether it is optional are the
        // tree's to set: one given here would be overridden without a word.
        if self.name.is_some() || !self.files.is_empty() || self.optional {
            return Err(err(ConfigError::TreeNamesItself));
        }
        self.files = vec!["all".into()];
        let mut out = Vec::new();
        for (kind, names, optional) in lists {
            let dir = format!("{kind}s");
            for name in names {
                out.push(MappingSpec {
                    source: format!("{kind}:{namespace}/{name}"),
                    target: self.target.join(&dir).join(&name),
                    name: Some(format!("{namespace}/{dir}/{name}")),
                    optional,
                    ..self.clone()
                });
            }
        }
        Ok(out)
    }
}
