//! The memcached text protocol: `set`/`get`, with flags.

use std::io::{BufRead, Write};

use crate::conn::{read_block_crlf, read_crlf_line, Conn, OpError};
use crate::kv::{KvClient, Stored};

/// The flags every value is stored with; reading other flags back is a
/// mismatch (the flags are part of what memcached must preserve).
pub const FLAGS: u32 = 0xC4EC;

/// Appends `set <key> <flags> 0 <len>\r\n<value>\r\n` to `out`.
pub fn encode_set(key: &str, flags: u32, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("set {key} {flags} 0 {}\r\n", value.len()).as_bytes());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Reads the reply to a `set`: Ok on `STORED`, anything else is refused.
pub fn read_set_reply<R: BufRead>(r: &mut R) -> Result<(), OpError> {
    let line = read_crlf_line(r)?;
    if line == b"STORED" {
        Ok(())
    } else {
        Err(OpError::Protocol(format!("set answered {:?}", String::from_utf8_lossy(&line))))
    }
}

/// Reads the reply to `get <key>`: `END` alone (absent) or one `VALUE` block
/// for exactly that key followed by `END`.
pub fn read_get_reply<R: BufRead>(r: &mut R, key: &str) -> Result<Option<Stored>, OpError> {
    let line = read_crlf_line(r)?;
    if line == b"END" {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&line).into_owned();
    let bad = || OpError::Protocol(format!("get answered {text:?}"));
    let mut parts = text.split(' ');
    if parts.next() != Some("VALUE") {
        return Err(bad());
    }
    let got_key = parts.next().ok_or_else(bad)?;
    let flags: u32 = parts.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    let len: usize = parts.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    // An optional cas unique may follow (gets); nothing else.
    if parts.clone().count() > 1 {
        return Err(bad());
    }
    if got_key != key {
        return Err(OpError::Protocol(format!("get {key} answered a value for {got_key:?}")));
    }
    // memcached's item size limit is 1 MB by default, 1 GB at most.
    if len > 1 << 30 {
        return Err(bad());
    }
    let data = read_block_crlf(r, len)?;
    let end = read_crlf_line(r)?;
    if end != b"END" {
        return Err(OpError::Protocol(format!(
            "get {key}: expected END after the value, got {:?}",
            String::from_utf8_lossy(&end)
        )));
    }
    Ok(Some(Stored { data, flags: Some(flags) }))
}

/// A memcached connection.
pub struct MemcacheClient {
    conn: Conn,
    buf: Vec<u8>,
}

impl MemcacheClient {
    pub fn new(conn: Conn) -> Self {
        MemcacheClient { conn, buf: Vec::with_capacity(4096) }
    }
}

impl KvClient for MemcacheClient {
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), OpError> {
        self.buf.clear();
        encode_set(key, FLAGS, value, &mut self.buf);
        self.conn.writer.write_all(&self.buf)?;
        read_set_reply(&mut self.conn.reader)
    }

    fn get(&mut self, key: &str) -> Result<Option<Stored>, OpError> {
        self.buf.clear();
        self.buf.extend_from_slice(format!("get {key}\r\n").as_bytes());
        self.conn.writer.write_all(&self.buf)?;
        read_get_reply(&mut self.conn.reader, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_set() {
        let mut out = Vec::new();
        encode_set("k", 7, b"v\r\nw", &mut out);
        assert_eq!(out, b"set k 7 0 4\r\nv\r\nw\r\n");
    }

    #[test]
    fn parses_set_replies() {
        assert!(read_set_reply(&mut &b"STORED\r\n"[..]).is_ok());
        assert!(matches!(read_set_reply(&mut &b"NOT_STORED\r\n"[..]), Err(OpError::Protocol(_))));
        assert!(matches!(read_set_reply(&mut &b"SERVER_ERROR out of memory\r\n"[..]), Err(OpError::Protocol(_))));
        assert!(matches!(read_set_reply(&mut &b"STOR"[..]), Err(OpError::Io(_))));
    }

    #[test]
    fn parses_get_replies() {
        assert_eq!(read_get_reply(&mut &b"END\r\n"[..], "k").unwrap(), None);
        let mut r: &[u8] = b"VALUE k 50412 5\r\nab\r\nc\r\nEND\r\n+next";
        let s = read_get_reply(&mut r, "k").unwrap().unwrap();
        assert_eq!(s.data, b"ab\r\nc");
        assert_eq!(s.flags, Some(50412));
        assert_eq!(r, b"+next");
        // With a cas unique.
        let s = read_get_reply(&mut &b"VALUE k 0 1 99\r\nx\r\nEND\r\n"[..], "k").unwrap().unwrap();
        assert_eq!(s.data, b"x");
    }

    #[test]
    fn rejects_bad_get_replies() {
        let bad: &[&[u8]] = &[
            b"VALUE other 0 1\r\nx\r\nEND\r\n",
            b"VALUE k x 1\r\nx\r\nEND\r\n",
            b"VALUE k 0 1\r\nxy\r\nEND\r\n",
            b"VALUE k 0 1\r\nx\r\nVALUE\r\n",
            b"ERROR\r\n",
            b"SERVER_ERROR busy\r\n",
        ];
        for b in bad {
            let mut r = *b;
            assert!(
                matches!(read_get_reply(&mut r, "k"), Err(OpError::Protocol(_))),
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
        assert!(matches!(read_get_reply(&mut &b"VALUE k 0 10\r\nabc"[..], "k"), Err(OpError::Io(_))));
    }
}
