//! The built-in `Native` plugin type (being written on its own branch; this is its
//! interface only).

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeReport {
    pub id: String,
    pub state: Option<String>,
    pub processors: Option<u32>,
    pub available_processors: Option<u32>,
    pub memory: Option<u64>,
    pub available_memory: Option<u64>,
    pub disk: Option<u64>,
    pub available_disk: Option<u64>,
    pub os: Option<String>,
    pub architecture: Option<String>,
    pub features: Vec<String>,
    pub partition: Option<String>,
    pub cpu_load: Option<f64>,
    pub generic_metrics: BTreeMap<String, f64>,
    pub generic_events: Vec<(String, String)>,
    pub messages: Vec<String>,
    pub other: BTreeMap<String, String>,
}

pub struct Locations {
    pub directories: Vec<std::path::PathBuf>,
    pub run_as: Option<String>,
    pub timeout: std::time::Duration,
    pub max_output: usize,
}

pub fn parse_nodes(_text: &str) -> (Vec<NodeReport>, Vec<String>) {
    (Vec::new(), Vec::new())
}

pub fn read_url(_url: &str, _locations: &Locations) -> Result<String, String> {
    Err("not yet".into())
}

pub fn check_url(_url: &str, _locations: &Locations) -> Result<(), String> {
    Err("not yet".into())
}
