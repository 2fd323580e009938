//! The HTTP/1 server loop: `axum::serve` with the limits a public service needs, which
//! axum does not let one set. A client must send its request head within the header
//! timeout (`header_timeout_seconds`: one byte a second no longer holds a connection
//! forever; the body has its own deadline in `api::layers`), and a head of more than the
//! interface's header count reaches the service, which answers it in JSON, instead of
//! hyper's bare 431. Shutdown is graceful: connections finish the request they are serving.

use std::future::Future;
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

/// Serves `app` on `listener` until `shutdown` completes, then waits for the requests
/// in flight. A client has `header_timeout` to send a request's head, from the moment
/// the connection waits for it.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_headers(PARSED_HEADERS);
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
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let mut closed = closed.clone();
        tokio::spawn(async move {
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
