//! Query parameters shared by every route: `api-version`, `pretty`, `proxy-user`, the
//! list parameters (`query`, `sort`, `max`, `offset`, `fields`, `exclude-fields`) and
//! `change-mode`.
//!
//! Parameter names are matched exactly; unknown parameters are ignored (clients add
//! cache-busters), but a known one given twice is refused rather than guessed at.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery, Paging, Projection, Sort};

use crate::AppState;
use crate::error::ApiError;

/// The representation version a request asks for (spec part 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiVersion {
    V1 = 1,
    V2 = 2,
    V3 = 3,
}

impl ApiVersion {
    pub const LATEST: ApiVersion = ApiVersion::V3;

    /// `None` (omitted) is version 1; `latest` is the newest.
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None => Ok(ApiVersion::V1),
            Some("1") => Ok(ApiVersion::V1),
            Some("2") => Ok(ApiVersion::V2),
            Some("3") => Ok(ApiVersion::V3),
            Some(v) if v.eq_ignore_ascii_case("latest") => Ok(Self::LATEST),
            Some(other) => Err(ApiError::bad_request(
                format!("Unsupported api-version '{other}'"),
                "Use 1, 2, 3 or latest (omitted means 1)",
            )),
        }
    }

    pub fn number(self) -> u32 {
        self as u32
    }
}

/// How a modify operation applies list-valued fields (spec part 1, rule 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeMode {
    Add,
    Remove,
    Set,
}

impl ChangeMode {
    /// `default` is used when the parameter is absent; without one, it is required.
    pub fn parse(value: Option<&str>, default: Option<ChangeMode>) -> Result<Self, ApiError> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            Some("add") => Ok(ChangeMode::Add),
            Some("remove") => Ok(ChangeMode::Remove),
            Some("set") => Ok(ChangeMode::Set),
            None => default.ok_or_else(|| {
                ApiError::bad_request(
                    "The change-mode parameter is required",
                    "Use change-mode=add, change-mode=remove or change-mode=set",
                )
            }),
            Some(_) => Err(ApiError::bad_request(
                format!("Invalid change-mode '{}'", value.unwrap_or_default()),
                "Use add, remove or set",
            )),
        }
    }
}

/// The decoded query string of a request, each known parameter at most once.
#[derive(Debug, Clone, Default)]
pub struct RawParams {
    pairs: Vec<(String, String)>,
}

impl RawParams {
    pub fn parse(query: Option<&str>) -> Self {
        let pairs = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Self { pairs }
    }

    /// The value of `name`; an error when it is given more than once.
    pub fn get(&self, name: &str) -> Result<Option<&str>, ApiError> {
        let mut values = self.pairs.iter().filter(|(k, _)| k == name);
        let first = values.next().map(|(_, v)| v.as_str());
        if values.next().is_some() {
            return Err(ApiError::bad_parameter(format!(
                "the parameter {name} is given more than once"
            )));
        }
        Ok(first)
    }

    /// Every parameter as given, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// `true`/`false` (any case) or `1`/`0` (the quote's `cost-only` is documented as an
    /// integer); absent is `false`.
    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.get(name)? {
            None => Ok(false),
            Some(v) if v.eq_ignore_ascii_case("true") || v == "1" || v.is_empty() => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") || v == "0" => Ok(false),
            Some(v) => Err(ApiError::bad_parameter(format!(
                "{name} must be true or false, not '{v}'"
            ))),
        }
    }
}

/// The parameters every route accepts, parsed once per request by the route gate and
/// read by handlers through this extractor.
#[derive(Debug, Clone)]
pub struct CommonParams {
    pub raw: RawParams,
    pub api_version: ApiVersion,
    pub pretty: bool,
}

impl CommonParams {
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let raw = RawParams::parse(query);
        Ok(Self {
            api_version: ApiVersion::parse(raw.get("api-version")?)?,
            pretty: raw.flag("pretty")?,
            raw,
        })
    }
}

impl FromRequestParts<AppState> for CommonParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        match parts.extensions.get::<CommonParams>() {
            Some(params) => Ok(params.clone()),
            None => CommonParams::parse(parts.uri.query()),
        }
    }
}

/// The list parameters of spec part 1, rule 3, parsed.
#[derive(Debug, Clone)]
pub struct ListParams {
    pub query: ListQuery,
    pub projection: Projection,
    pub api_version: ApiVersion,
}

impl ListParams {
    pub fn parse(params: &CommonParams, dates: &WireDates) -> Result<Self, ApiError> {
        let raw = &params.raw;
        let filter = match raw.get("query")? {
            None => Filter::default(),
            Some(text) if text.trim().is_empty() => Filter::default(),
            Some(text) => Filter::parse_str(text, dates)?,
        };
        let sort = match raw.get("sort")? {
            None => Sort::default(),
            Some(text) if text.trim().is_empty() => Sort::default(),
            Some(text) => Sort::parse_str(text)?,
        };
        Ok(Self {
            query: ListQuery {
                filter,
                sort,
                paging: Paging::parse(raw.get("max")?, raw.get("offset")?)?,
            },
            projection: Projection::parse(raw.get("fields")?, raw.get("exclude-fields")?)?,
            api_version: params.api_version,
        })
    }
}

impl FromRequestParts<AppState> for ListParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let common = CommonParams::from_request_parts(parts, state).await?;
        ListParams::parse(&common, &state.settings().dates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions() {
        assert_eq!(ApiVersion::parse(None).unwrap(), ApiVersion::V1);
        assert_eq!(ApiVersion::parse(Some("2")).unwrap(), ApiVersion::V2);
        assert_eq!(ApiVersion::parse(Some("latest")).unwrap(), ApiVersion::V3);
        for bad in ["0", "4", "", "v2", "2.0", " 2"] {
            let e = ApiVersion::parse(Some(bad)).unwrap_err();
            assert_eq!(e.kind, crate::error::Kind::BadRequest, "{bad}");
        }
    }

    #[test]
    fn change_modes() {
        assert_eq!(
            ChangeMode::parse(Some("add"), None).unwrap(),
            ChangeMode::Add
        );
        assert_eq!(
            ChangeMode::parse(Some("REMOVE"), None).unwrap(),
            ChangeMode::Remove
        );
        assert_eq!(
            ChangeMode::parse(None, Some(ChangeMode::Set)).unwrap(),
            ChangeMode::Set
        );
        let missing = ChangeMode::parse(None, None).unwrap_err();
        assert!(missing.messages[0].contains("required"), "{missing:?}");
        let wrong = ChangeMode::parse(Some("merge"), None).unwrap_err();
        assert!(wrong.messages[0].contains("merge"), "{wrong:?}");
    }

    #[test]
    fn parameters_decode_and_refuse_repeats() {
        let raw = RawParams::parse(Some("query=%7B%22a%22%3A1%7D&pretty=true&x=1&x=2"));
        assert_eq!(raw.get("query").unwrap(), Some("{\"a\":1}"));
        assert!(raw.flag("pretty").unwrap());
        assert!(raw.get("x").is_err());
        assert!(RawParams::parse(Some("pretty=yes")).flag("pretty").is_err());
        assert!(!RawParams::parse(None).flag("pretty").unwrap());
    }

    #[test]
    fn list_parameters_name_what_is_wrong() {
        let dates = WireDates::utc();
        let parse = |q: &str| {
            ListParams::parse(&CommonParams::parse(Some(q)).unwrap(), &dates)
                .map(|_| ())
                .map_err(|e| e.messages.join(" / "))
        };
        parse("query={\"a\":1}&sort={\"a\":-1}&max=2&offset=1&fields=a,b").unwrap();
        let e = parse("query={\"credentials.user\":{\"$foo\":1}}").unwrap_err();
        assert!(
            e.contains("unknown operator $foo at credentials.user"),
            "{e}"
        );
        assert!(parse("sort={\"a\":2}").unwrap_err().contains("sort"));
        assert!(parse("max=-1").unwrap_err().contains("max"));
        assert!(parse("query=[").unwrap_err().contains("query"));
    }
}
