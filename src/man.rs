//! Man pages, made from the same clap definitions as `--help`: certsync(1)
//! and one page per subcommand (certsync-run(1), certsync-csr-review(1),
//! ...), so that every page a page names exists. clap_mangen renders each
//! page; this module decides which pages there are and adds SEE ALSO.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap_mangen::roff::{Roff, roman};

#[derive(Debug, thiserror::Error)]
pub enum ManError {
    #[error("no man page for {name:?}; there are pages for: {known}")]
    Unknown { name: String, known: String },
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One page: the subcommand path (`["csr", "review"]`) and its command.
struct Page {
    path: Vec<String>,
    cmd: clap::Command,
}

impl Page {
    /// `certsync-csr-review`, the page's title and file stem: the display
    /// name [`pages`] had clap give it (the top page has none: its name).
    fn name(&self) -> String {
        let cmd = &self.cmd;
        cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned()
    }
}

/// Every page, the top one first, then depth-first in definition order.
fn pages() -> Vec<Page> {
    // clap adds a `help` subcommand to every command with subcommands; it
    // has no page of its own, so it must not be listed as if it had (the
    // setting is propagated to every subcommand).
    let mut root = crate::config::command().disable_help_subcommand(true);
    // Sets every subcommand's display name (`certsync-run`), which
    // clap_mangen uses for titles and the names it lists.
    root.build();
    let mut out = Vec::new();
    collect(&root, Vec::new(), &mut out);
    out
}

fn collect(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<Page>) {
    out.push(Page {
        path: path.clone(),
        cmd: cmd.clone(),
    });
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut p = path.clone();
        p.push(sub.get_name().to_owned());
        collect(sub, p, out);
    }
}

/// The roff text of `page`: clap_mangen's page and a SEE ALSO section
/// naming the top page, the parent and the subcommands (the top: all).
fn render(page: &Page, all: &[Page]) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = clap_mangen::Man::new(page.cmd.clone())
        .title(page.name())
        // The footer: the program and version, not the subcommand's name.
        .source(format!("certsync {}", env!("CARGO_PKG_VERSION")))
        .render(&mut out);
    // clap_mangen heads a command's after-help (the mapping grammar and
    // examples) "EXTRA"; man-pages(7) calls that NOTES.
    let out = String::from_utf8_lossy(&out).replace("\n.SH EXTRA\n", "\n.SH NOTES\n");
    let mut out = out.into_bytes();
    let related: Vec<String> = all
        .iter()
        .filter(|other| {
            let (a, b) = (&page.path, &other.path);
            a != b
                && (a.is_empty()
                    || b.is_empty()
                    || (b.len() + 1 == a.len() && a.starts_with(b))
                    || (a.len() + 1 == b.len() && b.starts_with(a)))
        })
        .map(|p| format!("{}(1)", p.name()))
        .collect();
    let mut roff = Roff::default();
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(related.join(", "))]);
    out.extend_from_slice(roff.to_roff().as_bytes());
    out
}

/// The page of the subcommand `path` (empty: certsync(1)).
pub fn page(path: &[String]) -> Result<Vec<u8>, ManError> {
    let all = pages();
    match all.iter().find(|p| p.path == path) {
        Some(p) => Ok(render(p, &all)),
        None => Err(ManError::Unknown {
            name: path.join(" "),
            known: all
                .iter()
                .filter(|p| !p.path.is_empty())
                .map(|p| p.path.join(" "))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Writes every page into `dir` (created if missing) as `NAME.1`.
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>, ManError> {
    let fail = |path: &Path| {
        let path = path.to_owned();
        move |source| ManError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(fail(dir))?;
    let all = pages();
    let mut written = Vec::new();
    for p in &all {
        let path = dir.join(format!("{}.1", p.name()));
        let mut f = std::fs::File::create(&path).map_err(fail(&path))?;
        f.write_all(&render(p, &all)).map_err(fail(&path))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn see_also_names_the_top_page_the_parent_and_the_children() {
        let all = pages();
        let names: Vec<String> = all.iter().map(Page::name).collect();
        assert!(
            names.contains(&"certsync-csr-review".to_owned()),
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n.ends_with("-help")), "{names:?}");
        let text = |path: &[&str]| {
            let path: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
            let roff = String::from_utf8(page(&path).unwrap()).unwrap();
            let see = roff.split(".SH \"SEE ALSO\"").nth(1).unwrap().to_owned();
            see.replace("\\-", "-")
        };
        let review = text(&["csr", "review"]);
        assert_eq!(review.trim(), "certsync(1), certsync-csr(1)");
        let csr = text(&["csr"]);
        assert_eq!(csr.trim(), "certsync(1), certsync-csr-review(1)");
        let run = text(&["run"]);
        assert_eq!(run.trim(), "certsync(1)");
        let run_page = String::from_utf8(page(&["run".to_owned()]).unwrap()).unwrap();
        assert!(
            run_page.contains("\n.SH NOTES\n") && !run_page.contains(".SH EXTRA"),
            "the mapping grammar under NOTES"
        );
        assert!(matches!(
            page(&["nosuch".to_owned()]),
            Err(ManError::Unknown { .. })
        ));
    }
}
