//! The crate's layout rules, read from the source text (outside comments and test
//! modules), so a change that breaks one fails here with the files named:
//! - the top-level modules import one another without a circle (`crate::module` paths):
//!   `config` composes the settings the sources and sinks own, and no source, sink or
//!   control module reaches back into it;
//! - nothing under `src/control/` reads a clock: its state machines take the time as an
//!   argument or from an injected clock, so their tests need no sleeping.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules: `src/<name>.rs` and `src/<name>/`.
fn modules() -> BTreeSet<String> {
    std::fs::read_dir("src")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_string();
            (p.is_dir() || p.extension().is_some_and(|e| e == "rs")).then_some(name)
        })
        .filter(|n| n != "lib" && n != "main")
        .collect()
}

fn files_of(module: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = PathBuf::from(format!("src/{module}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let mut dirs = vec![PathBuf::from(format!("src/{module}"))];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The code of `path` that ships: without comments and without its test module.
fn shipped_code(path: &Path) -> String {
    let name = path.file_name().unwrap().to_str().unwrap();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return String::new();
    }
    let text = without_test_module(&std::fs::read_to_string(path).unwrap());
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` without its inline `#[cfg(test)] mod tests { … }` (braces counted).
fn without_test_module(text: &str) -> String {
    let Some(start) = text.find("#[cfg(test)]\nmod tests {") else {
        return text.to_string();
    };
    let mut depth = 0;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return format!("{}{}", &text[..start], &text[start + i + 1..]);
                }
            }
            _ => {}
        }
    }
    text[..start].to_string()
}

/// module → the modules it imports, each with the files that do.
fn imports(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeMap<String, Vec<PathBuf>>> {
    let mut graph = BTreeMap::new();
    for module in modules {
        let mut edges: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for file in files_of(module) {
            let code = shipped_code(&file);
            for (i, _) in code.match_indices("crate::") {
                let name: String = code[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if &name != module && modules.contains(&name) {
                    let files = edges.entry(name).or_default();
                    if !files.contains(&file) {
                        files.push(file.clone());
                    }
                }
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

/// A circle through `start`, if there is one: the modules in order.
fn circle_through(
    start: &str,
    graph: &BTreeMap<String, BTreeMap<String, Vec<PathBuf>>>,
) -> Option<Vec<String>> {
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    fn walk(
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
        graph: &BTreeMap<String, BTreeMap<String, Vec<PathBuf>>>,
    ) -> bool {
        let here = path.last().unwrap().clone();
        for next in graph[&here].keys() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(start, path, seen, graph) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    walk(start, &mut path, &mut seen, graph).then_some(path)
}

#[test]
fn no_two_top_level_modules_import_each_other_in_a_circle() {
    let modules = modules();
    assert!(modules.len() > 20, "found only {modules:?}");
    let graph = imports(&modules);
    assert!(
        graph["config"].contains_key("sink") && graph["config"].contains_key("source"),
        "config composes the sinks' and sources' settings: {:?}",
        graph["config"].keys()
    );
    let mut circles = Vec::new();
    for module in &modules {
        if let Some(circle) = circle_through(module, &graph) {
            let steps: Vec<String> = circle
                .windows(2)
                .map(|w| format!("{} -> {} ({:?})", w[0], w[1], graph[&w[0]][&w[1]]))
                .collect();
            circles.push(steps.join("\n  "));
        }
    }
    assert!(circles.is_empty(), "{}", circles.join("\n\n"));
}

/// What reads the time or waits on it. `tokio::time::Instant` as a type is not among them:
/// a state machine is handed one. The calls that start with a name match only as a whole
/// name (`sleep(`, not `fn nap_sleep(`).
const CLOCK_READS: &[&str] = &[
    "Instant::now",
    "SystemTime::now",
    "Utc::now",
    "Local::now",
    "now_utc(",
    ".elapsed(",
    "sleep(",
    "sleep_until(",
    "interval(",
    "interval_at(",
    "timeout(",
    "timeout_at(",
    "std::time::Instant",
    "DefaultClock",
    "MonotonicClock",
    "SystemClock",
    "QuantaClock",
    "QuantaUpkeepClock",
    "quanta::",
];

/// Each clock read in `code`: the pattern, and the line it is on.
fn clock_reads(code: &str) -> Vec<String> {
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut reads = Vec::new();
    for line in code.lines() {
        for pattern in CLOCK_READS {
            let whole_name = pattern.starts_with(name_char);
            let found = line
                .match_indices(pattern)
                .any(|(i, _)| !whole_name || !line[..i].ends_with(name_char));
            if found {
                reads.push(format!("{pattern:?} in `{}`", line.trim()));
            }
        }
        // `use std::time::{Duration, Instant};`: std's `Instant` exists only as a reading.
        if let Some(start) = line.find("std::time::{") {
            let group = &line[start..];
            let group = &group[..group.find('}').unwrap_or(group.len())];
            if group
                .split(|c: char| !name_char(c))
                .any(|name| name == "Instant")
            {
                reads.push(format!("std's Instant in `{}`", line.trim()));
            }
        }
    }
    reads
}

#[test]
fn nothing_under_control_reads_a_clock() {
    let files = files_of("control");
    assert!(files.len() > 20, "found only {files:?}");
    let mut reads = Vec::new();
    for file in &files {
        for read in clock_reads(&shipped_code(file)) {
            reads.push(format!("{}: {read}", file.display()));
        }
    }
    assert!(
        reads.is_empty(),
        "src/control/ takes the time as an argument (or from an injected clock); move what \
         reads or waits on a clock to write/ or pipeline/:\n{}",
        reads.join("\n")
    );
}

#[test]
fn the_clock_check_sees_each_way_of_reading_one() {
    for code in [
        "let started = Instant::now();",
        "let at = tokio::time::Instant::now() + wait;",
        "let stamp = SystemTime::now();",
        "if began.elapsed() >= after {",
        "tokio::time::sleep(wait).await;",
        "sleep_until(deadline).await;",
        "let mut ticker = tokio::time::interval_at(start, tick);",
        "let _ = timeout(wait, write).await;",
        "use std::time::{Duration, Instant};",
        "fn at(t: std::time::Instant) {}",
        "type Bucket = RateLimiter<NotKeyed, InMemoryState, DefaultClock>;",
    ] {
        assert!(!clock_reads(code).is_empty(), "not seen: {code}");
    }
    for code in [
        "pub fn update(&mut self, in_flight: usize, now: Instant) {",
        "use tokio::time::Instant;",
        "let elapsed = now.saturating_duration_since(self.stamp);",
        "fn may_sleep(&self) -> bool {",
        "use std::time::{Duration, SystemTime};",
        "pub fn from_headers(headers: &HeaderMap, now: SystemTime) {}",
    ] {
        assert_eq!(clock_reads(code), Vec::<String>::new(), "{code}");
    }
}
