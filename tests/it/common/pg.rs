//! The real PostgreSQL for the tests: a throwaway database per test (and roles of its
//! own), statements and counts run straight against it.

use super::{block_on, pg_url, unique};

async fn connect(url: &str) -> sqlx::PgConnection {
    <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// Runs one statement (or a few, separated by `;`) against `url`.
pub fn execute(url: &str, sql: &str) {
    block_on(async {
        let mut conn = connect(url).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        sqlx::Connection::close(conn).await.unwrap();
    })
}

/// One integer from `url`.
pub fn count(url: &str, sql: &str) -> i64 {
    block_on(async {
        let mut conn = connect(url).await;
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        sqlx::Connection::close(conn).await.unwrap();
        n
    })
}

/// One column of text values from `url`.
pub fn texts(url: &str, sql: &str) -> Vec<String> {
    block_on(async {
        let mut conn = connect(url).await;
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_all(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        sqlx::Connection::close(conn).await.unwrap();
        rows.into_iter().map(|(t,)| t).collect()
    })
}

/// A database of this test's own, dropped at the end with the roles made for it; its
/// settings can be changed without touching the shared `sluice_test`.
pub struct Db {
    pub name: String,
    pub url: String,
    roles: Vec<String>,
}

impl Db {
    pub fn create(prefix: &str) -> Db {
        let name = unique(prefix);
        execute(&pg_url(), &format!("CREATE DATABASE {name}"));
        Db {
            url: Self::url_as(&name, None),
            name,
            roles: Vec::new(),
        }
    }

    fn url_as(name: &str, role: Option<&str>) -> String {
        let base = pg_url();
        let mut url = format!("{}/{name}", &base[..base.rfind('/').unwrap()]);
        if let Some(role) = role {
            let at = url.find('@').expect("SLUICE_TEST_PG_URL names a user");
            url.replace_range("postgres://".len()..at, role);
        }
        url
    }

    /// A login role of this test's own (trust authentication, as the test server has)
    /// with no right in this database yet; returns its name and its URL here.
    pub fn role(&mut self, prefix: &str) -> (String, String) {
        let name = unique(prefix);
        execute(&pg_url(), &format!("CREATE ROLE {name} LOGIN"));
        self.roles.push(name.clone());
        let url = Self::url_as(&self.name, Some(&name));
        (name, url)
    }

    /// Runs `sql` from the shared database (ALTER DATABASE cannot run inside this one
    /// while it refuses connections).
    pub fn admin(&self, sql: &str) {
        execute(&pg_url(), &sql.replace("{db}", &self.name));
    }

    /// Ends every session of this database, as a failover or a maintenance start would.
    pub fn terminate_sessions(&self) {
        self.admin(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = '{db}' AND pid <> pg_backend_pid()",
        );
    }

    pub fn execute(&self, sql: &str) {
        execute(&self.url, sql)
    }

    pub fn count(&self, sql: &str) -> i64 {
        count(&self.url, sql)
    }

    /// The table sluice would create, made first so a trigger can be put on it.
    pub fn records_table(&self) {
        self.execute(
            "CREATE TABLE records (key text PRIMARY KEY, payload jsonb NOT NULL, source text, \
             ingested_at timestamptz NOT NULL DEFAULT now())",
        );
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            self.admin("ALTER DATABASE {db} ALLOW_CONNECTIONS true");
            self.admin("DROP DATABASE {db} WITH (FORCE)");
            for role in &self.roles {
                execute(&pg_url(), &format!("DROP ROLE IF EXISTS {role}"));
            }
        });
    }
}

/// The newest installed PostgreSQL's `bin/` that holds `tool` (initdb, pg_basebackup), for
/// a scratch cluster of a test's own.
pub fn bin_with(tool: &str) -> std::path::PathBuf {
    std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL binaries under /usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join(tool).exists())
        .max()
        .unwrap_or_else(|| panic!("a PostgreSQL version with {tool}"))
}

/// A directory for a scratch cluster, and whether its commands must run as `postgres`:
/// initdb refuses root, so as root the directory is handed to `postgres`.
pub fn cluster_dir() -> (tempfile::TempDir, bool) {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let as_postgres = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if as_postgres {
        let ok = Command::new("chown")
            .arg("postgres")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(ok.success());
    }
    (dir, as_postgres)
}
