//! A training task's connections to the ps tasks: pull variables, push gradients,
//! initialize and export (the chief), each call bounded by a deadline and every failure
//! naming the ps task and its address.

use super::proto::parameter_service_client::ParameterServiceClient;
use super::proto::{Beat, ExportRequest, Hello, PullRequest, PushRequest, StatusReply, StatusRequest, Tensor, Tensors};
use super::tensor::{decode, encode};
use super::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use crate::transport::auth::{AttachToken, token_value};
use crate::transport::link::error_chain;
use crate::transport::tls::TlsConfig;
use crate::{
    Result, RuntimeError,
    cluster::{Cluster, TaskType},
};
use engine_graph::{HostTensor, Outlet};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

type Client = ParameterServiceClient<InterceptedService<Channel, AttachToken>>;

/// Pause between attempts while a ps task is not up yet.
const RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// How a training task reaches the ps tasks.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub cluster: Cluster,
    pub fingerprint: String,
    pub token: Option<String>,
    /// How long one call may take (a pull, a push, an export).
    pub call_timeout: Duration,
    /// How long to wait for the ps tasks to come up, and to be initialized.
    pub connect_timeout: Duration,
    /// Mutual TLS with the ps tasks (their certificates checked against the CA).
    pub tls: Option<TlsConfig>,
}

struct Ps {
    name: String,
    address: String,
    client: Client,
}

/// What a push did, over every ps task.
#[derive(Debug, Clone, Default)]
pub struct Pushed {
    /// Whether every ps task applied its part.
    pub applied: bool,
    pub global_step: Option<i64>,
    pub non_finite: Vec<String>,
    /// The chief finished: training is over.
    pub finished: bool,
    /// A ps task was asked to stop: the cluster stops, the chief saves its work.
    pub stopping: bool,
}

/// This task's connections to every ps task of the cluster.
pub struct ParameterClients {
    me: String,
    ps: Vec<Ps>,
    runtime: Runtime,
    call_timeout: Duration,
    connect_timeout: Duration,
    /// The chief's attend streams: dropping the sender ends them.
    attending: std::sync::Mutex<Vec<tokio::sync::mpsc::Sender<Beat>>>,
}

impl ParameterClients {
    /// Reaches every ps task (retrying while they start) and shakes hands: a ps task of
    /// another job or build refuses by name.
    pub fn connect(config: ClientConfig) -> Result<Self> {
        let me = config.cluster.task().to_string();
        let err =
            |task: String, reason: String, retryable: bool| RuntimeError::ParameterServer { task, reason, retryable };
        let token = match &config.token {
            Some(t) => {
                Some(token_value(t).ok_or_else(|| err(me.clone(), "the token must be printable ASCII".into(), false))?)
            }
            None => None,
        };
        let tls = match &config.tls {
            Some(tls) => Some(tls.load().map_err(|reason| err(me.clone(), format!("TLS: {reason}"), false))?),
            None => None,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("engine-ps-client")
            .enable_all()
            .build()
            .map_err(|e| err(me.clone(), format!("starting the network runtime failed: {e}"), false))?;
        let addresses = config.cluster.spec().tasks(TaskType::Ps).to_vec();
        if addresses.is_empty() {
            return Err(err(me, "the cluster has no ps task".into(), false));
        }
        let mut ps = Vec::new();
        for (k, address) in addresses.iter().enumerate() {
            let name = format!("ps:{k}");
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
                .map_err(|e| err(name.clone(), format!("address {address}: {e}"), false))?
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true);
            if let Some(tls) = &tls {
                endpoint = endpoint
                    .tls_config(tls.client(address))
                    .map_err(|e| err(name.clone(), format!("TLS: {}", error_chain(&e)), false))?;
            }
            // The channel's background work runs on this task's runtime.
            let channel = {
                let _entered = runtime.enter();
                endpoint.connect_lazy()
            };
            let client = ParameterServiceClient::with_interceptor(channel, AttachToken::new(token.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            ps.push(Ps { name, address: address.clone(), client });
        }
        let clients = ParameterClients {
            me,
            ps,
            runtime,
            call_timeout: config.call_timeout,
            connect_timeout: config.connect_timeout,
            attending: std::sync::Mutex::new(Vec::new()),
        };
        let hello =
            Hello { protocol_version: PROTOCOL_VERSION, task: clients.me.clone(), fingerprint: config.fingerprint };
        let deadline = Instant::now() + config.connect_timeout;
        for p in &clients.ps {
            loop {
                let mut client = p.client.clone();
                let result = clients.call(p, client.hello(hello.clone()));
                match result {
                    Ok(_) => break,
                    Err(e) if e.is_retryable() && Instant::now() < deadline => std::thread::sleep(RETRY_INTERVAL),
                    Err(RuntimeError::ParameterServer { task, reason, .. }) if Instant::now() >= deadline => {
                        return Err(err(
                            task,
                            format!("not reachable within {:?}: {reason}", config.connect_timeout),
                            true,
                        ));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        log::info!("{}: connected to {} ps task(s)", clients.me, clients.ps.len());
        Ok(clients)
    }

    pub fn len(&self) -> usize {
        self.ps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ps.is_empty()
    }

    /// Runs one call to `p` with the call deadline, naming `p` in every failure.
    fn call<T>(&self, p: &Ps, call: impl Future<Output = Result<tonic::Response<T>, Status>>) -> Result<T> {
        let timeout = self.call_timeout;
        let result = self.runtime.block_on(async { tokio::time::timeout(timeout, call).await });
        match result {
            Ok(Ok(reply)) => Ok(reply.into_inner()),
            Ok(Err(status)) => Err(failure(p, &status)),
            Err(_) => Err(RuntimeError::ParameterServer {
                task: p.name.clone(),
                reason: format!("no answer from {} within {timeout:?}", p.address),
                retryable: true,
            }),
        }
    }

    /// Runs `f` against every ps task at once; results in ps order.
    fn each<T: Send + 'static, F>(&self, mut f: impl FnMut(usize, Client) -> F) -> Vec<Result<T>>
    where
        F: Future<Output = Result<tonic::Response<T>, Status>> + Send + 'static,
    {
        let timeout = self.call_timeout;
        let handles: Vec<_> = self
            .ps
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let call = f(k, p.client.clone());
                self.runtime.spawn(async move { tokio::time::timeout(timeout, call).await })
            })
            .collect();
        handles
            .into_iter()
            .zip(&self.ps)
            .map(|(h, p)| match self.runtime.block_on(h) {
                Ok(Ok(Ok(reply))) => Ok(reply.into_inner()),
                Ok(Ok(Err(status))) => Err(failure(p, &status)),
                Ok(Err(_)) => Err(RuntimeError::ParameterServer {
                    task: p.name.clone(),
                    reason: format!("no answer from {} within {timeout:?}", p.address),
                    retryable: true,
                }),
                Err(e) => {
                    Err(RuntimeError::ParameterServer { task: p.name.clone(), reason: e.to_string(), retryable: false })
                }
            })
            .collect()
    }

    pub fn status(&self) -> Result<Vec<StatusReply>> {
        self.each(|_, mut c| async move { c.status(StatusRequest {}).await }).into_iter().collect()
    }

    /// Waits until every ps task is initialized (by the chief); returns the global step.
    pub fn wait_initialized(&self) -> Result<Option<i64>> {
        let deadline = Instant::now() + self.connect_timeout;
        loop {
            let status = self.status()?;
            let refused = status.iter().enumerate().find(|(_, s)| !s.refusal.is_empty());
            if refused.is_none() && status.iter().all(|s| s.initialized) {
                return Ok(status.iter().find_map(|s| s.global_step));
            }
            if Instant::now() >= deadline {
                // A lost chief may come back (restarted with this task): only its absence
                // past the deadline is an error.
                if let Some((k, s)) = refused {
                    return Err(RuntimeError::ParameterServer {
                        task: self.ps[k].name.clone(),
                        reason: s.refusal.clone(),
                        retryable: true,
                    });
                }
                let waiting: Vec<&str> =
                    status.iter().zip(&self.ps).filter(|(s, _)| !s.initialized).map(|(_, p)| p.name.as_str()).collect();
                return Err(RuntimeError::ParameterServer {
                    task: waiting.join(", "),
                    reason: format!(
                        "not initialized within {:?}: the chief initializes the ps tasks (is it running?)",
                        self.connect_timeout
                    ),
                    retryable: true,
                });
            }
            std::thread::sleep(RETRY_INTERVAL);
        }
    }

    /// The chief's starting values, each ps task given its own. Returns whether every ps
    /// task took them (false: some already held values, which they keep) and the global
    /// step they hold now.
    pub fn initialize(&self, per_ps: Vec<BTreeMap<String, HostTensor>>) -> Result<(bool, Option<i64>)> {
        let mut messages: Vec<Option<Tensors>> = per_ps
            .iter()
            .map(|m| Some(Tensors { tensors: m.iter().map(|(n, t)| encode(n, None, t)).collect() }))
            .collect();
        messages.resize(self.ps.len(), Some(Tensors::default()));
        let replies: Vec<_> = self.each(|k, mut c| {
            let m = messages[k].take().unwrap_or_default();
            async move { c.initialize(m).await }
        });
        let replies = replies.into_iter().collect::<Result<Vec<_>>>()?;
        Ok((replies.iter().all(|r| r.accepted), replies.iter().find_map(|r| r.global_step)))
    }

    /// The current values of each ps task's `names`.
    pub fn pull(&self, names: &[Vec<String>]) -> Result<Vec<Vec<HostTensor>>> {
        let replies = self.each(|k, mut c| {
            let names = names.get(k).cloned().unwrap_or_default();
            let task = self.me.clone();
            async move { c.pull(PullRequest { names, task }).await }
        });
        replies
            .into_iter()
            .zip(&self.ps)
            .map(|(r, p)| r.and_then(|t| decoded(p, &t.tensors).map(|v| v.into_iter().map(|(_, t)| t).collect())))
            .collect()
    }

    /// One step's values for each ps task, applied there at once.
    pub fn push(&self, step: i64, per_ps: Vec<Vec<(Outlet, HostTensor)>>) -> Result<Pushed> {
        let mut messages: Vec<Option<Vec<Tensor>>> = per_ps
            .into_iter()
            .map(|values| Some(values.iter().map(|(o, t)| encode("", Some(*o), t)).collect()))
            .collect();
        messages.resize(self.ps.len(), Some(Vec::new()));
        let me = self.me.clone();
        let replies = self.each(|k, mut c| {
            let values = messages[k].take().unwrap_or_default();
            let task = me.clone();
            async move { c.push(PushRequest { task, step, values }).await }
        });
        let replies = replies.into_iter().collect::<Result<Vec<_>>>()?;
        Ok(Pushed {
            applied: replies.iter().all(|r| r.applied),
            global_step: replies.iter().find_map(|r| r.global_step),
            non_finite: replies.iter().flat_map(|r| r.non_finite.clone()).collect(),
            finished: replies.iter().any(|r| r.finished),
            stopping: replies.iter().any(|r| r.stopping),
        })
    }

    /// Every variable of every ps task (for a checkpoint).
    pub fn export(&self) -> Result<BTreeMap<String, HostTensor>> {
        let replies = self.each(|_, mut c| async move { c.export(ExportRequest {}).await });
        let mut all = BTreeMap::new();
        for (r, p) in replies.into_iter().zip(&self.ps) {
            all.extend(decoded(p, &r?.tensors)?);
        }
        Ok(all)
    }

    /// Tells every ps task that this task is the chief and is alive, for as long as this
    /// connection set lives: a chief that dies is then noticed at once.
    pub fn attend(&self) -> Result<()> {
        let mut attending = self.attending.lock().unwrap_or_else(|p| p.into_inner());
        for p in &self.ps {
            let (tx, rx) = tokio::sync::mpsc::channel::<Beat>(1);
            let first = Beat { task: self.me.clone() };
            let mut client = p.client.clone();
            let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
            self.runtime.block_on(tx.send(first)).map_err(|e| RuntimeError::ParameterServer {
                task: p.name.clone(),
                reason: e.to_string(),
                retryable: false,
            })?;
            let name = p.name.clone();
            self.runtime.spawn(async move {
                if let Err(status) = client.attend(stream).await {
                    log::debug!("the attend stream to {name} ended: {}", status.message());
                }
            });
            attending.push(tx);
        }
        Ok(())
    }

    /// Tells every ps task this task finished training (best effort: a ps task that is
    /// gone needs no telling).
    pub fn done(&self) {
        let hello = Hello { protocol_version: PROTOCOL_VERSION, task: self.me.clone(), fingerprint: String::new() };
        let replies = self.each(|_, mut c| {
            let hello = hello.clone();
            async move { c.done(hello).await }
        });
        for (r, p) in replies.into_iter().zip(&self.ps) {
            if let Err(e) = r {
                log::debug!("telling {} that {} is done: {e}", p.name, self.me);
            }
        }
        self.attending.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

fn decoded(p: &Ps, tensors: &[Tensor]) -> Result<Vec<(String, HostTensor)>> {
    tensors.iter().map(|t| Ok((t.name.clone(), decode(t).map_err(|e| invalid(p, e))?))).collect()
}

fn invalid(p: &Ps, why: String) -> RuntimeError {
    RuntimeError::ParameterServer {
        task: p.name.clone(),
        reason: format!("sent an invalid tensor: {why}"),
        retryable: false,
    }
}

/// A failed call as an error naming the ps task: unreachable (the transport failed,
/// retryable), or what the ps task answered.
fn failure(p: &Ps, status: &Status) -> RuntimeError {
    match status.code() {
        // What the transport reports when the ps task is not there or went away.
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded => {
            let why = match std::error::Error::source(status) {
                Some(source) => error_chain(source),
                None => status.message().to_string(),
            };
            RuntimeError::ParameterServer {
                task: p.name.clone(),
                reason: format!("unreachable at {} ({why})", p.address),
                retryable: true,
            }
        }
        // The ps task's own answers: retryable refusals (not initialized yet) or final ones.
        code => RuntimeError::ParameterServer {
            task: p.name.clone(),
            reason: status.message().to_string(),
            retryable: code == Code::Aborted,
        },
    }
}
