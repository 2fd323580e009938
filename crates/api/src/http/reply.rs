//! The shapes of answers shared by every resource (spec part 1, rules 2 and 6), and the
//! JSON request body.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_domain::dates::WireDates;
use drover_query::Page;
use serde_json::{Value, json};

use crate::error::{ApiError, Kind};
use crate::params::ListParams;
use crate::{AppState, Settings};

/// `{"messages":[...]}`: the answer of a changing operation.
pub fn messages(messages: impl IntoIterator<Item = impl Into<String>>) -> Json<Value> {
    let messages: Vec<String> = messages.into_iter().map(Into::into).collect();
    Json(json!({ "messages": messages }))
}

/// `{}`: the answer of a successful deletion.
pub fn deleted() -> Json<Value> {
    Json(json!({}))
}

/// `201 Created` with `Location: {base_url}{path}` and `body`.
pub fn created(settings: &Settings, path: &str, body: Value) -> Response {
    let location = format!("{}{path}", settings.base_url);
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    match HeaderValue::from_str(&location) {
        Ok(value) => {
            response.headers_mut().insert(header::LOCATION, value);
            response
        }
        Err(_) => ApiError::internal(format!("unusable Location {location:?}")).into_response(),
    }
}

/// The list envelope over a page of documents already in their wire shape, projected
/// with `fields`/`exclude-fields`.
pub fn envelope(page: Page<Value>, params: &ListParams) -> Json<Value> {
    let results: Vec<Value> = page
        .items
        .into_iter()
        .map(|doc| params.projection.apply(doc))
        .collect();
    Json(json!({
        "totalCount": page.total,
        "resultCount": results.len(),
        "results": results,
    }))
}

/// The list envelope over a page, given as the number of matches and the page's items
/// in their wire shape.
pub fn listed(total: usize, items: Vec<Value>, params: &ListParams) -> Json<Value> {
    envelope(Page { total, items }, params)
}

/// A list request answered over documents held in memory (in their wire shape).
pub fn list_in_memory(documents: &[Value], params: &ListParams) -> Json<Value> {
    let page = params.query.run(documents);
    listed(
        page.total,
        page.items.into_iter().cloned().collect(),
        params,
    )
}

/// A list request answered over `items` held in memory: the query runs over each item
/// rendered with UTC dates (what stored documents hold), the page is rendered with
/// `dates`.
pub fn list_rendered<T>(
    items: &[T],
    params: &ListParams,
    dates: &WireDates,
    render: impl Fn(&T, &WireDates, u32) -> Value,
) -> Json<Value> {
    let version = params.api_version.number();
    let utc = WireDates::utc();
    let documents: Vec<Value> = items.iter().map(|i| render(i, &utc, version)).collect();
    let page = params.query.run_positions(&documents);
    let items = page
        .items
        .into_iter()
        .map(|i| render(&items[i], dates, version))
        .collect();
    listed(page.total, items, params)
}

/// The document whose `id` or `name` is `key` (spec part 1, rule 8); ids win.
pub fn by_id_or_name<'a>(documents: &'a [Value], key: &str) -> Option<&'a Value> {
    let has = |doc: &Value, field: &str| doc.get(field).and_then(Value::as_str) == Some(key);
    documents
        .iter()
        .find(|doc| has(doc, "id"))
        .or_else(|| documents.iter().find(|doc| has(doc, "name")))
}

/// A JSON request body. Refuses bodies in a content type that is not
/// JSON with 415; reads as JSON those sent without one, as `text/plain`, or as the
/// form type that `curl -d` sends by default.
#[derive(Debug)]
pub struct JsonBody(pub Value);

fn accepts_as_json(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else {
        return true;
    };
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence.ends_with("+json")
        || essence == "text/plain"
        || essence == "text/json"
        || essence == "application/x-www-form-urlencoded"
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("?").to_string());
        if !accepts_as_json(content_type.as_deref()) {
            return Err(ApiError::new(
                Kind::UnsupportedMediaType,
                [
                    format!(
                        "Unsupported content type {}",
                        content_type.unwrap_or_default()
                    ),
                    "Send the body as application/json".into(),
                ],
            ));
        }
        let limit = state.settings().max_body_bytes;
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(limit)
            } else {
                ApiError::bad_request("Cannot read the request body", e.body_text())
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a JSON body; the message says where the JSON is broken. (Handlers check the
/// fields themselves, naming the one that does not fit.)
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "Missing request body",
            "This operation needs a JSON body",
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request("Malformed JSON in the request body", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        for ok in [
            None,
            Some("application/json"),
            Some("application/json; charset=utf-8"),
            Some("application/vnd.api+json"),
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            assert!(accepts_as_json(ok), "{ok:?}");
        }
        for refused in [
            Some("application/xml"),
            Some("multipart/form-data; boundary=x"),
        ] {
            assert!(!accepts_as_json(refused), "{refused:?}");
        }
    }

    #[test]
    fn bodies_that_are_not_json_say_where() {
        let e = parse_json(b"{\"a\": }").unwrap_err();
        assert!(e.messages[1].contains("line 1 column"), "{e:?}");
        assert!(parse_json(b"  ").unwrap_err().messages[0].contains("Missing"));
        assert_eq!(parse_json(b" {\"a\": [1]} ").unwrap(), json!({"a": [1]}));
    }

    #[test]
    fn changes_answer_messages_and_deletions_an_empty_object() {
        assert_eq!(
            messages(["Job modified"]).0,
            json!({"messages": ["Job modified"]})
        );
        assert_eq!(deleted().0, json!({}));
    }

    #[test]
    fn single_resources_by_id_or_name() {
        let docs = vec![
            json!({"id": "a", "name": "b"}),
            json!({"id": "b", "name": "c"}),
        ];
        assert_eq!(by_id_or_name(&docs, "b").unwrap()["id"], "b");
        assert_eq!(by_id_or_name(&docs, "c").unwrap()["id"], "b");
        assert!(by_id_or_name(&docs, "z").is_none());
    }
}
