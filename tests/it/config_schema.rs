//! `sluice config schema` describes every configuration sluice ships: the files under
//! config/ (the built-in default, the starter `sluice init` writes, the compose and example
//! configs), the ones the Kubernetes ConfigMap carries, and — keys and types, not
//! completeness — the TOML examples of the README and the book (blocks opened with a bare
//! ```toml; other TOML, such as Taplo's own settings, is opened as ```toml NAME).
//!
//! The validator is Python's `jsonschema` (pinned by `scripts/manifest-tools.sh`), an
//! implementation independent of the one that writes the schema, as an editor's is.

use crate::common;
use crate::kubernetes_support::tool;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::{Value, json};

fn schema() -> Value {
    sluice::config::schema::json()
}

fn to_json(toml_text: &str, origin: &str) -> Value {
    let value: toml::Value =
        toml::from_str(toml_text).unwrap_or_else(|e| panic!("{origin} is not TOML: {e}"));
    serde_json::to_value(value).unwrap()
}

/// Checks configurations against one schema.
struct Validator {
    schema: Value,
}

/// Reads `{"schema", "instances"}`, checks the schema itself, and prints for each
/// instance the list of its problems as `path: message`.
const VALIDATE: &str = r#"
import json, sys
from jsonschema.validators import validator_for
job = json.load(sys.stdin)
cls = validator_for(job["schema"])
cls.check_schema(job["schema"])
v = cls(job["schema"])
print(json.dumps([
    ["/" + "/".join(map(str, e.absolute_path)) + ": " + e.message for e in v.iter_errors(i)]
    for i in job["instances"]
]))
"#;

impl Validator {
    fn new(schema: Value) -> Self {
        Validator { schema }
    }

    /// Every problem the schema finds in each of `configs`, in their order.
    fn each(&self, configs: &[Value]) -> Vec<Vec<String>> {
        let mut child = Command::new(tool("python"))
            .args(["-c", VALIDATE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let job = json!({ "schema": self.schema, "instances": configs });
        child
            .stdin
            .take()
            .unwrap()
            .write_all(job.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the validator failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let found: Vec<Vec<String>> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(found.len(), configs.len());
        found
    }
}

/// (where it comes from, its TOML text) for every configuration file the repository ships.
fn shipped_configs() -> Vec<(String, String)> {
    let mut configs = Vec::new();
    let mut files: Vec<PathBuf> = ["config", "examples"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    for path in files {
        configs.push((
            path.display().to_string(),
            std::fs::read_to_string(&path).unwrap(),
        ));
    }
    for manifest in kubernetes_manifests() {
        let text = std::fs::read_to_string(&manifest).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let doc = serde_yaml::Value::deserialize(doc).unwrap();
            let Some(data) = doc.get("data").and_then(|d| d.as_mapping()) else {
                continue;
            };
            for (name, body) in data {
                let name = name.as_str().unwrap_or_default();
                if name.ends_with(".toml") {
                    let origin = format!("{} ({name})", manifest.display());
                    configs.push((origin, body.as_str().unwrap().to_string()));
                }
            }
        }
    }
    configs
}

fn kubernetes_manifests() -> Vec<PathBuf> {
    let dir = Path::new("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_shipped_config_is_valid_against_the_schema() {
    let validator = Validator::new(schema());
    let configs = shipped_configs();
    let names: Vec<&str> = configs.iter().map(|(n, _)| n.as_str()).collect();
    // The built-in default, the starter, compose's and the ConfigMap's are all there.
    for wanted in [
        "config/default.toml",
        "config/starter.toml",
        "config/compose-worker.toml",
        "configmap.yaml (sluice.toml)",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(wanted)),
            "{wanted} not among {names:?}"
        );
    }
    let values: Vec<Value> = configs.iter().map(|(o, t)| to_json(t, o)).collect();
    let mut failures = Vec::new();
    for ((origin, _), problems) in configs.iter().zip(validator.each(&values)) {
        for problem in problems {
            failures.push(format!("{origin}: {problem}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The schema without its `required` lists: what a fragment of a configuration is held to.
fn without_required(mut schema: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("required");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut schema);
    schema
}

#[test]
fn the_documentation_examples_use_keys_and_types_the_schema_knows() {
    let validator = Validator::new(without_required(schema()));
    let mut blocks = Vec::new();
    for file in common::documentation_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, block) in text.split("```toml\n").skip(1).enumerate() {
            let toml_text = block.split("```").next().unwrap().to_string();
            let origin = format!("{}, TOML example {}", file.display(), i + 1);
            blocks.push((to_json(&toml_text, &origin), origin, toml_text));
        }
    }
    assert!(
        blocks.len() >= 15,
        "only {} TOML examples found in the documentation",
        blocks.len()
    );
    let values: Vec<Value> = blocks.iter().map(|(v, ..)| v.clone()).collect();
    let mut failures = Vec::new();
    for ((_, origin, toml_text), problems) in blocks.iter().zip(validator.each(&values)) {
        for problem in problems {
            failures.push(format!("{origin}: {problem}\n{toml_text}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_schema_refuses_what_sluice_refuses() {
    let validator = Validator::new(schema());
    let base = "[source]\nkind = \"file\"\npath = \"x.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://x.db\"\n";
    let mut cases = vec![(base.to_string(), "the base", true)];
    for rate in ["\"auto\"", "\"off\"", "250.5"] {
        cases.push((
            format!("{base}[rate]\nrecords_per_second = {rate}\n"),
            rate,
            true,
        ));
    }
    for (extra, why) in [
        ("[rate]\nrecords_per_secnd = 5\n", "an unknown key"),
        ("[rate]\ntick = 200\n", "a duration that is not a string"),
        (
            "[rate]\nrecords_per_second = \"fast\"\n",
            "a rate neither a number, auto nor off",
        ),
        (
            "[concurrency]\nalgorithm = \"tcp\"\n",
            "an unknown algorithm",
        ),
        ("[retry]\nmax_attempts = -1\n", "a negative count"),
        (
            "[sink.balance]\nstrategy = \"random\"\n",
            "an unknown strategy",
        ),
        ("[nonsense]\n", "an unknown section"),
    ] {
        cases.push((format!("{base}{extra}"), why, false));
    }
    expect(&validator, &cases);
}

/// Each of `cases` — (TOML, what it is, valid) — is found valid or not as it says.
fn expect(validator: &Validator, cases: &[(String, &str, bool)]) {
    let values: Vec<Value> = cases.iter().map(|(t, why, _)| to_json(t, why)).collect();
    for ((text, why, valid), found) in cases.iter().zip(validator.each(&values)) {
        assert_eq!(found.is_empty(), *valid, "{why}:\n{text}\n{found:?}");
    }
}

/// `[source]`'s kind picks its keys: a key of another kind is refused as sluice refuses it,
/// and a table without `kind` is a file, as sluice reads it.
#[test]
fn the_source_kind_picks_its_keys() {
    let sink = "[sink]\nkind = \"sqlite\"\nurl = \"sqlite://x.db\"\n";
    let mut cases = Vec::new();
    for (source, valid) in [
        ("path = \"x.ndjson\"\n", true),
        (
            "kind = \"file\"\npath = \"x.ndjson\"\nrotate_wait = \"1s\"\n",
            true,
        ),
        (
            "kind = \"kafka\"\ntopic = \"t\"\nassignment_timeout = \"5s\"\n",
            true,
        ),
        ("kind = \"amqp\"\nqueue = \"q\"\ndeclare = false\n", true),
        ("path = \"x.ndjson\"\ntopic = \"t\"\n", false),
        (
            "kind = \"kafka\"\ntopic = \"t\"\nrotate_wait = \"1s\"\n",
            false,
        ),
        (
            "kind = \"amqp\"\nqueue = \"q\"\nsurely_not_a_key = 1\n",
            false,
        ),
        ("kind = \"kafka\"\nassignment_timeout = 5\n", false),
        ("kind = \"nats\"\n", false),
    ] {
        cases.push((format!("[source]\n{source}{sink}"), "source", valid));
    }
    expect(&Validator::new(schema()), &cases);
}

/// `[sink]`'s kind picks its keys beside those every kind reads.
#[test]
fn the_sink_kind_picks_its_keys() {
    let source = "[source]\npath = \"x.ndjson\"\n";
    let mut cases = Vec::new();
    for (sink, valid) in [
        (
            "kind = \"sqlite\"\nurl = \"sqlite://x.db\"\nmax_batch = 10\n",
            true,
        ),
        (
            "kind = \"http\"\nurl = \"http://h/\"\ntimeout = \"1s\"\n[sink.dead_letters]\npath = \"d\"\n",
            true,
        ),
        (
            "kind = \"postgres\"\nurl = \"postgres://h/d\"\nthrottle_sqlstates = [\"53300\"]\n",
            true,
        ),
        (
            "kind = \"mysql\"\nurl = \"mysql://h/d\"\nthrottle_errors = [1040]\n",
            true,
        ),
        (
            "kind = \"elasticsearch\"\nurl = \"http://h/\"\n[sink.elasticsearch]\nindex = \"i\"\n",
            true,
        ),
        ("url = \"sqlite://x.db\"\n", false),
        (
            "kind = \"sqlite\"\nurl = \"sqlite://x.db\"\ntimeout = \"1s\"\n",
            false,
        ),
        (
            "kind = \"mysql\"\nurl = \"mysql://h/d\"\nthrottle_sqlstates = [\"53300\"]\n",
            false,
        ),
        (
            "kind = \"http\"\nurl = \"http://h/\"\n[sink.elasticsearch]\nindex = \"i\"\n",
            false,
        ),
        (
            "kind = \"postgres\"\nurl = \"postgres://h/d\"\nmax_batch = \"ten\"\n",
            false,
        ),
    ] {
        cases.push((format!("{source}[sink]\n{sink}"), "sink", valid));
    }
    expect(&Validator::new(schema()), &cases);
}

#[test]
fn sluice_config_schema_prints_the_schema() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["config", "schema"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, schema());
    // Defaults and doc comments reach the editor.
    let rate = &printed["definitions"]["RateSettings"]["properties"];
    assert_eq!(rate["tick"]["default"], "200ms", "{rate}");
    assert!(
        rate["records_per_second"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("records per second")),
        "{rate}"
    );
}
