//! TensorFlow Serving's REST API over hyper: model status, metadata and predict.

use super::{
    batcher::{Batcher, Refused},
    json, stream,
};
use engine_estimator::{EstimatorError, export::Signature};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Response, StatusCode, body::Bytes, header};
use serde_json::{Value, json};
use std::sync::Arc;

pub struct State {
    pub name: String,
    pub version: String,
    pub signature: Signature,
    pub batcher: Batcher,
    /// The largest request body accepted.
    pub max_body: usize,
    /// What the requests being read, decoded and run may hold at once.
    pub inflight: Inflight,
    /// How long a client may take to send a body.
    pub body_timeout: std::time::Duration,
    /// The export's class names (a label vocabulary), which answer `classes`.
    pub class_names: Option<Vec<String>>,
}

/// The server's memory budget for requests in flight, in MiB. A request is charged for
/// what it will hold before a byte of its body is read, and refused with 503 when the
/// budget is spent: concurrent large requests wait in their clients, not in this heap.
pub struct Inflight {
    permits: Arc<tokio::sync::Semaphore>,
    total: u32,
}

/// Bytes a request holds per byte of its body, decoded as it is read (`stream.rs`): its
/// text, its tensor and its outputs. Measured: 206 MiB at the peak for one 60.9 MiB body
/// of 20,000 images (`bench/serve_memory.py`).
const STREAMED: usize = 4;
/// The same for a body in another form (an object per instance, several inputs), which
/// is decoded through serde_json's tree first: about fifty times its text (3.0 GB for the
/// same 60.9 MiB as lists). Charged on top of `STREAMED` once the form is known.
const TREE: usize = 48;

impl Inflight {
    pub fn new(mib: u64) -> Inflight {
        let total = u32::try_from(mib).unwrap_or(u32::MAX);
        Inflight { permits: Arc::new(tokio::sync::Semaphore::new(total as usize)), total }
    }

    /// The budget for a body of `bytes` decoded `factor` times over, or why there is none.
    fn charge(&self, bytes: usize, factor: usize) -> Result<tokio::sync::OwnedSemaphorePermit, String> {
        let mib = bytes.saturating_mul(factor).div_ceil(1 << 20).max(1);
        let wanted = u32::try_from(mib).unwrap_or(u32::MAX);
        if wanted > self.total {
            return Err(format!(
                "a body of {bytes} bytes needs about {mib} MiB to decode, more than this server's --max-inflight-mib \
                 ({}); send fewer examples per request{}",
                self.total,
                if factor == TREE {
                    r#", or send each example as a list of numbers ({"instances": [[...]]})"#
                } else {
                    ""
                }
            ));
        }
        self.permits
            .clone()
            .try_acquire_many_owned(wanted)
            .map_err(|_| format!("the server is decoding {} MiB of requests already; retry later", self.total))
    }
}

pub type Body = Full<Bytes>;

fn reply(status: StatusCode, value: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(value.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r
}

/// TensorFlow Serving's error body.
fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    reply(status, &json!({ "error": message.into() }))
}

pub async fn handle(
    req: Request<hyper::body::Incoming>,
    state: Arc<State>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let Some(rest) = path.strip_prefix("/v1/models/") else {
        return Ok(error(StatusCode::NOT_FOUND, format!("no such path {path}; try /v1/models/{}", state.name)));
    };
    let (model, verb) = match rest.split_once(':') {
        Some((m, v)) => (m, Some(v)),
        None => (rest, None),
    };
    // `/v1/models/NAME/versions/V` and `/labels/L` address one version: this one.
    let (model, tail) = match model.split_once('/') {
        Some((m, t)) => (m, Some(t)),
        None => (model, None),
    };
    if model != state.name {
        return Ok(error(StatusCode::NOT_FOUND, format!("Servable not found for request: Latest({model})")));
    }
    let tail = match tail {
        Some(t) if t.starts_with("versions/") && t["versions/".len()..] != state.version => {
            let v = &t["versions/".len()..];
            return Ok(error(StatusCode::NOT_FOUND, format!("Servable not found for request: Specific({model}, {v})")));
        }
        Some(t) if t.starts_with("versions/") => None,
        other => other,
    };
    let method = req.method().clone();
    Ok(match (method, verb, tail) {
        (Method::GET, None, None) => reply(
            StatusCode::OK,
            &json!({ "model_version_status": [{
                "version": state.version,
                "state": "AVAILABLE",
                "status": { "error_code": "OK", "error_message": "" }
            }]}),
        ),
        (Method::GET, None, Some("metadata")) => reply(
            StatusCode::OK,
            &json!({
                "model_spec": { "name": state.name, "version": state.version, "signature_name": "" },
                "metadata": { "signature_def": { "signature_def": { "serving_default": {
                    "inputs": specs(&state.signature.inputs),
                    "outputs": outputs(&state),
                    "method_name": "tensorflow/serving/predict"
                }}}}
            }),
        ),
        (Method::POST, Some("predict"), None) => predict(req, &state).await,
        (_, Some("predict"), None) => error(StatusCode::METHOD_NOT_ALLOWED, "predict takes POST"),
        (_, Some(v), _) => error(StatusCode::NOT_FOUND, format!("unknown method '{v}'; this server answers :predict")),
        _ => error(StatusCode::NOT_FOUND, format!("no such path {path}")),
    })
}

/// TensorFlow Serving's name of a dtype (its `DataType` enum), as clients written for it
/// read the metadata.
fn tf_dtype(dtype: engine_graph::DType) -> &'static str {
    match dtype {
        engine_graph::DType::F32 => "DT_FLOAT",
        engine_graph::DType::I64 => "DT_INT64",
        engine_graph::DType::Bool => "DT_BOOL",
    }
}

/// The outputs as answered: with class names, `classes` are strings and their ids are
/// `class_ids`.
fn outputs(state: &State) -> Value {
    let mut outputs = specs(&state.signature.outputs);
    if state.class_names.is_some()
        && let Some(Value::Object(classes)) = outputs.get(json::CLASSES).cloned()
    {
        let mut ids = classes.clone();
        ids.insert("name".into(), "class_ids".into());
        let mut named = classes;
        named.insert("dtype".into(), "DT_STRING".into());
        if let Value::Object(m) = &mut outputs {
            m.insert(json::CLASSES.into(), Value::Object(named));
            m.insert("class_ids".into(), Value::Object(ids));
        }
    }
    outputs
}

fn specs(specs: &[engine_estimator::export::TensorSpec]) -> Value {
    Value::Object(
        specs
            .iter()
            .map(|s| {
                let dims: Vec<Value> = s.shape.iter().map(|d| json!({ "size": d.to_string() })).collect();
                (s.name.clone(), json!({ "name": s.name, "dtype": tf_dtype(s.dtype), "tensor_shape": { "dim": dims } }))
            })
            .collect(),
    )
}

async fn predict(req: Request<hyper::body::Incoming>, state: &State) -> Response<Body> {
    // Refused on its headers, before a byte of an oversized body is read.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > state.max_body as u64) {
        return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is {n} bytes, over {} bytes", state.max_body));
    }
    let charged = declared.map_or(state.max_body, |n| n as usize);
    let _budget = match state.inflight.charge(charged, STREAMED) {
        Ok(permit) => permit,
        Err(message) => return error(StatusCode::SERVICE_UNAVAILABLE, message),
    };
    let read = tokio::time::timeout(state.body_timeout, Limited::new(req.into_body(), state.max_body).collect());
    let body = match read.await {
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {} s", state.body_timeout.as_secs()),
            );
        }
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over {} bytes", state.max_body));
        }
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}")),
    };
    let response = predict_body(&body, state).await;
    drop(body);
    release_memory(charged);
    response
}

/// Parses, runs and answers one request body.
async fn predict_body(body: &[u8], state: &State) -> Response<Body> {
    let (request, _tree) = match stream::decode(body, &state.signature) {
        stream::Decoded::Request(r) => (r, None),
        stream::Decoded::Error(message) => return error(StatusCode::BAD_REQUEST, message),
        // Another form: serde_json's tree costs many times the text, charged before it is built.
        stream::Decoded::Other => {
            let permit = match state.inflight.charge(body.len(), TREE) {
                Ok(permit) => permit,
                Err(message) => return error(StatusCode::SERVICE_UNAVAILABLE, message),
            };
            match json::parse_general(body, &state.signature) {
                Ok(r) => (r, Some(permit)),
                Err(message) => return error(StatusCode::BAD_REQUEST, message),
            }
        }
    };
    match state.batcher.predict(request.inputs, request.rows).await {
        Ok(Ok(outputs)) => match json::check_outputs(&outputs, request.rows) {
            Ok(()) => reply(StatusCode::OK, &json::response(request.form, &outputs, state.class_names.as_deref())),
            Err(message) => error(StatusCode::BAD_REQUEST, message),
        },
        Ok(Err(EstimatorError::Request(message))) => error(StatusCode::BAD_REQUEST, message),
        Ok(Err(e)) => {
            log::error!("predict failed: {e}");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        Err(Refused::Busy) => error(StatusCode::SERVICE_UNAVAILABLE, "the request queue is full; retry later"),
        Err(Refused::Stopped) => error(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping"),
    }
}

/// Hands the heap's free pages back to the system after a large request: glibc keeps what a
/// request freed in its arenas, so a server's RSS stayed at its peak (5.9 GB after a few
/// 60 MiB requests) while it was idle.
fn release_memory(body_bytes: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if body_bytes >= 1 << 20 {
        // SAFETY: malloc_trim only returns free memory to the system; it has no preconditions.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = body_bytes;
}
