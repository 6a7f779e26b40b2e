//! A minimal HTTP/1.1 GET client over one keep-alive connection, framed by
//! Content-Length. It never reconnects: when the server closes (or says it
//! will), the thread's run ends with an error. Or ([`get_closing`]) one
//! connection per request, which the server closes after its response.

use std::io::{BufRead, Write};

use anyhow::{bail, Context};

use crate::conn::{read_crlf_line, Conn, OpError};

/// `http://HOST[:PORT]/PATH` split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// HOST:PORT, to connect to and for the Host header.
    pub authority: String,
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> anyhow::Result<Url> {
        let rest = url.strip_prefix("http://").with_context(|| format!("{url:?}: only http:// URLs are supported"))?;
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if host.is_empty() {
            bail!("{url:?}: no host");
        }
        let authority = if host.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
            host.to_string()
        } else {
            format!("{host}:80")
        };
        Ok(Url { authority, path: path.to_string() })
    }
}

/// The request for `url`, or for the bytes `first..=last` of it:
/// keep-alive is HTTP/1.1's default, so no Connection header unless the
/// server is to `close` the connection after its response.
pub fn encode_get(url: &Url, range: Option<(usize, usize)>, close: bool) -> Vec<u8> {
    let range = range.map_or(String::new(), |(a, b)| format!("Range: bytes={a}-{b}\r\n"));
    let close = if close { "Connection: close\r\n" } else { "" };
    format!("GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rrc-check\r\n{range}{close}\r\n", url.path, url.authority).into_bytes()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    /// The server will close the connection after this response.
    pub closes: bool,
    /// A partial response's Content-Range value.
    pub content_range: Option<String>,
}

/// Reads one response to a GET. Only Content-Length framing is accepted.
pub fn read_response<R: BufRead>(r: &mut R) -> Result<Response, OpError> {
    let status_line = read_crlf_line(r)?;
    let status_text = String::from_utf8_lossy(&status_line).into_owned();
    let mut parts = status_text.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|_| version.starts_with("HTTP/1."))
        .ok_or_else(|| OpError::Protocol(format!("bad status line {status_text:?}")))?;
    // HTTP/1.0 closes unless asked to keep alive.
    let mut closes = version == "HTTP/1.0";
    let mut content_length: Option<usize> = None;
    let mut content_range = None;
    for _ in 0..200 {
        let line = read_crlf_line(r)?;
        if line.is_empty() {
            let Some(len) = content_length else {
                if status == 204 || status == 304 {
                    return Ok(Response { status, body: Vec::new(), closes, content_range });
                }
                return Err(OpError::Protocol(format!("response {status} without Content-Length")));
            };
            let mut body = vec![0; len];
            std::io::Read::read_exact(r, &mut body)?;
            return Ok(Response { status, body, closes, content_range });
        }
        let text = String::from_utf8_lossy(&line);
        let (name, value) =
            text.split_once(':').ok_or_else(|| OpError::Protocol(format!("bad header line {text:?}")))?;
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                let len = value
                    .parse::<usize>()
                    .ok()
                    .filter(|&l| l <= 1 << 30)
                    .ok_or_else(|| OpError::Protocol(format!("bad Content-Length {value:?}")))?;
                if content_length.is_some_and(|l| l != len) {
                    return Err(OpError::Protocol("conflicting Content-Length headers".into()));
                }
                content_length = Some(len);
            }
            "content-range" => content_range = Some(value.to_string()),
            "transfer-encoding" => {
                return Err(OpError::Protocol(format!("Transfer-Encoding {value:?} not supported")));
            }
            "connection" => {
                let v = value.to_ascii_lowercase();
                if v.split(',').any(|t| t.trim() == "close") {
                    closes = true;
                } else if v.split(',').any(|t| t.trim() == "keep-alive") {
                    closes = false;
                }
            }
            _ => {}
        }
    }
    Err(OpError::Protocol("more than 200 header lines".into()))
}

/// One keep-alive connection fetching one URL.
pub struct HttpClient {
    conn: Conn,
    url: Url,
    request: Vec<u8>,
}

impl HttpClient {
    pub fn new(conn: Conn, url: &Url) -> Self {
        HttpClient { conn, url: url.clone(), request: encode_get(url, None, false) }
    }

    /// The whole file, or the bytes `first..=last` of it.
    pub fn get(&mut self, range: Option<(usize, usize)>) -> Result<Response, OpError> {
        match range {
            None => self.conn.writer.write_all(&self.request)?,
            Some(_) => self.conn.writer.write_all(&encode_get(&self.url, range, false))?,
        }
        read_response(&mut self.conn.reader)
    }
}

/// One request on a connection of its own, which the server closes after
/// the response: the response, then the end of the stream (the server's
/// FIN), and nothing between them.
pub fn get_closing(conn: Conn, url: &Url, range: Option<(usize, usize)>) -> Result<Response, OpError> {
    let Conn { mut reader, mut writer } = conn;
    writer.write_all(&encode_get(url, range, true))?;
    let r = read_response(&mut reader)?;
    if !r.closes {
        return Err(OpError::Protocol("the response to a Connection: close request does not announce the close".into()));
    }
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut rest)?;
    if !rest.is_empty() {
        return Err(OpError::Protocol(format!("{} bytes after the response, before the end of the stream", rest.len())));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = Url::parse("http://127.0.0.1:8080/a/b.html").unwrap();
        assert_eq!(u, Url { authority: "127.0.0.1:8080".into(), path: "/a/b.html".into() });
        let u = Url::parse("http://example").unwrap();
        assert_eq!(u, Url { authority: "example:80".into(), path: "/".into() });
        assert!(Url::parse("https://x/").is_err());
        assert!(Url::parse("http:///x").is_err());
        assert_eq!(
            String::from_utf8(encode_get(&Url::parse("http://h:1/p").unwrap(), None, false)).unwrap(),
            "GET /p HTTP/1.1\r\nHost: h:1\r\nUser-Agent: rrc-check\r\n\r\n"
        );
        assert_eq!(
            String::from_utf8(encode_get(&Url::parse("http://h:1/p").unwrap(), Some((3, 9)), true)).unwrap(),
            "GET /p HTTP/1.1\r\nHost: h:1\r\nUser-Agent: rrc-check\r\nRange: bytes=3-9\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn parses_responses_in_sequence() {
        let mut r: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\ncontent-length: 5\r\n\r\nhello\
HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n\
HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 1-2/5\r\nContent-Length: 2\r\n\r\nel";
        let a = read_response(&mut r).unwrap();
        assert_eq!(a, Response { status: 200, body: b"hello".to_vec(), closes: false, content_range: None });
        let b = read_response(&mut r).unwrap();
        assert_eq!(b, Response { status: 404, body: vec![], closes: true, content_range: None });
        let c = read_response(&mut r).unwrap();
        assert_eq!(c, Response { status: 206, body: b"el".to_vec(), closes: false, content_range: Some("bytes 1-2/5".into()) });
        assert!(r.is_empty());
    }

    #[test]
    fn http10_closes_unless_keep_alive() {
        let a = read_response(&mut &b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx"[..]).unwrap();
        assert!(a.closes);
        let b = read_response(&mut &b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx"[..])
            .unwrap();
        assert!(!b.closes);
    }

    #[test]
    fn rejects_what_it_cannot_frame() {
        let bad: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\nhello",
            b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
            b"SPDY 200 OK\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
            b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n",
        ];
        for b in bad {
            let mut r = *b;
            assert!(matches!(read_response(&mut r), Err(OpError::Protocol(_))), "{:?}", String::from_utf8_lossy(b));
        }
        // A body cut short is the connection ending, not a protocol error.
        assert!(matches!(
            read_response(&mut &b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc"[..]),
            Err(OpError::Io(_))
        ));
    }
}
