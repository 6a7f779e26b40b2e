//! Network namespaces by name (/run/netns/NAME, as `ip netns` makes them):
//! discovering the lab's, finding every process inside one, writing a
//! sysctl inside one.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{io, LabError};
use crate::topology::{NETNS_DIR, PREFIX};

pub fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Every /run/netns/rrc-lab-* there is (built by us or left by a crash).
pub fn lab_namespaces() -> Result<Vec<String>, LabError> {
    let rd = match std::fs::read_dir(NETNS_DIR) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(format!("listing {NETNS_DIR}"))(e)),
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    v.sort();
    Ok(v)
}

/// (device, inode) of a namespace file, which identifies the namespace.
/// None when the name exists but no namespace is mounted on it (a crash
/// between the file's creation and the bind mount).
pub fn ns_id(path: &Path) -> Option<(u64, u64)> {
    let md = std::fs::metadata(path).ok()?;
    // An empty regular file on tmpfs is not a namespace; nsfs inodes are.
    let st = std::fs::metadata(path.parent()?).ok()?;
    if md.dev() == st.dev() {
        return None;
    }
    Some((md.dev(), md.ino()))
}

/// Pids of every process whose network namespace is `id` (like `ip netns
/// pids`, but also finding processes that are in no cgroup of the lab,
/// e.g. containers started on a lab host with `rrc exec --netns`).
pub fn pids_in(id: (u64, u64)) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| (m.dev(), m.ino()) == id).unwrap_or(false)
        })
        .collect()
}

/// Writes `value` to /proc/sys/<key> inside the network namespace `name`
/// (net.* sysctls are per namespace). Done from a short-lived thread that
/// joins the namespace, so this process's own namespace never changes.
pub fn sysctl_in(name: &str, key: &str, value: &str) -> Result<(), LabError> {
    let path = netns_path(name);
    let f = std::fs::File::open(&path).map_err(io(format!("opening {}", path.display())))?;
    let key_path = format!("/proc/sys/{}", key.replace('.', "/"));
    let what = format!("setting {key}={value} in {name}");
    let value = value.to_string();
    let r = std::thread::spawn(move || -> std::io::Result<()> {
        // SAFETY: plain syscall; only this thread changes namespace.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        std::fs::write(&key_path, value)
    })
    .join()
    .map_err(|_| LabError::Other(format!("{what}: the thread panicked")))?;
    r.map_err(io(what))
}
