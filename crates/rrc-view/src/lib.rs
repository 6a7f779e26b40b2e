//! Views and leases (issue 15; Tardigrade §3.2, DESIGN §7): which host may
//! act for a service, and until when.
//!
//! - [`view`]: a view (number, primary, backup, spares) and what may
//!   follow it;
//! - [`lease`]: a host acts in a view only while it holds the view's lease;
//!   whoever moves the service IP waits until the old holder's lease has
//!   run out (lease-based fencing, with the clock-rate bound it assumes);
//! - [`suspicion`]: a peer's silence starts a view change by
//!   compare-and-swap, never more;
//! - [`etcd`]: where views live (etcd v3's JSON gateway).
//!
//! Everything but [`etcd`] decides without I/O and is driven by unit tests;
//! the agent's `views` module does the I/O and the acting.

pub mod error;
pub mod etcd;
pub mod lease;
pub mod suspicion;
pub mod view;

pub use error::ViewError;
pub use etcd::{Etcd, EtcdTls, Swap};
pub use lease::{takeover_delay, Action, Found, Keeper, LeaseStatus, LeaseTiming, Standing};
pub use suspicion::{Answer, Next, Request, Suspicion};
pub use view::{Change, Keys, Role, View};
