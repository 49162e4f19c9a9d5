//! deploy/kubernetes checked offline: every manifest against the Kubernetes schemas
//! (`kubernetes-validate`), the KEDA objects against the fields their CRDs require, the
//! configurations in the ConfigMap loaded by sluice, the pods against those
//! configurations (grace, probes, memory, lease pool), and a `checkov` scan of the
//! manifests and the Dockerfile. `scripts/manifest-tools.sh` installs both tools into
//! ./.venv.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_yaml::Value;
use sluice::config::{Config, Overrides};

use crate::kubernetes_support;
use kubernetes_support::*;

/// The largest peak RSS measured (docs/design/bench.md, throughput ceilings: RabbitMQ → PostgreSQL,
/// limits off). Memory stays flat with the backlog, so requests and limits follow it.
const PEAK_RSS_MIB: f64 = 44.9;

/// The ConfigMap's configurations loaded as a pod would: the Secret's values in files
/// where the pod mounts it. Key → configuration.
fn configs(all: &[(PathBuf, Value)], dir: &Path) -> BTreeMap<String, Config> {
    let secret = named(all, "Secret", "sluice-credentials");
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    for (key, value) in secret["stringData"].as_mapping().unwrap() {
        std::fs::write(secrets.join(str_of(key)), str_of(value)).unwrap();
    }
    let map = named(all, "ConfigMap", "sluice-config");
    let mut out = BTreeMap::new();
    for (key, text) in map["data"].as_mapping().unwrap() {
        let key = str_of(key);
        let text = str_of(text).replace("/etc/sluice/secrets/", &format!("{}/", secrets.display()));
        let path = dir.join(key);
        std::fs::write(&path, text).unwrap();
        let config = Config::load(&path, &Overrides::default())
            .unwrap_or_else(|e| panic!("ConfigMap key {key}: {e}"));
        out.insert(key.to_string(), config);
    }
    out
}

/// The pod template's container `sluice` and the configuration its `--config` names.
fn container_config<'a>(
    workload: &'a Value,
    configs: &'a BTreeMap<String, Config>,
) -> (&'a Value, &'a Config, Vec<String>) {
    let container = workload["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "sluice")
        .expect("a container named sluice");
    let args: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| str_of(a).to_string())
        .collect();
    let at = args.iter().position(|a| a == "--config").unwrap();
    let key = args[at + 1]
        .strip_prefix("/etc/sluice/config/")
        .unwrap_or_else(|| panic!("{}: config outside the ConfigMap mount", name(workload)));
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/etc/sluice/config")
        .expect("the ConfigMap mounted at /etc/sluice/config");
    let volume = workload["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["configMap"]["name"], "sluice-config");
    let config = configs
        .get(key)
        .unwrap_or_else(|| panic!("{}: no ConfigMap key {key}", name(workload)));
    (container, config, args)
}

/// Kubernetes quantities as MiB ("64Mi", "1Gi").
fn mib(q: &Value) -> f64 {
    let q = str_of(q);
    let (n, unit) = q.split_at(q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len()));
    let n: f64 = n.parse().unwrap();
    match unit {
        "Mi" => n,
        "Gi" => n * 1024.0,
        other => panic!("unexpected memory unit {other:?} in {q}"),
    }
}

/// The Kubernetes minors the manifests are validated against: from 1.30, the oldest still
/// run under the cloud providers' extended support (the oldest minor supported upstream
/// is 1.35 as of late 2026, 1.34 having reached its end of life in October), to the newest
/// kubernetes-validate knows.
const MINORS: std::ops::RangeInclusive<u32> = 30..=37;

#[test]
fn every_manifest_matches_the_kubernetes_schemas() {
    let files = manifest_files();
    for minor in MINORS {
        let version = format!("1.{minor}.0");
        let out = Command::new(tool("kubernetes-validate"))
            .args(["--strict", "--quiet", "--kubernetes-version", &version])
            .args(&files)
            .output()
            .unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "Kubernetes {version}: {report}");
        // Only KEDA's kinds lack a built-in schema; they are checked below.
        for line in report.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                line.contains("Couldn't find schema for kind")
                    && line.contains("api version keda.sh/v1alpha1"),
                "Kubernetes {version}: {line}"
            );
        }
    }
    let all = objects();
    // The API server requires a pod condition's `status` before 1.37, where the 1.35 and
    // 1.36 schemas do not say so.
    for job in of_kind(&all, "Job") {
        for rule in job["spec"]["podFailurePolicy"]["rules"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            for condition in rule["onPodConditions"].as_sequence().into_iter().flatten() {
                assert!(
                    condition["status"].is_string(),
                    "{}: onPodConditions {condition:?} without a status",
                    name(job)
                );
            }
        }
    }
    assert!(all.len() >= 12, "{} objects", all.len());
    for (file, v) in &all {
        if v["kind"] != "Namespace" {
            assert_eq!(v["metadata"]["namespace"], "sluice", "{}", file.display());
        }
    }
    let kustomization = std::fs::read_to_string(Path::new(DIR).join("kustomization.yaml")).unwrap();
    let listed: Value = serde_yaml::from_str(&kustomization).unwrap();
    let listed: Vec<&str> = listed["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(str_of)
        .collect();
    for file in &files {
        let file_name = file.file_name().unwrap().to_str().unwrap();
        assert!(
            listed.contains(&file_name) || file_name.starts_with("job-"),
            "{file_name} is not in kustomization.yaml"
        );
    }
}

/// The fields KEDA's CRDs (keda.sh/v1alpha1) require, their types, and no field they do
/// not know; then what the autoscaler reads must be what the workers read, and it must
/// never run more workers than their lease pool can feed.
#[test]
fn keda_objects_have_the_required_fields_and_fit_the_lease_pools() {
    let all = objects();
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(&all, dir.path());
    let scaled = of_kind(&all, "ScaledObject");
    assert_eq!(scaled.len(), 2, "one for Kafka, one for RabbitMQ");
    const SPEC_FIELDS: &[&str] = &[
        "advanced",
        "cooldownPeriod",
        "fallback",
        "idleReplicaCount",
        "initialCooldownPeriod",
        "maxReplicaCount",
        "minReplicaCount",
        "pollingInterval",
        "scaleTargetRef",
        "triggers",
    ];
    let mut types = Vec::new();
    for so in scaled {
        let so_name = name(so);
        assert_eq!(so["apiVersion"], "keda.sh/v1alpha1", "{so_name}");
        let spec = so["spec"].as_mapping().expect("spec (required)");
        for key in spec.keys() {
            assert!(
                SPEC_FIELDS.contains(&str_of(key)),
                "{so_name}: unknown spec.{key:?}"
            );
        }
        let target = str_of(&so["spec"]["scaleTargetRef"]["name"]);
        let deployment = named(&all, "Deployment", target);
        let (_, config, _) = container_config(deployment, &configs);
        let min = so["spec"]["minReplicaCount"]
            .as_u64()
            .expect("minReplicaCount");
        let max = so["spec"]["maxReplicaCount"]
            .as_u64()
            .expect("maxReplicaCount");
        assert!(min <= max && max >= 1, "{so_name}: {min}..{max}");
        for key in ["pollingInterval", "cooldownPeriod"] {
            assert!(so["spec"][key].as_u64().is_some(), "{so_name}: {key}");
        }
        let leases = config
            .leases
            .as_ref()
            .expect("the workers share a lease pool");
        assert!(
            max <= u64::from(leases.partitions),
            "{so_name}: {max} replicas, but pool {} has {} leases: the rest would idle",
            leases.pool,
            leases.partitions
        );
        let triggers = so["spec"]["triggers"]
            .as_sequence()
            .expect("triggers (required)");
        assert!(!triggers.is_empty());
        for trigger in triggers {
            let kind = str_of(&trigger["type"]);
            let metadata = trigger["metadata"]
                .as_mapping()
                .expect("trigger metadata (required)");
            for value in metadata.values() {
                str_of(value);
            }
            match kind {
                "kafka" => {
                    assert_eq!(
                        trigger["metadata"]["topic"].as_str(),
                        config.source.kafka().and_then(|k| k.topic.as_deref())
                    );
                    assert_eq!(
                        trigger["metadata"]["consumerGroup"].as_str(),
                        config.source.kafka().and_then(|k| k.group.as_deref())
                    );
                    assert_eq!(
                        trigger["metadata"]["bootstrapServers"].as_str(),
                        config.source.kafka().and_then(|k| k.brokers.as_deref())
                    );
                    str_of(&trigger["metadata"]["lagThreshold"])
                        .parse::<u64>()
                        .unwrap();
                }
                "rabbitmq" => {
                    assert_eq!(
                        trigger["metadata"]["queueName"].as_str(),
                        config.source.amqp().and_then(|a| a.queue.as_deref())
                    );
                    str_of(&trigger["metadata"]["value"])
                        .parse::<u64>()
                        .unwrap();
                    let auth = named(
                        &all,
                        "TriggerAuthentication",
                        str_of(&trigger["authenticationRef"]["name"]),
                    );
                    for r in auth["spec"]["secretTargetRef"].as_sequence().unwrap() {
                        let secret = named(&all, "Secret", str_of(&r["name"]));
                        str_of(&r["parameter"]);
                        assert!(
                            secret["stringData"][str_of(&r["key"])].is_string(),
                            "TriggerAuthentication reads a key the Secret lacks"
                        );
                    }
                }
                other => panic!("{so_name}: unexpected trigger {other}"),
            }
            types.push(kind.to_string());
        }
    }
    types.sort();
    assert_eq!(types, ["kafka", "rabbitmq"]);
}

#[test]
fn pods_fit_their_configuration() {
    let all = objects();
    let dir = tempfile::tempdir().unwrap();
    let configs = configs(&all, dir.path());
    assert_eq!(configs.len(), 2);
    let mut workloads: Vec<&Value> = of_kind(&all, "Deployment");
    workloads.extend(of_kind(&all, "Job"));
    assert_eq!(workloads.len(), 3);
    for w in workloads {
        let w_name = name(w);
        let pod = &w["spec"]["template"]["spec"];
        let (container, config, args) = container_config(w, &configs);
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert!(
            Duration::from_secs(grace) > config.shutdown.grace,
            "{w_name}: SIGKILL after {grace} s, before shutdown.grace {:?} is over",
            config.shutdown.grace
        );
        let port = config.telemetry.listen.expect("telemetry.listen").port();
        let ports = container["ports"].as_sequence().unwrap();
        assert!(
            ports
                .iter()
                .any(|p| p["name"] == "metrics" && p["containerPort"] == port)
        );
        assert_eq!(
            container["readinessProbe"]["httpGet"]["path"], "/readyz",
            "{w_name}"
        );
        assert_eq!(
            container["livenessProbe"]["httpGet"]["path"], "/healthz",
            "{w_name}"
        );
        let resources = &container["resources"];
        let request = mib(&resources["requests"]["memory"]);
        let limit = mib(&resources["limits"]["memory"]);
        assert!(
            request >= PEAK_RSS_MIB * 1.2 && limit >= PEAK_RSS_MIB * 2.0 && limit >= request,
            "{w_name}: memory {request} / {limit} MiB against a measured peak of {PEAK_RSS_MIB} MiB"
        );
        assert_eq!(pod["automountServiceAccountToken"], false);
        let secrets = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["secret"].is_mapping())
            .expect("the Secret is mounted as files");
        assert_eq!(secrets["secret"]["secretName"], "sluice-credentials");
        if w["kind"] == "Job" {
            assert!(
                args.iter().any(|a| a == "--until-empty"),
                "{w_name}: a Job must end"
            );
            assert_eq!(pod["restartPolicy"], "Never", "podFailurePolicy needs it");
            let rules = w["spec"]["podFailurePolicy"]["rules"]
                .as_sequence()
                .unwrap();
            assert!(
                rules.iter().any(|r| r["action"] == "FailJob"
                    && r["onExitCodes"]["operator"] == "In"
                    && r["onExitCodes"]["values"]
                        .as_sequence()
                        .is_some_and(|v| v.iter().any(|c| c == 2))),
                "exit 2 (bad configuration) fails the Job at once"
            );
            assert!(
                w["spec"]["backoffLimit"].as_u64().unwrap() >= 1,
                "exit 1 is retried"
            );
            let at = args
                .iter()
                .position(|a| a == "--deadline")
                .expect("--deadline");
            let deadline = humantime::parse_duration(&args[at + 1]).unwrap();
            let backstop =
                Duration::from_secs(w["spec"]["activeDeadlineSeconds"].as_u64().unwrap());
            assert!(
                backstop > deadline + config.shutdown.grace,
                "{w_name}: activeDeadlineSeconds cuts the run before --deadline and the grace"
            );
        }
    }
    for pdb in of_kind(&all, "PodDisruptionBudget") {
        let selector = &pdb["spec"]["selector"]["matchLabels"];
        assert!(
            of_kind(&all, "Deployment")
                .iter()
                .any(|d| &d["spec"]["template"]["metadata"]["labels"] == selector),
            "{} selects no Deployment's pods",
            name(pdb)
        );
    }
}

/// checkov finds nothing in the manifests and the Dockerfile; each check skipped names
/// its reason next to it.
#[test]
fn checkov_passes_on_the_manifests_and_the_dockerfile() {
    let out = Command::new(tool("checkov"))
        .args(["--directory", DIR, "--file", "Dockerfile"])
        .args(["--framework", "kubernetes", "dockerfile"])
        .args(["--compact", "--quiet", "--skip-download"])
        .env("BC_SKIP_MAPPING", "TRUE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for file in manifest_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if let Some(skip) = line.trim().strip_prefix("checkov.io/skip") {
                let reason = skip.split_once('=').map(|(_, r)| r.trim()).unwrap_or("");
                assert!(
                    !reason.is_empty(),
                    "{}: a skip without a reason",
                    file.display()
                );
                assert!(
                    i > 0 && lines[i - 1].trim().starts_with('#'),
                    "{}: a skip without a comment explaining it",
                    file.display()
                );
            }
        }
    }
}
