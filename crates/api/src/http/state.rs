//! What handlers share: the store, the authenticator and the deployment's settings.

use std::sync::{Arc, OnceLock};

use drover_auth::request_keys::RequestKeys;
use drover_auth::tokens::{OAuthClient, Tokens};
use drover_auth::{Authenticator, DirectoryConfig, Permission};
use drover_cloud::{Images, ServiceRecords, ServiceTemplates};

use crate::access::AccessControl;
use crate::error::{ApiError, ApiResult};
use crate::event_stream::{EventStreams, StreamLimits};
use crate::metrics::HttpMetrics;
use drover_domain::dates::{Timestamp, WireDates};
use drover_monitor::{EventRecorder, Reports, StoredEvents};
use drover_sched::Scheduler;
use drover_sched::template::JobTemplates;
use drover_store::DocumentStore;

/// The service's shared state; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    services: Services,
    settings: Settings,
    /// Filled when the router is built: the permissions the routes declare, and the
    /// OpenAPI document.
    permissions: OnceLock<Vec<Permission>>,
    openapi: OnceLock<String>,
    /// Filled with the router: request latencies by route.
    http_metrics: OnceLock<HttpMetrics>,
    event_streams: Arc<EventStreams>,
    accounting: Option<Arc<drover_accounting::Ledger>>,
}

/// What the handlers call.
pub struct Services {
    pub store: Arc<dyn DocumentStore>,
    pub auth: Arc<Authenticator>,
    /// The roles and principals in force (shared with the plugins' hosts).
    pub access: Arc<AccessControl>,
    pub scheduler: Scheduler,
    pub monitoring: Monitoring,
    /// The stored images (`drover-cloud`).
    pub images: Arc<Images>,
    /// The stored service templates (`drover-cloud`).
    pub service_templates: Arc<ServiceTemplates>,
    /// The stored services (`drover-cloud`), and what wakes the controller that brings
    /// them up and tears them down after a change.
    pub service_records: Arc<ServiceRecords>,
    pub service_wake: Arc<tokio::sync::Notify>,
    /// Plugin types and plugins (`drover-plugins`).
    pub plugins: Arc<drover_plugins::registry::Plugins>,
    /// The bearer tokens of the OAuth 2 token endpoint.
    pub tokens: Arc<Tokens>,
    /// The idempotency keys of creating requests, and their answers.
    pub request_keys: Arc<RequestKeys>,
}

/// Events and reports.
pub struct Monitoring {
    pub events: EventRecorder,
    pub reports: Arc<Reports>,
}

/// Deployment settings the interface needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `{base_url}` prefix: empty, or `/` followed by segments, without a trailing `/`.
    pub base_url: String,
    /// Wire dates of this deployment (the local zone of version 1).
    pub dates: WireDates,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long a client has to send a body once its head has arrived.
    pub body_timeout: std::time::Duration,
    /// The largest job submission or change of an ordinary user (`[scheduler.limits]
    /// max_submission_bytes`).
    pub max_submission_bytes: usize,
    pub proxy: ProxySettings,
    pub build: BuildInfo,
    /// The directory (LDAP) configuration, when there is one.
    pub directory: Option<DirectoryConfig>,
    /// How long a list that must scan may take, waiting for its turn included
    /// (`list_budget_ms`); past it the list is answered 503 with `Retry-After`.
    pub list_budget: std::time::Duration,
    /// The job templates submissions may name.
    pub job_templates: Arc<JobTemplates>,
    /// `ENABLEJOBARRAYS`: whether job arrays may be submitted.
    pub job_arrays: bool,
    /// VMs and pending actions.
    pub cloud: CloudSettings,
    /// This server's name when it is the active one of several sharing the store.
    pub active_server: Option<String>,
    /// The portal clients that may ask `<base>/oauth/token` for tokens.
    pub oauth_clients: Vec<OAuthClient>,
    /// The bounds of `GET /rest/events/stream`.
    pub event_streams: StreamLimits,
}

/// `[cloud]`, as the VM and pending-action routes need it.
#[derive(Debug, Clone)]
pub struct CloudSettings {
    /// The image a VM created without `os` boots.
    pub default_image: String,
    /// `svc.pendingActions.mappings`: a system job's template (matched at its end) to
    /// the pending-action type reported, checked before the generic mapping.
    pub action_types: Vec<(String, String)>,
    /// `svc.pendingActions.displayGeneric`: whether the generic mapping of spec 2.13
    /// applies.
    pub display_generic: bool,
    /// `[scheduler.limits] user_service_max_count`.
    pub user_service_max_count: usize,
    /// What was found for VMs at start (the health detail's `vms`).
    pub guests: drover_control::vm_host::GuestsReport,
}

impl Default for CloudSettings {
    fn default() -> Self {
        Self {
            default_image: "guest".into(),
            action_types: Vec::new(),
            display_generic: true,
            user_service_max_count: drover_domain::limits::Limits::default().user_service_max_count,
            guests: Default::default(),
        }
    }
}

/// `ENABLEPROXY` and the users allowed to act for others (spec part 1, rule 7).
#[derive(Debug, Clone, Default)]
pub struct ProxySettings {
    pub enabled: bool,
    pub allowed_users: Vec<String>,
}

impl ProxySettings {
    pub fn may_proxy(&self, user: &str) -> bool {
        self.enabled && self.allowed_users.iter().any(|u| u == user)
    }
}

/// Runs `work` on a blocking service (the store's callers) off the async runtime; its
/// error reaches the client through [`ApiError`]'s conversions.
pub(crate) async fn blocking_on<S, T, E>(
    service: Arc<S>,
    work: impl FnOnce(&S) -> Result<T, E> + Send + 'static,
) -> ApiResult<T>
where
    S: Send + Sync + 'static,
    T: Send + 'static,
    E: Send + 'static,
    ApiError: From<E>,
{
    tokio::task::spawn_blocking(move || work(&service))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::from)
}

/// What `diag/about` reports, fixed when the binary was built.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub version: String,
    pub build: String,
    pub build_date: Timestamp,
    pub revision: String,
}

/// The state of one connection, as the health resources report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Up,
    Down,
    NotConfigured,
    NotSupported,
    Unknown,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Up => "UP",
            Health::Down => "DOWN",
            Health::NotConfigured => "NOT_CONFIGURED",
            Health::NotSupported => "NOT_SUPPORTED",
            Health::Unknown => "UNKNOWN",
        }
    }
}

impl AppState {
    pub fn new(services: Services, settings: Settings) -> Self {
        let event_streams = Arc::new(EventStreams::new(settings.event_streams.clone()));
        Self(Arc::new(Inner {
            services,
            settings,
            permissions: OnceLock::new(),
            openapi: OnceLock::new(),
            http_metrics: OnceLock::new(),
            event_streams,
            accounting: None,
        }))
    }

    /// With the embedded accounting manager (call before the state is shared).
    pub fn with_accounting(mut self, ledger: Arc<drover_accounting::Ledger>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.accounting = Some(ledger);
        }
        self
    }

    /// The accounting manager, when there is one.
    pub fn accounting(&self) -> Option<&Arc<drover_accounting::Ledger>> {
        self.0.accounting.as_ref()
    }

    pub fn store(&self) -> &Arc<dyn DocumentStore> {
        &self.0.services.store
    }

    pub fn auth(&self) -> &Arc<Authenticator> {
        &self.0.services.auth
    }

    /// The roles and principals in force.
    pub fn access(&self) -> &AccessControl {
        &self.0.services.access
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.0.services.scheduler
    }

    /// The stored images.
    pub fn images(&self) -> &Arc<Images> {
        &self.0.services.images
    }

    /// The stored service templates.
    pub fn service_templates(&self) -> &Arc<ServiceTemplates> {
        &self.0.services.service_templates
    }

    pub fn service_records(&self) -> &Arc<ServiceRecords> {
        &self.0.services.service_records
    }

    pub fn plugins(&self) -> &Arc<drover_plugins::registry::Plugins> {
        &self.0.services.plugins
    }

    pub fn tokens(&self) -> &Arc<Tokens> {
        &self.0.services.tokens
    }

    pub fn request_keys(&self) -> &Arc<RequestKeys> {
        &self.0.services.request_keys
    }

    pub fn service_wake(&self) -> &Arc<tokio::sync::Notify> {
        &self.0.services.service_wake
    }

    pub fn events(&self) -> &EventRecorder {
        &self.0.services.monitoring.events
    }

    /// The events stored, to read.
    pub fn stored_events(&self) -> StoredEvents {
        StoredEvents::new(self.0.services.store.clone())
    }

    pub fn reports(&self) -> &Arc<Reports> {
        &self.0.services.monitoring.reports
    }

    pub fn settings(&self) -> &Settings {
        &self.0.settings
    }

    /// Every permission some route needs, sorted.
    pub fn permissions(&self) -> &[Permission] {
        self.0.permissions.get().map(Vec::as_slice).unwrap_or(&[])
    }

    pub(crate) fn set_permissions(&self, permissions: Vec<Permission>) {
        let _ = self.0.permissions.set(permissions);
    }

    pub(crate) fn openapi(&self) -> &str {
        self.0.openapi.get().map(String::as_str).unwrap_or("{}")
    }

    pub(crate) fn set_openapi(&self, document: String) {
        let _ = self.0.openapi.set(document);
    }

    pub(crate) fn http_metrics(&self) -> Option<&HttpMetrics> {
        self.0.http_metrics.get()
    }

    pub(crate) fn set_http_metrics(&self, metrics: HttpMetrics) {
        let _ = self.0.http_metrics.set(metrics);
    }

    /// The open event streams; `close_all` ends them when the server shuts down.
    pub fn event_streams(&self) -> &Arc<EventStreams> {
        &self.0.event_streams
    }
}
