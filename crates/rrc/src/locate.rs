//! Where librrc.so and rrc-restore are: $RRC_LIBDIR, else
//! <exe dir>/../lib/rrc/ (installed), else <exe dir>/../../runtime/build/
//! (the development tree, rrc being target/release/rrc).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub const LIBRRC: &str = "librrc.so";
pub const RESTORER: &str = "rrc-restore";

fn candidates() -> Result<Vec<(PathBuf, &'static str)>> {
    if let Some(d) = std::env::var_os("RRC_LIBDIR") {
        return Ok(vec![(PathBuf::from(d), "$RRC_LIBDIR")]);
    }
    let exe = std::env::current_exe().context("finding the rrc executable")?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(vec![(dir.join("../lib/rrc"), "installed layout"), (dir.join("../../runtime/build"), "development tree")])
}

/// Absolute path of `name` in the first candidate directory holding it.
pub fn find(name: &str) -> Result<PathBuf> {
    let cands = candidates()?;
    for (d, _) in &cands {
        let p = d.join(name);
        if p.is_file() {
            return std::fs::canonicalize(&p).with_context(|| format!("resolving {}", p.display()));
        }
    }
    let tried: Vec<String> = cands.iter().map(|(d, why)| format!("{} ({why})", d.join(name).display())).collect();
    bail!(
        "{name} not found; looked at: {}. Build it with `make runtime` or point RRC_LIBDIR at the directory holding it",
        tried.join(", ")
    )
}
