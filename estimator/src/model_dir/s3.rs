//! S3 connection settings: the usual `AWS_*` environment variables, overridden field by field by a spec.
//!
//! A job spec often needs to point at a local S3-compatible server (MinIO, moto, Ceph) without touching
//! the environment of every worker, so each setting can be carried by the spec; whatever it leaves unset
//! falls back to the environment (`AWS_ENDPOINT_URL`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`).

use super::error::{ModelDirError, Result};
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use serde::{Deserialize, Serialize};

#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Options {
    /// e.g. `http://127.0.0.1:9000`; requests use path-style addressing when an endpoint is given.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Needed for `http://` endpoints; the client refuses plain HTTP otherwise.
    pub allow_http: Option<bool>,
}

// Hand-written so that a logged spec or error never prints the secret key.
impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "<redacted>"))
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// Builds the client for one bucket. Conditional puts (`If-Match` / `If-None-Match`) are always enabled:
/// the checkpoint state file is published with them, and AWS S3, MinIO and moto all honour them.
pub(crate) fn build_s3_store(location: &str, bucket: &str, options: Option<&S3Options>) -> Result<AmazonS3> {
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(options) = options {
        if let Some(endpoint) = &options.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &options.region {
            builder = builder.with_region(region);
        }
        if let Some(key) = &options.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &options.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        if let Some(allow_http) = options.allow_http {
            builder = builder.with_allow_http(allow_http);
        }
    }
    builder
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .build()
        .map_err(|source| ModelDirError::S3Config { location: location.to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_secret() {
        let options = S3Options { secret_access_key: Some("hunter2".into()), ..Default::default() };
        let shown = format!("{options:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let parsed: std::result::Result<S3Options, _> = serde_json::from_str(r#"{"endpont": "http://x"}"#);
        assert!(parsed.is_err());
        let parsed: std::result::Result<S3Options, _> =
            serde_json::from_str(r#"{"endpoint": "http://x", "allow_http": true}"#);
        assert_eq!(parsed.ok().and_then(|o| o.allow_http), Some(true));
    }
}
