//! TensorFlow Serving's REST API over hyper: model status, metadata and predict.

use super::{
    batcher::{Batcher, Refused},
    json,
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
                    "outputs": specs(&state.signature.outputs),
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

fn specs(specs: &[engine_estimator::export::TensorSpec]) -> Value {
    Value::Object(
        specs
            .iter()
            .map(|s| {
                let dims: Vec<Value> = s.shape.iter().map(|d| json!({ "size": d.to_string() })).collect();
                (
                    s.name.clone(),
                    json!({ "name": s.name, "dtype": s.dtype.to_string(), "tensor_shape": { "dim": dims } }),
                )
            })
            .collect(),
    )
}

async fn predict(req: Request<hyper::body::Incoming>, state: &State) -> Response<Body> {
    let body = match Limited::new(req.into_body(), state.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over {} bytes", state.max_body));
        }
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}")),
    };
    let request = match json::parse_request(&body, &state.signature) {
        Ok(r) => r,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    match state.batcher.predict(request.inputs, request.rows).await {
        Ok(Ok(outputs)) => reply(StatusCode::OK, &json::response(request.form, &outputs)),
        Ok(Err(EstimatorError::Request(message))) => error(StatusCode::BAD_REQUEST, message),
        Ok(Err(e)) => {
            log::error!("predict failed: {e}");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        Err(Refused::Busy) => error(StatusCode::SERVICE_UNAVAILABLE, "the request queue is full; retry later"),
        Err(Refused::Stopped) => error(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping"),
    }
}
