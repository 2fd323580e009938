//! Route registration, and the gate every route passes.
//!
//! A route is registered once, with its method, path, [`Access`], handler and
//! documentation. [`Routes::into_router`] turns the registrations into the axum router,
//! wraps each route in [`gate`] with the access it declared, and renders the OpenAPI
//! document from the same list. There is no other way to add a route.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::handler::Handler;
use axum::http::Method;
use axum::http::request::Parts;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use drover_auth::roles::Scope;
use drover_auth::{Identity, Permission};
use serde_json::Value;

use crate::access::AccessControl;
use crate::audit::{self, Audit};
use crate::error::{ApiError, Kind};
use crate::identity::{authenticate, may_proxy_others, proxied_identity};
use crate::input::Warnings;
use crate::layers::Authenticated;
use crate::metrics::{HttpMetrics, MatchedRoute};
use crate::params::CommonParams;
use crate::{AppState, idempotency, layers, openapi};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No authentication (only the health summary, the OpenAPI document and the files of
    /// the web dashboard, which hold no data).
    Public,
    /// An authenticated user holding this permission.
    Needs(Permission),
    /// A configured OAuth client, which the handler authenticates itself (the token
    /// endpoints, `oauth`); no user is authenticated.
    Client,
}

/// Where a documented parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamIn {
    Path,
    Query,
    Header,
}

/// A documented parameter.
#[derive(Debug, Clone)]
pub struct ParamDoc {
    pub name: &'static str,
    pub location: ParamIn,
    pub required: bool,
    pub description: &'static str,
    pub schema: Value,
}

/// A documented response.
#[derive(Debug, Clone)]
pub struct ResponseDoc {
    pub status: u16,
    pub description: &'static str,
    pub schema: Option<Value>,
    /// The answer's content type: JSON unless a route says otherwise.
    pub content_type: &'static str,
}

/// Everything the OpenAPI document says about one route.
#[derive(Debug, Clone)]
pub struct RouteDoc {
    pub method: Method,
    /// In axum syntax: `/rest/jobs/{id}`.
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// A list operation (takes the list parameters, answers the envelope).
    pub list: bool,
    pub params: Vec<ParamDoc>,
    /// Content type and schema of the request body.
    pub body: Option<(&'static str, Value)>,
    /// A `POST` or `PUT` that reads no body (declared, so that one forgotten is noticed).
    pub no_body: bool,
    /// The body may be left out.
    pub body_optional: bool,
    /// A creating `POST` that takes an `Idempotency-Key` header (`idempotency`).
    pub idempotent: bool,
    /// Its creation writes the key's receipt in its own transaction (job submissions).
    pub receipted: bool,
    pub responses: Vec<ResponseDoc>,
}

/// A collection read whole (`GET path`: a list in its envelope) and one item at a time
/// (`GET item_path`: the item, or 404), documented alike for every resource.
pub struct Collection {
    pub path: &'static str,
    /// The path of one item; its last segment is the key, e.g. `/rest/nodes/{id}`.
    pub item_path: &'static str,
    pub access: Access,
    /// The schema of one item.
    pub schema: Value,
    /// The list's summary, and what its answer holds.
    pub list: (&'static str, &'static str),
    /// One item's summary, its key, what the answer is, and when there is none.
    pub item: (&'static str, &'static str, &'static str, &'static str),
}

/// One registered route: its documentation and its handler.
struct Entry {
    doc: RouteDoc,
    handler: MethodRouter<AppState>,
}

/// The routes of a service, under construction.
#[derive(Default)]
pub struct Routes {
    entries: Vec<Entry>,
}

/// Adds documentation to the route just registered.
pub struct RouteBuilder<'a> {
    doc: &'a mut RouteDoc,
}

impl RouteBuilder<'_> {
    pub fn summary(self, summary: &'static str) -> Self {
        self.doc.summary = summary;
        self
    }

    /// Marks a list operation: the list parameters and the envelope are documented.
    pub fn list(self) -> Self {
        self.doc.list = true;
        self
    }

    pub fn param(self, param: ParamDoc) -> Self {
        self.doc.params.push(param);
        self
    }

    pub fn path_param(self, name: &'static str, description: &'static str) -> Self {
        self.param(ParamDoc {
            name,
            location: ParamIn::Path,
            required: true,
            description,
            schema: serde_json::json!({"type": "string"}),
        })
    }

    pub fn body(self, content_type: &'static str, schema: Value) -> Self {
        self.doc.body = Some((content_type, schema));
        self
    }

    /// An optional query parameter the handler reads.
    pub fn query(self, name: &'static str, description: &'static str, schema: Value) -> Self {
        self.param(ParamDoc {
            name,
            location: ParamIn::Query,
            required: false,
            description,
            schema,
        })
    }

    /// An optional `true`/`false` query parameter (given empty: true).
    pub fn flag(self, name: &'static str, description: &'static str) -> Self {
        self.query(
            name,
            description,
            serde_json::json!({"type": "string", "enum": ["true", "false", "1", "0", ""]}),
        )
    }

    /// The `change-mode` query parameter (`add`, `remove`, `set`), `required` or not.
    pub fn change_mode(self, required: bool, description: &'static str) -> Self {
        self.param(ParamDoc {
            name: "change-mode",
            location: ParamIn::Query,
            required,
            description,
            schema: serde_json::json!({"type": "string", "enum": ["add", "remove", "set"]}),
        })
    }

    /// The operation is served only with `api-version` one of `versions`.
    pub fn api_versions(self, versions: &'static [&'static str]) -> Self {
        self.param(ParamDoc {
            name: "api-version",
            location: ParamIn::Query,
            required: true,
            description: "The representation versions this operation serves",
            schema: serde_json::json!({"type": "string", "enum": versions}),
        })
    }

    /// A JSON body of `schema`.
    pub fn json_body(self, schema: Value) -> Self {
        self.body("application/json", schema)
    }

    /// A JSON body of `schema` that may be left out.
    pub fn optional_json_body(self, schema: Value) -> Self {
        self.doc.body_optional = true;
        self.json_body(schema)
    }

    /// A creating `POST` whose retries with one `Idempotency-Key` create once.
    pub fn idempotent(self) -> Self {
        self.doc.idempotent = true;
        self.param(ParamDoc {
            name: "Idempotency-Key",
            location: ParamIn::Header,
            required: false,
            description: "A key of the caller's choosing (1 to 255 visible ASCII characters): a retry with the same key and the same request is answered what the first was, and creates nothing more",
            schema: serde_json::json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}),
        })
    }

    /// [`RouteBuilder::idempotent`], for a handler that passes the key's receipt
    /// (`idempotency::receipt`) to the engine with its submission.
    pub fn idempotent_with_receipt(self) -> Self {
        self.doc.receipted = true;
        self.idempotent()
    }

    /// A `POST` or `PUT` that reads no body.
    pub fn no_body(self) -> Self {
        self.doc.no_body = true;
        self
    }

    pub fn response(self, status: u16, description: &'static str, schema: Option<Value>) -> Self {
        self.doc.responses.push(ResponseDoc {
            status,
            description,
            schema,
            content_type: "application/json",
        });
        self
    }

    /// A successful answer that is not JSON (`text/plain` metrics, an event stream);
    /// `schema` describes its text.
    pub fn text_response(
        self,
        status: u16,
        content_type: &'static str,
        description: &'static str,
        schema: Value,
    ) -> Self {
        self.doc.responses.push(ResponseDoc {
            status,
            description,
            schema: Some(schema),
            content_type,
        });
        self
    }
}

impl Routes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` for `method path`, reachable with `access`.
    pub fn add<H, T>(
        &mut self,
        method: Method,
        path: &'static str,
        access: Access,
        handler: H,
    ) -> RouteBuilder<'_>
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("a standard method");
        self.entries.push(Entry {
            doc: RouteDoc {
                method,
                path,
                access,
                summary: "",
                list: false,
                params: Vec::new(),
                body: None,
                no_body: false,
                body_optional: false,
                idempotent: false,
                receipted: false,
                responses: Vec::new(),
            },
            handler: on(filter, handler),
        });
        RouteBuilder {
            doc: &mut self.entries.last_mut().expect("just pushed").doc,
        }
    }

    pub fn get<H: Handler<T, AppState>, T: 'static>(
        &mut self,
        path: &'static str,
        access: Access,
        handler: H,
    ) -> RouteBuilder<'_> {
        self.add(Method::GET, path, access, handler)
    }

    pub fn post<H: Handler<T, AppState>, T: 'static>(
        &mut self,
        path: &'static str,
        access: Access,
        handler: H,
    ) -> RouteBuilder<'_> {
        self.add(Method::POST, path, access, handler)
    }

    pub fn put<H: Handler<T, AppState>, T: 'static>(
        &mut self,
        path: &'static str,
        access: Access,
        handler: H,
    ) -> RouteBuilder<'_> {
        self.add(Method::PUT, path, access, handler)
    }

    pub fn delete<H: Handler<T, AppState>, T: 'static>(
        &mut self,
        path: &'static str,
        access: Access,
        handler: H,
    ) -> RouteBuilder<'_> {
        self.add(Method::DELETE, path, access, handler)
    }

    /// Registers `list` and `one` for `collection`; the builder is the item route's.
    pub fn collection<L, LT, O, OT>(
        &mut self,
        collection: Collection,
        list: L,
        one: O,
    ) -> RouteBuilder<'_>
    where
        L: Handler<LT, AppState>,
        O: Handler<OT, AppState>,
        LT: 'static,
        OT: 'static,
    {
        let Collection {
            path,
            item_path,
            access,
            schema,
            list: (list_summary, items),
            item: (summary, key, answer, missing),
        } = collection;
        // `fields` and `exclude-fields` may leave any property out of a listed item.
        let mut listed = schema.clone();
        if let Some(listed) = listed.as_object_mut() {
            listed.remove("required");
        }
        self.get(path, access, list)
            .summary(list_summary)
            .list()
            .response(200, items, Some(openapi::schema::envelope(listed)));
        let name = item_path
            .rsplit_once('{')
            .and_then(|(_, name)| name.strip_suffix('}'))
            .expect("an item path ends with its key");
        self.get(item_path, access, one)
            .summary(summary)
            .path_param(name, key)
            .response(200, answer, Some(schema))
            .response(404, missing, None)
    }

    /// The documentation of every route, in registration order.
    pub fn docs(&self) -> Vec<RouteDoc> {
        self.entries.iter().map(|e| e.doc.clone()).collect()
    }

    /// The axum router of these routes for `state`: each route behind the gate, the
    /// whole under the deployment prefix, wrapped in [`layers::wrap`].
    pub fn into_router(self, state: AppState) -> Router {
        let docs = self.docs();
        let mut permissions: Vec<Permission> = docs
            .iter()
            .filter_map(|d| match d.access {
                Access::Needs(p) => Some(p),
                Access::Public | Access::Client => None,
            })
            .collect();
        permissions.push(drover_auth::roles::PROXY);
        permissions.sort();
        permissions.dedup();
        state.set_permissions(permissions);
        state.set_openapi(openapi::document(&docs, &state.settings().base_url));
        state.set_http_metrics(HttpMetrics::new(&docs));

        let mut by_path: BTreeMap<&'static str, MethodRouter<AppState>> = BTreeMap::new();
        for (index, entry) in self.entries.into_iter().enumerate() {
            let gated = entry.handler.route_layer(from_fn_with_state(
                Gate {
                    state: state.clone(),
                    access: entry.doc.access,
                    idempotent: entry.doc.idempotent,
                    receipted: entry.doc.receipted,
                    route: MatchedRoute(index),
                },
                gate,
            ));
            let merged = match by_path.remove(entry.doc.path) {
                Some(existing) => existing.merge(gated),
                None => gated,
            };
            by_path.insert(entry.doc.path, merged);
        }
        let mut routes = Router::new();
        for (path, handler) in by_path {
            let allowed: Vec<&str> = docs
                .iter()
                .filter(|d| d.path == path)
                .map(|d| d.method.as_str())
                .collect();
            let allowed = allowed.join(", ");
            let refuse = move || async move { ApiError::method_not_allowed(&allowed) };
            routes = routes.route(path, handler.fallback(refuse));
        }
        let prefix = &state.settings().base_url;
        let routes = routes
            .fallback(layers::unknown_path(prefix))
            .with_state(state.clone());
        let router = if prefix.is_empty() {
            routes
        } else {
            // Nested, `/` is `<prefix>` alone; `<prefix>/` is the same address.
            let root = prefix.clone();
            Router::new()
                .nest(prefix, routes)
                .route(
                    &format!("{prefix}/"),
                    axum::routing::get(
                        move || async move { crate::dashboard::root_redirect(&root) },
                    ),
                )
                .fallback(layers::unknown_path(prefix))
        };
        layers::wrap(router, &state)
    }
}

/// The caller of a request, as the gate established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The authenticated user; `None` on public routes.
    pub identity: Option<Identity>,
    /// The user the request acts for: the `proxy-user` when proxying is enabled and the
    /// caller may proxy, else the caller.
    pub effective_user: Option<String>,
    /// The `proxy-user` parameter as sent, honoured or not (accounts and quotes use it
    /// to name the accounting user whatever the proxy settings).
    pub proxy_user: Option<String>,
    /// How widely the effective user holds the route's permission: [`Scope::Own`]
    /// limits them to their own jobs, reservations and containers. `None` on public routes.
    pub scope: Option<Scope>,
    /// When the caller acts for another through `proxy-user`, how widely the caller
    /// itself holds the route's permission: what owner it may name is its own right.
    pub proxy_scope: Option<Scope>,
}

impl Caller {
    /// Whether the effective user holds the route's permission over everybody's objects.
    pub fn over_all(&self) -> bool {
        self.scope == Some(Scope::All)
    }

    /// The engine's view of the caller: the effective user, who proxies for them, and
    /// whether they hold the route's permission over everybody's objects (else only
    /// over their own).
    pub fn requester(&self) -> drover_sched::Requester {
        let identity = self.identity.as_ref();
        let user = self.effective_user.clone().unwrap_or_default();
        let proxied = identity.is_some_and(|i| i.name != user);
        drover_sched::Requester {
            proxy_user: proxied.then(|| user.clone()),
            over_all: self.over_all(),
            may_name_owners: self.over_all() || (proxied && self.proxy_scope == Some(Scope::All)),
            user,
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::internal("a handler asked for the caller outside the gate"))
    }
}

/// What a handler reading one item (`GET <collection>/{id}`) reads of its request: the
/// state, common parameters, caller and id, extracted in this order as separate
/// extractors would be.
pub struct ItemRead(pub AppState, pub CommonParams, pub Caller, pub String);

/// What a handler changing one item (`PUT <collection>/{id}`) reads: [`ItemRead`] and
/// the body.
pub struct ItemChange(
    pub AppState,
    pub CommonParams,
    pub Caller,
    pub String,
    pub Bytes,
);

/// What a handler posting to a collection reads: the state, common parameters, caller
/// and body.
pub struct Submission(pub AppState, pub CommonParams, pub Caller, pub Bytes);

/// The common parameters and the caller, each rejection answered as its own extractor's.
async fn params_and_caller(
    parts: &mut Parts,
    state: &AppState,
) -> Result<(CommonParams, Caller), Response> {
    let params = CommonParams::from_request_parts(parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    let caller = Caller::from_request_parts(parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    Ok((params, caller))
}

impl FromRequestParts<AppState> for ItemRead {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let (params, caller) = params_and_caller(parts, state).await?;
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self(state.clone(), params, caller, id))
    }
}

impl FromRequest<AppState> for ItemChange {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let ItemRead(state, params, caller, id) =
            ItemRead::from_request_parts(&mut parts, state).await?;
        let body = Bytes::from_request(Request::from_parts(parts, body), &state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self(state, params, caller, id, body))
    }
}

impl FromRequest<AppState> for Submission {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let (params, caller) = params_and_caller(&mut parts, state).await?;
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self(state.clone(), params, caller, body))
    }
}

/// Runs the handler, adding to its answer the warnings of its handling (fields of the
/// body nobody read).
pub(crate) async fn handle(request: Request, next: Next) -> Response {
    let (response, warnings) = Warnings::collect(next.run(request)).await;
    if warnings.is_empty() {
        response
    } else {
        layers::with_warnings(response, warnings).await
    }
}

#[derive(Clone)]
struct Gate {
    state: AppState,
    access: Access,
    idempotent: bool,
    receipted: bool,
    /// Which registration this is, for the request metrics (`api::metrics`).
    route: MatchedRoute,
}

/// [`pass_gate`], its answer marked with the route it came from.
async fn gate(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let route = gate.route;
    let mut response = pass_gate(gate, request, next).await;
    response.extensions_mut().insert(route);
    response
}

/// Authenticates (HTTP Basic, local users then the directory), parses the common
/// parameters, resolves `proxy-user`, authorizes the effective user against the route's
/// declared permission through their roles, adds the warnings of the handling (fields of
/// the body nobody read) to the answer, and pretty-prints on request.
async fn pass_gate(gate: Gate, mut request: Request, next: Next) -> Response {
    let state = &gate.state;
    let source = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let identity = match gate.access {
        Access::Public | Access::Client => None,
        Access::Needs(_) => match request.extensions_mut().remove::<Authenticated>() {
            // Verified before a large body was read.
            Some(Authenticated(identity)) => Some(identity),
            None => match authenticate(state, request.headers(), source).await {
                Ok(identity) => Some(identity),
                Err(e) => return e.into_response(),
            },
        },
    };
    let params = match CommonParams::parse(request.uri().query()) {
        Ok(params) => params,
        Err(e) => return e.into_response(),
    };
    let proxy_user = match params.raw.get("proxy-user") {
        Ok(value) => value.filter(|v| !v.is_empty()).map(str::to_string),
        Err(e) => return e.into_response(),
    };
    let mut caller = Caller {
        effective_user: identity.as_ref().map(|i| i.name.clone()),
        identity,
        proxy_user,
        scope: None,
        proxy_scope: None,
    };
    if let (Access::Needs(permission), Some(identity)) = (gate.access, &caller.identity) {
        let authority = AccessControl::current(state);
        let subject = match &caller.proxy_user {
            Some(proxied) if may_proxy_others(state, &authority, identity) => {
                match proxied_identity(state, proxied).await {
                    // Acting for someone who governs access (an administrator, or who
                    // changes roles, principals or acts for others) would let one make
                    // oneself that.
                    Ok(subject)
                        if authority.governs_access(&subject)
                            && !authority.is_administrator(identity) =>
                    {
                        return ApiError::new(
                            Kind::Forbidden,
                            [
                                "You are not allowed to do this".to_string(),
                                format!(
                                    "Only an administrator may act for '{proxied}', who may \
                                     change roles, principals or act for others"
                                ),
                            ],
                        )
                        .into_response();
                    }
                    Ok(subject) => subject,
                    Err(e) => return e.into_response(),
                }
            }
            _ => identity.clone(),
        };
        if subject.name != identity.name {
            caller.proxy_scope = authority.scope_of(identity, permission);
        }
        match authority.scope_of(&subject, permission) {
            Some(scope) => caller.scope = Some(scope),
            None => {
                let denied = ApiError::forbidden(&subject.name, permission);
                audit::record(
                    state,
                    Audit::Denied,
                    &subject.name,
                    source.map(|ip| ip.to_string()).as_deref(),
                    format!(
                        "{} {} needs {permission}",
                        request.method(),
                        request.uri().path()
                    ),
                );
                return denied.into_response();
            }
        }
        caller.effective_user = Some(subject.name);
    }
    let pretty = params.pretty;
    // A retry with the key of an earlier request is answered what that one was.
    let key = if gate.idempotent {
        match idempotency::key_of(request.headers()) {
            Ok(key) => key,
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    let once = match (key, &caller.identity, &caller.effective_user) {
        (Some(key), Some(identity), Some(effective)) => Some(idempotency::Once {
            // The first name's length keeps two callers' pairs apart, whatever the names hold.
            caller: format!("{}:{}{}", identity.name.len(), identity.name, effective),
            user: identity.name.clone(),
            key,
            in_transaction: gate.receipted,
        }),
        _ => None,
    };
    request.extensions_mut().insert(caller);
    request.extensions_mut().insert(params);
    let response = match once {
        Some(once) => once.run(state, request, next).await,
        None => handle(request, next).await,
    };
    if pretty {
        layers::pretty_print(response).await
    } else {
        response
    }
}
