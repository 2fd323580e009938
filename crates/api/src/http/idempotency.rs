//! `Idempotency-Key` on the creating `POST`s (routes registered `.idempotent()`): the
//! gate hands such a request here once its caller is known. The key is claimed in the
//! store (`drover_auth::request_keys`) before the handler runs, so that of concurrent
//! retries one runs; a success (2xx) is kept and replayed to every retry of the same
//! request (method, target and body) within the window; any other answer gives the key
//! back, since it created nothing. A retry while the first is under way, or with another
//! request, is a 409.
//!
//! Job submissions (`.idempotent_with_receipt()`) also hand the engine a receipt
//! ([`receipt`]): the key's document written again in the transaction that stores the
//! job, so that a crash between the job's commit and the keeping of its answer loses
//! neither (see `request_keys`).

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use drover_auth::request_keys::{self, Claim, KeptAnswer, REQUEST_KEYS};
use drover_sched::Receipt;
use serde_json::Value;

use crate::AppState;
use crate::error::{ApiError, Kind};
use crate::routes::handle;

pub(crate) const HEADER: &str = "idempotency-key";
/// Set on an answer replayed from an earlier request.
const REPLAYED: &str = "idempotent-replayed";
/// Answers larger than this are not kept (the key stays claimed: retries are refused,
/// never run again); creations answer far less.
const MAX_KEPT_BODY: usize = 1024 * 1024;

/// The request's key, when it has one (checked).
pub(crate) fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|key| request_keys::valid_key(key));
    match (key, values.next()) {
        (Some(key), None) => Ok(Some(key.to_string())),
        _ => Err(ApiError::bad_request(
            "Invalid Idempotency-Key header",
            format!(
                "Send one key of 1 to {} visible ASCII characters (no spaces), e.g. a UUID",
                request_keys::MAX_KEY_CHARS
            ),
        )),
    }
}

/// A keyed request of one caller.
pub(crate) struct Once {
    /// Whose keys these are: the authenticated user and whom they act for.
    pub caller: String,
    /// Whose bound of live keys this one counts against.
    pub user: String,
    pub key: String,
    /// The route's handler passes the key's [`receipt`] to the engine.
    pub in_transaction: bool,
}

/// The key a request being handled claimed: what [`receipt`] reads.
#[derive(Clone)]
struct ClaimedKey {
    id: String,
    record: Value,
}

tokio::task_local! {
    static CLAIMED: ClaimedKey;
}

/// The receipt of the key the current request claimed, if it has one: its creation
/// answers `status` with `{field: <id>}` and `Location: <location><id>`.
pub(crate) fn receipt(status: u16, location: &str, field: &str) -> Option<Receipt> {
    CLAIMED
        .try_with(|claimed| {
            let mut body = claimed.record.clone();
            body["shape"] = request_keys::answer_shape(status, location, field);
            Receipt {
                collection: REQUEST_KEYS.into(),
                id: claimed.id.clone(),
                body,
            }
        })
        .ok()
}

impl Once {
    /// Answers the request: runs it once, or replays what it was answered. In a task of
    /// its own: a client that hangs up must not leave its key claimed for nothing.
    pub(crate) async fn run(self, state: &AppState, request: Request, next: Next) -> Response {
        let state = state.clone();
        match tokio::spawn(async move { self.answer(&state, request, next).await }).await {
            Ok(response) => response,
            Err(e) => ApiError::internal(e).into_response(),
        }
    }

    async fn answer(self, state: &AppState, request: Request, next: Next) -> Response {
        let (parts, body) = request.into_parts();
        // The layers read the body whole already (bounded); this takes it back.
        let Ok(body) = to_bytes(body, usize::MAX).await else {
            return ApiError::bad_request("The body could not be read", "Send it again")
                .into_response();
        };
        let target = parts
            .uri
            .path_and_query()
            .map_or(parts.uri.path(), |p| p.as_str());
        let fingerprint = request_keys::fingerprint(parts.method.as_str(), target, &body);
        let keys = state.request_keys().clone();
        let (caller, user, key) = (self.caller.clone(), self.user.clone(), self.key.clone());
        let in_transaction = self.in_transaction;
        let claim = tokio::task::spawn_blocking(move || {
            keys.claim(&caller, &user, &key, &fingerprint, in_transaction)
        })
        .await;
        let (id, record) = match claim {
            Ok(Ok(Claim::Claimed { id, record })) => (id, record),
            Ok(Ok(found)) => return self.refusal_or_replay(found),
            Ok(Err(e)) => return ApiError::from(e).into_response(),
            Err(e) => return ApiError::internal(e).into_response(),
        };
        let claimed = ClaimedKey {
            id: id.clone(),
            record,
        };
        let request = Request::from_parts(parts, Body::from(body));
        let response = CLAIMED.scope(claimed, handle(request, next)).await;
        let keys = state.request_keys().clone();
        if !response.status().is_success() {
            let _ = tokio::task::spawn_blocking(move || keys.release(&id)).await;
            return response;
        }
        let (parts, body) = response.into_parts();
        // The handler's own answer, already whole in memory.
        let Ok(body) = to_bytes(body, usize::MAX).await else {
            let _ = tokio::task::spawn_blocking(move || keys.release(&id)).await;
            return ApiError::internal("an answer that could not be read").into_response();
        };
        if body.len() > MAX_KEPT_BODY {
            // Too large to keep: answered, and the key left claimed, so that a retry is
            // refused rather than run again.
            return Response::from_parts(parts, Body::from(body));
        }
        let text = |name: header::HeaderName| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let kept = KeptAnswer {
            status: parts.status.as_u16(),
            content_type: text(header::CONTENT_TYPE),
            location: text(header::LOCATION),
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        // The creation is done: its answer goes to the client even if keeping it failed
        // (the key then stays pending, and a retry is refused rather than run again).
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || keys.answered(&id, &kept)).await {
            eprintln!("drover: cannot keep the answer of an Idempotency-Key: {e}");
        }
        Response::from_parts(parts, Body::from(body))
    }

    fn refusal_or_replay(&self, found: Claim) -> Response {
        let conflict = |summary: &str, reason: String| {
            ApiError::new(Kind::Conflict, [summary.to_string(), reason]).into_response()
        };
        match found {
            Claim::Answered(kept) => replay(kept),
            Claim::OtherRequest => conflict(
                "This Idempotency-Key was used for another request",
                format!(
                    "Key '{}' was sent with another body, path or query; use a new key for a new request",
                    self.key
                ),
            ),
            Claim::Pending { interrupted: false } => conflict(
                "A request with this Idempotency-Key is under way",
                "Send it again once the first has been answered".to_string(),
            ),
            Claim::Pending { interrupted: true } => conflict(
                "A request with this Idempotency-Key was interrupted by a restart",
                "Whether it created something is unknown: look for it before sending the request again with a new key".to_string(),
            ),
            Claim::TooMany(bound) => ApiError::new(
                Kind::TooManyRequests,
                [
                    "Too many Idempotency-Keys".to_string(),
                    format!(
                        "User '{}' holds {bound} keys within their window already; send the request without a key or wait",
                        self.user
                    ),
                ],
            )
            .into_response(),
            Claim::Claimed { .. } => {
                ApiError::internal("a claim answered as found").into_response()
            }
        }
    }
}

fn replay(kept: KeptAnswer) -> Response {
    let status = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
    let mut response = (status, kept.body).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, kept.content_type),
        (header::LOCATION, kept.location),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(name, value);
        }
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}
