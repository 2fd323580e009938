//! What wraps every request, matched or not: panic containment, the body-size limit,
//! reading the whole body before routing, and JSON bodies for the errors that axum
//! produces itself (405, rejections).
//!
//! It is one middleware rather than one per concern: each axum middleware layer costs a
//! request a boxed service clone and a boxed future. In order: panic containment (a JSON
//! 500), JSON 414/431 for targets and heads larger than the service reads, a change a
//! browser sent from another site's page refused (403, `cross_site`), the declared
//! length (413 before anything reads the body), the login of a body over 64 KiB or of
//! unknown length checked before it is read (a bad one answered 401 at once with
//! `Connection: close`, a good one handed to the gate as `Authenticated`), then the
//! whole body read within `body_timeout` (else 408) before routing: a request answered
//! with its body unread would make hyper close the connection unannounced, and a pooling
//! client would find it dead. A browser's 401 carries no Basic challenge.

use std::panic::AssertUnwindSafe;

use axum::Router;
use axum::body::{Body, to_bytes};
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, DefaultBodyLimit, OriginalUri, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;

use crate::AppState;
use crate::cross_site;
use crate::error::{ApiError, Kind};
use crate::identity::authenticate;
use crate::metrics::MatchedRoute;
use drover_auth::Identity;

/// Error bodies axum produced that are longer than this are cut (they are plain text
/// from a rejection, never user data of any size).
const MAX_REWRITTEN_BODY: usize = 4096;

/// A body larger than this (or of unknown length) is read only once its login is good:
/// before that, a caller costs the server at most this much memory per request.
const UNAUTHENTICATED_BODY_BYTES: u64 = 64 * 1024;

/// The longest request target read (path and query); longer ones get a JSON 414.
const MAX_URI_BYTES: usize = 16 * 1024;
/// The most headers, and header bytes, read; more get a JSON 431 (hyper itself parses up
/// to 1,000 headers in a head of at most ~400 KiB and answers beyond that without a body).
const MAX_HEADERS: usize = 100;
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// A login verified before the body was read, for the gate to take up.
#[derive(Clone)]
pub(crate) struct Authenticated(pub(crate) Identity);

pub(crate) fn wrap(router: Router, state: &AppState) -> Router {
    let limit = state.settings().max_body_bytes;
    // One middleware rather than one per concern: each axum middleware layer costs every
    // request a boxed service clone and a boxed future.
    router
        .layer(DefaultBodyLimit::max(limit))
        .layer(from_fn_with_state((limit, state.clone()), every_request))
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
///   one over [`UNAUTHENTICATED_BODY_BYTES`] (or of unknown length) is read only after
///   its login is verified, and a bad login is answered at once, closing the connection;
/// - the body is read whole before anything answers. A request refused before its body
///   is read (by the gate, a 404, a handler that needs no body) would otherwise leave
///   data unread, and the server then closes the connection after answering without
///   saying so: a client that pools connections finds it dead on its next request;
/// - a handler that panics answers a JSON `500`; the server goes on serving;
/// - error responses without a JSON body (extractor rejections, hyper's own) get one.
async fn every_request(
    State((limit, state)): State<(usize, AppState)>,
    request: Request,
    next: Next,
) -> Response {
    let began = std::time::Instant::now();
    let response = answer(limit, &state, request, next).await;
    if let Some(metrics) = state.http_metrics() {
        let route = response.extensions().get::<MatchedRoute>().copied();
        metrics.observe(route, response.status().as_u16(), began.elapsed());
    }
    response
}

async fn answer(limit: usize, state: &AppState, request: Request, next: Next) -> Response {
    let from_browser = cross_site::is_browser(request.headers());
    let mut response = checked_and_read(limit, state, request, next).await;
    if from_browser && response.status() == StatusCode::UNAUTHORIZED {
        // No Basic challenge for a browser: it would ask once and then send that login
        // with every request, those a page of another site makes it send included.
        response.headers_mut().remove(header::WWW_AUTHENTICATE);
    }
    response
}

async fn checked_and_read(
    limit: usize,
    state: &AppState,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(refused) = head_too_large(&request) {
        return closing(refused);
    }
    if let Err(refused) = cross_site::check(request.method(), request.headers()) {
        return closing(refused);
    }
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return ApiError::payload_too_large(limit).into_response();
    }
    let large = match declared {
        Some(length) => length > UNAUTHENTICATED_BODY_BYTES,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    };
    if large {
        let source = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        match authenticate(state, request.headers(), source).await {
            Ok(identity) => {
                request.extensions_mut().insert(Authenticated(identity));
            }
            Err(refused) => return closing(refused),
        }
    }
    let (parts, body) = request.into_parts();
    // The head has its own deadline in the server loop; a body sent a byte a second is
    // cut off here.
    let deadline = state.settings().body_timeout;
    let bytes = match tokio::time::timeout(deadline, to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => return ApiError::payload_too_large(limit).into_response(),
        Err(_) => {
            return closing(ApiError::new(
                Kind::RequestTimeout,
                [
                    "The request body did not arrive in time".to_string(),
                    format!("Send the whole body within {} seconds", deadline.as_secs()),
                ],
            ));
        }
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

/// A JSON 414 or 431 for a head larger than the service reads.
fn head_too_large(request: &Request) -> Option<ApiError> {
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if target > MAX_URI_BYTES {
        return Some(ApiError::new(
            Kind::UriTooLong,
            [
                "The request target is too long".to_string(),
                format!("Path and query may have at most {MAX_URI_BYTES} bytes; this has {target}"),
            ],
        ));
    }
    let headers = request.headers();
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        return Some(ApiError::new(
            Kind::HeadersTooLarge,
            [
                "The request headers are too large".to_string(),
                format!(
                    "At most {MAX_HEADERS} headers of {MAX_HEADER_BYTES} bytes in all are read; \
                     this request has {} of {bytes}",
                    headers.len()
                ),
            ],
        ));
    }
    None
}

/// An error answered before the request was read to its end: the connection cannot be
/// reused, and says so.
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn is_json(response: &Response) -> bool {
    is_json_parts(response.headers())
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
    // The route it came from, for the request metrics.
    rewritten.extensions_mut().extend(parts.extensions.clone());
    for name in [header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            rewritten.headers_mut().insert(name, value.clone());
        }
    }
    rewritten
}

/// `response` telling the client `warnings` too: appended to the `messages` of a JSON
/// object answer (added when it has none), else, for an answer of another shape, in
/// `Warning: 299` headers (RFC 9111's form, as Kubernetes warns of unknown fields).
pub(crate) async fn with_warnings(response: Response, warnings: Vec<String>) -> Response {
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return ApiError::internal("cannot read a response body").into_response();
    };
    let object = if is_json_parts(&parts.headers) {
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(object)) => Some(object),
            _ => None,
        }
    } else {
        None
    };
    let Some(mut object) = object else {
        for warning in warnings {
            let text = format!("299 drover {:?}", warning.replace(['\r', '\n'], " "));
            if let Ok(value) = HeaderValue::from_str(&text) {
                parts.headers.append(header::WARNING, value);
            }
        }
        return Response::from_parts(parts, Body::from(bytes));
    };
    let messages = object
        .entry("messages")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if !messages.is_array() {
        *messages = serde_json::Value::Array(vec![messages.clone()]);
    }
    if let serde_json::Value::Array(list) = messages {
        list.extend(warnings.into_iter().map(serde_json::Value::String));
    }
    let body = serde_json::to_vec(&object).expect("a JSON value serializes");
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    Response::from_parts(parts, Body::from(body))
}

fn is_json_parts(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn answer(body: &str) -> Response {
        Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    fn warned(response: Response) -> (Response, Value) {
        let response = with_warnings(response, vec!["args: unknown field, ignored".into()])
            .now_or_never()
            .unwrap();
        let (parts, body) = response.into_parts();
        let bytes = to_bytes(body, usize::MAX).now_or_never().unwrap().unwrap();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (Response::from_parts(parts, Body::empty()), value)
    }

    #[test]
    fn warnings_join_the_messages_or_go_in_warning_headers() {
        let (_, value) = warned(answer(r#"{"messages":["Job modified"]}"#));
        assert_eq!(
            value,
            json!({"messages": ["Job modified", "args: unknown field, ignored"]})
        );
        let (_, value) = warned(answer(r#"{"id":"j1"}"#));
        assert_eq!(
            value,
            json!({"id": "j1", "messages": ["args: unknown field, ignored"]})
        );
        let (response, value) = warned(answer(r#"[1]"#));
        assert_eq!(value, json!([1]));
        assert_eq!(
            response.headers()[header::WARNING],
            "299 drover \"args: unknown field, ignored\""
        );
    }
}
