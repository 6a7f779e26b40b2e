//! The SYSVIPC section (image.h `struct rrc_sysvipc` and its records):
//! the IPC sysctls and the SysV semaphore sets and message queues of the
//! process's IPC namespace (runtime/lib/sysvipc.c; restore/sysvipc.c
//! makes them again). Checked whole: every record inside the payload,
//! nothing after the last.

use serde::Serialize;

use crate::le::{i32_at, u32_at, u64_at};

pub const SYSVIPC_VERSION: u32 = 1;
const HEADER_SIZE: usize = 144;
const PERM_SIZE: usize = 32;
const SEM_SIZE: usize = 40;
const MSQ_SIZE: usize = 48;
const MSG_SIZE: usize = 16;
/// `enum rrc_ipc_sysctl`: the SysV limits, by sysctl name.
pub const SYSCTL_NAMES: [&str; 10] = [
    "kernel.sem.semmsl",
    "kernel.sem.semmns",
    "kernel.sem.semopm",
    "kernel.sem.semmni",
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.shmmax",
    "kernel.shmall",
    "kernel.shmmni",
];

/// `struct rrc_sysv_perm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SysvPerm {
    pub key: i32,
    pub id: i32,
    pub uid: u32,
    pub gid: u32,
    pub cuid: u32,
    pub cgid: u32,
    pub mode: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SemSet {
    pub perm: SysvPerm,
    pub values: Vec<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SysvMsg {
    pub mtype: i64,
    pub len: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MsgQueue {
    pub perm: SysvPerm,
    pub qbytes: u64,
    pub messages: Vec<SysvMsg>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SysvIpc {
    /// The namespace's SysV limits the image sets (changed since the
    /// process started), by sysctl name.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sysctls: std::collections::BTreeMap<String, u64>,
    pub semaphore_sets: Vec<SemSet>,
    pub message_queues: Vec<MsgQueue>,
}

fn perm(b: &[u8]) -> SysvPerm {
    SysvPerm {
        key: i32_at(b, 0),
        id: i32_at(b, 4),
        uid: u32_at(b, 8),
        gid: u32_at(b, 12),
        cuid: u32_at(b, 16),
        cgid: u32_at(b, 20),
        mode: u32_at(b, 24),
    }
}

struct Cursor<'a> {
    p: &'a [u8],
    off: usize,
}

impl<'a> Cursor<'a> {
    /// The next `n` bytes (the cursor moves past them padded to 8).
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let padded = n.checked_add(7).map(|x| x & !7).ok_or_else(|| format!("{what}: size overflows"))?;
        if self.p.len() - self.off < padded {
            return Err(format!("{what} at offset {} runs past the section's end ({} bytes)", self.off, self.p.len()));
        }
        let b = &self.p[self.off..self.off + n];
        self.off += padded;
        Ok(b)
    }
}

pub fn parse_sysvipc(p: &[u8]) -> Result<SysvIpc, String> {
    let mut c = Cursor { p, off: 0 };
    let h = c.take(HEADER_SIZE, "the header")?;
    let version = u32_at(h, 0);
    if version != SYSVIPC_VERSION {
        return Err(format!("version {version}, this reader reads {SYSVIPC_VERSION}"));
    }
    let (nr_sems, nr_msqs, valid) = (u32_at(h, 4), u32_at(h, 8), u32_at(h, 12));
    if valid >> SYSCTL_NAMES.len() != 0 {
        return Err(format!("sysctls_valid {valid:#x} has bits past the {} sysctls", SYSCTL_NAMES.len()));
    }
    let sysctls = SYSCTL_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| valid & (1 << i) != 0)
        .map(|(i, n)| (n.to_string(), u64_at(h, 16 + 8 * i)))
        .collect();
    let mut semaphore_sets = Vec::new();
    for _ in 0..nr_sems {
        let s = c.take(SEM_SIZE, "a semaphore set")?;
        let nsems = u32_at(s, PERM_SIZE) as usize;
        let perm = perm(s);
        if nsems == 0 || nsems > 32000 || perm.id < 0 {
            return Err(format!("a semaphore set of id {} with {nsems} semaphores", perm.id));
        }
        let v = c.take(2 * nsems, "a semaphore set's values")?;
        let values = v.chunks_exact(2).map(|x| u16::from_le_bytes([x[0], x[1]])).collect();
        semaphore_sets.push(SemSet { perm, values });
    }
    let mut message_queues = Vec::new();
    for _ in 0..nr_msqs {
        let q = c.take(MSQ_SIZE, "a message queue")?;
        let perm = perm(q);
        if perm.id < 0 {
            return Err(format!("a message queue of id {}", perm.id));
        }
        let (qbytes, nr_msgs) = (u64_at(q, PERM_SIZE), u32_at(q, PERM_SIZE + 8));
        let mut messages = Vec::new();
        for _ in 0..nr_msgs {
            let m = c.take(MSG_SIZE, "a message")?;
            let (mtype, len) = (u64_at(m, 0) as i64, u32_at(m, 8));
            if mtype <= 0 {
                return Err(format!("a message of type {mtype} in queue id {}", perm.id));
            }
            c.take(len as usize, "a message's text")?;
            messages.push(SysvMsg { mtype, len });
        }
        message_queues.push(MsgQueue { perm, qbytes, messages });
    }
    if c.off != p.len() {
        return Err(format!("{} bytes after its last object", p.len() - c.off));
    }
    Ok(SysvIpc { sysctls, semaphore_sets, message_queues })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(nr_sems: u32, nr_msqs: u32) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_SIZE];
        h[0..4].copy_from_slice(&1u32.to_le_bytes());
        h[4..8].copy_from_slice(&nr_sems.to_le_bytes());
        h[8..12].copy_from_slice(&nr_msqs.to_le_bytes());
        h
    }

    #[test]
    fn parses_a_set_and_a_queue_and_refuses_damage() {
        let mut p = header(1, 1);
        let mut s = vec![0u8; SEM_SIZE];
        s[4..8].copy_from_slice(&7i32.to_le_bytes());
        s[32..36].copy_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&s);
        p.extend_from_slice(&[1, 0, 2, 0, 3, 0, 0, 0]); // 3 values, padded
        let mut q = vec![0u8; MSQ_SIZE];
        q[4..8].copy_from_slice(&9i32.to_le_bytes());
        q[40..44].copy_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&q);
        let mut m = vec![0u8; MSG_SIZE];
        m[0..8].copy_from_slice(&5i64.to_le_bytes());
        m[8..12].copy_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&m);
        p.extend_from_slice(b"abc\0\0\0\0\0");
        let got = parse_sysvipc(&p).unwrap();
        assert_eq!(got.semaphore_sets[0].values, vec![1, 2, 3]);
        assert_eq!(got.message_queues[0].messages, vec![SysvMsg { mtype: 5, len: 3 }]);
        assert!(parse_sysvipc(&p[..p.len() - 8]).unwrap_err().contains("past the section's end"));
        let mut extra = p.clone();
        extra.extend_from_slice(&[0; 8]);
        assert!(parse_sysvipc(&extra).unwrap_err().contains("after its last object"));
        let mut bad = p.clone();
        bad[HEADER_SIZE + SEM_SIZE + 8 + MSQ_SIZE..HEADER_SIZE + SEM_SIZE + 8 + MSQ_SIZE + 8].copy_from_slice(&0i64.to_le_bytes());
        assert!(parse_sysvipc(&bad).unwrap_err().contains("type 0"));
    }
}
