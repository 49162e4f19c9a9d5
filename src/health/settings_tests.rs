use super::*;
use crate::settings::only_key;

fn pg_sink() -> SinkSettings {
    let own = crate::sink::settings::SinkBackend::Postgres(Default::default());
    SinkSettings::new("postgres://u@127.0.0.1/db", own)
}

fn probe(toml_text: &str) -> ProbeSettings {
    use figment::providers::{Format, Toml};
    figment::Figment::from(Toml::string(toml_text))
        .extract()
        .unwrap()
}

fn key_of(sink: &SinkSettings, p: ProbeSettings) -> std::borrow::Cow<'static, str> {
    let health = HealthSettings { probe: vec![p] };
    only_key(|problems| health.validate(sink, problems))
}

#[test]
fn a_builtin_on_the_sinks_database_with_a_duration_limit() {
    let p = probe("builtin = \"replica_lag\"\nmax = \"2s\"\ncritical = 30");
    let mut problems = Problems::default();
    HealthSettings {
        probe: vec![p.clone()],
    }
    .validate(&pg_sink(), &mut problems);
    problems.into_result().unwrap();
    assert_eq!(p.name(), "replica_lag");
    assert_eq!(p.max(None), 2.0);
    assert_eq!(p.critical(None), Some(30.0));
    assert_eq!(p.interval(), Duration::from_secs(1));
    assert_eq!(p.url(&pg_sink()), "postgres://u@127.0.0.1/db");
}

#[test]
fn refuses_mistakes_by_key() {
    let sink = pg_sink();
    let cases = [
        ("max = 1", "health.probe.builtin"),
        (
            "builtin = \"active_sessions\"\nquery = \"select 1\"\nmax = 1",
            "health.probe.query",
        ),
        ("query = \"select 1\"\nmax = 1", "health.probe.name"),
        (
            "builtin = \"active_sessions\"\nmax = \"soon\"",
            "health.probe.max",
        ),
        (
            "builtin = \"active_sessions\"\nmax = 5\ncritical = 5",
            "health.probe.critical",
        ),
        (
            "builtin = \"active_sessions\"\nmax = 5\nresume_ratio = 0",
            "health.probe.resume_ratio",
        ),
        (
            "builtin = \"active_sessions\"\nmax = 5\ninterval = \"1ms\"",
            "health.probe.interval",
        ),
        (
            "builtin = \"active_sessions\"\nmax = 5\nurl = \"http://x\"",
            "health.probe.url",
        ),
        (
            "builtin = \"active_sessions\"\nmax = 5\nreplicas = [\"postgres://h/d\"]",
            "health.probe.replicas",
        ),
        (
            "builtin = \"replica_lag\"\nmax = 5\nurl = \"postgres://h/d\"\nreplicas = [\"mysql://u@h/d\"]",
            "health.probe.replicas",
        ),
        (
            "builtin = \"replica_lag\"\nmax = 5\nurl = \"mysql://u@h/d\"",
            "health.probe.replicas",
        ),
        (
            "builtin = \"replica_lag\"\nmax = 5\nreplicas = [\"mysql://u@h/d\", \"http://x\"]",
            "health.probe.replicas",
        ),
    ];
    // MySQL replicas alone are enough, whatever the sink.
    let ok = HealthSettings {
        probe: vec![probe(
            "builtin = \"replica_lag\"\nmax = 5\nreplicas = [\"mysql://u@h/d\"]",
        )],
    };
    let mut problems = Problems::default();
    ok.validate(&SinkSettings::default(), &mut problems);
    problems.into_result().unwrap();
    for (text, key) in cases {
        assert_eq!(key_of(&sink, probe(text)), key, "{text}");
    }
    let sqlite = SinkSettings::default();
    assert_eq!(
        key_of(&sqlite, probe("builtin = \"active_sessions\"\nmax = 5")),
        "health.probe.url"
    );
    let twice = HealthSettings {
        probe: vec![probe("builtin = \"active_sessions\"\nmax = 5"); 2],
    };
    assert_eq!(only_key(|p| twice.validate(&sink, p)), "health.probe.name");
}

fn problems(p: &ProbeSettings) -> Result<(), ConfigError> {
    let mut problems = Problems::default();
    HealthSettings {
        probe: vec![p.clone()],
    }
    .validate(&pg_sink(), &mut problems);
    problems.into_result()
}

#[test]
fn a_canary_with_a_relative_target_and_its_defaults() {
    let p = probe("builtin = \"canary\"\ntarget = \"2x\"\n");
    problems(&p).unwrap();
    assert_eq!(p.name(), "canary");
    assert_eq!(p.interval(), Duration::from_millis(50));
    assert_eq!(p.window(), Duration::from_secs(5));
    assert_eq!(p.quantile(), 0.99);
    assert!(p.needs_baseline());
    assert_eq!(p.target(None), None, "no baseline yet");
    assert_eq!(p.target(Some(0.004)), Some(0.008));
    assert_eq!(
        p.max(Some(0.004)),
        f64::INFINITY,
        "no max: never held for its value"
    );
    let p = probe(
        "builtin = \"canary\"\nquery = \"SELECT id FROM t WHERE id = 1\"\ntarget = \"20ms\"\nmax = \"3x\"\ncritical = \"10x\"\npercentile = 99\nwindow = \"1s\"\ninterval = \"100ms\"\n",
    );
    problems(&p).unwrap();
    assert_eq!(p.target(None), Some(0.02));
    assert_eq!(p.max(Some(0.01)), 0.03);
    assert_eq!(p.critical(Some(0.01)), Some(0.1));
    assert_eq!(p.quantile(), 0.99);
}

#[test]
fn canary_mistakes_name_their_key() {
    let key = |text: &str| {
        let health = HealthSettings {
            probe: vec![probe(text)],
        };
        only_key(|p| health.validate(&pg_sink(), p))
    };
    let cases = [
        ("builtin = \"canary\"\n", "health.probe.max"),
        (
            "builtin = \"canary\"\ntarget = \"0x\"\n",
            "health.probe.target",
        ),
        (
            "builtin = \"canary\"\ntarget = \"fast\"\n",
            "health.probe.target",
        ),
        ("builtin = \"canary\"\ntarget = 0\n", "health.probe.target"),
        (
            "builtin = \"canary\"\ntarget = \"0ms\"\n",
            "health.probe.target",
        ),
        (
            "builtin = \"active_sessions\"\ntarget = \"2x\"\n",
            "health.probe.target",
        ),
        (
            "builtin = \"active_sessions\"\nmax = \"2x\"\n",
            "health.probe.max",
        ),
        (
            "builtin = \"active_sessions\"\nmax = 5\nwindow = \"1s\"\n",
            "health.probe.window",
        ),
        (
            "builtin = \"active_sessions\"\nmax = 5\npercentile = 90\n",
            "health.probe.percentile",
        ),
        (
            "builtin = \"canary\"\ntarget = \"2x\"\npercentile = 0\n",
            "health.probe.percentile",
        ),
        (
            "builtin = \"canary\"\ntarget = \"2x\"\nwindow = \"40ms\"\n",
            "health.probe.window",
        ),
        (
            "builtin = \"canary\"\ntarget = \"2x\"\nquery = \" \"\n",
            "health.probe.query",
        ),
        (
            "builtin = \"canary\"\nmax = \"3x\"\ncritical = \"2x\"\n",
            "health.probe.critical",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(key(text), expected, "{text}");
    }
    // A target alone is enough for any probe; a critical limit needs no max.
    problems(&probe("builtin = \"active_sessions\"\ntarget = 8\n")).unwrap();
    problems(&probe(
        "builtin = \"canary\"\ntarget = \"2x\"\ncritical = \"1s\"\n",
    ))
    .unwrap();
}
