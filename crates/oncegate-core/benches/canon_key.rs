//! Benchmarks reading + canonicalizing + hashing webhook bodies against serde_json's parse alone.
//!
//! The target is for `oncegate_parse_canon_hash` (our strict parse, the key form and its SHA-256)
//! to run at half or more of the throughput of `serde_json::from_slice::<Value>` by itself. A
//! quick timing with `Instant` runs first and prints MB/s and ratios in one summary, because
//! criterion reports each group separately; criterion's groups follow.
// A benchmark reads the shared corpus and times itself; the purity bans are for the library.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use oncegate_core::canon::{to_jcs, to_key_form};
use oncegate_core::json::{parse, Limits};
use sha2::{Digest, Sha256};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpora/github-webhooks")
}

/// Every `*.json` file under `dir`, in a stable order.
fn json_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            json_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "json") {
            found.push(path);
        }
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let mut paths = Vec::new();
    json_files(&corpus_dir(), &mut paths);
    assert!(
        !paths.is_empty(),
        "no JSON files under {}",
        corpus_dir().display()
    );
    paths
        .iter()
        .map(|p| std::fs::read(p).expect("readable corpus file"))
        .collect()
}

/// The corpus holds index files of 1.5 MB, over the default body limit.
const LIMITS: Limits = Limits {
    max_depth: 128,
    max_bytes: usize::MAX,
};

fn serde_json_parse(bodies: &[Vec<u8>]) {
    for body in bodies {
        black_box(serde_json::from_slice::<serde_json::Value>(body).expect("serde_json parses"));
    }
}

fn oncegate_parse_canon_hash(bodies: &[Vec<u8>]) {
    for body in bodies {
        let value = parse(body, &LIMITS).expect("oncegate parses");
        black_box(Sha256::digest(to_key_form(&value).as_bytes()));
    }
}

fn oncegate_parse_jcs(bodies: &[Vec<u8>]) {
    for body in bodies {
        let value = parse(body, &LIMITS).expect("oncegate parses");
        black_box(to_jcs(&value));
    }
}

fn serde_jcs(bodies: &[Vec<u8>]) {
    for body in bodies {
        let value: serde_json::Value = serde_json::from_slice(body).expect("serde_json parses");
        black_box(serde_jcs::to_string(&value).expect("serde_jcs writes"));
    }
}

type Variant = (&'static str, fn(&[Vec<u8>]));

const VARIANTS: [Variant; 4] = [
    ("serde_json_parse", serde_json_parse),
    ("oncegate_parse_canon_hash", oncegate_parse_canon_hash),
    ("oncegate_parse_jcs", oncegate_parse_jcs),
    ("serde_jcs", serde_jcs),
];

/// Times each variant over whole passes of the corpus and prints MB/s and the ratio to the
/// baseline (the first variant). Passes alternate between variants so that a slow phase of the
/// machine does not land on one variant only; the best pass of each counts.
fn summary(bodies: &[Vec<u8>]) {
    const ROUNDS: usize = 5;
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let mut best = [Duration::MAX; VARIANTS.len()];
    for (_, run) in VARIANTS {
        run(bodies); // warm-up
    }
    for _ in 0..ROUNDS {
        for (i, (_, run)) in VARIANTS.iter().enumerate() {
            let start = Instant::now();
            run(bodies);
            best[i] = best[i].min(start.elapsed());
        }
    }
    let mb_per_s = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e6;
    let baseline = mb_per_s(best[0]);
    println!(
        "summary: {} files, {bytes} bytes, best of {ROUNDS} passes",
        bodies.len()
    );
    for (i, (name, _)) in VARIANTS.iter().enumerate() {
        let rate = mb_per_s(best[i]);
        println!(
            "summary: {name:<28} {rate:>8.1} MB/s  ratio to serde_json_parse {:.2}",
            rate / baseline
        );
    }
}

fn groups(c: &mut Criterion) {
    let bodies = corpus();
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    for (name, run) in VARIANTS {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(bytes as u64));
        // Each iteration is a whole pass over the corpus (tens of milliseconds): flat sampling
        // fits ten samples in the short measurement time.
        group.sampling_mode(SamplingMode::Flat);
        group.bench_with_input(
            BenchmarkId::from_parameter("github-webhooks"),
            &bodies,
            |b, bodies| b.iter(|| run(bodies)),
        );
        group.finish();
    }
}

criterion_group! {
    name = benches;
    // Short runs: the machine has two cores and other work on them.
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = groups
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and only wants criterion's
    // quick check that each benchmark runs.
    if std::env::args().any(|arg| arg == "--bench") {
        summary(&corpus());
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
