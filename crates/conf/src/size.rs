//! Byte sizes as written by people: `4096`, `"4k"`, `"512KiB"`, `"1.5g"`.

/// Parse a size with an optional binary unit suffix (k, m, g, t; `B`, `iB` accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(digits_end);
    let unit = unit.trim().trim_end_matches("ib").trim_end_matches('b');
    let mult: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => {
            return Err(format!(
                "size {t:?}: unknown unit (use a number of bytes or k, m, g, t)"
            ));
        }
    };
    let v: f64 = num.parse().map_err(|_| {
        format!("size {t:?} is not a number with an optional unit such as 4k or 1g")
    })?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size {t:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("2 MB").unwrap(), 2 << 20);
        assert!(parse_size("4x").is_err());
        assert!(parse_size("k").is_err());
    }
}
