use super::*;
use serde_json::{Value, json};

/// A slow refill (one record per second) keeps the arithmetic immune to how long the
/// requests take on a busy machine.
async fn start(burst: u32, style: RetryAfterStyle) -> SimSink {
    let mut config = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1.0);
    config.burst = burst;
    config.reject_field = Some("poison".into());
    config.retry_after = style;
    config.latency.base = Duration::from_millis(1);
    SimSink::start(config).await.unwrap()
}

fn batch(keys: &[&str]) -> Value {
    Value::Array(
        keys.iter()
            .map(|k| json!({"key": k, "source": "t", "record": {"id": k}}))
            .collect(),
    )
}

#[tokio::test]
async fn stores_by_key_throttles_beyond_capacity_and_reports() {
    let sim = start(10, RetryAfterStyle::Millis).await;
    let http = crate::tls::http_client().build().unwrap();
    let post = |body: Value| http.post(sim.ingest_url()).json(&body).send();
    let poison = json!([{"key": "p", "record": {"poison": true}}]);
    // Body bytes of the readable requests, in the order sent.
    let sizes: Vec<u64> = [
        batch(&["a", "b", "c"]),
        batch(&["c", "d"]),
        batch(&["e", "f", "g", "h", "i", "j"]),
        poison.clone(),
    ]
    .iter()
    .map(|b| serde_json::to_vec(b).unwrap().len() as u64)
    .collect();

    let r = post(batch(&["a", "b", "c"])).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"inserted": 3, "duplicates": 0})
    );
    let r = post(batch(&["c", "d"])).await.unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"inserted": 1, "duplicates": 1})
    );
    // Five records of the ten-record bucket are spent: six do not fit.
    let r = post(batch(&["e", "f", "g", "h", "i", "j"])).await.unwrap();
    assert_eq!(r.status(), 429);
    let ms: u64 = r.headers()["x-ms-retry-after-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (500..=1000).contains(&ms),
        "{ms} ms for one missing record at 1 rec/s"
    );
    assert_eq!(r.headers()["retry-after"], "1");

    let r = post(poison).await.unwrap();
    assert_eq!(r.status(), 422);
    let r = http
        .post(sim.ingest_url())
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = post(json!([{"record": {}}])).await.unwrap();
    assert_eq!(r.status(), 422);

    let s: SimStats = http
        .get(format!("http://{}/stats", sim.addr()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(s, sim.stats());
    assert_eq!(
        (s.requests, s.accepted, s.inserted, s.duplicates),
        (6, 5, 4, 1)
    );
    assert_eq!((s.rejected, s.rejected_records, s.malformed), (1, 6, 3));
    assert_eq!(s.records_received, 3 + 2 + 6 + 1);
    assert_eq!(
        (s.requests_accepted, s.bytes_accepted),
        (2, sizes[0] + sizes[1])
    );
    assert_eq!(s.bytes_received, sizes.iter().sum::<u64>());
    assert_eq!(s.windows.iter().map(|w| w.accepted).sum::<u64>(), 5);
    assert_eq!(s.windows.iter().map(|w| w.requests).sum::<u64>(), 6);
    assert_eq!(sim.keys(), ["a", "b", "c", "d"]);
    sim.stop().await.unwrap();
}

#[tokio::test]
async fn ndjson_bodies_and_ratelimit_answers() {
    let sim = start(2, RetryAfterStyle::Ratelimit).await;
    let http = crate::tls::http_client().build().unwrap();
    let body = "{\"key\":\"1\",\"record\":{}}\n{\"key\":\"2\",\"record\":{}}\n";
    let send = || {
        http.post(sim.ingest_url())
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
    };
    assert_eq!(send().await.unwrap().status(), 200);
    let r = send().await.unwrap();
    assert_eq!(r.status(), 429);
    // Two records missing at one per second.
    assert_eq!(r.headers()["ratelimit"], "\"sim\";r=0;t=2");
    assert_eq!(
        r.headers()["ratelimit-policy"],
        "\"sim\";q=1;w=1;qu=\"records\""
    );
    assert!(r.headers().get("retry-after").is_none());
    sim.stop().await.unwrap();
}

/// Requests of `keys.len()` records each until the first 429; returns the requests
/// taken and the 429's headers.
async fn until_throttled(sim: &SimSink, keys: usize) -> (u64, reqwest::header::HeaderMap) {
    let http = crate::tls::http_client().build().unwrap();
    for taken in 0.. {
        let ids: Vec<String> = (0..keys).map(|k| format!("{taken:04}-{k:04}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let r = http
            .post(sim.ingest_url())
            .json(&batch(&ids))
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            return (taken, r.headers().clone());
        }
        assert_eq!(r.status(), 200);
    }
    unreachable!()
}

#[tokio::test]
async fn the_bucket_counts_requests_or_body_bytes_and_the_policy_names_it() {
    // Requests: a burst of 3 takes three requests however many records they carry.
    let mut config = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1.0);
    config.unit = BucketUnit::Requests;
    config.burst = 3;
    config.retry_after = RetryAfterStyle::Ratelimit;
    let sim = SimSink::start(config.clone()).await.unwrap();
    let (taken, headers) = until_throttled(&sim, 50).await;
    assert_eq!(taken, 3);
    assert_eq!(headers["ratelimit"], "\"sim\";r=0;t=1");
    assert_eq!(
        headers["ratelimit-policy"],
        "\"sim\";q=1;w=1;qu=\"requests\""
    );
    let s = sim.stats();
    assert_eq!((s.requests_accepted, s.accepted, s.rejected), (3, 150, 1));
    sim.stop().await.unwrap();

    // Bytes: a burst of 1,000 body bytes at 2 B/s.
    let one_record = serde_json::to_vec(&batch(&["0000-0000"])).unwrap().len() as u64;
    config.unit = BucketUnit::Bytes;
    config.capacity = 2.0;
    config.burst = 1000;
    let sim = SimSink::start(config.clone()).await.unwrap();
    let (taken, headers) = until_throttled(&sim, 1).await;
    assert_eq!(taken, 1000 / one_record);
    assert_eq!(
        headers["ratelimit-policy"],
        "\"sim\";q=2;w=1;qu=\"content-bytes\""
    );
    let s = sim.stats();
    assert_eq!(s.bytes_accepted, taken * one_record);
    assert_eq!(s.bytes_received, (taken + 1) * one_record);
    // A body over the burst is refused with the time to fill the bucket: the bytes
    // taken so far, at 2 B/s.
    let big: Vec<String> = (0..100).map(|k| format!("big-{k:05}")).collect();
    let big: Vec<&str> = big.iter().map(String::as_str).collect();
    let r = crate::tls::http_client()
        .build()
        .unwrap()
        .post(sim.ingest_url())
        .json(&batch(&big))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let fill = (taken * one_record).div_ceil(2);
    assert_eq!(
        r.headers()["ratelimit"],
        format!("\"sim\";r=0;t={fill}").as_str()
    );
    sim.stop().await.unwrap();
}

#[test]
fn the_unit_flag_defaults_to_records() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimSinkArgs,
    }
    let config = |argv: &[&str]| {
        let cli = Cli::try_parse_from([&["sim-sink"], argv].concat()).unwrap();
        cli.args.config().unwrap()
    };
    assert_eq!(config(&[]).unit, BucketUnit::Records);
    let c = config(&["--unit", "requests", "--capacity", "20", "--burst", "10"]);
    assert_eq!(
        (c.unit, c.capacity, c.burst),
        (BucketUnit::Requests, 20.0, 10)
    );
    assert_eq!(config(&["--unit", "bytes"]).unit, BucketUnit::Bytes);
}

#[tokio::test]
async fn outages_answer_503_or_hold_the_request() {
    let sim = start(100, RetryAfterStyle::None).await;
    let http = crate::tls::http_client().build().unwrap();
    let switch = |seconds: f64, mode: &str| {
        http.post(format!("http://{}/outage", sim.addr()))
            .json(&json!({"seconds": seconds, "mode": mode}))
            .send()
    };
    let ingest_a = || http.post(sim.ingest_url()).json(&batch(&["a"])).send();
    assert_eq!(switch(30.0, "503").await.unwrap().status(), 200);
    let r = ingest_a().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().get("retry-after").is_none());
    switch(0.3, "hang").await.unwrap();
    let started = std::time::Instant::now();
    let r = ingest_a().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(started.elapsed() >= Duration::from_millis(250));
    switch(0.0, "503").await.unwrap();
    let r = ingest_a().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!((sim.stats().unavailable, sim.stats().inserted), (2, 1));
    sim.stop().await.unwrap();
}
