//! The staging buffer between the snapshot child and the agent: a memfd.
//!
//! The child writes the image into it at memory speed and exits, which
//! ends the copy-on-write cost of the snapshot as early as possible; the
//! agent then streams it to the backup while the application runs on
//! (DESIGN §2.1, §3 "Epoch"). No file on any file system is involved.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd};
use std::os::unix::fs::FileExt;

use anyhow::{bail, Context, Result};

pub struct Staging {
    file: File,
}

/// An empty file in memory (close-on-exec), named `name` in /proc.
pub fn memfd(name: &str) -> Result<File> {
    let cname = std::ffi::CString::new(name).context("memfd name")?;
    // SAFETY: memfd_create with a valid C string; the fd is ours.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("memfd_create for {name}"));
    }
    // SAFETY: fd was just created and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

impl Staging {
    pub fn new(name: &str) -> Result<Staging> {
        Ok(Staging { file: memfd(&format!("rrc-staging-{name}"))? })
    }

    /// Empties the buffer and rewinds the shared file offset the child
    /// will write at.
    pub fn reset(&self) -> Result<()> {
        self.file.set_len(0).context("truncating the staging buffer")?;
        // SAFETY: lseek on an fd we own.
        if unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&self.file), 0, libc::SEEK_SET) } < 0 {
            return Err(std::io::Error::last_os_error()).context("rewinding the staging buffer");
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The image the child wrote; `bytes` is what DUMP_DONE reported.
    pub fn take(&self, bytes: u64) -> Result<Vec<u8>> {
        let len = self.file.metadata().context("staging buffer size")?.len();
        if len != bytes {
            bail!("the staging buffer holds {len} bytes, DUMP_DONE reports {bytes}");
        }
        let mut v = vec![0u8; bytes as usize];
        self.file.read_exact_at(&mut v, 0).context("reading the staging buffer")?;
        Ok(v)
    }
}
