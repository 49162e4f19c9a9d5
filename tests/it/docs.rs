//! The documentation cannot rot: the generated references are what the code generates and
//! name every key of the schema, every local link of the README, ARCHITECTURE.md and the
//! book resolves (file and heading), every example configuration is checked against the
//! test services, and every metric and label the Grafana dashboard queries is one a live
//! worker exports.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::sluice;

#[test]
fn the_reference_is_what_the_code_generates() {
    let out = sluice()
        .args(["config", "docs", "--check", "docs/reference"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every property name anywhere in the schema — read here from the schema itself, not
/// from the generator — is a key of the reference, at the end of a dotted path.
#[test]
fn every_key_of_the_schema_is_in_the_reference() {
    fn names(value: &serde_json::Value, out: &mut BTreeSet<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (keyword, sub) in map {
                    match (keyword.as_str(), sub) {
                        // A map of key → schema: the keys are names, the values schemas.
                        ("properties" | "definitions", serde_json::Value::Object(props)) => {
                            if keyword == "properties" {
                                out.extend(props.keys().cloned());
                            }
                            props.values().for_each(|v| names(v, out));
                        }
                        ("default" | "examples" | "enum", _) => {}
                        _ => names(sub, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| names(v, out)),
            _ => {}
        }
    }
    let mut all = BTreeSet::new();
    names(&sluice::config::schema::json(), &mut all);
    let reference = std::fs::read_to_string("docs/reference/configuration.md").unwrap();
    let listed: BTreeSet<String> = reference
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter_map(|path| path.rsplit('.').next())
        .map(str::to_string)
        .collect();
    let headed: BTreeSet<String> = reference
        .lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.split('`').nth(1))
        .map(|h| {
            h.split_whitespace()
                .next()
                .unwrap_or("")
                .trim_matches(['[', ']'])
        })
        .filter_map(|path| path.rsplit('.').next())
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = all
        .iter()
        .filter(|k| !listed.contains(*k) && !headed.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from the reference: {missing:?}"
    );
    assert!(listed.len() > 100, "only {} keys listed", listed.len());
}

/// mdBook's id for a heading: lower case, spaces as `-`, only letters, digits, `-` and `_`.
fn anchor(heading: &str) -> String {
    let text: String = heading.replace('`', "");
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors_of(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        }
        if fence || !line.starts_with('#') {
            continue;
        }
        let id = anchor(line.trim_start_matches('#'));
        let n = seen.entry(id.clone()).or_default();
        out.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    out
}

/// `](target)` of every inline link outside code blocks.
fn links_of(text: &str) -> Vec<String> {
    let mut fence = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        }
        if fence {
            continue;
        }
        let without_code: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        for part in without_code.split("](").skip(1) {
            if let Some(end) = part.find(')') {
                out.push(part[..end].to_string());
            }
        }
    }
    out
}

#[test]
fn every_local_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in common::documentation_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for link in links_of(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            checked += 1;
            if !target.exists() {
                broken.push(format!(
                    "{}: {link} (no {})",
                    file.display(),
                    target.display()
                ));
                continue;
            }
            if !fragment.is_empty() {
                let target_text = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors_of(&target_text).contains(fragment) {
                    broken.push(format!(
                        "{}: {link} (no heading #{fragment})",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 30, "only {checked} local links found");
}

#[test]
fn every_book_page_is_in_the_summary() {
    let summary = std::fs::read_to_string("docs/SUMMARY.md").unwrap();
    let listed: BTreeSet<PathBuf> = links_of(&summary)
        .into_iter()
        .map(|l| Path::new("docs").join(l))
        .collect();
    let unlisted: Vec<PathBuf> = common::documentation_files()
        .into_iter()
        .filter(|f| f.starts_with("docs") && !f.ends_with("SUMMARY.md"))
        .filter(|f| !listed.contains(f))
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages the book leaves out: {unlisted:?}"
    );
}

#[test]
fn the_readme_stays_short() {
    let lines = std::fs::read_to_string("README.md")
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; the manual is docs/"
    );
}
