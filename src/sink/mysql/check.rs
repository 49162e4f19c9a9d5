//! `sluice check` of a MySQL / MariaDB sink: whether the server answers and over what
//! (TLS from the session's own status), and whether this user may run what `run` will —
//! write the records and dead-letter tables, or create the ones missing. Nothing is
//! changed: each statement is only prepared, and the server checks a statement's rights
//! when it prepares it (error 1142 names them: "INSERT, UPDATE command denied").

use sqlx::{Connection, Executor, MySqlConnection, SqlSafeStr};

use super::tables::{self, Created, DEAD_LETTER_DDL, DEAD_LETTERS};
use super::{
    backtick, connect_error, dead_letters, mapped, merging_key, reason, settings, statement,
    statement_columns,
};
use crate::sink::settings::SinkSettings;

/// One connection to `url` (an endpoint of `sink`), what it uses, and the rights a run
/// needs.
pub async fn check(sink: &SinkSettings, url: &str) -> Result<String, String> {
    let options = settings::connect_options(url)?;
    let mut conn = MySqlConnection::connect_with(&options)
        .await
        .map_err(|e| format!("cannot connect: {}", connect_error(&e)))?;
    let result = table_rights(&mut conn, sink).await;
    let tls = tls(&mut conn, &options).await;
    let _ = conn.close().await;
    Ok(format!("answers {}; {}", tls?, result?))
}

async fn table_rights(conn: &mut MySqlConnection, sink: &SinkSettings) -> Result<String, String> {
    let quoted = backtick(&sink.table);
    let mut notes = Vec::new();
    let mut creates = Vec::new();
    let records = match mapped(conn, sink).await? {
        Some(mapping) => {
            if let Some(collation) = &mapping.merging_collation {
                notes.push(format!("warning: {}", merging_key(sink, collation)));
            }
            statement::insert(&quoted, &statement_columns(Some(&mapping)), 1)
        }
        None => match tables::created(conn, &sink.table).await? {
            Created::Missing => {
                creates.push(sink.table.as_str());
                tables::records_ddl(conn, &quoted).await?
            }
            Created::Present => statement::insert(&quoted, &statement_columns(None), 1),
            Created::MergesKeys { collation, alter } => {
                return Err(tables::merges_keys(&sink.table, &collation, &alter));
            }
        },
    };
    let letters = if tables::exists(conn, DEAD_LETTERS).await? {
        dead_letters::insert(1)
    } else {
        creates.push(DEAD_LETTERS);
        DEAD_LETTER_DDL.to_string()
    };
    for sql in [records, letters] {
        let creating = sql.starts_with("CREATE");
        conn.prepare(sqlx::AssertSqlSafe(sql).into_sql_str())
            .await
            .map_err(|e| {
                let what = if creating {
                    "create the missing tables"
                } else {
                    "insert (and update, which absorbs a redelivered key) into the tables"
                };
                format!("this user may not {what} a run needs: {}", reason(&e))
            })?;
    }
    // "tables present" only when nothing is missing: `check::sink` then opens the sink,
    // which must create nothing.
    notes.insert(
        0,
        if creates.is_empty() {
            "tables present; this user may insert into them".into()
        } else {
            format!("run creates {} (this user may)", creates.join(", "))
        },
    );
    Ok(notes.join("; "))
}

/// Whether the session runs over TLS, from the server's side (`Ssl_version`,
/// `Ssl_cipher`: empty without TLS), and what its certificate check proves.
async fn tls(
    conn: &mut MySqlConnection,
    options: &sqlx::mysql::MySqlConnectOptions,
) -> Result<String, String> {
    let status: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(VARIABLE_NAME AS CHAR), CAST(VARIABLE_VALUE AS CHAR) \
         FROM information_schema.SESSION_STATUS \
         WHERE VARIABLE_NAME IN ('SSL_VERSION', 'SSL_CIPHER')",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| reason(&e))?;
    let value = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    };
    Ok(match (value("SSL_VERSION"), value("SSL_CIPHER")) {
        (Some(version), Some(cipher)) => format!(
            "over TLS ({version}, {cipher}, {})",
            settings::verification(options)
        ),
        _ => "without TLS".into(),
    })
}
