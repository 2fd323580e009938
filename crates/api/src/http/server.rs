//! The HTTP/1 server loop: `axum::serve` with the limits a public service needs, which
//! axum does not let one set. A client must send its request head within the header
//! timeout (`header_timeout_seconds`: one byte a second no longer holds a connection
//! forever; the body has its own deadline in `api::layers`), and a head of more than the
//! interface's header count reaches the service, which answers it in JSON, instead of
//! hyper's bare 431. Shutdown is graceful: connections finish the request they are serving.
//!
//! Every connection holds a descriptor, so connections are bounded ([`Limits`]): per
//! source (an IPv4 address or an IPv6 /64), where one past the bound is closed as soon as
//! it is accepted, and in all, where a new one takes the place of the oldest of the
//! source holding the most, so that no set of sources can keep another out. A
//! connection that sends nothing is closed after `idle_connection_seconds`, sooner than
//! one that is sending; one whose client takes no answer for `write_timeout` is closed.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
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
    /// Time an answer may wait for its client to take any of it.
    pub write_timeout: Duration,
    /// Connections open at once, in all and from one source.
    pub max_total: usize,
    pub max_per_source: usize,
}

/// A source's open connections, oldest first: each by its number, and how to tell it
/// to close.
type SourceConnections = VecDeque<(u64, oneshot::Sender<()>)>;

/// The connections open now, by source.
struct Open {
    limits: Limits,
    by_source: Mutex<HashMap<String, SourceConnections>>,
    total: AtomicUsize,
    next: AtomicUsize,
}

/// One counted connection; uncounted when dropped. `evicted` resolves when a newer
/// connection of another source takes its place.
struct Slot {
    open: Arc<Open>,
    source: String,
    number: u64,
    evicted: oneshot::Receiver<()>,
}

impl Open {
    /// Counts a connection from `peer`, unless its source holds its bound; at the total
    /// bound, the oldest connection of the source holding the most is told to close.
    fn take(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
        let source = drover_auth::throttle::source_group(&peer.to_string());
        let mut by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        let mine = by_source.get(&source).map_or(0, VecDeque::len);
        if mine >= self.limits.max_per_source {
            return None;
        }
        if self.total.load(Ordering::Relaxed) >= self.limits.max_total {
            let heaviest = by_source
                .iter_mut()
                .max_by_key(|(_, open)| open.len())
                .filter(|(_, open)| open.len() > mine + 1)?;
            if let Some((_, close)) = heaviest.1.pop_front() {
                let _ = close.send(());
            }
        }
        let number = self.next.fetch_add(1, Ordering::Relaxed) as u64;
        let (close, evicted) = oneshot::channel();
        by_source
            .entry(source.clone())
            .or_default()
            .push_back((number, close));
        self.total.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            open: self.clone(),
            source,
            number,
            evicted,
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
        if let Some(open) = by_source.get_mut(&self.source) {
            open.retain(|(number, _)| *number != self.number);
            if open.is_empty() {
                by_source.remove(&self.source);
            }
        }
        self.open.total.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's stream that fails a write making no progress for its timeout: a
/// client that asks and never reads would otherwise hold the connection for ever.
struct Stalling {
    stream: TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stalling {
    fn poll_progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        done: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if done.is_ready() {
            self.stalled = None;
            return done;
        }
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no answer in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Stalling {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stalling {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.poll_progress(cx, done)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let done = Pin::new(&mut self.stream).poll_flush(cx);
        self.poll_progress(cx, done)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
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
        next: AtomicUsize::new(0),
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
        tokio::spawn(connection(
            stream,
            slot,
            limits,
            closed.clone(),
            move |io| http.serve_connection(io, service),
        ));
    }
    drop(listener);
    // Every connection holds a receiver: `closed` resolves when the last one ends.
    let _ = closing.send(());
    drop(closed);
    closing.closed().await;
    Ok(())
}

/// One connection's life: its first byte within the idle timeout, then served until
/// it ends, the service shuts down (gracefully) or a newer connection evicts it.
async fn connection<C>(
    stream: TcpStream,
    mut slot: Slot,
    limits: Limits,
    mut closed: tokio::sync::watch::Receiver<()>,
    serve: impl FnOnce(
        TokioIo<Stalling>,
    ) -> hyper::server::conn::http1::Connection<TokioIo<Stalling>, C>,
) where
    C: hyper::service::HttpService<Incoming>,
    C::ResBody: 'static,
    <C::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut first_byte = [0u8; 1];
    tokio::select! {
        first = tokio::time::timeout(limits.idle_timeout, stream.peek(&mut first_byte)) => {
            if first.is_err() {
                return;
            }
        }
        _ = closed.changed() => return,
        _ = &mut slot.evicted => return,
    }
    let io = TokioIo::new(Stalling {
        stream,
        timeout: limits.write_timeout,
        stalled: None,
    });
    let connection = serve(io);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = &mut slot.evicted => return,
        _ = closed.changed() => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
