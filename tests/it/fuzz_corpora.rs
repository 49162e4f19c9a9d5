//! The fuzz targets' bodies (`sluice::fuzz_targets`) as ordinary tests: each runs over its
//! committed corpus (`fuzz/corpus/<target>/`, seeds and whatever `cargo fuzz` added) and
//! then over inputs a small deterministic mutator derives from it, for a bounded count and
//! time. A panic fails the test naming the input; a body that runs on past the limit is a
//! hang. Longer runs: `cargo fuzz run <target>` (docs/development.md).

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::fuzz_targets::TARGETS;

/// Generated inputs per target, and the most time they may take.
const GENERATED: usize = 20_000;
const BUDGET: Duration = Duration::from_secs(4);
/// One input taking this long is a hang.
const HANG: Duration = Duration::from_secs(10);

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new("fuzz/corpus").join(target);
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    inputs.sort();
    inputs.into_iter().map(|(_, b)| b).collect()
}

/// xorshift: the same inputs on every run.
struct Mutator(u64);

impl Mutator {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % below.max(1) as u64) as usize
    }

    /// A few edits of a corpus input: flips, inserted bytes of the grammar's alphabet,
    /// cuts, duplicated spans, splices with another input.
    fn mutate(&mut self, corpus: &[Vec<u8>]) -> Vec<u8> {
        const ALPHABET: &[u8] = b"{}[]\":,;=\\/\n\r\t 0123456789eE.-+truefalsenull\x00\xff\xc3\xa9";
        let mut data = corpus[self.next(corpus.len())].clone();
        for _ in 0..1 + self.next(4) {
            let at = self.next(data.len() + 1);
            match self.next(6) {
                0 if !data.is_empty() => {
                    let i = at.min(data.len() - 1);
                    data[i] ^= 1 << self.next(8);
                }
                1 => data.insert(at, ALPHABET[self.next(ALPHABET.len())]),
                2 => data.truncate(at),
                3 if at < data.len() => {
                    let end = (at + 1 + self.next(16)).min(data.len());
                    let span = data[at..end].to_vec();
                    for _ in 0..1 + self.next(8) {
                        data.splice(at..at, span.iter().copied());
                    }
                }
                4 => {
                    let other = &corpus[self.next(corpus.len())];
                    let from = self.next(other.len() + 1);
                    data.splice(at.., other[from..].iter().copied());
                }
                _ => data.insert(at, self.next(256) as u8),
            }
        }
        data
    }
}

fn run(target: &str, body: fn(&[u8])) {
    let inputs = corpus(target);
    assert!(
        !inputs.is_empty(),
        "{target}: an empty corpus tests nothing"
    );
    let check = |data: &[u8]| {
        let started = Instant::now();
        if let Err(panic) = std::panic::catch_unwind(|| body(data)) {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "{target} panicked ({why}) on {:?}",
                String::from_utf8_lossy(data)
            );
        }
        assert!(
            started.elapsed() < HANG,
            "{target} took {:?} on {:?}",
            started.elapsed(),
            String::from_utf8_lossy(data)
        );
    };
    for input in &inputs {
        check(input);
    }
    let mut m = Mutator(0x2545_f491_4f6c_dd1d ^ target.len() as u64);
    let started = Instant::now();
    let mut ran = 0;
    while ran < GENERATED && started.elapsed() < BUDGET {
        check(&m.mutate(&inputs));
        ran += 1;
    }
    eprintln!(
        "{target}: {} corpus inputs and {ran} generated in {:.1?}",
        inputs.len(),
        started.elapsed()
    );
}

#[test]
fn every_target_survives_its_corpus_and_mutations_of_it() {
    for (target, body) in TARGETS {
        run(target, *body);
    }
}

#[test]
fn every_target_has_a_corpus_and_a_cargo_fuzz_entry() {
    let manifest = std::fs::read_to_string("fuzz/Cargo.toml").unwrap();
    for (target, _) in TARGETS {
        assert!(
            Path::new("fuzz/fuzz_targets")
                .join(format!("{target}.rs"))
                .is_file(),
            "{target}"
        );
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "{target}"
        );
    }
}
