//! One long-lived TCP connection per thread, and the errors an operation on
//! it can end with. There is deliberately no reconnect anywhere: a failover
//! that is not transparent must show up as `connection_reset`.

use std::io::{self, BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, Context};

/// Why an operation failed, before it is classified into an error kind.
#[derive(Debug)]
pub enum OpError {
    /// The socket failed: reset, EOF, or the per-reply timeout.
    Io(io::Error),
    /// The server answered something this client does not understand or
    /// accept (an error reply, a malformed frame).
    Protocol(String),
}

impl From<io::Error> for OpError {
    fn from(e: io::Error) -> Self {
        OpError::Io(e)
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Io(e) => write!(f, "{e}"),
            OpError::Protocol(m) => write!(f, "{m}"),
        }
    }
}

/// Whether an I/O error means the reply did not come in time (as opposed to
/// the connection being gone).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Resolves `IP:PORT` (a host name works too) to one address.
pub fn resolve(server: &str) -> anyhow::Result<SocketAddr> {
    server
        .to_socket_addrs()
        .with_context(|| format!("resolving {server:?} (expected IP:PORT)"))?
        .next()
        .ok_or_else(|| anyhow!("{server:?} resolves to no address"))
}

/// A connected socket: a buffered reader and the stream to write requests to.
pub struct Conn {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Conn {
    /// Connects with `timeout` as connect timeout and as the read and write
    /// timeout of every later call (the per-reply timeout).
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        // Requests are written whole; no point waiting for more to coalesce.
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let writer = stream.try_clone()?;
        Ok(Conn { reader: BufReader::with_capacity(64 * 1024, stream), writer })
    }
}

/// Reads one line ending in CRLF (returned without it). EOF before a full
/// line is `UnexpectedEof`; a line longer than 64 KiB is a protocol error.
pub fn read_crlf_line<R: BufRead>(r: &mut R) -> Result<Vec<u8>, OpError> {
    const MAX_LINE: u64 = 64 * 1024;
    let mut line = Vec::new();
    let n = r.by_ref().take(MAX_LINE).read_until(b'\n', &mut line)?;
    if n == 0 || line.last() != Some(&b'\n') {
        if n as u64 >= MAX_LINE {
            return Err(OpError::Protocol(format!("line longer than {MAX_LINE} bytes")));
        }
        return Err(OpError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by the server")));
    }
    line.pop();
    if line.pop() != Some(b'\r') {
        return Err(OpError::Protocol("line ends in LF without CR".into()));
    }
    Ok(line)
}

/// Reads exactly `len` bytes followed by CRLF.
pub fn read_block_crlf<R: BufRead>(r: &mut R, len: usize) -> Result<Vec<u8>, OpError> {
    let mut data = Vec::new();
    // take+read_to_end grows the buffer as bytes arrive, so a bogus huge
    // length from a broken server does not allocate up front.
    let got = r.by_ref().take(len as u64 + 2).read_to_end(&mut data)?;
    if got < len + 2 {
        return Err(OpError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed inside a value")));
    }
    if data.split_off(len) != b"\r\n" {
        return Err(OpError::Protocol("value not followed by CRLF".into()));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_blocks() {
        let mut r: &[u8] = b"+OK\r\nabc\r\nrest";
        assert_eq!(read_crlf_line(&mut r).unwrap(), b"+OK");
        assert_eq!(read_block_crlf(&mut r, 3).unwrap(), b"abc");
        match read_crlf_line(&mut r) {
            Err(OpError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("{other:?}"),
        }
        let mut r: &[u8] = b"x\n";
        assert!(matches!(read_crlf_line(&mut r), Err(OpError::Protocol(_))));
        let mut r: &[u8] = b"abcde";
        assert!(matches!(read_block_crlf(&mut r, 3), Err(OpError::Protocol(_))));
        let mut r: &[u8] = b"ab";
        assert!(matches!(read_block_crlf(&mut r, 3), Err(OpError::Io(_))));
    }
}
