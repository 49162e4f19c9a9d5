//! What `sluice check` reaches of the sink: every endpoint, the database and its tables,
//! the dead-letter store.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::{Finding, within, writable};
use crate::config::Config;
use crate::redact::redact;
use crate::sink::postgres::catalog::{self, JudgedTable, TableUse};
use crate::sink::postgres::sqlstate::describe;
use crate::sink::postgres::tables::{Target, dead_letter_table};
use crate::sink::settings::SinkKind;

pub(super) async fn findings(config: &Config, timeout: Duration) -> Vec<Finding> {
    let sink = &config.sink;
    let urls: Vec<String> = if sink.urls.is_empty() && sink.discovery.file.is_none() {
        vec![sink.url.clone()]
    } else {
        // The endpoints discovery finds now: names resolved, the file read.
        let found = match crate::sink::discovery::Discovery::new(sink) {
            Ok(mut d) => Ok(d.resolve().await),
            Err(e) => Err(e.to_string()),
        };
        match found {
            Ok(found) if !found.is_empty() => found.into_iter().map(|w| w.url).collect(),
            Ok(_) => {
                return vec![Finding {
                    what: "sink discovery".into(),
                    result: Err("found no endpoint".into()),
                }];
            }
            Err(e) => {
                return vec![Finding {
                    what: "sink discovery".into(),
                    result: Err(e),
                }];
            }
        }
    };
    let mut findings = Vec::new();
    // Some table is missing (or lacks columns): opening the sink would create it, which
    // check must not.
    let mut creates = false;
    let several = urls.len() > 1;
    for url in urls {
        if let (SinkKind::Postgres, Some(own)) = (sink.kind(), sink.postgres()) {
            let what = format!("sink {url}");
            match within(timeout, postgres(&url, &Target::of(sink, own).uses())).await {
                Ok(found) => {
                    creates |= found.changes();
                    let at = if several {
                        format!(" at {}", redact(&url))
                    } else {
                        String::new()
                    };
                    findings.extend(found.findings(what, &at));
                }
                Err(e) => findings.push(Finding {
                    what,
                    result: Err(e),
                }),
            }
            continue;
        }
        let result = match sink.kind() {
            SinkKind::Sqlite => sqlite(&url),
            SinkKind::Postgres => Err("the settings are not of a PostgreSQL sink".into()),
            SinkKind::Http | SinkKind::Elasticsearch => {
                within(timeout, http(config, &url, timeout)).await
            }
            SinkKind::Mysql => within(timeout, crate::sink::mysql::check(sink, &url)).await,
        };
        findings.push(Finding {
            what: format!("sink {url}"),
            result,
        });
    }
    // A mapped PostgreSQL table must take the statement every batch runs. Opening the sink
    // prepares it, and creates what is missing: so only when nothing is. (MySQL's own
    // check prepares its statements without opening the sink.)
    let mapped = sink.columns().is_some() && sink.kind() == SinkKind::Postgres;
    if mapped && !creates && findings.iter().all(|p| p.result.is_ok()) {
        let result = within(timeout, async {
            crate::sink::open(sink, &config.sink_opening())
                .await
                .map(|_| "the insert statement prepares".to_string())
                .map_err(|e| e.to_string())
        })
        .await;
        findings.push(Finding {
            what: format!("sink mapping into {}", sink.table),
            result,
        });
    }
    if let Some(dl) = sink.dead_letters() {
        let (what, result) = match (&dl.url, &dl.path) {
            (Some(url), _) if url.starts_with("sqlite:") => (url.clone(), sqlite(url)),
            (Some(url), _) => {
                let found = within(timeout, postgres(url, &[dead_letter_table()])).await;
                let result = found.and_then(|mut f| {
                    let table = f.tables.pop().map(|(_, j)| j.verdict);
                    let verdict = table.unwrap_or_else(|| Ok(String::new()))?;
                    Ok(format!("{}; {verdict}", f.note))
                });
                (url.clone(), result)
            }
            (None, Some(path)) => (
                path.display().to_string(),
                writable(path).map(|()| "writable".into()),
            ),
            (None, None) => (String::new(), Err("set url or path".into())),
        };
        findings.push(Finding {
            what: format!("dead-letter store {what}"),
            result,
        });
    }
    findings
}

/// A SQLite database: an existing file must be a database we may write; a missing one
/// must be creatable (its directory writable). Nothing is opened through SQLite, which
/// would create the file, its journal or its tables.
fn sqlite(url: &str) -> Result<String, String> {
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).map_err(|e| e.to_string())?;
    let path = options.get_filename().to_path_buf();
    if path.as_os_str() == ":memory:" {
        return Ok("in memory".into());
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
    {
        Ok(mut file) => {
            use std::io::Read;
            let mut head = [0u8; 16];
            let n = file.read(&mut head).map_err(|e| e.to_string())?;
            if n == 0 || head.starts_with(b"SQLite format 3\0") {
                Ok(format!("{} is a writable database", path.display()))
            } else {
                Err(format!("{} is not a SQLite database", path.display()))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            writable(&path).map(|()| format!("{} will be created (mode 0600)", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// What `check` found at a PostgreSQL server: the connection, then each table a run uses.
pub(super) struct PgFindings {
    /// How the connection went: TLS or not, and as which role.
    pub(super) note: String,
    pub(super) tables: Vec<(String, JudgedTable)>,
}

impl PgFindings {
    /// One finding for the connection (named `what`), one per table (`at` tells endpoints
    /// apart when there are several).
    pub(super) fn findings(self, what: String, at: &str) -> Vec<Finding> {
        std::iter::once(Finding {
            what,
            result: Ok(self.note),
        })
        .chain(self.tables.into_iter().map(|(table, judged)| Finding {
            what: format!("{table}{at}"),
            result: judged.verdict,
        }))
        .collect()
    }

    /// A run would create or alter some table.
    pub(super) fn changes(&self) -> bool {
        self.tables.iter().any(|(_, j)| j.changes)
    }
}

/// Connects (no pool, one connection) and, in a READ ONLY transaction, judges each table
/// a run uses from the catalog: present with the rights the run uses, or missing and
/// creatable (see [`crate::sink::postgres::catalog::judge`]).
pub(super) async fn postgres(url: &str, tables: &[TableUse]) -> Result<PgFindings, String> {
    postgres_with(crate::sink::postgres::tls::connect_options(url)?, tables).await
}

/// As [`postgres`], connected with `options` (the lease store's own).
pub(super) async fn postgres_with(
    options: sqlx::postgres::PgConnectOptions,
    tables: &[TableUse],
) -> Result<PgFindings, String> {
    let options = options.application_name("sluice check");
    let mut conn = PgConnection::connect_with(&options).await.map_err(|e| {
        match crate::tls::certificate_refused(&e) {
            Some(why) => format!("cannot connect: TLS handshake failed: {why}"),
            None => format!("cannot connect: {}", describe(&e)),
        }
    })?;
    let mut tx = conn
        .begin_with("BEGIN READ ONLY")
        .await
        .map_err(|e| describe(&e))?;
    // What the connection's TLS is, from the server's side.
    let (tls_version, role): (Option<String>, String) = sqlx::query_as(
        "SELECT CASE WHEN ssl THEN version END, current_user::text          FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .persistent(false)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| describe(&e))?;
    let tls = match tls_version {
        Some(version) => format!(
            "over TLS ({version}, {})",
            crate::sink::postgres::tls::verification(&options)
        ),
        None => "without TLS".to_string(),
    };
    let judged = catalog::judge(&mut tx, tables).await?;
    let _ = tx.rollback().await;
    let _ = conn.close().await;
    Ok(PgFindings {
        note: format!("answers {tls}, as role {role}"),
        tables: tables
            .iter()
            .map(|t| format!("{} {}", t.what, t.name))
            .zip(judged)
            .collect(),
    })
}

/// An HTTP endpoint answers (HEAD, with the configured headers); refused credentials fail.
async fn http(config: &Config, url: &str, timeout: Duration) -> Result<String, String> {
    let none = Default::default();
    let configured = config.sink.headers().unwrap_or(&none);
    let headers = crate::sink::http::headers::build(configured, |v| std::env::var(v).ok())
        .map_err(|e| e.to_string())?;
    let builder = crate::tls::http_client()
        .default_headers(headers)
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    let tls = config.sink.tls().cloned().unwrap_or_default();
    let client = tls
        .apply_to_reqwest(builder)?
        .build()
        .map_err(|e| e.to_string())?;
    let answer = client.head(url).send().await.map_err(|e| {
        if let Some(why) = crate::tls::certificate_refused(&e) {
            return format!("TLS handshake failed: {why}");
        }
        crate::sink::http::error_chain(e)
    })?;
    let status = answer.status();
    match status.as_u16() {
        401 | 403 | 407 => Err(format!("credentials refused (HTTP {status})")),
        _ if url.starts_with("https:") && tls.insecure_skip_verify => Ok(format!(
            "answers over TLS, certificate NOT verified (insecure_skip_verify) (HTTP {status} to HEAD)"
        )),
        _ if url.starts_with("https:") => Ok(format!(
            "answers over TLS, certificate verified (HTTP {status} to HEAD)"
        )),
        _ => Ok(format!("answers (HTTP {status} to HEAD)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_check_creates_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("out.db").display());
        let note = sqlite(&url).unwrap();
        assert!(note.contains("will be created"), "{note}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        std::fs::write(dir.path().join("out.db"), "not a database, clearly").unwrap();
        assert!(sqlite(&url).unwrap_err().contains("not a SQLite database"));
    }
}
