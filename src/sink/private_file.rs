//! Files that hold raw records (SQLite databases, dead letters) are created readable by
//! their owner only, whatever the umask: records may carry personal data.

use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Creates `path` empty with mode 0600 unless it exists (an existing file keeps its
/// mode: the operator chose it). In-memory SQLite needs no file.
pub fn create(path: &Path) -> std::io::Result<()> {
    if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_owner_only_and_leaves_existing_files_alone() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("new.db");
        create(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let old = dir.path().join("old.db");
        std::fs::write(&old, "x").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o640)).unwrap();
        create(&old).unwrap();
        let mode = std::fs::metadata(&old).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "x");
    }
}
