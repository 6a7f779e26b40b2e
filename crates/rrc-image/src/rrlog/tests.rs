use super::*;

fn ev(kind: EventKind, obj: u64, seq: u64, result: i64, data: &[u8]) -> Event {
    Event::new(kind, obj, seq, result, data.to_vec())
}

/// A small log: main thread and one worker, a cut between their batches.
fn sample() -> Vec<u8> {
    let header = LogHeader { log_id: ImageId([7; 16]), created_ns: 1_700_000_000_000_000_000, pid: 1, continues: false };
    let mut b = header.encode().to_vec();
    let main = Batch {
        tid: 1,
        batch_seq: 0,
        first_event: 0,
        events: vec![
            ev(EventKind::ThreadStart, 0, 0, 0, b""),
            ev(EventKind::Clock, 1, 1, 2, b"").returned(1, 1000),
            ev(EventKind::ThreadCreate, 2, 0, 0, b""),
            ev(EventKind::MutexLock, 0x5000, 0, 0, b"").ordered(2),
        ],
    };
    let worker = Batch {
        tid: 2,
        batch_seq: 1,
        first_event: 0,
        events: vec![
            ev(EventKind::ThreadStart, 1, 0, 0, b""),
            ev(EventKind::Random, 0, 0, 5, b"abcde").returned(3, 3000),
            ev(EventKind::Output, 5, 0, 5, &sample_output().encode()).returned(4, 4000),
        ],
    };
    let cut = Cut { image_id: ImageId([9; 16]), sequence: 3, threads: vec![(1, 4), (2, 2)] };
    let cuts = Batch { tid: 0, batch_seq: 2, first_event: 0, events: vec![ev(EventKind::Cut, 0, 0, 0, &cut.encode())] };
    let mark = Mark { number: 1, threads: vec![(1, 4), (2, 3)] };
    let released = Released { conns: vec![ReleasedConn { conn: sample_output().conn.unwrap(), released: 3, fin: false }] };
    let marks = Batch {
        tid: 0,
        batch_seq: 3,
        first_event: 0,
        events: vec![ev(EventKind::Mark, 0, 0, 0, &mark.encode()), ev(EventKind::Released, 0, 0, 0, &released.encode())],
    };
    let main2 = Batch { tid: 1, batch_seq: 4, first_event: 4, events: vec![ev(EventKind::MutexLock, 0x5000, 1, 0, b"").released(4).ordered(5)] };
    for x in [main, worker, cuts, marks, main2] {
        b.extend_from_slice(&x.encode());
    }
    b
}

fn sample_output() -> Output {
    Output {
        offset: 0,
        length: 5,
        crc: 0x1234_5678,
        conn: Some(OutputConn { local: "10.0.0.1:6379".parse().unwrap(), peer: "10.0.0.9:40000".parse().unwrap() }),
        made: 7,
    }
}

fn summary(b: &[u8]) -> Result<LogSummary, LogError> {
    LogSummary::read(b, "test.log")
}

#[test]
fn a_log_reads_back_with_its_counts_and_cuts() {
    let s = summary(&sample()).unwrap();
    assert_eq!((s.batches, s.events, s.bytes), (5, 11, sample().len() as u64));
    assert_eq!(s.by_kind["released"], 1);
    assert_eq!((s.marks, s.outputs, s.outputs_to_connections), (1, 1, 1));
    assert_eq!(s.by_kind["thread_start"], 2);
    assert_eq!(s.by_kind["cut"], 1);
    assert_eq!(s.threads[&1].events, 5);
    assert!(!s.threads.contains_key(&0), "process-wide records are no thread's");
    assert_eq!(s.threads[&2].data_bytes, 5 + 48);
    assert_eq!(s.cuts, vec![Cut { image_id: ImageId([9; 16]), sequence: 3, threads: vec![(1, 4), (2, 2)] }]);
    let text = s.to_string();
    assert!(text.contains("cut for image 09090909090909090909090909090909 (sequence 3): 1@4 2@2"), "{text}");
}

#[test]
fn every_prefix_is_whole_or_named_truncated() {
    let b = sample();
    let mut ends = vec![LOG_HEADER_SIZE];
    let mut rd = LogReader::open(&b[..], "x").unwrap();
    while rd.next_batch().unwrap().is_some() {
        ends.push(rd.offset() as usize);
    }
    for n in 0..b.len() {
        match summary(&b[..n]) {
            Ok(_) => assert!(ends.contains(&n), "a prefix of {n} bytes read as whole"),
            Err(LogError::Truncated { .. }) => assert!(!ends.contains(&n)),
            Err(e) => panic!("prefix {n}: {e}"),
        }
    }
}

#[test]
fn every_flipped_byte_is_refused() {
    let b = sample();
    for i in 0..b.len() {
        for bit in [0x01u8, 0x80] {
            let mut c = b.clone();
            c[i] ^= bit;
            assert!(summary(&c).is_err(), "byte {i} bit {bit:#x} flipped: accepted");
        }
    }
}

#[test]
fn another_version_is_named() {
    let mut b = sample();
    b[8] = 3;
    let e = summary(&b).unwrap_err();
    assert!(matches!(e, LogError::VersionMismatch { found: 3, expected: LOG_VERSION, .. }), "{e}");
    // the same with a header CRC made right for it
    let crc = crc32c::crc32c(&b[..44]);
    b[44..48].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(summary(&b).unwrap_err(), LogError::VersionMismatch { found: 3, .. }));
    assert!(matches!(summary(b"GARBAGE!and more bytes after it.................").unwrap_err(), LogError::BadMagic { .. }));
}

fn batches(b: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut rd = LogReader::open(b, "x").unwrap();
    let mut out = Vec::new();
    let mut at = LOG_HEADER_SIZE;
    while rd.next_batch().unwrap().is_some() {
        out.push(b[at..rd.offset() as usize].to_vec());
        at = rd.offset() as usize;
    }
    (b[..LOG_HEADER_SIZE].to_vec(), out)
}

#[test]
fn a_missing_repeated_or_swapped_batch_is_refused() {
    let (h, bs) = batches(&sample());
    let join = |order: &[usize]| {
        let mut v = h.clone();
        for &i in order {
            v.extend_from_slice(&bs[i]);
        }
        v
    };
    assert!(matches!(summary(&join(&[0, 2, 3])).unwrap_err(), LogError::BatchOrder { expected: 1, found: 2, .. }));
    assert!(matches!(summary(&join(&[0, 0])).unwrap_err(), LogError::BatchOrder { expected: 1, found: 0, .. }));
    assert!(matches!(summary(&join(&[1, 0])).unwrap_err(), LogError::BatchOrder { .. }));
}

#[test]
fn a_thread_resuming_elsewhere_is_refused() {
    let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues: false }.encode().to_vec();
    b.extend(Batch { tid: 1, batch_seq: 0, first_event: 0, events: vec![ev(EventKind::ThreadStart, 0, 0, 0, b"")] }.encode());
    b.extend(Batch { tid: 1, batch_seq: 1, first_event: 2, events: vec![ev(EventKind::ThreadExit, 0, 0, 0, b"")] }.encode());
    let e = summary(&b).unwrap_err();
    assert!(matches!(e, LogError::EventGap { tid: 1, expected: 1, found: 2, .. }), "{e}");
    // a new thread with a recycled tid starts at 0 with its THREAD_START;
    // anything else at 0 is a gap
    let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues: false }.encode().to_vec();
    b.extend(Batch { tid: 1, batch_seq: 0, first_event: 0, events: vec![ev(EventKind::ThreadStart, 0, 0, 0, b"")] }.encode());
    b.extend(Batch { tid: 1, batch_seq: 1, first_event: 0, events: vec![ev(EventKind::ThreadStart, 2, 0, 0, b"")] }.encode());
    assert!(summary(&b).is_ok());
    b.extend(Batch { tid: 1, batch_seq: 2, first_event: 0, events: vec![ev(EventKind::ThreadExit, 0, 0, 0, b"")] }.encode());
    assert!(matches!(summary(&b).unwrap_err(), LogError::EventGap { tid: 1, expected: 1, found: 0, .. }));
}

/// A log that continues a process (LOG_F_CONTINUES): a thread's first
/// batch may begin anywhere; from there on the same rule. Without the
/// flag that first batch is a gap; other flags are refused.
#[test]
fn a_continuing_log_lets_each_thread_begin_where_it_was_first_sent() {
    let log = |continues: bool| {
        let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues }.encode().to_vec();
        b.extend(Batch { tid: 1, batch_seq: 0, first_event: 40, events: vec![ev(EventKind::Clock, 1, 1, 2, b"").returned(1, 10)] }.encode());
        b.extend(Batch { tid: 2, batch_seq: 1, first_event: 7, events: vec![ev(EventKind::Clock, 1, 1, 2, b"").returned(2, 20)] }.encode());
        b
    };
    assert!(summary(&log(true)).is_ok());
    let cont = log(true);
    let mut rd = LogReader::open(&cont[..], "x").unwrap();
    assert!(rd.header().continues);
    assert!(rd.next_batch().unwrap().is_some());
    assert!(matches!(summary(&log(false)).unwrap_err(), LogError::EventGap { tid: 1, expected: 0, found: 40, .. }));
    let mut b = log(true);
    b.extend(Batch { tid: 1, batch_seq: 2, first_event: 42, events: vec![ev(EventKind::ThreadExit, 0, 0, 0, b"")] }.encode());
    assert!(matches!(summary(&b).unwrap_err(), LogError::EventGap { tid: 1, expected: 41, found: 42, .. }));
    let mut b = log(true);
    b[12] = 3;
    let crc = crc32c::crc32c(&b[..44]);
    b[44..48].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(LogReader::open(&b[..], "x").err(), Some(LogError::HeaderFlags { flags: 3, .. })));
}

#[test]
fn sizes_are_refused_before_reading() {
    let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues: false }.encode().to_vec();
    let mut h = Batch { tid: 1, batch_seq: 0, first_event: 0, events: vec![] }.encode();
    h[28..32].copy_from_slice(&(MAX_PAYLOAD + 8).to_le_bytes());
    let crc = crc32c::crc32c(&h[..36]);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
    b.extend(h);
    // no payload follows: the size alone is refused
    assert!(matches!(summary(&b).unwrap_err(), LogError::PayloadTooLarge { .. }));
}

#[test]
fn events_of_the_wrong_shape_are_refused() {
    let log = |tid: u32, e: Event| {
        let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues: false }.encode().to_vec();
        b.extend(Batch { tid, batch_seq: 0, first_event: 0, events: vec![e] }.encode());
        summary(&b)
    };
    let cut = Cut { image_id: ImageId([2; 16]), sequence: 0, threads: vec![(1, 0)] };
    assert!(log(0, ev(EventKind::Cut, 0, 0, 0, &cut.encode())).is_ok());
    assert!(matches!(log(1, ev(EventKind::Cut, 0, 0, 0, &cut.encode())).unwrap_err(), LogError::BadEvent { .. }));
    assert!(matches!(log(0, ev(EventKind::Clock, 0, 0, 0, b"")).unwrap_err(), LogError::BadEvent { .. }));
    assert!(matches!(log(0, ev(EventKind::Cut, 0, 0, 0, &cut.encode()[..40])).unwrap_err(), LogError::BadEvent { .. }));
    let bad_order = Cut { image_id: ImageId([2; 16]), sequence: 0, threads: vec![(2, 0), (1, 0)] };
    assert!(log(0, ev(EventKind::Cut, 0, 0, 0, &bad_order.encode())).is_err());
    assert!(matches!(log(1, ev(EventKind::Output, 3, 0, 0, b"short")).unwrap_err(), LogError::BadEvent { .. }));
    let mut unknown = Batch { tid: 1, batch_seq: 0, first_event: 0, events: vec![ev(EventKind::Clock, 0, 0, 0, b"")] }.encode();
    unknown[BATCH_HEADER_SIZE] = 0xee;
    let crc = crc32c::crc32c(&unknown[BATCH_HEADER_SIZE..]);
    unknown[32..36].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32c::crc32c(&unknown[..36]);
    unknown[36..40].copy_from_slice(&crc.to_le_bytes());
    let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues: false }.encode().to_vec();
    b.extend(unknown);
    let e = summary(&b).unwrap_err();
    assert!(e.to_string().contains("unknown event kind 238"), "{e}");
}

#[test]
fn kinds_have_unique_numbers_and_names() {
    let mut nums: Vec<u16> = EventKind::ALL.iter().map(|k| *k as u16).collect();
    nums.sort();
    nums.dedup();
    assert_eq!(nums.len(), EventKind::ALL.len());
    for k in EventKind::ALL {
        assert_eq!(EventKind::from_raw(k as u16), Some(k));
    }
    let mut names: Vec<&str> = EventKind::ALL.iter().map(|k| k.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), EventKind::ALL.len());
}

fn vector(name: &str) -> Vec<u8> {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e} (written by `make -C runtime vectors-write`)", p.display()))
}

#[test]
fn the_c_vectors_are_what_this_side_writes_and_refuses() {
    assert_eq!(vector("rrlog-good.bin"), sample(), "rrlog.h and rrlog.rs encode the sample log differently");
    assert!(matches!(summary(&vector("rrlog-truncated.bin")).unwrap_err(), LogError::Truncated { .. }));
    assert!(matches!(summary(&vector("rrlog-bad-crc.bin")).unwrap_err(), LogError::PayloadCrc { .. }));
    let e = summary(&vector("rrlog-other-version.bin")).unwrap_err();
    assert!(matches!(e, LogError::VersionMismatch { found: 7, expected: 6, .. }), "{e}");
}

/// A log of one batch: thread 1's `events`.
fn log(events: Vec<Event>) -> Result<LogSummary, LogError> {
    let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues: false }.encode().to_vec();
    b.extend(Batch { tid: 1, batch_seq: 0, first_event: 0, events }.encode());
    summary(&b)
}

#[test]
fn calls_carry_their_place_in_the_order_of_returns() {
    let start = || ev(EventKind::ThreadStart, 0, 0, 0, b"");
    let clock = |ret| ev(EventKind::Clock, 1, 0, 0, b"").returned(ret, 5);
    assert!(log(vec![start(), clock(3), clock(7)]).is_ok());
    let e = log(vec![start(), clock(0)]).unwrap_err();
    assert!(e.to_string().contains("without its place in the order of returns"), "{e}");
    let e = log(vec![start(), clock(7), clock(7)]).unwrap_err();
    assert!(e.to_string().contains("not after the thread's previous call"), "{e}");
    let e = log(vec![start().returned(1, 1)]).unwrap_err();
    assert!(e.to_string().contains("not a system call, with a place"), "{e}");
}

#[test]
fn acquisitions_take_a_place_in_the_order_of_returns() {
    let start = || ev(EventKind::ThreadStart, 0, 0, 0, b"");
    let lock = ev(EventKind::MutexLock, 0x5000, 0, 0, b"").ordered(4);
    assert_eq!(lock.ord(), 4);
    let rd = ev(EventKind::RwlockRd, 0x7000, 0, 0, b"").ordered(5);
    assert!(log(vec![start(), lock, rd, ev(EventKind::SpinLock, 0x6000, 0, 0, b"")]).is_ok(), "ord 0: none");
    // a kind that is not an acquisition has none
    let e = log(vec![start(), ev(EventKind::SemPost, 0x5000, 0, 0, b"").ordered(3)]).unwrap_err();
    assert!(e.to_string().contains("not a system call, with a place"), "{e}");
    assert_eq!(ev(EventKind::SemPost, 0x5000, 0, 0, b"").ordered(3).ord(), 0);
}

#[test]
fn acquisitions_carry_where_the_release_before_them_came() {
    let start = || ev(EventKind::ThreadStart, 0, 0, 0, b"");
    let lock = ev(EventKind::MutexLock, 0x5000, 1, 0, b"").released(3);
    assert_eq!(lock.released_at(), Some(3));
    assert_eq!(ev(EventKind::MutexLock, 0x5000, 1, 0, b"").released_at(), None);
    assert!(log(vec![start(), lock, ev(EventKind::SpinLock, 0x6000, 1, 0, b"").released(2)]).is_ok());
    // a kind that releases nothing, or a failed trylock, carries no release
    let e = log(vec![start(), ev(EventKind::SemWait, 0x5000, 1, 0, b"").released(3)]).unwrap_err();
    assert!(e.to_string().contains("not a system call, with a place"), "{e}");
    let e = log(vec![start(), ev(EventKind::MutexLock, 0x5000, 0, -16, b"").released(3)]).unwrap_err();
    assert!(e.to_string().contains("that failed, with where a release came"), "{e}");
    // a condition wait that timed out took its mutex again: it carries one
    let timed_out = ev(EventKind::CondWait, 0x6000, 1, -110, &0x5000u64.to_le_bytes()).released(1);
    assert!(log(vec![start(), timed_out]).is_ok());
    // a clock keeps its reading in seq and result
    let e = log(vec![start(), ev(EventKind::Clock, 1, 0, 0, &[0; 16]).returned(1, 5)]).unwrap_err();
    assert!(e.to_string().contains("a clock reading with 16 bytes of data"), "{e}");
}

#[test]
fn outputs_name_their_connection() {
    let o = sample_output();
    assert_eq!(Output::decode(&o.encode()), Ok(o));
    let none = Output { conn: None, made: 0, ..o };
    assert_eq!(Output::decode(&none.encode()), Ok(none));
    let mut b = o.encode();
    b[20] = 10; // AF_INET6: not carried
    assert!(Output::decode(&b).unwrap_err().contains("family 10"));
    let mut b = none.encode();
    b[24] = 1; // an address without a family
    assert!(Output::decode(&b).is_err());
    let mut b = o.encode();
    b[36] = 1;
    assert!(Output::decode(&b).unwrap_err().contains("reserved"));
}

/// A log of thread 1's `n` events, then tid-0 batches of these marks.
fn marked(n: u64, marks: &[Mark]) -> Result<LogSummary, LogError> {
    let mut b = LogHeader { log_id: ImageId([1; 16]), created_ns: 0, pid: 1, continues: false }.encode().to_vec();
    let mut events = vec![ev(EventKind::ThreadStart, 0, 0, 0, b"")];
    events.extend((1..n).map(|i| ev(EventKind::Clock, 1, 0, 0, b"").returned(i, 5)));
    b.extend(Batch { tid: 1, batch_seq: 0, first_event: 0, events }.encode());
    for (i, m) in marks.iter().enumerate() {
        b.extend(Batch { tid: 0, batch_seq: 1 + i as u64, first_event: 0, events: vec![ev(EventKind::Mark, 0, 0, 0, &m.encode())] }.encode());
    }
    summary(&b)
}

#[test]
fn marks_follow_one_another_and_never_run_ahead_of_the_log() {
    let m = |number, next| Mark { number, threads: vec![(1, next)] };
    assert_eq!(marked(4, &[m(1, 2), m(2, 4)]).unwrap().marks, 2);
    let e = marked(4, &[m(1, 2), m(3, 4)]).unwrap_err();
    assert!(e.to_string().contains("release mark 3 after mark 1"), "{e}");
    let e = marked(4, &[m(1, 5)]).unwrap_err();
    assert!(e.to_string().contains("covers thread 1's events up to 5, but the log holds 4"), "{e}");
    let e = marked(4, &[Mark { number: 1, threads: vec![(2, 1)] }]).unwrap_err();
    assert!(e.to_string().contains("thread 2's events up to 1, but the log holds 0"), "{e}");
    let unordered = Mark { number: 1, threads: vec![(2, 0), (1, 0)] };
    assert!(marked(4, &[unordered]).is_err());
    assert!(Mark::decode(&m(1, 1).encode()[..20]).is_err());
}

#[test]
fn a_released_record_names_each_connection_once_with_its_offset() {
    let c = sample_output().conn.unwrap();
    let other = OutputConn { peer: "10.0.0.9:40001".parse().unwrap(), ..c };
    let r = Released { conns: vec![ReleasedConn { conn: c, released: 1 << 40, fin: true }, ReleasedConn { conn: other, released: 0, fin: false }] };
    assert_eq!(Released::decode(&r.encode()).unwrap(), r);
    assert!(Released::decode(&r.encode()[..30]).unwrap_err().contains("2 connections in 30 bytes"));
    let twice = Released { conns: vec![ReleasedConn { conn: c, released: 1, fin: false }, ReleasedConn { conn: c, released: 2, fin: false }] };
    assert!(Released::decode(&twice.encode()).unwrap_err().contains("twice"));
    let mut flagged = r.encode();
    assert_eq!(flagged[8 + 12], 1, "the FIN flag");
    flagged[8 + 12] = 2;
    assert!(Released::decode(&flagged).unwrap_err().contains("unknown flags 0x2"));
    // only in a process-wide batch
    let e = log(vec![ev(EventKind::ThreadStart, 0, 0, 0, b""), ev(EventKind::Released, 0, 0, 0, &r.encode())]).unwrap_err();
    assert!(e.to_string().contains("released in a batch of a thread"), "{e}");
}

#[test]
fn a_fin_output_carries_no_bytes() {
    let start = || ev(EventKind::ThreadStart, 0, 0, 0, b"");
    let fin = |length: u64, result: i64| {
        let o = Output { length, crc: 0, ..sample_output() };
        Event { flags: EVF_FIN, ..ev(EventKind::Output, 5, 0, result, &o.encode()).returned(1, 5) }
    };
    assert!(log(vec![start(), fin(0, 0)]).is_ok());
    let e = log(vec![start(), fin(5, 0)]).unwrap_err();
    assert!(e.to_string().contains("a FIN output of 5 bytes"), "{e}");
    assert!(log(vec![start(), fin(0, 3)]).is_err());
}
