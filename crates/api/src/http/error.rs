//! The one error type of the interface, and the one place that maps it to HTTP.
//!
//! Every failure a client sees is an [`ApiError`]: a [`Kind`] (which decides the status,
//! in [`Kind::status`], an exhaustive match) and the messages of the body
//! `{"messages":[summary, reason, advice]}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_accounting::AccountingError;
use drover_auth::access_store::AccessError;
use drover_cloud::CloudError;
use drover_control::service_creation::CreationError;
use drover_monitor::reports::ReportError;
use drover_monitor::{ReadError, RecordError};
use drover_query::QueryError;
use drover_sched::SchedError;
use drover_store::StoreError;
use serde_json::json;

/// What went wrong, as far as the client is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Malformed JSON, bad parameters, failed validation, unsupported `api-version`.
    BadRequest,
    /// Missing or wrong credentials.
    Unauthorized,
    /// Authenticated, not permitted.
    Forbidden,
    /// No such resource, or no such path.
    NotFound,
    MethodNotAllowed,
    /// A stale `version`, a taken name, a conflicting reservation.
    Conflict,
    /// The body did not arrive in time.
    RequestTimeout,
    /// A body over the configured limit.
    PayloadTooLarge,
    /// A request target longer than the service reads.
    UriTooLong,
    /// More or larger headers than the service reads.
    HeadersTooLarge,
    /// A body in a content type the operation does not read.
    UnsupportedMediaType,
    /// Too many failed logins from this source or for this name lately.
    TooManyRequests,
    /// A dependency (the datastore, the directory) does not answer.
    Unavailable,
    /// A bug: never the client's fault.
    Internal,
}

impl Kind {
    pub fn status(self) -> StatusCode {
        match self {
            Kind::BadRequest => StatusCode::BAD_REQUEST,
            Kind::Unauthorized => StatusCode::UNAUTHORIZED,
            Kind::Forbidden => StatusCode::FORBIDDEN,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Kind::Conflict => StatusCode::CONFLICT,
            Kind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Kind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Kind::UriTooLong => StatusCode::URI_TOO_LONG,
            Kind::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Kind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Kind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The kind an error status stands for (used to give bodies to responses that axum
    /// or hyper produced without one).
    pub fn from_status(status: StatusCode) -> Kind {
        match status.as_u16() {
            401 => Kind::Unauthorized,
            403 => Kind::Forbidden,
            404 => Kind::NotFound,
            405 => Kind::MethodNotAllowed,
            409 => Kind::Conflict,
            408 => Kind::RequestTimeout,
            413 => Kind::PayloadTooLarge,
            414 => Kind::UriTooLong,
            431 => Kind::HeadersTooLarge,
            415 => Kind::UnsupportedMediaType,
            429 => Kind::TooManyRequests,
            503 => Kind::Unavailable,
            400..=499 => Kind::BadRequest,
            _ => Kind::Internal,
        }
    }
}

/// A failure answered to the client: `{"messages":[...]}` with the kind's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: Kind,
    pub messages: Vec<String>,
    /// Seconds a client should wait before asking again (`Retry-After`), when known.
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The realm of the `WWW-Authenticate` challenge.
pub const REALM: &str = "Basic realm=\"drover\", charset=\"UTF-8\"";

impl ApiError {
    pub fn new(kind: Kind, messages: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            kind,
            messages: messages.into_iter().map(Into::into).collect(),
            retry_after: None,
        }
    }

    pub fn bad_request(summary: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::new(Kind::BadRequest, [summary.into(), reason.into()])
    }

    /// A request parameter the service cannot use; `reason` says what is wrong with it.
    pub fn bad_parameter(reason: impl Into<String>) -> Self {
        Self::bad_request("Invalid request parameter", reason)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            Kind::Unauthorized,
            [
                "You must be authenticated to access this area",
                "Send the user name and password with HTTP Basic authentication",
            ],
        )
    }

    pub fn forbidden(user: &str, what: impl std::fmt::Display) -> Self {
        Self::new(
            Kind::Forbidden,
            [
                "You are not allowed to do this".to_string(),
                format!("User '{user}' lacks the permission {what}"),
            ],
        )
    }

    /// Logins refused unchecked for `seconds` more (the same answer for every name).
    pub fn throttled(seconds: u64) -> Self {
        Self::new(
            Kind::TooManyRequests,
            [
                "Too many failed logins".to_string(),
                format!("Try again in {seconds} seconds"),
            ],
        )
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, [what.into()])
    }

    pub fn unknown_path(path: &str, prefix: &str) -> Self {
        Self::new(
            Kind::NotFound,
            [
                format!("Unknown path {path}"),
                format!("The service has no resource at this path; see {prefix}/rest/openapi.json"),
            ],
        )
    }

    pub fn method_not_allowed(allowed: &str) -> Self {
        Self::new(
            Kind::MethodNotAllowed,
            [
                "Method not allowed".to_string(),
                format!("This resource allows {allowed}"),
            ],
        )
    }

    pub fn conflict(summary: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, [summary.into(), reason.into()])
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            Kind::PayloadTooLarge,
            [
                "Request body too large".to_string(),
                format!("The limit is {limit} bytes"),
            ],
        )
    }

    pub fn unavailable(summary: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::new(Kind::Unavailable, [summary.into(), reason.into()])
    }

    /// Asks the client to try again in `seconds` (`Retry-After`).
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// A bug or an unexpected failure. The detail goes to the service log; the client
    /// learns only that it was not their fault.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        eprintln!("drover: internal error: {detail}");
        Self::new(
            Kind::Internal,
            [
                "Internal error",
                "The service failed unexpectedly; the details are in its log",
            ],
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.kind.status(),
            Json(json!({ "messages": self.messages })),
        )
            .into_response();
        if self.kind == Kind::Unauthorized {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(REALM));
        }
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        Self::bad_parameter(e.message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { .. } => Self::not_found(e.to_string()),
            StoreError::Conflict(reason) => Self::conflict("Conflicting change", reason),
            StoreError::Invalid(reason) => Self::bad_request("Invalid document", reason),
            StoreError::Backend(reason) => {
                Self::unavailable("The datastore is unavailable", reason)
            }
            StoreError::InDoubt(reason) => Self::unavailable(
                "The datastore failed while recording the change, which may have been \
                 made: look for it before trying again",
                reason,
            ),
            StoreError::UnknownCollection(_) => Self::internal(e),
        }
    }
}

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> Self {
        match e {
            AccessError::Invalid { summary, reason } => ApiError::bad_request(summary, reason),
            AccessError::NotFound(what) => ApiError::not_found(what),
            AccessError::Conflict { summary, reason } => ApiError::conflict(summary, reason),
            AccessError::Store(e) => e.into(),
        }
    }
}

impl From<CloudError> for ApiError {
    fn from(e: CloudError) -> Self {
        match e {
            CloudError::Invalid { summary, reasons } => {
                ApiError::new(Kind::BadRequest, std::iter::once(summary).chain(reasons))
            }
            CloudError::NotFound(what) => ApiError::not_found(what),
            CloudError::Conflict {
                summary,
                reason,
                advice,
            } => ApiError::new(Kind::Conflict, [summary, reason].into_iter().chain(advice)),
            CloudError::Unreadable { .. } => ApiError::internal(e),
            CloudError::Store(e) => e.into(),
        }
    }
}

impl From<CreationError> for ApiError {
    fn from(e: CreationError) -> Self {
        match e {
            CreationError::Forbidden { creator, user } => {
                ApiError::forbidden(&creator, format_args!("create services for {user}"))
            }
            CreationError::Refused(messages) => ApiError::new(Kind::BadRequest, messages),
            CreationError::Cloud(e) => e.into(),
            CreationError::Internal(e) => ApiError::internal(e),
        }
    }
}

impl From<SchedError> for ApiError {
    fn from(error: SchedError) -> Self {
        match error {
            SchedError::Invalid(messages) | SchedError::Refused(messages) => {
                ApiError::new(Kind::BadRequest, messages)
            }
            SchedError::NotFound(what) => ApiError::not_found(what),
            SchedError::Forbidden(why) => ApiError::new(Kind::Forbidden, [why]),
            SchedError::Unavailable(why) => ApiError::unavailable("The change was not made", why),
            SchedError::Conflict(messages) => ApiError::new(Kind::Conflict, messages),
            SchedError::OutcomeUnknown(why) => ApiError::unavailable(
                "The outcome of the change is unknown: look for it before trying again",
                why,
            ),
        }
    }
}

impl From<ReportError> for ApiError {
    fn from(e: ReportError) -> Self {
        match e {
            ReportError::NotFound(key) => ApiError::not_found(format!("No report '{key}'")),
            ReportError::Conflict(reason) => {
                ApiError::conflict("The report was not created", reason)
            }
            ReportError::Invalid(reason) => {
                ApiError::bad_request("The report was not changed", reason)
            }
            ReportError::Store(reason) => {
                ApiError::unavailable("The datastore is unavailable", reason)
            }
        }
    }
}

/// The summary of a refused event creation.
pub(crate) const NOT_CREATED: &str = "No event was created";

/// Events are recorded only by their creation.
impl From<RecordError> for ApiError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::Stopped => ApiError::unavailable(NOT_CREATED, e.to_string()),
            RecordError::Store(reason) => ApiError::unavailable(NOT_CREATED, reason),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Store(e) => e.into(),
            ReadError::Interrupted(_) | ReadError::Unreadable(_) => ApiError::internal(e),
        }
    }
}

impl ApiError {
    /// An accounting failure, under `summary`.
    pub(crate) fn accounting(summary: &str, error: AccountingError) -> Self {
        match error {
            AccountingError::Invalid(reasons) => {
                let mut messages = vec![summary.to_string()];
                messages.extend(reasons);
                ApiError::new(Kind::BadRequest, messages)
            }
            AccountingError::InsufficientFunds(why) => ApiError::bad_request(summary, why),
            AccountingError::Forbidden(why) => {
                ApiError::new(Kind::Forbidden, [summary.to_string(), why])
            }
            AccountingError::NotFound(what) => ApiError::not_found(what),
            AccountingError::Store(why) => ApiError::unavailable(summary, why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_the_client_visible_kinds() {
        let cases = [
            (
                StoreError::NotFound {
                    collection: "jobs".into(),
                    id: "j1".into(),
                },
                404,
            ),
            (StoreError::Conflict("stale version".into()), 409),
            (StoreError::Invalid("NUL in a string".into()), 400),
            (StoreError::Backend("connection refused".into()), 503),
            (StoreError::InDoubt("disk I/O error".into()), 503),
            (StoreError::UnknownCollection("x".into()), 500),
        ];
        for (error, status) in cases {
            let api = ApiError::from(error.clone());
            assert_eq!(api.kind.status().as_u16(), status, "{error:?}");
            assert!(!api.messages.is_empty());
        }
    }

    #[test]
    fn statuses_round_trip_through_kinds() {
        for kind in [
            Kind::BadRequest,
            Kind::Unauthorized,
            Kind::Forbidden,
            Kind::NotFound,
            Kind::MethodNotAllowed,
            Kind::Conflict,
            Kind::PayloadTooLarge,
            Kind::UnsupportedMediaType,
            Kind::TooManyRequests,
            Kind::Unavailable,
            Kind::Internal,
        ] {
            assert_eq!(Kind::from_status(kind.status()), kind);
        }
    }

    #[test]
    fn unauthorized_carries_the_challenge() {
        let response = ApiError::unauthorized().into_response();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], REALM);
    }
}
