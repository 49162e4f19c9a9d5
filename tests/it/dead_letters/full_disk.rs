//! Dead letters whose store is full (an NDJSON file, a SQLite file, the SQLite sink's
//! table, a PostgreSQL tablespace on a full tmpfs): nothing is acknowledged until they
//! can be stored.

use super::*;

/// What a full-tmpfs case runs against: the config's dead-letter section (or sink), and
/// how to count the letters stored.
enum Store {
    NdjsonFile,
    SqliteFile,
    SqliteSinkTable,
}

async fn full_tmpfs_case(store: Store) {
    let fs = Tmpfs::mount("512k");
    let dir = tempfile::tempdir().unwrap();
    let sim = sim().await;
    // Five letters of about 40 KB: 200 KB, with 96 KB left on the filesystem.
    write_input(&dir.path().join("in.ndjson"), 20, 5, 40_000);
    let port = free_port();
    let on_tmpfs = |name: &str| fs.path().join(name).display().to_string();
    match store {
        Store::NdjsonFile => http_config(
            dir.path(),
            &sim,
            &format!("path = {:?}", on_tmpfs("dead.ndjson")),
            port,
        ),
        Store::SqliteFile => http_config(
            dir.path(),
            &sim,
            &format!("url = \"sqlite://{}\"", on_tmpfs("dead.db")),
            port,
        ),
        Store::SqliteSinkTable => std::fs::write(
            dir.path().join("sluice.toml"),
            format!(
                "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://{}\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n{RETRY}\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n",
                on_tmpfs("out.db")
            ),
        )
        .unwrap(),
    }
    let filler = fs.fill(96 << 10);
    let mut child = spawn_worker(dir.path());
    let d = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        wait_for_store_failure(&d, &mut child);
        assert_held(&d, &mut child, port);
        std::fs::remove_file(&filler).unwrap();
        wait_output(child)
    })
    .await
    .unwrap();
    let log = log_of(dir.path());
    assert!(out.status.success(), "{log}");
    assert_eq!(summary(&out)["dead_lettered"], 5, "{log}");
    let count = |db: PathBuf, sql: &'static str| async move {
        tokio::task::spawn_blocking(move || sqlite_count(&db, sql))
            .await
            .unwrap()
    };
    let stored = match store {
        Store::NdjsonFile => ndjson_letters(&fs.path().join("dead.ndjson")).len() as i64,
        Store::SqliteFile => {
            count(
                fs.path().join("dead.db"),
                "select count(*) from sluice_dead_letters",
            )
            .await
        }
        Store::SqliteSinkTable => {
            let db = fs.path().join("out.db");
            assert_eq!(count(db.clone(), "select count(*) from records").await, 20);
            count(db, "select count(*) from sluice_dead_letters").await
        }
    };
    assert_eq!(stored, 5, "{log}");
    if !matches!(store, Store::SqliteSinkTable) {
        assert_eq!(sim.stats().inserted, 20);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ndjson_dead_letter_file_on_a_full_tmpfs_holds_the_run_until_space_returns() {
    full_tmpfs_case(Store::NdjsonFile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_dead_letter_db_on_a_full_tmpfs_holds_the_run_until_space_returns() {
    full_tmpfs_case(Store::SqliteFile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_sink_on_a_full_tmpfs_holds_the_run_until_space_returns() {
    full_tmpfs_case(Store::SqliteSinkTable).await;
}

#[test]
fn keys_of_different_json_types_are_different_rows() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.ndjson"),
        "{\"id\":5}\n{\"id\":\"5\"}\n{\"id\":true}\n{\"id\":\"true\"}\n{\"id\":\"abc\"}\n{\"id\":\"\\\"5\\\"\"}\n{\"id\":5}\n",
    )
    .unwrap();
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 6, "{s}");
    assert_eq!(
        s["duplicates"], 1,
        "only the repeated 5 is a duplicate: {s}"
    );
    let db = dir.path().join("out.db");
    for (key, n) in [
        ("5", 1),
        ("\"5\"", 1),
        ("true", 1),
        ("\"true\"", 1),
        ("abc", 1),
        ("\"\\\"5\\\"\"", 1),
    ] {
        let sql = format!(
            "select count(*) from records where key = '{}'",
            key.replace('\'', "''")
        );
        assert_eq!(sqlite_count(&db, &sql), n, "key {key}");
    }
}

#[test]
fn amqp_messages_over_max_record_bytes_are_dead_lettered_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_oversize");
    let big =
        |id: &str, mb: usize| format!("{{\"id\":\"{id}\",\"blob\":\"{}\"}}", "y".repeat(mb << 20));
    amqp_publish_bodies(
        &queue,
        &[
            "{\"id\":\"small1\"}".into(),
            big("two_mb", 2),
            "{\"id\":\"small2\"}".into(),
            big("three_mb", 3),
        ],
    );
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\nmax_record_bytes = 1048576\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n",
            amqp_url()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 2, "{s}");
    assert_eq!(s["dead_lettered"], 2, "{s}");
    let db = dir.path().join("out.db");
    assert_eq!(sqlite_count(&db, "select count(*) from records"), 2);
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from sluice_dead_letters where reason like 'record of 2097%bytes exceeds source.max_record_bytes (1048576)%' and length(raw) = 1048576"
        ),
        1
    );
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from sluice_dead_letters where reason like 'record of 3145%bytes exceeds%'"
        ),
        1
    );
    assert_eq!(amqp_queue_counts(&queue), (0, 0));
}

async fn pg_exec(url: &str, sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn pg_scalar(url: &str, sql: &str) -> i64 {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// The PostgreSQL sink's own `sluice_dead_letters`, in a tablespace on a full tmpfs: the
/// rows land, the letters cannot, and nothing is acknowledged until they can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_dead_letter_table_on_a_full_tablespace_holds_the_run() {
    let fs = Tmpfs::mount("2m");
    let chown = Command::new("chown")
        .arg("postgres")
        .arg(fs.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let name = unique("sluice_dlfull");
    let admin = pg_url();
    pg_exec(
        &admin,
        &format!(
            "CREATE TABLESPACE {name} LOCATION '{}'",
            fs.path().display()
        ),
    )
    .await;
    pg_exec(&admin, &format!("CREATE DATABASE {name}")).await;
    let db_url = match admin.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => unreachable!("a database URL has a path"),
    };
    // The table as the sink creates it, but on the small filesystem (TOAST included).
    pg_exec(
        &db_url,
        &format!(
            "CREATE TABLE sluice_dead_letters (
                id bigserial PRIMARY KEY,
                fingerprint text NOT NULL UNIQUE,
                position text NOT NULL,
                key text,
                raw bytea NOT NULL,
                reason text NOT NULL,
                attempts integer NOT NULL,
                failed_at timestamptz NOT NULL DEFAULT now()
            ) TABLESPACE {name}"
        ),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_input(&dir.path().join("in.ndjson"), 20, 5, 200_000);
    let port = free_port();
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"postgres\"\nurl = \"{db_url}\"\ntable = \"records\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n{RETRY}\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    )
    .unwrap();
    let filler = fs.fill(0);
    let mut child = spawn_worker(dir.path());
    let d = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        wait_for_store_failure(&d, &mut child);
        assert_held(&d, &mut child, port);
        std::fs::remove_file(&filler).unwrap();
        wait_output(child)
    })
    .await
    .unwrap();
    let log = log_of(dir.path());
    let rows = pg_scalar(&db_url, "select count(*) from records").await;
    let letters = pg_scalar(
        &db_url,
        "select count(*) from sluice_dead_letters where target = 'records' and length(raw) > 200000",
    )
    .await;
    let migrated = pg_scalar(
        &db_url,
        "select count(*) from information_schema.columns where table_name = 'sluice_dead_letters' and column_name in ('target','source_key','headers')",
    )
    .await;
    pg_exec(&admin, &format!("DROP DATABASE {name} WITH (FORCE)")).await;
    pg_exec(&admin, &format!("DROP TABLESPACE {name}")).await;
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("53100") || log.contains("No space left"),
        "{log}"
    );
    assert_eq!(summary(&out)["dead_lettered"], 5, "{log}");
    assert_eq!((rows, letters, migrated), (20, 5, 3), "{log}");
}
