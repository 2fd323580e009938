//! Token login for portals (OAuth 2, RFC 6749): `POST <base>/oauth/token` issues bearer
//! tokens to a configured portal client, for a user's password (`grant_type=password`,
//! checked exactly as a Basic login is: throttle, directory, audit) or for the client's
//! configured principal (`client_credentials`); `POST <base>/oauth/revoke` (RFC 7009)
//! revokes one of the client's tokens; `DELETE /rest/oauth/tokens/{user}` revokes every
//! token of a user (an administrator's). The tokens themselves are `drover_auth::tokens`;
//! the gate accepts them wherever it accepts Basic (`identity::authenticate`).
//!
//! Both OAuth endpoints authenticate the client (HTTP Basic with the client id and
//! secret, or `client_id` and `client_secret` in the form), never a user; their answers
//! are RFC 6749's (`error`, `error_description`) and also carry `messages`, as every
//! failure of this service does.

use std::net::{IpAddr, SocketAddr};

use axum::Json;
use axum::body::to_bytes;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_auth::tokens::OAuthClient;
use drover_auth::{Identity, Permission, basic_credentials};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, Kind, REALM};
use crate::identity::{login, proxied_identity};
use crate::routes::{Access, Routes};

pub const TOKEN_PATH: &str = "/oauth/token";
pub const REVOKE_PATH: &str = "/oauth/revoke";
const FORM: &str = "application/x-www-form-urlencoded";
/// Revoking a user's tokens.
const REVOKE_USER: Access = Access::Needs(Permission::delete("tokens"));

pub fn register(routes: &mut Routes) {
    let errors = json!({
        "type": "object",
        "properties": {
            "error": {"type": "string"},
            "error_description": {"type": "string"},
            "messages": {"type": "array", "items": {"type": "string"}},
        },
    });
    routes
        .post(TOKEN_PATH, Access::Client, token)
        .summary("Issue a bearer token to a portal client (OAuth 2: password or client_credentials grant)")
        .body(
            FORM,
            json!({
                "type": "object",
                "required": ["grant_type"],
                "properties": {
                    "grant_type": {"type": "string", "enum": ["password", "client_credentials"]},
                    "username": {"type": "string"},
                    "password": {"type": "string"},
                    "scope": {"type": "string"},
                    "client_id": {"type": "string"},
                    "client_secret": {"type": "string"},
                },
            }),
        )
        .response(
            200,
            "The token",
            Some(json!({
                "type": "object",
                "required": ["access_token", "token_type", "expires_in"],
                "properties": {
                    "access_token": {"type": "string"},
                    "token_type": {"type": "string", "enum": ["Bearer"]},
                    "expires_in": {"type": "integer"},
                },
            })),
        )
        .response(400, "invalid_request, invalid_grant, unauthorized_client or unsupported_grant_type", Some(errors.clone()))
        .response(401, "invalid_client", Some(errors.clone()));
    routes
        .post(REVOKE_PATH, Access::Client, revoke)
        .summary("Revoke one of the client's tokens (RFC 7009; an unknown token is not an error)")
        .body(
            FORM,
            json!({
                "type": "object",
                "required": ["token"],
                "properties": {
                    "token": {"type": "string"},
                    "token_type_hint": {"type": "string"},
                    "client_id": {"type": "string"},
                    "client_secret": {"type": "string"},
                },
            }),
        )
        .response(
            200,
            "Revoked, or no such token of this client",
            Some(json!({"type": "object"})),
        )
        .response(400, "invalid_request", Some(errors.clone()))
        .response(401, "invalid_client", Some(errors));
    routes
        .delete("/rest/oauth/tokens/{user}", REVOKE_USER, revoke_user)
        .summary("Revoke every bearer token of a user")
        .path_param("user", "The user whose tokens are revoked")
        .response(
            200,
            "How many were revoked",
            Some(crate::openapi::schema::messages()),
        );
}

/// An RFC 6749 error answer (with `messages` too).
fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    let mut response = (
        status,
        Json(json!({
            "error": error,
            "error_description": description,
            "messages": [description],
        })),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(REALM));
    }
    response
}

fn invalid_request(description: &str) -> Response {
    oauth_error(StatusCode::BAD_REQUEST, "invalid_request", description)
}

fn invalid_client() -> Response {
    oauth_error(
        StatusCode::UNAUTHORIZED,
        "invalid_client",
        "The client must be authenticated: its id and secret with HTTP Basic, or client_id and client_secret",
    )
}

/// The form's parameters, each at most once (RFC 6749 3.2).
struct Form(Vec<(String, String)>);

impl Form {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What both endpoints read first: the source, the client (authenticated) and the form.
async fn client_and_form(
    state: &AppState,
    request: Request,
) -> Result<(Option<IpAddr>, OAuthClient, Form), Response> {
    let source = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, usize::MAX)
        .await
        .map_err(|_| invalid_request("The body could not be read"))?;
    let form_sent = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(FORM)
        });
    let mut pairs: Vec<(String, String)> = Vec::new();
    if form_sent {
        for (name, value) in form_urlencoded::parse(&bytes) {
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(invalid_request(&format!(
                    "The parameter '{name}' is given more than once"
                )));
            }
            pairs.push((name.into_owned(), value.into_owned()));
        }
    }
    let form = Form(pairs);
    let client = authenticate_client(state, &parts.headers, &form, source).await?;
    if !form_sent {
        return Err(invalid_request(
            "The body must be application/x-www-form-urlencoded",
        ));
    }
    Ok((source, client, form))
}

/// The configured client whose id and secret the request carries (Basic, else the
/// form; not both). A wrong secret counts as a failed login of the client's id.
async fn authenticate_client(
    state: &AppState,
    headers: &HeaderMap,
    form: &Form,
    source: Option<IpAddr>,
) -> Result<OAuthClient, Response> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(basic_credentials);
    let in_form = form.get("client_id").zip(form.get("client_secret"));
    let (id, secret) = match (basic, in_form) {
        (Some(_), Some(_)) => {
            return Err(invalid_request(
                "Authenticate the client once: with HTTP Basic or in the form, not both",
            ));
        }
        (Some(basic), None) => basic,
        (None, Some((id, secret))) => (id.to_string(), secret.to_string()),
        (None, None) => return Err(invalid_client()),
    };
    let client = state
        .settings()
        .oauth_clients
        .iter()
        .find(|c| c.id == id)
        .cloned();
    let source = source.map(|ip| ip.to_string());
    // In a task of its own, as a password check: a client that hangs up must not take
    // the count of a failure with it.
    let state = state.clone();
    match tokio::spawn(async move { check_client(&state, client, id, secret, source).await }).await
    {
        Ok(checked) => checked,
        Err(e) => Err(ApiError::internal(e).into_response()),
    }
}

/// Verifies a client's secret as a password is checked: in the turn of its source and
/// its name, within the throttle, one argon2 verification per core, the failure counted
/// (under `oauth client <id>`) and audited.
async fn check_client(
    state: &AppState,
    client: Option<OAuthClient>,
    id: String,
    secret: String,
    source: Option<String>,
) -> Result<OAuthClient, Response> {
    let name = format!("oauth client {id}");
    let checks = state.access().password_checks();
    let throttle = state.access().throttle();
    let known = throttle.is_known(source.as_deref(), &name);
    let _turns = checks
        .turns(source.as_deref(), &name, known)
        .await
        .map_err(IntoResponse::into_response)?;
    if let Some(wait) = throttle.wait(source.as_deref(), &name) {
        return Err(ApiError::throttled(wait.as_secs().max(1)).into_response());
    }
    let verified = match &client {
        Some(client) => {
            let core = checks.core().await.map_err(IntoResponse::into_response)?;
            let hash = client.secret_hash.clone();
            tokio::task::spawn_blocking(move || {
                let _core = core;
                drover_auth::password::verify(&hash, &secret)
            })
            .await
            .unwrap_or(false)
        }
        None => false,
    };
    match (client, verified) {
        (Some(client), true) => {
            crate::identity::logged_in_from(state, source.as_deref(), &name);
            Ok(client)
        }
        _ => {
            let failure = throttle.failed(source.as_deref(), &name);
            crate::audit::failed_login(
                state,
                &name,
                source.as_deref(),
                &failure,
                "OAuth client refused",
            );
            Err(invalid_client())
        }
    }
}

/// `POST <base>/oauth/token`.
async fn token(State(state): State<AppState>, request: Request) -> Response {
    let (source, client, form) = match client_and_form(&state, request).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let identity: Identity = match form.get("grant_type") {
        None => return invalid_request("grant_type is missing"),
        Some("password") => {
            let (Some(user), Some(password)) = (form.get("username"), form.get("password")) else {
                return invalid_request("The password grant needs username and password");
            };
            match login(&state, user.to_string(), password.to_string(), source).await {
                Ok(identity) => identity,
                Err(e) if e.kind == Kind::Unauthorized => {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "The user name or password is wrong",
                    );
                }
                Err(e) => return e.into_response(),
            }
        }
        Some("client_credentials") => match &client.principal {
            Some(principal) => match proxied_identity(&state, principal).await {
                Ok(identity) => identity,
                Err(e) => return e.into_response(),
            },
            None => {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "unauthorized_client",
                    "This client has no principal configured to act as; use the password grant",
                );
            }
        },
        Some(_) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "grant_type must be password or client_credentials",
            );
        }
    };
    let tokens = state.tokens().clone();
    let client_id = client.id.clone();
    let issued = tokio::task::spawn_blocking(move || {
        tokens.issue(&identity.name, identity.origin, &client_id)
    })
    .await;
    match issued {
        Ok(Ok(issued)) => {
            let mut response = Json(json!({
                "access_token": issued.token,
                "token_type": "Bearer",
                "expires_in": issued.expires_in,
            }))
            .into_response();
            let headers = response.headers_mut();
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
            response
        }
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// `POST <base>/oauth/revoke`: the client's own token only; any other answers 200 too
/// (RFC 7009 2.2), so that the answer tells nothing of other clients' tokens.
async fn revoke(State(state): State<AppState>, request: Request) -> Response {
    let (_, client, form) = match client_and_form(&state, request).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let Some(token) = form.get("token").map(str::to_string) else {
        return invalid_request("token is missing");
    };
    let tokens = state.tokens().clone();
    match tokio::task::spawn_blocking(move || tokens.revoke(&token, &client.id)).await {
        Ok(Ok(_)) => Json(json!({})).into_response(),
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// `DELETE /rest/oauth/tokens/{user}`.
async fn revoke_user(
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tokens = state.tokens().clone();
    let name = user.clone();
    let revoked = tokio::task::spawn_blocking(move || tokens.revoke_user(&name))
        .await
        .map_err(ApiError::internal)??;
    Ok(Json(json!({
        "messages": [format!("{revoked} token(s) of '{user}' revoked")],
    })))
}
