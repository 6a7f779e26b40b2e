//! Writes the seed inputs of rrc_fuzz::seeds into DIR/<target>/ for each
//! target named (default: every target of rrc_fuzz::TARGETS), as
//! `seed-<crc32c>` files; existing files are kept.
//!
//!   cargo run --release -p rrc-fuzz --example seeds -- DIR [TARGET...]
//!   cargo run --release -p rrc-fuzz --example seeds -- --list

use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: seeds DIR [TARGET...] | seeds --list");
        std::process::exit(2);
    };
    if dir == "--list" {
        for (name, _) in rrc_fuzz::TARGETS {
            println!("{name}");
        }
        return;
    }
    let mut names: Vec<String> = args.collect();
    if names.is_empty() {
        names = rrc_fuzz::TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    }
    for name in names {
        let out = PathBuf::from(&dir).join(&name);
        std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        let seeds = rrc_fuzz::seeds::seeds(&name);
        for s in &seeds {
            let p = out.join(format!("seed-{:08x}", crc32c::crc32c(s)));
            std::fs::write(&p, s).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
        println!("{name}: {} seeds in {}", seeds.len(), out.display());
    }
}
