//! Finding a file again by what it is rather than by its name: after a restart, a file the
//! checkpoint lists is looked up in the input's directory by identity (it was rotated to
//! another name); after a copytruncate, the copy of the content read so far is looked up
//! among the files named like the input by its head.

use std::path::{Path, PathBuf};

use super::identity::{FileId, fingerprint, read_head};

/// A file found, opened, with its head read.
pub struct OpenedFile {
    pub path: PathBuf,
    pub file: std::fs::File,
    pub id: FileId,
    pub head: Vec<u8>,
}

/// The file name alone, for origins and messages.
pub fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// What is looked for: a file at least `len` long whose first `covered` bytes hash to
/// `fingerprint`.
pub struct WantedFile<'a> {
    pub len: u64,
    pub covered: u64,
    pub fingerprint: &'a str,
}

impl WantedFile<'_> {
    /// Whether a file `len` long starting with `head` holds the content wanted.
    pub fn matches(&self, len: u64, head: &[u8]) -> bool {
        len >= self.len && fingerprint(head, self.covered) == self.fingerprint
    }
}

/// The input's directory, with the files that are never inputs (the checkpoint) left out.
pub struct Directory<'a> {
    pub input: &'a Path,
    pub excluded: &'a dyn Fn(&Path) -> bool,
}

impl Directory<'_> {
    /// The file with this identity, if it still holds the content wanted.
    pub fn by_identity(
        &self,
        id: FileId,
        wanted: &WantedFile,
    ) -> std::io::Result<Option<OpenedFile>> {
        let mut files = self.files()?;
        files.retain(|(_, meta)| FileId::of(meta) == id);
        Ok(files.into_iter().find_map(|(p, _)| open_if(&p, wanted)))
    }

    /// Where the file with this identity is now, if in the input's directory.
    pub fn path_of(&self, id: FileId) -> std::io::Result<Option<PathBuf>> {
        let files = self.files()?;
        Ok(files
            .into_iter()
            .find(|(_, meta)| FileId::of(meta) == id)
            .map(|(p, _)| p))
    }

    /// A file named like the input (its name, or its name and a suffix: `in.ndjson.1`,
    /// `in.ndjson-20250101`) and not one of `exclude` that holds the content wanted: the
    /// input itself first, then the most recently modified. Content read so far is what
    /// identifies it, so nothing is looked for while none of it is known.
    pub fn by_content(
        &self,
        wanted: &WantedFile,
        exclude: &[FileId],
    ) -> std::io::Result<Option<OpenedFile>> {
        if wanted.covered == 0 {
            return Ok(None);
        }
        let stem = display_name(self.input);
        let mut files = self.files()?;
        files.retain(|(p, meta)| {
            display_name(p).starts_with(&stem) && !exclude.contains(&FileId::of(meta))
        });
        files.sort_by_key(|(p, meta)| {
            (
                p.file_name() != self.input.file_name(),
                std::cmp::Reverse(meta.modified().ok()),
            )
        });
        Ok(files.into_iter().find_map(|(p, _)| open_if(&p, wanted)))
    }

    /// Regular files in the input's directory, but not the excluded ones.
    fn files(&self) -> std::io::Result<Vec<(PathBuf, std::fs::Metadata)>> {
        let dir = match self.input.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if (self.excluded)(&path) {
                continue;
            }
            if let Ok(meta) = std::fs::metadata(&path)
                && meta.is_file()
            {
                out.push((path, meta));
            }
        }
        Ok(out)
    }
}

fn open_if(path: &Path, wanted: &WantedFile) -> Option<OpenedFile> {
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if meta.len() < wanted.len {
        return None;
    }
    let head = read_head(&file).ok()?;
    wanted.matches(meta.len(), &head).then(|| OpenedFile {
        path: path.to_path_buf(),
        id: FileId::of(&meta),
        file,
        head,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(p: &Path) -> FileId {
        FileId::of(&std::fs::metadata(p).unwrap())
    }

    #[test]
    fn finds_a_renamed_file_by_identity_only_while_its_head_matches() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.ndjson");
        std::fs::write(&input, "a\nb\n").unwrap();
        let id = id_of(&input);
        std::fs::rename(&input, dir.path().join("in.ndjson.1")).unwrap();
        std::fs::write(&input, "c\n").unwrap();
        let d = Directory {
            input: &input,
            excluded: &|_: &Path| false,
        };
        let fp = fingerprint(b"a\n", 2);
        let found = d
            .by_identity(
                id,
                &WantedFile {
                    len: 2,
                    covered: 2,
                    fingerprint: &fp,
                },
            )
            .unwrap()
            .unwrap();
        assert_eq!(display_name(&found.path), "in.ndjson.1");
        assert_eq!(found.head, b"a\nb\n");
        let other = fingerprint(b"x\n", 2);
        let wanted = WantedFile {
            len: 2,
            covered: 2,
            fingerprint: &other,
        };
        assert!(d.by_identity(id, &wanted).unwrap().is_none());
    }

    #[test]
    fn finds_a_copy_by_content_among_files_named_like_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.ndjson");
        std::fs::write(&input, "new\n").unwrap();
        std::fs::write(dir.path().join("in.ndjson.2"), "older\n").unwrap();
        std::fs::write(dir.path().join("in.ndjson.1"), "a\nb\nc\n").unwrap();
        std::fs::write(dir.path().join("unrelated"), "a\nb\nc\n").unwrap();
        std::fs::write(dir.path().join("in.ndjson.sluice-checkpoint"), "a\nb\n").unwrap();
        let excluded = |p: &Path| p.ends_with("in.ndjson.sluice-checkpoint");
        let d = Directory {
            input: &input,
            excluded: &excluded,
        };
        let fp = fingerprint(b"a\nb\n", 4);
        let wanted = WantedFile {
            len: 4,
            covered: 4,
            fingerprint: &fp,
        };
        let found = d.by_content(&wanted, &[id_of(&input)]).unwrap().unwrap();
        assert_eq!(display_name(&found.path), "in.ndjson.1");
        // Excluded by identity: nothing else holds it (not the unrelated file, not the
        // checkpoint).
        let copy = id_of(&dir.path().join("in.ndjson.1"));
        assert!(d.by_content(&wanted, &[copy]).unwrap().is_none());
        // Longer than any candidate: none.
        let long = WantedFile {
            len: 7,
            covered: 4,
            fingerprint: &fp,
        };
        assert!(d.by_content(&long, &[]).unwrap().is_none());
        // Nothing read yet: every file would match, so none is taken.
        let empty = fingerprint(b"", 0);
        let nothing = WantedFile {
            len: 0,
            covered: 0,
            fingerprint: &empty,
        };
        assert!(d.by_content(&nothing, &[]).unwrap().is_none());
    }
}
