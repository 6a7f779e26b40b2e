//! RESP2, the redis protocol, spoken directly: commands as arrays of bulk
//! strings, replies parsed from a buffered reader.

use std::io::{BufRead, Write};

use crate::conn::{read_block_crlf, read_crlf_line, Conn, OpError};
use crate::kv::{KvClient, Stored};

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    /// None is the null bulk string `$-1`.
    Bulk(Option<Vec<u8>>),
    /// None is the null array `*-1`.
    Array(Option<Vec<Reply>>),
}

/// Appends `args` as a RESP command (an array of bulk strings) to `out`.
pub fn encode_command(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// redis refuses bulk strings above 512 MB; anything larger is garbage.
const MAX_BULK: i64 = 512 * 1024 * 1024;
const MAX_DEPTH: u32 = 8;

/// Reads one complete reply.
pub fn read_reply<R: BufRead>(r: &mut R) -> Result<Reply, OpError> {
    read_reply_depth(r, 0)
}

fn read_reply_depth<R: BufRead>(r: &mut R, depth: u32) -> Result<Reply, OpError> {
    let line = read_crlf_line(r)?;
    let (&kind, rest) = line.split_first().ok_or_else(|| OpError::Protocol("empty reply line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    let number = || -> Result<i64, OpError> {
        std::str::from_utf8(rest)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| OpError::Protocol(format!("bad number in reply {:?}", String::from_utf8_lossy(&line))))
    };
    match kind {
        b'+' => Ok(Reply::Simple(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => Ok(Reply::Integer(number()?)),
        b'$' => match number()? {
            -1 => Ok(Reply::Bulk(None)),
            n if (0..=MAX_BULK).contains(&n) => Ok(Reply::Bulk(Some(read_block_crlf(r, n as usize)?))),
            n => Err(OpError::Protocol(format!("bulk length {n} out of range"))),
        },
        b'*' => match number()? {
            -1 => Ok(Reply::Array(None)),
            n if n >= 0 && depth < MAX_DEPTH && n <= 1 << 20 => {
                let items = (0..n).map(|_| read_reply_depth(r, depth + 1)).collect::<Result<_, _>>()?;
                Ok(Reply::Array(Some(items)))
            }
            n => Err(OpError::Protocol(format!("array of {n} at depth {depth} refused"))),
        },
        other => Err(OpError::Protocol(format!(
            "unknown reply type {:?} in {:?}",
            other as char,
            String::from_utf8_lossy(&line)
        ))),
    }
}

/// A redis connection.
pub struct RedisClient {
    conn: Conn,
    buf: Vec<u8>,
}

impl RedisClient {
    pub fn new(conn: Conn) -> Self {
        RedisClient { conn, buf: Vec::with_capacity(4096) }
    }

    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, OpError> {
        self.buf.clear();
        encode_command(args, &mut self.buf);
        self.conn.writer.write_all(&self.buf)?;
        read_reply(&mut self.conn.reader)
    }
}

impl KvClient for RedisClient {
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), OpError> {
        match self.call(&[b"SET", key.as_bytes(), value])? {
            Reply::Simple(s) if s == "OK" => Ok(()),
            other => Err(OpError::Protocol(format!("SET answered {other:?}"))),
        }
    }

    fn get(&mut self, key: &str) -> Result<Option<Stored>, OpError> {
        match self.call(&[b"GET", key.as_bytes()])? {
            Reply::Bulk(v) => Ok(v.map(|data| Stored { data, flags: None })),
            other => Err(OpError::Protocol(format!("GET answered {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, OpError> {
        let mut r = bytes;
        read_reply(&mut r)
    }

    #[test]
    fn encodes_commands() {
        let mut out = Vec::new();
        encode_command(&[b"SET", b"k", b"a\r\nb"], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n");
    }

    #[test]
    fn parses_reply_kinds() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Simple("OK".into()));
        assert_eq!(parse(b"-ERR no\r\n").unwrap(), Reply::Error("ERR no".into()));
        assert_eq!(parse(b":-42\r\n").unwrap(), Reply::Integer(-42));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Reply::Bulk(Some(vec![])));
        // A value containing CRLF is framed by its length, not by lines.
        assert_eq!(parse(b"$4\r\na\r\nb\r\n").unwrap(), Reply::Bulk(Some(b"a\r\nb".to_vec())));
        assert_eq!(
            parse(b"*2\r\n$1\r\nx\r\n:1\r\n").unwrap(),
            Reply::Array(Some(vec![Reply::Bulk(Some(b"x".to_vec())), Reply::Integer(1)]))
        );
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Array(None));
    }

    #[test]
    fn consecutive_replies_stay_in_sync() {
        let mut r: &[u8] = b"+OK\r\n$3\r\nabc\r\n$-1\r\n";
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Simple("OK".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(Some(b"abc".to_vec())));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(None));
        assert!(r.is_empty());
    }

    #[test]
    fn rejects_malformed() {
        assert!(matches!(parse(b"?x\r\n"), Err(OpError::Protocol(_))));
        assert!(matches!(parse(b":abc\r\n"), Err(OpError::Protocol(_))));
        assert!(matches!(parse(b"$-5\r\n"), Err(OpError::Protocol(_))));
        assert!(matches!(parse(b"$3\r\nabcX\r\n"), Err(OpError::Protocol(_))));
        assert!(matches!(parse(b"\r\n"), Err(OpError::Protocol(_))));
        // Truncated: the connection ended, which is not a protocol error.
        assert!(matches!(parse(b"$10\r\nabc"), Err(OpError::Io(_))));
        assert!(matches!(parse(b""), Err(OpError::Io(_))));
        assert!(matches!(parse(b"+OK"), Err(OpError::Io(_))));
    }
}
