//! The etcd client against a real etcd (Debian's etcd-server, installed by
//! scripts/setup.sh): one member on loopback, in a directory of its own,
//! removed afterwards. Fails (does not skip) when `etcd` is missing. The
//! TLS member's certificates are made as the lab makes them (rrc-lab's
//! `Pki`, with Debian's openssl).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rrc_lab::etcd_pki::Pki;
use rrc_view::{Change, Etcd, EtcdTls, Found, Swap, View, ViewError};

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
    start_member(None)
}

/// One member; with `pki`, TLS only and a client certificate of its CA
/// required (`--client-cert-auth`), as the lab's members run.
fn start_member(pki: Option<&Pki>) -> Member {
    let dir = std::env::temp_dir().join(format!("rrc-view-etcd-{}-{}", std::process::id(), pki.is_some()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (cp, pp) = (free_port(), free_port());
    let scheme = if pki.is_some() { "https" } else { "http" };
    let client = format!("{scheme}://127.0.0.1:{cp}");
    let peer = format!("http://127.0.0.1:{pp}");
    let mut cmd = Command::new("etcd");
    cmd.args(["--name", "t", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("t={peer}")]);
    if let Some(p) = pki {
        cmd.arg("--cert-file").arg(p.cert("m")).arg("--key-file").arg(p.key("m"));
        cmd.arg("--client-cert-auth").arg("--trusted-ca-file").arg(p.ca());
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap())
        .spawn()
        .expect("etcd (Debian's etcd-server) must be installed: scripts/setup.sh installs it");
    let m = Member { child, dir, client };
    let tls = pki.map(|p| tls_of(p, p, "client"));
    let e = Etcd::new(std::slice::from_ref(&m.client), Duration::from_millis(500), tls.as_ref()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while e.read_view("/probe").is_err() {
        assert!(Instant::now() < deadline, "etcd did not answer in 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    m
}

/// Trusting `trust`'s CA, with `holder`'s certificate `name`.
fn tls_of(trust: &Pki, holder: &Pki, name: &str) -> EtcdTls {
    EtcdTls { ca: trust.ca(), cert: holder.cert(name), key: holder.key(name) }
}

#[test]
fn views_follow_one_another_by_compare_and_swap_on_a_real_etcd() {
    let m = start_etcd();
    // a dead endpoint first: the client goes on to the next
    let dead = format!("http://127.0.0.1:{}", free_port());
    let e = Etcd::new(&[dead, m.client.clone()], Duration::from_millis(500), None).unwrap();
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

    // listed below the prefix, with its revision; a neighbour's prefix is not
    let other = View::first("x", "y", &[], Duration::from_millis(1000));
    let Swap::Done { .. } = e.swap_view("/rrc/v1/services/t2/view", 0, &other).unwrap() else { panic!("a second service") };
    let Swap::Done { .. } = e.swap_view("/rrc/v1/servicesX", 0, &other).unwrap() else { panic!("a key beside the prefix") };
    let listed: Vec<(String, Found)> = e.list_views("/rrc/v1/services/").unwrap().into_iter().map(|(k, f)| (k, f.unwrap())).collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0], (key.to_string(), Found::At { view: by_b.clone(), rev: r2 }));
    assert_eq!(listed[1].0, "/rrc/v1/services/t2/view");

    // deleting by an old revision is refused; by the current one done
    assert!(matches!(e.delete_view(key, r1).unwrap(), Swap::Refused(_)));
    assert_eq!(e.delete_view(key, r2).unwrap(), Swap::Done { rev: 0 });
    assert_eq!(e.read_view(key).unwrap(), Found::Absent);
    let health = e.health();
    assert!(health[0].1.is_err() && health[1].1.is_ok(), "{health:?}");
}

#[test]
fn nothing_answering_is_unreachable_not_a_refusal() {
    let e = Etcd::new(&[format!("127.0.0.1:{}", free_port())], Duration::from_millis(200), None).unwrap();
    let v = View::first("a", "b", &[], Duration::from_millis(1000));
    assert!(matches!(e.swap_view("/k", 0, &v), Err(ViewError::Unreachable(_))));
    assert!(matches!(e.read_view("/k"), Err(ViewError::Unreachable(_))));
}

/// A member run as the lab runs them (TLS, `--client-cert-auth`) answers a
/// holder of its CA's client certificate, and no one else: not a client
/// without TLS, not one whose certificate another CA signed (a forged
/// peer), and a client that does not trust the member's CA refuses it.
#[test]
fn over_tls_only_the_deployments_certificates_reach_a_view() {
    let base = std::env::temp_dir().join(format!("rrc-view-pki-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (good, rogue) = (Pki::at(base.join("good")), Pki::at(base.join("rogue")));
    good.make(&[("m", "127.0.0.1")], &["client"]).unwrap();
    rogue.make(&[("m", "127.0.0.1")], &["client"]).unwrap();
    let m = start_member(Some(&good));
    let ms = Duration::from_millis(500);
    let key = "/rrc/v1/services/t/view";
    let v1 = View::first("a", "b", &[], Duration::from_millis(1000));

    let e = Etcd::new(std::slice::from_ref(&m.client), ms, Some(&tls_of(&good, &good, "client"))).unwrap();
    assert!(e.tls());
    let Swap::Done { rev } = e.swap_view(key, 0, &v1).unwrap() else { panic!("creating the view over TLS") };
    assert_eq!(e.read_view(key).unwrap(), Found::At { view: v1.clone(), rev });

    // a forged client: a certificate of another CA
    let forged = Etcd::new(std::slice::from_ref(&m.client), ms, Some(&tls_of(&good, &rogue, "client"))).unwrap();
    let err = forged.swap_view(key, rev, &v1.successor("b", &Change::PromoteBackup).unwrap()).unwrap_err();
    assert!(matches!(&err, ViewError::Unreachable(w) if w.to_lowercase().contains("certificate")), "{err}");
    // a client that trusts another CA refuses the member, naming why
    let misled = Etcd::new(std::slice::from_ref(&m.client), ms, Some(&tls_of(&rogue, &good, "client"))).unwrap();
    let err = misled.read_view(key).unwrap_err();
    assert!(matches!(&err, ViewError::Unreachable(w) if w.contains("UnknownIssuer")), "{err}");
    // plain http to the TLS port gets no view either
    let plain = Etcd::new(&[m.client.replace("https://", "http://")], ms, None).unwrap();
    assert!(plain.read_view(key).is_err());
    // and nothing was changed by any of them
    assert_eq!(e.read_view(key).unwrap(), Found::At { view: v1, rev });
    drop(m);
    let _ = std::fs::remove_dir_all(&base);
}
