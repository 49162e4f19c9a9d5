//! Whether a file a setting names can be read, and if not, why in words that point at the
//! fix: missing, a directory, or refused by the system (permissions), never one for another.

use std::io::ErrorKind;
use std::path::Path;

/// Why `path` cannot be read as a file (the message follows the path), if it cannot.
pub fn unreadable_file(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => Some("does not exist".into()),
        Err(e) => Some(format!("cannot be read: {e}")),
        Ok(m) if m.is_dir() => Some("is a directory, not a file".into()),
        Ok(_) => std::fs::File::open(path)
            .err()
            .map(|e| format!("cannot be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            unreadable_file(&dir.path().join("nope")).as_deref(),
            Some("does not exist")
        );
        assert_eq!(
            unreadable_file(dir.path()).as_deref(),
            Some("is a directory, not a file")
        );
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(unreadable_file(&file), None);
    }
}
