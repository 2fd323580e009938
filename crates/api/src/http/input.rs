//! Reading request bodies field by field, leniently where real clients need it (numbers
//! sent as strings, one object where a list is expected) and strictly about types: a
//! field of the wrong type is a problem named by its path. Problems are collected so
//! that one answer lists them all.
//!
//! A field of the body that no reader asked for is never dropped silently: [`read_object`]
//! names it, in the 400 when there are problems, else as a warning the gate adds to the
//! answer's `messages` (see [`Warnings`]). What a reader asks for *is* the set of
//! known fields, so the list cannot drift from the handlers.

use std::collections::BTreeMap;

use drover_domain::dates::WireDates;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The last second a date given as seconds since the epoch may name (9999-12-31
/// 23:59:59 UTC).
pub const MAX_EPOCH_SECOND: i64 = 253_402_300_799;

/// An object of a request body and the problems found reading it.
pub struct Fields<'a> {
    object: &'a Map<String, Value>,
    path: String,
    problems: &'a mut Vec<String>,
    /// The fields of the whole body nobody asked for: their paths, and what is said of
    /// them.
    unknown: &'a mut Vec<(String, String)>,
    /// The keys of `object` a reader asked for.
    seen: Vec<&'a str>,
    /// Every key was read (a map, or `only` named the others already).
    all_seen: bool,
    /// Why the keys not asked for are ignored, when they are known (`None`: unknown).
    ignored_because: Option<&'static str>,
}

tokio::task_local! {
    /// The warnings of the request being answered (the gate opens the scope).
    static WARNINGS: std::cell::RefCell<Vec<String>>;
}

/// The warnings a request's handling collected, for the gate to add to its answer.
pub struct Warnings;

impl Warnings {
    /// Runs `future` (a request's handling) collecting warnings; answers them with its
    /// output.
    pub async fn collect<F: std::future::Future>(future: F) -> (F::Output, Vec<String>) {
        WARNINGS
            .scope(std::cell::RefCell::new(Vec::new()), async move {
                let output = future.await;
                let warnings = WARNINGS.with(|w| std::mem::take(&mut *w.borrow_mut()));
                (output, warnings)
            })
            .await
    }

    /// Adds `text` to the current request's warnings (outside a request, where there
    /// is nobody to tell, it is written to the service log).
    pub fn add(text: String) {
        if WARNINGS
            .try_with(|w| w.borrow_mut().push(text.clone()))
            .is_err()
        {
            eprintln!("drover: warning outside a request: {text}");
        }
    }
}

/// The message naming a field that is not read.
fn unknown_field(path: &str) -> String {
    format!("{path}: unknown field, ignored")
}

/// Parses `body` as an object and hands its fields to `read`; problems become one 400
/// whose first message is `summary`.
pub fn read_object<T>(
    body: &Value,
    summary: &str,
    read: impl FnOnce(&mut Fields<'_>) -> T,
) -> Result<T, ApiError> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::bad_request(
            summary,
            "the body must be a JSON object",
        ));
    };
    let mut problems = Vec::new();
    let mut unknown = Vec::new();
    let mut fields = Fields::new(object, String::new(), &mut problems, &mut unknown);
    let value = read(&mut fields);
    fields.finish();
    // The stores cannot keep U+0000 (PostgreSQL's jsonb refuses it): refuse it here, by
    // field, rather than fail when the change is written. Fields nobody reads are not
    // kept, so what they hold is no problem (their names are, in the warning). (Paths are spelled out only when there is
    // one to name: a string per member costs every request.)
    if has_nul(body) {
        let mut nul = Vec::new();
        let ignored: Vec<&str> = unknown.iter().map(|(path, _)| path.as_str()).collect();
        find_nul(body, "", &ignored, &mut nul);
        problems.splice(0..0, nul);
    }
    let unknown = unknown.into_iter().map(|(_, said)| said);
    if problems.is_empty() {
        for warning in unknown {
            Warnings::add(warning);
        }
        Ok(value)
    } else {
        let mut messages = vec![summary.to_string()];
        messages.extend(problems);
        messages.extend(unknown);
        Err(ApiError::new(crate::Kind::BadRequest, messages))
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Fields<'a> {
    fn new(
        object: &'a Map<String, Value>,
        path: String,
        problems: &'a mut Vec<String>,
        unknown: &'a mut Vec<(String, String)>,
    ) -> Self {
        Self {
            object,
            path,
            problems,
            unknown,
            seen: Vec::new(),
            all_seen: false,
            ignored_because: None,
        }
    }

    /// Records the keys of the object no reader asked for.
    fn finish(self) {
        if self.all_seen || self.seen.len() == self.object.len() {
            return;
        }
        for key in self.object.keys() {
            if !self.seen.contains(&key.as_str()) {
                let name = if self.path.is_empty() {
                    key.clone()
                } else {
                    format!("{}.{key}", self.path)
                };
                let said = match self.ignored_because {
                    None => unknown_field(&name),
                    Some(why) => format!("{name}: ignored, {why}"),
                };
                self.unknown.push((name, said));
            }
        }
    }

    fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Records a problem with the field `key`.
    pub fn problem(&mut self, key: &str, text: impl std::fmt::Display) {
        let name = self.name(key);
        self.problems.push(format!("{name}: {text}"));
    }

    pub fn has(&mut self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn get(&mut self, key: &str) -> Option<&'a Value> {
        // A reader asks for every field it knows (dozens) of a body that names a few: a
        // scan of a small object is cheaper than hashing each name (SipHash, in serde_json).
        let object = self.object;
        let found = if object.len() <= 8 {
            object.iter().find(|(k, _)| *k == key)
        } else {
            object.get_key_value(key)
        };
        let (key, value) = found?;
        if !self.seen.contains(&key.as_str()) {
            self.seen.push(key.as_str());
        }
        Some(value).filter(|v| !v.is_null())
    }

    /// A string. (The leniency runs the other way: numeric strings are read where a
    /// number is expected; a number or boolean sent for a text field is a mistake the
    /// answer names, as the OpenAPI document's `"type": "string"` says.)
    pub fn string(&mut self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.problem(key, format!("expected a string, got {}", describe(other)));
                None
            }
        }
    }

    /// An integer, also from a numeric string (`"2"`).
    pub fn integer(&mut self, key: &str) -> Option<i64> {
        let value = self.get(key)?;
        let parsed = match value {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                    .map(|f| f as i64)
            }),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        if parsed.is_none() {
            self.problem(key, format!("expected an integer, got {}", shown(value)));
        }
        parsed
    }

    /// A number, also from a numeric string.
    pub fn number(&mut self, key: &str) -> Option<f64> {
        let value = self.get(key)?;
        let parsed = match value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
            _ => None,
        };
        if parsed.is_none() {
            self.problem(key, format!("expected a number, got {}", shown(value)));
        }
        parsed
    }

    /// An integer within `min..=max`.
    pub fn integer_in(&mut self, key: &str, min: i64, max: i64) -> Option<i64> {
        let n = self.integer(key)?;
        if n < min || n > max {
            self.problem(key, format!("must be between {min} and {max}, not {n}"));
            return None;
        }
        Some(n)
    }

    pub fn boolean(&mut self, key: &str) -> Option<bool> {
        let value = self.get(key)?;
        let parsed = match value {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            _ => None,
        };
        if parsed.is_none() {
            self.problem(key, format!("expected true or false, got {}", shown(value)));
        }
        parsed
    }

    /// A list of strings (as the OpenAPI document's `strings()` says: not a string
    /// holding a comma-separated list, nor numbers).
    pub fn strings(&mut self, key: &str) -> Option<Vec<String>> {
        match self.get(key)? {
            Value::Array(items) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        other => self.problem(
                            &format!("{key}[{i}]"),
                            format!("expected a string, got {}", describe(other)),
                        ),
                    }
                }
                Some(out)
            }
            other => {
                self.problem(
                    key,
                    format!("expected a list of strings, got {}", describe(other)),
                );
                None
            }
        }
    }

    /// A list of references `[{name}]` (or `[{id}]`, or plain strings).
    pub fn references(&mut self, key: &str, field: &str) -> Option<Vec<String>> {
        let items = match self.get(key)? {
            Value::Array(items) => items.clone(),
            single @ (Value::Object(_) | Value::String(_)) => vec![single.clone()],
            other => {
                self.problem(
                    key,
                    format!(
                        "expected a list of {{{field}}} objects, got {}",
                        describe(other)
                    ),
                );
                return None;
            }
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let name = match item {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => [field, "name", "id"]
                    .iter()
                    .find_map(|f| o.get(*f).and_then(Value::as_str))
                    .map(String::from),
                _ => None,
            };
            match name {
                Some(name) => out.push(name),
                None => self.problem(
                    &format!("{key}[{i}]"),
                    format!("expected {{\"{field}\": <string>}}"),
                ),
            }
        }
        Some(out)
    }

    /// An object of scalar values, as strings (`{"name": "value"}`).
    pub fn string_map(&mut self, key: &str) -> Option<BTreeMap<String, String>> {
        let value = self.get(key)?;
        let Value::Object(object) = value else {
            self.problem(
                key,
                format!("expected an object of name: value, got {}", describe(value)),
            );
            return None;
        };
        let mut out = BTreeMap::new();
        for (name, value) in object {
            match value {
                Value::String(s) => {
                    out.insert(name.clone(), s.clone());
                }
                Value::Number(n) => {
                    out.insert(name.clone(), n.to_string());
                }
                Value::Bool(b) => {
                    out.insert(name.clone(), b.to_string());
                }
                Value::Null => {
                    out.insert(name.clone(), String::new());
                }
                other => self.problem(
                    &format!("{key}.{name}"),
                    format!("expected a string, got {}", describe(other)),
                ),
            }
        }
        Some(out)
    }

    /// Variables to set: `{"name": "value"}`, each wrapped for a map where `None` removes.
    pub fn variable_changes(
        &mut self,
        key: &str,
    ) -> std::collections::BTreeMap<String, Option<String>> {
        self.string_map(key)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect()
    }

    /// An object of numbers (`{"gpu": 2}`).
    pub fn number_map(&mut self, key: &str) -> Option<BTreeMap<String, f64>> {
        let value = self.get(key)?;
        let Value::Object(object) = value else {
            self.problem(
                key,
                format!(
                    "expected an object of name: number, got {}",
                    describe(value)
                ),
            );
            return None;
        };
        let mut out = BTreeMap::new();
        let mut inner = Fields::new(object, self.name(key), self.problems, self.unknown);
        for name in object.keys() {
            if let Some(n) = inner.number(name) {
                out.insert(name.clone(), n);
            }
        }
        Some(out)
    }

    /// A date in the wire format (or `null`); the zone may be any the deployment knows.
    pub fn date(&mut self, key: &str, dates: &WireDates) -> Option<i64> {
        let value = self.get(key)?;
        match value {
            Value::String(s) => match dates.parse(s) {
                Ok(t) => Some(t.as_second()),
                Err(e) => {
                    self.problem(
                        key,
                        format!("'{s}' is not a date of the form yyyy-MM-dd HH:mm:ss ZONE ({e})"),
                    );
                    None
                }
            },
            // Seconds since the epoch, up to the last second of 9999 (as the OpenAPI
            // document's `date_input` says).
            Value::Number(n)
                if n.as_i64()
                    .is_some_and(|n| (0..=MAX_EPOCH_SECOND).contains(&n)) =>
            {
                n.as_i64()
            }
            other => {
                self.problem(
                    key,
                    format!("expected a date string, got {}", describe(other)),
                );
                None
            }
        }
    }

    /// The object at `key`, read by `read`; a one-element list is taken as its element.
    pub fn object<T>(&mut self, key: &str, read: impl FnOnce(&mut Fields<'_>) -> T) -> Option<T> {
        let value = self.get(key)?;
        let (object, path) = match value {
            Value::Object(o) => (o, self.name(key)),
            Value::Array(items) if items.len() == 1 && items[0].is_object() => {
                (items[0].as_object()?, format!("{}[0]", self.name(key)))
            }
            other => {
                self.problem(key, format!("expected an object, got {}", describe(other)));
                return None;
            }
        };
        let mut inner = Fields::new(object, path, self.problems, self.unknown);
        let value = read(&mut inner);
        inner.finish();
        Some(value)
    }

    /// Each object of the list at `key` (a single object counts as a list of one).
    pub fn each<T>(
        &mut self,
        key: &str,
        mut read: impl FnMut(&mut Fields<'_>) -> T,
    ) -> Option<Vec<T>> {
        let value = self.get(key)?;
        let items: Vec<&Map<String, Value>> = match value {
            Value::Object(o) => vec![o],
            Value::Array(items) => {
                let mut objects = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_object() {
                        Some(o) => objects.push(o),
                        None => self.problem(
                            &format!("{key}[{i}]"),
                            format!("expected an object, got {}", describe(item)),
                        ),
                    }
                }
                objects
            }
            other => {
                self.problem(
                    key,
                    format!("expected a list of objects, got {}", describe(other)),
                );
                return None;
            }
        };
        let base = self.name(key);
        Some(
            items
                .into_iter()
                .enumerate()
                .map(|(i, object)| {
                    let path = format!("{base}[{i}]");
                    let mut inner = Fields::new(object, path, self.problems, self.unknown);
                    let value = read(&mut inner);
                    inner.finish();
                    value
                })
                .collect(),
        )
    }

    /// Messages to add: plain strings, or `{"message": ...}` objects (or a mix).
    pub fn messages(&mut self, key: &str) -> Vec<String> {
        match self.get(key) {
            None => Vec::new(),
            Some(Value::String(_)) => self.strings(key).unwrap_or_default(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(text) => out.push(text.clone()),
                        Value::Object(o) => match o.get("message").and_then(Value::as_str) {
                            Some(text) => out.push(text.to_string()),
                            None => {
                                self.problem(&format!("{key}[{i}].message"), "required, a string")
                            }
                        },
                        other => self.problem(
                            &format!("{key}[{i}]"),
                            format!(
                                "expected a string or {{\"message\": <string>}}, got {}",
                                describe(other)
                            ),
                        ),
                    }
                }
                out
            }
            Some(other) => {
                self.problem(
                    key,
                    format!("expected a list of messages, got {}", describe(other)),
                );
                Vec::new()
            }
        }
    }

    /// The raw value at `key`.
    pub fn raw(&mut self, key: &str) -> Option<&'a Value> {
        self.get(key)
    }

    /// Every key of the object (the reader takes them all as read).
    pub fn keys(&mut self) -> impl Iterator<Item = &'a String> + use<'a> {
        self.all_seen = true;
        self.object.keys()
    }

    /// `genericEvents` of nodes and VMs: `[{name, message}]`, a name required.
    pub fn generic_events(&mut self) -> Vec<(String, String)> {
        self.each("genericEvents", |e| {
            let name = e.string("name").filter(|n| !n.is_empty());
            if name.is_none() {
                e.problem("name", "required, not empty");
            }
            (
                name.unwrap_or_default(),
                e.string("message").unwrap_or_default(),
            )
        })
        .unwrap_or_default()
    }

    /// Names the fields not read (yet, or later) as ignored `because` (known fields the
    /// operation passes over), rather than as unknown.
    pub fn ignore_others(&mut self, because: &'static str) {
        self.ignored_because = Some(because);
    }

    /// Records the problem `why` for every field but those `allowed` (so that a
    /// misspelt field is named, not silently dropped).
    /// A null field is not given, here as everywhere: one not allowed is left to be
    /// named as unknown (a warning), not refused.
    pub fn only(&mut self, allowed: &[&str], why: &str) {
        let object = self.object;
        for (key, value) in object {
            if allowed.contains(&key.as_str()) {
                continue;
            }
            if value.is_null() {
                continue;
            }
            self.problem(key, why);
            if !self.seen.contains(&key.as_str()) {
                self.seen.push(key.as_str());
            }
        }
        for key in allowed {
            if let Some((key, _)) = object.get_key_value(*key)
                && !self.seen.contains(&key.as_str())
            {
                self.seen.push(key.as_str());
            }
        }
    }
}

fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(object) => object
            .iter()
            .any(|(key, item)| key.contains('\0') || has_nul(item)),
        _ => false,
    }
}

/// Names every string and field name of `value` that holds a NUL character, but for
/// what the fields at the paths `ignored` hold (their names are still refused, as the
/// OpenAPI document's `propertyNames` says).
fn find_nul(value: &Value, path: &str, ignored: &[&str], problems: &mut Vec<String>) {
    let here = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::String(s) if s.contains('\0') => {
            problems.push(format!(
                "{}: must not contain NUL characters",
                if path.is_empty() { "body" } else { path }
            ));
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                find_nul(item, &format!("{path}[{i}]"), ignored, problems);
            }
        }
        Value::Object(object) => {
            for (key, item) in object {
                if key.contains('\0') {
                    problems.push(format!(
                        "{}: field names must not contain NUL characters",
                        if path.is_empty() { "body" } else { path }
                    ));
                }
                let at = here(key);
                if !ignored.contains(&at.as_str()) {
                    find_nul(item, &at, ignored, problems);
                }
            }
        }
        _ => {}
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("'{s}'"),
        other => describe(other).to_string(),
    }
}

/// What an ordinary user creates or changes (a job, a reservation, a container) is kept
/// in memory: its body may have at most `max_submission_bytes` (`[scheduler.limits]`),
/// else 413 with `summary`. Callers whose permission covers everyone are not limited.
pub(crate) fn within_submission_bound(
    state: &crate::AppState,
    caller: &crate::Caller,
    body: &[u8],
    summary: &str,
) -> Result<(), ApiError> {
    let limit = state.settings().max_submission_bytes;
    if body.len() <= limit || caller.over_all() {
        return Ok(());
    }
    Err(ApiError::new(
        crate::Kind::PayloadTooLarge,
        [
            summary.to_string(),
            format!(
                "A body of an ordinary user may have at most {limit} bytes here; this one has {} \
                 ([scheduler.limits] max_submission_bytes)",
                body.len()
            ),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_as_strings_and_problems_by_path() {
        let body =
            json!({"a": "2", "b": 3.0, "c": "x", "r": [{"n": "1"}], "m": {"x": "y", "z": [1]}});
        let result = read_object(&body, "Nope", |f| {
            let a = f.integer("a");
            let b = f.integer("b");
            let c = f.integer("c");
            let n = f.object("r", |r| r.integer("n")).flatten();
            let m = f.string_map("m");
            (a, b, c, n, m)
        });
        let e = result.unwrap_err();
        assert_eq!(e.messages[0], "Nope");
        assert!(
            e.messages[1].starts_with("c: expected an integer, got 'x'"),
            "{:?}",
            e.messages
        );
        assert!(
            e.messages[2].starts_with("m.z: expected a string"),
            "{:?}",
            e.messages
        );
        let ok = read_object(&json!({"a": "2", "r": [{"n": "1"}]}), "Nope", |f| {
            (f.integer("a"), f.object("r", |r| r.integer("n")).flatten())
        })
        .unwrap();
        assert_eq!(ok, (Some(2), Some(1)));
    }

    #[test]
    fn nul_characters_are_refused_by_path_wherever_they_are() {
        let body = json!({"a": ["x", "y\u{0}"], "m": {"k\u{0}": 1}, "n": [{"s": "\u{0}"}]});
        let read = |f: &mut Fields<'_>| f.keys().count();
        let e = read_object(&body, "Nope", read).unwrap_err();
        assert_eq!(
            e.messages[1..],
            [
                "a[1]: must not contain NUL characters",
                "m: field names must not contain NUL characters",
                "n[0].s: must not contain NUL characters",
            ]
        );
        assert!(read_object(&json!({"a": ["x"], "m": {"k": "v"}}), "Nope", read).is_ok());
    }

    #[test]
    fn nul_characters_in_fields_nobody_reads_are_no_problem() {
        // They are not kept: the field is named as unknown, whatever it holds.
        let body =
            json!({"a": "x", "u": [1, "\u{0}"], "v": {"k\u{0}": "\u{0}"}, "r": [{"w": "\u{0}"}]});
        let read = |f: &mut Fields<'_>| {
            f.string("a");
            f.each("r", |_| ());
        };
        let (result, warnings) = futures_util::FutureExt::now_or_never(Warnings::collect(async {
            read_object(&body, "Nope", read)
        }))
        .unwrap();
        assert!(result.is_ok(), "{:?}", result.err().map(|e| e.messages));
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        // A field that is read still refuses them, and so does a field's name.
        let body = json!({"a": "x\u{0}", "u": "\u{0}", "n\u{0}": 1});
        let e = read_object(&body, "Nope", read).unwrap_err();
        assert_eq!(
            e.messages[1..3],
            [
                "a: must not contain NUL characters",
                "body: field names must not contain NUL characters",
            ]
        );
    }

    #[test]
    fn fields_nobody_reads_are_named_by_path() {
        let body = json!({"a": 1, "args": [], "r": {"n": 1, "x": 2}, "l": [{"n": 1}, {"y": 3}]});
        let read = |f: &mut Fields<'_>| {
            f.integer("a");
            f.object("r", |r| r.integer("n"));
            f.each("l", |l| l.integer("n"));
        };
        let (_, warnings) = futures_util::FutureExt::now_or_never(Warnings::collect(async {
            read_object(&body, "Nope", read).unwrap()
        }))
        .unwrap();
        assert_eq!(
            warnings,
            [
                // Inner objects are done first.
                "r.x: unknown field, ignored",
                "l[1].y: unknown field, ignored",
                "args: unknown field, ignored",
            ]
        );
        // Where only some fields are allowed, another is refused, or named when null.
        let (_, warnings) = futures_util::FutureExt::now_or_never(Warnings::collect(async {
            read_object(&json!({"a": 1, "z": null}), "Nope", |f| {
                f.only(&["a"], "not a field");
                f.integer("a")
            })
            .unwrap()
        }))
        .unwrap();
        assert_eq!(warnings, ["z: unknown field, ignored"]);
        // Known fields an operation passes over say why.
        let (_, warnings) = futures_util::FutureExt::now_or_never(Warnings::collect(async {
            read_object(&json!({"node": "n", "os": "x"}), "Nope", |f| {
                f.ignore_others("a migration reads only node");
                f.string("node")
            })
            .unwrap()
        }))
        .unwrap();
        assert_eq!(warnings, ["os: ignored, a migration reads only node"]);
        let e = read_object(&json!({"a": 1, "z": 2}), "Nope", |f| {
            f.only(&["a"], "not a field")
        });
        assert_eq!(e.unwrap_err().messages, ["Nope", "z: not a field"]);
        // Beside the problems of a refusal.
        let e = read_object(&json!({"a": "x", "b": 1}), "Nope", |f| f.integer("a")).unwrap_err();
        assert_eq!(
            e.messages,
            [
                "Nope",
                "a: expected an integer, got 'x'",
                "b: unknown field, ignored"
            ]
        );
    }
}
