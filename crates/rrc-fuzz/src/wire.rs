//! The agents' own network decoders (crates/rrc-wire): frames, the peer
//! handshake and the session that follows it, heartbeat datagrams, and
//! the JSON payloads as the agents read them.

use std::io::{Cursor, Read, Write};

use rrc_wire::auth::{client_handshake_with, server_handshake_with, Hello, Key, PeerAuth, SeenNonces};
use rrc_wire::datagram::{HeartbeatOpener, HeartbeatSealer};
use rrc_wire::frame::{read_raw, HEADER_SIZE};
use rrc_wire::reply::{AgentStatus, Exported};
use rrc_wire::msg::{Ack, CheckpointBegin, CheckpointEnd, Heartbeat, Replicate, ReplicateReady, Request, Response, ServiceSpec, Stop};
use rrc_wire::session::FrameOpener;
use rrc_wire::{read_frame, Frame, FrameKind, FrameReader, MAX_PAYLOAD};

use crate::Bytes;

/// Frames back to back, read as the CLI socket and a handshake read them.
pub fn frame(data: &[u8]) {
    let mut b = Bytes::new(data);
    let limit = if b.u8() & 1 == 0 { MAX_PAYLOAD } else { rrc_wire::auth::HANDSHAKE_LIMIT };
    let rest = b.rest();
    let mut r = Cursor::new(rest);
    while let Ok(raw) = read_raw(&mut r, limit) {
        assert!(raw.payload.len() <= limit as usize);
        assert_eq!(raw.mac.is_some(), raw.decoded.has_mac());
        let f = match FrameOpener::plain().open(raw) {
            Ok(f) => f,
            Err(_) => continue,
        };
        // What was read encodes back to the bytes it came from.
        let again = f.encode();
        assert_eq!(read_frame(&mut &again[..]).expect("an encoded frame reads back"), f);
        payloads(&f);
    }
    let _ = read_frame(&mut &rest[..]);
    assert!(r.position() as usize <= rest.len() + HEADER_SIZE);
}

/// A peer's bytes against this side's handshake (server or client, keyed
/// or not; fixed nonces so that a run is repeatable), then, if a session
/// opens (an unauthenticated one can), its frames as an agent reads them.
pub fn session(data: &[u8]) {
    let mut b = Bytes::new(data);
    let sel = b.u8();
    let auth = if sel & 1 == 0 { PeerAuth::Key(Key::from_bytes([0x5a; 32])) } else { PeerAuth::Unauthenticated };
    let mut peer = Peer { input: Cursor::new(b.rest()), output: Vec::new() };
    let seen = SeenNonces::new(4);
    let r = if sel & 2 == 0 {
        server_handshake_with(&mut peer, &auth, "b", Some(&seen), [0x22; 32])
    } else {
        client_handshake_with(&mut peer, &auth, "a", Some("b"), [0x11; 32])
    };
    let s = match r {
        Ok(s) => s,
        Err(e) => {
            // Every refusal is named and counted, or is a plain end.
            let _ = e.to_string();
            let _ = e.rejection();
            return;
        }
    };
    assert!(!s.authenticated() || matches!(auth, PeerAuth::Key(_)));
    let (_, opener) = s.frame_keys();
    let mut reader = FrameReader::new(peer.input, opener);
    while let Ok(f) = reader.recv() {
        payloads(&f);
    }
}

/// A side of a connection: reads the peer's bytes, collects what is sent.
struct Peer<'a> {
    input: Cursor<&'a [u8]>,
    output: Vec<u8>,
}

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Datagrams (a length byte each) to a keyed and a plain heartbeat
/// receiver: none passes that its sender did not make, numbers only rise.
pub fn heartbeat(data: &[u8]) {
    let mut b = Bytes::new(data);
    let mut keyed = HeartbeatOpener::keyed([0x33; 32]);
    let mut plain = HeartbeatOpener::plain();
    let mut last = (0u64, 0u64);
    let mut real = HeartbeatSealer::keyed([0x33; 32]);
    while !b.is_empty() {
        let n = b.u8() as usize;
        let d = b.take(n);
        if let Ok(seq) = keyed.open(d) {
            assert!(seq > last.0);
            last.0 = seq;
        }
        if let Ok(seq) = plain.open(d) {
            assert!(seq > last.1);
            last.1 = seq;
        }
    }
    // A forger never got through, so the real sender's next is taken
    // unless a forged one took its number.
    if last.0 == 0 {
        assert!(keyed.open(&real.seal_next()).is_ok(), "a heartbeat of the real sender was refused");
    }
}

/// One JSON payload of the kind the first byte selects, read as the
/// agents read it; what parses serializes and parses back the same.
pub fn json(data: &[u8]) {
    let mut b = Bytes::new(data);
    let kind = b.u8();
    let p = b.rest();
    // Types without floats (which need not survive a round trip bit for
    // bit) must come back equal from what they serialize to.
    fn again<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(p: &[u8]) -> Option<T> {
        let v: T = serde_json::from_slice(p).ok()?;
        let back: T = serde_json::from_slice(&serde_json::to_vec(&v).expect("our types serialize")).expect("what we wrote parses");
        assert_eq!(back, v);
        Some(v)
    }
    fn parses<T: serde::de::DeserializeOwned>(p: &[u8]) -> Option<T> {
        serde_json::from_slice(p).ok()
    }
    match kind % 10 {
        0 => {
            if let Some(r) = again::<Replicate>(p) {
                let _ = r.spec.validate();
            }
        }
        1 => {
            if let Some(s) = again::<ServiceSpec>(p) {
                let _ = s.validate();
            }
        }
        2 => drop(again::<CheckpointBegin>(p)),
        3 => drop(again::<CheckpointEnd>(p)),
        4 => {
            if let Some(a) = again::<Ack>(p) {
                // the primary keys the seeds by these fields
                for s in &a.new_streams {
                    let _ = format!("{}-{}", s.client, s.server);
                }
            }
        }
        5 => drop(again::<Heartbeat>(p)),
        6 => drop(again::<Stop>(p)),
        7 => drop(again::<Request>(p)),
        8 => drop(again::<Hello>(p)),
        _ => {
            drop(again::<ReplicateReady>(p));
            drop(parses::<Response<AgentStatus>>(p));
            drop(again::<Response<Exported>>(p));
        }
    }
}

/// A session frame's payload as the agents take it.
fn payloads(f: &Frame) {
    let _ = match f.kind {
        FrameKind::Replicate => f.parse::<Replicate>().map(|r| drop(r.spec.validate())),
        FrameKind::ReplicateReady => f.parse::<ReplicateReady>().map(drop),
        FrameKind::CheckpointBegin => f.parse::<CheckpointBegin>().map(drop),
        FrameKind::CheckpointEnd => f.parse::<CheckpointEnd>().map(drop),
        FrameKind::Ack => f.parse::<Ack>().map(drop),
        FrameKind::Heartbeat => f.parse::<Heartbeat>().map(drop),
        FrameKind::Stop => f.parse::<Stop>().map(drop),
        FrameKind::LogStream => f.parse::<rrc_wire::msg::LogStream>().map(drop),
        FrameKind::Request => f.parse::<Request>().map(drop),
        FrameKind::Response => f.parse::<Response<AgentStatus>>().map(drop),
        FrameKind::Hello => f.parse::<Hello>().map(drop),
        FrameKind::CheckpointData | FrameKind::DataDirInit | FrameKind::Auth => Ok(()),
        // the record log's bytes: its own target (rrlog) reads them
        FrameKind::LogHeader | FrameKind::LogBatch => Ok(()),
    };
}

/// Seeds of the wire targets: frames, handshakes and payloads as the
/// agents send them.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let hello = |auth: &str, host: &str, nonce: u8| {
        let h = Hello { proto: rrc_wire::auth::PROTO.into(), host: host.into(), auth: serde_json::from_value(auth.into()).expect("a mode"), nonce: format!("{nonce:02x}").repeat(32) };
        Frame::json(FrameKind::Hello, &h).encode()
    };
    let spec = ServiceSpec {
        name: "kv".into(),
        service_ip: "198.18.0.100".into(),
        primary: "a".into(),
        backup: "b".into(),
        mode: rrc_wire::msg::Mode::Checkpoint,
        epoch_ms: 30,
        argv: vec!["redis-server".into(), "--port".into(), "6379".into()],
        env: vec![("K".into(), "V".into())],
        data_dir: Some("/data".into()),
        heartbeat_ms: 30,
        failure_ms: 90,
        spare: Some("c".into()),
        snapshot: rrc_wire::msg::Snapshot::Copy,
        verify_replay: false,
        lease_ms: 1000,
    };
    let replicate = Replicate { spec: spec.clone(), primary_addr: "198.19.0.1".into(), primary_hb_port: 40000, seeds: vec![rrc_wire::msg::ConnSeed {
            stream: rrc_gate::StreamSeed { client: "198.18.0.10:4000".parse().expect("an address"), server: "198.18.0.100:6379".parse().expect("an address"), client_isn: 1, server_isn: 2, client_syn: None, server_syn: None },
            write_base: 5,
            read_base: 0,
        }] };
    let begin = CheckpointBegin { epoch: 3, image_id: "00".repeat(16), full: false, bytes: 4096, arrival_bound: 7, pause_us: 800 };
    let end = CheckpointEnd { epoch: 3, bytes: 4096, crc32c: 0x1234_5678 };
    let ack = Ack { epoch: 3, committed: true, error: None, arrival: 9, apply_us: 100, new_streams: replicate.seeds.iter().map(|s| s.stream.clone()).collect() };
    let payloads: Vec<(FrameKind, Vec<u8>)> = vec![
        (FrameKind::Replicate, Frame::json(FrameKind::Replicate, &replicate).payload),
        (FrameKind::ReplicateReady, Frame::json(FrameKind::ReplicateReady, &ReplicateReady { backup: "b".into(), backup_addr: "198.19.0.2".into(), queue_num: 100, backup_hb_port: 40001 }).payload),
        (FrameKind::CheckpointBegin, Frame::json(FrameKind::CheckpointBegin, &begin).payload),
        (FrameKind::CheckpointData, vec![0xab; 64]),
        (FrameKind::CheckpointEnd, Frame::json(FrameKind::CheckpointEnd, &end).payload),
        (FrameKind::Ack, Frame::json(FrameKind::Ack, &ack).payload),
        (FrameKind::Heartbeat, Frame::json(FrameKind::Heartbeat, &Heartbeat { seq: 7, arrival: 42 }).payload),
        (FrameKind::Stop, Frame::json(FrameKind::Stop, &Stop { reason: "rrc stop".into() }).payload),
        (FrameKind::Request, Frame::json(FrameKind::Request, &Request::Stop { name: "kv".into() }).payload),
    ];
    let session_frames: Vec<u8> = payloads.iter().flat_map(|(k, p)| Frame { kind: *k, payload: p.clone() }.encode()).collect();
    let with = |sel: u8, parts: &[&[u8]]| {
        let mut v = vec![sel];
        for p in parts {
            v.extend_from_slice(p);
        }
        v
    };
    match target {
        "frame" => vec![with(0, &[&session_frames]), with(1, &[&hello("hmac-sha256", "a", 0x11), &Frame { kind: FrameKind::Auth, payload: vec![7; 32] }.encode()])],
        "session" => vec![
            // a keyless server, then a keyless client, with a session behind
            with(1, &[&hello("none", "a", 0x11), &session_frames]),
            with(3, &[&hello("none", "b", 0x22), &session_frames]),
            // keyed: a Hello and a (wrong) proof
            with(0, &[&hello("hmac-sha256", "a", 0x11), &Frame { kind: FrameKind::Auth, payload: vec![7; 32] }.encode()]),
            with(2, &[&hello("hmac-sha256", "b", 0x22), &Frame { kind: FrameKind::Auth, payload: vec![7; 32] }.encode()]),
        ],
        "heartbeat" => {
            let mut real = HeartbeatSealer::keyed([0x33; 32]);
            let mut plain = HeartbeatSealer::plain();
            let mut v = Vec::new();
            for d in [real.seal_next(), plain.seal_next(), real.seal_next()] {
                v.push(d.len() as u8);
                v.extend_from_slice(&d);
            }
            vec![v]
        }
        "json" => {
            let mut v: Vec<Vec<u8>> = vec![
                with(0, &[&payloads[0].1]),
                with(1, &[&serde_json::to_vec(&spec).expect("serializes")]),
                with(2, &[&payloads[2].1]),
                with(3, &[&payloads[4].1]),
                with(4, &[&payloads[5].1]),
                with(5, &[&payloads[6].1]),
                with(6, &[&payloads[7].1]),
                with(7, &[&payloads[8].1]),
                with(8, &[&hello("none", "a", 0x11)[rrc_wire::HEADER_SIZE..]]),
                with(9, &[&payloads[1].1]),
            ];
            v.push(with(7, &[&Frame::json(FrameKind::Request, &Request::Run { spec }).payload]));
            v
        }
        _ => Vec::new(),
    }
}
