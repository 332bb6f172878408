//! A ps task and a training task in one process, over real sockets on 127.0.0.1: what a
//! push does to the variables, what is refused, and TLS.

use super::*;
use crate::cluster::{Cluster, ClusterSource, ClusterSpec, TaskId, TaskType};
use crate::transport::TlsConfig;
use crate::{Device, Precision};
use engine_graph::{
    DType, Graph, GraphBuilder, HostTensor, Initializer, Op, Outlet, Plan, Shape,
    autodiff::Autodiff,
    optimizer::{ApplyOptimizer, LearningRate, Optimizer, OptimizerConfig},
    passes::{CheckNumericsPass, Pass, strategy::ParameterServerPlacement},
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// `loss = mean(x @ w)` with SGD at a constant rate 0.5, placed on one ps task.
fn plan() -> Arc<Plan> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[3])).expect("a placeholder");
    let w = b.variable("w", &[3, 2], Initializer::Ones, true).expect("a variable");
    let y = b.matmul(x, w).expect("a matmul");
    let loss = b.reduce_mean(y, &[], false).expect("a mean");
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    let config = OptimizerConfig {
        optimizer: Optimizer::Sgd { momentum: 0.0, nesterov: false },
        learning_rate: LearningRate::Constant(0.5),
        clip_global_norm: None,
    };
    Autodiff.run(&mut g).expect("autodiff");
    ApplyOptimizer { config }.run(&mut g).expect("the optimizer");
    CheckNumericsPass.run(&mut g).expect("checks");
    ParameterServerPlacement { num_ps: 1 }.run(&mut g).expect("placement");
    Arc::new(Plan::new(g, Vec::new()).expect("a plan"))
}

/// What a training task sends the ps task: the outlets its transfers read.
fn sends(plan: &Plan) -> Vec<Outlet> {
    let g = &plan.graph;
    g.nodes()
        .filter(|(_, n)| matches!(&n.op, Op::Transfer(t) if t.to == engine_graph::Placement::Ps(0)))
        .map(|(_, n)| n.inputs[0])
        .collect()
}

fn ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    (a.local_addr().expect("bound").port(), b.local_addr().expect("bound").port())
}

fn cluster(ports: (u16, u16), task: TaskId) -> Cluster {
    let spec = ClusterSpec {
        chief: vec![format!("127.0.0.1:{}", ports.0)],
        ps: vec![format!("127.0.0.1:{}", ports.1)],
        ..ClusterSpec::default()
    };
    Cluster::new(spec, task, ClusterSource::Flags, None).expect("a valid cluster")
}

fn start_ps(plan: &Arc<Plan>, ports: (u16, u16), tls: Option<TlsConfig>) -> JoinHandle<crate::Result<Option<i64>>> {
    let shard = ParameterShard::new(plan.clone(), 0, Device::cpu(), Precision::F32).expect("a shard");
    let config = ServeConfig {
        cluster: cluster(ports, TaskId::new(TaskType::Ps, 0)),
        fingerprint: "job".into(),
        token: Some("secret".into()),
        connect_timeout: Duration::from_secs(20),
        linger: Duration::from_secs(5),
        should_stop: Box::new(|| None),
        tls,
    };
    std::thread::spawn(move || serve(config, shard))
}

fn client_config(ports: (u16, u16)) -> ClientConfig {
    ClientConfig {
        cluster: cluster(ports, TaskId::new(TaskType::Chief, 0)),
        fingerprint: "job".into(),
        token: Some("secret".into()),
        call_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        tls: None,
    }
}

fn filled(shape: &[usize], v: f32) -> HostTensor {
    HostTensor::f32(shape.to_vec(), vec![v; shape.iter().product()]).expect("a tensor")
}

#[test]
fn pushes_are_applied_in_place_and_what_is_not_finite_is_refused() {
    let plan = plan();
    let ports = ports();
    let ps = start_ps(&plan, ports, None);
    let clients = ParameterClients::connect(client_config(ports)).expect("the chief connects");
    clients.attend().expect("the chief attends");
    let start =
        BTreeMap::from([("w".to_string(), filled(&[3, 2], 1.0)), ("global_step".into(), HostTensor::scalar_i64(0))]);
    assert_eq!(clients.initialize(vec![start.clone()]).expect("initialized"), (true, Some(0)));
    // A second initialization (a restarted chief) keeps what the ps task holds.
    assert_eq!(clients.initialize(vec![start]).expect("answered"), (false, Some(0)));

    // The gradient travels, and the learning rate (a fetch for the logs, so the training
    // task computes it).
    let sends = sends(&plan);
    let gradient = |v: f32| -> Vec<Vec<(Outlet, HostTensor)>> {
        let values = sends
            .iter()
            .map(|o| match plan.graph.fact(*o).expect("a fact").shape.rank() {
                0 => (*o, HostTensor::scalar_f32(0.5)),
                _ => (*o, filled(&[3, 2], v)),
            })
            .collect();
        vec![values]
    };
    assert_eq!(sends.len(), 2);
    let pushed = clients.push(0, gradient(1.0)).expect("pushed");
    assert!(pushed.applied && pushed.global_step == Some(1) && !pushed.finished, "{pushed:?}");
    let w = clients.pull(&[vec!["w".to_string()]]).expect("pulled");
    assert_eq!(w[0][0], filled(&[3, 2], 0.5), "w - 0.5 * 1");

    // A gradient that makes the update infinite is refused by the ps task's own check.
    let pushed = clients.push(1, gradient(f32::INFINITY)).expect("answered");
    assert!(!pushed.applied && pushed.non_finite.iter().any(|m| m.contains("update of w")), "{pushed:?}");
    let exported = clients.export().expect("exported");
    assert_eq!(exported["w"], filled(&[3, 2], 0.5), "a refused update changes nothing");
    assert_eq!(exported["global_step"], HostTensor::scalar_i64(1));

    // Another job, a wrong token: refused by name, the token never shown.
    let other = ParameterClients::connect(ClientConfig { fingerprint: "other".into(), ..client_config(ports) });
    let why = other.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(why.contains("ps:0") && why.contains("runs job other"), "{why}");
    let wrong = ParameterClients::connect(ClientConfig { token: Some("guess".into()), ..client_config(ports) });
    let why = wrong.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(why.contains("authentication failed") && !why.contains("secret") && !why.contains("guess"), "{why}");

    clients.done();
    let ended = ps.join().expect("the ps thread does not panic");
    assert_eq!(ended.expect("the ps task ends cleanly"), Some(1));
}

#[test]
fn with_tls_only_clients_of_the_cluster_ca_get_in() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/transport/testdata");
    let tls = TlsConfig { cert_pem: dir.join("task.pem"), key_pem: dir.join("task.key"), ca_pem: dir.join("ca.pem") };
    let plan = plan();
    let ports = ports();
    let ps = start_ps(&plan, ports, Some(tls.clone()));
    let plain =
        ParameterClients::connect(ClientConfig { connect_timeout: Duration::from_secs(2), ..client_config(ports) });
    assert!(plain.is_err(), "a client without TLS got in");
    let clients =
        ParameterClients::connect(ClientConfig { tls: Some(tls), ..client_config(ports) }).expect("connects over TLS");
    clients.attend().expect("attends");
    let start =
        BTreeMap::from([("w".to_string(), filled(&[3, 2], 2.0)), ("global_step".into(), HostTensor::scalar_i64(7))]);
    assert_eq!(clients.initialize(vec![start]).expect("initialized"), (true, Some(7)));
    assert_eq!(clients.pull(&[vec!["w".to_string()]]).expect("pulled")[0][0], filled(&[3, 2], 2.0));
    clients.done();
    assert_eq!(ps.join().expect("no panic").expect("ends cleanly"), Some(7));
}
