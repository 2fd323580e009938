//! Pricing: what a piece of work costs at given rates, component by component.
//!
//! amount = Σ over components (rate × quantity × seconds) × scaling factor, where the
//! scaling factor is the product of the QoS, class and user multipliers that apply (1 when
//! none does). Rates given with a quote replace the standard ones.

use crate::model::{Component, Price, RateOverride, Rates, Seconds, Usage};
use crate::money::Money;

/// The rates in force: `standard` with `overrides` applied. An override of an unknown
/// type is refused (the messages name it).
pub fn effective_rates(standard: &Rates, overrides: &[RateOverride]) -> Result<Rates, Vec<String>> {
    let mut rates = standard.clone();
    let mut problems = Vec::new();
    for (i, o) in overrides.iter().enumerate() {
        let name = || o.name.clone().filter(|n| !n.is_empty());
        let named = |problems: &mut Vec<String>| {
            let n = name();
            if n.is_none() {
                problems.push(format!("rate[{i}].name: required for type {}", o.kind));
            }
            n
        };
        match o.kind.to_ascii_lowercase().as_str() {
            "processors" | "processor" | "procs" => rates.processors = Some(o.rate),
            "memory" | "mem" => rates.memory = Some(o.rate),
            "disk" => rates.disk = Some(o.rate),
            "swap" => rates.swap = Some(o.rate),
            "node" | "nodes" => rates.node = Some(o.rate),
            "genericresources" | "genericresource" | "gres" => {
                if let Some(n) = named(&mut problems) {
                    rates.generic_resources.insert(n, o.rate);
                }
            }
            "service" | "services" => {
                if let Some(n) = named(&mut problems) {
                    rates.services.insert(n, o.rate);
                }
            }
            "qos" => {
                if let Some(n) = named(&mut problems) {
                    rates.qos.insert(n, o.rate);
                }
            }
            "class" => {
                if let Some(n) = named(&mut problems) {
                    rates.class.insert(n, o.rate);
                }
            }
            "user" => {
                if let Some(n) = named(&mut problems) {
                    rates.user.insert(n, o.rate);
                }
            }
            other => problems.push(format!(
                "rate[{i}].type: '{other}' is not one of processors, memory, disk, swap, node, genericResources, service, qos, class, user"
            )),
        }
        if o.rate.is_negative() {
            problems.push(format!("rate[{i}].rate: must not be negative"));
        }
    }
    if problems.is_empty() {
        Ok(rates)
    } else {
        Err(problems)
    }
}

/// The price of `usage` for `duration` seconds at `rates`.
pub fn price(rates: &Rates, usage: &Usage, duration: Seconds) -> Price {
    let mut factor = Money::from_units(1);
    for (table, key) in [
        (&rates.qos, &usage.qos),
        (&rates.class, &usage.class),
        (&rates.user, &Some(usage.user.clone())),
    ] {
        if let Some(multiplier) = key.as_ref().and_then(|k| table.get(k)) {
            factor = factor.times(*multiplier);
        }
    }
    let mut components = Vec::new();
    let mut add = |name: String, value: u64, rate: Option<Money>| {
        if let Some(rate) = rate
            && value > 0
        {
            let base = rate.times_count(value as i64).times_count(duration.max(0));
            components.push(Component {
                name,
                value,
                duration: duration.max(0),
                rate,
                scaling_factor: factor,
                amount: base.times(factor),
            });
        }
    };
    add("processors".into(), usage.processors, rates.processors);
    add("memory".into(), usage.memory, rates.memory);
    add("disk".into(), usage.disk, rates.disk);
    add("swap".into(), usage.swap, rates.swap);
    add("node".into(), usage.nodes, rates.node);
    for (name, count) in &usage.generic_resources {
        add(
            format!("genericResources.{name}"),
            *count,
            rates.generic_resources.get(name).copied(),
        );
    }
    if let Some(service) = &usage.service {
        add(
            format!("service.{service}"),
            1,
            rates.services.get(service).copied(),
        );
    }
    Price {
        amount: components.iter().map(|c| c.amount).sum(),
        components,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(text: &str) -> Money {
        Money::parse(text).unwrap()
    }

    fn rates() -> Rates {
        let mut rates = Rates {
            processors: Some(m("0.001")),
            memory: Some(m("0.000002")),
            node: Some(m("0.01")),
            ..Rates::default()
        };
        rates.generic_resources.insert("gpu".into(), m("0.05"));
        rates.qos.insert("high".into(), m("2"));
        rates.user.insert("vip".into(), m("0.5"));
        rates
    }

    fn usage() -> Usage {
        Usage {
            user: "ann".into(),
            nodes: 2,
            processors: 8,
            memory: 4096,
            generic_resources: [("gpu".to_string(), 1)].into(),
            ..Usage::default()
        }
    }

    #[test]
    fn a_price_is_the_sum_of_its_components() {
        // One hour: processors 8 × 0.001 × 3600 = 28.8; memory 4096 × 0.000002 × 3600
        // = 29.4912; nodes 2 × 0.01 × 3600 = 72; gpu 1 × 0.05 × 3600 = 180.
        let p = price(&rates(), &usage(), 3600);
        let amounts: Vec<String> = p.components.iter().map(|c| c.amount.to_string()).collect();
        assert_eq!(amounts, ["28.8", "29.4912", "72", "180"]);
        assert_eq!(p.amount, m("310.2912"));
    }

    #[test]
    fn multipliers_and_overrides() {
        let mut u = usage();
        u.qos = Some("high".into());
        u.user = "vip".into();
        // × 2 × 0.5 = × 1.
        assert_eq!(price(&rates(), &u, 3600).amount, m("310.2912"));
        u.user = "ann".into();
        assert_eq!(price(&rates(), &u, 3600).amount, m("620.5824"));
        let overridden = effective_rates(
            &rates(),
            &[RateOverride {
                kind: "Processors".into(),
                name: None,
                rate: m("0"),
            }],
        )
        .unwrap();
        assert_eq!(price(&overridden, &usage(), 3600).amount, m("281.4912"));
        let problems = effective_rates(
            &rates(),
            &[
                RateOverride {
                    kind: "planets".into(),
                    name: None,
                    rate: m("1"),
                },
                RateOverride {
                    kind: "qos".into(),
                    name: None,
                    rate: m("1"),
                },
            ],
        )
        .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
