//! The one way certsync parses YAML from outside (a config file, a
//! kubeconfig, a ClusterConfiguration, a static pod manifest): refused before the parser sees it
//! where the parser would work more than linearly or another YAML reader
//! (kubeadm's go-yaml) would read something else.

/// Why a YAML text was refused.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// `*name`: serde_yaml_ng expands each in full (aliases of aliases).
    #[error("holds a YAML alias (*name), which certsync does not accept")]
    Alias,
    /// `!tag`: go-yaml decodes `!!binary`, certsync would read the text.
    #[error("holds a YAML tag (!tag), which certsync does not accept")]
    Tag,
    /// `<<`: go-yaml merges, certsync would read a key named `<<`.
    #[error("holds a YAML merge key (<<), which certsync does not accept")]
    MergeKey,
    /// Flow nesting deeper than `limit` ([`MAX_YAML_FLOW_DEPTH`]).
    #[error("nested deeper than {limit} levels of [ and {{; refusing to parse it")]
    TooDeep { limit: usize },
    /// A second U+FEFF after the one skipped.
    #[error("starts with more than one byte-order mark (U+FEFF)")]
    ByteOrderMarks,
    /// NEL, LS or PS (U+0085, U+2028, U+2029): a line break to libyaml and
    /// go-yaml (YAML 1.1), text to granit-parser (YAML 1.2).
    #[error(
        "holds a Unicode line break (U+0085, U+2028 or U+2029), which YAML readers split differently"
    )]
    LineBreak,
    /// The two parsers read another tree from it (YAML 1.1 and 1.2 differ):
    /// what one of them hides, the other may read as a tag or an alias.
    #[error("is read differently by two YAML parsers (YAML 1.1 and 1.2 disagree on it)")]
    ReadDifferently,
    /// Not YAML to granit-parser, which [`check_yaml`] reads it with.
    #[error("{0}")]
    Syntax(#[source] Box<granit_parser::ScanError>),
    #[error("{0}")]
    Parse(#[source] serde_yaml_ng::Error),
}

/// Deepest flow nesting (`[` and `{`) a YAML text may have: libyaml checks
/// every open flow level on every token (quadratic in the depth); no
/// config file or kubeconfig needs 32.
pub const MAX_YAML_FLOW_DEPTH: usize = 32;

/// A node as granit-parser read it (a scalar's text and whether it was
/// plain), to compare with libyaml's tree.
#[derive(Debug)]
enum Node {
    Scalar(String, bool),
    List(Vec<Node>),
    /// Keys and values in turn.
    Map(Vec<Node>),
}

/// Refuses, before libyaml sees it, what [`YamlError`] names, as a YAML
/// parser reads each node (granit-parser: safe Rust, kube-rs' own), so a
/// quote inside plain text (`note: the scheduler 's`) hides nothing after
/// it, and a tag is seen whether local (`!x`), core (`!!binary`) or verbatim
/// (`!<tag:yaml.org,2002:binary>`). Its events are read one at a time: a
/// text is refused at the first node too deep, before the rest is read.
/// What it read, each document's tree, is for [`check_documents`].
fn check_yaml(text: &str) -> Result<Vec<Node>, YamlError> {
    use granit_parser::{Event, Options, Parser, ScalarStyle, StructureStyle};
    // libyaml and go-yaml end a line where granit-parser reads on: what
    // follows one in a comment or a block scalar is hidden from this check.
    if text.contains(['\u{85}', '\u{2028}', '\u{2029}']) {
        return Err(YamlError::LineBreak);
    }
    let mut options = Options::default();
    // An alias naming no anchor is an alias too, refused as one.
    options.emit_unresolved_aliases = true;
    // Each open collection (whether flow: `[`, `{`), how many are flow, and
    // each document read.
    let (mut open, mut flow, mut docs) = (Vec::<(bool, Node)>::new(), 0usize, Vec::new());
    for event in Parser::new_from_str_with_options(text, options) {
        let node = match event.map_err(|e| YamlError::Syntax(Box::new(e)))?.0 {
            Event::Alias(_) | Event::UnresolvedAlias(_) => return Err(YamlError::Alias),
            Event::Scalar(.., Some(_))
            | Event::SequenceStart(_, _, Some(_))
            | Event::MappingStart(_, _, Some(_)) => return Err(YamlError::Tag),
            // Quoted too: the tree comparison below cannot tell a quoted `<<` from a plain one.
            Event::Scalar(value, ..) if value == "<<" => {
                return Err(YamlError::MergeKey);
            }
            // Inside `[ ]` or `{ }` libyaml and go-yaml take a `?` or `:` for
            // an indicator whatever follows it; YAML 1.2 reads on as text.
            Event::Scalar(value, ScalarStyle::Plain, ..)
                if flow > 0 && value.starts_with(['?', ':']) =>
            {
                return Err(YamlError::ReadDifferently);
            }
            Event::Scalar(value, style, ..) => {
                Node::Scalar(value.into_owned(), style == ScalarStyle::Plain)
            }
            start @ (Event::SequenceStart(..) | Event::MappingStart(..)) => {
                let (style, node) = match start {
                    Event::SequenceStart(style, ..) => (style, Node::List(Vec::new())),
                    Event::MappingStart(style, ..) => (style, Node::Map(Vec::new())),
                    _ => continue,
                };
                let is_flow = style == StructureStyle::Flow;
                flow += usize::from(is_flow);
                if flow > MAX_YAML_FLOW_DEPTH {
                    return Err(YamlError::TooDeep {
                        limit: MAX_YAML_FLOW_DEPTH,
                    });
                }
                open.push((is_flow, node));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop() {
                Some((is_flow, node)) => {
                    flow -= usize::from(is_flow);
                    node
                }
                None => continue,
            },
            _ => continue,
        };
        match open.last_mut() {
            Some((_, Node::List(items) | Node::Map(items))) => items.push(node),
            _ => docs.push(node),
        }
    }
    Ok(docs)
}

/// YAML from outside read as `T` after [`check_yaml`]. One leading
/// byte-order mark is skipped, as go-yaml (kubeadm, kubectl) skips it
/// (serde_yaml_ng reads a second document); a second one is refused, as
/// kubeadm refuses it.
pub fn parse_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.starts_with('\u{feff}') {
        return Err(YamlError::ByteOrderMarks);
    }
    check_documents(text)?;
    serde_yaml_ng::from_str(text).map_err(YamlError::Parse)
}

/// [`check_yaml`], then libyaml's own tree of each document must be
/// granit-parser's (the same shape, keys and texts; a tag libyaml kept is
/// no match), so where the two parsers read a text differently, it is
/// refused.
pub fn check_documents(text: &str) -> Result<(), YamlError> {
    use serde::Deserialize;
    let mut read = check_yaml(text)?.into_iter();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let doc = serde_yaml_ng::Value::deserialize(doc).map_err(YamlError::Parse)?;
        // An empty text is one empty document to libyaml, none to granit.
        let theirs = read.next().unwrap_or(Node::Scalar(String::new(), true));
        if !same(&theirs, &doc) {
            return Err(YamlError::ReadDifferently);
        }
    }
    match read.next() {
        Some(_) => Err(YamlError::ReadDifferently),
        None => Ok(()),
    }
}

/// Whether libyaml read `v` where granit-parser read `n`.
fn same(n: &Node, v: &serde_yaml_ng::Value) -> bool {
    use serde_yaml_ng::Value;
    match (n, v) {
        (Node::List(items), Value::Sequence(s)) => {
            items.len() == s.len() && items.iter().zip(s).all(|(n, v)| same(n, v))
        }
        (Node::Map(kv), Value::Mapping(m)) => {
            kv.len() == 2 * m.len()
                && (kv.chunks(2).zip(m)).all(|(n, (k, v))| same(&n[0], k) && same(&n[1], v))
        }
        (Node::Scalar(text, _), Value::String(s)) => text == s,
        // A plain scalar libyaml resolved (a number, a bool, null): its text
        // alone resolves to the same.
        (Node::Scalar(text, true), v) => {
            serde_yaml_ng::from_str::<Value>(text).is_ok_and(|t| t == *v)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{YamlError, check_yaml, parse_yaml};

    #[test]
    fn attack_a_merge_key_or_tag_after_a_quote_inside_plain_text_is_refused() {
        let opened = "note: the scheduler 's\n";
        for (text, merge) in [
            (
                format!("{opened}apiServer:\n  <<: {{certSANs: [a]}}\n"),
                true,
            ),
            (format!("{opened}apiServer:\n  !x certSANs: [a]\n"), false),
            (format!("{opened}apiServer:\n  certSANs: [!x a]\n"), false),
        ] {
            let e = parse_yaml::<serde_yaml_ng::Value>(&text);
            let want = |e: &YamlError| match merge {
                true => matches!(e, YamlError::MergeKey),
                false => matches!(e, YamlError::Tag),
            };
            assert!(e.as_ref().is_err_and(want), "{text}: {e:?}");
        }
        parse_yaml::<serde_yaml_ng::Value>(opened).expect("the note alone");
    }

    /// A core or verbatim tag leaves no trace in libyaml's tree (go-yaml decodes
    /// `!!binary`: `--tls-cert-file=/etc/evil` in a manifest's command), so a
    /// quote inside plain text before it must not hide it.
    #[test]
    fn attack_a_core_or_verbatim_tag_after_a_quote_inside_plain_text_is_refused() {
        let opened = "note: the scheduler 's\n";
        for tagged in [
            "command:\n- !!binary LS10bHMtY2VydC1maWxlPS9ldGMvZXZpbA==\n",
            "command:\n- !<tag:yaml.org,2002:binary> LS10bHMtY2VydC1maWxlPS9ldGMvZXZpbA==\n",
            "certSANs: [!!str a]\n",
        ] {
            let text = format!("{opened}{tagged}");
            let e = parse_yaml::<serde_yaml_ng::Value>(&text);
            assert!(matches!(e, Err(YamlError::Tag)), "{text}: {e:?}");
        }
    }

    #[test]
    fn aliases_and_deep_flow_nesting_are_refused_quoted_text_is_not() {
        assert!(matches!(
            check_yaml("a: &x [1]\nb: *x\n"),
            Err(YamlError::Alias)
        ));
        assert!(matches!(check_yaml("b: [*x]\n"), Err(YamlError::Alias)));
        // What go-yaml (kubeadm) reads and certsync's reader would not.
        for other in [
            "apiServer: {<<: {certSANs: [\"192.168.1.98\"]}}\n",
            "apiServer:\n  <<:\n    certSANs: [a]\n",
        ] {
            let e = check_yaml(other);
            assert!(matches!(e, Err(YamlError::MergeKey)), "{other}: {e:?}");
        }
        for other in [
            "certSANs: [!!binary MTkyLjE2OC4xLjEwMg==]\n",
            "a: !custom x\n",
        ] {
            let e = check_yaml(other);
            assert!(matches!(e, Err(YamlError::Tag)), "{other}: {e:?}");
        }
        let deep = check_yaml(&format!("{}{}", "[".repeat(33), "]".repeat(33)));
        assert!(
            matches!(deep, Err(YamlError::TooDeep { limit: 32 })),
            "{deep:?}"
        );
        assert!(check_yaml(&"[".repeat(33)).is_err(), "never closed");
        assert!(check_yaml(&format!("{}{}", "[".repeat(32), "]".repeat(32))).is_ok());
        for fine in [
            "a: \"*x [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"\n",
            "a: '*x {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{'\n",
            "# *x [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\na: /etc/*.crt\n",
            "mappings:\n  - \"secret:ns/n=/x\"\n",
            "a: \"!!binary <<\"\nb: x!y<<z\n",
        ] {
            assert!(check_yaml(fine).is_ok(), "{fine}");
        }
    }

    /// A ClusterConfiguration that starts
    /// with a UTF-8 byte-order mark is read by kubeadm (go-yaml, under
    /// sigs.k8s.io/yaml, skips it: checked with kubeadm v1.36.2, the
    /// certSAN was in the certificate) and was refused by certsync as
    /// "more than one document". One leading mark is skipped, as go-yaml
    /// skips it; a second one is refused, naming it (kubeadm v1.36.2
    /// refuses that text too: "kind and apiVersion is mandatory").
    #[test]
    fn one_leading_byte_order_mark_is_read_as_go_yaml_reads_it() {
        let text = "kind: ClusterConfiguration\napiServer:\n  certSANs:\n  - 192.168.1.117\n";
        let plain: serde_yaml_ng::Value = super::parse_yaml(text).unwrap();
        let marked: serde_yaml_ng::Value = super::parse_yaml(&format!("\u{feff}{text}")).unwrap();
        assert_eq!(marked, plain);
        let twice = super::parse_yaml::<serde_yaml_ng::Value>(&format!("\u{feff}\u{feff}{text}"));
        assert!(matches!(twice, Err(YamlError::ByteOrderMarks)), "{twice:?}");
    }

    /// libyaml and go-yaml (YAML 1.1: kubeadm, the kubelet, client-go) end a
    /// line at NEL, LS and PS (U+0085, U+2028, U+2029); granit-parser (YAML
    /// 1.2) reads them as text. What follows one inside a comment is still
    /// the comment to granit and the next line to libyaml and go-yaml: a core
    /// tag there (`!!binary`: kubeadm reads `apiServer.certSANs:
    /// [evil.test]`, the kubelet a `--tls-cert-file` flag, certsync a key or
    /// an item in base64), an alias, or flow nesting past 32 (what libyaml
    /// reads in quadratic time) passes check_yaml and libyaml's tree check.
    #[test]
    fn attack_a_line_separator_inside_a_comment_hides_a_tag_an_alias_or_deep_nesting() {
        use serde_yaml_ng::Value;
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        let mut read = Vec::new();
        for sep in ['\u{85}', '\u{2028}', '\u{2029}'] {
            let sans = format!("apiServer: # note{sep}  !!binary Y2VydFNBTnM=: [evil.test]\n");
            // libyaml (certsync's reader) reads the line after the separator:
            // a key it leaves in base64, which go-yaml decodes to certSANs.
            let libyaml: Value = serde_yaml_ng::from_str(&sans).expect("libyaml reads it");
            assert_eq!(libyaml["apiServer"]["Y2VydFNBTnM="][0], "evil.test");
            for hidden in [
                sans,
                format!(
                    "command:\n- kube-apiserver # note{sep}\
                     - !!binary LS10bHMtY2VydC1maWxlPS9ldGMvZXZpbA==\n"
                ),
                format!("a: &x 1 # note{sep}b: *x\n"),
                // Not only in a comment: a literal block scalar's text too.
                format!("a: |\n  text{sep}b: !!binary Y2VydFNBTnM=\n"),
                format!("a: 1 # note{sep}b: {deep}\n"),
            ] {
                if let Ok(v) = parse_yaml::<Value>(&hidden) {
                    read.push(format!("{hidden:?} read as {v:?}"));
                }
            }
        }
        assert!(read.is_empty(), "{read:#?}");
    }

    /// Inside `[ ]` or `{ }` libyaml and go-yaml take `?` for the key
    /// indicator whatever follows it; granit-parser (YAML 1.2) reads `?`
    /// followed by a non-space as the start of plain text. So in
    /// `{?!!binary Y2VydFNBTnM=: [evil.test]}` granit sees the key
    /// `?!!binary Y2VydFNBTnM=` (no tag), libyaml resolves the core tag and
    /// leaves the key `Y2VydFNBTnM=` (no trace in its tree), and go-yaml
    /// (kubeadm) decodes it: `apiServer.certSANs: [evil.test]`, which
    /// certsync's approver does not see. An alias hides the same way.
    #[test]
    fn attack_a_question_mark_inside_flow_hides_a_core_tag_or_an_alias() {
        use serde_yaml_ng::Value;
        let sans = "apiServer: {?!!binary Y2VydFNBTnM=: [evil.test]}\n";
        let libyaml: Value = serde_yaml_ng::from_str(sans).expect("libyaml reads it");
        assert_eq!(libyaml["apiServer"]["Y2VydFNBTnM="][0], "evil.test");
        let mut read = Vec::new();
        for hidden in [
            sans,
            "apiServer: {certSANs: [a.test], ?!<tag:yaml.org,2002:binary> Y2VydFNBTnM=: [evil.test]}\n",
            "command: [kube-apiserver, ?!!binary LS10bHMtY2VydC1maWxlPS9ldGMvZXZpbA==]\n",
            "a: &a [x]\nb: {?*a : 1}\n",
        ] {
            if let Ok(v) = parse_yaml::<Value>(hidden) {
                read.push(format!("{hidden:?} read as {v:?}"));
            }
        }
        assert!(read.is_empty(), "{read:#?}");
    }

    /// granit-parser (YAML 1.2) takes `:` into an anchor's name (`&a:`);
    /// libyaml and go-yaml end the name at `:`, which inside `[ ]` or `{ }`
    /// is then the value indicator. So `[&a:!!binary Zm9v]` is one anchored
    /// empty text to granit, and a pair whose value carries a core tag
    /// (resolved by libyaml without a trace, decoded by go-yaml) to the
    /// others; `[&a:*x]` hides an alias the same way.
    #[test]
    fn attack_an_anchor_name_ending_in_a_colon_hides_a_core_tag_or_an_alias() {
        use serde_yaml_ng::Value;
        let mut read = Vec::new();
        for hidden in [
            "a: [&a:!!binary Zm9v]\n",
            "a: {x: 1, &a:!<tag:yaml.org,2002:binary> Zm9v}\n",
            "a: &x 1\nb: [&a:*x]\n",
        ] {
            if let Ok(v) = parse_yaml::<Value>(hidden) {
                read.push(format!("{hidden:?} read as {v:?}"));
            }
        }
        assert!(read.is_empty(), "{read:#?}");
    }

    /// A quoted text continued on a line indented less than its key (a
    /// person wrapping a long value by hand) is folded by libyaml and go-yaml
    /// but is not YAML 1.2, and granit-parser refuses it: certsync refuses it
    /// too, naming the line, rather than judge a text on one parser's reading.
    /// The wrapping go-yaml's own writer produces (continued deeper than the
    /// key, `\` before a leading space) is read.
    #[test]
    fn quoted_text_continued_below_its_keys_indentation_is_refused_naming_the_line() {
        use serde_yaml_ng::Value;
        let emitted =
            "apiServer:\n  extraArgs:\n    x: \"a long value\\\n      \\ wrapped by go-yaml\"\n";
        let v: Value = parse_yaml(emitted).expect("go-yaml's wrapping is read");
        assert_eq!(
            v["apiServer"]["extraArgs"]["x"],
            "a long value wrapped by go-yaml"
        );
        for text in [
            "apiServer:\n  extraArgs:\n    x: \"a long value\nwrapped by hand\"\n",
            "apiServer:\n  extraArgs:\n    x: 'a long value\n  wrapped by hand'\n",
        ] {
            let e = parse_yaml::<Value>(text);
            assert!(
                matches!(&e, Err(YamlError::Syntax(s)) if s.marker().line() == 4),
                "{text:?}: {e:?}"
            );
        }
    }
}
