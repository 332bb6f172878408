//! A cluster from torchrun's (and Kubeflow's PyTorchJob's) variables: `MASTER_ADDR`,
//! `MASTER_PORT`, `RANK`, `WORLD_SIZE`. They name only the master, so the tasks meet there
//! first (a rendezvous, as torchrun's c10d store does): rank 0 listens on
//! `MASTER_ADDR:MASTER_PORT`, every other rank connects and tells it the address it will
//! listen on, and rank 0 answers everyone with the full list. Every task is a worker,
//! worker `i` is rank `i`, worker 0 the chief.

use super::spec::ClusterSpec;
use super::task::{TaskId, TaskType};
use super::{Cluster, ClusterError, ClusterSource};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const ORIGIN: ClusterSource = ClusterSource::Torchrun;
const VARIABLES: [&str; 4] = ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"];
/// More tasks than this is a typo, not a cluster.
const MAX_WORLD_SIZE: usize = 4096;
/// How long every rank waits for the others to reach the master.
pub const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(300);

/// The cluster, after the rendezvous, or `None` when none of the variables is set.
pub fn from_torchrun(env: &dyn Fn(&str) -> Option<String>, timeout: Duration) -> Result<Option<Cluster>, ClusterError> {
    let Some(present) = VARIABLES.into_iter().find(|v| env(v).is_some()) else { return Ok(None) };
    let get = |name: &'static str| {
        env(name).ok_or_else(|| ClusterError::MissingVariable {
            origin: ORIGIN,
            name,
            because: format!("{present} is, so this looks like a torchrun or PyTorchJob task"),
        })
    };
    let master = get("MASTER_ADDR")?;
    let port: u16 = number("MASTER_PORT", &get("MASTER_PORT")?)?;
    let rank: usize = number("RANK", &get("RANK")?)?;
    let world: usize = number("WORLD_SIZE", &get("WORLD_SIZE")?)?;
    if world == 0 || world > MAX_WORLD_SIZE || rank >= world {
        return Err(inconsistent(format!(
            "RANK={rank} with WORLD_SIZE={world} (1 to {MAX_WORLD_SIZE} tasks, ranks below it)"
        )));
    }
    let workers = if world == 1 {
        vec![format!("{master}:{}", Reserved::any(None)?.port)]
    } else if rank == 0 {
        host(&master, port, world, timeout)?
    } else {
        join(&master, port, rank, timeout)?
    };
    let spec = ClusterSpec { worker: workers, ..ClusterSpec::default() };
    Cluster::new(spec, TaskId::new(TaskType::Worker, rank), ORIGIN, None).map(Some)
}

/// Rank 0: collects every other rank's address on the master port, then sends the list.
fn host(master: &str, port: u16, world: usize, timeout: Duration) -> Result<Vec<String>, ClusterError> {
    let listener = TcpListener::bind(("0.0.0.0", port))
        .map_err(|e| rendezvous(format!("rank 0 cannot listen on port {port} (MASTER_PORT): {e}")))?;
    listener.set_nonblocking(true).map_err(|e| rendezvous(e.to_string()))?;
    let mut addresses: Vec<Option<String>> = vec![None; world];
    // Held until every rank has the list, so no rank on this host can be handed it too.
    let own = Reserved::any(None)?;
    addresses[0] = Some(format!("{master}:{}", own.port));
    let mut peers = Vec::new();
    let deadline = Instant::now() + timeout;
    while peers.len() < world - 1 {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(|e| rendezvous(e.to_string()))?;
                stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| rendezvous(e.to_string()))?;
                let mut line = String::new();
                BufReader::new(&stream).read_line(&mut line).map_err(|e| rendezvous(e.to_string()))?;
                let (rank, address) = line
                    .trim()
                    .split_once(' ')
                    .and_then(|(r, a)| Some((r.parse::<usize>().ok()?, a.to_string())))
                    .ok_or_else(|| rendezvous(format!("a peer sent `{}`, not `RANK HOST:PORT`", line.trim())))?;
                match addresses.get_mut(rank) {
                    Some(slot @ None) if rank > 0 => *slot = Some(address),
                    _ => return Err(rendezvous(format!("rank {rank} joined twice or is outside WORLD_SIZE={world}"))),
                }
                peers.push(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> =
                        addresses.iter().enumerate().filter(|(_, a)| a.is_none()).map(|(r, _)| r.to_string()).collect();
                    return Err(rendezvous(format!(
                        "ranks {} did not reach the master within {} s",
                        missing.join(", "),
                        timeout.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(rendezvous(e.to_string())),
        }
    }
    let addresses: Vec<String> = addresses.into_iter().flatten().collect();
    let reply = format!("{}\n", addresses.join(","));
    for mut peer in peers {
        peer.write_all(reply.as_bytes()).map_err(|e| rendezvous(format!("answering a peer: {e}")))?;
    }
    drop(own);
    Ok(addresses)
}

/// Rank > 0: connects to the master (retrying until it listens), sends its address,
/// reads the list.
fn join(master: &str, port: u16, rank: usize, timeout: Duration) -> Result<Vec<String>, ClusterError> {
    let deadline = Instant::now() + timeout;
    let target: SocketAddr = (master, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| rendezvous(format!("MASTER_ADDR={master} does not resolve")))?;
    let stream = loop {
        match TcpStream::connect_timeout(&target, Duration::from_secs(5)) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(rendezvous(format!(
                    "the master {master}:{port} did not answer within {} s: {e}",
                    timeout.as_secs()
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    // The address the master reached us from is the one the others can reach us at.
    let ip = stream.local_addr().map_err(|e| rendezvous(e.to_string()))?.ip();
    // Held until the master's list arrives, which is after every rank has reserved its own:
    // ranks sharing a host (torchrun's usual case) cannot be handed the same port.
    let reserved = Reserved::any(Some(ip))?;
    let own = format!("{}:{}", host_text(ip), reserved.port);
    (&stream).write_all(format!("{rank} {own}\n").as_bytes()).map_err(|e| rendezvous(e.to_string()))?;
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
    stream.set_read_timeout(Some(left)).map_err(|e| rendezvous(e.to_string()))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|e| rendezvous(format!("waiting for the master's list of tasks: {e}")))?;
    drop(reserved);
    let workers: Vec<String> = line.trim().split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    if workers.get(rank) != Some(&own) {
        return Err(rendezvous(format!("the master's list `{}` does not have this task as rank {rank}", line.trim())));
    }
    Ok(workers)
}

/// A port that the kernel handed out and that stays bound while this lives. The collective
/// server binds it once the rendezvous is over. Releasing it at once (as an earlier version
/// did) let the kernel hand the same port to the next rank on the host, and two workers
/// ended up with one address.
struct Reserved {
    port: u16,
    _listener: TcpListener,
}

impl Reserved {
    fn any(ip: Option<IpAddr>) -> Result<Self, ClusterError> {
        let ip = ip.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let listener = TcpListener::bind((ip, 0)).map_err(|e| rendezvous(format!("no free port on {ip}: {e}")))?;
        let port = listener.local_addr().map(|a| a.port()).map_err(|e| rendezvous(e.to_string()))?;
        Ok(Self { port, _listener: listener })
    }
}

fn host_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => format!("[{v6}]"),
        IpAddr::V4(v4) => v4.to_string(),
    }
}

fn number<T: std::str::FromStr>(name: &'static str, value: &str) -> Result<T, ClusterError> {
    value.trim().parse().map_err(|_| ClusterError::Syntax {
        origin: ORIGIN,
        field: name.to_string(),
        value: value.to_string(),
        reason: "expected a non-negative integer".into(),
    })
}

fn inconsistent(reason: String) -> ClusterError {
    ClusterError::Inconsistent { origin: ORIGIN, reason }
}

fn rendezvous(reason: String) -> ClusterError {
    ClusterError::Inconsistent { origin: ORIGIN, reason: format!("rendezvous: {reason}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(vars: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn three_ranks_meet_at_the_master_and_agree_on_the_cluster() -> Result<(), ClusterError> {
        let port = Reserved::any(None)?.port;
        let handles: Vec<_> = (0..3)
            .map(|rank| {
                std::thread::spawn(move || {
                    let vars = [
                        ("MASTER_ADDR", "127.0.0.1".to_string()),
                        ("MASTER_PORT", port.to_string()),
                        ("RANK", rank.to_string()),
                        ("WORLD_SIZE", "3".to_string()),
                    ];
                    from_torchrun(&env(&vars), Duration::from_secs(20))
                })
            })
            .collect();
        let mut clusters: Vec<Cluster> = Vec::new();
        for h in handles {
            let joined = h.join().map_err(|_| rendezvous("a rank's thread panicked".into()))?;
            clusters.push(joined?.ok_or_else(|| rendezvous("a rank found no cluster".into()))?);
        }
        let spec = clusters[0].spec().clone();
        assert_eq!(spec.worker.len(), 3);
        for (rank, c) in clusters.iter().enumerate() {
            assert_eq!(c.spec(), &spec, "every rank sees the same cluster");
            assert_eq!(c.task(), TaskId::new(TaskType::Worker, rank));
            assert_eq!(c.source(), ClusterSource::Torchrun);
        }
        assert!(clusters[0].is_chief());
        Ok(())
    }

    /// Two ranks on one host once got the same port: each released its probe at once and the
    /// kernel handed the number out again. A reserved port must stay unavailable.
    #[test]
    fn a_reserved_port_is_not_handed_out_again_while_the_rendezvous_runs() -> Result<(), ClusterError> {
        let reserved = Reserved::any(None)?;
        assert!(TcpListener::bind(("127.0.0.1", reserved.port)).is_err(), "port {} is held", reserved.port);
        let others: Vec<Reserved> =
            (0..64).map(|_| Reserved::any(Some(IpAddr::from([127, 0, 0, 1])))).collect::<Result<_, _>>()?;
        assert!(others.iter().all(|o| o.port != reserved.port));
        Ok(())
    }

    #[test]
    fn missing_or_contradictory_variables_are_named() {
        let vars = [("MASTER_ADDR", "m".to_string()), ("RANK", "0".to_string())];
        let err = from_torchrun(&env(&vars), Duration::from_secs(1)).unwrap_err().to_string();
        assert!(err.contains("MASTER_PORT is not set"), "{err}");
        let vars = [
            ("MASTER_ADDR", "m".to_string()),
            ("MASTER_PORT", "1".to_string()),
            ("RANK", "4".to_string()),
            ("WORLD_SIZE", "2".to_string()),
        ];
        let err = from_torchrun(&env(&vars), Duration::from_secs(1)).unwrap_err().to_string();
        assert!(err.contains("RANK=4 with WORLD_SIZE=2"), "{err}");
        assert_eq!(from_torchrun(&env(&[]), Duration::from_secs(1)).ok().flatten(), None);
    }

    #[test]
    fn a_missing_rank_is_named_when_the_rendezvous_times_out() {
        let port = Reserved::any(None).map_or(29501, |r| r.port);
        let vars = [
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", port.to_string()),
            ("RANK", "0".to_string()),
            ("WORLD_SIZE", "2".to_string()),
        ];
        let err = from_torchrun(&env(&vars), Duration::from_millis(300)).unwrap_err().to_string();
        assert!(err.contains("ranks 1 did not reach the master"), "{err}");
    }
}
