//! Seed inputs: small valid instances of each target's input, made by the
//! crates' own encoders (and the shared test vectors), so that fuzzing
//! starts from valid structure. `examples/seeds.rs` writes them into
//! `fuzz/corpus/<target>/` (scripts/fuzz.sh does it for a target whose
//! corpus is empty).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use rrc_gate::packet::build::{ipv4, Segment};
use rrc_gate::packet::{TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN};
use rrc_gate::TcpOptions;
use rrc_image::fileops::{encode_fileops, sample_ops};
use rrc_image::sections::{PagemapEntry, SectionKind, PME_IN_IMAGE};
use rrc_image::{encode_pagemap, encode_section, Image, ImageHeader, ImageId, VerifyPages, IMG_F_FULL, SECTION_HEADER_SIZE, VERSION};

/// Seeds of `target` (empty for a target without seeds here).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "image" => image_seeds(),
        "store" => store_seeds(),
        "fileops" => vec![encode_fileops(&sample_ops()), encode_fileops(&[])],
        "datadir" => datadir_seeds(),
        "gate_packet" => packet_seeds(),
        "gate_core" => core_seeds(),
        "nfqueue" => nfqueue_seeds(),
        "frame" | "session" | "heartbeat" | "json" => crate::wire::seeds(target),
        "rrlog" => ["rrlog-good.bin", "rrlog-truncated.bin", "rrlog-bad-crc.bin"].iter().map(|n| log_vector(n)).collect(),
        _ => Vec::new(),
    }
}

fn log_vector(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn vector(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors").join(name).join(rrc_image::IMAGE_FILE_NAME);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A TCP table with one synchronized IPv4 stream.
fn tcp_table() -> Vec<u8> {
    let mut r = vec![0u8; 112];
    r[0..2].copy_from_slice(&2u16.to_le_bytes()); // AF_INET
    r[2] = 1; // ESTABLISHED
    r[4] = 7;
    r[5] = 7;
    r[6..8].copy_from_slice(&3u16.to_le_bytes()); // INFO | SEQ
    r[8..10].copy_from_slice(&6379u16.to_le_bytes());
    r[10..12].copy_from_slice(&40000u16.to_le_bytes());
    r[12..16].copy_from_slice(&1448u32.to_le_bytes());
    r[16..20].copy_from_slice(&[198, 18, 0, 100]);
    r[32..36].copy_from_slice(&[10, 0, 0, 1]);
    r[48..56].copy_from_slice(&77u64.to_le_bytes()); // inode
    r[56..64].copy_from_slice(&1u64.to_le_bytes()); // cookie
    r[64..68].copy_from_slice(&10u32.to_le_bytes()); // rqueue
    r[68..72].copy_from_slice(&5u32.to_le_bytes()); // wqueue
    r[72..80].copy_from_slice(&100u64.to_le_bytes()); // bytes_acked
    r[80..88].copy_from_slice(&50u64.to_le_bytes()); // bytes_received
    r[88..96].copy_from_slice(&105u64.to_le_bytes()); // write_seq_rel
    r[96..104].copy_from_slice(&40u64.to_le_bytes()); // read_seq_rel
    let mut t = 1u32.to_le_bytes().to_vec();
    t.extend_from_slice(&112u32.to_le_bytes());
    t.extend_from_slice(&r);
    t
}

/// An image from sections in the order given (FILEOPS allowed, which
/// `ImageWriter` does not write), END computed.
fn assemble(h: &ImageHeader, sections: &[(SectionKind, Vec<u8>)]) -> Vec<u8> {
    let mut b = h.encode().to_vec();
    for (k, p) in sections {
        b.extend_from_slice(&encode_section(k.raw(), p));
    }
    let mut end = (sections.len() as u32).to_le_bytes().to_vec();
    end.extend_from_slice(&[0; 4]);
    end.extend_from_slice(&(b.len() as u64).to_le_bytes());
    b.extend_from_slice(&encode_section(SectionKind::End.raw(), &end));
    b
}

/// Two small images on the metadata of the full test vector: a full one
/// with one page of the heap (and FILEOPS, and a TCP stream), and its
/// incremental child that keeps that page and adds the next one.
fn small_pair() -> (Vec<u8>, Vec<u8>) {
    let full = vector("full");
    let img = Image::from_bytes(Path::new("full"), &full, VerifyPages::Yes).expect("the full test vector verifies");
    let payload = |k: SectionKind| {
        let s = img.sections.iter().find(|s| s.kind == k).expect("a required section");
        let o = s.offset as usize + SECTION_HEADER_SIZE;
        full[o..o + s.length as usize].to_vec()
    };
    let heap = img.vmas.iter().find(|v| v.kind == rrc_image::sections::VmaKind::Heap).expect("the vector has a heap").start;
    let meta = |pagemap: &[PagemapEntry], page: u8, fileops: Option<Vec<u8>>| {
        let mut s = vec![
            (SectionKind::Process, payload(SectionKind::Process)),
            (SectionKind::Vmas, payload(SectionKind::Vmas)),
            (SectionKind::Pagemap, encode_pagemap(pagemap)),
            (SectionKind::Threads, payload(SectionKind::Threads)),
            (SectionKind::Fds, payload(SectionKind::Fds)),
            (SectionKind::Signals, payload(SectionKind::Signals)),
            (SectionKind::Tcp, tcp_table()),
            (SectionKind::Pages, vec![page; 4096]),
        ];
        if let Some(f) = fileops {
            s.push((SectionKind::Fileops, f));
        }
        s
    };
    let h0 = ImageHeader { version: VERSION, flags: IMG_F_FULL, image_id: ImageId([0xf1; 16]), parent_id: ImageId::default(), sequence: 0, created_ns: 1 };
    let full_small = assemble(&h0, &meta(&[PagemapEntry { vaddr: heap, nr_pages: 1, flags: PME_IN_IMAGE }], 0x11, Some(encode_fileops(&sample_ops()))));
    let h1 = ImageHeader { flags: 0, image_id: ImageId([0xf2; 16]), parent_id: h0.image_id, sequence: 1, created_ns: 2, ..h0 };
    let pm = [PagemapEntry { vaddr: heap, nr_pages: 1, flags: 0 }, PagemapEntry { vaddr: heap + 4096, nr_pages: 1, flags: PME_IN_IMAGE }];
    let incr_small = assemble(&h1, &meta(&pm, 0x22, None));
    (full_small, incr_small)
}

/// The small pair, not the test vectors themselves: their extra pages
/// only make every input (and the kept corpus) larger.
fn image_seeds() -> Vec<Vec<u8>> {
    let (f, i) = small_pair();
    vec![f, i]
}

fn store_seeds() -> Vec<Vec<u8>> {
    let (f, i) = small_pair();
    vec![[f.clone(), i].concat(), f]
}

/// The compact operation encoding of the datadir target: kind, then per
/// path a component count and the components (indexes into its names:
/// a b d f esc abs up hl victim dir), then the operands.
fn datadir_seeds() -> Vec<Vec<u8>> {
    vec![
        // mkdir a; create a/f; write a/f; rename a/f -> b; link b -> a/b
        vec![0, 5, 0, 0, 0xed, 0x01, 0, 1, 0, 3, 0xa4, 0x01, 2, 1, 0, 3, 4, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 3, 1, 0, 3, 0, 1, 7, 0, 1, 1, 0, 1],
        // symlink a -> ../outside; write esc/victim; truncate abs; zero hl
        vec![0, 8, 0, 0, 0, 2, 1, 4, 8, 0, 0, 0, 0, 3, b'x', b'y', b'z', 1, 0, 5, 0, 0, 0, 0, 9, 0, 7, 0, 0, 0, 0, 16, 0, 0, 0],
        // rename up/... ; unlink abs; rmdir d
        vec![0, 3, 1, 6, 0, 0, 4, 4, 0, 5, 6, 0, 2],
        // the FILEOPS form
        [vec![0x80], encode_fileops(&sample_ops())].concat(),
    ]
}

fn a(s: &str) -> SocketAddrV4 {
    s.parse().expect("a seed address")
}

fn packet_seeds() -> Vec<Vec<u8>> {
    let o = TcpOptions { mss: Some(1460), window_scale: Some(7), sack_permitted: true, timestamps: Some((1, 0)) };
    let c = a("10.0.0.1:40000");
    let s = a("198.18.0.100:6379");
    let mut frag = Segment::new(c, s, 1, 1, TCP_ACK).payload(b"x").bytes();
    frag[6] = 0x20;
    vec![
        Segment::new(c, s, 0xffff_fff0, 0, TCP_SYN).options(o).window(64240).bytes(),
        Segment::new(s, c, 7, 0xffff_fff1, TCP_SYN | TCP_ACK).options(o).bytes(),
        Segment::new(c, s, 0xffff_fff1, 8, TCP_ACK | TCP_PSH).payload(b"*1\r\n$4\r\nPING\r\n").bytes(),
        Segment::new(s, c, 8, 0, TCP_ACK | TCP_FIN).payload(b"+PONG\r\n").bytes(),
        Segment::new(c, s, 5, 5, TCP_RST).bytes(),
        ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(198, 18, 0, 100), 17, &[0; 8]),
        frag,
    ]
}

/// Operations of the gate_core target (see its decoder in gate.rs).
mod core_ops {
    /// A built segment: `from_client`, stream slot, flags, sequence and
    /// ack steps after the ISNs, option bits, payload.
    pub fn seg(from_client: bool, k: u8, flags: u8, seq: u16, ack: u16, opt: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![if from_client { 1 } else { 2 }, k, flags];
        v.extend_from_slice(&seq.to_le_bytes());
        v.extend_from_slice(&ack.to_le_bytes());
        v.push(opt);
        v.push(payload.len() as u8);
        v.extend_from_slice(payload);
        v.extend_from_slice(&502u16.to_le_bytes());
        v
    }
    /// A commit listing stream 0 with write/read steps.
    pub fn commit(write: u16, read: u16) -> Vec<u8> {
        let mut v = vec![3, 1, 0, 0, 1];
        v.extend_from_slice(&write.to_le_bytes());
        v.extend_from_slice(&read.to_le_bytes());
        v.push(1);
        v
    }
}

fn core_seeds() -> Vec<Vec<u8>> {
    use core_ops::*;
    let (syn, ack, psh, fin) = (TCP_SYN, TCP_ACK, TCP_PSH, TCP_FIN);
    let handshake = [seg(true, 0, syn, 0, 0, 0x0f, b""), seg(false, 0, syn | ack, 0, 1, 0x0f, b""), seg(true, 0, ack, 1, 1, 0, b"")].concat();
    let exchange = [
        handshake.clone(),
        seg(true, 0, ack | psh, 1, 1, 0, b"GET / HTTP/1.0\r\n\r\n"),
        seg(false, 0, ack | psh, 1, 19, 0, b"HTTP/1.0 200 OK\r\n"),
        commit(17, 18),
        seg(true, 0, ack | fin, 19, 18, 0, b""),
        seg(false, 0, ack | fin, 18, 20, 0, b""),
        commit(18, 19),
    ]
    .concat();
    let failover = [handshake.clone(), vec![4, 0], seg(false, 0, ack, 1, 1, 0, b"held"), vec![5], seg(true, 0, ack, 1, 5, 0, b"in"), commit(4, 2), vec![4, 1], vec![6]].concat();
    let seeded = [vec![7, 0x0f], seg(true, 1, ack, 100, 100, 0, b"mid-stream"), seg(false, 1, ack | psh, 100, 110, 0, b"reply"), vec![3, 1, 0, 0, 2, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 1]].concat();
    let raw = [vec![0], 40u16.to_le_bytes().to_vec(), ipv4(Ipv4Addr::new(198, 18, 0, 100), Ipv4Addr::new(10, 0, 0, 1), 17, &[0; 20])].concat();
    vec![handshake, exchange, failover, seeded, raw]
}

/// nfnetlink_queue messages as the kernel sends them.
fn nfqueue_seeds() -> Vec<Vec<u8>> {
    fn attr(t: u16, p: &[u8]) -> Vec<u8> {
        let mut v = ((4 + p.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&t.to_ne_bytes());
        v.extend_from_slice(p);
        v.resize((v.len() + 3) & !3, 0);
        v
    }
    fn msg(ty: u16, body: &[u8]) -> Vec<u8> {
        let mut v = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(body);
        v
    }
    let pkt = Segment::new(a("10.0.0.1:40000"), a("198.18.0.100:80"), 1, 1, TCP_ACK).payload(b"data").bytes();
    let mut body = vec![2, 0, 0, 7]; // nfgenmsg: AF_INET, v0, queue 7
    body.extend(attr(1, &[0, 0, 0, 42, 8, 0, 2])); // NFQA_PACKET_HDR
    body.extend(attr(5 | 0x8000, &[0, 0, 0, 3]));
    body.extend(attr(10, &pkt)); // NFQA_PAYLOAD
    let packet = msg(3 << 8, &body);
    let mut capped = body.clone();
    capped.extend(attr(13, &1500u32.to_be_bytes())); // NFQA_CAP_LEN
    let error = msg(2, &[(-2i32).to_ne_bytes().to_vec(), vec![0; 16]].concat()); // NLMSG_ERROR, ENOENT
    vec![[packet.clone(), msg(3 << 8, &capped), error].concat(), packet]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds are valid instances, so fuzzing starts deep.
    #[test]
    fn seeds_are_valid() {
        for s in image_seeds() {
            Image::from_bytes(Path::new("seed"), &s, VerifyPages::Yes).expect("an image seed verifies");
        }
        let (f, i) = small_pair();
        let mut st = rrc_store::Store::new();
        st.apply(Path::new("f"), &f).expect("the small full image applies");
        let r = st.apply(Path::new("i"), &i).expect("its child applies");
        assert_eq!((r.pages_held, r.pages_replaced), (2, 1));
        for s in seeds("fileops") {
            rrc_image::fileops::parse_fileops(&s).expect("a FILEOPS seed parses");
        }
        let mut core = rrc_gate::GateCore::new(Ipv4Addr::new(198, 18, 0, 100), rrc_gate::GateLimits::default());
        for (n, p) in packet_seeds().iter().enumerate() {
            rrc_gate::packet::parse(p).expect("a packet seed parses");
            core.on_packet(rrc_gate::PacketId(n as u64), p);
        }
        assert!(rrc_gate::nfqueue::parse_datagram(&nfqueue_seeds()[0]).len() == 3);
    }
}
