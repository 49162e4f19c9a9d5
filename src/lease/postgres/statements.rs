//! The lease store's statements, each function run in a transaction of its own (see
//! `PgLeaseStore::call`), with unnamed statements: nothing outlives it on the server connection (no prepared statement, no
//! session setting, no session lock), so a pooler in transaction mode (PgBouncer) may
//! hand every call a different server connection. Every statement uses the database's
//! clock (`now()`).

use sqlx::postgres::PgConnection;

use super::Pool;
use crate::control::lease_table::{PoolDefinition, PoolView};
use crate::lease::{LeaseRow, MemberRow};

type DefinitionRow = (f64, i32, i32);

fn definition((capacity, partitions, generation): DefinitionRow) -> PoolDefinition {
    PoolDefinition {
        capacity,
        partitions: partitions as u32,
        generation: generation as u32,
    }
}

fn partitions_i32(p: &[u32]) -> Vec<i32> {
    p.iter().map(|&p| p as i32).collect()
}

const DEFINITION: &str =
    "SELECT capacity, partitions, generation FROM sluice_lease_pools WHERE pool = $1";

/// One statement, whatever the fleet's size: the other members are counted and searched
/// by the server, not sent to every worker at every heartbeat.
pub async fn heartbeat(
    conn: &mut PgConnection,
    p: &Pool,
    member: &str,
    held: u32,
    wants_more: bool,
) -> Result<PoolView, sqlx::Error> {
    let (capacity, partitions, generation, active, other_waiting, taken, older): (
        f64,
        i32,
        i32,
        i32,
        bool,
        i64,
        i64,
    ) = sqlx::query_as(
        "WITH beat AS (
            INSERT INTO sluice_lease_members (pool, member, heartbeat_at, held, wants_more)
            VALUES ($1, $2, now(), $3, $4)
            ON CONFLICT (pool, member) DO UPDATE
            SET heartbeat_at = now(), held = excluded.held, wants_more = excluded.wants_more),
         others AS (
            SELECT held, wants_more FROM sluice_lease_members
            WHERE pool = $1 AND member <> $2 AND heartbeat_at > now() - make_interval(secs => $5)),
         active AS (SELECT count(*)::int4 + 1 AS n FROM others),
         def AS (SELECT capacity, partitions, generation FROM sluice_lease_pools WHERE pool = $1),
         live AS (SELECT generation FROM sluice_leases WHERE pool = $1 AND expires_at > now())
         SELECT def.capacity, def.partitions, def.generation, active.n,
            EXISTS (SELECT 1 FROM others
                    WHERE wants_more AND held < (def.partitions + active.n - 1) / active.n),
            (SELECT count(*) FROM live WHERE live.generation = def.generation),
            (SELECT count(*) FROM live WHERE live.generation <> def.generation)
         FROM def, active",
    )
    .bind(&p.name)
    .bind(member)
    .bind(held as i32)
    .bind(wants_more)
    .bind(p.ttl_s)
    .persistent(false)
    .fetch_one(&mut *conn)
    .await?;
    let definition = definition((capacity, partitions, generation));
    Ok(PoolView {
        active_members: active as u32,
        other_waiting,
        // Leases of an older generation block new ones until they are gone.
        free: if older > 0 {
            0
        } else {
            definition.partitions.saturating_sub(taken as u32)
        },
        definition,
        grants_in: None,
    })
}

pub async fn define(
    conn: &mut PgConnection,
    p: &Pool,
    capacity: f64,
    partitions: u32,
) -> Result<PoolDefinition, sqlx::Error> {
    sqlx::query(
        "INSERT INTO sluice_lease_pools (pool, capacity, partitions) VALUES ($1, $2, $3)
         ON CONFLICT (pool) DO NOTHING",
    )
    .bind(&p.name)
    .bind(capacity)
    .bind(partitions as i32)
    .persistent(false)
    .execute(&mut *conn)
    .await?;
    let row: DefinitionRow = sqlx::query_as(DEFINITION)
        .bind(&p.name)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await?;
    Ok(definition(row))
}

pub async fn stored_definition(
    conn: &mut PgConnection,
    p: &Pool,
) -> Result<Option<PoolDefinition>, sqlx::Error> {
    let row: Option<DefinitionRow> = sqlx::query_as(DEFINITION)
        .bind(&p.name)
        .persistent(false)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.map(definition))
}

pub async fn resize(
    conn: &mut PgConnection,
    p: &Pool,
    capacity: f64,
    partitions: u32,
) -> Result<PoolDefinition, sqlx::Error> {
    // Waits for acquisitions in progress (they hold the row FOR SHARE): a lease of the
    // old generation is either committed before the change or never granted.
    let row: DefinitionRow = sqlx::query_as(
        "INSERT INTO sluice_lease_pools (pool, capacity, partitions) VALUES ($1, $2, $3)
         ON CONFLICT (pool) DO UPDATE
         SET capacity = excluded.capacity, partitions = excluded.partitions,
             generation = sluice_lease_pools.generation + 1, changed_at = now()
         RETURNING capacity, partitions, generation",
    )
    .bind(&p.name)
    .bind(capacity)
    .bind(partitions as i32)
    .persistent(false)
    .fetch_one(&mut *conn)
    .await?;
    Ok(definition(row))
}

pub async fn acquire(
    conn: &mut PgConnection,
    p: &Pool,
    member: &str,
    generation: u32,
) -> Result<Option<u32>, sqlx::Error> {
    // Only under the pool's current generation, and only once no lease of another
    // generation is unexpired: old and new leases never add up.
    let row: Option<(i32,)> = sqlx::query_as(
        "WITH def AS (
            SELECT partitions, generation FROM sluice_lease_pools
            WHERE pool = $1 AND generation = $4
            FOR SHARE),
         candidate AS (
            SELECT p FROM def, generate_series(0, def.partitions - 1) AS p
            WHERE NOT EXISTS (
                SELECT 1 FROM sluice_leases l
                WHERE l.pool = $1 AND l.expires_at > now()
                  AND (l.partition = p OR l.generation <> def.generation))
            ORDER BY random() LIMIT 1)
         INSERT INTO sluice_leases (pool, partition, holder, expires_at, generation)
         SELECT $1, p, $2, now() + make_interval(secs => $3), $4 FROM candidate
         ON CONFLICT (pool, partition) DO UPDATE
         SET holder = excluded.holder, expires_at = excluded.expires_at, acquired_at = now(),
             generation = excluded.generation
         WHERE sluice_leases.expires_at <= now()
         RETURNING partition",
    )
    .bind(&p.name)
    .bind(member)
    .bind(p.ttl_s)
    .bind(generation as i32)
    .persistent(false)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|(p,)| p as u32))
}

pub async fn renew(
    conn: &mut PgConnection,
    p: &Pool,
    member: &str,
    partitions: &[u32],
) -> Result<Vec<u32>, sqlx::Error> {
    // Holding it still is the proof that nobody else took it, even if it expired.
    let rows: Vec<(i32,)> = sqlx::query_as(
        "UPDATE sluice_leases SET expires_at = now() + make_interval(secs => $4)
         WHERE pool = $1 AND holder = $2 AND partition = ANY($3)
           AND generation = (SELECT generation FROM sluice_lease_pools WHERE pool = $1)
         RETURNING partition",
    )
    .bind(&p.name)
    .bind(member)
    .bind(partitions_i32(partitions))
    .bind(p.ttl_s)
    .persistent(false)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|(p,)| p as u32).collect())
}

pub async fn release(
    conn: &mut PgConnection,
    p: &Pool,
    member: &str,
    partitions: &[u32],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM sluice_leases WHERE pool = $1 AND holder = $2 AND partition = ANY($3)",
    )
    .bind(&p.name)
    .bind(member)
    .bind(partitions_i32(partitions))
    .persistent(false)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub async fn leave(conn: &mut PgConnection, p: &Pool, member: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM sluice_leases WHERE pool = $1 AND holder = $2")
        .bind(&p.name)
        .bind(member)
        .persistent(false)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM sluice_lease_members WHERE pool = $1 AND member = $2")
        .bind(&p.name)
        .bind(member)
        .persistent(false)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub async fn leases(conn: &mut PgConnection, p: &Pool) -> Result<Vec<LeaseRow>, sqlx::Error> {
    let rows: Vec<(i32, String, f64)> = sqlx::query_as(
        "SELECT partition, holder, extract(epoch FROM expires_at - now())::float8
         FROM sluice_leases WHERE pool = $1 ORDER BY partition",
    )
    .bind(&p.name)
    .persistent(false)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(p, holder, s)| LeaseRow {
            partition: p as u32,
            holder,
            expires_in_s: (s * 10.0).round() / 10.0,
        })
        .collect())
}

pub async fn members(conn: &mut PgConnection, p: &Pool) -> Result<Vec<MemberRow>, sqlx::Error> {
    let rows: Vec<(String, i32, bool, f64)> = sqlx::query_as(
        "SELECT member, held, wants_more, extract(epoch FROM now() - heartbeat_at)::float8
         FROM sluice_lease_members WHERE pool = $1 ORDER BY member",
    )
    .bind(&p.name)
    .persistent(false)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(member, held, wants_more, s)| MemberRow {
            member,
            held: held as u32,
            wants_more,
            last_seen_s: (s * 10.0).round() / 10.0,
        })
        .collect())
}
