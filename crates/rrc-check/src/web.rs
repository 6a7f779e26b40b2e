//! The HTTP load: concurrent GETs of one URL over one keep-alive
//! connection per thread, every body compared with the local file (or,
//! with byte ranges, with the part of it asked for: then no two responses
//! are alike, so a reply sent twice or out of place is seen). With
//! `close`, every GET on a connection of its own that the server closes
//! after the response (HTTP/1.0 clients, ab without -k): its time runs
//! from the connect to the end of the stream.

use std::net::SocketAddr;

use crate::check::show;
use crate::conn::Conn;
use crate::http::{HttpClient, Response, Url};
use crate::run::{report, run_threads, Live, Plan, Tally, Worker};
use crate::stats::{ErrorKind, Report};

pub struct HttpSpec {
    pub url_text: String,
    pub url: Url,
    pub addr: SocketAddr,
    /// The file's content when the run started: what every body must be.
    pub expected: Vec<u8>,
    /// Ask for a random byte range of the file each time.
    pub ranges: bool,
    /// One connection per request, closed by the server.
    pub close: bool,
}

/// Why a response is not the expected file (or its bytes `first..=last`),
/// if it is not.
pub fn compare(file: &[u8], range: Option<(usize, usize)>, r: &Response) -> Option<String> {
    let (status, expected) = match range {
        None => (200, file),
        Some((a, b)) => (206, &file[a..=b]),
    };
    if r.status != status {
        return Some(format!("status {} (body {})", r.status, show(&r.body)));
    }
    if let Some((a, b)) = range {
        let want = format!("bytes {a}-{b}/{}", file.len());
        if r.content_range.as_deref() != Some(want.as_str()) {
            return Some(format!("Content-Range {:?} for {want:?}", r.content_range));
        }
    }
    if r.body == expected {
        return None;
    }
    let at = r.body.iter().zip(expected).position(|(a, b)| a != b).unwrap_or(r.body.len().min(expected.len()));
    Some(format!(
        "body of {} bytes differs from the file ({} bytes) at byte {at}: {}",
        r.body.len(),
        expected.len(),
        show(&r.body[at.min(r.body.len())..])
    ))
}

fn random_range(spec: &HttpSpec, rng: &mut crate::kv::Rng) -> Option<(usize, usize)> {
    let len = spec.expected.len().min(u32::MAX as usize) as u32;
    (spec.ranges && len > 0).then(|| {
        let a = rng.below(len);
        (a as usize, (a + rng.below(len - a)) as usize)
    })
}

fn thread_rng(thread: u32) -> crate::kv::Rng {
    crate::kv::Rng(0x9E37_79B9_7F4A_7C15 ^ (u64::from(thread) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03) ^ std::process::id() as u64)
}

/// Keep-alive: one connection for the whole run. `close`: a connection
/// per GET, a failed connect or a reset an error like any other (a
/// failover must hide them too).
fn thread_body(spec: &HttpSpec, plan: &Plan, live: &Live, thread: u32) -> Tally {
    let mut w = Worker::new(live, plan, thread);
    let path = spec.url.path.as_str();
    let mut client = None;
    if !spec.close {
        match Conn::connect(spec.addr, plan.timeout) {
            Ok(c) => client = Some(HttpClient::new(c, &spec.url)),
            Err(e) => {
                w.error(ErrorKind::ConnectionReset, path, format!("connect to {}: {e}", spec.addr));
                return w.finish();
            }
        }
    }
    let mut rng = thread_rng(thread);
    while w.may_start() {
        let range = random_range(spec, &mut rng);
        let got = w.timed(|| match client.as_mut() {
            Some(c) => c.get(range),
            None => crate::http::get_closing(Conn::connect(spec.addr, plan.timeout)?, &spec.url, range),
        });
        let resp = match got {
            Ok(r) => r,
            Err(e) => {
                w.failed("GET", path, &e);
                break;
            }
        };
        w.tally.gets += 1;
        if let Some(d) = compare(&spec.expected, range, &resp) {
            w.error(ErrorKind::Mismatch, path, d);
        }
        if resp.closes && client.is_some() {
            // Reconnecting would hide exactly what this client exists to
            // see; a server that ends keep-alive on its own must be
            // configured not to (lighttpd: server.max-keep-alive-requests).
            let n = w.tally.gets;
            w.error(ErrorKind::Protocol, path, format!("server announced Connection: close after {n} requests"));
            break;
        }
    }
    w.finish()
}

pub fn run(spec: &HttpSpec, plan: &Plan) -> Report {
    let live = Live::new(plan.threads);
    tracing::info!(url = %spec.url_text, bytes = spec.expected.len(), "starting");
    let tallies = run_threads(plan, &live, |t| thread_body(spec, plan, &live, t));
    report("http", &spec.url_text, plan, &tallies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_bodies() {
        let ok = Response { status: 200, body: b"hello".to_vec(), closes: false, content_range: None };
        assert_eq!(compare(b"hello", None, &ok), None);
        let d = compare(b"hellO", None, &ok).unwrap();
        assert!(d.contains("at byte 4"), "{d}");
        let short = Response { status: 200, body: b"hel".to_vec(), ..ok.clone() };
        assert!(compare(b"hello", None, &short).unwrap().contains("at byte 3"));
        let missing = Response { status: 404, body: b"nf".to_vec(), ..ok.clone() };
        assert!(compare(b"hello", None, &missing).unwrap().starts_with("status 404"));
    }

    #[test]
    fn compares_ranges() {
        let part = Response { status: 206, body: b"ell".to_vec(), closes: false, content_range: Some("bytes 1-3/5".into()) };
        assert_eq!(compare(b"hello", Some((1, 3)), &part), None);
        assert!(compare(b"hello", Some((1, 2)), &part).unwrap().contains("Content-Range"));
        let whole = Response { status: 200, body: b"hello".to_vec(), closes: false, content_range: None };
        assert!(compare(b"hello", Some((1, 3)), &whole).unwrap().starts_with("status 200"));
        let other = Response { body: b"elo".to_vec(), ..part };
        assert!(compare(b"hello", Some((1, 3)), &other).unwrap().contains("at byte 2"));
    }
}
