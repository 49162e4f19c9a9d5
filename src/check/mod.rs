//! `sluice check`: reaches everything `run` will need — the source, the sink (every
//! endpoint), the dead-letter store, the lease store, the checkpoint directory and the
//! telemetry address — each within a timeout, and changes nothing: no file, table or
//! queue is created (what `run` would create is checked for the right to create it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::redact::redact;

mod sink;
mod source;

/// One thing `run` needs, and whether it is there.
#[derive(Debug)]
pub struct Finding {
    /// What was checked, endpoint included (masked).
    pub what: String,
    /// What was found: Ok with a note, or Err with the reason.
    pub result: Result<String, String>,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match &self.result {
            Ok(note) => format!("ok    {}: {note}", self.what),
            Err(why) => format!("FAIL  {}: {why}", self.what),
        };
        f.write_str(&redact(&text))
    }
}

/// A Redis lease store answers the scripts a worker runs (an ACL refusing EVAL or a key
/// shows here), and holds the pool's definition or none yet.
async fn redis_store(l: &crate::config::LeasesSettings) -> Result<String, String> {
    use crate::lease::LeaseStore;
    let store = crate::lease::redis::RedisLeaseStore::open_existing(&l.store, &l.pool, l.ttl)
        .map_err(|e| e.message)?;
    match store.definition().await.map_err(|e| e.message)? {
        Some(d) => Ok(format!(
            "reachable; pool {:?}: {} rec/s in {} leases (generation {})",
            l.pool, d.capacity, d.partitions, d.generation
        )),
        None => Ok(format!(
            "reachable; pool {:?} not defined yet (the first worker defines it)",
            l.pool
        )),
    }
}

/// The schema registry answers and takes the credentials.
#[cfg(feature = "kafka")]
async fn schema_registry(
    settings: &crate::format::settings::RegistrySettings,
) -> Result<String, String> {
    use crate::format::registry::{RegistryError, SchemaRegistry};
    let registry = SchemaRegistry::new(settings)?;
    match registry.check().await {
        Ok(()) => Ok("reachable; credentials accepted (GET /subjects)".into()),
        Err(RegistryError::Missing(why)) => Ok(format!(
            "reachable; GET /subjects answered {why} (schemas are read by id)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Checks everything the configuration calls for, each bounded by `timeout`.
pub async fn check_all(config: &Config, timeout: Duration) -> Vec<Finding> {
    let mut findings = Vec::new();
    findings.extend(source::findings(&config.source, timeout).await);
    #[cfg(feature = "kafka")]
    if let Some(registry) = config
        .source
        .kafka()
        .and_then(|k| k.schema_registry.as_ref())
    {
        findings.push(Finding {
            what: format!("schema registry {}", registry.url.list().join(", ")),
            result: within(timeout, schema_registry(registry)).await,
        });
    }
    findings.extend(sink::findings(config, timeout).await);
    if let Some(l) = &config.leases {
        let what = format!("lease store {}", l.store);
        if l.by_assignment() {
            findings.push(Finding {
                what,
                result: Ok("the capacity follows the Kafka group's assignment".into()),
            });
        } else if crate::lease::redis::is_redis_url(&l.store) {
            findings.push(Finding {
                what,
                result: within(timeout, redis_store(l)).await,
            });
        } else {
            let tables = crate::lease::postgres::tables();
            let found = async {
                let options = crate::lease::postgres::connect_options(&l.store)?;
                sink::postgres_with(options, &tables).await
            };
            match within(timeout, found).await {
                Ok(found) => findings.extend(found.findings(what, "")),
                Err(e) => findings.push(Finding {
                    what,
                    result: Err(e),
                }),
            }
        }
    }
    for probe in &config.health.probe {
        // Reached and read: ok, whatever the value (over max holds writes, it is no fault).
        let task = crate::health::probe::ProbeTask::new(probe, &config.sink);
        let mut conns: Vec<_> = task.targets.iter().map(|_| None).collect();
        let reading = within(timeout, async {
            match task.run_once(&mut conns).await {
                crate::control::health::Reading::Value(v) => {
                    let tls = task.tls(&mut conns).await;
                    Ok(format!("reads {v} ({}), {tls}", probe.describe_limits()))
                }
                crate::control::health::Reading::Failed(e) => Err(e),
            }
        })
        .await;
        findings.push(Finding {
            what: format!("health probe {}", probe.name()),
            result: reading,
        });
    }
    if let Some(listen) = config.telemetry.listen {
        let result = match std::net::TcpListener::bind(listen) {
            Ok(_) => Ok("free".into()),
            Err(e) => Err(format!("cannot listen: {e}")),
        };
        findings.push(Finding {
            what: format!("telemetry.listen {listen}"),
            result,
        });
    }
    findings
}

async fn within<T, F>(timeout: Duration, work: F) -> Result<T, String>
where
    F: Future<Output = Result<T, String>>,
{
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

/// Whether `path` can be written: an existing file opened for writing (not truncated),
/// or a probe file created and removed at once in its directory.
pub fn writable(path: &Path) -> Result<(), String> {
    match std::fs::OpenOptions::new().append(true).open(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot write {}: {e}", path.display()));
        }
        Err(_) => {}
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let probe = dir.join(format!(
        ".sluice-probe-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!("cannot create files in {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_leaves_nothing_behind_and_names_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        writable(&dir.path().join("cp")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let e = writable(&dir.path().join("no/such/dir/cp")).unwrap_err();
        assert!(e.contains("no/such/dir"), "{e}");
    }
}
