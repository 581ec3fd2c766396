//! Operator commands: `certsync check` (an expiry report in the spirit of
//! `kubeadm certs check-expiration`) and `certsync revisions` only read;
//! `certsync rollback` restores an earlier revision through the writer.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::validate::{self, Leaf};
use crate::writer::Writer;

mod error;
mod read;

pub use error::InspectError;
use read::Input;

/// Output format of the reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns; `check` shows the few that fit 80 columns.
    Table,
    /// Every column in full.
    Wide,
    Json,
    Yaml,
}

/// Whether a certificate's key was found and matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum KeyStatus {
    Matches,
    Mismatch,
    /// A CA certificate: no key expected.
    NotApplicable,
    Missing,
    #[default]
    Unreadable,
}

/// One certificate in a `check` report.
#[derive(Debug, Clone, Serialize, Default)]
pub struct CertReport {
    pub certificate: PathBuf,
    pub subject: String,
    pub sans: Vec<String>,
    pub expires: String,
    pub residual: String,
    pub residual_seconds: i64,
    pub issuer: String,
    pub key: KeyStatus,
    /// Why this line fails the check, if it does.
    pub problem: Option<String>,
}

impl CertReport {
    /// A line for a file whose certificate could not be read, saying why.
    fn unreadable(certificate: PathBuf, problem: String) -> Self {
        Self {
            certificate,
            problem: Some(problem),
            ..Self::default()
        }
    }
}

/// `364d`, `5h`, `expired 3d ago`: the residual time as kubeadm shows it.
fn residual(seconds: i64) -> String {
    let abs = seconds.unsigned_abs();
    let text = match abs {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3_600 => format!("{}h", s / 3_600),
        s => format!("{}m", s / 60),
    };
    if seconds < 0 {
        format!("expired {text} ago")
    } else {
        text
    }
}

/// Builds the expiry report for `paths`. A line fails if its certificate
/// cannot be read, expires within `warn_within`, or its key does not match.
pub fn check(paths: &[PathBuf], warn_within: Duration) -> Result<Vec<CertReport>, InspectError> {
    let now = validate::unix_seconds(SystemTime::now());
    let warn = i64::try_from(warn_within.as_secs()).unwrap_or(i64::MAX);
    let mut out = Vec::new();
    for path in paths {
        if path.extension().is_some_and(|e| e == "conf") && path.is_file() {
            out.push(kubeconfig_line(path, now, warn));
            continue;
        }
        // A directory's `*.crt`/`*.pem`, or one file, each with the key
        // file named after it, if any ([`read`]).
        let listed = read::directory(path).map_err(|problem| problem.at(path))?;
        let one = || vec![(Input::named(path), read::key_beside(path))];
        for (cert, key) in listed.unwrap_or_else(one) {
            let pem = match cert.read() {
                Ok(pem) => pem,
                Err(problem) => {
                    out.push(CertReport::unreadable(cert.shown, problem.to_string()));
                    continue;
                }
            };
            let Some(leaf) = judged_certificate(&pem, key.is_some()) else {
                out.push(CertReport::unreadable(
                    cert.shown,
                    "no certificate could be parsed".into(),
                ));
                continue;
            };
            // The key named after the certificate, else the certificate
            // itself when it holds one (a combined PEM).
            let key_pem = match &key {
                Some(k) => Some(k.read().map_err(|e| format!("{}: {e}", k.shown.display()))),
                None => crate::pem::find(&pem, b"PRIVATE KEY-----")
                    .is_some()
                    .then(|| Ok(pem.clone())),
            };
            let (key_status, why) = match (key_pem, leaf.is_ca) {
                (None, true) => (KeyStatus::NotApplicable, None),
                (None, false) => (KeyStatus::Missing, None),
                (Some(Ok(kp)), _) => key_status(&pem, &kp),
                (Some(Err(why)), _) => (KeyStatus::Unreadable, Some(why)),
            };
            let mut line = report_line(cert.shown, &leaf, key_status, now, warn);
            if let (Some(why), Some(problem)) = (why, line.problem.as_mut())
                && key_status == KeyStatus::Unreadable
            {
                *problem = format!("{problem}: {why}");
            }
            out.push(line);
        }
    }
    Ok(out)
}

/// The certificate a file is judged by: its first (a chain's leaf), except
/// in a trust bundle (CAs only, no key): [`validate::bundle_judged_by`].
fn judged_certificate(pem: &[u8], has_key_file: bool) -> Option<Leaf> {
    let first = validate::leaf_of(pem)?;
    if has_key_file || !first.is_ca || crate::pem::find(pem, b"PRIVATE KEY-----").is_some() {
        return Some(first);
    }
    validate::bundle_judged_by(pem).or(Some(first))
}

/// A kubeconfig (kubeadm's `admin.conf`): the certificate embedded for its
/// current context's user, its key checked against it.
fn kubeconfig_line(path: &Path, now: i64, warn: i64) -> CertReport {
    let unreadable = |problem: String| CertReport::unreadable(path.to_owned(), problem);
    // Read as a certificate is: admin.conf is root's 0600, with a key.
    let read = Input::named(path)
        .read()
        .map_err(|e| e.to_string())
        .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned()));
    let (pem, key) = match read
        .and_then(|text| crate::writer::embedded_pair(&text).map_err(|e| e.to_string()))
    {
        Ok(pair) => pair,
        Err(problem) => return unreadable(problem),
    };
    let Some(leaf) = validate::leaf_of(&pem) else {
        return unreadable("no certificate could be parsed".into());
    };
    let key = key.map_or(KeyStatus::Missing, |k| key_status(&pem, &k).0);
    report_line(path.to_owned(), &leaf, key, now, warn)
}

/// Whether `key` is the key of the certificate `pem`, or why not told.
fn key_status(pem: &[u8], key: &[u8]) -> (KeyStatus, Option<String>) {
    match validate::key_matches(pem, key) {
        Ok(true) => (KeyStatus::Matches, None),
        Ok(false) => (KeyStatus::Mismatch, None),
        Err(e) => (KeyStatus::Unreadable, Some(e.to_string())),
    }
}

fn report_line(cert: PathBuf, leaf: &Leaf, key: KeyStatus, now: i64, warn: i64) -> CertReport {
    let left = leaf.not_after - now;
    let problem = if left < 0 {
        Some("expired".to_owned())
    } else if left < warn {
        Some(format!("expires within {}", residual(warn)))
    } else if key == KeyStatus::Mismatch {
        Some("the key does not match the certificate".into())
    } else if key == KeyStatus::Unreadable {
        Some("the key cannot be read".into())
    } else {
        None
    };
    CertReport {
        certificate: cert,
        subject: leaf.subject.clone(),
        sans: leaf.sans.clone(),
        expires: validate::rfc3339(leaf.not_after),
        residual: residual(left),
        residual_seconds: left,
        issuer: leaf.issuer.clone(),
        key,
        problem,
    }
}

/// One revision in a `revisions` report.
#[derive(Debug, Clone, Serialize)]
pub struct RevisionReport {
    pub revision: u64,
    pub hash: String,
    pub current: bool,
    /// The live revision is held by a rollback pin (`certsync rollback`):
    /// a `ca:` or `csr:` mapping issues nothing over it.
    pub pinned: bool,
    pub not_after: Option<String>,
    pub serial: Option<String>,
    pub subject: Option<String>,
}

/// The writer of `target`. A target another user may write or re-create
/// is refused, as `run` refuses it: whoever may change it chooses what its
/// history holds (root's key hard-linked there), which root would read,
/// print or restore.
fn guarded_writer(target: &Path) -> Result<Writer, InspectError> {
    crate::files::no_other_user_may_write(target)
        .map_err(|p| InspectError::TargetWritable(p).at(target))?;
    crate::files::no_other_user_may_recreate(target)
        .map_err(|p| InspectError::TargetRecreatable(p).at(target))?;
    Ok(Writer::existing(target)?)
}

/// The revisions of a target, newest first.
pub fn revisions(target: &Path) -> Result<Vec<RevisionReport>, InspectError> {
    let writer = guarded_writer(target)?;
    let pinned = writer.pin().is_some();
    let revisions = writer.revisions()?;
    if revisions.is_empty() {
        // An empty table and exit 0 read as "a target with no history".
        return Err(InspectError::NotTarget.at(target));
    }
    Ok(revisions
        .into_iter()
        .map(|r| {
            let leaf = r.content.ok().and_then(|b| validate::leaf_of_bundle(&b));
            RevisionReport {
                revision: r.revision,
                hash: r.hash,
                current: r.current,
                pinned: pinned && r.current,
                not_after: leaf.as_ref().map(|l| validate::rfc3339(l.not_after)),
                serial: leaf.as_ref().map(|l| l.serial.clone()),
                subject: leaf.map(|l| l.subject),
            }
        })
        .collect())
}

/// Rolls `target` back to history revision `to` (default: the previous
/// one), refusing content that would not pass validation now.
pub fn rollback(target: &Path, to: Option<u64>) -> Result<crate::writer::RolledBack, InspectError> {
    let writer = guarded_writer(target)?;
    let check = |b: &crate::bundle::Bundle| {
        let expect = if b.get(crate::bundle::KEY_FILE).is_some() {
            validate::Expect::Pair
        } else {
            validate::Expect::CaOnly
        };
        let policy = validate::Policy {
            expect,
            now: SystemTime::now(),
            clock_skew: Duration::from_secs(300),
            // A revision certsync wrote, of any mapping.
            max_size: validate::MAX_PUBLISHED_SIZE,
        };
        validate::validate(b, &policy).map(|_| ())
    };
    Ok(writer.rollback(to, check)?)
}

/// A terminal's width when nobody set one: `check`'s table fits it.
const TERMINAL_COLUMNS: usize = 80;

/// One table column: its header, and its cell of a row.
pub type Column<T> = (&'static str, fn(&T) -> String);

/// `check`'s report: a table of its narrow columns (`-o wide` adds
/// subject, SANs, issuer), each line at most [`TERMINAL_COLUMNS`] (the
/// certificate's path shortened from the left, the status from the
/// right); `wide`, JSON and YAML in full.
pub fn render_check(rows: &[CertReport], output: Output) -> Result<String, InspectError> {
    if output != Output::Table {
        return render(rows, output, CHECK_COLUMNS, None);
    }
    let narrow = [0, 4, 6, 7].map(|c| CHECK_COLUMNS[c]);
    render(rows, output, &narrow, Some(TERMINAL_COLUMNS))
}

/// Shortens `cell` to `width` characters: a path keeps its end, anything
/// else its start.
fn shorten(cell: &str, width: usize, keep_end: bool) -> String {
    let n = cell.chars().count();
    if n <= width {
        return cell.to_owned();
    }
    let keep = width.saturating_sub(3);
    if keep_end {
        format!("...{}", cell.chars().skip(n - keep).collect::<String>())
    } else {
        format!("{}...", cell.chars().take(keep).collect::<String>())
    }
}

/// Column widths within `max`: the first column (a path), then the last,
/// give up what is over, down to a readable minimum.
fn fit_widths(mut widths: Vec<usize>, max: usize) -> Vec<usize> {
    const MIN: usize = 16;
    let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
    let last = widths.len().saturating_sub(1);
    for c in [0, last] {
        let over = total(&widths).saturating_sub(max);
        if over > 0 && widths[c] > MIN {
            widths[c] -= over.min(widths[c] - MIN);
        }
    }
    widths
}

/// Renders rows as an aligned table of `columns` (`wide` the same), each
/// line fitted within `max` columns if given, or as JSON or YAML.
pub fn render<T: Serialize>(
    rows: &[T],
    output: Output,
    columns: &[Column<T>],
    max: Option<usize>,
) -> Result<String, InspectError> {
    match output {
        Output::Json => serde_json::to_string_pretty(rows)
            .map(|s| s + "\n")
            .map_err(|e| InspectError::Encode(e.into())),
        Output::Yaml => serde_yaml_ng::to_string(rows).map_err(|e| InspectError::Encode(e.into())),
        Output::Table | Output::Wide => {
            let mut table: Vec<Vec<String>> = vec![columns.iter().map(|c| c.0.into()).collect()];
            // Subjects and names come from whoever wrote the certificate:
            // no terminal escapes, no newline forging a row.
            table.extend(rows.iter().map(|r| {
                (columns.iter())
                    .map(|(_, cell)| crate::escape(&cell(r)).into_owned())
                    .collect::<Vec<_>>()
            }));
            let widths: Vec<usize> = (0..columns.len())
                .map(|c| {
                    table
                        .iter()
                        .map(|r| r[c].chars().count())
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let widths = match max {
                Some(max) => fit_widths(widths, max),
                None => widths,
            };
            let mut out = String::new();
            for row in table {
                let line: Vec<String> = row
                    .iter()
                    .zip(&widths)
                    .enumerate()
                    .map(|(c, (cell, w))| format!("{:<w$}", shorten(cell, *w, c == 0)))
                    .collect();
                out.push_str(line.join("  ").trim_end());
                out.push('\n');
            }
            Ok(out)
        }
    }
}

/// The table columns of a `check` line; the narrow table (`-o wide`
/// adds subject, SANs, issuer) has the first, fifth, seventh and last.
const CHECK_COLUMNS: &[Column<CertReport>; 8] = &[
    ("CERTIFICATE", |r| r.certificate.display().to_string()),
    ("SUBJECT", |r| r.subject.clone()),
    ("SANS", |r| r.sans.join(",")),
    ("EXPIRES", |r| r.expires.clone()),
    ("RESIDUAL TIME", |r| r.residual.clone()),
    ("ISSUER", |r| r.issuer.clone()),
    ("KEY", |r| {
        match r.key {
            KeyStatus::Matches => "matches",
            KeyStatus::Mismatch => "MISMATCH",
            KeyStatus::NotApplicable => "n/a (CA)",
            KeyStatus::Missing => "no key",
            KeyStatus::Unreadable => "unreadable",
        }
        .into()
    }),
    ("STATUS", |r| {
        r.problem.clone().unwrap_or_else(|| "ok".into())
    }),
];

/// The table columns of a `revisions` line.
pub const REVISION_COLUMNS: &[Column<RevisionReport>] = &[
    ("REVISION", |r| {
        let mark = match (r.current, r.pinned) {
            (true, true) => " * pinned",
            (true, false) => " *",
            _ => "",
        };
        format!("{}{mark}", r.revision)
    }),
    ("HASH", |r| r.hash.clone()),
    ("NOT AFTER", |r| {
        r.not_after.clone().unwrap_or_else(|| "-".into())
    }),
    ("SERIAL", |r| r.serial.clone().unwrap_or_else(|| "-".into())),
    ("SUBJECT", |r| {
        r.subject.clone().unwrap_or_else(|| "-".into())
    }),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// An intermediate CA that has ended, then the root that issued it
    /// (a Secret's `ca.crt` chain, no key beside): what it issued no
    /// longer verifies, and check must not call the file healthy.
    #[test]
    fn an_ended_intermediate_is_not_hidden_by_its_root() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let now = time::OffsetDateTime::now_utc();
        let root_key = KeyPair::generate().unwrap();
        let mut rp = CertificateParams::new(Vec::<String>::new()).unwrap();
        rp.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        rp.not_before = now - time::Duration::days(400);
        rp.not_after = now + time::Duration::days(3650);
        let root = rp.self_signed(&root_key).unwrap();
        let int_key = KeyPair::generate().unwrap();
        let mut ip = CertificateParams::new(Vec::<String>::new()).unwrap();
        ip.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ip.not_before = now - time::Duration::days(365);
        ip.not_after = now - time::Duration::days(1);
        let issuer = Issuer::new(rp, &root_key);
        let int = ip.signed_by(&int_key, &issuer).unwrap();
        let chain = [int.pem(), root.pem()].concat();
        let judged = judged_certificate(chain.as_bytes(), false).unwrap();
        eprintln!(
            "judged by notAfter {} (now {})",
            judged.not_after,
            now.unix_timestamp()
        );
        assert!(
            judged.not_after < now.unix_timestamp(),
            "the ended intermediate hidden"
        );
    }

    #[test]
    fn residual_reads_like_kubeadm() {
        assert_eq!(residual(364 * 86_400 + 5), "364d");
        assert_eq!(residual(5 * 3_600 + 1), "5h");
        assert_eq!(residual(120), "2m");
        assert_eq!(residual(-3 * 86_400), "expired 3d ago");
    }

    #[test]
    fn attack_a_table_cell_cannot_reach_the_terminal_raw() {
        let rows = [(
            "evil\u{1b}[31m\nCERTIFICATE forged".to_owned(),
            "ok\u{7}".to_owned(),
        )];
        let columns: [Column<(String, String)>; 2] =
            [("A", |r| r.0.clone()), ("B", |r| r.1.clone())];
        let out = render(&rows, Output::Table, &columns, None).unwrap();
        assert_eq!(out.lines().count(), 2, "{out:?}");
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    }

    #[test]
    fn table_is_aligned() {
        #[derive(Serialize)]
        struct Row(&'static str, &'static str);
        let columns: [Column<Row>; 2] = [("X", |r| r.0.into()), ("Y", |r| r.1.into())];
        let t = render(
            &[Row("a", "bb"), Row("ccc", "d")],
            Output::Table,
            &columns,
            None,
        )
        .unwrap();
        assert_eq!(t, "X    Y\na    bb\nccc  d\n");
    }
}
