//! The HTTP plumbing every resource goes through: the route registry and its gate
//! (`routes`: authentication, `proxy-user`, authorization, idempotency), what wraps
//! every request (`layers`, `cross_site`), reading requests (`params`, `input`) and
//! writing answers (`reply`, `error`), who the caller is (`identity`, `access`, `audit`),
//! the OpenAPI document made from the registry (`openapi`), the state handlers reach
//! (`state`), the server loop with its connection bounds (`server`), and a standby's
//! forwarding to the active server of a highly available group (`standby`). The
//! resources are the modules beside this one.

pub mod access;
pub(crate) mod audit;
pub(crate) mod cross_site;
pub mod error;
pub(crate) mod idempotency;
pub(crate) mod identity;
pub mod input;
pub mod layers;
pub mod openapi;
pub mod params;
pub mod reply;
pub mod routes;
pub mod server;
pub mod standby;
pub(crate) mod state;
