//! What `certsync_source_up` says while a source answers with content
//! that is refused: the source is up, the refusal is counted apart.

use super::*;

/// A `dir:` source whose certificate grows past the 1 MiB cap is
/// reachable: certsync read it and refused the content (counted in
/// `certsync_validation_failures_total{reason="too_large"}`), so
/// `certsync_source_up` stays 1, as the docs define it and as an alert on
/// a source that does not answer expects. Before, it read 0 (a
/// "source down" alert for a source that answers). A source directory
/// that is gone does not answer: 0; back with a good pair: 1.
#[test]
fn a_source_whose_content_is_refused_is_still_up() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let first = Pair::new("first");
    write_pair_files(&src, &first.cert, &first.key);
    let (cs, port) = run_dir(d.path(), "web", &["--debounce", "100ms", "--resync", "1s"]);
    wait_for("first sync", || read_live(&d.path().join("t")));
    let metrics = || {
        http_get(port, "/metrics")
            .map(|(_, text)| parse_metrics(&text))
            .unwrap_or_default()
    };
    let up = "certsync_source_up{mapping=\"web\"}";
    assert_eq!(metrics().get(up), Some(&1.0));

    // Past the cap: one certificate followed by comment lines.
    let mut big = first.cert.clone();
    big.extend(std::iter::repeat_n(b'#', 1 << 20));
    big.push(b'\n');
    write_pair_files(&src, &big, &first.key);
    let refused = "certsync_validation_failures_total{mapping=\"web\",reason=\"too_large\"}";
    let m = wait_for("the refusal counted", || {
        let m = metrics();
        (m.get(refused).copied().unwrap_or(0.0) >= 1.0).then_some(m)
    });
    assert_eq!(m.get(up), Some(&1.0), "{m:?}\n{}", cs.log());
    // Refused again at the next resyncs: still up.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(metrics().get(up), Some(&1.0), "{}", cs.log());
    let (_, cert, _) = read_live(&d.path().join("t")).unwrap();
    assert_eq!(cert, first.cert, "the last good pair stays");

    // The control: a source that cannot be read is down.
    fs::rename(&src, d.path().join("gone")).unwrap();
    wait_for("source down", || {
        (metrics().get(up) == Some(&0.0)).then_some(())
    });
    fs::rename(d.path().join("gone"), &src).unwrap();
    write_pair_files(&src, &first.cert, &first.key);
    wait_for("source up again", || {
        (metrics().get(up) == Some(&1.0)).then_some(())
    });
}
