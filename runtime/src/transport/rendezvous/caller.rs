//! This task as its rendezvous calls see it: who it is, the cluster's chief and workers,
//! its token, and a small runtime to make the calls on.

use super::super::ConnectError;
use super::super::auth::token_value;
use super::super::handshake::PROTOCOL_VERSION;
use super::super::members::{Member, cluster_members};
use super::super::proto::{JoinRequest, TaskIdentity};
use super::ElasticConfig;
use crate::cluster::TaskId;
use tokio::runtime::Runtime;
use tonic::metadata::AsciiMetadataValue;

pub(super) struct Caller {
    pub me: TaskId,
    /// `worker:1 at host:port`, for errors and logs.
    pub name: String,
    /// Every chief and worker of the cluster, in its rank order.
    pub seats: Vec<Member>,
    pub address: String,
    pub token: Option<AsciiMetadataValue>,
    pub runtime: Runtime,
}

impl Caller {
    pub fn of(config: &ElasticConfig) -> Result<Caller, ConnectError> {
        let cluster = &config.network.cluster;
        let (me, name, spec) = (cluster.task(), cluster.to_string(), cluster.spec());
        let seats = cluster_members(spec);
        let address = seats
            .iter()
            .find(|s| s.task == me)
            .map(|s| s.address.clone())
            .ok_or_else(|| ConnectError::NotAMember { task: name.clone() })?;
        let token = match &config.network.token {
            Some(token) => Some(token_value(token).ok_or_else(|| ConnectError::InvalidToken { task: name.clone() })?),
            None => None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ConnectError::Runtime { task: name.clone(), reason: e.to_string() })?;
        Ok(Caller { me, name, seats, address, token, runtime })
    }

    /// A join (or announcement) from this task, last in `epoch` (at `rank`), at `step`.
    pub fn request(&self, config: &ElasticConfig, epoch: u64, rank: usize, step: u64, joining: bool) -> JoinRequest {
        JoinRequest {
            protocol_version: PROTOCOL_VERSION,
            sender: Some(TaskIdentity { task: self.me.to_string(), address: self.address.clone(), rank: rank as u32 }),
            fingerprint: config.network.fingerprint.clone(),
            epoch,
            step,
            joining,
        }
    }
}
