//! `rrc inspect`: verify a chain and summarize it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;

use rrc_image::rrlog::{Batch, EventKind, LogReader, LogSummary, Mark, Output};
use rrc_image::Chain;

use crate::JsonFlag;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The image directory (holding checkpoint.rrc, and `parent` for an
    /// incremental image).
    #[arg(long, value_name = "DIR", required_unless_present = "log", conflicts_with = "log")]
    pub images: Option<PathBuf>,
    /// A record log (`rrc exec --record FILE`): verified whole, then its
    /// events by kind and thread, its bytes and the cuts it holds.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// With --log: the log is sealed (`rrc exec --record-key-file KEY`):
    /// every frame's MAC is checked under KEY.
    #[arg(long, value_name = "KEY", requires = "log")]
    pub key_file: Option<PathBuf>,
    /// With --log: every event, one JSON object per line (tid, index,
    /// kind, flags, obj, seq, result, data_len, and data in hex when it
    /// is at most 64 bytes), after verifying the whole log.
    #[arg(long, requires = "log")]
    pub events: bool,
    /// With --events: every event's data in hex, however long.
    #[arg(long, requires = "events")]
    pub data: bool,
    /// With --images: the newest checkpoint's memory map, a line per VMA
    /// as /proc/PID/maps shows it (start-end, protection, offset, kind,
    /// path), after verifying the chain.
    #[arg(long, requires = "images")]
    pub vmas: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

pub fn run(a: InspectArgs) -> Result<ExitCode> {
    if let Some(log) = &a.log {
        let key = match &a.key_file {
            Some(k) => Some(rrc_wire::Key::load(k).with_context(|| format!("the log's key file {}", k.display()))?.record_log_key()),
            None => None,
        };
        if a.events {
            return dump_events(log, key, a.data);
        }
        return inspect_log(log, key, a.json.json);
    }
    let images = a.images.expect("clap: --images or --log");
    let chain = match Chain::load(&images) {
        Ok(c) => c,
        Err(e) => {
            if a.json.json {
                println!("{}", serde_json::json!({ "ok": false, "error": e.kind(), "message": e.to_string() }));
            }
            eprintln!("rrc: error: inspect {}: {e}", images.display());
            return Ok(ExitCode::FAILURE);
        }
    };
    if a.vmas {
        return print_vmas(&chain, a.json.json);
    }
    let s = chain.summary();
    if a.json.json {
        let mut v = serde_json::to_value(&s)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("ok".into(), true.into());
        }
        println!("{}", serde_json::to_string(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("chain {}: {} image(s), {} bytes, verified", images.display(), s.images.len(), s.total_bytes);
    for (i, im) in s.images.iter().enumerate() {
        println!(
            "#{i} {} id {} seq {}{}",
            if im.full { "full" } else { "incr" },
            im.image_id,
            im.sequence,
            im.parent_id.map(|p| format!(" parent {p}")).unwrap_or_default()
        );
        println!("   dir   {}", im.dir);
        println!("   proc  pid {} comm {:?} exe {}", im.pid, im.comm, im.exe);
        println!(
            "   mem   {} vmas, {} pages in image of {} defined ({} bytes file)",
            im.vmas, im.pages_in_image, im.pages_defined, im.file_bytes
        );
        let kinds: Vec<String> = im.fds_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("   thr   {} threads; fds {} ({})", im.threads, im.fds, kinds.join(", "));
        let fowns: Vec<String> = im
            .fd_records
            .iter()
            .filter_map(|f| {
                let o = f.fown?;
                let sig = if o.signal == 0 { "SIGIO".to_string() } else { format!("signal {}", o.signal) };
                let to = if o.owner == 0 { "no owner".to_string() } else { format!("to {} {}", o.owner_type, o.owner) };
                Some(format!("fd {} {to}, {sig}", f.fd))
            })
            .collect();
        if !fowns.is_empty() {
            println!("   sigio {}", fowns.join("; "));
        }
        if let Some(f) = &im.fileops {
            let ops: Vec<String> = f.by_op.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!("   files {} data-dir op(s), {} data bytes ({})", f.ops, f.data_bytes, ops.join(", "));
        }
        if let Some(a) = &im.procattr {
            println!(
                "   attrs oom_score_adj {} no_new_privs {} child_subreaper {} thp_disable {}",
                a.oom_score_adj.map(|v| v.to_string()).unwrap_or_else(|| "unread".into()),
                a.no_new_privs,
                a.child_subreaper,
                a.thp_disable
            );
            if let (Some(host), Some(domain)) = (&a.nodename, &a.domainname) {
                println!("   uts   host {host:?} domain {domain:?}");
            }
            if let Some(m) = a.membarrier.filter(|&m| m != 0) {
                println!("   membarrier registered {m:#x}");
            }
            for (name, t) in ["ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"].iter().zip(a.itimers.iter().flatten()) {
                if t.value_sec != 0 || t.value_usec != 0 {
                    println!(
                        "   timer {name} {}.{:06} s left, every {}.{:06} s",
                        t.value_sec, t.value_usec, t.interval_sec, t.interval_usec
                    );
                }
            }
        }
        if let Some(c) = &im.creds {
            let groups: Vec<String> = c.groups.iter().map(u32::to_string).collect();
            println!(
                "   creds uid {:?} gid {:?} groups [{}] caps eff {:#x} prm {:#x} inh {:#x} bnd {:#x} amb {:#x} securebits {:#x} dumpable {}",
                c.uids,
                c.gids,
                groups.join(" "),
                c.cap_effective,
                c.cap_permitted,
                c.cap_inheritable,
                c.cap_bounding,
                c.cap_ambient,
                c.securebits,
                c.dumpable
            );
        }
        if let Some(s) = &im.sysvipc {
            let msgs: usize = s.message_queues.iter().map(|q| q.messages.len()).sum();
            println!(
                "   ipc   {} semaphore set(s), {} message queue(s) holding {msgs} message(s){}",
                s.semaphore_sets.len(),
                s.message_queues.len(),
                if s.sysctls.is_empty() { String::new() } else { format!(", limits {:?}", s.sysctls) }
            );
        }
        println!("   tcp   {} stream(s)", im.tcp.len());
        for t in &im.tcp {
            let seq = match (t.write_seq_rel, t.read_seq_rel) {
                (Some(w), Some(r)) => format!("written {w} read {r}"),
                _ => "no sequence values".to_string(),
            };
            println!(
                "         {} {} -> {} inode {} {}{} (acked {} wq {} received {} rq {})",
                t.state_name,
                t.local,
                t.remote,
                t.inode,
                seq,
                if t.is_active_open() { " active" } else { "" },
                t.bytes_acked,
                t.wqueue,
                t.bytes_received,
                t.rqueue
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The log's bytes: the file itself, or what its sealed frames carry
/// (each frame's MAC checked under `key`). A sealed log read without a
/// key, or a bare one with a key, is refused by name.
fn log_stream(path: &std::path::Path, key: Option<[u8; 32]>) -> Result<Box<dyn std::io::Read>, String> {
    use std::io::{BufRead, Read};
    let mut f = std::io::BufReader::new(std::fs::File::open(path).map_err(|e| e.to_string())?);
    let sealed = f.fill_buf().map(|b| b.starts_with(&rrc_wire::MAGIC)).map_err(|e| e.to_string())?;
    match (sealed, key) {
        (true, Some(k)) => Ok(Box::new(rrc_wire::logstream::SealedLog::new(f, k, 0))),
        (true, None) => Err("a sealed log (rrc-wire frames, `rrc exec --record-key-file`): give its --key-file".into()),
        (false, Some(_)) => Err("not a sealed log (no rrc-wire frame at its start), yet --key-file was given".into()),
        (false, None) => Ok(Box::new(f) as Box<dyn Read>),
    }
}

fn inspect_log(path: &std::path::Path, key: Option<[u8; 32]>, json: bool) -> Result<ExitCode> {
    let summary = log_stream(path, key).and_then(|r| LogSummary::read(r, &path.display().to_string()).map_err(|e| e.to_string()));
    match summary {
        Ok(s) => {
            if json {
                let mut v = serde_json::to_value(&s)?;
                if let Some(o) = v.as_object_mut() {
                    o.insert("ok".into(), true.into());
                }
                println!("{}", serde_json::to_string(&v)?);
            } else {
                print!("{s}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if json {
                println!("{}", serde_json::json!({ "ok": false, "message": e }));
            }
            eprintln!("rrc: error: inspect {}: {e}", path.display());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Every event as a JSON line; the whole log is verified first, so that
/// nothing is printed from a log that turns out broken.
fn dump_events(path: &std::path::Path, key: Option<[u8; 32]>, all_data: bool) -> Result<ExitCode> {
    let name = path.display().to_string();
    let read_all = || -> Result<Vec<Batch>, String> {
        let mut rd = LogReader::open(log_stream(path, key)?, &name).map_err(|e| e.to_string())?;
        let mut v = Vec::new();
        while let Some(b) = rd.next_batch().map_err(|e| e.to_string())? {
            v.push(b);
        }
        Ok(v)
    };
    let batches = match read_all() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rrc: error: inspect {name}: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for b in &batches {
        for (i, e) in b.events.iter().enumerate() {
            let mut line = serde_json::json!({
                "tid": b.tid, "index": b.first_event + i as u64, "batch": b.batch_seq, "kind": e.kind.name(), "flags": e.flags,
                "obj": e.obj, "seq": e.seq, "result": e.result, "data_len": e.data.len(),
            });
            // the records the reader decoded, by name (their bytes stay in "data")
            match e.kind {
                EventKind::Output => line["output"] = serde_json::to_value(Output::decode(&e.data).ok())?,
                EventKind::Mark => line["mark"] = serde_json::to_value(Mark::decode(&e.data).ok())?,
                _ => {}
            }
            if e.kind.is_call() {
                line["ret"] = e.ret.into();
                line["ret_ns"] = e.ret_ns.into();
            }
            if e.ord() != 0 {
                line["ord"] = e.ord().into();
            }
            if let Some(at) = e.released_at() {
                line["released_at"] = at.into();
            }
            if all_data || e.data.len() <= 64 {
                line["data"] = e.data.iter().map(|x| format!("{x:02x}")).collect::<String>().into();
            }
            if let Err(e) = writeln!(out, "{line}") {
                // the reader went away (`| head`): not an error of the log
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(ExitCode::SUCCESS);
                }
                return Err(e.into());
            }
        }
    }
    if let Err(e) = out.flush() {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--vmas`: the newest image's VMAs, one per line (or a JSON array).
fn print_vmas(chain: &Chain, json: bool) -> Result<ExitCode> {
    let vmas = &chain.newest().vmas;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, vmas)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    for v in vmas {
        let p = |bit: u32, c: char| if v.prot & bit != 0 { c } else { '-' };
        let shared = if v.kind == rrc_image::sections::VmaKind::FileSharedRo { 's' } else { 'p' };
        writeln!(out, "{:x}-{:x} {}{}{}{} {:08x} {:?} {}", v.start, v.end, p(1, 'r'), p(2, 'w'), p(4, 'x'), shared, v.pgoff, v.kind, v.path)?;
    }
    Ok(ExitCode::SUCCESS)
}
