//! Turns Nagle's algorithm off on each pooled PostgreSQL connection.
//!
//! sqlx 0.9.0 no longer sets TCP_NODELAY on its sockets (sqlx issue #4335, fixed upstream
//! after 0.9.0). A COPY then costs ~40 ms however small: sqlx flushes the `CopyData`
//! message and then `CopyDone` as two writes; Nagle holds the second until the first is
//! acknowledged, and the server, having nothing to answer yet, delays that ACK by its
//! 40 ms minimum. Any message spanning one full segment plus a bit stalls the same way.
//!
//! sqlx gives no access to its socket, so a new connection asks the server which port it
//! came from and finds the socket with that local port and the server's port as its peer
//! among the process's descriptors. Linux only (`/proc/self/fd`); elsewhere, and through
//! a proxy that hides our port, this does nothing and the connection works as before.
//! Remove once sqlx sets TCP_NODELAY again.

use sqlx::PgConnection;

/// Sets TCP_NODELAY on `conn`'s socket; true when it was found (false over a Unix socket).
pub async fn disable_nagle(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let (client, server): (Option<i32>, Option<i32>) =
        sqlx::query_as("SELECT inet_client_port(), inet_server_port()")
            .fetch_one(conn)
            .await?;
    Ok(match (client, server) {
        (Some(client), Some(server)) => set_nodelay(client as u16, server as u16),
        _ => false,
    })
}

#[cfg(target_os = "linux")]
fn set_nodelay(local_port: u16, peer_port: u16) -> bool {
    use std::os::fd::BorrowedFd;
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    for entry in entries.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` was open a moment ago; it is only read (getsockname, getpeername)
        // and given a TCP option, never closed. Should another thread close it and the
        // number be reused meanwhile, the calls fail or leave that socket alone: its
        // ports do not match.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        let port = |addr: std::io::Result<socket2::SockAddr>| {
            addr.ok().and_then(|a| a.as_socket()).map(|a| a.port())
        };
        if port(socket.local_addr()) == Some(local_port)
            && port(socket.peer_addr()) == Some(peer_port)
        {
            return socket.set_tcp_nodelay(true).is_ok();
        }
    }
    false
}

#[cfg(not(target_os = "linux"))]
fn set_nodelay(_local_port: u16, _peer_port: u16) -> bool {
    false
}
