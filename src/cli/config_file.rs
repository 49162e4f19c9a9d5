//! Commands about the configuration file itself: `sluice init` writes a starter,
//! `sluice config schema` prints its JSON Schema.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{EXIT_CONFIG, EXIT_RUNTIME};

#[derive(Debug, Subcommand)]
pub(super) enum ConfigAction {
    /// Print the JSON Schema (draft 7) of the configuration file, so editors complete and
    /// check it: `sluice config schema > sluice.schema.json`, then `#:schema
    /// ./sluice.schema.json` atop sluice.toml (Taplo, Even Better TOML).
    Schema,
}

#[derive(Debug, Args)]
pub(super) struct InitArgs {
    /// Where to write it.
    #[arg(value_name = "PATH", default_value = crate::config::origin::FILE_NAME)]
    path: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
}

/// `sluice config …`.
pub(super) fn config(action: ConfigAction) -> u8 {
    match action {
        ConfigAction::Schema => print_schema(),
    }
}

/// Prints the configuration's JSON Schema on stdout.
fn print_schema() -> u8 {
    use std::io::Write;
    let text = crate::config::schema::text();
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => 0,
        Err(e) => {
            say!("sluice: cannot write the schema: {e}");
            EXIT_RUNTIME
        }
    }
}

pub(super) fn init(args: InitArgs) -> u8 {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let written = options.open(&args.path).and_then(|mut f| {
        std::io::Write::write_all(&mut f, crate::config::origin::STARTER.as_bytes())
    });
    match written {
        Ok(()) => {
            say!(
                "sluice: wrote {}; edit it, then `sluice check`",
                args.path.display()
            );
            0
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            say!(
                "sluice: {} exists; --force replaces it",
                args.path.display()
            );
            EXIT_CONFIG
        }
        Err(e) => {
            say!("sluice: cannot write {}: {e}", args.path.display());
            EXIT_RUNTIME
        }
    }
}
