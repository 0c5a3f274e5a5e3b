//! The service the layer wraps around another: one request through the idem runtime. In order:
//! refuse what cannot be served (no caller 401, bad key 400, body too large 413) before
//! anything is claimed; key the caller's scope; wait for a place among the requests the layer
//! runs; claim the record; run the inner service while the lease is renewed; record its
//! response (or release the key); answer duplicates from the record. From the claim on, the
//! request runs on a task of its own (unless the layer is told otherwise), so a client that
//! goes away does not cut it short.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use idem_core::{Call, Error, Fingerprint, Key, Operation, Outcome};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower_service::Service;

use crate::config::Config;
use crate::detached::finish_detached;
use crate::header::client_key;
use crate::problem::Problem;
use crate::request::{fingerprint, read_body, record_key};
use crate::stored::{ResponseCodec, StoredResponse};

/// The body the inner service receives: the buffered body of a request the layer handled
/// (`Left`), or the original body of one it passed through (`Right`).
pub type RequestBody<B> = Either<Full<Bytes>, B>;

/// The body the layer answers with: a recorded, replayed or problem answer (`Left`), or the
/// inner service's own body, passed through (`Right`).
pub type ResponseBody<B> = Either<Full<Bytes>, B>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The service [`IdempotencyLayer`](crate::IdempotencyLayer) makes.
#[derive(Clone)]
pub struct Idempotency<S> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Idempotency<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// Why a response was not recorded: the key is released and the response (or error) goes to
/// the client as it is.
enum NotKept<B, E> {
    Response(Response<B>),
    Service(E),
    BodyFailed,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotency<S>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone is not ready; the ready one goes with this request (tower's usual swap).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        if !config.methods.contains(request.method()) {
            return Box::pin(pass_through(inner, request));
        }
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let problem = |p: Problem| {
                Ok(p.to_response(config.problem_base.as_deref())
                    .map(Either::Left))
            };
            let Some(caller) = (config.scope)(&parts).filter(|s| s.names_someone()) else {
                return problem(Problem::UnknownCaller);
            };
            let client_key = match client_key(&parts.headers) {
                Ok(Some(key)) => key,
                Ok(None) if config.require_key => return problem(Problem::MissingKey),
                Ok(None) => {
                    let request = Request::from_parts(parts, body);
                    return pass_through(inner, request).await;
                }
                Err(bad) => return problem(Problem::BadKey(bad)),
            };
            let body = match read_body(&parts, body, config.max_request_body).await {
                Ok(body) => body,
                Err(p) => return problem(p),
            };
            let caller = match config.secret.scope_text(&*config.store, &caller).await {
                Ok(caller) => caller,
                Err(e) => {
                    tracing::error!(error = %e, "the request's scope could not be keyed");
                    return problem(Problem::StoreUnavailable {
                        retry_after: config.retry_after_secs(),
                    });
                }
            };
            let key = record_key(&parts, &caller, &client_key);
            let fingerprint = fingerprint(&parts, &body, &config.fingerprint_headers);
            let request = Request::from_parts(parts, Either::Left(Full::new(body)));
            // Waits here, with the client, for a place among the requests the layer runs: a
            // client that leaves while it waits has claimed nothing and runs nothing, and a run
            // that goes on after its client left still holds its place until it ends.
            let place = config
                .running
                .clone()
                .acquire_owned()
                .await
                .expect("the layer never closes its semaphore");
            let handled = handle(inner, config.clone(), request, key, fingerprint);
            let handled = async move {
                let answer = handled.await;
                drop(place);
                answer
            };
            if !config.finish_when_client_leaves {
                return handled.await;
            }
            match finish_detached(handled).await {
                Some(answer) => answer,
                None => {
                    tracing::error!(
                        "the request's task was cancelled before it answered (the runtime is \
                         shutting down); its claim was abandoned"
                    );
                    problem(Problem::Unexpected)
                }
            }
        })
    }
}

/// One request the layer handles, from the claim on: runs the inner service under the claim,
/// records its answer (or releases the key), or answers from the record.
async fn handle<S, ReqBody, ResBody>(
    mut inner: S,
    config: Arc<Config>,
    request: Request<RequestBody<ReqBody>>,
    key: Key,
    fingerprint: Fingerprint,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let problem = |p: Problem| {
        Ok(p.to_response(config.problem_base.as_deref())
            .map(Either::Left))
    };
    // The answer as the inner service gave it, every header included (the record leaves some
    // out): for this client, also when recording it failed.
    let live: Mutex<Option<Response<Full<Bytes>>>> = Mutex::new(None);
    let work = async {
        let response = inner.call(request).await.map_err(NotKept::Service)?;
        let (stored, response) = record(&config, response).await?;
        *live.lock().unwrap_or_else(|e| e.into_inner()) = Some(response);
        Ok(stored)
    };
    let live = || live.lock().unwrap_or_else(|e| e.into_inner()).take();
    let mut call = Call::new(&*config.store, key)
        .name("idem_http")
        .fingerprint(fingerprint)
        .lease(config.lease)
        .keep(config.keep);
    if let Some(wait) = config.wait {
        call = call.wait(wait);
    }
    let retry_after = config.retry_after_secs();
    match call.run_with(ResponseCodec, work).await {
        Ok(Outcome::Executed(stored)) => {
            let response = live().unwrap_or_else(|| stored.to_response(false));
            Ok(response.map(Either::Left))
        }
        Ok(Outcome::Duplicate {
            value: Some(stored),
            ..
        }) => Ok(stored.to_response(true).map(Either::Left)),
        Ok(Outcome::Duplicate { value: None, .. }) => problem(Problem::ReplayUnreadable),
        Ok(Outcome::InProgress { .. }) => problem(Problem::InProgress { retry_after }),
        Err(Error::Handler(NotKept::Response(response))) => Ok(response.map(Either::Right)),
        Err(Error::Handler(NotKept::Service(e))) => Err(e),
        Err(Error::Handler(NotKept::BodyFailed)) => problem(Problem::ResponseFailed),
        Err(Error::KeyReused { .. }) => problem(Problem::KeyReused),
        Err(Error::Store(e)) if e.operation() == Some(Operation::Claim) => {
            problem(Problem::StoreUnavailable { retry_after })
        }
        // The inner service ran and answered, but the answer was not recorded (the store
        // failed, or a newer run took the key over after this one stalled past its lease): the
        // client still gets it. Both were logged by the runtime.
        Err(e @ (Error::Store(_) | Error::LostClaim { .. })) => match live() {
            Some(response) => {
                let e = e.map_handler(|_| "response");
                tracing::warn!(error = %e, "answering with a response that was not recorded");
                Ok(response.map(Either::Left))
            }
            None => problem(Problem::StoreUnavailable { retry_after }),
        },
        // Encoding this run's answer failed (it ran: the client gets it, unrecorded, and the
        // key was released), or a recorded answer could not be read back.
        Err(Error::Codec(e)) => match live() {
            Some(response) => {
                tracing::error!(error = %e, "the answer could not be recorded; sent unrecorded");
                Ok(response.map(Either::Left))
            }
            None => {
                tracing::error!(error = %e, "a recorded answer could not be read back");
                problem(Problem::ReplayUnreadable)
            }
        },
        // Not expected: record keys are valid by construction, and `Error` may grow.
        Err(e) => {
            let e = e.map_handler(|_| "response");
            tracing::error!(error = %e, "unexpected idem error");
            problem(Problem::Unexpected)
        }
    }
}

/// A request the layer does not handle: to the inner service and back, untouched.
async fn pass_through<S, ReqBody, ResBody>(
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
{
    let response = inner.call(request.map(Either::Right)).await?;
    Ok(response.map(Either::Right))
}

/// Buffers `response` for the record if it is kept: a status the options record, and a body of
/// known length within the limit. Anything else is handed back to be sent as it is.
async fn record<B, E>(
    config: &Config,
    response: Response<B>,
) -> Result<(StoredResponse, Response<Full<Bytes>>), NotKept<B, E>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let status = response.status();
    if !(config.records)(status) {
        tracing::debug!(%status, "status not recorded; the key is released");
        return Err(NotKept::Response(response));
    }
    match response.body().size_hint().exact() {
        Some(len) if len <= config.max_response_body as u64 => {}
        Some(len) => {
            tracing::warn!(
                len,
                limit = config.max_response_body,
                "response over the recording limit: sent but not recorded; the key is released"
            );
            return Err(NotKept::Response(response));
        }
        None => {
            tracing::warn!(
                "streaming response (no exact length): sent but not recorded; the key is released"
            );
            return Err(NotKept::Response(response));
        }
    }
    let (parts, body) = response.into_parts();
    match Limited::new(body, config.max_response_body).collect().await {
        Ok(collected) => {
            let body = collected.to_bytes();
            let stored = StoredResponse::new(
                parts.status,
                &parts.headers,
                body.clone(),
                &config.replay_headers,
            );
            Ok((stored, Response::from_parts(parts, Full::new(body))))
        }
        Err(e) => {
            tracing::error!(error = %e, "the response body failed; the key is released");
            Err(NotKept::BodyFailed)
        }
    }
}
