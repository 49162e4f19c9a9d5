//! Every configuration in `examples/` is one a user can start from: `sluice check` passes
//! on it against the test services (`scripts/services.sh`), only the addresses pointed at
//! them from the environment, as the examples' comments say. A new example is checked
//! without a line here.

use crate::kafka_pg_support;

use std::path::PathBuf;

use crate::common::{self, sluice};

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("examples")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn kind_of(config: &toml::Value, section: &str) -> String {
    config
        .get(section)
        .and_then(|s| s.get("kind"))
        .and_then(|k| k.as_str())
        .unwrap_or("file")
        .to_string()
}

#[test]
fn every_example_passes_check_against_the_test_services() {
    let mut bulk = sluice::sim_sink::SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 10_000.0);
    bulk.bulk = true;
    let (_rt, cluster) = common::sim_sink(bulk);
    let files = examples();
    assert!(files.len() >= 6, "only {} examples", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let config: toml::Value = toml::from_str(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut check = sluice();
        check.arg("check").arg("--config").arg(file);
        let mut topic = None;
        if kind_of(&config, "source") == "kafka" {
            let name = common::unique("example");
            kafka_pg_support::create_topic(&name, 2);
            check
                .env("SLUICE_SOURCE__BROKERS", kafka_pg_support::brokers())
                .env("SLUICE_SOURCE__TOPIC", &name);
            topic = Some(name);
        }
        if kind_of(&config, "source") == "amqp" {
            check.env("SLUICE_SOURCE__URL", common::amqp_url());
        }
        match kind_of(&config, "sink").as_str() {
            "postgres" => {
                check.env("SLUICE_SINK__URL", common::pg_url());
            }
            "mysql" => {
                if let Ok(url) = std::env::var("SLUICE_TEST_MYSQL_URL") {
                    check.env("SLUICE_SINK__URL", url);
                }
            }
            "elasticsearch" => {
                check.env("SLUICE_SINK__URL", cluster.base_url());
            }
            _ => {}
        }
        if config.get("leases").is_some() {
            check.env("SLUICE_LEASES__STORE", common::pg_url());
        }
        let out = check.output().unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{}: exit {:?}\n{}",
                file.display(),
                out.status.code(),
                common::stderr(&out)
            ));
        }
        if let Some(name) = topic {
            kafka_pg_support::delete_topic(&name);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
