//! The container registry: one JSON file per container under
//! /run/rrc/containers/<id>.json, written atomically (temp file + rename).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::ContainerError;

pub const DEFAULT_REGISTRY_DIR: &str = "/run/rrc/containers";

/// What rrc remembers about a container it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    /// Pid of the container's pid 1, in the namespace of the rrc that started it.
    pub pid: i32,
    /// The cgroup v2 directory of the container.
    pub cgroup: PathBuf,
    pub command: Vec<String>,
    pub log: PathBuf,
    pub netns: Option<String>,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// The image directory this container was restored from, if any.
    pub restored_from: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    pub fn new(dir: impl Into<PathBuf>) -> Registry {
        Registry { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn err(&self, path: &Path, reason: impl std::fmt::Display) -> ContainerError {
        ContainerError::Registry { path: path.to_path_buf(), reason: reason.to_string() }
    }

    pub fn save(&self, r: &Record) -> Result<(), ContainerError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.err(&self.dir, format!("creating the directory: {e}")))?;
        let path = self.path_of(&r.id);
        let tmp = self.dir.join(format!(".{}.json.tmp", r.id));
        let text = serde_json::to_string_pretty(r).map_err(|e| self.err(&path, e))?;
        std::fs::write(&tmp, text + "\n").map_err(|e| self.err(&tmp, format!("writing: {e}")))?;
        std::fs::rename(&tmp, &path).map_err(|e| self.err(&path, format!("renaming {} into place: {e}", tmp.display())))
    }

    pub fn remove(&self, id: &str) -> Result<(), ContainerError> {
        let path = self.path_of(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.err(&path, format!("removing: {e}"))),
        }
    }

    pub fn load(&self, id: &str) -> Result<Record, ContainerError> {
        let path = self.path_of(id);
        let text = std::fs::read_to_string(&path).map_err(|e| self.err(&path, format!("reading: {e}")))?;
        serde_json::from_str(&text).map_err(|e| self.err(&path, format!("parsing: {e}")))
    }

    /// All records, sorted by start time. Unreadable entries are skipped
    /// with a warning (a half-written file cannot exist: writes are atomic).
    pub fn list(&self) -> Result<Vec<Record>, ContainerError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.err(&self.dir, format!("listing: {e}"))),
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| self.err(&self.dir, format!("listing: {e}")))?;
            let name = ent.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
            if id.starts_with('.') {
                continue;
            }
            match self.load(id) {
                Ok(r) => out.push(r),
                Err(e) => tracing::warn!("skipping registry entry: {e}"),
            }
        }
        out.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    pub fn find_pid(&self, pid: i32) -> Result<Option<Record>, ContainerError> {
        Ok(self.list()?.into_iter().find(|r| r.pid == pid))
    }
}

/// Current time as RFC 3339 UTC with microseconds.
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_shape() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 27, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'), "{s}");
    }

    #[test]
    fn save_list_remove() {
        let dir = std::env::temp_dir().join(format!("rrc-registry-test-{}", std::process::id()));
        let reg = Registry::new(&dir);
        let r = Record {
            id: "abc".into(),
            pid: 42,
            cgroup: "/sys/fs/cgroup/unified/rrc/abc".into(),
            command: vec!["sleep".into(), "1".into()],
            log: "/dev/null".into(),
            netns: None,
            started_at: now_rfc3339(),
            restored_from: None,
        };
        reg.save(&r).unwrap();
        assert_eq!(reg.list().unwrap(), vec![r.clone()]);
        assert_eq!(reg.find_pid(42).unwrap(), Some(r));
        reg.remove("abc").unwrap();
        reg.remove("abc").unwrap();
        assert!(reg.list().unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
