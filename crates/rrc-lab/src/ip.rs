//! Running iproute2's `ip`: every call names the step it belongs to, and a
//! failure reports the command line and its stderr.

use std::process::{Command, Stdio};

use crate::error::LabError;

/// `ip ARGS...`; Ok(stdout) on exit 0.
pub fn ip(step: &str, args: &[&str]) -> Result<String, LabError> {
    let command = format!("ip {}", args.join(" "));
    tracing::debug!(step, command = %command, "running");
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Spawn { step: step.into(), command: command.clone(), source })?;
    if !out.status.success() {
        return Err(LabError::Command {
            step: step.into(),
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip -n NETNS ARGS...`
pub fn ip_in(netns: &str, step: &str, args: &[&str]) -> Result<String, LabError> {
    let mut v = vec!["-n", netns];
    v.extend_from_slice(args);
    ip(step, &v)
}

/// `ip -j -n NETNS ARGS...` parsed as JSON.
pub fn ip_json(netns: &str, step: &str, args: &[&str]) -> Result<serde_json::Value, LabError> {
    let mut v = vec!["-j", "-n", netns];
    v.extend_from_slice(args);
    let out = ip(step, &v)?;
    if out.trim().is_empty() {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    serde_json::from_str(&out).map_err(|e| LabError::Other(format!("{step}: cannot parse the JSON of `ip {}`: {e}", v.join(" "))))
}
