//! A service's view (Tardigrade §3.2, after Vertical Paxos): its number,
//! its primary, its backup and its spares. Views follow one another by
//! compare-and-swap in etcd; this module decides what the next one is,
//! with no I/O.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ViewError;

/// One view of a service, as stored (JSON) under [`Keys::view`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    /// Grows by one with every change; 1 for the service's first view.
    pub number: u64,
    pub primary: String,
    /// None: the primary serves alone (unprotected).
    pub backup: Option<String>,
    /// Hosts that may become the backup (re-protection).
    #[serde(default)]
    pub spares: Vec<String>,
    /// The lease every host of this view acts under, in ms. Part of the
    /// view so that all its hosts and whoever changes it use one figure.
    pub lease_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Primary,
    Backup,
    Spare,
}

/// Why a view changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The backup, having found its primary silent, becomes the primary.
    PromoteBackup,
    /// The primary, having found its backup silent, serves alone.
    DropBackup,
    /// The primary (alone) takes this spare as its new backup.
    Reprotect { spare: String },
}

/// "view 2 (primary b, backup none)": how logs and messages name a view.
impl std::fmt::Display for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "view {} (primary {}, backup {})", self.number, self.primary, self.backup.as_deref().unwrap_or("none"))
    }
}

impl View {
    /// The first view of a service.
    pub fn first(primary: &str, backup: &str, spares: &[String], lease: Duration) -> View {
        View { number: 1, primary: primary.into(), backup: Some(backup.into()), spares: spares.to_vec(), lease_ms: lease.as_millis() as u64 }
    }

    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The host that holds the service IP (and so releases what clients
    /// receive): the backup, whose gate every packet crosses (RRC §3), or
    /// the primary when it serves alone.
    pub fn ip_holder(&self) -> &str {
        self.backup.as_deref().unwrap_or(&self.primary)
    }

    pub fn role_of(&self, host: &str) -> Option<Role> {
        if self.primary == host {
            Some(Role::Primary)
        } else if self.backup.as_deref() == Some(host) {
            Some(Role::Backup)
        } else if self.spares.iter().any(|s| s == host) {
            Some(Role::Spare)
        } else {
            None
        }
    }

    /// The view that follows this one when `me` makes `change`. Refused
    /// when `me` has no right to it in this view: only the backup promotes
    /// itself, only the primary drops its backup or re-protects.
    pub fn successor(&self, me: &str, change: &Change) -> Result<View, ViewError> {
        let refuse = |why: String| ViewError::NotAllowed { view: self.number, host: me.into(), why };
        let mut next = self.clone();
        next.number = self.number.checked_add(1).ok_or_else(|| refuse("the view number is at its maximum".into()))?;
        match change {
            Change::PromoteBackup => {
                if self.backup.as_deref() != Some(me) {
                    return Err(refuse(format!("only the backup ({}) can take over from the primary", self.backup.as_deref().unwrap_or("none"))));
                }
                next.primary = me.into();
                next.backup = None;
            }
            Change::DropBackup => {
                if self.primary != me {
                    return Err(refuse(format!("only the primary ({}) can drop its backup", self.primary)));
                }
                if self.backup.is_none() {
                    return Err(refuse("there is no backup to drop".into()));
                }
                next.backup = None;
            }
            Change::Reprotect { spare } => {
                if self.primary != me {
                    return Err(refuse(format!("only the primary ({}) can take a new backup", self.primary)));
                }
                if self.backup.is_some() {
                    return Err(refuse(format!("the view has a backup ({})", self.ip_holder())));
                }
                if !self.spares.iter().any(|s| s == spare) {
                    return Err(refuse(format!("{spare} is not a spare of this view")));
                }
                next.backup = Some(spare.clone());
                next.spares.retain(|s| s != spare);
            }
        }
        Ok(next)
    }
}

/// Where a service's records live in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

/// The prefix of every key rrc writes (versioned, so that a later layout
/// can live beside this one).
pub const KEY_PREFIX: &str = "/rrc/v1/services/";

impl Keys {
    /// Service names are checked by the agent (no '/'); refused here too,
    /// since a '/' would put one service's key below another's.
    pub fn of(service: &str) -> Result<Keys, ViewError> {
        if service.is_empty() || service.contains('/') {
            return Err(ViewError::BadServiceName(service.into()));
        }
        Ok(Keys { prefix: format!("{KEY_PREFIX}{service}/") })
    }

    pub fn view(&self) -> String {
        format!("{}view", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> View {
        View::first("a", "b", &["c".into()], Duration::from_millis(1000))
    }

    #[test]
    fn the_ip_is_at_the_backup_while_there_is_one() {
        assert_eq!(v().ip_holder(), "b");
        let alone = v().successor("a", &Change::DropBackup).unwrap();
        assert_eq!(alone.ip_holder(), "a");
    }

    #[test]
    fn only_the_backup_promotes_itself() {
        let next = v().successor("b", &Change::PromoteBackup).unwrap();
        assert_eq!((next.number, next.primary.as_str(), next.backup.as_deref()), (2, "b", None));
        assert_eq!(next.spares, vec!["c".to_string()]);
        assert!(matches!(v().successor("a", &Change::PromoteBackup), Err(ViewError::NotAllowed { .. })));
        assert!(matches!(v().successor("c", &Change::PromoteBackup), Err(ViewError::NotAllowed { .. })));
    }

    #[test]
    fn only_the_primary_drops_its_backup() {
        assert!(matches!(v().successor("b", &Change::DropBackup), Err(ViewError::NotAllowed { .. })));
        let alone = v().successor("a", &Change::DropBackup).unwrap();
        assert!(matches!(alone.successor("a", &Change::DropBackup), Err(ViewError::NotAllowed { .. })));
        // a primary alone has no backup to be promoted
        assert!(matches!(alone.successor("b", &Change::PromoteBackup), Err(ViewError::NotAllowed { .. })));
    }

    #[test]
    fn reprotection_takes_a_spare_of_the_view() {
        let alone = v().successor("b", &Change::PromoteBackup).unwrap();
        let r = alone.successor("b", &Change::Reprotect { spare: "c".into() }).unwrap();
        assert_eq!((r.number, r.primary.as_str(), r.backup.as_deref(), r.spares.len()), (3, "b", Some("c"), 0));
        assert!(matches!(alone.successor("b", &Change::Reprotect { spare: "d".into() }), Err(ViewError::NotAllowed { .. })));
        assert!(matches!(v().successor("a", &Change::Reprotect { spare: "c".into() }), Err(ViewError::NotAllowed { .. })));
    }

    #[test]
    fn named_as_status_names_it() {
        assert_eq!(v().to_string(), "view 1 (primary a, backup b)");
        assert_eq!(v().successor("a", &Change::DropBackup).unwrap().to_string(), "view 2 (primary a, backup none)");
    }

    #[test]
    fn roles() {
        let v = v();
        assert_eq!(v.role_of("a"), Some(Role::Primary));
        assert_eq!(v.role_of("b"), Some(Role::Backup));
        assert_eq!(v.role_of("c"), Some(Role::Spare));
        assert_eq!(v.role_of("d"), None);
    }

    #[test]
    fn keys_refuse_names_that_would_nest() {
        assert_eq!(Keys::of("redis").unwrap().view(), "/rrc/v1/services/redis/view");
        assert!(Keys::of("a/b").is_err());
        assert!(Keys::of("").is_err());
    }

    #[test]
    fn json_round_trip() {
        let s = serde_json::to_string(&v()).unwrap();
        assert_eq!(serde_json::from_str::<View>(&s).unwrap(), v());
    }
}
