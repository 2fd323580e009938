//! `GET /rest/events/stream`: events as they are stored, as Server-Sent Events.
//!
//! A stream takes the list's `query` (and `api-version`: the shape of each event and the
//! names the query uses) and shows exactly what `GET /rest/events` would show the same
//! caller (`events::visible_to`). Each event is one SSE message: `id:` the event's id,
//! `data:` its JSON. A client that reconnects with `Last-Event-ID` first gets, from the
//! store, the matching events with a greater id (at most [`MAX_REPLAY`]; past that the
//! stream ends and the client resumes from the last one it got), then the live ones.
//!
//! Live events come from the recorder's broadcast (`EventRecorder::follow`), which
//! carries each event once it is durable, through one fan-out task per server that
//! serializes each event once for every stream (only while streams are open). The
//! stream subscribes before it replays, and skips the live events its replay already
//! sent, so nothing falls between the two.
//!
//! What a stream may cost is bounded: streams per user and in all (`[events]
//! max_streams_per_user`, `max_streams`: past them 429 and 503), a task and a channel
//! of [`CHANNEL_EVENTS`] per stream, and a client that reads too slowly (it falls
//! [`drover_monitor::recorder::FOLLOWER_BACKLOG`] events behind the broadcast, or takes
//! none for [`SEND_TIMEOUT`]) is dropped rather than buffered for: it resumes with
//! `Last-Event-ID`. Comment lines keep idle connections open through proxies, and every
//! stream ends when the server begins to shut down.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as Message, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use drover_monitor::event::V1_RENAMES;
use drover_monitor::recorder::FOLLOWER_BACKLOG;
use drover_monitor::{Event, EventRecorder};
use drover_query::{Filter, ListQuery, Paging, Sort};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use crate::error::{ApiError, ApiResult, Kind};
use crate::params::{ApiVersion, ListParams};
use crate::routes::Caller;
use crate::{AppState, events, wire};

/// Events replayed from the store by one request; the client resumes after them.
pub const MAX_REPLAY: usize = 10_000;
/// Events read from the store at a time while replaying.
const REPLAY_PAGE: usize = 500;
/// Events waiting for one client to read them.
const CHANNEL_EVENTS: usize = 64;
/// How long a stream waits for its client to take an event before dropping it.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds of event streams (`[events]` of the configuration).
#[derive(Debug, Clone)]
pub struct StreamLimits {
    pub per_user: usize,
    pub total: usize,
    /// How often an idle stream sends a comment line.
    pub heartbeat: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            per_user: 4,
            total: 256,
            heartbeat: Duration::from_secs(15),
        }
    }
}

/// What the fan-out passes on to the streams.
#[derive(Clone)]
enum Live {
    /// A stored event, and its stored document for the filters.
    Event(Arc<Event>, Arc<Value>),
    /// The fan-out fell behind the recorder: events were lost, and every stream ends
    /// (its client resumes with `Last-Event-ID`).
    Lost,
}

/// The open streams of a server, and what ends them all at shutdown.
pub struct EventStreams {
    /// The fan-out's channel, made with the first stream.
    fanout: OnceLock<broadcast::Sender<Live>>,
    limits: StreamLimits,
    /// Open streams by user; taken only to open or close a stream.
    by_user: Mutex<HashMap<String, usize>>,
    open: AtomicUsize,
    dropped: AtomicU64,
    closing: watch::Sender<bool>,
}

impl EventStreams {
    pub fn new(limits: StreamLimits) -> Self {
        Self {
            fanout: OnceLock::new(),
            limits,
            by_user: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            closing: watch::channel(false).0,
        }
    }

    /// Ends every stream, now and from now on (the server is shutting down: its
    /// connections finish once their responses have).
    pub fn close_all(&self) {
        self.closing.send_replace(true);
    }

    pub fn open(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// Streams ended because their client read too slowly.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    /// The live events from now on, through the fan-out (started on first use).
    fn subscribe(&self, recorder: &EventRecorder) -> broadcast::Receiver<Live> {
        self.fanout
            .get_or_init(|| {
                let (sender, _) = broadcast::channel(FOLLOWER_BACKLOG);
                tokio::spawn(fan_out(recorder.follow(), sender.clone()));
                sender
            })
            .subscribe()
    }

    /// Counts a new stream of `user`, or says why there may be none.
    fn admit(self: &Arc<Self>, user: &str) -> ApiResult<Permit> {
        if *self.closing.borrow() {
            return Err(ApiError::unavailable(
                "The service is shutting down",
                "Connect again in a moment",
            ));
        }
        let mut by_user = self.by_user.lock().unwrap_or_else(|e| e.into_inner());
        let mine = by_user.get(user).copied().unwrap_or(0);
        if mine >= self.limits.per_user {
            return Err(ApiError::new(
                Kind::TooManyRequests,
                [
                    "Too many event streams".to_string(),
                    format!(
                        "A user may have {} streams open at once; close one first",
                        self.limits.per_user
                    ),
                ],
            ));
        }
        if self.open.load(Relaxed) >= self.limits.total {
            return Err(ApiError::unavailable(
                "Too many event streams",
                format!(
                    "The service serves {} streams at once; try again later",
                    self.limits.total
                ),
            ));
        }
        by_user.insert(user.to_string(), mine + 1);
        self.open.fetch_add(1, Relaxed);
        Ok(Permit {
            streams: self.clone(),
            user: user.to_string(),
        })
    }
}

/// One open stream, counted until dropped.
struct Permit {
    streams: Arc<EventStreams>,
    user: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut by_user = self
            .streams
            .by_user
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = by_user.get_mut(&self.user) {
            *count -= 1;
            if *count == 0 {
                by_user.remove(&self.user);
            }
        }
        self.streams.open.fetch_sub(1, Relaxed);
    }
}

/// Passes each recorded event on, serialized once, while some stream listens.
async fn fan_out(mut recorded: broadcast::Receiver<Arc<Event>>, streams: broadcast::Sender<Live>) {
    loop {
        let live = match recorded.recv().await {
            Ok(event) => {
                if streams.receiver_count() == 0 {
                    continue;
                }
                let document = serde_json::to_value(&*event).unwrap_or_default();
                Live::Event(event, Arc::new(document))
            }
            Err(broadcast::error::RecvError::Lagged(_)) => Live::Lost,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let _ = streams.send(live);
    }
}

/// What one stream sends: the caller's filter (in stored names, visibility included)
/// and the shape of its events.
struct Selection {
    filter: Filter,
    api_version: ApiVersion,
}

pub(crate) async fn stream(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let after = last_event_id(&headers)?;
    let mut filter = params.query.filter;
    if params.api_version != ApiVersion::V3 {
        filter = filter.renamed(V1_RENAMES);
    }
    let filter = events::visible_to(filter, &caller, &state)?;
    let user = caller.effective_user.clone().unwrap_or_default();
    let permit = state.event_streams().admit(&user)?;
    // Subscribed before the replay reads the store: an event stored meanwhile is in
    // one or the other (or both, and sent once).
    let live = state.event_streams().subscribe(state.events());
    let (sender, receiver) = mpsc::channel(CHANNEL_EVENTS);
    let selection = Selection {
        filter,
        api_version: params.api_version,
    };
    let heartbeat = state.event_streams().limits.heartbeat;
    let closing = state.event_streams().closing.subscribe();
    tokio::spawn(feed(state, selection, after, live, sender, closing, permit));
    let body = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|message| (Ok::<_, Infallible>(message), receiver))
    });
    let mut response = Sse::new(body)
        .keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat"))
        .into_response();
    // Proxies that buffer (nginx) pass the stream on as it comes.
    response.headers_mut().insert(
        "X-Accel-Buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    Ok(response)
}

/// The `Last-Event-ID` header: an event id (24 hexadecimal digits), if sent.
fn last_event_id(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    // Bytes that are not visible ASCII are no id either.
    let text = value.to_str().unwrap_or("?").trim();
    if text.is_empty() {
        return Ok(None);
    }
    let well_formed = text.len() == 24 && text.bytes().all(|b| b.is_ascii_hexdigit());
    if !well_formed {
        return Err(ApiError::bad_request(
            "Invalid Last-Event-ID",
            "Last-Event-ID is the id of an event: 24 hexadecimal digits",
        ));
    }
    Ok(Some(text.to_ascii_lowercase()))
}

/// Why a stream's feed stopped.
enum Stop {
    /// The client went away, or the server is closing.
    Gone,
    /// The client read too slowly.
    Slow,
}

/// Sends the replay, then the live events, until the client goes, falls behind, or the
/// server closes.
async fn feed(
    state: AppState,
    selection: Selection,
    after: Option<String>,
    mut live: broadcast::Receiver<Live>,
    sender: mpsc::Sender<Message>,
    mut closing: watch::Receiver<bool>,
    permit: Permit,
) {
    let streams = permit.streams.clone();
    let outcome = async {
        let replayed = match after {
            Some(after) => replay(&state, &selection, after, &sender).await?,
            None => HashSet::new(),
        };
        loop {
            let (event, document) = tokio::select! {
                received = live.recv() => match received {
                    Ok(Live::Event(event, document)) => (event, document),
                    Ok(Live::Lost) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        return Err(Stop::Slow);
                    }
                    Err(broadcast::error::RecvError::Closed) => return Err(Stop::Gone),
                },
                _ = sender.closed() => return Err(Stop::Gone),
            };
            if replayed.contains(&event.id) {
                continue;
            }
            if selection.filter.matches(&*document) {
                let message = message(&event, 1, selection.api_version, &state);
                send(&sender, message).await?;
            }
        }
    };
    let outcome: Result<(), Stop> = tokio::select! {
        outcome = outcome => outcome,
        _ = closing.wait_for(|closing| *closing) => Err(Stop::Gone),
    };
    if let Err(Stop::Slow) = outcome {
        streams.dropped.fetch_add(1, Relaxed);
        // The channel may have room for a last word; the client resumes either way.
        let _ =
            sender.try_send(Message::default().comment(
                "dropped: the stream fell behind the events; reconnect with Last-Event-ID",
            ));
    }
    drop(permit);
}

/// Sends the stored events after `after` that the selection matches, in id order;
/// answers their ids. Past [`MAX_REPLAY`] the stream ends (the client resumes).
async fn replay(
    state: &AppState,
    selection: &Selection,
    after: String,
    sender: &mpsc::Sender<Message>,
) -> Result<HashSet<String>, Stop> {
    let mut sent = HashSet::new();
    let mut cursor = after;
    let sort = Sort::parse_str(r#"{"id": 1}"#).expect("a valid sort");
    loop {
        let after_cursor = Filter::parse(&json!({"id": {"$gt": cursor}}), &state.settings().dates)
            .expect("a valid filter");
        let query = ListQuery {
            filter: Filter::And(vec![selection.filter.clone(), after_cursor]),
            sort: sort.clone(),
            paging: Paging {
                offset: 0,
                max: Some(REPLAY_PAGE),
            },
        };
        let page = match state.stored_events().list(query, false).await {
            Ok(page) => page,
            Err(e) => {
                // The store is away: say so in the stream, and end it (the client
                // resumes from what it got).
                eprintln!("drover: event stream replay: {e}");
                let _ = sender
                    .send(Message::default().comment("the store does not answer; reconnect"))
                    .await;
                return Err(Stop::Gone);
            }
        };
        let count = page.items.len();
        for (event, version) in page.items {
            cursor = event.id.clone();
            let message = message(&event, version, selection.api_version, state);
            send(sender, message).await?;
            sent.insert(event.id);
            if sent.len() >= MAX_REPLAY {
                return Err(Stop::Gone);
            }
        }
        if count < REPLAY_PAGE {
            return Ok(sent);
        }
    }
}

async fn send(sender: &mpsc::Sender<Message>, message: Message) -> Result<(), Stop> {
    match tokio::time::timeout(SEND_TIMEOUT, sender.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Stop::Gone),
        Err(_) => Err(Stop::Slow),
    }
}

/// One event as an SSE message: its id, and its JSON in the version asked for.
fn message(event: &Event, version: i64, api_version: ApiVersion, state: &AppState) -> Message {
    let data = if api_version == ApiVersion::V3 {
        wire::events::v3(event, version)
    } else {
        wire::events::v1(event, &state.settings().dates)
    };
    Message::default()
        .id(event.id.clone())
        .data(data.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams(per_user: usize, total: usize) -> Arc<EventStreams> {
        Arc::new(EventStreams::new(StreamLimits {
            per_user,
            total,
            heartbeat: Duration::from_secs(15),
        }))
    }

    fn status(refused: ApiResult<Permit>) -> u16 {
        use axum::response::IntoResponse;
        match refused {
            Ok(_) => 200,
            Err(e) => e.into_response().status().as_u16(),
        }
    }

    #[test]
    fn streams_are_counted_per_user_and_in_all_until_dropped() {
        let streams = streams(2, 3);
        let a1 = streams.admit("a").unwrap();
        let _a2 = streams.admit("a").unwrap();
        assert_eq!(status(streams.admit("a")), 429);
        let _b1 = streams.admit("b").unwrap();
        assert_eq!(status(streams.admit("b")), 503);
        assert_eq!(streams.open(), 3);
        drop(a1);
        assert_eq!(streams.open(), 2);
        let _a3 = streams.admit("a").unwrap();
        streams.close_all();
        assert_eq!(status(streams.admit("c")), 503);
    }

    #[test]
    fn last_event_id_is_an_event_id_or_nothing() {
        let with = |value: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.insert(
                "last-event-id",
                axum::http::HeaderValue::from_bytes(value).unwrap(),
            );
            last_event_id(&headers)
        };
        assert_eq!(last_event_id(&HeaderMap::new()).unwrap(), None);
        assert_eq!(with(b"").unwrap(), None);
        assert_eq!(
            with(b"00000000ABCDEF0000000001").unwrap().as_deref(),
            Some("00000000abcdef0000000001")
        );
        for bad in [
            &b"1"[..],
            b"zz0000000000000000000000",
            b"\xe9\xe9",
            b"0000000000000000000000001",
        ] {
            assert!(with(bad).is_err(), "{bad:?}");
        }
    }
}
