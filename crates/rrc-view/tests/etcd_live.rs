//! The etcd client against a real etcd (Debian's etcd-server, installed by
//! scripts/setup.sh): one member on loopback, in a directory of its own,
//! removed afterwards. Fails (does not skip) when `etcd` is missing.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rrc_view::{Change, Etcd, Found, Swap, View, ViewError};

struct Member {
    child: Child,
    dir: std::path::PathBuf,
    client: String,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_etcd() -> Member {
    let dir = std::env::temp_dir().join(format!("rrc-view-etcd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (cp, pp) = (free_port(), free_port());
    let client = format!("http://127.0.0.1:{cp}");
    let peer = format!("http://127.0.0.1:{pp}");
    let child = Command::new("etcd")
        .args(["--name", "t", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("t={peer}")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap())
        .spawn()
        .expect("etcd (Debian's etcd-server) must be installed: scripts/setup.sh installs it");
    let m = Member { child, dir, client };
    let e = Etcd::new(std::slice::from_ref(&m.client), Duration::from_millis(500)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while e.read_view("/probe").is_err() {
        assert!(Instant::now() < deadline, "etcd did not answer in 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    m
}

#[test]
fn views_follow_one_another_by_compare_and_swap_on_a_real_etcd() {
    let m = start_etcd();
    // a dead endpoint first: the client goes on to the next
    let dead = format!("http://127.0.0.1:{}", free_port());
    let e = Etcd::new(&[dead, m.client.clone()], Duration::from_millis(500)).unwrap();
    let key = "/rrc/v1/services/t/view";
    assert_eq!(e.read_view(key).unwrap(), Found::Absent);

    let v1 = View::first("a", "b", &["c".into()], Duration::from_millis(1000));
    let Swap::Done { rev: r1 } = e.swap_view(key, 0, &v1).unwrap() else { panic!("creating the first view") };
    assert_eq!(e.read_view(key).unwrap(), Found::At { view: v1.clone(), rev: r1 });
    // creating it again is refused, with what is there
    assert_eq!(e.swap_view(key, 0, &v1).unwrap(), Swap::Refused(Found::At { view: v1.clone(), rev: r1 }));

    // both suspect: b's swap wins, a's (from the same revision) is refused
    let by_b = v1.successor("b", &Change::PromoteBackup).unwrap();
    let by_a = v1.successor("a", &Change::DropBackup).unwrap();
    let Swap::Done { rev: r2 } = e.swap_view(key, r1, &by_b).unwrap() else { panic!("b's swap") };
    assert!(r2 > r1);
    assert_eq!(e.swap_view(key, r1, &by_a).unwrap(), Swap::Refused(Found::At { view: by_b.clone(), rev: r2 }));

    // deleting by an old revision is refused; by the current one done
    assert!(matches!(e.delete_view(key, r1).unwrap(), Swap::Refused(_)));
    assert_eq!(e.delete_view(key, r2).unwrap(), Swap::Done { rev: 0 });
    assert_eq!(e.read_view(key).unwrap(), Found::Absent);
    let health = e.health();
    assert!(health[0].1.is_err() && health[1].1.is_ok(), "{health:?}");
}

#[test]
fn nothing_answering_is_unreachable_not_a_refusal() {
    let e = Etcd::new(&[format!("127.0.0.1:{}", free_port())], Duration::from_millis(200)).unwrap();
    let v = View::first("a", "b", &[], Duration::from_millis(1000));
    assert!(matches!(e.swap_view("/k", 0, &v), Err(ViewError::Unreachable(_))));
    assert!(matches!(e.read_view("/k"), Err(ViewError::Unreachable(_))));
}
