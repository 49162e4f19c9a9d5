//! Endpoints found while the worker runs, as Finagle's resolvers find them: every A/AAAA
//! record of a `dns+http://name:port/path` entry of `sink.urls` is an endpoint, and so is
//! every URL of `sink.discovery.file`. Both are looked at again every
//! `sink.discovery.interval`; endpoints that appeared join the balancer, those gone drain
//! (no new batch, those in flight finish). A source that fails — a name that does not
//! resolve, a file that cannot be read or lists nothing — keeps its last good answer:
//! a DNS hiccup or a half-written file never empties the worker's endpoint list. A line
//! of the file passes the checks an entry of `sink.urls` passes at start
//! ([`SinkSettings::check_endpoint`]); one that does not is skipped with a warning (once,
//! while it stays), and the rest of the list is used.

pub mod settings;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::SinkError;
use super::balanced::BalancedSink;
use crate::sink::balanced::settings::EndpointSettings;
use crate::sink::settings::SinkSettings;
use settings::DNS_PREFIX;

/// An endpoint the sources name now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub url: String,
    pub zone: Option<String>,
    /// The label configured for it; None: `host:port`.
    pub name: Option<String>,
}

/// A `dns+http://` entry: the URL whose host is replaced by each address it resolves to.
struct DnsEntry {
    entry: String,
    url: reqwest::Url,
    zone: Option<String>,
}

pub struct Discovery {
    fixed: Vec<Wanted>,
    names: Vec<DnsEntry>,
    file: Option<PathBuf>,
    resolver: Option<TokioResolver>,
    /// Each source's last good answer: `dns:<entry>` or `file`.
    last_good: BTreeMap<String, Vec<Wanted>>,
    /// What the file's endpoints are checked against.
    sink: SinkSettings,
    /// Lines of the file skipped and warned about: not warned about again while they stay.
    skipped: HashSet<String>,
}

impl Discovery {
    pub fn new(sink: &SinkSettings) -> Result<Self, SinkError> {
        let mut fixed = Vec::new();
        let mut names = Vec::new();
        for e in &sink.urls {
            let (zone, name) = match e {
                EndpointSettings::Url(_) => (None, None),
                EndpointSettings::Zoned { zone, name, .. } => (zone.clone(), name.clone()),
            };
            match e.url().strip_prefix(DNS_PREFIX) {
                Some(rest) => names.push(DnsEntry {
                    entry: e.url().to_string(),
                    url: reqwest::Url::parse(rest).map_err(|err| error(e.url(), err))?,
                    zone,
                }),
                None => fixed.push(Wanted {
                    url: e.url().to_string(),
                    zone,
                    name,
                }),
            }
        }
        let resolver = if names.is_empty() {
            None
        } else {
            Some(resolver(sink.discovery.nameserver).map_err(|err| error("sink.discovery", err))?)
        };
        Ok(Discovery {
            fixed,
            names,
            file: sink.discovery.file.clone(),
            resolver,
            last_good: BTreeMap::new(),
            sink: sink.clone(),
            skipped: HashSet::new(),
        })
    }

    /// Whether anything can change while running.
    pub fn is_dynamic(&self) -> bool {
        !self.names.is_empty() || self.file.is_some()
    }

    /// The endpoints the sources name now, each once.
    pub async fn resolve(&mut self) -> Vec<Wanted> {
        if let Some(resolver) = &self.resolver {
            // Asked again each round, whatever the records' TTL: the interval is the rule.
            resolver.clear_cache();
            for e in &self.names {
                match lookup(resolver, e).await {
                    Ok(found) => {
                        self.last_good.insert(format!("dns:{}", e.entry), found);
                    }
                    Err(why) => tracing::warn!(
                        entry = %crate::redact::redact(&e.entry),
                        "discovery keeps the last addresses: {why}"
                    ),
                }
            }
        }
        if let Some(path) = &self.file {
            match read_list(path, &self.sink, &mut self.skipped).await {
                Ok(found) => {
                    self.last_good.insert("file".into(), found);
                }
                Err(why) => tracing::warn!(
                    file = %path.display(),
                    "discovery keeps the last list: {why}"
                ),
            }
        }
        let mut seen = HashSet::new();
        self.fixed
            .iter()
            .chain(self.last_good.values().flatten())
            .filter(|w| seen.insert(w.url.clone()))
            .cloned()
            .collect()
    }

    /// Looks again every `interval` while the sink lives, and applies what changed.
    pub fn spawn(
        mut self,
        sink: Weak<BalancedSink>,
        settings: SinkSettings,
        opening: super::SinkOpening,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(settings.discovery.interval);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let wanted = self.resolve().await;
                let Some(sink) = sink.upgrade() else {
                    return;
                };
                apply(&sink, &settings, &opening, wanted).await;
            }
        })
    }
}

/// Opens the endpoints that joined and lets those that left drain.
pub async fn apply(
    sink: &Arc<BalancedSink>,
    settings: &SinkSettings,
    opening: &super::SinkOpening,
    wanted: Vec<Wanted>,
) {
    let current: HashSet<String> = sink.keys().into_iter().collect();
    let urls: HashSet<&str> = wanted.iter().map(|w| w.url.as_str()).collect();
    for key in current.iter().filter(|k| !urls.contains(k.as_str())) {
        tracing::info!(
            endpoint = %crate::redact::endpoint_label(key),
            "endpoint left discovery: draining"
        );
        sink.remove(key);
    }
    for w in wanted.iter().filter(|w| !current.contains(&w.url)) {
        match super::open_endpoint(settings, opening, w).await {
            Ok(endpoint) => {
                tracing::info!(endpoint = %endpoint.name, "endpoint joined");
                sink.add(endpoint);
            }
            // Tried again next round.
            Err(e) => tracing::warn!("a discovered endpoint could not be opened: {e}"),
        }
    }
}

fn error(url: &str, err: impl std::fmt::Display) -> SinkError {
    SinkError {
        url: url.to_string(),
        message: err.to_string(),
        not_now: false,
    }
}

/// A resolver asking `nameserver`, or the system's configured servers.
fn resolver(
    nameserver: Option<std::net::SocketAddr>,
) -> Result<TokioResolver, hickory_resolver::net::NetError> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = match nameserver {
        Some(addr) => {
            let mut server = NameServerConfig::udp_and_tcp(addr.ip());
            for c in &mut server.connections {
                c.port = addr.port();
            }
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![server]),
                provider,
            )
        }
        None => TokioResolver::builder(provider)?,
    };
    builder.options_mut().ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    builder.build()
}

async fn lookup(resolver: &TokioResolver, e: &DnsEntry) -> Result<Vec<Wanted>, String> {
    let host = e.url.host_str().unwrap_or_default();
    let found = resolver.lookup_ip(host).await.map_err(|e| e.to_string())?;
    let mut addrs: Vec<std::net::IpAddr> = found.iter().collect();
    addrs.sort();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(format!("{host} has no A or AAAA record"));
    }
    Ok(addrs
        .into_iter()
        .map(|ip| {
            let mut url = e.url.clone();
            let _ = url.set_ip_host(ip);
            Wanted {
                url: url.to_string(),
                zone: e.zone.clone(),
                name: None,
            }
        })
        .collect())
}

/// The file's URLs, one a line; blank lines and `#` comments skipped. A line that `sink`
/// would refuse in `sink.urls` is skipped, with a warning unless `skipped` says it was
/// warned about (it holds the lines skipped this time, after); a file naming none is an
/// error (keep the last list).
async fn read_list(
    path: &std::path::Path,
    sink: &SinkSettings,
    skipped: &mut HashSet<String>,
) -> Result<Vec<Wanted>, String> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| e.to_string())?;
    let mut now_skipped = HashSet::new();
    let found: Vec<Wanted> = parse_list(&text)
        .into_iter()
        .filter_map(|line| match sink.check_endpoint(line) {
            Ok(()) => Some(Wanted {
                url: line.to_string(),
                zone: None,
                name: None,
            }),
            Err(why) => {
                if !skipped.contains(line) {
                    tracing::warn!(
                        line = %crate::redact::redact(line),
                        "discovery file: endpoint skipped: {why}"
                    );
                }
                now_skipped.insert(line.to_string());
                None
            }
        })
        .collect();
    *skipped = now_skipped;
    if found.is_empty() {
        return Err("it names no usable endpoint".into());
    }
    Ok(found)
}

fn parse_list(text: &str) -> Vec<&str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_lists_one_url_a_line_with_comments() {
        let text = "# ingest tier\nhttp://10.0.0.1:8080/ingest\n\n  http://10.0.0.2:8080/ingest  # rack b\n";
        assert_eq!(
            parse_list(text),
            ["http://10.0.0.1:8080/ingest", "http://10.0.0.2:8080/ingest"]
        );
    }

    #[tokio::test]
    async fn a_file_that_fails_keeps_the_last_good_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("endpoints");
        std::fs::write(&path, "http://10.0.0.1:1/a\nhttp://10.0.0.2:1/a\n").unwrap();
        let sink = SinkSettings {
            urls: vec![EndpointSettings::Url("http://10.0.0.9:1/a".into())],
            discovery: settings::DiscoverySettings {
                file: Some(path.clone()),
                ..Default::default()
            },
            ..http_sink()
        };
        let mut d = Discovery::new(&sink).unwrap();
        let urls = |w: Vec<Wanted>| w.into_iter().map(|w| w.url).collect::<Vec<_>>();
        let all = [
            "http://10.0.0.9:1/a",
            "http://10.0.0.1:1/a",
            "http://10.0.0.2:1/a",
        ];
        assert_eq!(urls(d.resolve().await), all);
        // Half-written (empty), then gone: the last good list stands.
        std::fs::write(&path, "").unwrap();
        assert_eq!(urls(d.resolve().await), all);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(urls(d.resolve().await), all);
        std::fs::write(&path, "http://10.0.0.2:1/a\nnot a url\n").unwrap();
        assert_eq!(
            urls(d.resolve().await),
            ["http://10.0.0.9:1/a", "http://10.0.0.2:1/a"]
        );
    }

    fn http_sink() -> SinkSettings {
        SinkSettings::new(
            "",
            crate::sink::settings::SinkBackend::Http(Default::default()),
        )
    }

    /// `localhost:29313/ingest` parses as a URL of scheme "localhost": accepted, it
    /// stopped the worker at its first write. It is refused as `sink.urls` refuses it.
    #[tokio::test]
    async fn a_line_the_configuration_would_refuse_is_skipped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("endpoints");
        std::fs::write(&path, "http://10.0.0.1:1/a\n").unwrap();
        let sink = SinkSettings {
            discovery: settings::DiscoverySettings {
                file: Some(path.clone()),
                ..Default::default()
            },
            ..http_sink()
        };
        let mut d = Discovery::new(&sink).unwrap();
        let urls = |w: Vec<Wanted>| w.into_iter().map(|w| w.url).collect::<Vec<_>>();
        assert_eq!(urls(d.resolve().await), ["http://10.0.0.1:1/a"]);
        let bad = [
            "localhost:29313/ingest",
            "ftp://10.0.0.3/x",
            "dns+http://ingest:80/x",
            "postgres://u@db/x",
        ];
        std::fs::write(&path, format!("http://10.0.0.2:1/a\n{}\n", bad.join("\n"))).unwrap();
        assert_eq!(urls(d.resolve().await), ["http://10.0.0.2:1/a"]);
        assert_eq!(d.skipped.len(), bad.len());
        // Nothing usable: the last good list stands.
        std::fs::write(&path, "localhost:29313/ingest\n").unwrap();
        assert_eq!(urls(d.resolve().await), ["http://10.0.0.2:1/a"]);
        for line in bad {
            let why = sink.check_endpoint(line).unwrap_err();
            assert!(
                why.contains("http(s)://") || why.contains("dns+"),
                "{line}: {why}"
            );
        }
        assert!(sink.check_endpoint("https://10.0.0.2:8443/in").is_ok());
    }
}
