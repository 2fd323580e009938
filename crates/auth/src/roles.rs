//! Roles and principals: who holds which permissions.
//!
//! A [`Role`] is a named set of [`Grant`]s; a grant allows an action on a resource (`*`
//! for every one) on everything ([`Scope::All`]) or only on what the caller owns
//! ([`Scope::Own`]: their jobs, reservations, containers). A [`PrincipalMap`] attaches
//! roles to directory users and groups. [`Authority`] decides, for an [`Identity`],
//! whether and how widely a permission is held.

use std::collections::BTreeMap;
use std::fmt;

use crate::{Action, Identity, Permission};

/// How far a granted permission reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Only the caller's own objects (where objects have owners).
    Own,
    /// Every object.
    All,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Own => "OWN",
            Scope::All => "ALL",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        match text.to_ascii_uppercase().as_str() {
            "OWN" => Some(Scope::Own),
            "ALL" => Some(Scope::All),
            _ => None,
        }
    }
}

/// An action on a resource (either may be `*`), to some scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    pub resource: String,
    pub action: String,
    pub scope: Scope,
}

/// The actions a grant may name.
pub const ACTIONS: [&str; 6] = ["read", "create", "update", "delete", "use", "*"];

impl Grant {
    pub fn new(resource: &str, action: &str, scope: Scope) -> Self {
        Self {
            resource: resource.to_string(),
            action: action.to_string(),
            scope,
        }
    }

    /// `resource:action` (also `*`); the action must be one of [`ACTIONS`].
    pub fn parse(id: &str, scope: Scope) -> Result<Grant, String> {
        let (resource, action) = match id {
            "*" => ("*", "*"),
            _ => id
                .split_once(':')
                .ok_or_else(|| format!("'{id}' is not resource:action"))?,
        };
        let resource_ok = resource == "*"
            || (!resource.is_empty()
                && resource
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        if !resource_ok {
            return Err(format!(
                "'{resource}' is not a resource (lower-case letters, digits, '-', or '*')"
            ));
        }
        if !ACTIONS.contains(&action) {
            return Err(format!(
                "'{action}' is not an action ({})",
                ACTIONS.join(", ")
            ));
        }
        Ok(Grant::new(resource, action, scope))
    }

    pub fn covers(&self, permission: Permission) -> bool {
        (self.resource == "*" || self.resource == permission.resource)
            && (self.action == "*" || self.action == permission.action.as_str())
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.resource, self.action)
    }
}

/// A named set of grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub id: String,
    pub name: String,
    pub description: String,
    pub grants: Vec<Grant>,
}

impl Role {
    /// The widest scope in which this role holds `permission`.
    pub fn scope_of(&self, permission: Permission) -> Option<Scope> {
        self.grants
            .iter()
            .filter(|g| g.covers(permission))
            .map(|g| g.scope)
            .max()
    }
}

pub const ADMINISTRATOR: &str = "administrator";
pub const OPERATOR: &str = "operator";
pub const USER: &str = "user";

/// Acting for another user through `proxy-user` (never a route's own permission).
pub const PROXY: Permission = Permission::new("proxy-user", Action::Use);

/// The built-in roles, as they are until changed (and after a reset).
pub fn built_in_roles() -> Vec<Role> {
    let all = |resource: &str, actions: &[&str]| {
        actions
            .iter()
            .map(|a| Grant::new(resource, a, Scope::All))
            .collect::<Vec<_>>()
    };
    let own = |resource: &str| Grant::new(resource, "*", Scope::Own);
    // Operators run the cluster; security (principals, roles, proxying) and money
    // (accounting allocations) they only read.
    let mut operator = vec![Grant::new("*", "read", Scope::All)];
    for resource in [
        "jobs",
        "nodes",
        "reservations",
        "vcs",
        "vms",
        "services",
        "events",
        "reports",
        "quotes",
    ] {
        operator.extend(all(resource, &["create", "update", "delete"]));
    }
    let mut user = vec![
        own("jobs"),
        own("reservations"),
        own("vcs"),
        own("vms"),
        own("services"),
        Grant::new("pending-actions", "read", Scope::Own),
        Grant::new("accounts", "read", Scope::Own),
        Grant::new("quotes", "create", Scope::Own),
    ];
    for resource in [
        "nodes",
        "images",
        "service-templates",
        "job-templates",
        "credentials",
        "diag",
        "metric-types",
        "reports",
        "permissions",
    ] {
        user.push(Grant::new(resource, "read", Scope::All));
    }
    vec![
        Role {
            id: ADMINISTRATOR.into(),
            name: ADMINISTRATOR.into(),
            description: "Every permission, on every object".into(),
            grants: vec![Grant::new("*", "*", Scope::All)],
        },
        Role {
            id: OPERATOR.into(),
            name: OPERATOR.into(),
            description:
                "Reads everything; runs jobs, nodes, reservations, containers, VMs, \
                          services, events and reports of every user; no security or accounting changes"
                    .into(),
            grants: operator,
        },
        Role {
            id: USER.into(),
            name: USER.into(),
            description: "Submits and manages their own jobs, reservations, containers, VMs and \
                          services; \
                          reads nodes, images, templates, credentials, reports and their accounts"
                .into(),
            grants: user,
        },
    ]
}

/// How a principal names a user or a group: its type (`LDAP`, `PAM`, `LDAPGROUP`,
/// `LDAPOU`, `PAMGROUP`) and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    pub kind: String,
    pub name: String,
}

impl Member {
    pub fn new(kind: &str, name: &str) -> Self {
        Self {
            kind: kind.to_string(),
            name: name.to_string(),
        }
    }
}

/// What a principal means for authorization: its users and groups, and the roles (by id)
/// they get.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrincipalMap {
    pub name: String,
    pub members: Vec<Member>,
    pub roles: Vec<String>,
}

/// The roles and principals in force, and the roles everyone gets.
#[derive(Debug, Clone, Default)]
pub struct Authority {
    roles: BTreeMap<String, Role>,
    principals: Vec<PrincipalMap>,
    default_roles: Vec<String>,
}

impl Authority {
    pub fn new(
        roles: impl IntoIterator<Item = Role>,
        principals: Vec<PrincipalMap>,
        default_roles: Vec<String>,
    ) -> Self {
        Self {
            roles: roles.into_iter().map(|r| (r.id.clone(), r)).collect(),
            principals,
            default_roles,
        }
    }

    /// The role whose id is `key`, else whose name is `key` (in any case).
    pub fn find_role(&self, key: &str) -> Option<&Role> {
        self.roles.get(key).or_else(|| {
            self.roles
                .values()
                .find(|r| r.name.eq_ignore_ascii_case(key))
        })
    }

    /// The ids of the roles `who` holds (with repeats): administrator for a local
    /// administrator, the default roles, and those of every principal naming them or one
    /// of their groups. Allocates nothing: the gate asks on every request.
    fn held_ids<'a>(&'a self, who: &'a Identity) -> impl Iterator<Item = &'a str> + 'a {
        let admin = who.admin.then_some(ADMINISTRATOR);
        let named = self
            .principals
            .iter()
            .filter(move |p| {
                p.members.iter().any(|m| {
                    (m.kind == who.origin.user_type() && m.name == who.name)
                        || who.groups.contains(m)
                })
            })
            .flat_map(|p| p.roles.iter().map(String::as_str));
        admin
            .into_iter()
            .chain(self.default_roles.iter().map(String::as_str))
            .chain(named)
    }

    /// The roles `who` holds, by id, sorted, each once.
    pub fn roles_of(&self, who: &Identity) -> Vec<String> {
        let mut ids: Vec<String> = self.held_ids(who).map(String::from).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    fn held<'a>(&'a self, who: &'a Identity) -> impl Iterator<Item = &'a Role> + 'a {
        self.held_ids(who).filter_map(|id| self.roles.get(id))
    }

    /// Whether `who` is an administrator: the local flag, or the built-in role.
    pub fn is_administrator(&self, who: &Identity) -> bool {
        who.admin || self.held_ids(who).any(|id| id == ADMINISTRATOR)
    }

    /// Whether `who` may change who may do what (roles, principals) or act for others:
    /// an identity no one but an administrator may act as.
    pub fn governs_access(&self, who: &Identity) -> bool {
        use crate::Permission as P;
        self.is_administrator(who)
            || self.proxy_scope(who).is_some()
            || ["roles", "principals"].into_iter().any(|resource| {
                [
                    P::create(resource),
                    P::update(resource),
                    P::delete(resource),
                ]
                .into_iter()
                .any(|p| self.scope_of(who, p).is_some())
            })
    }

    /// The widest scope of the roles of `who` that name [`PROXY`] itself: `All` acts
    /// for others, `Own` only for themselves. Wildcards never grant acting for others
    /// (the configured proxy users are the other way to it).
    pub fn proxy_scope(&self, who: &Identity) -> Option<Scope> {
        self.held(who)
            .flat_map(|role| &role.grants)
            .filter(|g| g.resource == PROXY.resource && g.action == PROXY.action.as_str())
            .map(|g| g.scope)
            .max()
    }

    /// The widest scope in which `who` holds `permission`; `None`: not held.
    pub fn scope_of(&self, who: &Identity, permission: Permission) -> Option<Scope> {
        if who.admin {
            return Some(Scope::All);
        }
        self.held(who)
            .filter_map(|role| role.scope_of(permission))
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Origin;

    fn who(name: &str, origin: Origin, groups: &[(&str, &str)]) -> Identity {
        Identity {
            name: name.into(),
            admin: false,
            origin,
            groups: groups.iter().map(|(k, n)| Member::new(k, n)).collect(),
        }
    }

    #[test]
    fn grants_parse_and_cover() {
        let grant = Grant::parse("jobs:read", Scope::Own).unwrap();
        assert!(grant.covers(Permission::read("jobs")));
        assert!(!grant.covers(Permission::update("jobs")));
        assert!(Grant::parse("*", Scope::All).unwrap().covers(PROXY));
        assert!(
            Grant::parse("*:read", Scope::All)
                .unwrap()
                .covers(Permission::read("x"))
        );
        for bad in ["jobs", "jobs:fly", "Jobs:read", ":read", "a b:read"] {
            assert!(Grant::parse(bad, Scope::All).is_err(), "{bad}");
        }
    }

    #[test]
    fn built_in_roles_decide_and_scope() {
        let authority = Authority::new(built_in_roles(), vec![], vec![USER.into()]);
        let alice = who("alice", Origin::Local, &[]);
        assert_eq!(
            authority.scope_of(&alice, Permission::update("jobs")),
            Some(Scope::Own)
        );
        assert_eq!(
            authority.scope_of(&alice, Permission::read("nodes")),
            Some(Scope::All)
        );
        assert_eq!(
            authority.scope_of(&alice, Permission::update("nodes")),
            None
        );
        assert_eq!(
            authority.scope_of(&alice, Permission::read("principals")),
            None
        );
        assert_eq!(authority.scope_of(&alice, PROXY), None);
        let admin = Identity {
            admin: true,
            ..who("root", Origin::Local, &[])
        };
        assert_eq!(
            authority.proxy_scope(&admin),
            None,
            "not through a wildcard"
        );
        let proxies = Role {
            id: "proxies".into(),
            name: "proxies".into(),
            description: String::new(),
            grants: vec![Grant::parse("proxy-user:use", Scope::All).unwrap()],
        };
        let mut roles = built_in_roles();
        roles.push(proxies);
        let authority = Authority::new(roles, vec![], vec![USER.into(), "proxies".into()]);
        assert_eq!(authority.proxy_scope(&alice), Some(Scope::All));
    }

    #[test]
    fn principals_give_roles_by_user_and_group_of_the_right_type() {
        let principals = vec![
            PrincipalMap {
                name: "ops".into(),
                members: vec![Member::new("LDAPGROUP", "schedulers")],
                roles: vec![OPERATOR.into()],
            },
            PrincipalMap {
                name: "boss".into(),
                members: vec![Member::new("LDAP", "carol")],
                roles: vec![ADMINISTRATOR.into()],
            },
        ];
        let authority = Authority::new(built_in_roles(), principals, vec![USER.into()]);
        let alice = who("alice", Origin::Directory, &[("LDAPGROUP", "schedulers")]);
        assert_eq!(authority.roles_of(&alice), [OPERATOR, USER]);
        assert_eq!(
            authority.scope_of(&alice, Permission::update("nodes")),
            Some(Scope::All)
        );
        assert_eq!(
            authority.scope_of(&alice, Permission::create("roles")),
            None
        );
        assert_eq!(
            authority.roles_of(&who("carol", Origin::Directory, &[])),
            [ADMINISTRATOR, USER]
        );
        // A local user called carol is not the directory's carol.
        assert_eq!(
            authority.roles_of(&who("carol", Origin::Local, &[])),
            [USER]
        );
    }
}
