//! The mapping grammar (`config::grammar`) is what `--sync`, the config file
//! and the check of which option goes with which kind obey.

use super::mapping::MappingSpec;
use super::*;
use crate::cli::{Cli, Command};
use crate::config::grammar::{OPTIONS, Shape, SourceKind};
use clap::Parser;

fn resolve(spec: &str) -> Result<Mapping, ConfigError> {
    let cli = Cli::try_parse_from(["certsync", "run"]).unwrap();
    let Command::Run(args) = cli.command else {
        panic!("not run")
    };
    MappingSpec::parse_flag(spec)?.resolve(&args)
}

/// `OPTION=VALUE` for any option, as `--sync` writes it.
fn given(name: &str, shape: Shape) -> String {
    match shape {
        Shape::Text(_) | Shape::List(_) => format!("{name}=x"),
        Shape::Switch => name.to_owned(),
        Shape::Id => format!("{name}=1"),
    }
}

#[test]
fn every_field_of_a_mapping_is_an_option_of_the_grammar_and_back() {
    let keys = serde_json::to_value(MappingSpec::default()).unwrap();
    let keys: Vec<&String> = keys.as_object().unwrap().keys().collect();
    for key in &keys {
        if *key != "source" && *key != "target" {
            assert!(
                OPTIONS.iter().any(|o| o.name == *key),
                "{key} is no option of the grammar"
            );
        }
    }
    for o in OPTIONS {
        assert!(keys.contains(&&o.name.to_owned()), "{} is no field", o.name);
        // Each reads into the struct in the --sync form.
        let spec = format!("dir:/a=/b,{}", given(o.name, o.shape));
        MappingSpec::parse_flag(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

/// Every option given to a kind the grammar does not list for it is
/// refused, naming the option and the kind; one it lists is not refused
/// for its kind.
#[test]
fn an_option_is_refused_by_every_kind_the_grammar_does_not_give_it() {
    let location = |k: SourceKind| match k {
        SourceKind::Dir => "dir:/a",
        SourceKind::Secret => "secret:ns/n",
        SourceKind::ConfigMap => "configmap:ns/n",
        SourceKind::Csr => "csr:example.com/x",
        SourceKind::Ca => "ca:/pki/ca",
        SourceKind::ClusterTrustBundle => "clustertrustbundle:x",
        SourceKind::Tree => "tree:ns",
    };
    let mut refused = 0;
    for o in OPTIONS {
        for kind in SourceKind::ALL
            .into_iter()
            .filter(|k| *k != SourceKind::Tree)
        {
            let spec = format!("{}=/b,{}", location(kind), given(o.name, o.shape));
            let not_for_kind = format!("{} does not apply to {}: sources", o.name, kind.name());
            let said = match resolve(&spec) {
                Err(e) => e.to_string().contains(&not_for_kind),
                Ok(_) => false,
            };
            assert_eq!(said, !o.kinds.contains(&kind), "{spec}");
            refused += usize::from(said);
        }
    }
    assert!(refused > 100, "only {refused} refusals");
}

#[test]
fn the_sync_form_reads_into_the_config_files_struct() {
    let flag = MappingSpec::parse_flag(
        "csr:example.com/x=/t,name=n,cn=c,o=a,o=b,dns=d.example,owner=7,key-mode=0600",
    )
    .unwrap();
    let file: MappingSpec = serde_yaml_ng::from_str(
        "source: csr:example.com/x\ntarget: /t\nname: n\ncn: c\no: [a, b]\n\
         dns: [d.example]\nowner: 7\nkey-mode: \"0600\"\n",
    )
    .unwrap();
    assert_eq!(flag, file);
}

#[test]
fn an_option_of_one_value_given_twice_is_refused() {
    for spec in ["dir:/a=/b,cert=x,cert=y", "dir:/a=/b,ca-only,ca-only=false"] {
        let e = MappingSpec::parse_flag(spec).unwrap_err();
        assert!(
            matches!(&e, ConfigError::At { at, .. } if *at == format!("--sync {spec:?}")),
            "{spec}: {e}"
        );
    }
    let twice = MappingSpec::parse_flag("csr:example.com/x=/t,dns=a,dns=b").unwrap();
    assert_eq!(twice.dns, ["a", "b"]);
}

#[test]
fn a_tree_refuses_what_it_sets_for_each_object() {
    for opt in ["name=x", "files=all", "optional"] {
        let spec = MappingSpec::parse_flag(&format!("tree:ns=/d,secret=s,{opt}")).unwrap();
        let e = spec.expand_tree().unwrap_err();
        assert!(matches!(e, ConfigError::Mapping { .. }), "{opt}: {e}");
    }
}

/// Every option that goes with another is refused without it, and every
/// pair an option excludes is refused together, by the grammar's columns
/// (the variant names both); with what it needs, it is not refused.
#[test]
fn what_an_option_needs_and_excludes_is_refused_as_the_grammar_says() {
    use super::options::options_apply;
    let spec = |kind: SourceKind, opts: &[&crate::config::grammar::MappingOption]| {
        let given: Vec<String> = opts.iter().map(|o| given(o.name, o.shape)).collect();
        MappingSpec::parse_flag(&format!("{}:x/y=/b,{}", kind.name(), given.join(","))).unwrap()
    };
    let option = |name: &str| crate::config::grammar::option(name).unwrap();
    let mut checked = 0;
    for o in OPTIONS {
        let kind = o.kinds[0];
        if let Some(needs) = o.needs {
            let e = options_apply(&spec(kind, &[o]), kind).unwrap_err();
            assert!(
                matches!(e, ConfigError::Needs { option, needs: n } if option == o.name && n == needs),
                "{}: {e}",
                o.name
            );
            options_apply(&spec(kind, &[o, option(needs)]), kind)
                .unwrap_or_else(|e| panic!("{} with {needs}: {e}", o.name));
            checked += 1;
        }
        for other in o.excludes {
            let e = options_apply(&spec(kind, &[o, option(other)]), kind).unwrap_err();
            assert!(
                matches!(e, ConfigError::Excludes { option, other: x } if option == o.name && x == *other),
                "{} with {other}: {e}",
                o.name
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked, 13,
        "sni, allow-non-pem, optional; files with five, cert and key with two, combined with one"
    );
}
