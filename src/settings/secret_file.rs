//! `*_file` keys: a secret read from a file, so it stays out of the config and `ps`.

use std::path::Path;

use super::ConfigError;

/// The secret in `path` for `key`, refused when `both` (the key it replaces) is also set
/// (`current` is that key's value).
pub fn read_secret_file(
    key: &'static str,
    both: &'static str,
    path: &Path,
    current: &str,
) -> Result<String, ConfigError> {
    if !current.is_empty() {
        return Err(ConfigError::invalid(
            key,
            format!("set {both} or {key}, not both"),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::invalid(key, format!("cannot read {}: {e}", path.display())))?;
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}
