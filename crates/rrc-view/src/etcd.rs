//! The etcd client: etcd v3's JSON gateway (grpc-gateway, `/v3/kv/...`,
//! served by every etcd 3.4 member on its client port) over ureq. Only
//! what views need: a linearizable read of one key, compare-and-swap by
//! mod_revision, delete by mod_revision, the cluster's health.
//!
//! With [`EtcdTls`] the client speaks TLS only (`https://`), checks each
//! member's certificate against the deployment's CA and shows its own
//! client certificate: a member run with `--client-cert-auth` answers no
//! one else, so that only the deployment's hosts can read or change a
//! view (the views' counterpart of the agents' shared key).
//!
//! Requests go to the endpoints in turn: the first that answers is used
//! until it fails, then the next; a request that none answers within the
//! timeout is `Unreachable` (etcd with no quorum does not answer a
//! linearizable read or a write at all: that is the same case).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::ViewError;
use crate::lease::Found;
use crate::view::View;

pub struct Etcd {
    endpoints: Vec<String>,
    agent: ureq::Agent,
    /// The endpoint that answered last.
    current: AtomicUsize,
    tls: bool,
}

/// TLS to etcd, as etcdctl's `--cacert`, `--cert`, `--key`: the CA that
/// signed the members' certificates, and this host's client certificate
/// (chain) and its private key, all PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl EtcdTls {
    fn config(&self) -> Result<ureq::tls::TlsConfig, ViewError> {
        use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig};
        let items = |path: &Path| -> Result<Vec<PemItem<'static>>, ViewError> {
            let bad = |why: String| ViewError::Config(format!("{}: {why}", path.display()));
            let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
            ureq::tls::parse_pem(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| bad(format!("not PEM: {e}")))
        };
        let certs = |path: &Path| -> Result<Vec<ureq::tls::Certificate<'static>>, ViewError> {
            let c: Vec<_> = items(path)?.into_iter().filter_map(|i| if let PemItem::Certificate(c) = i { Some(c) } else { None }).collect();
            match c.is_empty() {
                true => Err(ViewError::Config(format!("{}: holds no PEM certificate", path.display()))),
                false => Ok(c),
            }
        };
        let ca = certs(&self.ca)?;
        let chain = certs(&self.cert)?;
        let key = items(&self.key)?
            .into_iter()
            .find_map(|i| if let PemItem::PrivateKey(k) = i { Some(k) } else { None })
            .ok_or_else(|| ViewError::Config(format!("{}: holds no PEM private key", self.key.display())))?;
        Ok(TlsConfig::builder().root_certs(RootCerts::new_with_certs(&ca)).client_cert(Some(ClientCert::new_with_certs(&chain, key))).build())
    }
}

/// A key found below a prefix, and what it holds.
pub type Listed = (String, Result<Found, ViewError>);

/// The answer to a compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swap {
    /// Applied: the key is now at this mod_revision.
    Done { rev: i64 },
    /// Not applied: what the key holds.
    Refused(Found),
}

impl Etcd {
    /// `endpoints`: `http://HOST:PORT` each, or `https://` with `tls` (a
    /// bare `HOST:PORT` gets the scheme `tls` calls for). `timeout`: for
    /// one request to one endpoint.
    pub fn new(endpoints: &[String], timeout: Duration, tls: Option<&EtcdTls>) -> Result<Etcd, ViewError> {
        if endpoints.is_empty() {
            return Err(ViewError::Config("no etcd endpoint given".into()));
        }
        let scheme = if tls.is_some() { "https://" } else { "http://" };
        let mut eps = Vec::new();
        for e in endpoints {
            let e = e.trim().trim_end_matches('/');
            let e = match (e.split_once("://"), tls) {
                (None, _) => format!("{scheme}{e}"),
                (Some(("http", _)), None) | (Some(("https", _)), Some(_)) => e.to_string(),
                (Some(("https", _)), None) => {
                    return Err(ViewError::Config(format!("{e}: TLS to etcd needs the CA, a client certificate and its key (--etcd-cacert, --etcd-cert, --etcd-key)")))
                }
                (Some(("http", _)), Some(_)) => {
                    return Err(ViewError::Config(format!("{e}: plain http, but TLS to etcd was asked for: every endpoint must be https://")))
                }
                (Some((other, _)), _) => return Err(ViewError::Config(format!("{e}: unknown scheme {other:?} (http:// or https://)"))),
            };
            eps.push(e);
        }
        let mut config = ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false);
        if let Some(t) = tls {
            config = config.tls_config(t.config()?);
        }
        Ok(Etcd { endpoints: eps, agent: config.build().into(), current: AtomicUsize::new(0), tls: tls.is_some() })
    }

    /// Whether requests go over TLS with a client certificate.
    pub fn tls(&self) -> bool {
        self.tls
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// POSTs `body` to `path` at each endpoint in turn from the current one.
    fn call<B: Serialize, R: for<'de> Deserialize<'de>>(&self, path: &str, body: &B) -> Result<R, ViewError> {
        let n = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut errors = Vec::new();
        for i in 0..n {
            let at = (first + i) % n;
            let url = format!("{}{path}", self.endpoints[at]);
            match self.agent.post(&url).send_json(body) {
                Ok(mut r) if r.status().is_success() => {
                    self.current.store(at, Ordering::Relaxed);
                    return r.body_mut().read_json::<R>().map_err(|e| ViewError::BadAnswer { url, why: e.to_string() });
                }
                Ok(mut r) => {
                    let status = r.status();
                    let text = r.body_mut().read_to_string().unwrap_or_default();
                    errors.push(format!("{url}: HTTP {status}: {}", text.trim()));
                }
                Err(e) => errors.push(format!("{url}: {e}{}", self.hint(&e))),
            }
        }
        Err(ViewError::Unreachable(errors.join("; ")))
    }

    /// What an error may mean that its text does not say.
    fn hint(&self, e: &ureq::Error) -> &'static str {
        match e {
            ureq::Error::Io(io) if self.tls && matches!(io.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) => {
                // TLS 1.3: the client's certificate is checked after the
                // client's side of the handshake is done; a refusal arrives
                // as a closed connection
                " (an etcd member closes the connection so when it refuses this host's client certificate: is --etcd-cert signed by the CA the members trust?)"
            }
            _ => "",
        }
    }

    /// Linearizable read of `key`'s view.
    pub fn read_view(&self, key: &str) -> Result<Found, ViewError> {
        let r: RangeResponse = self.call("/v3/kv/range", &RangeRequest::one(B64.encode(key)))?;
        found(key, r.kvs.into_iter().next())
    }

    /// Every view below `prefix` (a linearizable range read), with its key
    /// in order; a key that holds no readable view comes with its error.
    pub fn list_views(&self, prefix: &str) -> Result<Vec<Listed>, ViewError> {
        let r: RangeResponse = self.call("/v3/kv/range", &RangeRequest { key: B64.encode(prefix), range_end: Some(B64.encode(prefix_end(prefix))) })?;
        let mut out = Vec::new();
        for kv in r.kvs {
            let key = B64.decode(kv.key.as_bytes()).ok().and_then(|k| String::from_utf8(k).ok()).unwrap_or_else(|| format!("(key not UTF-8: {})", kv.key));
            let f = found(&key, Some(kv));
            out.push((key, f));
        }
        Ok(out)
    }

    /// Puts `next` at `key` if the key's mod_revision is `rev` (0: if the
    /// key does not exist).
    pub fn swap_view(&self, key: &str, rev: i64, next: &View) -> Result<Swap, ViewError> {
        let value = serde_json::to_vec(next).map_err(|e| ViewError::Encode(e.to_string()))?;
        let k = B64.encode(key);
        let req = TxnRequest {
            compare: vec![compare_mod(&k, rev)],
            success: vec![Op::Put(PutRequest { key: k.clone(), value: B64.encode(value) })],
            failure: vec![Op::Range(RangeRequest::one(k))],
        };
        let r: TxnResponse = self.call("/v3/kv/txn", &req)?;
        if r.succeeded {
            let rev = r.header.revision.parse().map_err(|_| ViewError::BadAnswer { url: "/v3/kv/txn".into(), why: format!("revision {:?}", r.header.revision) })?;
            return Ok(Swap::Done { rev });
        }
        refused(key, r)
    }

    /// Deletes `key` if its mod_revision is `rev`.
    pub fn delete_view(&self, key: &str, rev: i64) -> Result<Swap, ViewError> {
        let k = B64.encode(key);
        let req = TxnRequest {
            compare: vec![compare_mod(&k, rev)],
            success: vec![Op::DeleteRange(RangeRequest::one(k.clone()))],
            failure: vec![Op::Range(RangeRequest::one(k))],
        };
        let r: TxnResponse = self.call("/v3/kv/txn", &req)?;
        if r.succeeded {
            return Ok(Swap::Done { rev: 0 });
        }
        refused(key, r)
    }

    /// Each endpoint's answer to a status request: (endpoint, Ok(leader
    /// id, raft term) or the error).
    pub fn health(&self) -> Vec<(String, Result<String, String>)> {
        self.endpoints
            .iter()
            .map(|e| {
                let url = format!("{e}/v3/maintenance/status");
                let r = match self.agent.post(&url).send_json(serde_json::json!({})) {
                    Ok(mut r) if r.status().is_success() => match r.body_mut().read_json::<StatusResponse>() {
                        Ok(s) => Ok(format!("leader {} term {}", s.leader, s.raft_term)),
                        Err(e) => Err(e.to_string()),
                    },
                    Ok(r) => Err(format!("HTTP {}", r.status())),
                    Err(e) => Err(e.to_string()),
                };
                (e.clone(), r)
            })
            .collect()
    }
}

/// A txn whose compare failed: what its failure branch's range found.
fn refused(key: &str, r: TxnResponse) -> Result<Swap, ViewError> {
    let kv = r.responses.into_iter().find_map(|o| o.response_range).and_then(|rr| rr.kvs.into_iter().next());
    Ok(Swap::Refused(found(key, kv)?))
}

fn compare_mod(key_b64: &str, rev: i64) -> Compare {
    Compare { key: key_b64.into(), target: "MOD", result: "EQUAL", mod_revision: rev.to_string() }
}

fn found(key: &str, kv: Option<KeyValue>) -> Result<Found, ViewError> {
    let Some(kv) = kv else { return Ok(Found::Absent) };
    let bad = |why: String| ViewError::BadRecord { key: key.into(), why };
    let value = B64.decode(kv.value.as_bytes()).map_err(|e| bad(format!("value not base64: {e}")))?;
    let view: View = serde_json::from_slice(&value).map_err(|e| bad(format!("not a view: {e}")))?;
    let rev = kv.mod_revision.parse().map_err(|_| bad(format!("mod_revision {:?}", kv.mod_revision)))?;
    Ok(Found::At { view, rev })
}

// The gateway's JSON: proto3's mapping (int64 as strings, bytes as
// base64, fields at their default value left out).

#[derive(Serialize)]
struct RangeRequest {
    key: String,
    /// Every key from `key` to this one (excluded); none: `key` alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    range_end: Option<String>,
}

impl RangeRequest {
    fn one(key: String) -> RangeRequest {
        RangeRequest { key, range_end: None }
    }
}

/// The first key after every key that starts with `prefix` (etcd's way to
/// ask for a prefix: its last byte plus one).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[derive(Serialize)]
struct PutRequest {
    key: String,
    value: String,
}

#[derive(Serialize)]
struct Compare {
    key: String,
    target: &'static str,
    result: &'static str,
    mod_revision: String,
}

#[derive(Serialize)]
enum Op {
    #[serde(rename = "request_put")]
    Put(PutRequest),
    #[serde(rename = "request_range")]
    Range(RangeRequest),
    #[serde(rename = "request_delete_range")]
    DeleteRange(RangeRequest),
}

#[derive(Serialize)]
struct TxnRequest {
    compare: Vec<Compare>,
    success: Vec<Op>,
    failure: Vec<Op>,
}

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default)]
    revision: String,
}

#[derive(Deserialize)]
struct KeyValue {
    #[serde(default)]
    key: String,
    #[serde(default)]
    mod_revision: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct RangeResponse {
    #[serde(default)]
    kvs: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct OpResponse {
    #[serde(default)]
    response_range: Option<RangeResponse>,
}

#[derive(Deserialize)]
struct TxnResponse {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    succeeded: bool,
    #[serde(default)]
    responses: Vec<OpResponse>,
}

#[derive(Deserialize)]
struct StatusResponse {
    #[serde(default)]
    leader: String,
    #[serde(default, rename = "raftTerm", alias = "raft_term")]
    raft_term: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_a_scheme_and_tls_is_all_or_nothing() {
        let ms = Duration::from_millis(100);
        let e = Etcd::new(&["198.19.0.1:2379".into(), "http://198.19.0.2:2379/".into()], ms, None).unwrap();
        assert_eq!(e.endpoints(), &["http://198.19.0.1:2379".to_string(), "http://198.19.0.2:2379".to_string()]);
        assert!(!e.tls());
        assert!(matches!(Etcd::new(&["https://x:2379".into()], ms, None), Err(ViewError::Config(m)) if m.contains("--etcd-cacert")));
        assert!(matches!(Etcd::new(&["ftp://x:2379".into()], ms, None), Err(ViewError::Config(m)) if m.contains("unknown scheme")));
        assert!(Etcd::new(&[], ms, None).is_err());
        let tls = EtcdTls { ca: "/nonexistent/ca.crt".into(), cert: "/nonexistent/c.crt".into(), key: "/nonexistent/c.key".into() };
        assert!(matches!(Etcd::new(&["http://x:2379".into()], ms, Some(&tls)), Err(ViewError::Config(m)) if m.contains("plain http")));
        // the files are read at once: a missing one is named
        assert!(matches!(Etcd::new(&["x:2379".into()], ms, Some(&tls)), Err(ViewError::Config(m)) if m.contains("/nonexistent/ca.crt")));
    }

    #[test]
    fn a_txn_is_written_as_the_gateway_reads_it() {
        let k = B64.encode("/k");
        let req = TxnRequest {
            compare: vec![compare_mod(&k, 0)],
            success: vec![Op::Put(PutRequest { key: k.clone(), value: B64.encode("v") })],
            failure: vec![Op::Range(RangeRequest::one(k))],
        };
        let j = serde_json::to_value(&req).unwrap();
        assert_eq!(j["compare"][0]["target"], "MOD");
        assert_eq!(j["compare"][0]["mod_revision"], "0");
        assert_eq!(j["success"][0]["request_put"]["value"], "dg==");
        assert_eq!(j["failure"][0]["request_range"]["key"], "L2s=");
    }

    #[test]
    fn a_prefix_ends_at_its_last_byte_plus_one() {
        assert_eq!(prefix_end("/rrc/v1/services/"), b"/rrc/v1/services0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        let j = serde_json::to_value(RangeRequest::one("x".into())).unwrap();
        assert!(j.get("range_end").is_none(), "one key: no range_end");
    }

    #[test]
    fn answers_with_fields_left_out_are_read() {
        // a refused txn: "succeeded" false is left out by proto3's JSON
        let r: TxnResponse = serde_json::from_str(r#"{"header":{"revision":"5"},"responses":[{"response_range":{"header":{}}}]}"#).unwrap();
        assert!(!r.succeeded);
        assert!(r.responses[0].response_range.as_ref().unwrap().kvs.is_empty());
        let v = View::first("a", "b", &[], Duration::from_millis(1000));
        let kv = KeyValue { key: B64.encode("/k"), mod_revision: "12".into(), value: B64.encode(serde_json::to_vec(&v).unwrap()) };
        assert_eq!(found("/k", Some(kv)).unwrap(), Found::At { view: v, rev: 12 });
        assert_eq!(found("/k", None).unwrap(), Found::Absent);
        let bad = KeyValue { key: B64.encode("/k"), mod_revision: "1".into(), value: B64.encode("not json") };
        assert!(matches!(found("/k", Some(bad)), Err(ViewError::BadRecord { .. })));
    }
}
