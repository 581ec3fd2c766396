//! Every parser of outside bytes runs in time linear
//! in its input. Each is fed adversarial shapes at 64 KiB, 256 KiB and the
//! 1 MiB cap, and its time is compared with a plain input of the same size
//! (a CA bundle, a list of mappings): a RATIO, never an absolute time, so a
//! loaded machine slows both alike. Sizes grow only while the ratio holds,
//! so a quadratic parser fails at the first size instead of running for
//! minutes.

mod support;

use std::time::{Duration, Instant};

use certsync::{pem, validate};
use support::certs::Pair;

const SIZES: [usize; 3] = [64 << 10, 256 << 10, 1 << 20];
/// A linear parser doing different work on the two inputs stays within a
/// few times the plain input's time; a quadratic one is hundreds of times
/// over at 64 KiB already.
const MAX_RATIO: f64 = 25.0;

/// Keeps a parser's result from being optimised away.
fn sink<T>(t: T) {
    std::hint::black_box(t);
}

/// A named maker of hostile input of a given size.
type Shape<'a> = (&'a str, &'a dyn Fn(usize) -> Vec<u8>);

/// `unit` repeated to `size` bytes, after `head`.
fn fill(head: &[u8], unit: &[u8], size: usize) -> Vec<u8> {
    let mut v = head.to_vec();
    while v.len() + unit.len() <= size {
        v.extend_from_slice(unit);
    }
    v
}

/// The fastest of a few runs: the least disturbed by other load.
fn time(f: &dyn Fn(&[u8]), input: &[u8]) -> Duration {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            f(input);
            t.elapsed()
        })
        .min()
        .unwrap()
}

/// Asserts `parse` is about as fast on every `hostile(size)` as on
/// `plain(size)`, for every size.
fn linear(what: &str, parse: &dyn Fn(&[u8]), plain: &dyn Fn(usize) -> Vec<u8>, hostile: &[Shape]) {
    for size in SIZES {
        let base = plain(size);
        let t_plain = time(parse, &base).max(Duration::from_micros(50));
        for (shape, make) in hostile {
            let input = make(size);
            assert!(input.len() <= size, "{shape}: {} bytes", input.len());
            let t = time(parse, &input);
            let ratio = t.as_secs_f64() / t_plain.as_secs_f64();
            eprintln!("{what} / {shape} at {size} bytes: {t:?} against {t_plain:?} (x{ratio:.1})");
            assert!(
                ratio < MAX_RATIO,
                "{what} is not linear on {shape}: {t:?} at {size} bytes, {ratio:.0} times a plain \
                 input of the same size ({t_plain:?})"
            );
        }
    }
}

#[test]
fn pem_readers_are_linear_on_hostile_shapes() {
    let pair = Pair::new("linear");
    let cert = pair.cert.clone();
    let bundle = move |size: usize| fill(b"", &cert, size);
    let c = pair.cert.clone();
    let unterminated = move |size: usize| fill(&c, b"-----BEGIN CERTIFICATE-----\n", size);
    let c = pair.cert.clone();
    let mismatched =
        move |size: usize| fill(&c, b"-----BEGIN A-----\nAAAA\n-----END B-----\n", size);
    let c = pair.cert.clone();
    let ends = move |size: usize| fill(&c, b"\n-----END ", size);
    let headers = move |size: usize| {
        fill(
            b"-----BEGIN CERTIFICATE-----\n",
            b"Proc-Type: 4,ENCRYPTED\n",
            size,
        )
    };
    let c = pair.cert.clone();
    let begins_no_newline = move |size: usize| fill(&c, b"-----BEGIN X-----", size);
    // What rustls-pki-types accepts, so every reader after it sees it too.
    let c = pair.cert.clone();
    let closed_once = move |size: usize| {
        let end = b"-----END CERTIFICATE-----\n";
        let mut v = fill(&c, b"-----BEGIN CERTIFICATE-----\n", size - end.len());
        v.extend_from_slice(end);
        v
    };
    let hostile: [Shape; 6] = [
        ("unterminated BEGIN lines", &unterminated),
        ("BEGIN lines closed by one END", &closed_once),
        ("BEGIN/END of different labels", &mismatched),
        ("END markers", &ends),
        ("header lines", &headers),
        ("BEGIN markers on one line", &begins_no_newline),
    ];
    let go = |b: &[u8]| sink(pem::go_blocks(b));
    linear("pem::go_blocks (Go's reader)", &go, &bundle, &hostile);
    let blocks = |b: &[u8]| sink(pem::blocks(b));
    linear("pem::blocks", &blocks, &bundle, &hostile);
    let all = |b: &[u8]| sink(pem::all_decode(b));
    linear("pem::all_decode", &all, &bundle, &hostile);
    let one = |b: &[u8]| {
        sink(pem::exactly_one(
            b,
            rustls_pki_types::pem::SectionKind::Certificate,
        ))
    };
    linear("pem::exactly_one", &one, &bundle, &hostile);
    // X.509 of every block, the leaf's facts, the mode by content.
    let leaf = |b: &[u8]| sink(validate::leaf_of(b));
    linear("validate::leaf_of", &leaf, &bundle, &hostile);
    let certs = |b: &[u8]| sink(validate::certificates_only(b));
    linear("validate::certificates_only", &certs, &bundle, &hostile);
}

#[test]
fn yaml_json_and_kubeconfig_readers_are_linear_on_hostile_shapes() {
    let mappings = |size: usize| {
        fill(
            b"mappings:\n",
            b"  - secret:ns/name=/var/lib/certsync/target/abc\n",
            size,
        )
    };
    let nested = |size: usize| fill(b"", b"[", size);
    let nested_maps = |size: usize| fill(b"", b"{a: ", size);
    // Aliases of aliases: a "billion laughs" expansion.
    let laughs = |size: usize| {
        let mut v = b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n".to_vec();
        let mut i = 1;
        while v.len() < size - 200 && i < 10_000 {
            let line = format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n",
                p = i - 1
            );
            v.extend_from_slice(line.as_bytes());
            i += 1;
        }
        v
    };
    let long_scalar = |size: usize| fill(b"key: \"", b"\\u0041", size);
    let block_nesting = |size: usize| fill(b"", b"- ", size);
    let hostile: [Shape; 5] = [
        ("nested block sequences on one line", &block_nesting),
        ("nested sequences", &nested),
        ("nested mappings", &nested_maps),
        ("aliases of aliases", &laughs),
        ("escapes in one scalar", &long_scalar),
    ];
    // The readers certsync uses: its config file's and its kubeconfig's.
    let yaml = |b: &[u8]| {
        sink(certsync::files::parse_yaml::<serde_yaml_ng::Value>(
            &String::from_utf8_lossy(b),
        ))
    };
    linear("YAML (config file)", &yaml, &mappings, &hostile);
    let kubeconfig = |b: &[u8]| {
        sink(certsync::source::client::parse_kubeconfig(
            &String::from_utf8_lossy(b),
        ))
    };
    linear("kubeconfig", &kubeconfig, &mappings, &hostile);

    let objects = |size: usize| {
        fill(
            b"[",
            b"{\"kind\":\"Secret\",\"data\":{\"a\":\"QUFB\"}},",
            size,
        )
    };
    let deep = |size: usize| fill(b"", b"[", size);
    let escapes = |size: usize| fill(b"\"", b"\\u0041", size);
    let json_hostile: [Shape; 2] = [
        ("nested arrays", &deep),
        ("escapes in one string", &escapes),
    ];
    let json = |b: &[u8]| sink(serde_json::from_slice::<serde_json::Value>(b));
    linear("JSON (API objects)", &json, &objects, &json_hostile);
}

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
