//! rrc-store-merge: a test and diagnostic tool, not a user command.
//!
//! Feeds checkpoint images, in the order given, into one rrc_store::Store
//! (as the backup will receive them over the network) and writes the
//! merged committed state as one full image DIR/checkpoint.rrc, which
//! `rrc restore --images DIR` restores. Prints one JSON line per applied
//! image and a summary line. Exit status 1 with the store's error if an
//! image is rejected (nothing is written then).
//!
//!   rrc-store-merge IMAGE... --out DIR [--keep-header]
//!
//! IMAGE is a checkpoint directory or a checkpoint.rrc file.
//! --data-dir D: after each image is applied (fully verified), its FILEOPS
//! are applied to the directory D (rrc_store::datadir); --data-init SRC
//! first fills D with SRC's content (the data directory as it was when
//! the service started). D must be empty then.
//! --keep-header writes the committed image's own image_id and created_ns
//! (only when it is a full image): the output must then equal it byte for
//! byte, which tests the writer against snapshot.c.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use rrc_image::IMAGE_FILE_NAME;
use rrc_store::Store;

fn main() {
    if let Err(e) = run() {
        eprintln!("rrc-store-merge: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut images: Vec<PathBuf> = Vec::new();
    let mut out: Option<PathBuf> = None;
    let mut keep_header = false;
    let mut data_dir: Option<PathBuf> = None;
    let mut data_init: Option<PathBuf> = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--out") => out = Some(args.next().context("--out needs a directory")?.into()),
            Some("--keep-header") => keep_header = true,
            Some("--data-dir") => data_dir = Some(args.next().context("--data-dir needs a directory")?.into()),
            Some("--data-init") => data_init = Some(args.next().context("--data-init needs a directory")?.into()),
            Some("-h") | Some("--help") => {
                println!("usage: rrc-store-merge IMAGE... --out DIR [--keep-header]  (test/diagnostic tool)");
                return Ok(());
            }
            Some(s) if s.starts_with("--") => bail!("unknown option {s}"),
            _ => images.push(a.into()),
        }
    }
    let out = out.context("--out DIR is required")?;
    if images.is_empty() {
        bail!("no images given");
    }
    let mut copy = match &data_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            if let Some(src) = &data_init {
                let ops = rrc_store::datadir::snapshot_ops(src)?;
                rrc_store::datadir::apply_ops(d, &ops)?;
            }
            Some(rrc_store::datadir::DataDirCopy::new(d))
        }
        None => None,
    };
    let mut store = Store::new();
    for img in &images {
        let file = if img.is_dir() { img.join(IMAGE_FILE_NAME) } else { img.clone() };
        let r = store.apply_file(&file)?;
        let fileops = match (&mut copy, store.image()) {
            (Some(c), Some(image)) => Some(c.commit(image)?),
            _ => None,
        };
        println!("{}", serde_json::json!({ "applied": file, "report": r, "fileops_applied": fileops }));
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let dest = out.join(IMAGE_FILE_NAME);
    let id = if keep_header {
        let h = *store.committed().expect("applied at least one image");
        if !h.is_full() {
            bail!("--keep-header: the committed image {} is incremental; its header cannot describe a full image", h.image_id);
        }
        store.write_image_as(&dest, h.image_id, h.created_ns)?;
        h.image_id
    } else {
        store.write_image(&dest)?
    };
    println!("{}", serde_json::json!({ "written": dest, "image_id": id.hex(), "summary": store.summary() }));
    Ok(())
}
