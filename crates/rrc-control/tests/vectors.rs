//! The control messages of tests/vectors/ (written by mkvectors.c from
//! control.h): decode to the json values, and Rust encodes the same bytes.

use std::path::PathBuf;

use rrc_control::*;
use serde_json::Value;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> [u8; 16] {
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    id
}

fn load(name: &str) -> (Vec<u8>, Value) {
    let exp: Value = serde_json::from_str(&std::fs::read_to_string(vectors().join("vectors.json")).unwrap()).unwrap();
    let e = exp["control"][name].clone();
    let bytes = std::fs::read(vectors().join(e["file"].as_str().unwrap())).unwrap();
    (bytes, e)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

#[test]
fn every_vector_decodes_and_reencodes_identically() {
    for name in ["ping", "pong", "dump", "dump_incremental", "dump_paused", "dump_done", "error", "hold", "held", "resume", "resumed", "replay_status", "replay_state", "record", "recording"] {
        let (bytes, e) = load(name);
        let msg = decode(&bytes).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(msg.msg_type() as u64, u(&e["type"]), "{name}");
        assert_eq!(msg.encode(), bytes, "{name}: Rust encoding differs from the C vector");
        match msg {
            Message::Ping => {}
            Message::Pong(p) => {
                assert_eq!(u64::from(p.pid), u(&e["pid"]));
                assert_eq!(u64::from(p.nr_threads), u(&e["nr_threads"]));
                assert_eq!(u64::from(p.restored), u(&e["restored"]));
                assert_eq!(u64::from(p.checkpoints), u(&e["checkpoints"]));
                assert_eq!(hex(&p.last_image_id), e["last_image_id"].as_str().unwrap());
            }
            Message::Dump(d) => {
                assert_eq!(u64::from(d.flags), u(&e["flags"]));
                assert_eq!(hex(&d.image_id), e["image_id"].as_str().unwrap());
                assert_eq!(hex(&d.parent_id), e["parent_id"].as_str().unwrap());
            }
            Message::DumpPaused(p) => {
                assert_eq!(
                    [p.pause_ns, p.quiesce_ns, p.scan_ns, p.capture_ns, p.fork_ns, p.threads.into(), p.untracked_vmas.into(), p.written_pages],
                    ["pause_ns", "quiesce_ns", "scan_ns", "capture_ns", "fork_ns", "threads", "untracked_vmas", "written_pages"].map(|k| u(&e[k]))
                );
                assert_eq!(
                    [p.copy_ns, p.copied_pages, p.precopy_ns, p.precopy_pages, p.precopy_passes.into(), p.snapshot.into()],
                    ["copy_ns", "copied_pages", "precopy_ns", "precopy_pages", "precopy_passes", "snapshot"].map(|k| u(&e[k]))
                );
                assert_eq!(p.snapshot, SNAPSHOT_COPY);
            }
            Message::DumpDone(d) => assert_eq!([d.pages, d.bytes, d.write_ns], ["pages", "bytes", "write_ns"].map(|k| u(&e[k]))),
            Message::Error(r) => {
                assert_eq!(u64::from(r.code.0), u(&e["code"]));
                assert_eq!(r.code.name(), e["code_name"].as_str());
                assert_eq!(i64::from(r.sys_errno), e["sys_errno"].as_i64().unwrap());
                assert_eq!(r.message, e["message"].as_str().unwrap());
            }
            Message::Hold(h) => assert_eq!(u64::from(h.timeout_ms), u(&e["timeout_ms"])),
            Message::Held(h) => assert_eq!(
                [h.quiesce_ns, h.discarded_ops, h.discarded_bytes, h.threads.into(), h.timeout_ms.into()],
                ["quiesce_ns", "discarded_ops", "discarded_bytes", "threads", "timeout_ms"].map(|k| u(&e[k]))
            ),
            Message::Resume | Message::ReplayStatus | Message::Recording => {}
            Message::Record(r) => {
                assert_eq!((r.first_frame, r.framed), (u(&e["first_frame"]), e["framed"].as_bool().unwrap()));
                let key = r.key.expect("sealed");
                assert_eq!(u64::from(key[0]), u(&e["key_first"]));
                assert_eq!(key[31], key[0] + 31);
            }
            Message::ReplayState(r) => {
                assert_eq!(r.phase, ReplayPhase::Diverged);
                assert_eq!(u(&e["state"]), 3);
                assert_eq!(
                    [
                        r.threads.into(),
                        r.events_total,
                        r.events_done,
                        r.events_dropped,
                        r.outputs,
                        r.output_bytes,
                        r.load_ns,
                        r.replay_ns,
                        r.debts_left,
                        r.returns_ordered,
                        r.paced_ns,
                        r.connections,
                        r.conn_read_bytes,
                        r.conn_sent_bytes,
                        r.conn_faults,
                        r.conn_skipped_bytes,
                        r.conn_behind,
                        r.conn_reset
                    ],
                    [
                        "threads",
                        "events_total",
                        "events_done",
                        "events_dropped",
                        "outputs",
                        "output_bytes",
                        "load_ns",
                        "replay_ns",
                        "debts_left",
                        "returns_ordered",
                        "paced_ns",
                        "connections",
                        "conn_read_bytes",
                        "conn_sent_bytes",
                        "conn_faults",
                        "conn_skipped_bytes",
                        "conn_behind",
                        "conn_reset"
                    ]
                    .map(|k| u(&e[k]))
                );
                assert_eq!(r.report, e["report"].as_str().unwrap());
            }
            Message::Resumed(r) => assert_eq!([r.held_ns, r.threads.into()], ["held_ns", "threads"].map(|k| u(&e[k]))),
        }
    }
}

/// The requests rrc sends, built from their fields, equal the C bytes.
#[test]
fn requests_encode_like_c() {
    let (ping, _) = load("ping");
    assert_eq!(Message::Ping.encode(), ping);
    for name in ["dump", "dump_incremental"] {
        let (bytes, e) = load(name);
        let req = DumpRequest {
            flags: u(&e["flags"]) as u32,
            image_id: unhex(e["image_id"].as_str().unwrap()),
            parent_id: unhex(e["parent_id"].as_str().unwrap()),
        };
        assert_eq!(Message::Dump(req).encode(), bytes, "{name}");
    }
    assert_eq!(DUMP_F_INCREMENTAL, 1);
    // mkvectors.c asserts the C side of these (RRC_DUMP_F_COPY, RRC_SNAPSHOT_*).
    assert_eq!((DUMP_F_COPY, DUMP_F_TCP_TABLE, SNAPSHOT_FORK, SNAPSHOT_COPY), (2, 4, 0, 1));
    let (hold, e) = load("hold");
    assert_eq!(Message::Hold(HoldRequest { timeout_ms: u(&e["timeout_ms"]) as u32 }).encode(), hold);
    let (resume, _) = load("resume");
    assert_eq!(Message::Resume.encode(), resume);
}

#[test]
fn corruption_is_detected() {
    let (bytes, _) = load("error");
    for pos in 0..bytes.len() {
        let mut b = bytes.clone();
        b[pos] ^= 0x10;
        // Flips in the reserved header word are caught by the zero check.
        assert!(decode(&b).is_err(), "flip at {pos} accepted");
    }
    assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    assert!(decode(&bytes[..10]).is_err());
}
