//! The etcd client: etcd v3's JSON gateway (grpc-gateway, `/v3/kv/...`,
//! served by every etcd 3.4 member on its client port) over ureq. Only
//! what views need: a linearizable read of one key, compare-and-swap by
//! mod_revision, delete by mod_revision, the cluster's health.
//!
//! Requests go to the endpoints in turn: the first that answers is used
//! until it fails, then the next; a request that none answers within the
//! timeout is `Unreachable` (etcd with no quorum does not answer a
//! linearizable read or a write at all: that is the same case).

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
}

/// The answer to a compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swap {
    /// Applied: the key is now at this mod_revision.
    Done { rev: i64 },
    /// Not applied: what the key holds.
    Refused(Found),
}

impl Etcd {
    /// `endpoints`: `http://HOST:PORT` each (a bare `HOST:PORT` gets
    /// `http://`). `timeout`: for one request to one endpoint.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Etcd, ViewError> {
        if endpoints.is_empty() {
            return Err(ViewError::Config("no etcd endpoint given".into()));
        }
        let mut eps = Vec::new();
        for e in endpoints {
            let e = e.trim().trim_end_matches('/');
            if e.starts_with("https://") {
                return Err(ViewError::Config(format!("{e}: TLS to etcd is not supported yet (use http:// on a private network)")));
            }
            let e = if e.starts_with("http://") { e.to_string() } else { format!("http://{e}") };
            eps.push(e);
        }
        let config = ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build();
        Ok(Etcd { endpoints: eps, agent: config.into(), current: AtomicUsize::new(0) })
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
                Err(e) => errors.push(format!("{url}: {e}")),
            }
        }
        Err(ViewError::Unreachable(errors.join("; ")))
    }

    /// Linearizable read of `key`'s view.
    pub fn read_view(&self, key: &str) -> Result<Found, ViewError> {
        let r: RangeResponse = self.call("/v3/kv/range", &RangeRequest { key: B64.encode(key) })?;
        found(key, r.kvs.into_iter().next())
    }

    /// Puts `next` at `key` if the key's mod_revision is `rev` (0: if the
    /// key does not exist).
    pub fn swap_view(&self, key: &str, rev: i64, next: &View) -> Result<Swap, ViewError> {
        let value = serde_json::to_vec(next).map_err(|e| ViewError::Encode(e.to_string()))?;
        let k = B64.encode(key);
        let req = TxnRequest {
            compare: vec![compare_mod(&k, rev)],
            success: vec![Op::Put(PutRequest { key: k.clone(), value: B64.encode(value) })],
            failure: vec![Op::Range(RangeRequest { key: k })],
        };
        let r: TxnResponse = self.call("/v3/kv/txn", &req)?;
        if r.succeeded {
            let rev = r.header.revision.parse().map_err(|_| ViewError::BadAnswer { url: "/v3/kv/txn".into(), why: format!("revision {:?}", r.header.revision) })?;
            return Ok(Swap::Done { rev });
        }
        let kv = r.responses.into_iter().find_map(|o| o.response_range).and_then(|rr| rr.kvs.into_iter().next());
        Ok(Swap::Refused(found(key, kv)?))
    }

    /// Deletes `key` if its mod_revision is `rev`.
    pub fn delete_view(&self, key: &str, rev: i64) -> Result<Swap, ViewError> {
        let k = B64.encode(key);
        let req = TxnRequest {
            compare: vec![compare_mod(&k, rev)],
            success: vec![Op::DeleteRange(RangeRequest { key: k.clone() })],
            failure: vec![Op::Range(RangeRequest { key: k })],
        };
        let r: TxnResponse = self.call("/v3/kv/txn", &req)?;
        if r.succeeded {
            return Ok(Swap::Done { rev: 0 });
        }
        let kv = r.responses.into_iter().find_map(|o| o.response_range).and_then(|rr| rr.kvs.into_iter().next());
        Ok(Swap::Refused(found(key, kv)?))
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
    fn endpoints_get_a_scheme_and_tls_is_refused_by_name() {
        let e = Etcd::new(&["198.19.0.1:2379".into(), "http://198.19.0.2:2379/".into()], Duration::from_millis(100)).unwrap();
        assert_eq!(e.endpoints(), &["http://198.19.0.1:2379".to_string(), "http://198.19.0.2:2379".to_string()]);
        assert!(matches!(Etcd::new(&["https://x:2379".into()], Duration::from_millis(1)), Err(ViewError::Config(m)) if m.contains("TLS")));
        assert!(Etcd::new(&[], Duration::from_millis(1)).is_err());
    }

    #[test]
    fn a_txn_is_written_as_the_gateway_reads_it() {
        let k = B64.encode("/k");
        let req = TxnRequest {
            compare: vec![compare_mod(&k, 0)],
            success: vec![Op::Put(PutRequest { key: k.clone(), value: B64.encode("v") })],
            failure: vec![Op::Range(RangeRequest { key: k })],
        };
        let j = serde_json::to_value(&req).unwrap();
        assert_eq!(j["compare"][0]["target"], "MOD");
        assert_eq!(j["compare"][0]["mod_revision"], "0");
        assert_eq!(j["success"][0]["request_put"]["value"], "dg==");
        assert_eq!(j["failure"][0]["request_range"]["key"], "L2s=");
    }

    #[test]
    fn answers_with_fields_left_out_are_read() {
        // a refused txn: "succeeded" false is left out by proto3's JSON
        let r: TxnResponse = serde_json::from_str(r#"{"header":{"revision":"5"},"responses":[{"response_range":{"header":{}}}]}"#).unwrap();
        assert!(!r.succeeded);
        assert!(r.responses[0].response_range.as_ref().unwrap().kvs.is_empty());
        let v = View::first("a", "b", &[], Duration::from_millis(1000));
        let kv = KeyValue { mod_revision: "12".into(), value: B64.encode(serde_json::to_vec(&v).unwrap()) };
        assert_eq!(found("/k", Some(kv)).unwrap(), Found::At { view: v, rev: 12 });
        assert_eq!(found("/k", None).unwrap(), Found::Absent);
        let bad = KeyValue { mod_revision: "1".into(), value: B64.encode("not json") };
        assert!(matches!(found("/k", Some(bad)), Err(ViewError::BadRecord { .. })));
    }
}
