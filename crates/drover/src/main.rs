//! The `drover` command.
//!
//! ```text
//! drover serve [--listen 127.0.0.1:8080] [--data-dir ./data] [--store postgres://...]
//! ```
//! So far the service opens (and migrates) its store and answers the health summary;
//! the interface's resources arrive with the issues that build them (see README).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use drover_store::DocumentStore;
use serde_json::{Value, json};

struct Options {
    listen: SocketAddr,
    data_dir: PathBuf,
    store: Option<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: drover serve [--listen ADDR:PORT] [--data-dir DIR] [--store postgres://...]\n\
         defaults: --listen 127.0.0.1:8080, --data-dir ./data (SQLite file drover.db inside)"
    );
    std::process::exit(2)
}

fn parse(args: &[String]) -> Options {
    let mut options = Options {
        listen: "127.0.0.1:8080".parse().unwrap(),
        data_dir: PathBuf::from("data"),
        store: None,
    };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = || rest.next().cloned().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--listen" => options.listen = value().parse().unwrap_or_else(|_| usage()),
            "--data-dir" => options.data_dir = PathBuf::from(value()),
            "--store" => options.store = Some(value()),
            _ => usage(),
        }
    }
    options
}

type Store = Arc<dyn DocumentStore>;

/// `GET /rest/diag/health/summary`: the one route that needs no authentication.
async fn health_summary(State(store): State<Store>) -> Json<Value> {
    let datastore = match tokio::task::spawn_blocking(move || store.ping()).await {
        Ok(Ok(())) => "UP",
        _ => "DOWN",
    };
    Json(json!({
        "acct": {"connected": "NOT_CONFIGURED"},
        "datastore": {"connected": datastore},
        "sched": {"connected": "NOT_CONFIGURED", "datastoreConnected": datastore},
    }))
}

async fn not_found() -> (StatusCode, Json<Value>) {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"messages": ["No such resource"]})),
    )
}

async fn shutdown_signal() {
    let terminate = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

async fn serve(options: Options) -> Result<(), String> {
    let location = match &options.store {
        Some(url) => url.clone(),
        None => {
            std::fs::create_dir_all(&options.data_dir)
                .map_err(|e| format!("cannot create {}: {e}", options.data_dir.display()))?;
            options.data_dir.join("drover.db").display().to_string()
        }
    };
    let store: Store = {
        let location = location.clone();
        tokio::task::spawn_blocking(move || drover_store::open(&location))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?
            .into()
    };
    let app = Router::new()
        .route("/rest/diag/health/summary", get(health_summary))
        .fallback(not_found)
        .with_state(store.clone());
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    println!(
        "drover listening on http://{address} (store: {} at {location})",
        store.backend()
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => {
            if let Err(e) = serve(parse(&args[1..])).await {
                eprintln!("drover: {e}");
                std::process::exit(1);
            }
        }
        _ => usage(),
    }
}
