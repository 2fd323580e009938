//! The interface over HTTP: a real server (`drover_testkit`) and a real client.
//! One test binary for all of it (quicker to build than one per file).

// A test tells one story from setup to the last check; it may be long (issue #54).
#![allow(clippy::too_many_lines)]

mod access;
mod accounting;
mod connections;
mod conventions;
mod cross_site;
mod dashboard;
mod diag;
mod directory;
mod event_stream;
mod guests_contained;
mod idempotency;
mod images;
mod jobs;
mod lists;
mod logins;
mod metrics;
mod monitoring;
mod oauth;
mod openapi;
mod others_work;
mod plugin_sandbox;
mod plugins;
mod principals;
mod reservations;
mod retention;
mod roles;
mod scheduling;
mod security;
mod service_edges;
mod service_templates;
mod services;
mod slurm;
mod support;
mod unknown_fields;
mod virtual_containers;
mod vm_charges;
mod vm_edges;
mod vm_queue;
mod vms;
