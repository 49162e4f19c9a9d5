//! Helpers for the MySQL / MariaDB integration tests: the shared server of
//! `scripts/services.sh` (env vars, same defaults), file → MariaDB configs, users made
//! for one test over root's unix socket, and scratch servers of a test's own.
#![allow(dead_code)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::{Connection, MySqlConnection};

pub const LIMIT: Duration = Duration::from_secs(120);

pub fn mysql_url() -> String {
    std::env::var("SLUICE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://sluice:sluice@127.0.0.1:3306/sluice_test".into())
}

pub async fn mysql() -> MySqlConnection {
    MySqlConnection::connect(&mysql_url())
        .await
        .expect("MariaDB is up (scripts/services.sh)")
}

pub async fn count(sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&mut mysql().await)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

pub async fn execute(sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut mysql().await)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The dead letters stored for `table`: key and reason, by key.
pub async fn letters(table: &str) -> Vec<(String, String)> {
    sqlx::query_as("SELECT `key`, reason FROM sluice_dead_letters WHERE target = ? ORDER BY `key`")
        .bind(table)
        .fetch_all(&mut mysql().await)
        .await
        .unwrap()
}

/// A file → MariaDB config in `dir`.
pub fn file_config(dir: &Path, url: &str, table: &str, extra: &str) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"mysql\"\nurl = \"{url}\"\ntable = \"{table}\"\nkey = \"/id\"\n{extra}\n\n\
             [rate]\nrecords_per_second = 100000\ntick = \"200ms\"\n\n\
             [retry]\nmin_delay = \"50ms\"\nmax_delay = \"500ms\"\nfactor = 2.0\nmax_attempts = 4\n"
        ),
    )
    .unwrap();
}

pub fn write_lines(dir: &Path, lines: &[String]) {
    std::fs::write(dir.join("in.ndjson"), lines.join("\n") + "\n").unwrap();
}

/// Drains `lines` in a fresh directory with `extra` in `[sink]`; the run's output.
pub fn drain(url: &str, table: &str, extra: &str, lines: &[String]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    write_lines(dir.path(), lines);
    file_config(dir.path(), url, table, extra);
    common::run_in(dir.path(), common::DRAIN)
}

/// `sluice check` of `table` at `url` in a fresh directory.
pub fn check(url: &str, table: &str, extra: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    write_lines(dir.path(), &["{\"id\":\"k1\"}".to_string()]);
    file_config(dir.path(), url, table, extra);
    common::run_in(dir.path(), &["check", "-c", "sluice.toml"])
}

/// SQL run as MariaDB's root over the unix socket (root authenticates by unix_socket,
/// as `scripts/services.sh` uses it).
pub fn as_root(sql: &str) {
    let out = std::process::Command::new("mariadb")
        .args(["--protocol=socket", "-u", "root", "-e", sql])
        .output()
        .expect("the mariadb client runs (scripts/services.sh installs it)");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A user of the shared server made for one test (password `sl-test-secret`, from 127.0.0.1 and
/// localhost), dropped with the guard.
pub struct TestUser {
    pub name: String,
}

impl TestUser {
    /// `grants` is run once per host, `{user}` standing for the quoted user.
    pub fn create(prefix: &str, grants: &[&str]) -> Self {
        let name = format!("{prefix}_{}", std::process::id());
        let mut sql = String::new();
        for host in ["127.0.0.1", "localhost"] {
            let user = format!("'{name}'@'{host}'");
            sql.push_str(&format!(
                "DROP USER IF EXISTS {user}; CREATE USER {user} IDENTIFIED BY 'sl-test-secret'; "
            ));
            for grant in grants {
                sql.push_str(&grant.replace("{user}", &user));
                sql.push_str("; ");
            }
        }
        as_root(&sql);
        TestUser { name }
    }

    pub fn url(&self) -> String {
        format!(
            "mysql://{}:sl-test-secret@127.0.0.1:3306/sluice_test",
            self.name
        )
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        as_root(&format!(
            "DROP USER IF EXISTS '{0}'@'127.0.0.1', '{0}'@'localhost'",
            self.name
        ));
    }
}

/// A MariaDB server of the test's own (its own data directory and port) that it may kill
/// and start again, or start with options of its own (a small `max_allowed_packet`,
/// TLS), without disturbing the shared server other tests use. Small: a 4 MB redo log,
/// a 16 MB buffer pool, no binary log.
pub struct ScratchServer {
    dir: tempfile::TempDir,
    pub port: u16,
    server: Option<std::process::Child>,
    options: Vec<String>,
}

impl ScratchServer {
    const OPTIONS: [&str; 5] = [
        "--no-defaults",
        "--user=root",
        "--innodb-log-file-size=4M",
        "--innodb-data-file-path=ibdata1:4M:autoextend",
        "--skip-log-bin",
    ];

    pub async fn create() -> Self {
        Self::create_with(&[]).await
    }

    /// A server started with `options` besides its own.
    pub async fn create_with(options: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let datadir = dir.path().join("data");
        // Its own temporary directory: bootstraps and servers running side by side in /tmp
        // have been seen to lose each other's temporary tables (error 1051 at install).
        let tmpdir = dir.path().join("tmp");
        std::fs::create_dir(&tmpdir).unwrap();
        let out = std::process::Command::new("mariadb-install-db")
            .args(Self::OPTIONS)
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--tmpdir={}", tmpdir.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .output()
            .expect("mariadb-install-db (scripts/services.sh installs MariaDB)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut scratch = ScratchServer {
            dir,
            port: common::free_port(),
            server: None,
            options: options.iter().map(|o| o.to_string()).collect(),
        };
        scratch.start().await;
        sqlx::raw_sql("CREATE DATABASE sluice_test")
            .execute(&mut scratch.connect().await)
            .await
            .unwrap();
        scratch
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/sluice_test", self.port)
    }

    pub async fn connect(&self) -> MySqlConnection {
        MySqlConnection::connect(&format!("mysql://root@127.0.0.1:{}", self.port))
            .await
            .unwrap()
    }

    /// Starts the server on its data directory and waits until it answers.
    pub async fn start(&mut self) {
        let dir = self.dir.path();
        let mariadbd = ["/usr/sbin/mariadbd", "/usr/sbin/mysqld"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("mariadbd");
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        self.server = Some(
            std::process::Command::new(mariadbd)
                .args(Self::OPTIONS)
                .arg(format!("--datadir={}", dir.join("data").display()))
                .arg(format!("--tmpdir={}", dir.join("tmp").display()))
                .arg(format!("--port={}", self.port))
                .arg(format!("--socket={}", dir.join("sock").display()))
                .arg(format!("--pid-file={}", dir.join("pid").display()))
                .args(["--bind-address=127.0.0.1", "--innodb-buffer-pool-size=16M"])
                .args(&self.options)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("mariadbd starts"),
        );
        let started = Instant::now();
        let admin = format!("mysql://root@127.0.0.1:{}", self.port);
        while MySqlConnection::connect(&admin).await.is_err() {
            assert!(
                started.elapsed() < LIMIT,
                "the scratch server did not come up: {}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: a crash, no chance to finish a statement or close a connection.
    pub fn kill(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill().unwrap();
            server.wait().unwrap();
        }
    }

    pub async fn count(&self, sql: &str) -> i64 {
        let mut conn = MySqlConnection::connect(&self.url()).await.unwrap();
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

impl Drop for ScratchServer {
    fn drop(&mut self) {
        self.kill();
    }
}
