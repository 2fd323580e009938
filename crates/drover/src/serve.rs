//! The HTTP/1 server loop: `axum::serve` with the limits a public service needs, which
//! axum does not let one set. A client must send its request head within the header
//! timeout (`header_timeout_seconds`: one byte a second no longer holds a connection
//! forever; the body has its own deadline in `api::layers`), and a head of more than the
//! interface's header count reaches the service, which answers it in JSON, instead of
//! hyper's bare 431. Shutdown is graceful: connections finish the request they are serving.
//!
//! Every connection holds a descriptor, so connections are bounded ([`Limits`]): in all,
//! and per source (an IPv4 address or an IPv6 /64); one past a bound is closed as soon as
//! it is accepted, so that the accept loop never starves. A connection that sends
//! nothing is closed after `idle_connection_seconds`, sooner than one that is sending.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Headers hyper parses before giving up with its own bare 431; the service's own
/// (JSON) limit, `api::layers::MAX_HEADERS`, is below it.
const PARSED_HEADERS: usize = 1000;

/// What bounds the connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time to send a request's head, from the moment the connection waits for it.
    pub header_timeout: Duration,
    /// Time a new connection may stay silent before its first byte.
    pub idle_timeout: Duration,
    /// Connections open at once, in all and from one source.
    pub max_total: usize,
    pub max_per_source: usize,
}

/// The connections open now, in all and by source.
struct Open {
    limits: Limits,
    by_source: Mutex<HashMap<String, usize>>,
    total: AtomicUsize,
}

/// One counted connection; uncounted when dropped.
struct Slot {
    open: Arc<Open>,
    source: String,
}

impl Open {
    /// Counts a connection from `peer`, unless that would pass a bound.
    fn take(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
        let source = drover_auth::throttle::source_group(&peer.to_string());
        let mut by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        let total = self.total.load(Ordering::Relaxed);
        let mine = by_source.get(&source).copied().unwrap_or(0);
        if total >= self.limits.max_total || mine >= self.limits.max_per_source {
            return None;
        }
        by_source.insert(source.clone(), mine + 1);
        self.total.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            open: self.clone(),
            source,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by_source = self
            .open
            .by_source
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = by_source.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                by_source.remove(&self.source);
            }
        }
        self.open.total.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then waits for the requests
/// in flight, within `limits`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(PARSED_HEADERS);
    let open = Arc::new(Open {
        limits,
        by_source: Mutex::new(HashMap::new()),
        total: AtomicUsize::new(0),
    });
    let (closing, closed) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was taken:
                    // keep serving the others.
                    if !is_connection_error(&e) {
                        eprintln!("drover: cannot accept a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Past a bound: closed at once (dropped), its descriptor freed.
        let Some(slot) = open.take(peer.ip()) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(request.map(axum::body::Body::new))
        });
        let http = http.clone();
        let mut closed = closed.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut first_byte = [0u8; 1];
            tokio::select! {
                first = tokio::time::timeout(limits.idle_timeout, stream.peek(&mut first_byte)) => {
                    if first.is_err() {
                        return;
                    }
                }
                _ = closed.changed() => return,
            }
            let connection = http.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = closed.changed() => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    drop(listener);
    // Every connection holds a receiver: `closed` resolves when the last one ends.
    let _ = closing.send(());
    drop(closed);
    closing.closed().await;
    Ok(())
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
