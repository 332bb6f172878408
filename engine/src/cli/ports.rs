//! Free loopback ports for a local cluster, chosen below the kernel's ephemeral range.
//!
//! A port found by binding port 0 is free only until its listener closes, and `engine
//! launch` must close it before the task that listens there starts. In between, any
//! outgoing connection on the machine (which takes its local port from the ephemeral
//! range) or any other bind to port 0 may take it: CI saw a worker fail with "Address
//! already in use" while other tests ran beside it. Below the ephemeral range only explicit
//! binds land, so a port chosen there at random stays free unless another launcher draws
//! the very same one within that moment.

use std::net::TcpListener;

/// The ports tried per port wanted before falling back to the ephemeral range.
const TRIES: usize = 64;

/// `n` distinct free ports on 127.0.0.1, each held by its listener until the caller drops
/// it (so no two are the same).
pub fn free_loopback_ports(n: usize) -> std::io::Result<Vec<TcpListener>> {
    let mut held = Vec::with_capacity(n);
    if let Some((low, high)) = below_ephemeral() {
        let mut draw = Draw::seeded();
        for _ in 0..n * TRIES {
            if held.len() == n {
                break;
            }
            let port = low + (draw.next() % u64::from(high - low)) as u16;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                held.push(l);
            }
        }
    }
    while held.len() < n {
        held.push(TcpListener::bind("127.0.0.1:0")?);
    }
    Ok(held)
}

/// The ports ports are drawn from: the 16,384 below the ephemeral range (Linux's
/// `ip_local_port_range`, 32768-60999 by default), above the privileged ones.
fn below_ephemeral() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let first: u16 = text.as_deref().and_then(|t| t.split_whitespace().next()?.parse().ok()).unwrap_or(32768);
    let low = first.saturating_sub(16384).max(1024);
    (first > low + 1024).then_some((low, first))
}

/// A xorshift draw seeded by the process and the clock: two launchers started together
/// draw different ports.
struct Draw(u64);

impl Draw {
    fn seeded() -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Draw((nanos as u64 ^ (u64::from(std::process::id()) << 32)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() -> std::io::Result<()> {
        let held = free_loopback_ports(8)?;
        let mut ports: Vec<u16> = held.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<Result<_, _>>()?;
        if let Some((low, high)) = below_ephemeral() {
            assert!(ports.iter().all(|p| (low..high).contains(p)), "{ports:?} outside {low}..{high}");
        }
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 8);
        drop(held);
        // Released, each can be listened on by the task it is for.
        for port in ports {
            TcpListener::bind(("127.0.0.1", port))?;
        }
        Ok(())
    }
}
