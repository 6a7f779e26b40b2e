//! A compact, serializable description of an image or a chain, for
//! `rrc inspect` and for `rrc dump` output.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::chain::Chain;
use crate::header::ImageId;
use crate::image::Image;

#[derive(Debug, Clone, Serialize)]
pub struct ImageSummary {
    pub dir: String,
    pub path: String,
    pub image_id: ImageId,
    /// None for a full image.
    pub parent_id: Option<ImageId>,
    pub sequence: u64,
    pub full: bool,
    pub created_ns: u64,
    pub file_bytes: u64,
    pub pid: u32,
    pub comm: String,
    pub exe: String,
    pub vmas: usize,
    pub pagemap_entries: usize,
    pub pages_defined: u64,
    pub pages_in_image: u64,
    pub threads: usize,
    pub fds: usize,
    pub fds_by_kind: BTreeMap<String, usize>,
    /// Every FDS record (data bytes left out).
    pub fd_records: Vec<crate::sections::Fd>,
    /// FILEOPS: the data directory's changes in this image (absent: none tracked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fileops: Option<crate::fileops::FileOpsSummary>,
    /// PROCATTR: the process attributes the restorer sets again (absent: an older image).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub procattr: Option<crate::sections::ProcAttr>,
    /// CREDS: the credentials every thread gets back (absent: an older image).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creds: Option<crate::sections::Creds>,
    /// SYSVIPC: the IPC namespace's sysctls and SysV objects (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sysvipc: Option<crate::sysvipc::SysvIpc>,
    /// The TCP stream table of this snapshot, every record.
    pub tcp: Vec<crate::sections::TcpStream>,
}

impl Image {
    pub fn summary(&self) -> ImageSummary {
        let mut fds_by_kind = BTreeMap::new();
        for fd in &self.fds {
            *fds_by_kind.entry(fd.kind.name().to_string()).or_insert(0) += 1;
        }
        let dir = self.path.parent().map(|p| p.display().to_string()).unwrap_or_default();
        ImageSummary {
            dir,
            path: self.path.display().to_string(),
            image_id: self.header.image_id,
            parent_id: (!self.header.parent_id.is_zero()).then_some(self.header.parent_id),
            sequence: self.header.sequence,
            full: self.header.is_full(),
            created_ns: self.header.created_ns,
            file_bytes: self.file_bytes,
            pid: self.process.pid,
            comm: self.process.comm.clone(),
            exe: if self.process.exe_replaced {
                format!("{} (deleted since the start: restored as the file now at that path)", self.process.exe_path)
            } else {
                self.process.exe_path.clone()
            },
            vmas: self.vmas.len(),
            pagemap_entries: self.pagemap.len(),
            pages_defined: self.pages_defined(),
            pages_in_image: self.pages_in_image(),
            threads: self.threads.len(),
            fds: self.fds.len(),
            fds_by_kind,
            fd_records: self.fds.clone(),
            fileops: self.fileops.as_ref().map(|f| f.summary()),
            procattr: self.procattr.clone(),
            creds: self.creds.clone(),
            sysvipc: self.sysvipc.clone(),
            tcp: self.tcp.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ChainSummary {
    /// Oldest (full) first.
    pub images: Vec<ImageSummary>,
    pub total_bytes: u64,
}

impl Chain {
    pub fn summary(&self) -> ChainSummary {
        let images: Vec<ImageSummary> = self
            .images
            .iter()
            .zip(&self.dirs)
            .map(|(img, dir)| ImageSummary { dir: dir.display().to_string(), ..img.summary() })
            .collect();
        let total_bytes = images.iter().map(|s| s.file_bytes).sum();
        ChainSummary { images, total_bytes }
    }
}
