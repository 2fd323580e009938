//! Dates in the wire format of the interface (spec part 1, rule 5).
//!
//! A wire date is `yyyy-MM-dd HH:mm:ss <zone>`: `UTC` for representation version 2 and
//! later, the abbreviation of the deployment's configured zone (`EST`, `CEST`, ...) for
//! version 1. Parsing accepts `UTC`, `GMT` and every abbreviation the configured zone
//! has used; an abbreviation used with several offsets in history means its most recent
//! one. The build date of `diag/about` has its own format, `yyyy-MM-dd_HH-mm-ss` (UTC).
//!
//! Stored documents always carry dates in UTC, so that their strings sort in time
//! order and need no configuration to be understood ([`parse_utc`]).

pub use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};

/// Why a string is not an acceptable date.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateError {
    #[error("'{0}' is not a date of the form yyyy-MM-dd HH:mm:ss ZZZ")]
    Malformed(String),
    #[error(
        "'{input}' has the unknown time zone abbreviation '{abbreviation}' (accepted: {accepted})"
    )]
    UnknownAbbreviation {
        input: String,
        abbreviation: String,
        accepted: String,
    },
    #[error("'{0}' is not a build date of the form yyyy-MM-dd_HH-mm-ss")]
    MalformedBuildDate(String),
    #[error("unknown time zone '{0}'")]
    UnknownTimeZone(String),
}

/// The IANA name of this machine's time zone (`TZ`, else `/etc/localtime`), or `UTC`
/// when it cannot be told.
pub fn system_zone_name() -> String {
    TimeZone::try_system()
        .ok()
        .and_then(|zone| zone.iana_name().map(str::to_string))
        .filter(|name| TimeZone::get(name).is_ok())
        .unwrap_or_else(|| "UTC".into())
}

/// The wire-date rules of one deployment: its local zone (used by version 1) and the
/// abbreviations that parsing accepts.
#[derive(Debug, Clone)]
pub struct WireDates {
    zone: TimeZone,
    zone_name: String,
    /// (abbreviation, offset), most recent use first; always starts with UTC and GMT.
    abbreviations: Vec<(String, Offset)>,
}

impl Default for WireDates {
    fn default() -> Self {
        Self::utc()
    }
}

impl WireDates {
    /// Rules for a deployment whose local zone is UTC.
    pub fn utc() -> Self {
        Self {
            zone: TimeZone::UTC,
            zone_name: "UTC".into(),
            abbreviations: universal_abbreviations(),
        }
    }

    /// Rules for a deployment in the IANA zone `name` (e.g. `America/New_York`).
    pub fn for_zone(name: &str) -> Result<Self, DateError> {
        let zone = TimeZone::get(name).map_err(|_| DateError::UnknownTimeZone(name.into()))?;
        let mut abbreviations = universal_abbreviations();
        let now = Timestamp::now();
        let mut remember = |abbreviation: &str, offset: Offset| {
            if !abbreviations.iter().any(|(a, _)| a == abbreviation) {
                abbreviations.push((abbreviation.to_string(), offset));
            }
        };
        let current = zone.to_offset_info(now);
        remember(current.abbreviation(), current.offset());
        // The next transitions name the other abbreviation of a zone with DST; older
        // ones name abbreviations that old documents or clients may still carry.
        for transition in zone.following(now).take(2) {
            remember(transition.abbreviation(), transition.offset());
        }
        for transition in zone.preceding(now).take(500) {
            remember(transition.abbreviation(), transition.offset());
        }
        Ok(Self {
            zone,
            zone_name: name.to_string(),
            abbreviations,
        })
    }

    /// The IANA name of the local zone.
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// Whether representation `api_version` writes dates in UTC (`yyyy-MM-dd HH:mm:ss
    /// UTC`): always from 2 on, and in version 1 when the local zone is UTC.
    pub fn writes_utc(&self, api_version: u32) -> bool {
        api_version >= 2 || self.zone == TimeZone::UTC
    }

    /// Formats `ts` for representation `api_version`: local zone for 1, UTC from 2 on.
    pub fn format(&self, ts: Timestamp, api_version: u32) -> String {
        if api_version >= 2 {
            format_utc(ts)
        } else {
            self.format_local(ts)
        }
    }

    /// Formats `ts` in the local zone with its abbreviation, e.g. `2026-01-05 09:00:00 EST`.
    pub fn format_local(&self, ts: Timestamp) -> String {
        ts.to_zoned(self.zone.clone())
            .strftime("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    }

    /// Parses a wire date in UTC, GMT or any abbreviation of the local zone.
    pub fn parse(&self, input: &str) -> Result<Timestamp, DateError> {
        let (civil, abbreviation) =
            split_wire(input).ok_or_else(|| DateError::Malformed(input.to_string()))?;
        let offset = self
            .abbreviations
            .iter()
            .find(|(a, _)| a == abbreviation)
            .map(|(_, offset)| *offset)
            .ok_or_else(|| DateError::UnknownAbbreviation {
                input: input.to_string(),
                abbreviation: abbreviation.to_string(),
                accepted: self
                    .abbreviations
                    .iter()
                    .map(|(a, _)| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        offset
            .to_timestamp(civil)
            .map_err(|_| DateError::Malformed(input.to_string()))
    }
}

fn universal_abbreviations() -> Vec<(String, Offset)> {
    vec![("UTC".into(), Offset::UTC), ("GMT".into(), Offset::UTC)]
}

/// Formats `ts` as a version-2 wire date, e.g. `2026-01-05 14:00:00 UTC`.
///
/// By arithmetic on the seconds rather than through `strftime` (which parses its format
/// every call): every event and every listed job's dates go through here.
pub fn format_utc(ts: Timestamp) -> String {
    let seconds = ts.as_second();
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    if !(0..=9999).contains(&year) {
        return ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string();
    }
    let of_day = seconds.rem_euclid(86_400);
    let mut out = [0u8; 23];
    let mut put = |at: usize, value: i64, width: usize| {
        let mut value = value;
        for i in (at..at + width).rev() {
            out[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, year, 4);
    put(5, month, 2);
    put(8, day, 2);
    put(11, of_day / 3600, 2);
    put(14, of_day / 60 % 60, 2);
    put(17, of_day % 60, 2);
    for (at, byte) in [(4, b'-'), (7, b'-'), (10, b' '), (13, b':'), (16, b':')] {
        out[at] = byte;
    }
    out[19..].copy_from_slice(b" UTC");
    String::from_utf8(out.to_vec()).expect("digits and separators are ASCII")
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Parses a wire date whose zone is `UTC` or `GMT`; `None` for anything else.
///
/// This is how stored documents are read: it needs no configuration, so the meaning of
/// a stored date never depends on the deployment's zone.
pub fn parse_utc(input: &str) -> Option<Timestamp> {
    let (civil, zone) = split_wire(input)?;
    if zone != "UTC" && zone != "GMT" {
        return None;
    }
    Offset::UTC.to_timestamp(civil).ok()
}

/// Whether `input` has the shape of a wire date in UTC (cheap; no calendar check).
pub fn looks_like_utc_date(input: &str) -> bool {
    let b = input.as_bytes();
    b.len() == 23 && b[4] == b'-' && b[10] == b' ' && b[19] == b' ' && b[0].is_ascii_digit()
}

/// Formats `ts` as a build date, e.g. `2026-11-21_23-12-41` (UTC).
pub fn format_build_date(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%d_%H-%M-%S").to_string()
}

/// Parses a build date of the form `yyyy-MM-dd_HH-mm-ss` (UTC).
pub fn parse_build_date(input: &str) -> Result<Timestamp, DateError> {
    let bad = || DateError::MalformedBuildDate(input.to_string());
    let b = input.as_bytes();
    if b.len() != 19 || b[10] != b'_' || b[13] != b'-' || b[16] != b'-' {
        return Err(bad());
    }
    let civil = civil_date_time(&b[..10], &b[11..13], &b[14..16], &b[17..19]).ok_or_else(bad)?;
    Offset::UTC.to_timestamp(civil).map_err(|_| bad())
}

/// Splits `yyyy-MM-dd HH:mm:ss ZONE` into its civil time and zone abbreviation.
fn split_wire(input: &str) -> Option<(DateTime, &str)> {
    let b = input.as_bytes();
    if b.len() < 21 || b[10] != b' ' || b[13] != b':' || b[16] != b':' || b[19] != b' ' {
        return None;
    }
    let zone = &input[20..];
    if !zone
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'-')
    {
        return None;
    }
    let civil = civil_date_time(&b[..10], &b[11..13], &b[14..16], &b[17..19])?;
    Some((civil, zone))
}

/// Builds a civil date-time from `yyyy-MM-dd` and two-digit hour, minute, second fields.
fn civil_date_time(date: &[u8], hour: &[u8], minute: &[u8], second: &[u8]) -> Option<DateTime> {
    if date.len() != 10 || date[4] != b'-' || date[7] != b'-' {
        return None;
    }
    let year = digits(&date[0..4])?;
    let month = digits(&date[5..7])?;
    let day = digits(&date[8..10])?;
    let (hour, minute, second) = (digits(hour)?, digits(minute)?, digits(second)?);
    DateTime::new(
        year as i16,
        month as i8,
        day as i8,
        hour as i8,
        minute as i8,
        second as i8,
        0,
    )
    .ok()
}

fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |n, c| {
        c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_formatted_like_strftime_across_the_whole_range() {
        let (min, max) = (Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
        // Every day boundary, a second before it and an afternoon from 1870 to 2170 (leap
        // years, 1900 and 2100 that are not, 2000 that is), then a spread over the range.
        let day_by_day = (-36_525..73_051)
            .flat_map(|day: i64| [day * 86_400, day * 86_400 - 1, day * 86_400 + 45_296]);
        let spread = (0..200_000i64).map(|i| min + (max - min) / 200_000 * i);
        for second in day_by_day.chain(spread).chain([min, max, 0]) {
            let ts = Timestamp::from_second(second).unwrap();
            assert_eq!(
                format_utc(ts),
                ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
                "{second}"
            );
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn utc_round_trip() {
        let t = ts("2026-01-05T14:03:09Z");
        assert_eq!(format_utc(t), "2026-01-05 14:03:09 UTC");
        assert_eq!(parse_utc("2026-01-05 14:03:09 UTC"), Some(t));
        assert_eq!(parse_utc("2026-01-05 14:03:09 GMT"), Some(t));
        assert_eq!(WireDates::utc().parse("2026-01-05 14:03:09 UTC"), Ok(t));
    }

    #[test]
    fn local_zone_formats_and_parses_its_abbreviations() {
        let ny = WireDates::for_zone("America/New_York").unwrap();
        let winter = ts("2026-01-05T14:00:00Z");
        let summer = ts("2026-07-05T14:00:00Z");
        assert_eq!(ny.format(winter, 1), "2026-01-05 09:00:00 EST");
        assert_eq!(ny.format(summer, 1), "2026-07-05 10:00:00 EDT");
        assert_eq!(ny.format(summer, 2), "2026-07-05 14:00:00 UTC");
        assert_eq!(ny.parse("2026-01-05 09:00:00 EST"), Ok(winter));
        assert_eq!(ny.parse("2026-07-05 10:00:00 EDT"), Ok(summer));
        assert_eq!(ny.parse("2026-07-05 14:00:00 UTC"), Ok(summer));

        let paris = WireDates::for_zone("Europe/Paris").unwrap();
        assert_eq!(paris.format(winter, 1), "2026-01-05 15:00:00 CET");
        assert_eq!(paris.format(summer, 1), "2026-07-05 16:00:00 CEST");
        assert_eq!(paris.parse("2026-07-05 16:00:00 CEST"), Ok(summer));
    }

    #[test]
    fn foreign_abbreviation_is_refused_with_the_accepted_list() {
        let ny = WireDates::for_zone("America/New_York").unwrap();
        let err = ny.parse("2026-07-05 16:00:00 CEST").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("CEST") && text.contains("EDT"), "{text}");
        assert_eq!(parse_utc("2026-07-05 16:00:00 EST"), None);
    }

    #[test]
    fn malformed_dates_are_refused() {
        let utc = WireDates::utc();
        for bad in [
            "",
            "2026-01-05",
            "2026-01-05T14:00:00Z",
            "2026-02-30 10:00:00 UTC",
            "2026-01-05 24:00:00 UTC",
            "2026-1-05 10:00:00 UTC",
            "2026-01-05 10:00:00",
            "2026-01-05 10:00:00 U C",
            "x026-01-05 10:00:00 UTC",
        ] {
            assert!(utc.parse(bad).is_err(), "{bad:?} should be refused");
            assert_eq!(parse_utc(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn unknown_zone_name() {
        assert_eq!(
            WireDates::for_zone("Mars/Olympus").unwrap_err(),
            DateError::UnknownTimeZone("Mars/Olympus".into())
        );
    }

    #[test]
    fn build_date_round_trip() {
        let t = ts("2026-11-21T23:12:41Z");
        assert_eq!(format_build_date(t), "2026-11-21_23-12-41");
        assert_eq!(parse_build_date("2026-11-21_23-12-41"), Ok(t));
        assert!(parse_build_date("2026-11-21 23:12:41").is_err());
        assert!(parse_build_date("2026-13-21_23-12-41").is_err());
    }
}
