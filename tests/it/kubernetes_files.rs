//! The files the pods read, as the kubelet would lay them out, against the user the pod
//! runs as: each Secret and ConfigMap key a container mounts gets the mode its volume
//! gives it (`items[].mode`, else `defaultMode`, else 0644) and the owner root, with the
//! group `fsGroup` and the group read bit added where the pod sets one (the kubelet's
//! `SetVolumeOwnership` on a read-only volume: `mode | 0440`, group fsGroup). Every file
//! must be readable by the container's uid, primary gid and supplementary groups; every
//! `*_file` path a configuration names must be such a file. And the image must name a
//! registry: a bare `sluice:0.1.0` is pulled from Docker Hub's public namespace.

use crate::kubernetes_support;

use kubernetes_support::*;
use serde_yaml::Value;

/// Who a container's process is: uid, primary gid, supplementary groups.
struct Identity {
    uid: u64,
    gid: Option<u64>,
    groups: Vec<u64>,
}

/// One file as mounted: its path in the container, owner, group and mode.
#[derive(Debug)]
struct Mounted {
    path: String,
    uid: u64,
    gid: u64,
    mode: u32,
}

fn identity(pod: &Value, container: &Value) -> Identity {
    let setting = |key: &str| {
        container["securityContext"][key]
            .as_u64()
            .or_else(|| pod["securityContext"][key].as_u64())
    };
    let mut groups: Vec<u64> = pod["securityContext"]["supplementalGroups"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    groups.extend(pod["securityContext"]["fsGroup"].as_u64());
    Identity {
        uid: setting("runAsUser").expect("runAsUser: the image's user is not in the manifest"),
        gid: setting("runAsGroup"),
        groups,
    }
}

/// A mode as kubectl reads it: a number, or, written with a leading zero (which serde_yaml
/// leaves a string), octal as YAML 1.1 reads it. `modes_are_written_in_decimal` refuses the
/// latter; read as kubectl would, the readability check still judges it right.
fn mode(v: &Value) -> Option<u32> {
    let mode = match v {
        Value::Null => return None,
        Value::Number(n) => u32::try_from(n.as_u64().unwrap()).unwrap(),
        Value::String(s) if s.starts_with('0') => u32::from_str_radix(s, 8).unwrap(),
        other => panic!("mode {other:?} is not a number"),
    };
    assert!(mode <= 0o777, "mode {mode} is not a file mode");
    Some(mode)
}

/// The files `container` of `pod` sees from Secret and ConfigMap volumes.
fn mounted_files(
    all: &[(std::path::PathBuf, Value)],
    pod: &Value,
    container: &Value,
) -> Vec<Mounted> {
    let fs_group = pod["securityContext"]["fsGroup"].as_u64();
    let mut files = Vec::new();
    for mount in container["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        let volume = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("a mount names a volume of the pod");
        let (source, kind, data) = if volume["secret"].is_mapping() {
            (&volume["secret"], "Secret", "stringData")
        } else if volume["configMap"].is_mapping() {
            (&volume["configMap"], "ConfigMap", "data")
        } else {
            continue;
        };
        let object_name = source["secretName"]
            .as_str()
            .or_else(|| source["name"].as_str())
            .unwrap();
        let object = named(all, kind, object_name);
        let default_mode = mode(&source["defaultMode"]).unwrap_or(0o644);
        let keys: Vec<(String, String, u32)> = match source["items"].as_sequence() {
            Some(items) => items
                .iter()
                .map(|i| {
                    let key = str_of(&i["key"]).to_string();
                    (
                        key,
                        str_of(&i["path"]).to_string(),
                        mode(&i["mode"]).unwrap_or(default_mode),
                    )
                })
                .collect(),
            None => object[data]
                .as_mapping()
                .unwrap()
                .keys()
                .map(|k| (str_of(k).to_string(), str_of(k).to_string(), default_mode))
                .collect(),
        };
        for (key, path, mode) in keys {
            assert!(
                object[data][key.as_str()].is_string(),
                "{kind} {object_name} has no key {key}"
            );
            let (gid, mode) = match fs_group {
                Some(g) => (g, mode | 0o440),
                None => (0, mode),
            };
            files.push(Mounted {
                path: format!("{}/{path}", str_of(&mount["mountPath"])),
                uid: 0,
                gid,
                mode,
            });
        }
    }
    files
}

fn readable(file: &Mounted, who: &Identity) -> bool {
    let bits = if who.uid == file.uid {
        file.mode >> 6
    } else if who.gid == Some(file.gid) || who.groups.contains(&file.gid) {
        file.mode >> 3
    } else {
        file.mode
    };
    bits & 0o4 != 0
}

fn workloads(all: &[(std::path::PathBuf, Value)]) -> Vec<&Value> {
    let mut workloads = of_kind(all, "Deployment");
    workloads.extend(of_kind(all, "Job"));
    assert_eq!(workloads.len(), 3);
    workloads
}

#[test]
fn every_mounted_file_is_readable_by_the_user_the_pod_runs_as() {
    let all = objects();
    let map = named(&all, "ConfigMap", "sluice-config");
    for workload in workloads(&all) {
        let pod = &workload["spec"]["template"]["spec"];
        for container in pod["containers"].as_sequence().unwrap() {
            let who = identity(pod, container);
            assert_ne!(who.uid, 0, "{}: runs as root", name(workload));
            let files = mounted_files(&all, pod, container);
            assert!(!files.is_empty(), "{}: mounts nothing", name(workload));
            for file in &files {
                assert!(
                    readable(file, &who),
                    "{}: {} is {:o} {}:{}, unreadable by uid {} (gid {:?}, groups {:?})",
                    name(workload),
                    file.path,
                    file.mode,
                    file.uid,
                    file.gid,
                    who.uid,
                    who.gid,
                    who.groups
                );
            }
            // Every secret file the container's configuration names is one of them.
            let args: Vec<&str> = container["args"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(str_of)
                .collect();
            let at = args.iter().position(|a| *a == "--config").unwrap();
            let key = args[at + 1].rsplit('/').next().unwrap();
            let text = str_of(&map["data"][key]);
            let named_files: Vec<&str> = text
                .lines()
                .filter(|l| {
                    l.trim_start()
                        .split('=')
                        .next()
                        .unwrap()
                        .trim()
                        .ends_with("_file")
                })
                .map(|l| l.split('"').nth(1).unwrap())
                .collect();
            assert!(
                !named_files.is_empty(),
                "{key} reads its credentials from files"
            );
            for path in named_files {
                assert!(
                    files.iter().any(|f| f.path == path),
                    "{}: {key} reads {path}, which no volume mounts",
                    name(workload)
                );
            }
        }
    }
}

#[test]
fn modes_are_written_in_decimal() {
    for file in manifest_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let value = line.split_once("ode:").map(|(_, v)| v.trim());
            assert!(
                !value.is_some_and(|v| v.len() > 1 && v.starts_with('0')),
                "{}: {line}: a leading zero reads as octal to kubectl, as decimal to YAML 1.2",
                file.display()
            );
        }
    }
}

/// A mode 0400 Secret without fsGroup, for a pod that runs as 10001: the check fails.
#[test]
fn the_check_refuses_a_secret_only_root_can_read() {
    let pod: Value = serde_yaml::from_str(
        "securityContext: {runAsUser: 10001, runAsGroup: 10001}\nvolumes: [{name: s, secret: {secretName: sluice-credentials, defaultMode: 256}}]",
    )
    .unwrap();
    let container: Value =
        serde_yaml::from_str("volumeMounts: [{name: s, mountPath: /etc/sluice/secrets}]").unwrap();
    let all = objects();
    let files = mounted_files(&all, &pod, &container);
    let who = identity(&pod, &container);
    assert!(files.iter().all(|f| !readable(f, &who)), "{files:?}");
    let mut with_group = pod.clone();
    with_group["securityContext"]["fsGroup"] = Value::from(10001);
    let files = mounted_files(&all, &with_group, &container);
    assert!(
        files
            .iter()
            .all(|f| readable(f, &identity(&with_group, &container))),
        "{files:?}"
    );
}

#[test]
fn every_image_names_its_registry() {
    let all = objects();
    for workload in workloads(&all) {
        let pod = &workload["spec"]["template"]["spec"];
        for container in pod["containers"].as_sequence().unwrap() {
            let image = str_of(&container["image"]);
            let first = image.split('/').next().unwrap();
            assert!(
                image.contains('/') && (first.contains('.') || first.contains(':')),
                "{}: image {image} names no registry: it would be pulled from Docker Hub",
                name(workload)
            );
        }
    }
    let kustomization: Value = serde_yaml::from_str(
        &std::fs::read_to_string(format!("{DIR}/kustomization.yaml")).unwrap(),
    )
    .unwrap();
    assert!(
        kustomization["images"]
            .as_sequence()
            .is_some_and(|i| !i.is_empty()),
        "kustomization.yaml lets an overlay set the image"
    );
}
