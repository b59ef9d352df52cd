//! TCP_NODELAY on PostgreSQL's connections.
//!
//! sqlx 0.9.0 stopped setting it on its TCP sockets (launchbadge/sqlx#4335, fixed upstream by
//! #4336, not released yet). Without it a statement larger than one TCP segment sends its last
//! partial segment only once the server acknowledges the ones before, and the server delays
//! that acknowledgement: 40 ms on Linux. Measured: 40–47 ms waits before a batch's INSERTs of
//! event bodies, which capped PostgreSQL renewals at about 290/s.
//!
//! sqlx gives no access to its socket, so each new connection (`after_connect`) sets the option
//! on every socket of this process, each through a duplicate of its descriptor taken with
//! `pidfd_getfd` on our own process: the option belongs to the socket, which both descriptors
//! share. A socket that is not TCP refuses it and is left as it was; the process's other TCP
//! sockets (HTTP, served and sent) get what hyper and reqwest set on theirs anyway. To be
//! removed when sqlx sets the option again.

/// Sets TCP_NODELAY on every TCP socket of this process; best effort, errors are ignored.
#[cfg(target_os = "linux")]
pub(super) fn set_on_open_sockets() {
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};
    let Ok(pidfd) = pidfd_open(getpid(), PidfdFlags::empty()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in entries.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let fd = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok());
        if let (true, Some(fd)) = (is_socket, fd)
            && let Ok(socket) = pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty())
        {
            let _ = rustix::net::sockopt::set_tcp_nodelay(&socket, true);
        }
    }
}

/// Elsewhere the option stays as the driver leaves it.
#[cfg(not(target_os = "linux"))]
pub(super) fn set_on_open_sockets() {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_tcp_socket_of_the_process_gets_nodelay() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        client.set_nodelay(false).expect("nagle on");
        assert!(!client.nodelay().expect("read"));
        super::set_on_open_sockets();
        assert!(
            client.nodelay().expect("read"),
            "the socket kept Nagle's algorithm"
        );
    }
}
