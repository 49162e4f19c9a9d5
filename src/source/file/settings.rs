//! `[source]` with `kind = "file"`: an NDJSON file (or stdin), and where the acknowledged
//! position is kept.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::{HumanDuration, Problems};
use crate::source::settings::default_max_record_bytes;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FileSettings {
    /// NDJSON path, or "-" for stdin.
    pub path: Option<PathBuf>,
    /// Where acknowledged progress is kept; default `<path>.sluice-checkpoint`.
    pub checkpoint: Option<PathBuf>,
    /// Following: how long a rotated-away file must stay unchanged, once read to its end,
    /// before it counts as finished (the new file at `path` is read meanwhile).
    #[schemars(with = "HumanDuration")]
    #[serde(default = "default_rotate_wait", with = "humantime_serde")]
    pub rotate_wait: Duration,
    /// A longer record is dead-lettered instead of being held in memory.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
}

impl Default for FileSettings {
    fn default() -> Self {
        FileSettings {
            path: None,
            checkpoint: None,
            rotate_wait: default_rotate_wait(),
            max_record_bytes: default_max_record_bytes(),
        }
    }
}

fn default_rotate_wait() -> Duration {
    Duration::from_secs(5)
}

impl FileSettings {
    pub(crate) fn validate(&self, p: &mut Problems) {
        match &self.path {
            None => p.add("source.path", "required for kind = \"file\""),
            Some(path) if path.as_os_str() == "-" => {}
            Some(path) => {
                if let Some(why) = crate::settings::unreadable_file(path) {
                    p.add(
                        "source.path",
                        format!("input file {} {why}", path.display()),
                    );
                }
            }
        }
        p.at_most_a_year("source.rotate_wait", self.rotate_wait);
    }

    /// Where the acknowledged offset is kept; stdin keeps none.
    pub fn checkpoint_path(&self) -> Option<PathBuf> {
        let path = self.path.as_ref()?;
        if path.as_os_str() == "-" {
            return None;
        }
        Some(self.checkpoint.clone().unwrap_or_else(|| {
            let mut name = path.as_os_str().to_owned();
            name.push(".sluice-checkpoint");
            PathBuf::from(name)
        }))
    }
}
