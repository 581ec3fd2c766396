//! The report every benchmark prints and writes: one [`Row`] per case,
//! shared by `benches/certsync.rs` and `benches/kubeadm.rs` so both write
//! the same JSON shape into `benches/results/`.

use std::collections::BTreeMap;

/// One row of the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub bench: String,
    pub case: String,
    pub n: usize,
    /// Named figures, e.g. p50_ms, rss_mib.
    pub figures: BTreeMap<String, f64>,
    pub note: String,
}

/// p50, p90, p99 and max of `ms` (nearest rank), none when empty.
pub fn percentiles(mut ms: Vec<f64>) -> BTreeMap<String, f64> {
    ms.sort_by(f64::total_cmp);
    let mut f = BTreeMap::new();
    let Some(&max) = ms.last() else {
        return f;
    };
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    f.insert("p50_ms".into(), at(0.50));
    f.insert("p90_ms".into(), at(0.90));
    f.insert("p99_ms".into(), at(0.99));
    f.insert("max_ms".into(), max);
    f
}

/// The bench's own arguments (after cargo's `--`): `--flag VALUE` and
/// bare `--flag`.
pub struct Args(Vec<String>);

impl Args {
    pub fn from_env() -> Self {
        Self(std::env::args().skip(1).collect())
    }

    /// The word after `flag`.
    pub fn value(&self, flag: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == flag)
            .and_then(|i| self.0.get(i + 1).cloned())
    }

    pub fn has(&self, flag: &str) -> bool {
        self.0.iter().any(|a| a == flag)
    }
}

/// The table on stdout.
pub fn print(rows: &[Row]) {
    println!("{:<10} {:<48} {:>6}  figures", "bench", "case", "n");
    for r in rows {
        let figs: Vec<String> = r
            .figures
            .iter()
            .map(|(k, v)| format!("{k}={v:.3}"))
            .collect();
        println!(
            "{:<10} {:<48} {:>6}  {}",
            r.bench,
            r.case,
            r.n,
            figs.join(" ")
        );
    }
}

/// `--json FILE`: the rows, pretty-printed.
pub fn write_json(path: &str, rows: &[Row]) {
    std::fs::write(path, serde_json::to_string_pretty(rows).unwrap()).unwrap();
    println!("wrote {path}");
}
