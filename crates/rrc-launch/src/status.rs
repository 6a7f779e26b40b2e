//! `struct rrc_restore_status` (runtime/include/rrc/restore-status.h),
//! the one record rrc-restore writes on its status fd. Mirrors the header
//! byte for byte; the C side writes tests/vectors/restore-status.bin.

use std::fmt;

pub const MAGIC: u32 = 0x5343_5252; // "RRCS"
pub const SIZE: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreStatus {
    pub code: i32,
    pub sys_errno: i32,
    pub detail: u32,
    pub message: String,
}

pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "USAGE",
        2 => "IMAGE",
        3 => "FD",
        4 => "MEMORY",
        5 => "VDSO",
        6 => "PROCESS",
        7 => "THREAD",
        8 => "INTERNAL",
        _ => "UNKNOWN",
    }
}

pub fn parse(b: &[u8; SIZE]) -> Result<RestoreStatus, String> {
    let word = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let magic = word(0);
    if magic != MAGIC {
        return Err(format!("status record has bad magic {magic:#010x} (expected {MAGIC:#010x})"));
    }
    let msg = &b[16..];
    let end = msg.iter().position(|&c| c == 0).unwrap_or(msg.len());
    Ok(RestoreStatus {
        code: word(4) as i32,
        sys_errno: word(8) as i32,
        detail: word(12),
        message: String::from_utf8_lossy(&msg[..end]).into_owned(),
    })
}

impl fmt::Display for RestoreStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {} {}", self.message, self.code, code_name(self.code))?;
        if self.sys_errno != 0 {
            write!(f, ", {}", std::io::Error::from_raw_os_error(self.sys_errno))?;
        }
        if self.detail != 0 {
            write!(f, ", detail {}", self.detail)?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_record() {
        let mut b = [0u8; SIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&3i32.to_le_bytes());
        b[8..12].copy_from_slice(&9i32.to_le_bytes());
        b[12..16].copy_from_slice(&7u32.to_le_bytes());
        b[16..16 + 11].copy_from_slice(b"fd 7: boom!");
        let s = parse(&b).unwrap();
        assert_eq!((s.code, s.sys_errno, s.detail, s.message.as_str()), (3, 9, 7, "fd 7: boom!"));
        assert!(s.to_string().starts_with("fd 7: boom! (code 3 FD, Bad file descriptor (os error 9), detail 7"), "{s}");
        b[0] ^= 1;
        assert!(parse(&b).is_err());
    }

    /// tests/vectors/restore-status.bin is written by mkvectors.c from
    /// restore-status.h.
    #[test]
    fn parses_the_c_vector() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors");
        let exp: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("vectors.json")).unwrap()).unwrap();
        let e = &exp["restore_status"];
        let bytes = std::fs::read(dir.join(e["file"].as_str().unwrap())).unwrap();
        let b: [u8; SIZE] = bytes.as_slice().try_into().expect("record is 256 bytes");
        let s = parse(&b).unwrap();
        assert_eq!(i64::from(s.code), e["code"].as_i64().unwrap());
        assert_eq!(code_name(s.code), "FD");
        assert_eq!(i64::from(s.sys_errno), e["sys_errno"].as_i64().unwrap());
        assert_eq!(u64::from(s.detail), e["detail"].as_u64().unwrap());
        assert_eq!(s.message, e["message"].as_str().unwrap());
    }
}
