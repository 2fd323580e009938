//! What changing a reservation and changing a virtual container share: removing an ACL
//! rule, and the size limit an ordinary user's change must keep.

use crate::request::SchedError;
use crate::reservation::AclRule;

/// Removes the ACL rule `key` of the `what` (`reservation`, `virtual container`) `id`;
/// answers what was done.
pub(super) fn delete_rule(
    acl: &mut Vec<AclRule>,
    key: &str,
    what: &str,
    id: &str,
) -> Result<String, SchedError> {
    let Some(at) = acl.iter().position(|r| r.key() == key) else {
        let mut named = what.to_string();
        named[..1].make_ascii_uppercase();
        return Err(SchedError::NotFound(format!(
            "{named} {id} has no ACL rule '{key}'"
        )));
    };
    acl.remove(at);
    Ok(format!("The ACL rule {key} of {what} {id} was removed"))
}

/// Why `carried` bytes (of `parts`, e.g. "variables and ACL rules") are too many for an
/// ordinary user, if they are.
pub(super) fn over_limit(carried: usize, limit: usize, parts: &str) -> Option<String> {
    (carried > limit).then(|| {
        format!(
            "its {parts} would add up to {carried} bytes, more than {limit} \
             ([scheduler.limits] max_submission_bytes)"
        )
    })
}
