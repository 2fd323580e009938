//! What wraps every request, matched or not: panic containment, the body-size limit,
//! reading the whole body before routing, and JSON bodies for the errors that axum
//! produces itself (405, rejections).

use std::panic::AssertUnwindSafe;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{DefaultBodyLimit, OriginalUri, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;

use crate::AppState;
use crate::error::{ApiError, Kind};

/// Error bodies axum produced that are longer than this are cut (they are plain text
/// from a rejection, never user data of any size).
const MAX_REWRITTEN_BODY: usize = 4096;

pub(crate) fn wrap(router: Router, state: &AppState) -> Router {
    let limit = state.settings().max_body_bytes;
    // One middleware rather than one per concern: each axum middleware layer costs every
    // request a boxed service clone and a boxed future.
    router
        .layer(DefaultBodyLimit::max(limit))
        .layer(from_fn_with_state(limit, every_request))
}

/// The fallback handler of a deployment under `prefix`: `404` naming the path.
pub(crate) fn unknown_path(
    prefix: &str,
) -> impl Fn(OriginalUri) -> std::future::Ready<ApiError> + Clone + Send + Sync + 'static {
    let prefix = prefix.to_string();
    move |OriginalUri(uri)| std::future::ready(ApiError::unknown_path(uri.path(), &prefix))
}

/// What every request goes through, matched or not:
/// - a body whose declared length is over the limit is refused before anything reads it;
/// - the body is read whole before anything answers. A request refused before its body
///   is read (by the gate, a 404, a handler that needs no body) would otherwise leave
///   data unread, and the server then closes the connection after answering without
///   saying so: a client that pools connections finds it dead on its next request;
/// - a handler that panics answers a JSON `500`; the server goes on serving;
/// - error responses without a JSON body (extractor rejections, hyper's own) get one.
async fn every_request(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return ApiError::payload_too_large(limit).into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, limit).await else {
        return ApiError::payload_too_large(limit).into_response();
    };
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let request = Request::from_parts(parts, Body::from(bytes));
    let response = match AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let path = uri.path();
            return ApiError::internal(format!("panic in {method} {path}: {what}")).into_response();
        }
    };
    with_json_error_body(response).await
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// An error response without a JSON body (an extractor's rejection, hyper's own) with one.
async fn with_json_error_body(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&response) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = to_bytes(body, MAX_REWRITTEN_BODY)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let kind = Kind::from_status(status);
    let mut messages = vec![status.canonical_reason().unwrap_or("Error").to_string()];
    if !text.is_empty() {
        messages.push(text);
    }
    let mut rewritten = ApiError::new(kind, messages).into_response();
    *rewritten.status_mut() = status;
    for name in [header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            rewritten.headers_mut().insert(name, value.clone());
        }
    }
    rewritten
}

/// Re-renders a JSON response indented (`pretty=true`).
pub(crate) async fn pretty_print(response: Response) -> Response {
    if !is_json(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return ApiError::internal("cannot read a response body").into_response();
    };
    let pretty = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(value) => serde_json::to_vec_pretty(&value).unwrap_or_else(|_| bytes.to_vec()),
        Err(_) => bytes.to_vec(),
    };
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(pretty.len()));
    Response::from_parts(parts, Body::from(pretty))
}
