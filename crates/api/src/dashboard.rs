//! The web dashboard: a single-page browser client of the public interface, served by
//! the service itself at `GET <base>/dashboard/`.
//!
//! The page holds no data: it is static HTML, JavaScript and CSS built into the binary
//! (`dashboard/` beside this file, no build step, no external library, nothing from a
//! CDN), so its routes are public. Everything it shows it reads from `/rest/...` with
//! the login typed into it (HTTP Basic, kept in the tab's `sessionStorage`), like any
//! other client; it has no route or privilege of its own.
//!
//! Each asset is one registered route of a fixed table ([`ASSETS`]): there is no path
//! parameter, so no request can name a file (an unknown name is the router's 404). Every
//! answer carries a strict Content-Security-Policy (scripts, styles and connections from
//! this origin only; no inline script or style; no framing), `nosniff` and
//! `no-referrer`.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::routes::{Access, Routes};

/// The policy every dashboard answer carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One file of the dashboard.
pub struct Asset {
    /// The route, under the deployment prefix.
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
    summary: &'static str,
}

/// Every file the dashboard has; nothing else is served under `/dashboard/`.
pub const ASSETS: &[Asset] = &[
    Asset {
        path: "/dashboard/",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("dashboard/index.html"),
        summary: "The web dashboard (a browser client of this interface; holds no data)",
    },
    Asset {
        path: "/dashboard/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("dashboard/app.js"),
        summary: "The web dashboard's script",
    },
    Asset {
        path: "/dashboard/style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("dashboard/style.css"),
        summary: "The web dashboard's style sheet",
    },
    Asset {
        path: "/dashboard/icon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("dashboard/icon.svg"),
        summary: "The web dashboard's icon",
    },
];

pub(crate) fn register(routes: &mut Routes) {
    routes
        .get("/dashboard", Access::Public, redirect)
        .summary("Redirects to the web dashboard, /dashboard/")
        .response(308, "The dashboard is at dashboard/ (Location)", None);
    // A person opens the address the service prints at start: it leads to the dashboard.
    routes
        .get("/", Access::Public, to_dashboard)
        .summary("Redirects to the web dashboard, /dashboard/")
        .response(
            308,
            "The dashboard is at <base>/dashboard/ (Location)",
            None,
        );
    for asset in ASSETS {
        routes
            .get(
                asset.path,
                Access::Public,
                move || async move { serve(asset) },
            )
            .summary(asset.summary)
            .text_response(
                200,
                asset.content_type,
                "The file, built into the service",
                serde_json::json!({"type": "string"}),
            );
    }
}

/// The headers every dashboard answer carries.
fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        // No other origin's window shares a browsing context with it, or embeds its files.
        (
            header::HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            header::HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
        // Small files: always asked again, so that an upgrade shows at once.
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn serve(asset: &'static Asset) -> Response {
    secure(([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response())
}

/// `<base>/dashboard` to `<base>/dashboard/`, relative so that any prefix works.
async fn to_dashboard(State(state): State<AppState>) -> Response {
    root_redirect(&state.settings().base_url)
}

/// The answer to the service's own address (`<prefix>/`): the dashboard, by its whole
/// path, as the address may be asked for with or without its slash.
pub(crate) fn root_redirect(prefix: &str) -> Response {
    secure(
        (
            axum::http::StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, format!("{prefix}/dashboard/"))],
        )
            .into_response(),
    )
}

async fn redirect() -> Response {
    secure(
        (
            axum::http::StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, "dashboard/")],
        )
            .into_response(),
    )
}
