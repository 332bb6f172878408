//! Groups of real `NetworkGroup`s on 127.0.0.1, one thread per member, in one process.

use super::*;
use crate::cluster::{Cluster, ClusterSource, ClusterSpec, TaskId, TaskType};
use crate::{Collective, InProcessGroup, RuntimeError};
use engine_graph::ops::ReduceOp;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Ports free right now: bound together, so they differ, then released for the groups.
pub(super) fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("local address").port()).collect()
}

/// A chief and `n - 1` workers, so ranks follow the chief-first rule.
pub(super) fn spec(ports: &[u16]) -> ClusterSpec {
    let address = |p: &u16| format!("127.0.0.1:{p}");
    ClusterSpec {
        chief: vec![address(&ports[0])],
        worker: ports[1..].iter().map(address).collect(),
        ..ClusterSpec::default()
    }
}

pub(super) fn task(rank: usize) -> TaskId {
    if rank == 0 { TaskId::new(TaskType::Chief, 0) } else { TaskId::new(TaskType::Worker, rank - 1) }
}

pub(super) fn config(spec: &ClusterSpec, rank: usize) -> NetworkConfig {
    NetworkConfig {
        cluster: Cluster::new(spec.clone(), task(rank), ClusterSource::Flags, None).expect("a valid cluster"),
        fingerprint: "fingerprint-of-the-test-job".into(),
        token: Some("test-token".into()),
        collective_timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(10),
        tls: None,
        // The ring unless a test asks for shared memory: these groups share a host, and
        // `Auto` would take every all-reduce test off the ring.
        communication: Communication::Ring,
    }
}

/// Connects `configs` concurrently (each member waits for the others).
pub(super) fn connect_all(configs: Vec<NetworkConfig>) -> Vec<crate::Result<Arc<NetworkGroup>>> {
    let joins: Vec<_> = configs.into_iter().map(|c| thread::spawn(move || NetworkGroup::connect(c))).collect();
    joins.into_iter().map(|j| j.join().expect("connect does not panic")).collect()
}

fn group_of(n: usize) -> Vec<Arc<NetworkGroup>> {
    group_with(n, Communication::Ring)
}

fn group_with(n: usize, communication: Communication) -> Vec<Arc<NetworkGroup>> {
    let spec = spec(&free_ports(n));
    connect_all((0..n).map(|r| NetworkConfig { communication, ..config(&spec, r) }).collect())
        .into_iter()
        .map(|g| g.expect("the group connects"))
        .collect()
}

/// Runs `f` on every member at once; results in rank order.
fn on_all<T: Send>(groups: &[Arc<NetworkGroup>], f: impl Fn(&NetworkGroup) -> T + Sync) -> Vec<T> {
    thread::scope(|s| {
        let joins: Vec<_> = groups.iter().map(|g| s.spawn(|| f(g))).collect();
        joins.into_iter().map(|j| j.join().expect("no panic")).collect()
    })
}

/// The in-process group's answer, the reference every transport must reproduce.
fn in_process<T: Clone + Send + Sync>(
    inputs: &[Vec<T>],
    f: impl Fn(&dyn Collective, &mut Vec<T>) + Sync,
) -> Vec<Vec<T>> {
    let group = InProcessGroup::new(inputs.len(), crate::CrossDeviceOps::Ring, Duration::from_secs(60));
    let handles = group.handles();
    thread::scope(|s| {
        let joins: Vec<_> = handles
            .iter()
            .zip(inputs)
            .map(|(h, input)| {
                let f = &f;
                s.spawn(move || {
                    let mut data = input.clone();
                    f(h.as_ref(), &mut data);
                    data
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().expect("no panic")).collect()
    })
}

fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn bits64(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Values whose sums are exact in f32, so that any summation order agrees.
fn exact_input(rank: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 7 + rank * 13) % 1001) as f32 * 0.25 - 100.0).collect()
}

/// Values whose sums round, so that only the same order gives the same bits.
fn rounding_input<T: From<f32>>(rank: usize, len: usize) -> Vec<T> {
    (0..len).map(|i| T::from(((i as f32 + 1.0) * (rank as f32 + 1.7)).sin() * 1e3 + 1.0 / (i as f32 + 3.0))).collect()
}

fn check_all_reduce_f32(groups: &[Arc<NetworkGroup>], len: usize, op: ReduceOp) {
    let n = groups.len();
    // The direct algorithm and shared memory add as the in-process group does, in f64: any
    // values agree. The ring carries f32 partial sums: values with exact sums agree.
    let ring = groups[0].communication() == Communication::Ring && all_reduce::uses_ring::<f32>(len);
    let inputs: Vec<Vec<f32>> =
        (0..n).map(|r| if ring { exact_input(r, len) } else { rounding_input(r, len) }).collect();
    let want = in_process(&inputs, |h, d| h.all_reduce(d, op).expect("in-process all_reduce"));
    let got = on_all(groups, |g| {
        let mut data = inputs[g.rank()].clone();
        g.all_reduce(&mut data, op).map(|()| data)
    });
    for (rank, result) in got.into_iter().enumerate() {
        let result = result.unwrap_or_else(|e| panic!("n={n} len={len} rank {rank}: {e}"));
        assert!(bits32(&result) == bits32(&want[0]), "n={n} len={len} {op:?}: rank {rank} differs from in-process");
    }
}

#[test]
fn all_reduce_f32_equals_the_in_process_group_bit_for_bit() {
    for n in [2, 3] {
        let groups = group_of(n);
        for len in [1, 2, 5, 1000, 16_383, 16_384, 100_003, 3_000_000] {
            check_all_reduce_f32(&groups, len, ReduceOp::Sum);
        }
        check_all_reduce_f32(&groups, 777, ReduceOp::Mean);
        check_all_reduce_f32(&groups, 300_001, ReduceOp::Mean);
    }
}

#[test]
fn all_reduce_f64_equals_the_in_process_group_bit_for_bit_whatever_the_order_of_rounding() {
    let n = 3;
    let groups = group_of(n);
    for len in [1, 3, 4_000, 8_192, 500_001] {
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            let inputs: Vec<Vec<f64>> = (0..n).map(|r| rounding_input(r, len)).collect();
            let want = in_process(&inputs, |h, d| h.all_reduce_f64(d, op).expect("in-process all_reduce_f64"));
            let got = on_all(&groups, |g| {
                let mut data = inputs[g.rank()].clone();
                g.all_reduce_f64(&mut data, op).map(|()| data)
            });
            for (rank, result) in got.into_iter().enumerate() {
                let result = result.unwrap_or_else(|e| panic!("len={len} rank {rank}: {e}"));
                assert!(bits64(&result) == bits64(&want[rank]), "len={len} {op:?}: rank {rank} differs");
            }
        }
    }
}

#[test]
fn broadcast_all_gather_and_barrier() {
    let groups = group_of(3);
    // Larger than a segment, so the root sends several.
    let len = 700_000;
    let got = on_all(&groups, |g| {
        let mut data = if g.rank() == 1 { exact_input(1, len) } else { vec![0.0; len] };
        g.broadcast(&mut data, 1).map(|()| data)
    });
    for result in got {
        assert!(result.expect("broadcast") == exact_input(1, len));
    }
    // Different lengths per member, one of them empty and one spanning segments.
    let lens = [3usize, 0, 300_000];
    let got = on_all(&groups, |g| g.all_gather(&exact_input(g.rank(), lens[g.rank()])));
    let want: Vec<f32> = (0..3).flat_map(|r| exact_input(r, lens[r])).collect();
    for result in got {
        assert!(result.expect("all_gather") == want);
    }
    for result in on_all(&groups, |g| g.barrier()) {
        result.expect("barrier");
    }
    assert_eq!(groups[2].describe(2), groups[0].describe(2));
    assert!(groups[1].describe(1).starts_with("worker:0 at 127.0.0.1:"), "{}", groups[1].describe(1));
    assert_eq!((groups[2].rank(), groups[2].size()), (2, 3));
}

#[test]
fn small_messages_round_trip_quickly() {
    let groups = group_of(2);
    let rounds = 200;
    let times = on_all(&groups, |g| {
        let mut data = vec![1.0f32; 1024];
        let start = Instant::now();
        for _ in 0..rounds {
            g.all_reduce(&mut data, ReduceOp::Mean).expect("all_reduce");
        }
        start.elapsed() / rounds
    });
    // Generous for a loaded CI machine; the benchmark reports the real figure.
    assert!(times[0] < Duration::from_millis(20), "a 4 KiB all-reduce took {:?}", times[0]);
}

#[test]
fn different_fingerprints_are_refused_naming_both_tasks() {
    let spec = spec(&free_ports(2));
    let mut other = config(&spec, 1);
    other.fingerprint = "another-job".into();
    let results = connect_all(vec![config(&spec, 0), other]);
    for result in results {
        let error = result.err().expect("refused").to_string();
        assert!(error.contains("runs job fingerprint"), "{error}");
        assert!(error.contains("chief:0 at 127.0.0.1:") && error.contains("worker:0 at 127.0.0.1:"), "{error}");
        assert!(error.contains("another-job") && error.contains("fingerprint-"), "{error}");
    }
}

#[test]
fn a_wrong_or_missing_token_is_refused_without_revealing_it() {
    for other_token in [Some("not-the-token".to_string()), None] {
        let spec = spec(&free_ports(2));
        let mut other = config(&spec, 1);
        other.token = other_token.clone();
        other.connect_timeout = Duration::from_millis(1500);
        let mut first = config(&spec, 0);
        first.connect_timeout = Duration::from_millis(1500);
        let results = connect_all(vec![first, other]);
        // The member holding the right token refuses the other's calls; the other learns
        // that authentication failed.
        let error = results[1].as_ref().err().expect("refused").to_string();
        assert!(error.contains("authentication failed"), "{error}");
        let error = results[0].as_ref().err().expect("refused").to_string();
        assert!(error.contains("authentication failed"), "{error}");
        for result in &results {
            let error = result.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(!error.contains("test-token") && !error.contains("not-the-token"), "{error}");
        }
    }
}

#[test]
fn a_missing_member_is_named_with_its_address_after_the_connect_timeout() {
    let ports = free_ports(3);
    // Held, so that no other test's group binds it, but never answered.
    let _silent = std::net::TcpListener::bind(("127.0.0.1", ports[2])).expect("the port is still free");
    let spec = spec(&ports);
    let configs: Vec<NetworkConfig> =
        (0..2).map(|r| NetworkConfig { connect_timeout: Duration::from_millis(600), ..config(&spec, r) }).collect();
    let start = Instant::now();
    for result in connect_all(configs) {
        // Each times out, or hears first from the other that it did.
        let error = result.err().expect("times out");
        assert!(
            matches!(&error, RuntimeError::Connect(ConnectError::Timeout { .. } | ConnectError::Aborted { .. })),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(text.contains(&format!("worker:1 at 127.0.0.1:{} (not reachable: ", ports[2])), "{text}");
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_member_that_dies_mid_collective_is_named_promptly() {
    let groups = a_member_dies_during_an_all_reduce(Communication::Ring);
    // Later calls fail at once too.
    let error = groups[0].barrier().expect_err("the group is broken").to_string();
    assert!(error.contains("worker:1 at 127.0.0.1:"), "{error}");
}

/// Crashes the last of three members while the others all-reduce; they must fail within
/// half the collective timeout, naming it. Returns the survivors.
fn a_member_dies_during_an_all_reduce(communication: Communication) -> Vec<Arc<NetworkGroup>> {
    let mut groups = group_with(3, communication);
    let dead = groups.pop().expect("three members");
    let start = Instant::now();
    let results = thread::scope(|s| {
        let waiting: Vec<_> = groups
            .iter()
            .map(|g| {
                s.spawn(|| {
                    let mut data = vec![1.0f32; 200_000];
                    g.all_reduce(&mut data, ReduceOp::Sum)
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(200));
        dead.crash();
        waiting.into_iter().map(|j| j.join().expect("no panic")).collect::<Vec<_>>()
    });
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}, the timeout is 20 s");
    for result in results {
        let error = result.expect_err("the collective fails").to_string();
        assert!(error.contains("worker:1 at 127.0.0.1:"), "{communication}: {error}");
    }
    groups
}

#[test]
fn a_member_that_left_cleanly_is_reported_as_gone() {
    let mut groups = group_of(2);
    drop(groups.pop());
    let error = groups[0].barrier().expect_err("the peer left").to_string();
    assert!(error.contains("worker:0 at 127.0.0.1:") && error.contains("left the group"), "{error}");
}

#[test]
fn a_member_that_never_calls_is_named_after_the_collective_timeout() {
    let spec = spec(&free_ports(2));
    let configs =
        (0..2).map(|r| NetworkConfig { collective_timeout: Duration::from_millis(300), ..config(&spec, r) }).collect();
    let groups: Vec<_> = connect_all(configs).into_iter().map(|g| g.expect("connects")).collect();
    let start = Instant::now();
    let error = groups[0].barrier().expect_err("times out");
    assert!(start.elapsed() < Duration::from_secs(3));
    let RuntimeError::Collective { op, reason, retryable } = &error else { panic!("{error:?}") };
    assert_eq!(op, "barrier");
    assert!(reason.starts_with("worker:0 at 127.0.0.1:") && reason.contains("did not arrive within 300ms"), "{reason}");
    assert!(*retryable);
    // The failure aborted the group, and the peer was told (the abort frame travels while
    // this thread moves on, so give it a moment).
    thread::sleep(Duration::from_millis(200));
    let error = groups[1].barrier().expect_err("aborted").to_string();
    assert!(error.contains("aborted") && error.contains("chief:0"), "{error}");
}

/// Two members all-reduce tensors of 10 and 11 elements: both fail, naming the sizes.
fn different_sizes_fail_naming_the_other(communication: Communication) {
    let groups = group_with(2, communication);
    let results = on_all(&groups, |g| {
        let mut data = vec![1.0f32; 10 + g.rank()];
        g.all_reduce(&mut data, ReduceOp::Sum)
    });
    for result in results {
        let error = result.expect_err("sizes differ").to_string();
        assert!(
            error.contains("passes 11 elements") || error.contains("passes 10 elements"),
            "{communication}: {error}"
        );
    }
}

#[test]
fn members_calling_different_collectives_or_sizes_fail_naming_the_other() {
    different_sizes_fail_naming_the_other(Communication::Ring);
    let groups = group_of(2);
    let results = on_all(&groups, |g| if g.rank() == 0 { g.barrier() } else { g.all_gather(&[1.0]).map(|_| ()) });
    // Whichever member notices first aborts the group, so both errors carry the same cause.
    for result in results {
        let error = result.expect_err("kinds differ").to_string();
        assert!(error.contains("worker:0 at 127.0.0.1:") && error.contains("chief:0 at 127.0.0.1:"), "{error}");
        assert!(error.contains("runs all_gather") && error.contains("runs barrier"), "{error}");
        assert!(error.contains("every task must call the same collectives in the same order"), "{error}");
    }
}

#[test]
fn members_disagreeing_on_the_broadcast_root_fail_instead_of_taking_each_others_data() {
    let groups = group_of(2);
    let results = on_all(&groups, |g| {
        let mut data = vec![g.rank() as f32; 10];
        // Each believes itself the root, so neither waits: the other's unexpected segment
        // fails this operation or, if it arrives later, the next.
        g.broadcast(&mut data, g.rank()).and_then(|()| g.barrier())
    });
    for result in results {
        let error = result.expect_err("roots differ").to_string();
        assert!(error.contains("did not expect") || error.contains("arrived after this task finished it"), "{error}");
    }
}

#[test]
fn abort_fails_the_peers_with_the_reason() {
    let groups = group_of(2);
    groups[0].abort("boom", false);
    let error = groups[1].barrier().expect_err("aborted").to_string();
    assert!(error.contains("aborted") && error.contains("boom") && error.contains("chief:0 at"), "{error}");
    let error = groups[0].barrier().expect_err("aborted here too").to_string();
    assert!(error.contains("boom"), "{error}");
}

#[test]
fn a_task_outside_the_group_cannot_join_it() {
    let spec = ClusterSpec { ps: vec!["127.0.0.1:1".into()], ..spec(&free_ports(1)) };
    let cluster = Cluster::new(spec.clone(), TaskId::new(TaskType::Ps, 0), ClusterSource::Flags, None).expect("valid");
    let error = NetworkGroup::connect(NetworkConfig { cluster, ..config(&spec, 0) }).err().expect("refused");
    assert!(error.to_string().contains("ps:0 at 127.0.0.1:1 is not in the collective group"), "{error}");
}

#[test]
fn a_group_of_one_needs_no_peers() {
    let group = group_of(1).pop().expect("one member");
    let mut data = vec![2.0f32, 4.0];
    group.all_reduce(&mut data, ReduceOp::Mean).expect("all_reduce");
    assert_eq!(data, [2.0, 4.0]);
    assert_eq!(group.all_gather(&[1.0]).expect("all_gather"), [1.0]);
    group.barrier().expect("barrier");
}

#[test]
fn the_token_never_shows_in_debug_output() {
    let spec = spec(&free_ports(1));
    let text = format!("{:?}", config(&spec, 0));
    assert!(!text.contains("test-token") && text.contains("<redacted>"), "{text}");
}

#[test]
fn mutual_tls_connects_and_reduces() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/transport/testdata");
    let tls = TlsConfig { cert_pem: dir.join("task.pem"), key_pem: dir.join("task.key"), ca_pem: dir.join("ca.pem") };
    let spec = spec(&free_ports(2));
    let configs = (0..2).map(|r| NetworkConfig { tls: Some(tls.clone()), ..config(&spec, r) }).collect();
    let groups: Vec<_> = connect_all(configs).into_iter().map(|g| g.expect("connects over TLS")).collect();
    let got = on_all(&groups, |g| {
        let mut data = vec![g.rank() as f32 + 1.0; 100_000];
        g.all_reduce(&mut data, ReduceOp::Sum).map(|()| data)
    });
    for result in got {
        assert!(result.expect("all_reduce over TLS").iter().all(|&x| x == 3.0));
    }
    // A task without TLS cannot talk to the TLS ones.
    let spec = self::spec(&free_ports(2));
    let mut plain = config(&spec, 1);
    plain.connect_timeout = Duration::from_secs(1);
    let secure = NetworkConfig { tls: Some(tls), connect_timeout: Duration::from_secs(1), ..config(&spec, 0) };
    for result in connect_all(vec![secure, plain]) {
        assert!(result.is_err());
    }
}

// Shared memory: the same contracts as the ring, through the segment.

#[test]
fn auto_takes_shared_memory_on_one_host_and_ring_stays_on_grpc() {
    let auto = group_with(2, Communication::Auto);
    assert!(auto.iter().all(|g| g.communication() == Communication::SharedMemory && g.ring_reason().is_none()));
    let ring = group_of(2);
    assert!(ring.iter().all(|g| g.communication() == Communication::Ring));
    assert_eq!(ring[0].ring_reason(), Some("communication is 'ring'"));
}

#[test]
fn shared_memory_all_reduce_equals_the_in_process_group_bit_for_bit() {
    for n in [2, 3] {
        let groups = group_with(n, Communication::SharedMemory);
        // Around the region (1 MiB = 262,144 f32) and round (n regions) boundaries.
        for len in [0, 1, 5, 1000, 262_143, 262_144, 262_145, 3 * 262_144 + 7, 3_000_000] {
            check_all_reduce_f32(&groups, len, ReduceOp::Sum);
        }
        check_all_reduce_f32(&groups, 777, ReduceOp::Mean);
        check_all_reduce_f32(&groups, 600_001, ReduceOp::Mean);
        for len in [3, 131_072, 500_001] {
            let inputs: Vec<Vec<f64>> = (0..n).map(|r| rounding_input(r, len)).collect();
            let want = in_process(&inputs, |h, d| h.all_reduce_f64(d, ReduceOp::Mean).expect("in-process"));
            let got = on_all(&groups, |g| {
                let mut data = inputs[g.rank()].clone();
                g.all_reduce_f64(&mut data, ReduceOp::Mean).map(|()| data)
            });
            for (rank, result) in got.into_iter().enumerate() {
                let result = result.unwrap_or_else(|e| panic!("n={n} len={len} rank {rank}: {e}"));
                assert!(bits64(&result) == bits64(&want[rank]), "n={n} len={len}: rank {rank} differs");
            }
        }
        // The gRPC collectives still work beside it.
        let gathered = on_all(&groups, |g| g.all_gather(&[g.rank() as f32]).expect("all_gather"));
        assert!(gathered.iter().all(|v| v == &(0..n).map(|r| r as f32).collect::<Vec<_>>()));
    }
}

#[test]
fn a_member_that_dies_during_a_shared_memory_all_reduce_is_named_promptly() {
    a_member_dies_during_an_all_reduce(Communication::SharedMemory);
}

#[test]
fn shared_memory_members_passing_different_sizes_or_never_arriving_fail_by_name() {
    different_sizes_fail_naming_the_other(Communication::SharedMemory);
    let spec = spec(&free_ports(2));
    let configs = (0..2)
        .map(|r| NetworkConfig {
            collective_timeout: Duration::from_millis(300),
            communication: Communication::SharedMemory,
            ..config(&spec, r)
        })
        .collect();
    let groups: Vec<_> = connect_all(configs).into_iter().map(|g| g.expect("connects")).collect();
    let start = Instant::now();
    let error = groups[0].all_reduce(&mut [1.0f32; 4], ReduceOp::Sum).expect_err("times out").to_string();
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(error.contains("worker:0 at 127.0.0.1:") && error.contains("did not arrive within 300ms"), "{error}");
    // One all-reduce on shared memory against a barrier on gRPC: named, not mixed up.
    let groups = group_with(2, Communication::SharedMemory);
    let results =
        on_all(&groups, |g| if g.rank() == 0 { g.all_reduce(&mut [1.0f32], ReduceOp::Sum) } else { g.barrier() });
    for result in results {
        let error = result.expect_err("kinds differ").to_string();
        assert!(error.contains("every task must call the same collectives in the same order"), "{error}");
    }
}
