//! Audit events: logins checked in full (not the remembered ones), failed and throttled
//! logins, and permission denials, recorded like any other event (store and
//! `events.log`, facility `security`). Recording never holds up the request.

use drover_domain::dates::Timestamp;
use drover_monitor::event::{Event, InitiatedBy};

use crate::AppState;

/// What happened.
#[derive(Debug, Clone, Copy)]
pub enum Audit {
    Login,
    LoginFailed,
    LoginThrottled,
    Denied,
}

impl Audit {
    fn event_type(self) -> &'static str {
        match self {
            Audit::Login => "userlogin",
            Audit::LoginFailed => "userloginfailure",
            Audit::LoginThrottled => "userloginthrottled",
            Audit::Denied => "permissiondenied",
        }
    }

    fn severity(self) -> &'static str {
        match self {
            Audit::Login => "INFO",
            _ => "WARN",
        }
    }
}

/// Records `what` about `user` (`source`: the peer address), with `message`.
pub fn record(state: &AppState, what: Audit, user: &str, source: Option<&str>, message: String) {
    let mut event = Event::new(Timestamp::now(), what.event_type(), what.severity());
    event.origin = Some("drover/api".into());
    event.facility = Some("security".into());
    event.status = Some(match what {
        Audit::Login => "success".into(),
        _ => "failure".into(),
    });
    event.message = Some(message);
    event.arguments = std::iter::once(user.to_string())
        .chain(source.map(String::from))
        .collect();
    event.initiated_by = Some(InitiatedBy {
        user: Some(user.to_string()),
        proxy_user: None,
    });
    let events = state.events().clone();
    tokio::spawn(async move {
        let _ = events.record(vec![event]).await;
    });
}

/// Audits a refused login of `name` as the throttle says: the first failure of its
/// source in a window (with how many of the last window's went unrecorded) and each
/// block's start, not every failure (a flood would fill the store).
pub fn failed_login(
    state: &AppState,
    name: &str,
    source: Option<&str>,
    failure: &drover_auth::throttle::Failure,
    what: &str,
) {
    if let Some(earlier) = failure.report {
        let more = match earlier {
            0 => String::new(),
            n => format!(" ({n} more from this source in its last window were not recorded)"),
        };
        record(
            state,
            Audit::LoginFailed,
            name,
            source,
            format!("{what}{more}"),
        );
    }
    if let Some(block) = failure.blocked {
        let message = format!(
            "too many failed logins: logins refused unchecked for {} s (of this name from \
             this source, from this source, or of this name from sources it never used)",
            block.as_secs()
        );
        record(state, Audit::LoginThrottled, name, source, message);
    }
}
