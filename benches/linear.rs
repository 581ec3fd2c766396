//! Every parser of outside bytes runs in time linear in its input:
//! `cargo bench --bench linear` on an idle machine (it panics naming the
//! parser and the shape otherwise). Each is fed adversarial shapes at
//! 64 KiB, 256 KiB and the 1 MiB cap, and its time is compared with a plain
//! input of the same size (a CA bundle, a list of mappings): a ratio, never
//! an absolute time. Other load still skews one run more than the other,
//! which is why this is a benchmark and not a test. Sizes grow only while
//! the ratio holds, so a quadratic parser fails at the first size instead
//! of running for minutes.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use certsync::{pem, validate};
use support::certs::Pair;
use support::fill;

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
    let escapes = |size: usize| fill(b"\"", b"\\u0041", size);
    let json_hostile: [Shape; 2] = [
        ("nested arrays", &nested),
        ("escapes in one string", &escapes),
    ];
    let json = |b: &[u8]| sink(serde_json::from_slice::<serde_json::Value>(b));
    linear("JSON (API objects)", &json, &objects, &json_hostile);
}

fn main() {
    pem_readers_are_linear_on_hostile_shapes();
    yaml_json_and_kubeconfig_readers_are_linear_on_hostile_shapes();
}
