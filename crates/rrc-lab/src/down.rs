//! `rrc lab down`: removes every process, namespace, link, cgroup and
//! directory of the lab. It does not trust lab.json: everything is found by
//! its name (the rrc-lab-* network namespaces, the rrc-lab cgroup tree,
//! /var/lib/rrc-lab, /run/rrc-lab, the etcd members' /dev/shm/rrc-lab-etcd, the registry's containers in rrc-lab-*
//! namespaces), so that it also cleans up after a lab, or the `rrc` that
//! built it, crashed midway. With nothing there it does nothing and
//! succeeds. Every step is tried even when an earlier one failed; the
//! failures are reported together.

use std::path::Path;

use serde::Serialize;

use crate::cgroup;
use crate::error::{io, LabError};
use crate::ip::ip;
use crate::kill::kill_netns_pids;
use crate::ns;
use crate::topology::{CGROUP_ROOT, PREFIX, RUN_DIR, STATE_ROOT, SWITCH_NS};

#[derive(Debug, Serialize, Default)]
pub struct DownReport {
    /// What was removed, in order; empty when there was no lab.
    pub removed: Vec<String>,
}

/// Refuses to run from inside the lab: cgroup.kill would end the caller.
fn refuse_from_inside() -> Result<(), LabError> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if cg.lines().any(|l| l.contains("/rrc-lab/") || l.ends_with("/rrc-lab")) {
        return Err(LabError::Other("`rrc lab down` runs inside a lab host (its cgroup is under rrc-lab): run it from the machine itself".into()));
    }
    Ok(())
}

pub fn down() -> Result<DownReport, LabError> {
    refuse_from_inside()?;
    let mut rep = DownReport::default();
    let mut errs: Vec<LabError> = Vec::new();

    // Namespaces: hosts first, the switch last (a host's veths die with it).
    let mut names = ns::lab_namespaces()?;
    names.sort_by_key(|n| n == SWITCH_NS);

    // 1. Containers rrc started in lab namespaces (their cgroups are
    //    outside the lab's tree, under the registry's).
    let reg = rrc_container::Config::default();
    match reg.registry.list() {
        Ok(records) => {
            for r in records.iter().filter(|r| r.netns.as_deref().is_some_and(|n| n.starts_with(PREFIX))) {
                match rrc_container::kill(&reg, r) {
                    Ok(()) => rep.removed.push(format!("container {} (pid {}) in {}", r.id, r.pid, r.netns.as_deref().unwrap_or(""))),
                    Err(e) => errs.push(LabError::Other(format!("removing container {}: {e}", r.id))),
                }
            }
        }
        Err(e) => errs.push(LabError::Other(format!("reading the container registry: {e}"))),
    }

    // 2. The cgroup tree: every process started with `rrc lab exec`.
    if Path::new(CGROUP_ROOT).exists() {
        let n = cgroup::count_recursive(Path::new(CGROUP_ROOT));
        match cgroup::remove_tree(Path::new(CGROUP_ROOT)) {
            Ok(()) => rep.removed.push(format!("cgroup tree {CGROUP_ROOT} ({n} process(es) killed)")),
            Err(e) => errs.push(e),
        }
    }

    // 3. Any other process still inside a lab namespace, then the namespaces.
    for name in &names {
        let path = ns::netns_path(name);
        if let Some(id) = ns::ns_id(&path) {
            match kill_netns_pids(id, name) {
                Ok(0) => {}
                Ok(n) => rep.removed.push(format!("{n} process(es) in {name}")),
                Err(e) => errs.push(e),
            }
        }
        match ip(&format!("removing the network namespace {name}"), &["netns", "del", name]) {
            Ok(_) => rep.removed.push(format!("network namespace {name}")),
            Err(e) => {
                // `ip netns del` of a name whose mount a crash never made
                // may fail on the unmount; the name itself must go.
                match std::fs::remove_file(&path) {
                    Ok(()) => rep.removed.push(format!("network namespace name {name}")),
                    Err(r) if r.kind() == std::io::ErrorKind::NotFound => rep.removed.push(format!("network namespace {name}")),
                    Err(_) => errs.push(e),
                }
            }
        }
    }

    // 4. Directories.
    for dir in [STATE_ROOT, RUN_DIR, crate::etcd::DATA_ROOT] {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => rep.removed.push(dir.to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => errs.push(io(format!("removing {dir}"))(e)),
        }
    }

    match errs.len() {
        0 => Ok(rep),
        1 => Err(errs.pop().expect("one error")),
        _ => Err(LabError::Many(errs)),
    }
}
