use super::*;
use crate::session::{FrameReader, FrameWriter};
use std::os::unix::net::UnixStream;

fn key(b: u8) -> PeerAuth {
    PeerAuth::Key(Key::from_bytes([b; KEY_LEN]))
}

/// Runs a client and a server handshake against each other.
fn shake(client: PeerAuth, server: PeerAuth) -> (Result<Session, HandshakeError>, Result<Session, HandshakeError>) {
    let (mut c, mut s) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || server_handshake(&mut s, &server, "b", None));
    let rc = client_handshake(&mut c, &client, "a", Some("b"));
    drop(c);
    (rc, t.join().unwrap())
}

#[test]
fn same_key_makes_a_session_with_matching_keys() {
    let (c, s) = shake(key(1), key(1));
    let (c, s) = (c.unwrap(), s.unwrap());
    assert!(c.authenticated() && s.authenticated());
    assert_eq!(c.peer_host, "b");
    assert_eq!(s.peer_host, "a");
    let (ck, sk) = (c.keys().unwrap(), s.keys().unwrap());
    assert_eq!(ck.frames_c2s, sk.frames_c2s);
    assert_ne!(ck.frames_c2s, ck.frames_s2c);
    assert_ne!(ck.heartbeats_c2s, ck.frames_c2s);
}

#[test]
fn two_sessions_never_share_keys() {
    let (a, _) = shake(key(1), key(1));
    let (b, _) = shake(key(1), key(1));
    assert_ne!(a.unwrap().keys().unwrap().frames_c2s, b.unwrap().keys().unwrap().frames_c2s);
}

#[test]
fn another_key_fails_on_both_sides_by_name() {
    let (c, s) = shake(key(1), key(2));
    assert!(matches!(s, Err(HandshakeError::BadProof { ref peer }) if peer == "a"), "{s:?}");
    // The server proves nothing to a client that failed; it says why.
    let e = c.unwrap_err();
    assert!(matches!(e, HandshakeError::Refused(ref m) if m.contains("does not match")), "{e}");
}

#[test]
fn keyed_and_keyless_agents_refuse_each_other() {
    let (c, s) = shake(PeerAuth::Unauthenticated, key(1));
    assert!(matches!(s, Err(HandshakeError::PeerUnauthenticated { .. })), "{s:?}");
    assert!(matches!(c, Err(HandshakeError::PeerRequiresAuth { .. })), "{c:?}");
    let (c, s) = shake(key(1), PeerAuth::Unauthenticated);
    assert!(matches!(c, Err(HandshakeError::PeerUnauthenticated { .. })), "{c:?}");
    assert!(matches!(s, Err(HandshakeError::PeerRequiresAuth { .. }) | Err(HandshakeError::Wire(_))), "{s:?}");
    let (c, s) = shake(PeerAuth::Unauthenticated, PeerAuth::Unauthenticated);
    assert!(!c.unwrap().authenticated() && !s.unwrap().authenticated());
}

#[test]
fn a_client_reaching_the_wrong_host_stops() {
    let (mut c, mut s) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || server_handshake(&mut s, &key(1), "c", None));
    let e = client_handshake(&mut c, &key(1), "a", Some("b")).unwrap_err();
    assert!(e.to_string().contains("\"c\", not \"b\""), "{e}");
    drop(c);
    let _ = t.join();
}

/// A recording of a whole client side, replayed on a new connection,
/// fails: the server's nonce is new. With the nonce memory it is named a
/// replay at once.
#[test]
fn a_replayed_client_side_fails() {
    // Record what a client sends.
    let (mut c, mut s) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let sess = server_handshake(&mut s, &key(1), "b", None).unwrap();
        let (_, o) = sess.frame_keys();
        let mut r = FrameReader::new(&mut s, o);
        r.recv().unwrap();
        let mut all = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut all);
    });
    let (mut tap_c, mut tap_s) = UnixStream::pair().unwrap();
    let recorder = std::thread::spawn(move || {
        let mut rec = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            use std::io::{Read, Write};
            let n = tap_s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return rec;
            }
            rec.extend_from_slice(&buf[..n]);
            c.write_all(&buf[..n]).unwrap();
            // pass the server's answers back
            c.set_read_timeout(Some(std::time::Duration::from_millis(50))).unwrap();
            if let Ok(m) = c.read(&mut buf) {
                tap_s.write_all(&buf[..m]).unwrap();
            }
        }
    });
    let sess = client_handshake(&mut tap_c, &key(1), "a", None).unwrap();
    let (sealer, _) = sess.frame_keys();
    FrameWriter::new(&mut tap_c, sealer).send(FrameKind::Stop, b"{\"reason\":\"x\"}").unwrap();
    drop(tap_c);
    let rec = recorder.join().unwrap();
    t.join().unwrap();
    assert!(rec.len() > 100);

    let seen = SeenNonces::new(16);
    for attempt in 0..2 {
        let (mut c, mut s) = UnixStream::pair().unwrap();
        let seen = &seen;
        let r = std::thread::scope(|sc| {
            let h = sc.spawn(move || server_handshake(&mut s, &key(1), "b", Some(seen)));
            use std::io::Write;
            let _ = c.write_all(&rec);
            let _ = c.shutdown(std::net::Shutdown::Write);
            h.join().unwrap()
        });
        if attempt == 0 {
            // first replay: the recorded proof is for another transcript
            assert!(matches!(r, Err(HandshakeError::BadProof { .. })), "{r:?}");
        } else {
            assert!(matches!(r, Err(HandshakeError::ReplayedHello)), "{r:?}");
        }
    }
}

#[test]
fn a_cli_request_on_the_peer_port_is_named_and_answered() {
    let (mut c, mut s) = UnixStream::pair().unwrap();
    // A big one too: refused for what it is, not for its size.
    let big = serde_json::json!({"op": "stop", "name": "x".repeat(5000)});
    crate::frame::write_frame(&mut c, FrameKind::Request, &serde_json::to_vec(&big).unwrap()).unwrap();
    let r = server_handshake(&mut s, &key(1), "b", None);
    assert!(matches!(r, Err(HandshakeError::CliRequest)));
    assert_eq!(r.unwrap_err().rejection(), Some(Rejection::CliRequest));
    let answer: crate::msg::Response<serde::de::IgnoredAny> = crate::frame::read_frame(&mut c).unwrap().parse().unwrap();
    assert!(answer.error.unwrap().contains("Unix socket"));
}

#[test]
fn handshake_garbage_is_refused_without_reading_it() {
    for (bytes, want) in [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), Rejection::Malformed),
        (vec![0u8; 10], Rejection::Truncated),
        (Frame { kind: FrameKind::Replicate, payload: b"{}".to_vec() }.encode(), Rejection::UnexpectedFrame),
        (Frame { kind: FrameKind::Hello, payload: vec![b' '; 2000] }.encode(), Rejection::Oversized),
        (Frame { kind: FrameKind::Hello, payload: b"{\"proto\":\"rrc-peer\"}".to_vec() }.encode(), Rejection::Malformed),
        (
            Frame { kind: FrameKind::Hello, payload: br#"{"proto":"rrc-peer","host":"a/../b","auth":"none","nonce":"00"}"#.to_vec() }.encode(),
            Rejection::Malformed,
        ),
    ] {
        let (mut c, mut s) = UnixStream::pair().unwrap();
        use std::io::Write;
        c.write_all(&bytes).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let r = server_handshake(&mut s, &key(1), "b", None);
        assert_eq!(r.as_ref().err().and_then(|e| e.rejection()), Some(want), "{r:?} for {:?}", String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn a_silent_peer_times_out() {
    let (_c, mut s) = UnixStream::pair().unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_millis(50))).unwrap();
    let r = server_handshake(&mut s, &key(1), "b", None);
    assert_eq!(r.err().and_then(|e| e.rejection()), Some(Rejection::TimedOut));
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// tests/vectors/wire-auth.json, made by tests/vectors/mkwire.py with
/// Python's own HMAC and an HKDF written from RFC 5869.
#[test]
fn matches_the_shared_vectors() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/wire-auth.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("tests/vectors/wire-auth.json")).unwrap();
    let h = |k: &str| unhex(v[k].as_str().unwrap());
    let k = Key::from_bytes(h("key").try_into().unwrap());
    let auth = PeerAuth::Key(k.clone());
    // Hello payloads as this code writes them.
    assert_eq!(new_hello(&auth, "a", &[0x11; 32]), v["hello_client"].as_str().unwrap().as_bytes());
    assert_eq!(new_hello(&auth, "b", &[0x22; 32]), v["hello_server"].as_str().unwrap().as_bytes());
    let t = transcript(v["hello_client"].as_str().unwrap().as_bytes(), v["hello_server"].as_str().unwrap().as_bytes());
    assert_eq!(t.to_vec(), h("transcript"));
    assert_eq!(proof(&k, Role::Client, &t).to_vec(), h("client_proof"));
    assert_eq!(proof(&k, Role::Server, &t).to_vec(), h("server_proof"));
    let keys = derive_keys(&k, &t);
    assert_eq!(keys.frames_c2s.to_vec(), h("frames_c2s"));
    assert_eq!(keys.frames_s2c.to_vec(), h("frames_s2c"));
    assert_eq!(keys.heartbeats_c2s.to_vec(), h("heartbeats_c2s"));
    assert_eq!(keys.heartbeats_s2c.to_vec(), h("heartbeats_s2c"));

    // Both sides' handshakes over a socket with the vector's nonces give
    // the vector's bytes, and the sessions seal and open its frame.
    let (mut c, mut s) = UnixStream::pair().unwrap();
    let a2 = auth.clone();
    let hb_vector = h("heartbeat_c2s_1");
    let server = std::thread::spawn(move || {
        let sess = server_handshake_with(&mut s, &a2, "b", None, [0x22; 32]).unwrap();
        let (_, o) = sess.frame_keys();
        let f = FrameReader::new(&mut s, o).recv().unwrap();
        let (_, mut hb) = sess.heartbeat_keys();
        (f, hb.open(&hb_vector))
    });
    let mut tap = Vec::new();
    struct Tee<'a>(&'a mut UnixStream, &'a mut Vec<u8>);
    impl std::io::Read for Tee<'_> {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(b)
        }
    }
    impl std::io::Write for Tee<'_> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.1.extend_from_slice(b);
            self.0.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sess = client_handshake_with(&mut Tee(&mut c, &mut tap), &auth, "a", Some("b"), [0x11; 32]).unwrap();
    assert_eq!(tap, h("handshake_client_bytes"));
    tap.clear();
    let (sealer, _) = sess.frame_keys();
    FrameWriter::new(Tee(&mut c, &mut tap), sealer).send(FrameKind::Stop, br#"{"reason":"vector"}"#).unwrap();
    assert_eq!(tap, h("sealed_frame_c2s_0"));
    let (mut hb, _) = sess.heartbeat_keys();
    assert_eq!(hb.seal_next(), h("heartbeat_c2s_1"));
    let (f, hbr) = server.join().unwrap();
    assert_eq!(f.payload, br#"{"reason":"vector"}"#);
    assert_eq!(hbr, Ok(1));
}

#[test]
fn key_files_are_checked() {
    let dir = std::env::temp_dir().join(format!("rrc-wire-key-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("k");
    let k = Key::create_file(&p).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(Key::load(&p).unwrap().fingerprint(), k.fingerprint());
    assert!(matches!(Key::create_file(&p), Err(KeyFileError::Exists { .. })));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Key::load(&p).unwrap_err();
    assert!(matches!(e, KeyFileError::Mode { mode: 0o644, .. }), "{e}");
    assert!(e.to_string().contains("chmod 600"));
    let q = dir.join("short");
    std::fs::write(&q, "abcd\n").unwrap();
    std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(matches!(Key::load(&q), Err(KeyFileError::Format { .. })));
    assert!(matches!(Key::load(&dir), Err(KeyFileError::NotAFile { .. }) | Err(KeyFileError::Mode { .. })));
    assert!(matches!(Key::load(&dir.join("none")), Err(KeyFileError::Io { .. })));
    // The fingerprint names the key without revealing it.
    assert!(!format!("{k:?}").contains(&hex(&k.0)));
    let _ = std::fs::remove_dir_all(&dir);
}
