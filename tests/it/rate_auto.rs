//! `rate.records_per_second = "auto" | "off" | N`: the file, `SLUICE_*` and `--rate` take
//! all three, a bad value exits 2 naming the key, an unbounded rate is not held by a
//! ceiling of ours, and a run held by a forgotten ceiling says so in its summary and at
//! the end of its log.

use crate::common;

use common::*;

fn file_config(dir: &std::path::Path, records: usize, rate: &str) {
    write_records(&dir.join("in.ndjson"), records, &[]);
    let path = write_config(dir, "in.ndjson", 1.0, "");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace(
            "records_per_second = 1\n",
            &format!("records_per_second = {rate}\n"),
        ),
    )
    .unwrap();
}

#[test]
fn a_forgotten_ceiling_is_named_in_the_summary_and_at_the_end_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    file_config(dir.path(), 4_000, "1000");
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 4_000);
    let first = &s["bounded_by"][0];
    assert_eq!(first["by"], "rate.records_per_second", "{s}");
    // Slow start's climb to it (under a second) counts as the ceiling's.
    let share = |by: &str| {
        s["bounded_by"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["by"] == by)
            .map(|b| b["share"].as_f64().unwrap())
            .sum::<f64>()
    };
    assert!(share("slow start") < 0.25, "{s}");
    assert!(
        share("rate.records_per_second") + share("slow start") >= 0.9,
        "{s}"
    );
    let log = stderr(&out);
    let lines: Vec<&str> = log.lines().collect();
    let [.., warning, last] = lines[..] else {
        panic!("{log}")
    };
    assert!(
        warning.contains("rate.records_per_second = 1000 bounded the rate the whole run"),
        "{log}"
    );
    assert!(
        last.contains("bounded by: rate.records_per_second")
            && last.contains("(the whole run: raise it, or set it to \"auto\")"),
        "{log}"
    );
}

#[test]
fn auto_and_off_set_no_ceiling_from_the_file_the_environment_or_the_flag() {
    for (how, rate) in [
        ("file", "\"off\""),
        ("file", "\"auto\""),
        ("env", "auto"),
        ("flag", "off"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        file_config(dir.path(), 3_000, if how == "file" { rate } else { "5" });
        let mut cmd = sluice();
        cmd.current_dir(dir.path()).args(DRAIN);
        match how {
            "env" => {
                cmd.env("SLUICE_RATE__RECORDS_PER_SECOND", rate);
            }
            "flag" => {
                cmd.args(["--rate", rate]);
            }
            _ => {}
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{how} {rate}: {}", stderr(&out));
        let s = summary(&out);
        assert_eq!(s["written"], 3_000, "{how} {rate}");
        // At 5 rec/s this would take ten minutes; without a ceiling it takes moments.
        assert!(s["elapsed_s"].as_f64().unwrap() < 30.0, "{how} {rate}: {s}");
        let bounds = s["bounded_by"].as_array().cloned().unwrap_or_default();
        assert!(
            bounds.iter().all(|b| b["by"] != "rate.records_per_second"),
            "{how} {rate}: {s}"
        );
        assert!(!stderr(&out).contains("the whole run"), "{}", stderr(&out));
    }
}

#[test]
fn a_bad_rate_exits_2_naming_the_key_or_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    file_config(dir.path(), 10, "\"fast\"");
    let out = run_in(dir.path(), DRAIN);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("rate.records_per_second")
            && stderr(&out).contains("\"auto\" or \"off\""),
        "{}",
        stderr(&out)
    );
    file_config(dir.path(), 10, "100");
    let out = sluice()
        .current_dir(dir.path())
        .args(DRAIN)
        .env("SLUICE_RATE__RECORDS_PER_SECOND", "automatic")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("rate.records_per_second"),
        "{}",
        stderr(&out)
    );
    let mut args = DRAIN.to_vec();
    args.extend(["--rate", "soon"]);
    let out = run_in(dir.path(), &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--rate"), "{}", stderr(&out));
}

#[test]
fn plan_says_there_is_no_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    file_config(dir.path(), 10, "\"auto\"");
    let out = run_in(dir.path(), &["plan", "-c", "sluice.toml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no ceiling of ours"), "{text}");
}
