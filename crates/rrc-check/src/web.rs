//! The HTTP load: concurrent GETs of one URL over one keep-alive
//! connection per thread, every body compared with the local file.

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
}

/// Why a response is not the expected file, if it is not.
pub fn compare(expected: &[u8], r: &Response) -> Option<String> {
    if r.status != 200 {
        return Some(format!("status {} (body {})", r.status, show(&r.body)));
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

fn thread_body(spec: &HttpSpec, plan: &Plan, live: &Live, thread: u32) -> Tally {
    let mut w = Worker::new(live, plan, thread);
    let path = spec.url.path.as_str();
    let mut client = match Conn::connect(spec.addr, plan.timeout) {
        Ok(c) => HttpClient::new(c, &spec.url),
        Err(e) => {
            w.error(ErrorKind::ConnectionReset, path, format!("connect to {}: {e}", spec.addr));
            return w.finish();
        }
    };
    while w.may_start() {
        let resp = match w.timed(|| client.get()) {
            Ok(r) => r,
            Err(e) => {
                w.failed("GET", path, &e);
                break;
            }
        };
        w.tally.gets += 1;
        if let Some(d) = compare(&spec.expected, &resp) {
            w.error(ErrorKind::Mismatch, path, d);
        }
        if resp.closes {
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
        let ok = Response { status: 200, body: b"hello".to_vec(), closes: false };
        assert_eq!(compare(b"hello", &ok), None);
        let d = compare(b"hellO", &ok).unwrap();
        assert!(d.contains("at byte 4"), "{d}");
        let short = Response { status: 200, body: b"hel".to_vec(), closes: false };
        assert!(compare(b"hello", &short).unwrap().contains("at byte 3"));
        let missing = Response { status: 404, body: b"nf".to_vec(), closes: false };
        assert!(compare(b"hello", &missing).unwrap().starts_with("status 404"));
    }
}
