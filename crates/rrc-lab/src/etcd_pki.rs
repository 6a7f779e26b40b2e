//! Certificates for etcd: a CA made for one lab alone, a certificate per
//! member (its address as the subject's IP name; used as server to
//! clients and peers, and as client to its peers), and one client
//! certificate that the agents share. Made with the openssl command
//! (Debian's openssl); the lab's are in `LAB_PKI_DIR`, gone with
//! `rrc lab down`.
//!
//! The lab's members run with `--client-cert-auth` and
//! `--peer-client-cert-auth` against this CA: only a holder of a
//! certificate it signed may read or change a view, or join the cluster.
//! A real deployment does the same with its own CA (README, "On real
//! machines, with etcd").

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{io, LabError};

pub const LAB_PKI_DIR: &str = "/run/rrc-lab/etcd-pki";
/// The subject of the agents' client certificate.
pub const AGENT_CN: &str = "rrc-agent";
/// Certificates last as long as a lab reasonably does.
const DAYS: &str = "30";

/// A directory of PEM files: `ca.crt`/`ca.key` and `NAME.crt`/`NAME.key`.
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    pub fn at(dir: impl Into<PathBuf>) -> Pki {
        Pki { dir: dir.into() }
    }

    /// The lab's.
    pub fn lab() -> Pki {
        Pki::at(LAB_PKI_DIR)
    }

    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }

    pub fn ca(&self) -> PathBuf {
        self.cert("ca")
    }

    /// etcdctl's TLS arguments for the certificate `name`.
    pub fn etcdctl_args(&self, name: &str) -> Vec<String> {
        vec![
            format!("--cacert={}", self.ca().display()),
            format!("--cert={}", self.cert(name).display()),
            format!("--key={}", self.key(name).display()),
        ]
    }

    /// Makes the CA, a certificate for each `(member, address)` and a
    /// client certificate for each of `clients`. Keys are P-256, mode 0600.
    pub fn make(&self, members: &[(&str, &str)], clients: &[&str]) -> Result<(), LabError> {
        std::fs::create_dir_all(&self.dir).map_err(io(format!("creating {}", self.dir.display())))?;
        openssl(&[
            "req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-days", DAYS, "-subj", &format!("/CN=rrc etcd CA {}", made_at()),
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", path(&self.key("ca")), "-out", path(&self.ca()),
        ])?;
        private(&self.key("ca"))?;
        for (name, addr) in members {
            self.issue(name, &format!("subjectAltName=IP:{addr}\nextendedKeyUsage=serverAuth,clientAuth\n"))?;
        }
        for name in clients {
            self.issue(name, "extendedKeyUsage=clientAuth\n")?;
        }
        Ok(())
    }

    /// A key and a certificate for `name` signed by the CA, with the v3
    /// extensions `ext` (openssl's config syntax).
    fn issue(&self, name: &str, ext: &str) -> Result<(), LabError> {
        let (k, c) = (self.key(name), self.cert(name));
        let csr = self.dir.join(format!("{name}.csr"));
        let extfile = self.dir.join(format!("{name}.ext"));
        std::fs::write(&extfile, ext).map_err(io(format!("writing {}", extfile.display())))?;
        openssl(&[
            "req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-subj", &format!("/CN={name}"), "-keyout", path(&k), "-out", path(&csr),
        ])?;
        private(&k)?;
        openssl(&[
            "x509", "-req", "-in", path(&csr), "-CA", path(&self.ca()), "-CAkey", path(&self.key("ca")), "-CAcreateserial",
            "-days", DAYS, "-extfile", path(&extfile), "-out", path(&c),
        ])?;
        let _ = std::fs::remove_file(csr);
        let _ = std::fs::remove_file(extfile);
        Ok(())
    }
}

/// Names a CA apart from every other one made here (its time, in ns).
fn made_at() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn private(key: &Path) -> Result<(), LabError> {
    std::fs::set_permissions(key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).map_err(io(format!("chmod 600 {}", key.display())))
}

fn path(p: &Path) -> &str {
    p.to_str().expect("PKI paths are UTF-8")
}

fn openssl(args: &[&str]) -> Result<(), LabError> {
    let out = match Command::new("openssl").args(args).stdin(std::process::Stdio::null()).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LabError::Other("openssl is not installed (Debian's openssl; scripts/setup.sh installs it): etcd's certificates are made with it".into()))
        }
        Err(e) => return Err(io("running openssl")(e)),
    };
    if !out.status.success() {
        return Err(LabError::Other(format!("openssl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}
