//! Cross-site request forgery: a page of another site must not change anything here
//! with the login its visitor's browser holds.
//!
//! A browser sends a form (`text/plain` or form-encoded, which the service reads as
//! JSON so that `curl -d` works) to any address without asking, and attaches the Basic
//! login it remembers for that address. So a change (any method but GET, HEAD and
//! OPTIONS) that a browser marks as coming from elsewhere is refused before its login is
//! looked at:
//! - `Sec-Fetch-Site` (every current browser sends it) other than `same-origin` or
//!   `none` (typed by the user): `same-site` too, since another port of the same host
//!   is another service;
//! - without it (older browsers), an `Origin` that is not this service's own: the
//!   `Host` the request was sent to, or the `X-Forwarded-Host` a reverse proxy set (a
//!   page cannot set either on a form, and the service answers no CORS preflight for a
//!   script that would try). `Origin: null` (sandboxed frames, opaque redirects) is
//!   refused too.
//!
//! A browser's body must also be of a type that no form can send (JSON, say), and a
//! browser's DELETE with no body needs no type. Clients that are not browsers send
//! none of these headers and are not affected. And a
//! browser is never asked for a Basic login (see [`is_browser`]): the dashboard has its
//! own, so a browser holds none that a page of another site could borrow.

use axum::http::{HeaderMap, Method, header};

use crate::error::{ApiError, Kind};

/// Whether `method` can change something (the ones a form or script may send anywhere).
fn changes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A request a browser sent: it marks every request with `Sec-Fetch-Mode`, and
/// scripts cannot forge or remove that header.
pub(crate) fn is_browser(headers: &HeaderMap) -> bool {
    headers.contains_key("sec-fetch-mode")
}

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap_or("?"))
}

/// `host[:port]` of an origin (`scheme://host[:port]`), lower-cased, default ports
/// dropped so that `http://a:80` and a `Host: a` agree.
fn origin_authority(origin: &str) -> Option<String> {
    let (scheme, rest) = origin.trim().split_once("://")?;
    let authority = rest.split('/').next()?.to_ascii_lowercase();
    Some(without_default_port(
        &authority,
        &scheme.to_ascii_lowercase(),
    ))
}

fn without_default_port(authority: &str, scheme: &str) -> String {
    let default = match scheme {
        "https" => ":443",
        _ => ":80",
    };
    authority
        .strip_suffix(default)
        .unwrap_or(authority)
        .to_string()
}

/// The authorities this service is reached at, as the request says.
fn own_authorities(headers: &HeaderMap) -> Vec<String> {
    let forwarded = text(headers, "x-forwarded-host")
        .and_then(|v| v.split(',').next())
        .map(str::trim);
    [text(headers, header::HOST.as_str()), forwarded]
        .into_iter()
        .flatten()
        .map(|h| h.to_ascii_lowercase())
        .flat_map(|h| {
            // A Host names no scheme: either default port may have been left off.
            [
                without_default_port(&h, "http"),
                without_default_port(&h, "https"),
            ]
        })
        .collect()
}

/// `Err` (403) when a browser sent this change from a page of another site; (415) when
/// a browser sent its body in a type that any form may send without asking.
pub(crate) fn check(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if !changes(method) {
        return Ok(());
    }
    from_this_site(headers)?;
    if is_browser(headers) {
        typed_as_no_form_can(headers)?;
    }
    Ok(())
}

/// The body's type is not one a `<form>` sends (the service reads `text/plain` and
/// form-encoded bodies as JSON for `curl -d`; the dashboard sends `application/json`,
/// which a page of another site cannot send here without a CORS grant).
fn typed_as_no_form_can(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(content_type) = text(headers, header::CONTENT_TYPE.as_str()) else {
        return Ok(());
    };
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let form_type = [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ]
    .iter()
    .any(|t| essence.eq_ignore_ascii_case(t));
    if form_type {
        return Err(ApiError::new(
            Kind::UnsupportedMediaType,
            [
                format!("A browser's body sent as {essence} is not read"),
                "Send the body as application/json".to_string(),
            ],
        ));
    }
    Ok(())
}

fn from_this_site(headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(site) = text(headers, "sec-fetch-site") {
        return match site.to_ascii_lowercase().as_str() {
            "same-origin" | "none" => Ok(()),
            _ => Err(refused(&format!("the browser marks it {site}"))),
        };
    }
    let Some(origin) = text(headers, header::ORIGIN.as_str()) else {
        return Ok(());
    };
    let own = own_authorities(headers);
    match origin_authority(origin) {
        Some(authority) if own.contains(&authority) => Ok(()),
        _ => Err(refused(&format!("it comes from the page of {origin}"))),
    }
}

fn refused(why: &str) -> ApiError {
    ApiError::new(
        Kind::Forbidden,
        [
            "Cross-site request refused".to_string(),
            format!("A change sent by a browser must come from this service's own pages; {why}"),
            "Use the dashboard, or a client that is not a browser".to_string(),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn changes_marked_cross_site_or_same_site_are_refused() {
        for site in ["cross-site", "same-site", "bogus"] {
            let h = headers(&[("sec-fetch-site", site), ("host", "svc:8080")]);
            assert!(check(&Method::POST, &h).is_err(), "{site}");
            assert!(check(&Method::GET, &h).is_ok(), "reads are not changes");
        }
        for site in ["same-origin", "none"] {
            let h = headers(&[("sec-fetch-site", site)]);
            assert!(check(&Method::DELETE, &h).is_ok(), "{site}");
        }
    }

    #[test]
    fn without_fetch_metadata_the_origin_must_be_the_host() {
        let own = headers(&[("origin", "http://svc:8080"), ("host", "svc:8080")]);
        assert!(check(&Method::POST, &own).is_ok());
        let default_port = headers(&[("origin", "https://svc:443"), ("host", "SVC")]);
        assert!(check(&Method::PUT, &default_port).is_ok());
        let proxied = headers(&[
            ("origin", "https://drover.example"),
            ("host", "127.0.0.1:8080"),
            ("x-forwarded-host", "drover.example"),
        ]);
        assert!(check(&Method::POST, &proxied).is_ok());
        for origin in ["http://evil.example", "null", "http://svc:8081", "svc:8080"] {
            let h = headers(&[("origin", origin), ("host", "svc:8080")]);
            assert!(check(&Method::POST, &h).is_err(), "{origin}");
        }
        let curl = headers(&[("host", "svc:8080"), ("content-type", "text/plain")]);
        assert!(check(&Method::POST, &curl).is_ok(), "no browser, no check");
    }

    #[test]
    fn a_browser_must_send_its_body_in_a_type_no_form_can() {
        for form in [
            "text/plain; charset=utf-8",
            "application/x-www-form-urlencoded",
        ] {
            let h = headers(&[
                ("sec-fetch-site", "same-origin"),
                ("sec-fetch-mode", "cors"),
                ("content-type", form),
            ]);
            let refused = check(&Method::POST, &h).unwrap_err();
            assert_eq!(refused.kind, Kind::UnsupportedMediaType, "{form}");
        }
        let json = headers(&[
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-mode", "cors"),
            ("content-type", "application/json"),
        ]);
        assert!(check(&Method::POST, &json).is_ok());
    }
}
