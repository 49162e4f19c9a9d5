//! What the Kubernetes manifest tests share: the manifests' files, their objects, and the
//! tools `scripts/manifest-tools.sh` installs into ./.venv.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml::Value;

pub const DIR: &str = "deploy/kubernetes";
pub fn tool(name: &str) -> PathBuf {
    let path = Path::new(".venv/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: scripts/manifest-tools.sh installs it (tests/run.sh runs it)",
        path.display()
    );
    path
}

pub fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    files
}

/// Every object of every manifest, with the file it came from.
pub fn objects() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for file in manifest_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value =
                Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if !value.is_null() {
                out.push((file.clone(), value));
            }
        }
    }
    out
}

pub fn of_kind<'a>(all: &'a [(PathBuf, Value)], kind: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|(_, v)| v["kind"] == kind)
        .map(|(_, v)| v)
        .collect()
}

pub fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().expect("metadata.name")
}

pub fn named<'a>(all: &'a [(PathBuf, Value)], kind: &str, wanted: &str) -> &'a Value {
    of_kind(all, kind)
        .into_iter()
        .find(|v| name(v) == wanted)
        .unwrap_or_else(|| panic!("no {kind} {wanted}"))
}

pub fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}
