//! The accounting manager over HTTP: accounts (spec 2.16, 4.14) and quotes (2.18, 4.14),
//! read for an accounting user named by `proxy-user`; and the administration surface of
//! the embedded ledger (`/rest/accounting/...`: balances, allocations, usage records).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::response::Response;
use drover_accounting::ledger::{Balance, QuoteAnswer, StoredAllocation};
use drover_accounting::model::{Account, Allocation, Component, RateOverride, Usage};
use drover_accounting::{Asker, Ledger, Money, QuoteEnd, QuoteOrder};
use drover_auth::Permission;
use drover_domain::dates::Timestamp;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult, Kind};
use crate::input::{Fields, read_object};
use crate::openapi::schema::{envelope, integer, number, object, string, strings};
use crate::params::{CommonParams, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, ItemRead, Routes, Submission};

const READ: Access = Access::Needs(Permission::read("accounts"));
const QUOTE: Access = Access::Needs(Permission::create("quotes"));
const ADMIN_READ: Access = Access::Needs(Permission::read("accounting"));
const ADMIN_CREATE: Access = Access::Needs(Permission::create("accounting"));

const QUOTE_FAILED: &str = "No quote was made";

/// The 404 of every accounting route where accounting is not enabled.
const ACCOUNTING_OFF: &str = "Accounting is not enabled on this server";

pub(crate) fn register(routes: &mut Routes) {
    register_accounts(routes);
    register_quote(routes);
    register_ledger(routes);
}

/// The accounts an accounting user sees.
fn register_accounts(routes: &mut Routes) {
    let account = || object(&[("id", string()), ("active", string()), ("users", strings())]);
    routes
        .get("/rest/accounts", READ, list_accounts)
        .summary(
            "Accounts of the accounting user named by proxy-user (all for an accounting admin)",
        )
        .list()
        .query(
            "custom-fields",
            "Comma-separated custom fields to add to each account",
            string(),
        )
        .response(200, "Accounts", Some(envelope(account())))
        .response(
            400,
            "No proxy-user, or a query that is not a simple object",
            None,
        )
        .response(404, ACCOUNTING_OFF, None);
    routes
        .get("/rest/accounts/{id}", READ, one_account)
        .summary("One account")
        .path_param("id", "The account's id")
        .query(
            "custom-fields",
            "Comma-separated custom fields to add",
            string(),
        )
        .response(200, "The account", Some(account()))
        .response(
            404,
            "No such account (or not the user's), or accounting is not enabled",
            None,
        );
}

fn register_quote(routes: &mut Routes) {
    routes
        .post("/rest/quotes/standard/quote", QUOTE, quote)
        .summary("Prices a job or services (object-type, proxy-user, charge-duration required)")
        .param(crate::routes::ParamDoc {
            name: "object-type",
            location: crate::routes::ParamIn::Query,
            required: true,
            description: "What is priced: a job or services",
            schema: json!({"type": "string", "enum": ["job", "service"]}),
        })
        .param(crate::routes::ParamDoc {
            name: "charge-duration",
            location: crate::routes::ParamIn::Query,
            required: true,
            description: "Seconds charged",
            schema: integer(),
        })
        .query("grace-duration", "Seconds of grace", integer())
        .query("description", "The quote's description", string())
        .query(
            "start-time",
            "When the quote starts (a wire date)",
            string(),
        )
        .query("end-time", "When the quote ends (a wire date)", string())
        .query(
            "rate",
            "Rate overrides (accounting administrators)",
            string(),
        )
        .flag("itemize", "Answer the quote's components")
        .flag("guarantee", "Guarantee the quote (a lien)")
        .flag("cost-only", "Only the cost")
        .body(
            "application/json",
            object(&[("account", string()), ("user", string())]),
        )
        .response(
            200,
            "The quote",
            Some(object(&[("instance", string()), ("amount", number())])),
        )
        .response(
            400,
            "Refused (bad parameters, insufficient funds); the messages say why",
            None,
        )
        .response(404, ACCOUNTING_OFF, None);
}

/// The ledger's administration: balances, allocations, usage records.
fn register_ledger(routes: &mut Routes) {
    routes
        .get(
            "/rest/accounting/accounts/{id}/balance",
            ADMIN_READ,
            balance,
        )
        .summary("An account's money now: allocated, charged, held, available")
        .path_param("id", "The account's id")
        .response(200, "The balance", Some(object(&[("available", number())])))
        .response(404, ACCOUNTING_OFF, None);
    routes
        .get("/rest/accounting/allocations", ADMIN_READ, list_allocations)
        .summary("Allocations: configured (id 0) and added")
        .list()
        .response(
            200,
            "Allocations",
            Some(envelope(object(&[("account", string())]))),
        )
        .response(404, ACCOUNTING_OFF, None);
    routes
        .post("/rest/accounting/allocations", ADMIN_CREATE, allocate)
        .summary("Adds funds to an account: {account, amount, startTime?, endTime?}")
        .body(
            "application/json",
            object(&[("account", string()), ("amount", number())]),
        )
        .response(201, "Added", Some(object(&[("id", integer())])))
        .response(404, ACCOUNTING_OFF, None);
    routes
        .get("/rest/accounting/usage-records", ADMIN_READ, list_usage)
        .summary("Usage records: guaranteed quotes and the charges of jobs")
        .list()
        .response(
            200,
            "Usage records",
            Some(envelope(object(&[("charge", number())]))),
        )
        .response(404, ACCOUNTING_OFF, None);
}

/// The ledger; with accounting disabled (a lasting choice of the configuration, not an
/// outage), 404.
fn ledger(state: &AppState) -> ApiResult<&Arc<Ledger>> {
    state.accounting().filter(|l| l.enabled()).ok_or_else(|| {
        ApiError::new(
            crate::Kind::NotFound,
            [
                "Accounting is not enabled on this server".to_string(),
                "The accounting routes answer only where [accounting] enabled = true".into(),
            ],
        )
    })
}

/// The accounting user: `proxy-user`, required here whatever the proxy settings. A
/// caller whose permission is limited to their own (scope OWN) may name only themselves.
fn accounting_user(caller: &Caller) -> ApiResult<String> {
    let user = caller
        .proxy_user
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "The proxy-user parameter is required",
                "It names the accounting user whose accounts are read",
            )
        })?;
    let me = caller.effective_user.as_deref().unwrap_or_default();
    if !caller.over_all() && user != me {
        return Err(ApiError::new(
            Kind::Forbidden,
            [
                "You are not allowed to do this".to_string(),
                format!("User '{me}' may name only themselves as proxy-user here, not '{user}'"),
            ],
        ));
    }
    Ok(user)
}

/// The record of spec 2.16, with the custom attributes asked for.
fn render_account(account: &Account, custom: &[String]) -> Value {
    let mut out = json!({
        "id": account.id,
        "active": account.active,
        "organization": account.organization,
        "description": account.description,
        "creationTime": null,
        "modificationTime": null,
        "deleted": false,
        "requestId": 0,
        "transactionId": 0,
        "users": account.users.iter().map(|u| json!({
            "id": u.id, "active": u.active, "admin": u.admin,
        })).collect::<Vec<_>>(),
    });
    for name in custom {
        out[name.as_str()] = account.custom.get(name).cloned().unwrap_or(Value::Null);
    }
    out
}

fn custom_fields(params: &CommonParams) -> ApiResult<Vec<String>> {
    Ok(params
        .raw
        .get("custom-fields")?
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default())
}

async fn list_accounts(
    State(state): State<AppState>,
    common: CommonParams,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let ledger = ledger(&state)?;
    let user = accounting_user(&caller)?;
    if let Some(text) = common.raw.get("query")? {
        simple_query(text)?;
    }
    let custom = custom_fields(&common)?;
    let documents: Vec<Value> = ledger
        .accounts_for(&user)
        .into_iter()
        .map(|a| render_account(a, &custom))
        .collect();
    Ok(reply::list_in_memory(&documents, &params))
}

/// Accounts take only a simple query: an object of field = scalar value.
fn simple_query(text: &str) -> ApiResult<()> {
    let refuse = |why: String| {
        ApiError::bad_request(
            "The query of accounts must be a simple object",
            format!("{why} (give {{\"field\": value}} pairs, no operators or nesting)"),
        )
    };
    let value: Value =
        serde_json::from_str(text).map_err(|e| refuse(format!("query is not JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(refuse("query is not an object".into()));
    };
    for (key, value) in fields {
        if key.starts_with('$') || key.contains('.') {
            return Err(refuse(format!("'{key}' is an operator or a nested path")));
        }
        if value.is_object() || value.is_array() {
            return Err(refuse(format!("the value of '{key}' is nested")));
        }
    }
    Ok(())
}

async fn one_account(ItemRead(state, common, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    let ledger = ledger(&state)?;
    let user = accounting_user(&caller)?;
    let custom = custom_fields(&common)?;
    let account = ledger
        .accounts_for(&user)
        .into_iter()
        .find(|a| a.id == id)
        .ok_or_else(|| ApiError::not_found(format!("No account '{id}' for '{user}'")))?;
    Ok(Json(render_account(account, &custom)))
}

/// `start-time` / `end-time`: a date, `Now`, or `-Infinity` / `Infinity` (unbounded).
fn time_param(
    common: &CommonParams,
    name: &str,
    state: &AppState,
    now: i64,
) -> ApiResult<Option<i64>> {
    match common.raw.get(name)? {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("now") => Ok(Some(now)),
        Some(v) if v.eq_ignore_ascii_case("infinity") || v.eq_ignore_ascii_case("-infinity") => {
            Ok(None)
        }
        Some(v) => state
            .settings()
            .dates
            .parse(v)
            .map(|t| Some(t.as_second()))
            .map_err(|e| {
                ApiError::bad_request(
                    QUOTE_FAILED,
                    format!("{name}: '{v}' is not yyyy-MM-dd HH:mm:ss z, Now, -Infinity or Infinity ({e})"),
                )
            }),
    }
}

fn integer_param(common: &CommonParams, name: &str) -> ApiResult<Option<i64>> {
    match common.raw.get(name)? {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad_request(
                    QUOTE_FAILED,
                    format!("{name}: '{v}' is not a whole number of seconds"),
                )
            }),
    }
}

/// `rate`: charge rates overriding the configured ones (accounting administrators only,
/// which quoting checks).
fn rate_overrides(common: &CommonParams) -> ApiResult<Option<Vec<RateOverride>>> {
    let Some(text) = common.raw.get("rate")? else {
        return Ok(None);
    };
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::bad_request(QUOTE_FAILED, format!("rate: not JSON ({e})")))?;
    read_object(&json!({ "rate": value }), QUOTE_FAILED, |f| {
        f.each("rate", |r| {
            let kind = r.string("type").unwrap_or_default();
            let rate = required_money(r, "rate");
            if kind.is_empty() {
                r.problem("type", "required");
            }
            RateOverride {
                kind,
                name: r.string("name"),
                rate,
            }
        })
        .unwrap_or_default()
    })
    .map(Some)
}

/// One quote in its wire shape; its `details` when `itemize`.
fn quote_answer(answer: QuoteAnswer, instance: &str, itemize: bool) -> Value {
    let mut out = Map::new();
    out.insert("instance".into(), json!(instance));
    out.insert("amount".into(), answer.price.amount.to_json());
    if let Some(id) = answer.id {
        out.insert("id".into(), json!(id));
        out.insert("usageRecord".into(), json!(answer.usage_record));
    }
    if itemize {
        out.insert(
            "details".into(),
            Value::Array(answer.price.components.iter().map(detail).collect()),
        );
    }
    Value::Object(out)
}

/// What a creation body (`{user, account, data: [entries]}`, 4.10) would make that costs
/// something: each `vm`, `pm` and `storage` service of its tree, with the resources its
/// template and entries give it, priced as what it makes will be charged
/// (`drover_control::accounting::made_service_usage`), named by its entry or local name.
async fn services_made_by(
    state: &AppState,
    body: &Value,
    proxy_user: &str,
) -> ApiResult<Vec<(Usage, Option<String>)>> {
    let dates = state.settings().dates.clone();
    let creation = read_object(body, QUOTE_FAILED, |f| {
        crate::services::read_creation(f, &dates)
    })?;
    let expanded = drover_control::service_creation::expand(
        state.service_templates(),
        creation.entries,
        QUOTE_FAILED,
    )
    .await?;
    let user = creation.user.unwrap_or_else(|| proxy_user.to_string());
    let priced: Vec<(Usage, Option<String>)> = expanded
        .into_iter()
        .filter_map(|p| {
            drover_control::accounting::made_service_usage(
                p.kind,
                &user,
                creation.account.clone(),
                &p.attributes,
            )
            .map(|usage| (usage, Some(p.base)))
        })
        .collect();
    if priced.is_empty() {
        return Err(ApiError::bad_request(
            QUOTE_FAILED,
            "the service makes nothing to price (only containers)",
        ));
    }
    Ok(priced)
}

/// The services a quote's body names: one, or a list of at least one.
fn services_of(body: Value) -> ApiResult<Vec<Value>> {
    let services: Vec<Value> = match body {
        Value::Array(items) => items,
        Value::Object(_) => vec![body],
        _ => {
            return Err(ApiError::bad_request(
                QUOTE_FAILED,
                "the body must be a service or a list of services",
            ));
        }
    };
    if services.is_empty() {
        return Err(ApiError::bad_request(QUOTE_FAILED, "no service to price"));
    }
    Ok(services)
}

/// A quote's parameters, read: what is priced, and the terms (the things priced come
/// from the body).
struct QuoteParams {
    services: bool,
    itemize: bool,
    order: QuoteOrder,
}

fn read_quote_params(
    state: &AppState,
    common: &CommonParams,
    caller: &Caller,
    now: i64,
) -> ApiResult<(QuoteParams, Asker)> {
    let missing = |name: &str| ApiError::bad_request(QUOTE_FAILED, format!("{name}: required"));
    let object_type = common
        .raw
        .get("object-type")?
        .ok_or_else(|| missing("object-type"))?;
    let services = match object_type.to_ascii_lowercase().as_str() {
        "job" => false,
        "service" => true,
        other => {
            return Err(ApiError::bad_request(
                QUOTE_FAILED,
                format!("object-type: '{other}' is neither job nor service"),
            ));
        }
    };
    let asker = Asker {
        user: accounting_user(caller)?,
        caller: caller.effective_user.clone().unwrap_or_default(),
        over_all: caller.over_all(),
    };
    let duration =
        integer_param(common, "charge-duration")?.ok_or_else(|| missing("charge-duration"))?;
    let itemize = common.raw.flag("itemize")?;
    let guarantee = common.raw.flag("guarantee")?;
    let cost_only = common.raw.flag("cost-only")?;
    let grace = integer_param(common, "grace-duration")?.unwrap_or(0);
    let description = common.raw.get("description")?.map(String::from);
    let start = time_param(common, "start-time", state, now)?;
    let end = match time_param(common, "end-time", state, now)? {
        Some(end) => QuoteEnd::At(end),
        None if common.raw.get("end-time")?.is_some() => QuoteEnd::Unbounded,
        None => QuoteEnd::WithTheCharge,
    };
    let order = QuoteOrder {
        items: Vec::new(),
        duration,
        grace,
        start,
        end,
        overrides: rate_overrides(common)?,
        guarantee,
        cost_only,
        description,
    };
    let params = QuoteParams {
        services,
        itemize,
        order,
    };
    Ok((params, asker))
}

async fn quote(Submission(state, common, caller, body): Submission) -> ApiResult<Response> {
    let ledger = ledger(&state)?;
    let now = Timestamp::now().as_second();
    let (params, asker) = read_quote_params(&state, &common, &caller, now)?;
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_json(&body)?
    };
    let items = if params.services {
        match body.get("data") {
            Some(_) => services_made_by(&state, &body, &asker.user).await?,
            None => services_of(body)?
                .iter()
                .map(|service| {
                    read_object(service, QUOTE_FAILED, |f| service_usage(f, &asker.user))
                })
                .collect::<ApiResult<Vec<_>>>()?,
        }
    } else {
        vec![read_object(&body, QUOTE_FAILED, |f| {
            job_usage(f, &asker.user)
        })?]
    };
    let names: Vec<Option<String>> = items.iter().map(|(_, name)| name.clone()).collect();
    let order = QuoteOrder {
        items,
        ..params.order
    };
    let ledger = ledger.clone();
    let answers = tokio::task::spawn_blocking(move || ledger.quote_for(&asker, order, now))
        .await
        .map_err(|e| ApiError::unavailable(QUOTE_FAILED, e.to_string()))?
        .map_err(|e| ApiError::accounting(QUOTE_FAILED, e))?;
    let itemize = params.itemize;
    if !params.services {
        let instance = names[0].clone().unwrap_or_else(|| "job".into());
        let answer = answers.into_iter().next().expect("one answer for one job");
        return Ok(Json(quote_answer(answer, &instance, itemize)).into_response());
    }
    let mut total = Money::ZERO;
    let mut priced = Vec::new();
    for (answer, name) in answers.into_iter().zip(names) {
        total += answer.price.amount;
        let mut one = quote_answer(answer, name.as_deref().unwrap_or("service"), itemize);
        one["details"] = one.get("details").cloned().unwrap_or(json!([]));
        priced.push(one);
    }
    Ok(Json(json!({"services": priced, "amount": total.to_json()})).into_response())
}

/// A decimal amount at `key` (a number or a numeric string, at most six places); a
/// problem is recorded when it is missing or not one.
fn required_money(f: &mut Fields<'_>, key: &str) -> Money {
    match f.raw(key).map(Money::from_json) {
        Some(Ok(amount)) => amount,
        Some(Err(e)) => {
            f.problem(key, e);
            Money::ZERO
        }
        None => {
            f.problem(key, "required");
            Money::ZERO
        }
    }
}

fn detail(c: &Component) -> Value {
    json!({
        "name": c.name,
        "value": c.value,
        "duration": c.duration,
        "rate": c.rate.to_json(),
        "scalingFactor": c.scaling_factor.to_json(),
        "amount": c.amount.to_json(),
        "details": [],
    })
}

/// A job body: `tasks` = requiredNodeCountMinimum (one task per node, default 1), each
/// of requiredProcessorsPerTask processors and requiredMemoryPerTask MB.
fn job_usage(f: &mut Fields<'_>, proxy_user: &str) -> (Usage, Option<String>) {
    let object = f.string("id");
    let user = f.string("user").unwrap_or_else(|| proxy_user.to_string());
    let _ = (
        f.string("group"),
        f.string("rmName"),
        f.strings("templateList"),
        f.string_map("variables"),
    );
    let account = f.string("account");
    let qos = f.string("qosRequested");
    let mut usage = Usage {
        user,
        account,
        qos,
        nodes: 1,
        processors: 1,
        ..Usage::default()
    };
    f.object("requirements", |r| {
        let nodes = r
            .integer_in(
                "requiredNodeCountMinimum",
                1,
                drover_domain::limits::MAX_REQUEST_COUNT,
            )
            .unwrap_or(1) as u64;
        let per_task = r
            .integer_in(
                "requiredProcessorsPerTask",
                1,
                drover_domain::limits::MAX_REQUEST_COUNT,
            )
            .unwrap_or(1) as u64;
        let memory = r
            .integer_in(
                "requiredMemoryPerTask",
                0,
                drover_domain::limits::MAX_QUOTED_MEMORY_PER_TASK,
            )
            .unwrap_or(0) as u64;
        usage.nodes = nodes;
        // Within the bounds above these cannot overflow u64 but for memory; a total past
        // it is priced as the most there can be (the price then says so: too much).
        usage.processors = nodes * per_task;
        usage.memory = nodes.saturating_mul(memory);
        usage.class = r.string("requiredClass");
        if let Some(gres) = r.number_map("genericResources") {
            usage.generic_resources = gres
                .into_iter()
                .map(|(name, amount)| (name, (amount * nodes as f64).ceil().max(0.0) as u64))
                .collect();
        }
    });
    (usage, object)
}

/// A service body: `attributes.sched.job.resources` ({processors|PROCS, memory|MEM, other
/// generic resources}), priced at the rate of its `template` (or of "service").
fn service_usage(f: &mut Fields<'_>, proxy_user: &str) -> (Usage, Option<String>) {
    let name = f.string("name");
    let mut usage = Usage {
        user: f.string("user").unwrap_or_else(|| proxy_user.to_string()),
        account: f.string("account"),
        nodes: 1,
        ..Usage::default()
    };
    let mut template = None;
    f.object("attributes", |a| {
        a.object("sched", |s| {
            s.object("job", |j| {
                template = j.string("template");
                let _ = (j.string("image"), j.string_map("variables"));
                if let Some(resources) = j.number_map("resources") {
                    for (key, amount) in resources {
                        let amount = amount.ceil().max(0.0) as u64;
                        match key.to_ascii_lowercase().as_str() {
                            "processors" | "procs" => usage.processors = amount,
                            "memory" | "mem" => usage.memory = amount,
                            "nodes" | "node" => usage.nodes = amount.max(1),
                            _ => {
                                usage.generic_resources.insert(key, amount);
                            }
                        }
                    }
                }
            });
        });
    });
    usage.service = Some(template.unwrap_or_else(|| "service".into()));
    (usage, name)
}

async fn balance(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let ledger = ledger(&state)?;
    if ledger.account(&id).is_none() {
        return Err(ApiError::not_found(format!("No account '{id}'")));
    }
    let Balance {
        allocated,
        charged,
        held,
        available,
    } = ledger.balance(&id, Timestamp::now().as_second());
    Ok(Json(json!({
        "account": id,
        "allocated": allocated.to_json(),
        "charged": charged.to_json(),
        "held": held.to_json(),
        "available": available.to_json(),
    })))
}

fn render_allocation(a: &StoredAllocation, state: &AppState) -> Value {
    let date = |s: Option<i64>| {
        s.and_then(|s| Timestamp::from_second(s).ok())
            .map(|t| state.settings().dates.format(t, 2))
    };
    json!({
        "id": a.id,
        "account": a.allocation.account,
        "amount": a.allocation.amount.to_json(),
        "startTime": date(a.allocation.start),
        "endTime": date(a.allocation.end),
    })
}

async fn list_allocations(
    State(state): State<AppState>,
    params: ListParams,
) -> ApiResult<Json<Value>> {
    let ledger = ledger(&state)?;
    let documents: Vec<Value> = ledger
        .allocations()
        .iter()
        .map(|a| render_allocation(a, &state))
        .collect();
    Ok(reply::list_in_memory(&documents, &params))
}

async fn allocate(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let ledger = ledger(&state)?.clone();
    let body: Value = parse_json(&body)?;
    let summary = "No funds were added";
    let dates = state.settings().dates.clone();
    let allocation = read_object(&body, summary, |f| {
        let account = f.string("account");
        if account.is_none() {
            f.problem("account", "required");
        }
        let amount = required_money(f, "amount");
        Allocation {
            account: account.unwrap_or_default(),
            amount,
            start: f.date("startTime", &dates),
            end: f.date("endTime", &dates),
        }
    })?;
    let now = Timestamp::now().as_second();
    let id = tokio::task::spawn_blocking(move || ledger.allocate(allocation, now))
        .await
        .map_err(|e| ApiError::unavailable(summary, e.to_string()))?
        .map_err(|e| ApiError::accounting(summary, e))?;
    Ok(reply::created(
        state.settings(),
        "/rest/accounting/allocations",
        json!({ "id": id }),
    ))
}

async fn list_usage(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    let ledger = ledger(&state)?.clone();
    let records = tokio::task::spawn_blocking(move || ledger.usage_records())
        .await
        .map_err(|e| ApiError::unavailable("The usage records cannot be read", e.to_string()))?
        .map_err(|e| ApiError::accounting("The usage records cannot be read", e))?;
    let date = |s: i64| {
        Timestamp::from_second(s)
            .ok()
            .map(|t| state.settings().dates.format(t, 2))
    };
    let documents: Vec<Value> = records
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "kind": r.kind,
                "object": r.object,
                "account": r.account,
                "user": r.user,
                "quote": r.quote,
                "duration": r.duration,
                "charge": r.charge.to_json(),
                "processors": r.usage.processors,
                "createdTime": date(r.created),
            })
        })
        .collect();
    Ok(reply::list_in_memory(&documents, &params))
}
