//! Plugins (spec 2.14, 4.12): plugin types uploaded as Rhai scripts (or a zip archive of
//! them) and run in a sandbox, the built-in `Native` type, and plugin instances with
//! their lifecycle (configure, start, poll, stop).

pub mod archive;
pub mod native;
pub mod registry;
pub mod script;

/// Scripts run only where the allocator counts what each thread holds (`script`).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: drover_alloc::Metered<std::alloc::System> =
    drover_alloc::Metered(std::alloc::System);
