//! The values the checker writes and the rule that judges what it reads back.
//!
//! Every value names its writer (run, thread, key) and a per-key version, so a
//! value read back can be told apart as "the last acknowledged one", "an older
//! one" (a lost write: the server went back in time) or "something else" (a
//! mismatch: corruption, another writer, a value that was never acknowledged).

use std::fmt::Write as _;

/// Who wrote a value: the run, the thread and the thread's key number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyId {
    pub run: String,
    pub thread: u32,
    pub key: u32,
}

impl KeyId {
    /// The key name on the server: `rrc-check:<run-id>:<thread>:<k>`.
    pub fn name(&self) -> String {
        format!("rrc-check:{}:{}:{}", self.run, self.thread, self.key)
    }

    fn header(&self, version: u64) -> String {
        format!("rrc-check|{}|t{}|k{}|v{}|", self.run, self.thread, self.key, version)
    }

    /// The value of `version` for this key, padded to `size` bytes (never
    /// shorter than its header). The padding depends on the version so that
    /// two versions differ all along, not only in the header.
    pub fn value(&self, version: u64, size: usize) -> Vec<u8> {
        let seed = version
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(u64::from(self.key) << 32 | u64::from(self.thread));
        padded(self.header(version), seed, size)
    }

    /// The version a value claims to be of, if it is a value of this key.
    pub fn version_of(&self, value: &[u8]) -> Option<u64> {
        let prefix = format!("rrc-check|{}|t{}|k{}|v", self.run, self.thread, self.key);
        let rest = value.strip_prefix(prefix.as_bytes())?;
        let end = rest.iter().position(|&b| b == b'|')?;
        std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
    }
}

/// `header` followed by letters derived from `seed` up to `size` bytes (never
/// shorter than the header).
pub fn padded(header: String, seed: u64, size: usize) -> Vec<u8> {
    let mut v = header.into_bytes();
    let mut x = seed;
    while v.len() < size {
        // xorshift64: cheap, deterministic, printable after the mapping.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

/// What a read found, judged against what the server may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// The server holds an older version than the last acknowledged one, or
    /// nothing although a write was acknowledged.
    LostWrite(String),
    /// Anything else that is not an allowed value.
    Mismatch(String),
}

/// Judges `got` (None = the key does not exist) for key `id`, given the last
/// acknowledged write and a write that may have been applied without its
/// acknowledgement reaching us (in flight). Each is (version, bytes).
pub fn judge(id: &KeyId, acked: Option<(u64, &[u8])>, in_flight: Option<(u64, &[u8])>, got: Option<&[u8]>) -> Verdict {
    let Some(got) = got else {
        return match acked {
            None => Verdict::Ok,
            Some((v, _)) => Verdict::LostWrite(format!("key missing, last acknowledged v{v}")),
        };
    };
    if acked.is_some_and(|(_, a)| a == got) || in_flight.is_some_and(|(_, f)| f == got) {
        return Verdict::Ok;
    }
    let acked_desc = match acked {
        Some((v, _)) => format!("last acknowledged v{v}"),
        None => "no acknowledged write".to_string(),
    };
    match id.version_of(got) {
        Some(read) => match acked {
            Some((a, _)) if read < a => Verdict::LostWrite(format!("read v{read}, {acked_desc}")),
            Some((a, _)) if read == a => Verdict::Mismatch(format!("v{read} corrupted: {}", show(got))),
            _ => Verdict::Mismatch(format!("read v{read} which was never acknowledged, {acked_desc}")),
        },
        None => Verdict::Mismatch(format!("unexpected value {}, {acked_desc}", show(got))),
    }
}

/// A short printable rendering of bytes for error samples.
pub fn show(bytes: &[u8]) -> String {
    const MAX: usize = 60;
    let mut s = String::from("\"");
    for &b in bytes.iter().take(MAX) {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            s.push(b as char);
        } else {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    s.push('"');
    if bytes.len() > MAX {
        let _ = write!(s, "...({} bytes)", bytes.len());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> KeyId {
        KeyId { run: "r1".into(), thread: 3, key: 7 }
    }

    #[test]
    fn value_embeds_identity_and_is_padded() {
        let v = id().value(42, 64);
        assert_eq!(v.len(), 64);
        assert!(v.starts_with(b"rrc-check|r1|t3|k7|v42|"));
        assert_eq!(id().version_of(&v), Some(42));
        assert_eq!(id().name(), "rrc-check:r1:3:7");
        // Never truncated below the header.
        assert_eq!(id().value(1, 4), b"rrc-check|r1|t3|k7|v1|");
        // Padding differs between versions.
        let (a, b) = (id().value(1, 64), id().value(2, 64));
        let diff = a[24..].iter().zip(&b[24..]).filter(|(x, y)| x != y).count();
        assert!(diff > 20, "{diff}");
    }

    #[test]
    fn version_of_rejects_other_keys() {
        let other = KeyId { key: 8, ..id() };
        assert_eq!(id().version_of(&other.value(5, 64)), None);
        let other_run = KeyId { run: "r2".into(), ..id() };
        assert_eq!(id().version_of(&other_run.value(5, 64)), None);
        assert_eq!(id().version_of(b"hello"), None);
        assert_eq!(id().version_of(b"rrc-check|r1|t3|k7|vX|"), None);
    }

    #[test]
    fn judge_read_back() {
        let k = id();
        let v5 = k.value(5, 64);
        let v4 = k.value(4, 64);
        let v6 = k.value(6, 64);
        assert_eq!(judge(&k, None, None, None), Verdict::Ok);
        assert_eq!(judge(&k, Some((5, &v5)), None, Some(&v5)), Verdict::Ok);
        assert!(matches!(judge(&k, Some((5, &v5)), None, None), Verdict::LostWrite(_)));
        assert!(matches!(judge(&k, Some((5, &v5)), None, Some(&v4)), Verdict::LostWrite(_)));
        assert!(matches!(judge(&k, Some((5, &v5)), None, Some(&v6)), Verdict::Mismatch(_)));
        assert!(matches!(judge(&k, Some((5, &v5)), None, Some(b"junk")), Verdict::Mismatch(_)));
        assert!(matches!(judge(&k, None, None, Some(&v5)), Verdict::Mismatch(_)));
        let mut corrupt = v5.clone();
        corrupt[40] ^= 1;
        match judge(&k, Some((5, &v5)), None, Some(&corrupt)) {
            Verdict::Mismatch(m) => assert!(m.contains("corrupted"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn judge_with_write_in_flight() {
        let k = id();
        let v5 = k.value(5, 64);
        let v6 = k.value(6, 64);
        let v7 = k.value(7, 64);
        // Either the acknowledged or the in-flight value is allowed.
        assert_eq!(judge(&k, Some((5, &v5)), Some((6, &v6)), Some(&v5)), Verdict::Ok);
        assert_eq!(judge(&k, Some((5, &v5)), Some((6, &v6)), Some(&v6)), Verdict::Ok);
        assert!(matches!(judge(&k, Some((5, &v5)), Some((6, &v6)), Some(&v7)), Verdict::Mismatch(_)));
        assert!(matches!(judge(&k, Some((5, &v5)), Some((6, &v6)), None), Verdict::LostWrite(_)));
        // The first write in flight: absent or applied.
        let v1 = k.value(1, 64);
        assert_eq!(judge(&k, None, Some((1, &v1)), None), Verdict::Ok);
        assert_eq!(judge(&k, None, Some((1, &v1)), Some(&v1)), Verdict::Ok);
    }

    #[test]
    fn show_escapes_and_truncates() {
        assert_eq!(show(b"a\r\n\"b"), "\"a\\x0d\\x0a\\x22b\"");
        let long = vec![b'x'; 100];
        assert!(show(&long).ends_with("...(100 bytes)"));
    }
}
