//! `rrc inspect`: verify a chain and summarize it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use rrc_image::Chain;

use crate::JsonFlag;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The image directory (holding checkpoint.rrc, and `parent` for an
    /// incremental image).
    #[arg(long, value_name = "DIR")]
    pub images: PathBuf,
    #[command(flatten)]
    pub json: JsonFlag,
}

pub fn run(a: InspectArgs) -> Result<ExitCode> {
    let chain = match Chain::load(&a.images) {
        Ok(c) => c,
        Err(e) => {
            if a.json.json {
                println!("{}", serde_json::json!({ "ok": false, "error": e.kind(), "message": e.to_string() }));
            }
            eprintln!("rrc: error: inspect {}: {e}", a.images.display());
            return Ok(ExitCode::FAILURE);
        }
    };
    let s = chain.summary();
    if a.json.json {
        let mut v = serde_json::to_value(&s)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("ok".into(), true.into());
        }
        println!("{}", serde_json::to_string(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("chain {}: {} image(s), {} bytes, verified", a.images.display(), s.images.len(), s.total_bytes);
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
        if let Some(f) = &im.fileops {
            let ops: Vec<String> = f.by_op.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!("   files {} data-dir op(s), {} data bytes ({})", f.ops, f.data_bytes, ops.join(", "));
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
