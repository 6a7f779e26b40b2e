//! The state file a run leaves behind (--state) for `rrc-check verify`: per
//! key, the last acknowledged write and a write in flight when the run ended.
//!
//! Format (version 1): one header line `rrc-check-state 1 crc32c=XXXXXXXX`
//! where XXXXXXXX is the CRC32C (hex) of the rest of the file, then a JSON
//! object (`StateFile`). Written to a temporary file and renamed, so a
//! reader sees the old or the new state, never half of one.

use std::path::Path;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::check::KeyId;

const MAGIC: &str = "rrc-check-state";
const VERSION: u32 = 1;

/// One write: its version and the exact value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub version: u64,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub thread: u32,
    pub key: u32,
    /// The last write the server acknowledged, if any.
    pub acked: Option<Write>,
    /// A write sent without a reply when the thread stopped: the server may
    /// or may not have applied it.
    pub in_flight: Option<Write>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    /// redis or memcached.
    pub kind: String,
    pub server: String,
    pub run: String,
    pub keys: Vec<KeyRecord>,
}

impl StateFile {
    pub fn key_id(&self, r: &KeyRecord) -> KeyId {
        KeyId { run: self.run.clone(), thread: r.thread, key: r.key }
    }

    pub fn encode(&self) -> anyhow::Result<Vec<u8>> {
        let body = serde_json::to_vec(self).context("encoding the state")?;
        let mut out = format!("{MAGIC} {VERSION} crc32c={:08x}\n", crc32c::crc32c(&body)).into_bytes();
        out.extend_from_slice(&body);
        out.push(b'\n');
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> anyhow::Result<StateFile> {
        let nl = bytes.iter().position(|&b| b == b'\n').context("no header line")?;
        let header = std::str::from_utf8(&bytes[..nl]).context("header is not UTF-8")?;
        let mut parts = header.split(' ');
        if parts.next() != Some(MAGIC) {
            bail!("not an rrc-check state file (header {header:?})");
        }
        let version: u32 = parts.next().and_then(|v| v.parse().ok()).context("header without version")?;
        if version != VERSION {
            bail!("state file version {version}, this rrc-check reads version {VERSION}");
        }
        let crc = parts
            .next()
            .and_then(|c| c.strip_prefix("crc32c="))
            .and_then(|c| u32::from_str_radix(c, 16).ok())
            .context("header without crc32c")?;
        let body = bytes[nl + 1..].strip_suffix(b"\n").unwrap_or(&bytes[nl + 1..]);
        let actual = crc32c::crc32c(body);
        if actual != crc {
            bail!("state file corrupt: crc32c {actual:08x}, header says {crc:08x}");
        }
        serde_json::from_slice(body).context("parsing the state JSON")
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, self.encode()?).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    }

    pub fn read(path: &Path) -> anyhow::Result<StateFile> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        StateFile::decode(&bytes).with_context(|| format!("state file {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StateFile {
        StateFile {
            kind: "redis".into(),
            server: "127.0.0.1:1".into(),
            run: "abc".into(),
            keys: vec![
                KeyRecord {
                    thread: 0,
                    key: 1,
                    acked: Some(Write { version: 3, value: "v3".into() }),
                    in_flight: Some(Write { version: 4, value: "v4".into() }),
                },
                KeyRecord { thread: 1, key: 0, acked: None, in_flight: None },
            ],
        }
    }

    #[test]
    fn roundtrip() {
        let s = sample();
        let bytes = s.encode().unwrap();
        assert!(bytes.starts_with(b"rrc-check-state 1 crc32c="));
        assert_eq!(StateFile::decode(&bytes).unwrap(), s);
        let dir = std::env::temp_dir().join(format!("rrc-check-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        s.write(&p).unwrap();
        assert_eq!(StateFile::read(&p).unwrap(), s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn detects_corruption_and_wrong_files() {
        let mut bytes = sample().encode().unwrap();
        let i = bytes.len() - 10;
        bytes[i] ^= 0x01;
        let e = StateFile::decode(&bytes).unwrap_err();
        assert!(format!("{e:#}").contains("corrupt"), "{e:#}");
        assert!(StateFile::decode(b"{}\n").is_err());
        assert!(StateFile::decode(b"rrc-check-state 2 crc32c=0\n{}").is_err());
        assert!(StateFile::decode(b"").is_err());
    }
}
