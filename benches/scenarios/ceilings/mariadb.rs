//! File → MariaDB: sluice next to a hand-written multi-row INSERT loop, same file and
//! table shape.

use super::*;

pub(super) fn file_mariadb(records: usize) -> Vec<Ceiling> {
    let rt = runtime();
    let url = std::env::var("SLUICE_TEST_MYSQL_URL").expect("checked by services_configured");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ndjson");
    crate::write_backlog(&input, records);
    let raw_table = unique("ceil_raw");
    let raw_rate = rt.block_on(raw_mariadb_insert(&url, &input, &raw_table));
    let sluice = sluice_into_mariadb(&rt, &url, dir.path(), records);
    vec![Ceiling {
        path: FILE_MARIADB,
        records,
        sluice,
        raw: "multi-row INSERT",
        raw_rate,
    }]
}

/// The MariaDB ceiling: a hand-written loop over the same file into the table shape sluice
/// creates — parse each line, take its key, one multi-row INSERT of 1,000 rows per
/// statement (autocommit), on one connection.
async fn raw_mariadb_insert(url: &str, input: &Path, table: &str) -> f64 {
    let mut conn = MySqlConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (`key` VARCHAR(255) COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY, payload JSON NOT NULL, \
           source TEXT, ingested_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) \
         ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let started = Instant::now();
    let text = std::fs::read_to_string(input).unwrap();
    let rows: Vec<(String, &str, String)> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                v["id"].as_str().unwrap().to_string(),
                line,
                format!("in:{i}"),
            )
        })
        .collect();
    for chunk in rows.chunks(1000) {
        let mut q =
            QueryBuilder::<MySql>::new(format!("INSERT INTO {table} (`key`, payload, source) "));
        q.push_values(chunk, |mut b, (k, p, s)| {
            b.push_bind(k.as_str()).push_bind(*p).push_bind(s.as_str());
        });
        q.build().execute(&mut conn).await.unwrap();
    }
    let rate = rows.len() as f64 / started.elapsed().as_secs_f64();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&mut conn)
        .await
        .unwrap();
    rate
}

/// sluice over `dir/in.ndjson` into a fresh MariaDB table, unthrottled, at the SQLite
/// path's shape; checks every row is there, then drops the table.
fn sluice_into_mariadb(
    rt: &tokio::runtime::Runtime,
    url: &str,
    dir: &Path,
    records: usize,
) -> SluiceRun {
    let table = unique("ceil_mariadb");
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"mysql\"\nurl = {url:?}\ntable = \"{table}\"\nkey = \"/id\"\nmax_batch = 1000\n[rate]\nrecords_per_second = 1000000000\ntick = \"200ms\"\n[concurrency]\nmax = 4\n"
        ),
    )
    .unwrap();
    let mut cmd = sluice();
    cmd.current_dir(dir).args(common::DRAIN);
    let run = run_measured(cmd);
    let drain_rate = rt.block_on(async {
        let mut conn = MySqlConnection::connect(url).await.unwrap();
        let count = mysql_scalar(&mut conn, format!("SELECT COUNT(*) FROM {table}")).await;
        assert_eq!(count, records as i64, "rows in {table}");
        let span_us = mysql_scalar(
            &mut conn,
            format!(
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(ingested_at), MAX(ingested_at)) AS SIGNED) FROM {table}"
        ))
        .await;
        let last_batch = mysql_scalar(
            &mut conn,
            format!(
            "SELECT COUNT(*) FROM {table} WHERE ingested_at = (SELECT MAX(ingested_at) FROM {table})"
        ))
        .await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&mut conn)
            .await
            .unwrap();
        rate_before_last_batch(records, last_batch, span_us)
    });
    SluiceRun::new(&run, records, drain_rate)
}

async fn mysql_scalar(conn: &mut MySqlConnection, sql: String) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(conn)
        .await
        .unwrap()
}
