//! The `rrc` binary end to end (needs root). Tests that need the C runtime
//! (runtime/build/librrc.so, rrc-restore; `make runtime`; or the build in
//! $RRC_LIBDIR when set) fail when it is not built: `make test` builds it
//! first, and a test that quietly passes without its subject proves nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{repo, require_runtime, rrc};

fn vectors() -> PathBuf {
    repo().join("tests/vectors")
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output { status, stdout, stderr } = cmd.output().expect("running rrc");
    (status.code().unwrap_or(-1), String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned())
}

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rrc-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    let _ = std::fs::remove_file(&p);
    p
}

/// Removes the container and the directories of a test, pass or fail.
struct Cleanup {
    pid: Option<i32>,
    paths: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            if registry_has(|r| r["pid"] == pid) {
                let _ = rrc().args(["kill", "--pid", &pid.to_string()]).output();
            }
        }
        for p in &self.paths {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

fn registry_has(pred: impl Fn(&Value) -> bool) -> bool {
    let (code, out, err) = run(rrc().args(["ps", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v.as_array().unwrap().iter().any(pred)
}

#[test]
fn inspect_valid_vectors() {
    let exp: Value = serde_json::from_str(&std::fs::read_to_string(vectors().join("vectors.json")).unwrap()).unwrap();
    for (name, members) in exp["chains"].as_object().unwrap() {
        let (code, out, err) = run(rrc().args(["inspect", "--json", "--images"]).arg(vectors().join(name)));
        assert_eq!(code, 0, "{name}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["ok"], true);
        let imgs = v["images"].as_array().unwrap();
        assert_eq!(imgs.len(), members.as_array().unwrap().len());
        for (img, m) in imgs.iter().zip(members.as_array().unwrap()) {
            let e = &exp["images"][m.as_str().unwrap()];
            assert_eq!(img["image_id"], e["image_id"]);
            assert_eq!(img["parent_id"], e["parent_id"]);
            assert_eq!(img["sequence"], e["sequence"]);
            assert_eq!(img["pages_in_image"], e["pages_in_image"]);
            assert_eq!(img["threads"].as_u64().unwrap() as usize, e["threads"].as_array().unwrap().len());
        }
        let (code, out, _) = run(rrc().args(["inspect", "--images"]).arg(vectors().join(name)));
        assert_eq!(code, 0);
        assert!(out.contains("verified") && out.contains("fds 11 ("), "{out}");
    }
}

#[test]
fn inspect_broken_vectors_exit_1_with_the_cause() {
    let exp: Value = serde_json::from_str(&std::fs::read_to_string(vectors().join("vectors.json")).unwrap()).unwrap();
    for (dir, kind) in exp["errors"].as_object().unwrap() {
        let (code, out, err) = run(rrc().args(["inspect", "--json", "--images"]).arg(vectors().join(dir)));
        assert_eq!(code, 1, "{dir}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"], *kind, "{dir}: {err}");
        assert!(err.contains(&format!("{dir}/")), "{dir}: stderr does not name the file: {err}");
    }
    let (_, _, err) = run(rrc().args(["inspect", "--images"]).arg(vectors().join("version2")));
    assert!(err.contains("version 2, this rrc reads version 1"), "{err}");
    let (_, _, err) = run(rrc().args(["inspect", "--images"]).arg(vectors().join("truncated")));
    assert!(err.contains("no END section"), "{err}");
}

#[test]
fn restore_verifies_the_chain_before_starting_anything() {
    let dir = vectors().join("bad-payload-crc");
    let (code, _, err) = run(rrc().args(["restore", "--images"]).arg(&dir));
    assert_eq!(code, 1);
    assert!(err.contains("verifying the checkpoint chain") && err.contains("payload CRC mismatch"), "{err}");
    assert!(!registry_has(|r| r["restored_from"].as_str() == dir.to_str()));
}

#[test]
fn exec_without_the_library_fails_before_starting() {
    let (code, out, err) = run(rrc().env("RRC_LIBDIR", "/nonexistent-rrc").args(["exec", "--", "sleep", "100"]));
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("librrc.so not found") && err.contains("/nonexistent-rrc/librrc.so"), "{err}");
}

/// A library that the dynamic loader refuses: the process runs without it
/// and never answers; rrc says why, shows the log, removes the container.
#[test]
fn exec_with_an_unloadable_library_fails_at_ping() {
    let libdir = tmp("junklib");
    std::fs::create_dir_all(&libdir).unwrap();
    std::fs::write(libdir.join("librrc.so"), b"not an ELF").unwrap();
    let log = tmp("junklib.log");
    let (code, out, err) = run(rrc().env("RRC_LIBDIR", &libdir).args(["exec", "--log"]).arg(&log).args(["--", "sleep", "100"]));
    assert_eq!(code, 1);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("did not answer PING"), "{err}");
    assert!(err.contains("librrc.so is not loaded"), "{err}");
    assert!(err.contains("cannot be preloaded"), "log tail missing: {err}");
    assert!(err.contains("removed"), "{err}");
    assert!(!registry_has(|r| r["log"].as_str() == log.to_str()));
    std::fs::remove_dir_all(&libdir).unwrap();
    std::fs::remove_file(&log).unwrap();
}

#[test]
fn exec_reports_an_early_exit_with_status_and_log() {
    let libdir = tmp("junklib2");
    std::fs::create_dir_all(&libdir).unwrap();
    std::fs::write(libdir.join("librrc.so"), b"not an ELF").unwrap();
    let log = tmp("early.log");
    let (code, _, err) = run(rrc()
        .env("RRC_LIBDIR", &libdir)
        .args(["exec", "--log"])
        .arg(&log)
        .args(["--", "sh", "-c", "echo goodbye from the service; exit 7"]));
    assert_eq!(code, 1);
    assert!(err.contains("exited with status 7 before its library answered PING"), "{err}");
    assert!(err.contains("goodbye from the service"), "{err}");
    assert!(!registry_has(|r| r["log"].as_str() == log.to_str()));
    std::fs::remove_dir_all(&libdir).unwrap();
    std::fs::remove_file(&log).unwrap();
}

#[test]
fn kill_and_dump_of_unknown_pid_fail_clearly() {
    let (code, _, err) = run(rrc().args(["kill", "--pid", "999999999"]));
    assert_eq!(code, 1);
    assert!(err.contains("no container with pid 999999999"), "{err}");
    let (code, _, err) = run(rrc().args(["dump", "--pid", "999999999", "--images", "/tmp/rrc-never"]));
    assert_eq!(code, 1);
    assert!(err.contains("is not a container started by rrc"), "{err}");
    assert!(!Path::new("/tmp/rrc-never").exists());
}

/// rrc-restore's status record reaches the user: the vector image maps a
/// file that does not exist on this machine.
#[test]
fn restore_surfaces_the_restorer_error_and_removes_the_container() {
    require_runtime();
    let dir = vectors().join("incr");
    let (code, out, err) = run(rrc().args(["restore", "--images"]).arg(&dir));
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("rrc-restore failed:") && err.contains("/usr/bin/vector-test"), "{err}");
    assert!(!registry_has(|r| r["restored_from"].as_str() == dir.to_str()));
}

/// exec -> full dump (left running) -> incremental dump -> inspect ->
/// restore -> kill.
#[test]
fn exec_dump_incremental_inspect() {
    require_runtime();
    let log = tmp("flow.log");
    let (code, out, err) = run(rrc().args(["exec", "--log"]).arg(&log).args(["--", "sleep", "1000"]));
    assert_eq!(code, 0, "{err}");
    let pid: i32 = out.lines().last().unwrap().trim().parse().unwrap();
    let (ck0, ck1) = (tmp("ck0"), tmp("ck1"));
    let _cleanup = Cleanup { pid: Some(pid), paths: vec![ck0.clone(), ck1.clone(), log.clone()] };

    let (code, out, err) = run(rrc().args(["dump", "--json", "--leave-running", "--pid", &pid.to_string(), "--images"]).arg(&ck0));
    assert_eq!(code, 0, "{err}");
    let d0: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(d0["full"], true);
    assert_eq!(d0["sequence"], 0);
    assert_eq!(d0["parent_id"], Value::Null);
    for k in [
        "pause_us", "quiesce_us", "scan_us", "capture_us", "fork_us", "copy_us", "copied_pages", "precopy_us", "precopy_pages", "precopy_passes",
        "write_us", "total_us", "pages", "bytes", "threads", "untracked_vmas", "written_pages",
    ] {
        assert!(d0[k].is_u64(), "{k} missing in {d0}");
    }
    // The default snapshot is a fork: nothing is copied.
    assert_eq!(d0["snapshot"], "fork");
    assert_eq!((d0["copied_pages"].as_u64(), d0["precopy_passes"].as_u64()), (Some(0), Some(0)));
    assert_eq!(d0["bytes"].as_u64().unwrap(), std::fs::metadata(ck0.join("checkpoint.rrc")).unwrap().len());
    assert!(registry_has(|r| r["pid"] == pid && r["running"] == true));

    // A second dump into the same directory is refused.
    let (code, _, err) = run(rrc().args(["dump", "--leave-running", "--pid", &pid.to_string(), "--images"]).arg(&ck0));
    assert_eq!(code, 1);
    assert!(err.contains("a directory holds one checkpoint"), "{err}");

    let (code, out, err) = run(rrc().args(["dump", "--json", "--pid", &pid.to_string(), "--images"]).arg(&ck1).arg("--parent").arg(&ck0));
    assert_eq!(code, 0, "{err}");
    let d1: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(d1["full"], false);
    assert_eq!(d1["sequence"], 1);
    assert_eq!(d1["parent_id"], d0["image_id"]);
    assert_eq!(std::fs::read_link(ck1.join("parent")).unwrap(), ck0);
    // Without --leave-running the container is gone.
    assert!(!registry_has(|r| r["pid"] == pid));

    let (code, out, err) = run(rrc().args(["inspect", "--json", "--images"]).arg(&ck1));
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["images"][0]["image_id"], d0["image_id"]);
    assert_eq!(s["images"][1]["image_id"], d1["image_id"]);
    assert_eq!(s["images"][1]["comm"], "sleep");

    // Restore the chain: rrc returns once the restored library answered
    // PING with restored=1.
    let (code, out, err) = run(rrc().args(["restore", "--json", "--log"]).arg(&log).arg("--images").arg(&ck1));
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let rpid = r["pid"].as_i64().unwrap() as i32;
    let _cleanup_restored = Cleanup { pid: Some(rpid), paths: vec![] };
    assert_eq!(r["restored_from"].as_str(), ck1.to_str());
    assert_eq!(r["images"], 2);
    assert!(registry_has(|e| e["pid"] == rpid && e["running"] == true));
    // The restored process is the image's: its comm, pid 1 in its namespace.
    assert_eq!(std::fs::read_to_string(format!("/proc/{rpid}/comm")).unwrap().trim(), "sleep");
    let status = std::fs::read_to_string(format!("/proc/{rpid}/status")).unwrap();
    assert!(status.lines().any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")), "{status}");
    let (code, _, err) = run(rrc().args(["kill", "--pid", &rpid.to_string()]));
    assert_eq!(code, 0, "{err}");
    assert!(!registry_has(|e| e["pid"] == rpid));
}

#[test]
fn help_documents_every_verb() {
    let (code, out, _) = run(rrc().arg("--help"));
    assert_eq!(code, 0);
    for verb in ["exec", "dump", "restore", "inspect", "ps", "kill"] {
        assert!(out.contains(verb), "{verb} missing from --help");
    }
    let (_, out, _) = run(rrc().args(["dump", "--help"]));
    for flag in ["--pid", "--images", "--parent", "--leave-running", "--snapshot", "--json"] {
        assert!(out.contains(flag), "{flag} missing from dump --help");
    }
    assert!(out.contains("- fork: ") && out.contains("- copy: "), "snapshot kinds missing from dump --help: {out}");
}
