//! A ps task's server: it serves its shard to the training tasks until training ends, and
//! watches the chief, so that workers are told by name when it is gone instead of training
//! on with nobody saving their work.

use super::proto::parameter_service_server::{ParameterService, ParameterServiceServer};
use super::proto::{
    Beat, Ended, ExportRequest, Hello, HelloReply, InitializeReply, PullRequest, PushReply, PushRequest, StatusReply,
    StatusRequest, Tensors,
};
use super::shard::ParameterShard;
use super::tensor::{decode, encode, outlet};
use super::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use crate::transport::auth::{RequireToken, token_value};
use crate::transport::link::error_chain;
use crate::transport::tls::TlsConfig;
use crate::{Result, RuntimeError, cluster::Cluster};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

/// A training task not heard from for this long, once the chief is done, has stopped
/// (every step pulls, so one that trains calls many times a second).
const QUIET: Duration = Duration::from_secs(5);

/// How a ps task is run.
pub struct ServeConfig {
    pub cluster: Cluster,
    pub fingerprint: String,
    pub token: Option<String>,
    /// How long to wait for the first training task, and for a lost chief to come back.
    pub connect_timeout: Duration,
    /// How long to wait, once the chief is done, for workers still training.
    pub linger: Duration,
    /// Polled while serving: a signal asks the task to stop.
    pub should_stop: Box<dyn Fn() -> Option<String> + Send>,
    /// Mutual TLS, as the collective group has it: only tasks with a certificate of the
    /// cluster's CA get in.
    pub tls: Option<TlsConfig>,
}

#[derive(Debug, Clone, PartialEq)]
enum Chief {
    NotYet,
    Present(String),
    Lost { task: String, reason: String, at: Instant },
    Done(String),
}

struct Life {
    chief: Chief,
    /// Training tasks that said hello, and those that said they are done.
    seen: BTreeSet<String>,
    done: BTreeSet<String>,
    /// When each training task last called.
    heard: BTreeMap<String, Instant>,
    first_hello: Option<Instant>,
    chief_done_at: Option<Instant>,
    /// The signal this task was asked to stop by: it tells the training tasks to stop,
    /// serves the chief's final checkpoint, then exits.
    draining: Option<(String, Instant)>,
}

struct Shared {
    shard: ParameterShard,
    me: String,
    fingerprint: String,
    life: Mutex<Life>,
    changed: Condvar,
}

impl Shared {
    fn heard(&self, task: &str) {
        self.life().heard.insert(task.to_string(), Instant::now());
    }

    fn life(&self) -> MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why training tasks are refused now (the chief is gone), if they are.
    fn refusal(&self) -> Option<String> {
        match &self.life().chief {
            Chief::Lost { task, reason, .. } => Some(format!(
                "{task} was lost ({reason}); training waits for it to come back, so that no work goes unsaved"
            )),
            _ => None,
        }
    }
}

/// An error of this ps task as the caller sees it (the caller names the task).
fn status(e: RuntimeError) -> Status {
    match e {
        // Not `unavailable`: callers read that as the connection failing.
        RuntimeError::ParameterServer { reason, retryable: true, .. } => Status::aborted(reason),
        RuntimeError::ParameterServer { reason, .. } => Status::failed_precondition(reason),
        e => Status::failed_precondition(e.to_string()),
    }
}

/// Runs blocking work (an update, a copy of every variable) off the server's I/O threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("the update panicked: {e}")))?
        .map_err(status)
}

struct Service(Arc<Shared>);

#[tonic::async_trait]
impl ParameterService for Service {
    async fn hello(&self, request: Request<Hello>) -> Result<Response<HelloReply>, Status> {
        let hello = request.into_inner();
        let s = &self.0;
        if hello.protocol_version != PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "{} speaks ps protocol {} but {} speaks {PROTOCOL_VERSION}: every task must run the same build",
                hello.task, hello.protocol_version, s.me
            )));
        }
        if hello.fingerprint != s.fingerprint {
            return Err(Status::failed_precondition(format!(
                "{} runs job {} but {} runs job {}: the tasks were started with different specs or clusters",
                hello.task, hello.fingerprint, s.me, s.fingerprint
            )));
        }
        let mut life = s.life();
        life.seen.insert(hello.task.clone());
        life.heard.insert(hello.task.clone(), Instant::now());
        life.done.remove(&hello.task);
        life.first_hello.get_or_insert_with(Instant::now);
        drop(life);
        s.changed.notify_all();
        Ok(Response::new(HelloReply {
            protocol_version: PROTOCOL_VERSION,
            task: s.me.clone(),
            fingerprint: s.fingerprint.clone(),
        }))
    }

    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let s = &self.0;
        Ok(Response::new(StatusReply {
            initialized: s.shard.is_initialized(),
            global_step: s.shard.global_step(),
            refusal: s.refusal().unwrap_or_default(),
        }))
    }

    async fn initialize(&self, request: Request<Tensors>) -> Result<Response<InitializeReply>, Status> {
        let s = self.0.clone();
        let values = request
            .into_inner()
            .tensors
            .iter()
            .map(|t| decode(t).map(|v| (t.name.clone(), v)))
            .collect::<Result<BTreeMap<_, _>, String>>()
            .map_err(Status::invalid_argument)?;
        let accepted = blocking({
            let s = s.clone();
            move || s.shard.initialize(&values)
        })
        .await?;
        if accepted {
            log::info!("{}: initialized {} variables", s.me, s.shard.variables().len());
        }
        Ok(Response::new(InitializeReply { accepted, global_step: s.shard.global_step() }))
    }

    async fn pull(&self, request: Request<PullRequest>) -> Result<Response<Tensors>, Status> {
        let s = self.0.clone();
        if let Some(why) = s.refusal() {
            return Err(Status::failed_precondition(why));
        }
        let PullRequest { names, task } = request.into_inner();
        s.heard(&task);
        let values = blocking({
            let (s, names) = (s.clone(), names.clone());
            move || s.shard.read(&names)
        })
        .await?;
        Ok(Response::new(Tensors { tensors: names.iter().zip(&values).map(|(n, v)| encode(n, None, v)).collect() }))
    }

    async fn push(&self, request: Request<PushRequest>) -> Result<Response<PushReply>, Status> {
        let s = self.0.clone();
        if let Some(why) = s.refusal() {
            return Err(Status::failed_precondition(why));
        }
        {
            let life = s.life();
            let (finished, stopping) = (matches!(life.chief, Chief::Done(_)), life.draining.is_some());
            drop(life);
            if finished || stopping {
                let global_step = s.shard.global_step();
                return Ok(Response::new(PushReply { finished, stopping, global_step, ..Default::default() }));
            }
        }
        let push = request.into_inner();
        s.heard(&push.task);
        let values = push
            .values
            .iter()
            .map(|t| Ok((outlet(t)?, decode(t)?)))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| Status::invalid_argument(format!("{} pushed an invalid value: {e}", push.task)))?;
        let applied = blocking(move || s.shard.apply(values, push.step)).await?;
        Ok(Response::new(PushReply {
            applied: applied.applied,
            global_step: applied.global_step,
            non_finite: applied.non_finite,
            finished: false,
            stopping: false,
        }))
    }

    async fn export(&self, _: Request<ExportRequest>) -> Result<Response<Tensors>, Status> {
        let s = self.0.clone();
        let values = blocking(move || s.shard.export()).await?;
        Ok(Response::new(Tensors { tensors: values.iter().map(|(n, v)| encode(n, None, v)).collect() }))
    }

    async fn attend(&self, request: Request<Streaming<Beat>>) -> Result<Response<Ended>, Status> {
        let s = &self.0;
        let mut beats = request.into_inner();
        let first = beats.message().await.map_err(|e| Status::cancelled(e.to_string()))?;
        let task = first.map(|b| b.task).unwrap_or_default();
        if task.is_empty() {
            return Err(Status::invalid_argument("an attend call names its task in the first beat"));
        }
        log::info!("{}: {task} attends", s.me);
        s.life().chief = Chief::Present(task.clone());
        s.changed.notify_all();
        let ended = loop {
            match beats.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => break "its connection closed before it said it was done".to_string(),
                Err(e) => break format!("its connection was lost: {}", e.message()),
            }
        };
        let mut life = s.life();
        if life.chief == Chief::Present(task.clone()) {
            log::warn!("{}: {task} is gone ({ended})", s.me);
            life.chief = Chief::Lost { task, reason: ended, at: Instant::now() };
        }
        drop(life);
        s.changed.notify_all();
        Ok(Response::new(Ended {}))
    }

    async fn done(&self, request: Request<Hello>) -> Result<Response<Ended>, Status> {
        let s = &self.0;
        let task = request.into_inner().task;
        let mut life = s.life();
        if matches!(&life.chief, Chief::Present(c) | Chief::Lost { task: c, .. } if *c == task) {
            life.chief = Chief::Done(task.clone());
            life.chief_done_at = Some(Instant::now());
        }
        life.done.insert(task.clone());
        drop(life);
        log::info!("{}: {task} finished training", s.me);
        s.changed.notify_all();
        Ok(Response::new(Ended {}))
    }
}

/// Serves `shard` as this cluster task (a ps task) until training ends: the chief said it
/// is done and every worker that joined finished (or `linger` passed). Fails, naming the
/// task at fault, when no training task comes within `connect_timeout`, or the chief is
/// lost and does not come back within it. When `should_stop` fires, it tells the training
/// tasks to stop (push replies say `stopping`), serves the chief's final checkpoint, and
/// returns once the chief is done (an error when there is no chief to wait for). Returns
/// the final global step, when this task holds it.
pub fn serve(config: ServeConfig, shard: ParameterShard) -> Result<Option<i64>> {
    let me = config.cluster.task().to_string();
    let err = |reason: String, retryable: bool| RuntimeError::ParameterServer { task: me.clone(), reason, retryable };
    let address = config.cluster.address().ok_or_else(|| err("has no address in the cluster spec".into(), false))?;
    // An IP address is bound as given (127.0.0.1 in tests); a host name on every interface.
    let bind: std::net::SocketAddr = match address.parse() {
        Ok(socket) => socket,
        Err(_) => {
            let port = address.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
            let port = port.ok_or_else(|| err(format!("address {address} has no port"), false))?;
            std::net::SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port))
        }
    };
    let token = match &config.token {
        Some(t) => Some(
            token_value(t).ok_or_else(|| err("the token must be printable ASCII without line breaks".into(), false))?,
        ),
        None => None,
    };
    let tls = match &config.tls {
        Some(tls) => Some(tls.load().map_err(|reason| err(format!("TLS: {reason}"), false))?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("engine-ps")
        .enable_all()
        .build()
        .map_err(|e| err(format!("starting the network runtime failed: {e}"), false))?;
    let listener = std::net::TcpListener::bind(bind)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| err(format!("cannot listen on {address}: {e}"), true))?;
    let shared = Arc::new(Shared {
        shard,
        me: me.clone(),
        fingerprint: config.fingerprint.clone(),
        life: Mutex::new(Life {
            chief: Chief::NotYet,
            seen: BTreeSet::new(),
            done: BTreeSet::new(),
            heard: BTreeMap::new(),
            first_hello: None,
            chief_done_at: None,
            draining: None,
        }),
        changed: Condvar::new(),
    });
    let incoming = {
        let _entered = runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| err(e.to_string(), false))?;
        TcpIncoming::from(listener).with_nodelay(Some(true))
    };
    let service = ParameterServiceServer::new(Service(shared.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let service = InterceptedService::new(service, RequireToken::new(token, None));
    let mut builder = Server::builder();
    if let Some(tls) = &tls {
        builder = builder.tls_config(tls.server()).map_err(|e| err(format!("TLS: {}", error_chain(&e)), false))?;
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let failed = Arc::new(Mutex::new(None::<String>));
    let server = runtime.spawn({
        let failed = failed.clone();
        let shared = shared.clone();
        async move {
            let result = builder
                .serve_with_incoming_shutdown(service, incoming, async {
                    let _ = stop_rx.await;
                })
                .await;
            if let Err(e) = result {
                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(error_chain(&e));
                shared.changed.notify_all();
            }
        }
    });
    log::info!("{me}: serving {} variables on {address}", shared.shard.variables().len());
    let started = Instant::now();
    let outcome = (|| -> Result<()> {
        let mut life = shared.life();
        loop {
            if let Some(reason) = failed.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                return Err(err(format!("the server stopped: {reason}"), true));
            }
            if life.draining.is_none()
                && let Some(signal) = (config.should_stop)()
            {
                log::info!("{me}: received {signal}: the training tasks stop, and the chief saves a checkpoint");
                life.draining = Some((signal, Instant::now()));
            }
            if let Some((signal, since)) = &life.draining {
                // Done once the chief has saved and the workers have stopped (below, as at
                // the end of training), or at once when there is no chief to wait for.
                let chief_done = matches!(life.chief, Chief::Done(_));
                if !chief_done && (!matches!(life.chief, Chief::Present(_)) || since.elapsed() > config.linger) {
                    return Err(err(format!("stopped by {signal}"), true));
                }
            }
            if life.first_hello.is_none() && started.elapsed() > config.connect_timeout {
                return Err(err(
                    format!(
                        "no training task reached it within {:?} (are the chief and workers running?)",
                        config.connect_timeout
                    ),
                    true,
                ));
            }
            if let Chief::Lost { task, reason, at } = &life.chief
                && at.elapsed() > config.connect_timeout
            {
                return Err(err(
                    format!("{task} was lost ({reason}) and did not come back within {:?}", config.connect_timeout),
                    true,
                ));
            }
            if let Some(at) = life.chief_done_at {
                // Still training: not done, and heard from lately (a task that died
                // without a word is not waited for).
                let pending: Vec<&String> = life
                    .seen
                    .iter()
                    .filter(|t| !life.done.contains(*t))
                    .filter(|t| life.heard.get(*t).is_some_and(|at| at.elapsed() < QUIET))
                    .collect();
                if pending.is_empty() {
                    log::info!("{me}: training is over; stopping");
                    return Ok(());
                }
                if at.elapsed() > config.linger {
                    log::warn!(
                        "{me}: the chief finished {:?} ago and {} did not; stopping",
                        config.linger,
                        pending.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
                    );
                    return Ok(());
                }
            }
            life = shared.changed.wait_timeout(life, Duration::from_millis(200)).unwrap_or_else(|p| p.into_inner()).0;
        }
    })();
    let _ = stop_tx.send(());
    // Let replies in flight (the last push's, the done's) reach their callers.
    let _ = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(2), server).await });
    runtime.shutdown_timeout(Duration::from_secs(1));
    outcome.map(|()| shared.shard.global_step())
}
