//! High availability: several servers share one PostgreSQL store and the one holding the
//! store's lease (`drover_store::ActiveLease`) is active. Until it holds the lease, a
//! server is a standby: it has built nothing (no engine, no plugins, no writes), answers
//! the health summary itself (with `ha.role` `STANDBY` and who is active), and forwards
//! every other request to the active server the lease names, or answers 503 with
//! `Retry-After` when none answers. It tries to take the lease four times a second: the
//! active server's lock lives as long as its database session, so a server killed loses
//! it at once and a standby takes over within about a second, then starts as any server does
//! (the engine rebuilt from the store, running jobs adopted).
//!
//! Once active, a watchdog checks the lease every second; a server that lost it (its
//! session gone, or another server's epoch recorded) exits at once rather than act beside
//! the new active one, and the store refuses its writes meanwhile (the epoch fence).

use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, Response, StatusCode, header};
use drover_store::{DocumentStore, LeaseHolder};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

/// How often a standby tries to take the lease (a cheap query).
const TAKEOVER_PERIOD: Duration = Duration::from_millis(250);
/// How often the active server checks it still holds the lease.
const LEASE_PERIOD: Duration = Duration::from_secs(1);
/// How long a forwarded request may take to reach the active server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The header a standby adds to what it forwards: a forwarded request is never
/// forwarded again (two standbys each believing the other active).
const FORWARDED: &str = "x-drover-forwarded-by";
/// Process exit status of a server that lost the lease.
const LOST_LEASE_EXIT: i32 = 75;

/// Who this server is in the group.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    /// Where the others reach it.
    pub url: String,
    /// The interface's `{base_url}` prefix.
    pub base_url: String,
}

/// What a standby knows of the group, refreshed every [`TAKEOVER_PERIOD`].
#[derive(Debug, Clone, Default)]
struct View {
    active: Option<LeaseHolder>,
    store_up: bool,
}

/// Serves as a standby on `listener` until this server holds the lease (answers true) or
/// `shutdown` completes (answers false).
pub async fn stand_by(
    store: Arc<dyn DocumentStore>,
    me: &Member,
    listener: &TcpListener,
    mut shutdown: std::pin::Pin<&mut (impl std::future::Future<Output = ()> + Send)>,
) -> Result<bool, String> {
    if store.lease().is_none() {
        return Err("high availability needs a store several servers share (PostgreSQL)".into());
    }
    let view = Arc::new(RwLock::new(View::default()));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    let mut tick = tokio::time::interval(TAKEOVER_PERIOD);
    let mut announced = false;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let view = view.clone();
                let me = me.clone();
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let view = view.read().unwrap_or_else(|e| e.into_inner()).clone();
                    let me = me.clone();
                    async move { Ok::<_, Infallible>(answer(request, &view, &me).await) }
                });
                let connection = http.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    let _ = connection.await;
                });
            }
            _ = tick.tick() => {
                let (store, name, url) = (store.clone(), me.name.clone(), me.url.clone());
                let outcome = tokio::task::spawn_blocking(move || {
                    let lease = store.lease().expect("checked above");
                    match lease.try_acquire(&name, &url) {
                        Ok(Some(_)) => Ok(None),
                        Ok(None) => lease.holder().map(Some),
                        Err(e) => Err(e),
                    }
                })
                .await
                .map_err(|e| e.to_string())?;
                match outcome {
                    Ok(None) => {
                        println!("drover: {} holds the lease and becomes the active server", me.name);
                        return Ok(true);
                    }
                    Ok(Some(active)) => {
                        if !announced {
                            let holder = active.as_ref().map_or("none", |a| a.holder.as_str());
                            println!(
                                "drover: standby {} on {}; the active server is {holder}",
                                me.name, me.url
                            );
                            announced = true;
                        }
                        *view.write().unwrap_or_else(|e| e.into_inner()) =
                            View { active, store_up: true };
                    }
                    Err(e) => {
                        eprintln!("drover: standby {}: cannot read the lease: {e}", me.name);
                        view.write().unwrap_or_else(|e| e.into_inner()).store_up = false;
                    }
                }
            }
            _ = shutdown.as_mut() => return Ok(false),
        }
    }
}

/// Checks every [`LEASE_PERIOD`] that this (active) server still holds the lease, and
/// ends the process when it does not.
pub fn watch_lease(store: Arc<dyn DocumentStore>, name: String) {
    let watching = std::thread::Builder::new()
        .name("lease".into())
        .spawn(move || {
            loop {
                std::thread::sleep(LEASE_PERIOD);
                let held = store.lease().map(|lease| lease.still_held());
                match held {
                    Some(Ok(true)) => continue,
                    Some(Ok(false)) => eprintln!(
                        "drover: {name} no longer holds the lease (another server is active); exiting"
                    ),
                    Some(Err(e)) => eprintln!(
                        "drover: {name} cannot confirm it holds the lease ({e}); exiting so that \
                         a standby can take over"
                    ),
                    None => return,
                }
                std::process::exit(LOST_LEASE_EXIT);
            }
        });
    if let Err(e) = watching {
        eprintln!("drover: cannot watch the lease: {e}; exiting");
        std::process::exit(LOST_LEASE_EXIT);
    }
}

/// A standby's answer: its own health summary, else the active server's answer.
async fn answer(request: Request<Incoming>, view: &View, me: &Member) -> Response<Body> {
    let summary = format!("{}/rest/diag/health/summary", me.base_url);
    if request.method() == Method::GET && request.uri().path() == summary {
        return health_summary(view, me);
    }
    if request.headers().contains_key(FORWARDED) {
        return unavailable("This server is a standby and the request was forwarded to it");
    }
    let Some(active) = &view.active else {
        return unavailable("This server is a standby and no server is active yet");
    };
    match forward(request, active, me).await {
        Ok(response) => response,
        Err(why) => unavailable(&format!(
            "This server is a standby and the active server {} does not answer ({why})",
            active.holder
        )),
    }
}

/// Sends `request` to the active server; answers its answer.
async fn forward(
    mut request: Request<Incoming>,
    active: &LeaseHolder,
    me: &Member,
) -> Result<Response<Body>, String> {
    let address = active
        .url
        .strip_prefix("http://")
        .ok_or("its address is not http://")?;
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| "connection timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|_| "a bad path".to_string())?;
    *request.uri_mut() = path;
    if let Ok(name) = HeaderValue::from_str(&me.name) {
        request.headers_mut().insert(FORWARDED, name);
    }
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    Ok(response.map(Body::new))
}

fn health_summary(view: &View, me: &Member) -> Response<Body> {
    let up = if view.store_up { "UP" } else { "DOWN" };
    let body = json!({
        "acct": {"connected": "UNKNOWN"},
        "datastore": {"connected": up},
        "sched": {"connected": "UNKNOWN", "datastoreConnected": "UNKNOWN"},
        "ha": {
            "role": "STANDBY",
            "server": me.name,
            "active": view.active.as_ref().map(|a| a.holder.clone()),
        },
    });
    json_response(StatusCode::OK, &body)
}

fn unavailable(message: &str) -> Response<Body> {
    let mut response = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({ "messages": [message] }),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// This server's default name in the group: the host name and the port.
pub fn default_name(port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "localhost".into()
    } else {
        host
    };
    format!("{host}:{port}")
}
