//! docker-compose.yml cannot run here (no Docker engine), so it is checked as data: every
//! config a service runs with is valid for sluice, and every host a config points at is
//! a service of the compose file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sluice::config::{Config, Overrides};

fn compose() -> serde_yaml::Value {
    let text = std::fs::read_to_string("docker-compose.yml").unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// service name → its command line.
fn commands(doc: &serde_yaml::Value) -> BTreeMap<String, Vec<String>> {
    let services = doc["services"].as_mapping().unwrap();
    services
        .iter()
        .map(|(name, svc)| {
            let command = svc["command"]
                .as_sequence()
                .map(|c| c.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            (name.as_str().unwrap().to_string(), command)
        })
        .collect()
}

/// The image copies config/ to /etc/sluice and examples/ to /usr/share/sluice/examples.
fn in_repo(container_path: &str) -> PathBuf {
    if let Some(rest) = container_path.strip_prefix("/etc/sluice/") {
        return Path::new("config").join(rest);
    }
    if let Some(rest) = container_path.strip_prefix("/usr/share/sluice/examples/") {
        return Path::new("examples").join(rest);
    }
    panic!("{container_path} is not a path the image provides");
}

fn host_of(url: &str) -> String {
    let after_scheme = url.split("://").nth(1).unwrap_or(url);
    let authority = after_scheme.split('/').next().unwrap();
    let host_port = authority.rsplit('@').next().unwrap();
    host_port.split(':').next().unwrap().to_string()
}

#[test]
fn every_config_is_valid_and_points_at_compose_services() {
    let doc = compose();
    let services = commands(&doc);
    let dockerfile = std::fs::read_to_string("Dockerfile").unwrap();
    assert!(dockerfile.contains("COPY config /etc/sluice"));
    assert!(dockerfile.contains("COPY examples /usr/share/sluice/examples"));
    let mut checked = 0;
    for (name, command) in &services {
        let Some(at) = command.iter().position(|a| a == "--config") else {
            continue;
        };
        let config_path = in_repo(&command[at + 1]);
        let config = Config::load(&config_path, &Overrides::default())
            .unwrap_or_else(|e| panic!("service {name}: {}: {e}", config_path.display()));
        let mut hosts = Vec::new();
        if let Some(brokers) = config.source.kafka().and_then(|k| k.brokers.as_ref()) {
            hosts.extend(brokers.split(',').map(host_of));
        }
        if let Some(url) = config.source.amqp().and_then(|a| a.url.as_ref()) {
            hosts.push(host_of(url));
        }
        hosts.push(host_of(&config.sink.url));
        if let Some(leases) = &config.leases {
            hosts.push(host_of(&leases.store));
        }
        for host in hosts {
            assert!(
                services.contains_key(&host),
                "service {name}: {} points at {host}, not a compose service",
                config_path.display()
            );
        }
        if command[0] == "produce" {
            let input = in_repo(command.last().unwrap());
            assert!(
                input.is_file(),
                "service {name}: {} is missing",
                input.display()
            );
        }
        if let Some(listen) = config.telemetry.listen {
            assert_eq!(
                listen.port(),
                9898,
                "the image's HEALTHCHECK asks port 9898"
            );
            assert!(
                listen.ip().is_unspecified(),
                "reachable from outside the container"
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "the workers and the producer run sluice with a config"
    );
    let replicas = doc["services"]["sluice"]["deploy"]["replicas"].as_u64();
    assert_eq!(replicas, Some(3));
}

/// Services that start by default publish no host port (a local PostgreSQL or broker would
/// clash); one that does, or that no default service uses, sits behind a profile.
#[test]
fn default_services_publish_nothing_and_are_all_used() {
    let doc = compose();
    let services = doc["services"].as_mapping().unwrap();
    let default: Vec<(&str, &serde_yaml::Value)> = services
        .iter()
        .filter(|(_, svc)| svc["profiles"].is_null())
        .map(|(name, svc)| (name.as_str().unwrap(), svc))
        .collect();
    for (name, svc) in &default {
        assert!(
            svc["ports"].is_null(),
            "service {name} publishes host ports by default: {:?}",
            svc["ports"]
        );
    }
    let commands = commands(&doc);
    for (name, _) in &default {
        let runs_sluice = commands[*name].iter().any(|a| a == "--config");
        let needed = default.iter().any(|(_, other)| {
            other["depends_on"]
                .as_mapping()
                .is_some_and(|d| d.contains_key(*name))
        });
        assert!(
            runs_sluice || needed,
            "service {name} starts by default but nothing uses it: give it a profile"
        );
    }
    assert!(
        !default.iter().any(|(name, _)| *name == "rabbitmq"),
        "no default worker reads RabbitMQ"
    );
}
