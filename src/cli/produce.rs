//! `sluice produce`: NDJSON lines published to the configured queue.

use std::path::PathBuf;

use clap::Args;

use super::{ConfigArgs, EXIT_CONFIG, EXIT_RUNTIME, load};
use crate::config::Overrides;
use crate::produce::ProduceError;

#[derive(Debug, Args)]
pub(super) struct ProduceArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// NDJSON input; "-" reads stdin.
    #[arg(value_name = "INPUT", default_value = "-")]
    input: PathBuf,
    /// Kafka, `source.value.format = "avro"`: encode each line with this Avro schema
    /// (`.avsc`), registered under `<topic>-value` in `[source.schema_registry]`.
    #[arg(long, value_name = "FILE")]
    value_schema: Option<PathBuf>,
}

pub(super) async fn produce(args: ProduceArgs) -> u8 {
    let (config, _) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match crate::produce::produce(&config, &args.input, args.value_schema.as_deref()).await {
        Ok(tally) => {
            out!("{}", tally.delivered);
            match tally.first_error {
                Some(error) => {
                    say!(
                        "sluice: {} delivered, {} not delivered (first error: {error})",
                        tally.delivered,
                        tally.failed
                    );
                    EXIT_RUNTIME
                }
                None => {
                    say!("sluice: {} records delivered", tally.delivered);
                    0
                }
            }
        }
        Err(e @ (ProduceError::NotAQueue(_) | ProduceError::Config(_))) => {
            say!("sluice: {e}");
            EXIT_CONFIG
        }
        Err(e) => {
            say!("sluice: {e}");
            EXIT_RUNTIME
        }
    }
}
