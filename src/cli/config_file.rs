//! Commands about the configuration file itself: `sluice init` writes a starter,
//! `sluice config schema` prints its JSON Schema, `sluice config docs` writes the
//! configuration and command-line references of the book.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{EXIT_CONFIG, EXIT_RUNTIME};

#[derive(Debug, Subcommand)]
pub(super) enum ConfigAction {
    /// Print the JSON Schema (draft 7) of the configuration file, so editors complete and
    /// check it: `sluice config schema > sluice.schema.json`, then `#:schema
    /// ./sluice.schema.json` atop sluice.toml (Taplo, Even Better TOML).
    Schema,
    /// Write the configuration and command-line references (Markdown) into DIR, from the
    /// same types that read the file and parse the flags; with --check, write nothing and
    /// exit 1 naming each file that differs.
    Docs {
        #[arg(value_name = "DIR", default_value = "docs/reference")]
        dir: PathBuf,
        /// Compare instead of writing.
        #[arg(long)]
        check: bool,
    },
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
        ConfigAction::Docs { dir, check } => docs(&dir, check),
    }
}

/// The reference pages `sluice config docs` writes, by file name.
fn reference_pages() -> [(&'static str, String); 2] {
    [
        ("configuration.md", crate::config::reference::markdown()),
        ("command-line.md", super::reference::markdown()),
    ]
}

fn docs(dir: &std::path::Path, check: bool) -> u8 {
    let mut stale = Vec::new();
    for (name, text) in reference_pages() {
        let path = dir.join(name);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.display().to_string());
            }
        } else if let Err(e) =
            std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, text))
        {
            say!("sluice: cannot write {}: {e}", path.display());
            return EXIT_RUNTIME;
        }
    }
    if stale.is_empty() {
        return 0;
    }
    say!(
        "sluice: {} differ from what the code generates; run `sluice config docs {}`",
        stale.join(", "),
        dir.display()
    );
    EXIT_RUNTIME
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
