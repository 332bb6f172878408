//! Optional mutual TLS between the tasks, with rustls.
//!
//! Every task presents a certificate signed by the cluster's CA and accepts only peers
//! whose certificate that CA signed, so TLS both encrypts the traffic (the token included)
//! and authenticates the machines. A peer's certificate must be valid for the host part of
//! its address in the cluster spec (a DNS name, or an IP address SAN when the spec uses
//! IPs).

use super::members::host_of;
use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// PEM files, the same layout on every task (each with its own certificate and key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// This task's certificate chain.
    pub cert_pem: PathBuf,
    /// This task's private key.
    pub key_pem: PathBuf,
    /// The CA that signed every task's certificate.
    pub ca_pem: PathBuf,
}

/// The files read once, so that every connection uses the same bytes.
#[derive(Clone)]
pub(super) struct LoadedTls {
    identity: Identity,
    ca: Certificate,
}

impl TlsConfig {
    pub(super) fn load(&self) -> Result<LoadedTls, String> {
        let read = |path: &Path, what: &str| {
            std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
        };
        let cert = read(&self.cert_pem, "certificate")?;
        let key = read(&self.key_pem, "private key")?;
        let ca = read(&self.ca_pem, "CA certificate")?;
        Ok(LoadedTls { identity: Identity::from_pem(cert, key), ca: Certificate::from_pem(ca) })
    }
}

impl LoadedTls {
    /// Serves with this task's certificate and requires a client certificate from the CA.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new().identity(self.identity.clone()).client_ca_root(self.ca.clone())
    }

    /// Connects to `address`, checking its certificate against the CA and the address's host.
    pub fn client(&self, address: &str) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
            .domain_name(host_of(address))
    }
}
