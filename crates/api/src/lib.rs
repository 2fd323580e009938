//! The HTTP interface of Drover: the plumbing every request goes through ([`http`]), and
//! one module per resource family, each translating HTTP to the services beside it.
//!
//! - [`http`]: [`routes`] (every route is registered through [`Routes`] with the
//!   permission it needs and its documentation; the same registration builds the axum
//!   router, the route gate (authentication, authorization, common parameters) and the
//!   OpenAPI document, so none of the three can miss a route; [`routes::Collection`] is
//!   the list-and-one pair every resource has; `ItemRead`, `ItemChange` and `Submission`
//!   extract what handlers of one item or of a post read), [`error`] ([`ApiError`],
//!   mapped to status and `{"messages":[...]}` in one place), [`params`] (`api-version`,
//!   `pretty`, `proxy-user`, list parameters, `change-mode`), [`layers`] (what wraps
//!   every request), [`reply`] (list envelopes, `{"messages"}` answers, `201` with
//!   `Location`), [`input`] (reading request bodies field by field, problems named by
//!   path), and who the caller is.
//! - [`metrics`]: `GET /metrics` (Prometheus text), and request latencies by route.
//! - [`dashboard`]: the web dashboard's files (`GET /dashboard/`), public, built in; the
//!   page is a browser client of the routes above and has none of its own.
//! - [`event_stream`]: `GET /rest/events/stream`, events as Server-Sent Events.
//! - [`wire`]: wire values rendered alike everywhere (dates), and the wire shapes of
//!   events (JSON versions 1 and 3, the XML of version-1 creation).
//! - resource families: [`diag`], [`permissions`], [`jobs`] (v1 and v2 shapes),
//!   [`nodes`], [`credentials`], [`events`], [`reports`] (with metric types),
//!   [`reservations`] and [`containers`] (virtual containers, `/rest/vcs`), whose
//!   deletion and ACL rules are one resource (`acl`), and [`roles`] and
//!   [`principals`], one named-document resource (`access_resources`) over the service
//!   [`AccessStore`](drover_auth::access_store::AccessStore); [`images`], over the
//!   service [`Images`](drover_cloud::Images); [`service_templates`], over the service
//!   [`ServiceTemplates`](drover_cloud::ServiceTemplates); [`vms`] and [`pending_actions`] (the
//!   system jobs that work on VMs), over the engine's VMs.

pub mod http;
// The plumbing's modules by their short names, as every resource uses them.
pub use http::{access, error, input, layers, openapi, params, reply, routes};
pub(crate) use http::{audit, cross_site, idempotency, identity, state};

pub mod accounting;
mod acl;
pub mod credentials;
pub mod dashboard;
pub mod diag;
pub mod event_stream;
pub mod events;
pub mod virtual_containers;
pub use identity::People;
mod access_resources;
pub mod images;
pub mod jobs;
pub mod metrics;
pub mod nodes;
pub mod oauth;
pub mod pending_actions;
pub mod permissions;
pub mod plugins;
pub mod principals;
pub mod reports;
pub mod reservations;
pub mod roles;
pub mod service_templates;
pub mod services;
pub mod vms;
pub mod wire;

pub use error::{ApiError, ApiResult, Kind};
pub use params::{ApiVersion, ChangeMode, CommonParams, ListParams};
pub use routes::{Access, Caller, Routes};
pub use state::{
    AppState, BuildInfo, CloudSettings, Health, Monitoring, ProxySettings, Services, Settings,
};

/// Every route of the interface that exists so far.
pub fn interface() -> Routes {
    let mut routes = Routes::new();
    openapi::register(&mut routes);
    diag::register(&mut routes);
    permissions::register(&mut routes);
    principals::register(&mut routes);
    roles::register(&mut routes);
    jobs::register(&mut routes);
    nodes::register(&mut routes);
    credentials::register(&mut routes);
    accounting::register(&mut routes);
    events::register(&mut routes);
    reports::register(&mut routes);
    reservations::register(&mut routes);
    virtual_containers::register(&mut routes);
    images::register(&mut routes);
    service_templates::register(&mut routes);
    services::register(&mut routes);
    plugins::register(&mut routes);
    vms::register(&mut routes);
    pending_actions::register(&mut routes);
    oauth::register(&mut routes);
    metrics::register(&mut routes);
    dashboard::register(&mut routes);
    routes
}

/// The service: `routes` behind the gate, under the deployment prefix, wrapped in the
/// layers every request passes. `routes` is normally [`interface()`]; tests may add
/// routes of their own, which then pass through exactly the same machinery.
pub fn app(state: AppState, routes: Routes) -> axum::Router {
    routes.into_router(state)
}
