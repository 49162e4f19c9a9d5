//! The other ways in: HTTP with a token in the query and a header, RabbitMQ at trace
//! level, Kafka with a SASL password, and the failures and refusals that name endpoints.

use super::*;

/// An ingest endpoint that drops its first connections unanswered, refuses records
/// holding "poison" with 422, takes the rest, and counts requests carrying the header.
fn ingest_server(drop_first: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let authorized = Arc::new(AtomicUsize::new(0));
    let seen = authorized.clone();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            if n < drop_first {
                continue;
            }
            let seen = seen.clone();
            std::thread::spawn(move || {
                loop {
                    let Some((head, body)) = read_request(&mut stream) else {
                        return;
                    };
                    if head.contains(&format!("Bearer {HEADER}")) {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                    let (status, text) = if body.contains("poison") {
                        ("422 Unprocessable Entity", "{\"error\":\"poison\"}")
                    } else {
                        ("200 OK", "{}")
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                        text.len()
                    );
                    if stream.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, authorized)
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some((head, String::from_utf8_lossy(&body).into_owned()))
}

#[test]
fn file_into_http_with_a_token_in_the_query_and_the_header() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 100, &[]);
    let mut body = std::fs::read_to_string(dir.path().join("in.ndjson")).unwrap();
    body.push_str("{\"id\":\"p1\",\"poison\":true}\n");
    std::fs::write(dir.path().join("in.ndjson"), body).unwrap();
    let (port, authorized) = ingest_server(3);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"http\"\nurl = \"http://127.0.0.1:{port}/ingest?token={QS}&sig={QS}\"\nkey = \"/id\"\nmax_batch = 20\ntimeout = \"2s\"\n[sink.headers]\nAuthorization = \"Bearer ${{INGEST_TOKEN}}\"\n[sink.dead_letters]\npath = \"dead.ndjson\"\n[retry]\nmin_delay = \"10ms\"\nmax_delay = \"100ms\"\n"
        ),
    )
    .unwrap();
    let mut ch = Channels(Vec::new());
    collect(dir.path(), 101, false, &mut ch);
    assert!(authorized.load(Ordering::SeqCst) > 0, "the header was sent");
    let run = &ch
        .0
        .iter()
        .find(|(n, _)| n == "run (trace, text) stderr")
        .unwrap()
        .1;
    assert!(
        run.contains("token=***"),
        "the dropped connections were reported: {run}"
    );
    assert_owner_only(&dir.path().join("dead.ndjson"));
    let letters = std::fs::read_to_string(dir.path().join("dead.ndjson")).unwrap();
    assert!(letters.contains("p1"), "{letters}");
    ch.add("dead letters (ndjson)", letters);
    ch.assert_clean();
}

#[test]
fn rabbitmq_into_sqlite_at_trace_level() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_secrets");
    amqp_publish(&queue, 50);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\n",
            amqp_url()
        ),
    )
    .unwrap();
    let mut ch = Channels(Vec::new());
    collect(dir.path(), 50, false, &mut ch);
    let run = &ch
        .0
        .iter()
        .find(|(n, _)| n == "run (trace, text) stderr")
        .unwrap()
        .1;
    assert!(
        !run.contains("logging at info"),
        "SLUICE_LOG=trace was taken: {run}"
    );
    ch.assert_clean();
}

#[test]
fn kafka_with_a_sasl_password_into_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("sluice_secrets");
    let brokers =
        std::env::var("SLUICE_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into());
    let tansu = std::env::var("SLUICE_TEST_TANSU").unwrap_or_else(|_| "tansu".into());
    let made = Command::new(&tansu)
        .args(["topic", "create", "--broker", &format!("tcp://{brokers}")])
        .args(["--partitions", "1", &topic])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let table = unique("secrets_kafka");
    // The password comes from a file, as a mounted Kubernetes secret would hold it.
    std::fs::write(dir.path().join("sasl-password"), format!("{SASL}\n")).unwrap();
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"kafka\"\nbrokers = {brokers:?}\ntopic = {topic:?}\ngroup = \"{topic}-g\"\n[source.properties]\n\"sasl.username\" = \"sluice\"\n\"sasl.password_file\" = \"sasl-password\"\n\"session.timeout.ms\" = 2000\n\"heartbeat.interval.ms\" = 500\n[sink]\nkind = \"postgres\"\nurl = {:?}\ntable = {table:?}\nkey = \"/id\"\n",
            planted_pg_url(&pg_url())
        ),
    )
    .unwrap();
    write_records(&dir.path().join("in.ndjson"), 50, &[]);
    let mut ch = Channels(Vec::new());
    let out = traced(dir.path())
        .args(["produce", "-c", "sluice.toml", "in.ndjson"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    ch.add_output("produce", &out);
    collect(dir.path(), 50, false, &mut ch);
    pg_exec(&pg_url(), &format!("DROP TABLE \"{table}\""));
    let _ = Command::new(&tansu)
        .args([
            "topic",
            "delete",
            "--broker",
            &format!("tcp://{brokers}"),
            &topic,
        ])
        .output();
    ch.assert_clean();
}

#[test]
fn failures_and_refusals_name_endpoints_without_their_secrets() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5, &[]);
    let closed = free_port();
    let pg = planted_pg_url(&pg_url()).replace(":5432/", &format!(":{closed}/"));
    let mut ch = Channels(Vec::new());
    // Unreachable sink at start: run fails, check names the endpoint.
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!("[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"postgres\"\nurl = {pg:?}\n"),
    )
    .unwrap();
    for args in [&["run", "--until-empty"][..], &["check", "--timeout", "2s"]] {
        let out = traced(dir.path())
            .args(args)
            .args(["-c", "sluice.toml"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("127.0.0.1:{closed}")),
            "{}",
            stderr(&out)
        );
        ch.add_output(&args.join(" "), &out);
    }
    // Refused configuration: the URL is quoted in the message, masked.
    let refusals = [
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"http\"\nurl = {pg:?}\n"
        ),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://o.db\"\n[leases]\nstore = \"mongodb://u:{PW}@h/?password={QS}\"\ncapacity = 5\npartitions = 1\npool = \"p\"\n"
        ),
        format!(
            "[source]\nkind = \"amqp\"\nurl = \"amqp://u:{PW}@127.0.0.1:{closed}/%2f?token={QS}\"\nqueue = \"q\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://o.db\"\n"
        ),
    ];
    for (i, body) in refusals.iter().enumerate() {
        std::fs::write(dir.path().join("bad.toml"), body).unwrap();
        let out = traced(dir.path())
            .args(["run", "-c", "bad.toml"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        ch.add_output(&format!("refusal {i}"), &out);
    }
    // --sink-url with a password: warned about, never echoed.
    let out = traced(dir.path())
        .args(["run", "-c", "sluice.toml", "--until-empty", "--sink-url"])
        .arg(format!("http://u:{PW}@127.0.0.1:{closed}/in?token={QS}"))
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("SLUICE_SINK__URL"),
        "{}",
        stderr(&out)
    );
    ch.add_output("--sink-url", &out);
    ch.add("padding so the channel-size check holds", "x".repeat(1000));
    ch.assert_clean();
}
