//! Re-protection (issue 4 §4; Tardigrade §3.2): a service running
//! without a backup (after a failover, or after its backup failed) gets
//! the spare as its new backup, its connections and data directory
//! included, and its epochs start again.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rrc_container::{Config as ContainerConfig, Record};
use rrc_wire::msg::{ConnSeed, Mode, ServiceSpec};
use rrc_wire::reply::{DataCopyReport, FailoverReport, Reprotection};
use rrc_wire::FrameKind;

use crate::data_dir::{copy_held, fileops_frames};
use crate::net::ContainerNet;
use crate::primary::{assemble, attach_log_session, connect_backup, Primary};
use crate::{lock, Agent};

/// Re-protection (issue 4 §4; Tardigrade §3.2): the service runs on this
/// host without a backup (after a failover); `spec.spare`'s agent becomes
/// its backup, joining the established connections (`seeds`), and the
/// epochs start again with a full checkpoint. The service keeps running.
#[allow(clippy::too_many_arguments)]
pub fn reprotect(
    agent: &Arc<Agent>,
    old: &ServiceSpec,
    record: Record,
    ccfg: ContainerConfig,
    net: ContainerNet,
    seeds: Vec<ConnSeed>,
    mut failovers: Vec<FailoverReport>,
    data_at_restore: Option<&std::path::Path>,
) -> Result<Arc<Primary>> {
    let t0 = Instant::now();
    let spare = old.spare.clone().context("no spare host was given (--spare)")?;
    if spare == agent.cfg.name {
        bail!("the spare {spare} is this host");
    }
    // With views (issue 15): the view naming the spare as backup is
    // installed before the spare is asked (it checks that it is).
    if let Some(v) = agent.view(&old.name) {
        let view = v.reprotect(&spare)?;
        tracing::info!(service = %old.name, "view {} installed: backup {spare}", view.number);
    }
    // The data directory: the spare gets its content as it was at the
    // restore (kept aside by the failover); the first checkpoint carries
    // every change since, which the restored library journalled from its
    // first instruction on. After a backup failure there is no such copy:
    // one is made now, with the service held for the copy's duration.
    let mut data_copy: Option<(std::path::PathBuf, DataCopyReport)> = None;
    let data_init = match (&old.data_dir, data_at_restore) {
        (None, _) => None,
        (Some(_), Some(dir)) => Some(
            rrc_store::datadir::snapshot_ops(dir)
                .map(|ops| fileops_frames(&ops))
                .with_context(|| format!("reading the data directory as restored ({})", dir.display()))?,
        ),
        (Some(d), None) => {
            let (copy, report) = copy_held(agent, &old.name, d, record.pid)?;
            let ops = rrc_store::datadir::snapshot_ops(&copy)
                .map(|ops| fileops_frames(&ops))
                .with_context(|| format!("reading the data directory's copy ({})", copy.display()));
            let ops = match ops {
                Ok(o) => o,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&copy);
                    return Err(e);
                }
            };
            data_copy = Some((copy, report));
            Some(ops)
        }
    };
    // Whatever fails from here on, the copy goes; once re-protected it
    // stays with the service until it stops.
    let remove_copy = |c: &Option<(std::path::PathBuf, DataCopyReport)>| {
        if let Some((dir, _)) = c {
            let _ = std::fs::remove_dir_all(dir);
        }
    };
    let spec = spec_for_spare(agent, old, &spare);
    let kept_seeds = seeds.clone();
    let (mut conn, ready, hb_sock) = match connect_backup(agent, &spec, seeds) {
        Ok(c) => c,
        Err(e) => {
            remove_copy(&data_copy);
            return Err(e);
        }
    };
    if let Some(init) = &data_init {
        if let Err(e) = init.iter().try_for_each(|p| conn.writer.send(FrameKind::DataDirInit, p)).context("sending the data directory's content") {
            remove_copy(&data_copy);
            return Err(e);
        }
    }
    // Replies through the new backup, which now answers ARP for the
    // service IP (it sent a gratuitous ARP); this host stops answering.
    if let Err(e) = net.add_reply_route(&ready.backup_addr, &agent.cfg.repl_if) {
        remove_copy(&data_copy);
        return Err(e);
    }
    crate::net::unadvertise(&spec.service_ip, &agent.cfg.front_if);
    if let Some(last) = failovers.last_mut() {
        last.reprotected = Some(Reprotection {
            new_backup: Some(spare.clone()),
            at: crate::now_rfc3339(),
            ms: crate::ms(t0.elapsed()),
            data_copy: data_copy.as_ref().map(|(_, report)| report.clone()),
        });
    }
    let mut p = match assemble(agent, spec, conn, ready, hb_sock, record, ccfg, net, failovers, kept_seeds) {
        Ok(p) => p,
        Err(e) => {
            remove_copy(&data_copy);
            return Err(e);
        }
    };
    if p.spec.mode == Mode::Rr {
        match attach_log_session(agent, &p.spec, p.pid) {
            Ok(ctl) => p.log_ctl = Some(ctl),
            // (a failover that fell back to the checkpoint alone restored
            // a process that records nothing)
            Err(e) => tracing::warn!(service = %p.spec.name, "re-protected without the record log, replies wait for the checkpoints: {e:#}"),
        }
    }
    let p = Arc::new(p);
    *lock(&p.data_copy) = data_copy.map(|(dir, _)| dir);
    if let Err(e) = p.run_threads() {
        if let Some(dir) = lock(&p.data_copy).take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        return Err(e);
    }
    tracing::info!(service = %p.spec.name, backup = %p.spec.backup, "re-protected");
    Ok(p)
}

/// The service's spec with this host as primary and the spare as backup.
fn spec_for_spare(agent: &Agent, old: &ServiceSpec, spare: &str) -> ServiceSpec {
    let mut spec = old.clone();
    spec.primary = agent.cfg.name.clone();
    spec.backup = spare.to_string();
    spec.spare = None;
    spec
}
