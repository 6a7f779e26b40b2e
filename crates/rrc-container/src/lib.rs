//! Containers for rrc: a command started as pid 1 of fresh pid, mount, uts
//! and ipc namespaces (optionally in a named network namespace), in its own
//! cgroup v2 group, with a fresh /proc and a private tmpfs on
//! /run/rrc-container (where librrc.so puts its control socket); and the
//! registry of the containers started (/run/rrc/containers/<id>.json).

mod container;
mod error;
mod init;
mod registry;

pub use container::{
    control_socket_of, is_running, kill, liveness, spawn, Bind, Config, Container, Liveness, Spec, CONTAINER_RUN_DIR, CONTROL_SOCKET_NAME,
    DEFAULT_CGROUP_ROOT,
};
pub use error::ContainerError;
pub use init::Stage;
pub use registry::{now_rfc3339, Record, Registry, DEFAULT_REGISTRY_DIR};
