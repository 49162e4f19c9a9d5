//! Where the configuration comes from when `--config` is not given: `./sluice.toml`, then
//! the user's config directory, then the system's, then a default built into the binary
//! (the NDJSON → SQLite example), so `sluice run` works from any directory and says which
//! one it used.

use std::path::{Path, PathBuf};

/// The built-in default: `config/default.toml` as shipped.
pub const BUILT_IN: &str = include_str!("../../config/default.toml");

/// What `sluice init` writes: a commented starter configuration.
pub const STARTER: &str = include_str!("../../config/starter.toml");

/// The name looked for in the working, user and system directories.
pub const FILE_NAME: &str = "sluice.toml";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOrigin {
    File { path: PathBuf, found: FoundBy },
    BuiltIn,
}

/// How a configuration file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    Flag,
    WorkingDirectory,
    UserDirectory,
    SystemDirectory,
}

impl ConfigOrigin {
    /// A file given explicitly (`--config`).
    pub fn file(path: &Path) -> Self {
        ConfigOrigin::File {
            path: path.to_path_buf(),
            found: FoundBy::Flag,
        }
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            ConfigOrigin::File { path, .. } => Some(path),
            ConfigOrigin::BuiltIn => None,
        }
    }

    /// `--config` if given, else the first `sluice.toml` found, else the built-in default.
    pub fn discover(flag: Option<&Path>) -> Self {
        if let Some(path) = flag {
            return Self::file(path);
        }
        let candidates = [
            (Some(PathBuf::from(FILE_NAME)), FoundBy::WorkingDirectory),
            (
                user_dir().map(|d| d.join(FILE_NAME)),
                FoundBy::UserDirectory,
            ),
            (
                Some(Path::new("/etc/sluice").join(FILE_NAME)),
                FoundBy::SystemDirectory,
            ),
        ];
        candidates
            .into_iter()
            .find_map(|(path, found)| {
                path.filter(|p| p.is_file())
                    .map(|path| ConfigOrigin::File { path, found })
            })
            .unwrap_or(ConfigOrigin::BuiltIn)
    }
}

/// `$XDG_CONFIG_HOME/sluice`, else `~/.config/sluice`.
fn user_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })?;
    Some(base.join("sluice"))
}

impl std::fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigOrigin::File { path, found } => {
                let how = match found {
                    FoundBy::Flag => "--config",
                    FoundBy::WorkingDirectory => "found in the working directory",
                    FoundBy::UserDirectory => "found in the user's config directory",
                    FoundBy::SystemDirectory => "found in the system's config directory",
                };
                write!(f, "{} ({how})", path.display())
            }
            ConfigOrigin::BuiltIn => f.write_str(
                "the built-in default (examples/records.ndjson into sqlite://sluice.db; `sluice init` writes a config to edit)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_and_says_so() {
        let origin = ConfigOrigin::discover(Some(Path::new("x.toml")));
        assert_eq!(origin.path(), Some(Path::new("x.toml")));
        assert_eq!(origin.to_string(), "x.toml (--config)");
    }

    #[test]
    fn the_built_in_default_and_the_starter_are_valid_toml() {
        use figment::providers::{Format, Toml};
        for text in [BUILT_IN, STARTER] {
            let figment = figment::Figment::from(Toml::string(text));
            assert!(figment.find_value("source.kind").is_ok());
            assert!(figment.find_value("sink.url").is_ok());
        }
    }
}
