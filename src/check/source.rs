//! What `sluice check` reaches of the source: the file, the AMQP queue, the Kafka topic.

use std::time::Duration;

#[cfg(feature = "amqp")]
mod amqp;
#[cfg(feature = "kafka")]
mod kafka;

#[cfg(any(feature = "kafka", feature = "amqp"))]
use super::within;
use super::{Finding, writable};
use crate::source::settings::SourceSettings;

#[cfg_attr(not(any(feature = "kafka", feature = "amqp")), allow(unused_variables))]
pub(super) async fn findings(source: &SourceSettings, timeout: Duration) -> Vec<Finding> {
    match source {
        SourceSettings::File(s) => {
            let path = s.path.clone().unwrap_or_default();
            if path.as_os_str() == "-" {
                return vec![Finding {
                    what: "source stdin".into(),
                    result: Ok("read as it comes".into()),
                }];
            }
            let mut findings = vec![Finding {
                what: format!("source file {}", path.display()),
                result: std::fs::File::open(&path)
                    .and_then(|f| f.metadata())
                    .map(|m| format!("readable, {} bytes", m.len()))
                    .map_err(|e| e.to_string()),
            }];
            if let Some(cp) = s.checkpoint_path() {
                findings.push(Finding {
                    what: format!("checkpoint {}", cp.display()),
                    result: writable(&cp).map(|()| "writable".into()),
                });
            }
            findings
        }
        #[cfg(feature = "amqp")]
        SourceSettings::Amqp(s) => {
            let url = s.url.clone().unwrap_or_default();
            let queue = s.queue.clone().unwrap_or_default();
            vec![Finding {
                what: format!("source {url} queue {queue}"),
                result: within(
                    timeout,
                    amqp::queue(&url, s.tls.as_ref(), &queue, s.declare),
                )
                .await,
            }]
        }
        #[cfg(feature = "kafka")]
        SourceSettings::Kafka(s) => {
            let brokers = s.brokers.clone().unwrap_or_default();
            let topic = s.topic.clone().unwrap_or_default();
            let settings = s.clone();
            let blocking = tokio::task::spawn_blocking(move || kafka::topic(&settings, timeout));
            let result = within(timeout + Duration::from_millis(500), async {
                blocking.await.map_err(|e| e.to_string())?
            })
            .await;
            vec![Finding {
                what: format!("source kafka {brokers} topic {topic}"),
                result,
            }]
        }
        // Refused by the settings' validation before `check` runs.
        #[cfg(not(all(feature = "kafka", feature = "amqp")))]
        other => vec![Finding {
            what: format!("source kind {:?}", other.kind()),
            result: Err("not in this build".into()),
        }],
    }
}
