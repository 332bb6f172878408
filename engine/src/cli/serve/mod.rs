//! `engine serve`: an export behind TensorFlow Serving's REST API, with server-side
//! batching, until SIGTERM or SIGINT.

mod batcher;
mod http;
mod json;
mod stream;

use super::CliError;
use batcher::{BatchOptions, Batcher};
use clap::Args;
use engine_estimator::export::{LoadedModel, Predictor};
use engine_runtime::DeviceName;
use engine_runtime::Precision;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// An export directory (`engine export`'s output), or a directory of numbered exports
    /// (an exporter's `<model_dir>/export/<name>`), of which the newest is served.
    pub export_dir: String,
    /// The port of the REST API (TensorFlow Serving's is 8501; 0 picks a free one).
    #[arg(long, default_value_t = 8501)]
    pub port: u16,
    /// The address to listen on (`0.0.0.0` to accept other machines, as in a container).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The model's name in the URL: `/v1/models/NAME:predict`.
    #[arg(long, default_value = "model")]
    pub model_name: String,
    /// Examples one run takes at most; concurrent requests are merged up to it (1 to 4096).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_batch_size: u64,
    /// How long a request waits for others to share its run, in microseconds (0 to 1000000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub batch_timeout_micros: u64,
    /// Requests waiting for the model at most; more are answered 503 (1 to 65536).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_queue: u64,
    /// The largest request body, in MiB (1 to 1024).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_body_mib: u64,
    /// Memory for requests in flight, in MiB (1 to 65536): a request past it is answered 503
    /// before its body is read. Each is charged 4 times its body (decoded as it is read), and
    /// 48 times more in forms that need a JSON tree (an object per instance).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_inflight_mib: u64,
    /// Seconds a client may take to send a request's headers, then its body (1 to 3600).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub request_timeout_secs: u64,
    /// `cpu`, `wgpu[:N]` or `cuda[:N]`.
    #[arg(long, value_name = "DEVICE", default_value_t = DeviceName::CPU)]
    pub device: DeviceName,
}

pub fn serve(args: &ServeArgs) -> Result<(), CliError> {
    let model = LoadedModel::load_latest(&args.export_dir, None)?;
    let version = model
        .location
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|v| v.parse::<u64>().is_ok())
        .map_or_else(|| model.manifest.global_step.to_string(), str::to_string);
    let predictor = Predictor::new(&model, args.device, Precision::default())?;
    let signature = predictor.signature().clone();
    let options = BatchOptions {
        max_batch_size: args.max_batch_size as usize,
        timeout: Duration::from_micros(args.batch_timeout_micros),
        queue: args.max_queue as usize,
    };
    let batcher = Batcher::start(predictor, options).map_err(|e| CliError::Usage(format!("cannot start: {e}")))?;
    let state = Arc::new(http::State {
        name: args.model_name.clone(),
        version,
        signature,
        batcher,
        max_body: (args.max_body_mib as usize) << 20,
        inflight: http::Inflight::new(args.max_inflight_mib),
        body_timeout: Duration::from_secs(args.request_timeout_secs),
        class_names: model.manifest.class_names.clone(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start the server's runtime: {e}")))?;
    runtime.block_on(listen(args, state, &model))
}

async fn listen(args: &ServeArgs, state: Arc<http::State>, model: &LoadedModel) -> Result<(), CliError> {
    let address = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .map_err(|e| CliError::Usage(format!("cannot listen on {address}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| CliError::Usage(format!("cannot listen on {address}: {e}")))?;
    log::info!(
        "Serving {} (step {}) as '{}' version {} on http://{bound}/v1/models/{}",
        model.location,
        model.manifest.global_step,
        state.name,
        state.version,
        state.name
    );
    // The URL on stdout, once it answers: what scripts (and tests, with --port 0) wait for.
    super::output(&format!("http://{bound}/v1/models/{}\n", state.name));
    loop {
        if let Some(signal) = engine_estimator::preemption::requested() {
            let c = &state.batcher.counts;
            let load = |x: &std::sync::atomic::AtomicU64| x.load(std::sync::atomic::Ordering::Relaxed);
            log::info!(
                "Received {}; no longer accepting requests. Served {} requests ({} examples) in {} batches",
                signal.name(),
                load(&c.requests),
                load(&c.examples),
                load(&c.batches)
            );
            return Ok(());
        }
        let (stream, _) = match tokio::time::timeout(Duration::from_millis(200), listener.accept()).await {
            Err(_) => continue,
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                log::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let header_timeout = Duration::from_secs(args.request_timeout_secs);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| http::handle(req, state.clone()));
            // A client that trickles its headers is dropped after the timeout, not held forever.
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                log::debug!("connection ended: {e}");
            }
        });
    }
}
