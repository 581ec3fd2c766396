//! Linear parsing through the binary: a hostile source parses off the
//! runtime's threads, so other mappings and the admin port go on. The
//! parsers' time on hostile shapes is measured by `benches/linear.rs`
//! (`cargo bench --bench linear`), never asserted here: a timed assertion
//! fails on a loaded machine.

mod support;

use support::certs::Pair;

/// Linear parsing through the binary: sources holding the shape that
/// was quadratic (one certificate, then BEGIN lines and a single END, up to
/// the 1 MiB bundle cap), more of them than the runtime has worker threads,
/// rewritten again and again, while another mapping rotates: that mapping
/// still publishes every pair and `/livez` and `/metrics` still answer,
/// because parsing runs off the runtime's threads (and in linear time).
#[test]
fn hostile_sources_stall_neither_other_mappings_nor_the_admin_port() {
    use support::*;
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("good");
    std::fs::create_dir(&good).unwrap();
    let first = Pair::new("good0");
    write_pair(&good, &first);
    let hostile_pair = Pair::new("hostile");
    let hostile = |n: usize| {
        let mut crt = hostile_pair.cert.clone();
        crt.extend_from_slice(format!("# round {n}\n").as_bytes());
        // The reproduction: BEGIN lines, then one END. Without
        // that END rustls-pki-types refuses the file (a section without
        // end) before Go's reader sees it; with it, rustls reads the last
        // BEGIN's empty block and Go's reader searched the rest of the
        // file for an END from every BEGIN line: quadratic. The empty
        // certificate is then refused, so nothing hostile is published.
        const END: &[u8] = b"-----END CERTIFICATE-----\n";
        let mut crt = fill(&crt, b"-----BEGIN CERTIFICATE-----\n", (1 << 20) - 4096);
        crt.extend_from_slice(END);
        crt
    };
    let mut args = vec![
        "run".to_owned(),
        "--debounce".into(),
        "100ms".into(),
        "--sync".into(),
        format!(
            "dir:{}={}",
            good.display(),
            d.path().join("good-target").display()
        ),
    ];
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    for i in 0..workers + 2 {
        let src = d.path().join(format!("hostile{i}"));
        std::fs::create_dir(&src).unwrap();
        write_pair_files(&src, &hostile(0), &hostile_pair.key);
        args.push("--sync".into());
        args.push(format!(
            "dir:{}={}",
            src.display(),
            d.path().join(format!("hostile{i}-target")).display()
        ));
    }
    let port = free_port();
    args.extend(["--admin-addr".into(), format!("127.0.0.1:{port}")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cs = Certsync::start(&args, d.path());
    wait_pair(&d.path().join("good-target"), &first);
    for round in 1..=3 {
        for i in 0..workers + 2 {
            let src = d.path().join(format!("hostile{i}"));
            write_atomic(&src.join("tls.crt"), &hostile(round));
        }
        let next = Pair::new(&format!("good{round}"));
        write_pair(&good, &next);
        wait_pair(&d.path().join("good-target"), &next);
        for path in ["/livez", "/metrics"] {
            let (status, _) = wait_for(path, || http_get(port, path));
            assert_eq!(status, 200, "{path} in round {round}");
        }
    }
    // The hostile content was refused, not published.
    cs.wait_log("hostile0");
    for i in 0..workers + 2 {
        assert!(
            read_live(&d.path().join(format!("hostile{i}-target"))).is_none(),
            "hostile{i} was published"
        );
    }
}
