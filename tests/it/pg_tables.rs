//! What a PostgreSQL run creates and the rights it uses, with real roles: a start creates
//! only what is missing (so a role that may write existing tables but create none can
//! run), `check` passes such a role and names the right another lacks or the table that
//! must exist, start-up errors carry their SQLSTATE, and a start that finds every table
//! runs no DDL and logs no notice.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::pg::*;
use common::*;

/// A file → PostgreSQL config with leases in the same database; `extra` joins [sink].
fn config(dir: &Path, url: &str, table: &str, leases: bool, extra: &str) {
    let leases = if leases {
        format!("[leases]\nstore = {url:?}\npool = \"rights\"\ncapacity = 5000\npartitions = 2\n")
    } else {
        String::new()
    };
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = {url:?}\ntable = {table:?}\nkey = \"/id\"\n{extra}\n\
             [rate]\nrecords_per_second = 5000\n\n{leases}"
        ),
    )
    .unwrap();
}

fn check(dir: &Path) -> Output {
    run_in(dir, &["check", "-c", "sluice.toml"])
}

/// A role given what a run uses on tables made beforehand, and nothing to create with.
fn writer(db: &mut Db, leases: bool) -> (String, String) {
    let (role, url) = db.role("sluice_writer");
    db.execute(&format!(
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC; \
         GRANT SELECT, INSERT, UPDATE ON records, sluice_dead_letters TO {role}; \
         GRANT USAGE ON SEQUENCE sluice_dead_letters_id_seq TO {role}"
    ));
    if leases {
        db.execute(&format!(
            "GRANT SELECT, INSERT, UPDATE ON sluice_leases, sluice_lease_pools, \
               sluice_lease_members TO {role}; \
             GRANT DELETE ON sluice_leases, sluice_lease_members TO {role}"
        ));
    }
    let may_create = db.count(&format!(
        "SELECT has_schema_privilege('{role}', 'public', 'CREATE')::int::int8"
    ));
    assert_eq!(may_create, 0, "the writer may not create tables");
    (role, url)
}

/// The owner's first run creates every table (records, dead letters, leases).
fn owner_loads(db: &Db, dir: &Path, leases: bool) {
    write_records(&dir.join("in.ndjson"), 20, &[3]);
    config(dir, &db.url, "records", leases, "");
    let out = run_in(dir, DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(db.count("SELECT count(*) FROM records"), 19);
}

#[test]
fn a_role_that_may_only_write_existing_tables_passes_check_and_runs() {
    let mut db = Db::create("rights_writer");
    let dir = tempfile::tempdir().unwrap();
    owner_loads(&db, dir.path(), true);
    let (role, url) = writer(&mut db, true);
    // Twenty records more, one of them malformed: written, and dead-lettered.
    write_records(&dir.path().join("in.ndjson"), 40, &[3, 33]);
    config(dir.path(), &url, "records", true, "");
    let checked = check(dir.path());
    let said = stderr(&checked);
    assert!(checked.status.success(), "{said}");
    assert!(!said.contains("FAIL"), "{said}");
    for line in [
        format!("sink table records: present; role {role} may INSERT, SELECT"),
        format!("dead-letter table sluice_dead_letters: present; role {role} may INSERT, SELECT"),
        format!(
            "lease table sluice_leases: present; role {role} may SELECT, INSERT, UPDATE, DELETE"
        ),
    ] {
        assert!(said.contains(&line), "{line:?} not in {said}");
    }
    let out = run_in(dir.path(), DRAIN);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM records"), 38, "{err}");
    assert_eq!(db.count("SELECT count(*) FROM sluice_dead_letters"), 2);
    assert_eq!(summary(&out)["written"], 19);
}

#[test]
fn check_names_the_right_a_role_lacks_and_a_run_meets_the_same_wall() {
    let mut db = Db::create("rights_lacking");
    let dir = tempfile::tempdir().unwrap();
    owner_loads(&db, dir.path(), true);
    let (role, url) = db.role("sluice_lacking");
    // No USAGE on the dead letters' sequence, no DELETE on the leases.
    db.execute(&format!(
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC; \
         GRANT SELECT, INSERT ON records, sluice_dead_letters TO {role}; \
         GRANT SELECT, INSERT, UPDATE ON sluice_leases, sluice_lease_pools, \
           sluice_lease_members TO {role}"
    ));
    write_records(&dir.path().join("in.ndjson"), 30, &[25]);
    config(dir.path(), &url, "records", true, "");
    let checked = check(dir.path());
    let said = stderr(&checked);
    assert_eq!(checked.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "ok    sink table records: present; role {role} may"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "FAIL  dead-letter table sluice_dead_letters: present, but role {role} lacks USAGE on sequence public.sluice_dead_letters_id_seq"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "FAIL  lease table sluice_leases: present, but role {role} lacks DELETE"
        )),
        "{said}"
    );
    // What check said a run meets: the malformed record cannot be dead-lettered.
    config(dir.path(), &url, "records", false, "");
    let out = run_in(dir.path(), DRAIN);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("SQLSTATE 42501: permission denied for sequence sluice_dead_letters_id_seq"),
        "{err}"
    );

    // A table that is missing where the role may not create it: check names the right,
    // and the start fails with the SQLSTATE (not the server's C source line).
    config(dir.path(), &url, "more_records", false, "");
    let checked = check(dir.path());
    let said = stderr(&checked);
    assert_eq!(checked.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "FAIL  sink table more_records: missing, and role {role} may not create it: CREATE on schema public is not granted"
        )),
        "{said}"
    );
    let out = run_in(dir.path(), DRAIN);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("SQLSTATE 42501: permission denied for schema public"),
        "{err}"
    );
    assert!(!err.contains(" at line "), "{err}");

    // Upsert mode also updates, and adds its columns to a table an insert-mode run made:
    // only its owner may.
    config(
        dir.path(),
        &url,
        "records",
        false,
        "mode = \"upsert\"\nversion = \"/n\"\n",
    );
    let said = stderr(&check(dir.path()));
    assert!(
        said.contains(&format!(
            "FAIL  sink table records: present, but role {role} lacks UPDATE, ownership (run adds column version, deleted to it; its owner is postgres)"
        )),
        "{said}"
    );
}

#[test]
fn a_missing_mapped_table_fails_check_naming_it() {
    let db = Db::create("rights_mapped");
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5, &[]);
    config(
        dir.path(),
        &db.url,
        "orders",
        false,
        "key_column = \"order_id\"\n[sink.columns]\nn = \"/n\"\n",
    );
    let checked = check(dir.path());
    let said = stderr(&checked);
    assert_eq!(checked.status.code(), Some(1), "{said}");
    assert!(
        said.contains("FAIL  sink table orders: orders does not exist; with [sink.columns]"),
        "{said}"
    );
    let out = run_in(dir.path(), DRAIN);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("table orders does not exist"));
    assert_eq!(
        db.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
        0,
        "neither check nor the refused start created anything"
    );
    // Once it exists, check reads the rights the mapping uses, and the run writes.
    db.execute("CREATE TABLE orders (order_id text PRIMARY KEY, n int)");
    let checked = check(dir.path());
    assert!(checked.status.success(), "{}", stderr(&checked));
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(db.count("SELECT count(*) FROM orders"), 5);
}

#[test]
fn a_start_that_finds_every_table_runs_no_ddl_and_logs_no_notice() {
    let db = Db::create("rights_ddl");
    let dir = tempfile::tempdir().unwrap();
    owner_loads(&db, dir.path(), true);
    // Every DDL command from now on is logged by the server.
    db.execute(
        "CREATE TABLE ddl_log (tag text); \
         CREATE FUNCTION log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ \
           BEGIN INSERT INTO ddl_log VALUES (tg_tag); END $$; \
         CREATE EVENT TRIGGER log_ddl ON ddl_command_start EXECUTE FUNCTION log_ddl()",
    );
    write_records(&dir.path().join("in.ndjson"), 30, &[3]);
    let out = sluice()
        .current_dir(dir.path())
        .args(DRAIN)
        .env("SLUICE_LOG", "info")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(summary(&out)["written"], 10, "{err}");
    assert_eq!(
        texts(&db.url, "SELECT tag FROM ddl_log"),
        Vec::<String>::new(),
        "{err}"
    );
    assert!(!err.contains("already exists"), "{err}");
    assert!(!err.contains("sqlx::postgres::notice"), "{err}");
}
