//! Numeric MCA parameters: one table of ranges, the exact reading of a
//! value's text and the range check. Pure logic, unit-tested.
//!
//! The shim registers every numeric parameter as a 64-bit `long`, so Open
//! MPI accepts any value it can parse and never prints a message of its own
//! (with `int` it rejects a value that does not fit, prints "invalid value"
//! and keeps the default). The range rule lives here only: the shim asks
//! [`rule`] for the text it appends to each help string, and [`check`]
//! words its error with the same text.

/// A numeric parameter's accepted values.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NumericParam {
    /// Name without the `mtl_rustofi_` prefix.
    pub name: &'static str,
    pub min: i64,
    pub max: i64,
    /// A value outside `min..=max` with a meaning of its own.
    pub special: Option<(i64, &'static str)>,
    /// Unit named in the rule ("bytes"), or empty.
    pub unit: &'static str,
}

const fn param(name: &'static str, min: i64, max: i64, unit: &'static str) -> NumericParam {
    NumericParam {
        name,
        min,
        max,
        special: None,
        unit,
    }
}

/// Largest eager payload a user may ask for.
pub(crate) const MAX_EAGER: i64 = 1 << 20;

/// Every numeric parameter, one line each.
pub(crate) const NUMERIC: &[NumericParam] = &[
    param("priority", 0, 1000, ""),
    NumericParam {
        special: Some((-1, "for the provider's default")),
        ..param("eager_limit", 0, MAX_EAGER, "bytes")
    },
    param("verbose", 0, 100, ""),
    param("rndv_chunk_size", 4096, 1 << 40, "bytes"),
    param("rx_buffers", 8, 65536, ""),
    param("coalesce", 0, 1, ""),
    param("mr_cache_size", 0, 65536, ""),
    NumericParam {
        special: Some((-1, "for the host's memory divided by its CPUs")),
        ..param("mr_cache_bytes", 0, 1 << 50, "bytes")
    },
    NumericParam {
        special: Some((0, "for every NIC as near as the rank's own")),
        ..param("stripe", 1, crate::wire::MAX_STRIPES as i64 + 1, "NICs")
    },
    param("stripe_min", 4096, 1 << 40, "bytes"),
    param("send_queue_limit", 4096, 1 << 40, "bytes"),
    param("send_queue_total", 4096, 1 << 40, "bytes"),
    NumericParam {
        special: Some((0, "to wait for ever")),
        ..param("peer_timeout", 1, 86400, "seconds")
    },
];

/// Every parameter with enumerated values (registered with an enumerator
/// by the shim, which hands the library the value's name) and the values
/// it takes, as the error messages list them.
pub(crate) const ENUMERATED: &[(&str, &str)] = &[
    ("rndv_protocol", "auto, read, send or msg"),
    ("tagged", "auto or off"),
    (
        "fault_inject",
        "none, rma_key, bad_packet, lose_data, lose_whole, late_comm or excid_lost",
    ),
    ("shm", "auto, on, libfabric or off"),
];

/// The error for text that names no value of enumerated parameter `name`.
pub(crate) fn not_a_value(name: &str, text: &str) -> String {
    let values = ENUMERATED
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, v)| v);
    if text.trim().is_empty() {
        format!("mtl_rustofi_{name} is set but empty: use {values}")
    } else {
        format!("mtl_rustofi_{name} = '{text}' is invalid: use {values}")
    }
}

/// The entry of parameter `name`.
pub(crate) fn spec(name: &str) -> Option<&'static NumericParam> {
    NUMERIC.iter().find(|p| p.name == name)
}

/// The rule as users read it: "0 to 1048576 bytes, or -1 for the
/// provider's default".
pub(crate) fn rule(p: &NumericParam) -> String {
    let unit = if p.unit.is_empty() {
        String::new()
    } else {
        format!(" {}", p.unit)
    };
    let mut s = format!("{} to {}{unit}", p.min, p.max);
    if let Some((v, what)) = p.special {
        s.push_str(&format!(", or {v} {what}"));
    }
    s
}

/// Reads a value's text the way Open MPI means it (strtoull with base 0:
/// decimal, 0x-hex, leading-0 octal; an optional sign; one k/m/g suffix
/// multiplying by 1024, 1024² or 1024³) but exactly: text Open MPI would
/// read leniently ("abc" as 0, "12x" as 12) or let wrap around (beyond 64
/// bits) is `None`. Values beyond `i128` are `Some(i128::MAX)` or
/// `Some(i128::MIN)`, still out of every range.
pub(crate) fn parse(text: &str) -> Option<i128> {
    let t = text.trim();
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (body, shift) = match body.as_bytes().last() {
        Some(b'k' | b'K') => (&body[..body.len() - 1], 10),
        Some(b'm' | b'M') => (&body[..body.len() - 1], 20),
        Some(b'g' | b'G') => (&body[..body.len() - 1], 30),
        _ => (body, 0),
    };
    let (digits, radix) = if let Some(h) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (h, 16)
    } else if body.len() > 1 && body.starts_with('0') {
        (&body[1..], 8)
    } else {
        (body, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i128::from_str_radix(digits, radix)
        .ok()
        .and_then(|v| v.checked_mul(1i128 << shift))
        .unwrap_or(i128::MAX);
    Some(if neg { -magnitude } else { magnitude })
}

/// Checks `value` (or the text it came from, when known) against the
/// parameter's rule; the error names the parameter, the value and the rule.
pub(crate) fn check(p: &NumericParam, value: i64, text: Option<&str>) -> Result<i64, String> {
    let shown = text.map(str::trim).map(str::to_owned);
    let exact = match text {
        Some(t) => parse(t).ok_or_else(|| {
            format!(
                "mtl_rustofi_{} = '{}' is not a number: it must be {} (digits, optionally \
                 0x-hex, with an optional k, m or g suffix)",
                p.name,
                t.trim(),
                rule(p)
            )
        })?,
        None => i128::from(value),
    };
    let ok = (i128::from(p.min)..=i128::from(p.max)).contains(&exact)
        || p.special.is_some_and(|(v, _)| i128::from(v) == exact);
    if ok {
        // In range, so it fits.
        Ok(exact as i64)
    } else {
        Err(format!(
            "mtl_rustofi_{} = {} is out of range: it must be {}",
            p.name,
            shown.unwrap_or_else(|| value.to_string()),
            rule(p)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_read_exactly() {
        assert_eq!(parse("8192"), Some(8192));
        assert_eq!(parse(" -1 "), Some(-1));
        assert_eq!(parse("+7"), Some(7));
        assert_eq!(parse("64k"), Some(65536));
        assert_eq!(parse("1M"), Some(1 << 20));
        assert_eq!(parse("2g"), Some(2 << 30));
        assert_eq!(parse("0x1000"), Some(4096));
        assert_eq!(parse("010"), Some(8));
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("99999999999"), Some(99_999_999_999));
        // wider than 64 bits: still a number, out of every range
        assert!(parse("99999999999999999999999999").unwrap() > i64::MAX as i128);
        assert_eq!(parse("9".repeat(60).as_str()), Some(i128::MAX));
        for bad in ["abc", "", "12x", "k", "1.5", "0x", "08", "--1", "1kk", " "] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_rule_is_stated_and_enforced() {
        for p in NUMERIC {
            let r = rule(p);
            assert!(
                r.contains(&p.min.to_string()) && r.contains(&p.max.to_string()),
                "{r}"
            );
            assert_eq!(check(p, p.min, None), Ok(p.min));
            assert_eq!(check(p, p.max, None), Ok(p.max));
            for bad in [p.min - 1, p.max + 1] {
                if p.special.is_some_and(|(v, _)| v == bad) {
                    continue;
                }
                let e = check(p, bad, None).unwrap_err();
                assert!(e.contains(&format!("mtl_rustofi_{}", p.name)), "{e}");
                assert!(e.contains(&r), "{e}");
            }
        }
    }

    #[test]
    fn values_too_wide_for_any_type_are_out_of_range() {
        for (name, text) in [
            ("eager_limit", "99999999999"),
            ("rx_buffers", "99999999999"),
            ("rndv_chunk_size", "99999999999999"),
            ("eager_limit", "99999999999999999999999"),
            ("verbose", "18446744073709551615"),
            ("priority", "4g"),
        ] {
            let p = spec(name).unwrap();
            // what Open MPI's 64-bit conversion might have made of it
            let e = check(p, 0, Some(text)).unwrap_err();
            assert!(e.contains(&format!("mtl_rustofi_{name} = {text}")), "{e}");
            assert!(e.contains(&rule(p)), "{e}");
        }
        let e = check(spec("rndv_chunk_size").unwrap(), 0, Some("99999999999999")).unwrap_err();
        assert!(e.contains("4096 to 1099511627776 bytes"), "{e}");
    }

    #[test]
    fn special_values_and_text_are_accepted() {
        let p = spec("eager_limit").unwrap();
        assert_eq!(check(p, -1, None), Ok(-1));
        assert_eq!(check(p, 0, Some("-1")), Ok(-1));
        assert_eq!(check(p, 0, Some("64k")), Ok(65536));
        assert!(check(p, -2, None)
            .unwrap_err()
            .contains("or -1 for the provider's default"));
        let e = check(p, 0, Some("abc")).unwrap_err();
        assert!(
            e.contains("mtl_rustofi_eager_limit = 'abc' is not a number"),
            "{e}"
        );
    }
}
