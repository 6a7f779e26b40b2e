//! Helpers the root tests share: commands, network namespaces, waiting,
//! TCP_INFO, a client and a server namespace on one veth (`Pair`).

#![allow(dead_code)] // each test binary uses its own subset

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub fn run(what: &str, args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{what}: `{}` failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

pub fn ns_exec(ns: &str, what: &str, cmd: &[&str]) {
    let mut args = vec!["ip", "netns", "exec", ns];
    args.extend_from_slice(cmd);
    run(what, &args);
}

/// Joins network namespace `ns` on the calling thread (sockets created
/// afterwards belong to it wherever they are used).
pub fn enter_netns(ns: &str) {
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
    // SAFETY: setns on this thread only.
    let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns({path}): {}", std::io::Error::last_os_error());
}

pub fn spawn_in_netns<T: Send + 'static>(
    ns: &str,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            enter_netns(&ns);
            f()
        })
        .expect("spawning a thread")
}

pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in_netns(ns, "netns", f)
        .join()
        .expect("netns thread panicked")
}

pub fn tcp_info(conn: &TcpStream) -> libc::tcp_info {
    // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_INFO,
            &mut ti as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(r, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    ti
}

pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + timeout;
    loop {
        match cond() {
            Ok(()) => return,
            Err(why) if Instant::now() >= deadline => {
                panic!("{what}: not reached within {timeout:?}: {why}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 79, 1, 1);
pub const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 79, 1, 2), 8080);

/// A client and a server namespace on one veth; timestamps and window
/// scaling off in both (the spec made here carries neither).
pub struct Pair {
    pub client: String,
    pub server: String,
}

impl Pair {
    pub fn build(test: &str) -> Pair {
        let tag = format!("rrc-t-{:x}-{test}", std::process::id());
        let p = Pair { client: format!("{tag}-c"), server: format!("{tag}-s") };
        for ns in [&p.client, &p.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output(); // an earlier run's
            run("creating a netns", &["ip", "netns", "add", ns]);
            run("lo up", &["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        run("veth", &["ip", "-n", &p.client, "link", "add", "v0", "type", "veth", "peer", "name", "v0", "netns", &p.server]);
        for (ns, addr) in [(&p.client, CLIENT_IP), (&p.server, *SERVER.ip())] {
            run("address", &["ip", "-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "v0"]);
            run("link up", &["ip", "-n", ns, "link", "set", "v0", "up"]);
            for knob in ["net.ipv4.tcp_timestamps=0", "net.ipv4.tcp_window_scaling=0"] {
                run("sysctl", &["ip", "netns", "exec", ns, "sysctl", "-qw", knob]);
            }
        }
        p
    }

    /// A connection: (client's end, server's end), both in their namespaces.
    pub fn connect(&self) -> (TcpStream, TcpStream) {
        let listener = in_netns(&self.server, || TcpListener::bind(SERVER).expect("listen"));
        let client = in_netns(&self.client, || TcpStream::connect(SERVER).expect("connect"));
        let (server, _) = listener.accept().expect("accept");
        for s in [&client, &server] {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        (client, server)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.client, &self.server] {
            if let Err(e) = Command::new("ip").args(["netns", "del", ns]).output() {
                eprintln!("cleanup: ip netns del {ns}: {e}");
            }
        }
    }
}

