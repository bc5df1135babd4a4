//! Sockets in named network namespaces (`/run/netns/<name>`, as `ip netns add` makes them):
//! bound from a short-lived thread moved into the namespace; the socket stays there wherever
//! it is used from.

use std::net::Ipv4Addr;

/// A non-blocking listener on `at` in namespace `ns`.
pub fn listen_in(ns: &str, at: (Ipv4Addr, u16)) -> std::io::Result<std::net::TcpListener> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let l = std::net::TcpListener::bind(at)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("the listener's thread panicked")))
}
