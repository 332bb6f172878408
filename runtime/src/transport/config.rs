//! What a task needs to join its collective group.

use super::communication::Communication;
use super::tls::TlsConfig;
use crate::cluster::Cluster;
use std::fmt;
use std::time::Duration;

/// The configuration of [`NetworkGroup::connect`](super::NetworkGroup::connect).
#[derive(Clone)]
pub struct NetworkConfig {
    /// This task and the cluster. Only the chief and the workers are in the collective
    /// group, ranked by [`ClusterSpec::collective_rank`](crate::cluster::ClusterSpec::collective_rank).
    pub cluster: Cluster,
    /// The job's fingerprint (spec, graph hash, strategy, cluster); peers must match exactly.
    pub fingerprint: String,
    /// A shared secret: when set, every call must carry it and calls without it are refused.
    pub token: Option<String>,
    /// Each collective's deadline; an operation that misses it names the tasks whose
    /// contribution did not arrive.
    pub collective_timeout: Duration,
    /// How long `connect` waits for every peer; peers may start in any order within it.
    pub connect_timeout: Duration,
    /// Mutual TLS between the tasks; plaintext when `None`.
    pub tls: Option<TlsConfig>,
    /// The all-reduce's data path: shared memory when the members share a host (`Auto`),
    /// or always the gRPC ring.
    pub communication: Communication,
}

/// Prints everything but the token's value.
impl fmt::Debug for NetworkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetworkConfig")
            .field("cluster", &self.cluster)
            .field("fingerprint", &self.fingerprint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("collective_timeout", &self.collective_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .field("communication", &self.communication)
            .finish()
    }
}
