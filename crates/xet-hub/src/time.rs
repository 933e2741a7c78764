//! Times as the Hub writes them: milliseconds since the Unix epoch to and from RFC 3339
//! UTC text. The server writes `2026-12-06T09:30:00.123Z`; `huggingface_hub` writes sync
//! plans with Python's `isoformat()` (`2026-12-06T09:30:00.123000+00:00`). Both parse.

/// `ms` as RFC 3339 UTC with milliseconds (`2026-11-21T21:46:01.042Z`), the Hub's form.
pub fn rfc3339_ms(ms: i64) -> String {
    let (date, secs_of_day, milli) = split(ms);
    let (y, m, d) = date;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60,
    )
}

/// `ms` as Python's `datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()`:
/// microseconds only when there are any, `+00:00` for UTC.
pub fn python_isoformat_ms(ms: i64) -> String {
    let ((y, m, d), secs_of_day, milli) = split(ms);
    let frac = if milli == 0 {
        String::new()
    } else {
        format!(".{:06}", milli * 1000)
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}+00:00",
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60,
    )
}

/// Milliseconds since the Unix epoch of an RFC 3339 time: `Z` or a `±HH:MM` offset, any
/// number of fraction digits (kept to the millisecond). `None` for anything else.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let (body, offset_secs) = split_offset(s)?;
    let (date, time) = body.split_once(['T', 't', ' '])?;
    let [y, m, d] = fields::<3>(date, '-')?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let [h, mi, sec] = fields::<3>(hms, ':')?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let milli_digits: String = frac.chars().take(3).collect();
    let milli = format!("{milli_digits:0<3}").parse::<i64>().ok()?;
    let secs = days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_secs;
    Some(secs * 1000 + milli)
}

/// The text before a `Z` or `±HH:MM` suffix and that offset in seconds.
fn split_offset(s: &str) -> Option<(&str, i64)> {
    if let Some(body) = s.strip_suffix(['Z', 'z']) {
        return Some((body, 0));
    }
    let at = s.len().checked_sub(6)?;
    let (body, tail) = (s.get(..at)?, s.get(at..)?);
    let sign = match tail.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let [h, m] = fields::<2>(&tail[1..], ':')?;
    Some((body, sign * (h * 3600 + m * 60)))
}

/// `N` unsigned decimal fields separated by `sep`.
fn fields<const N: usize>(s: &str, sep: char) -> Option<[i64; N]> {
    let mut out = [0i64; N];
    let mut parts = s.split(sep);
    for slot in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 4 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = p.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// (civil date, seconds of the day, milliseconds of the second) of `ms`.
fn split(ms: i64) -> ((i64, i64, i64), i64, i64) {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    (civil(days), secs.rem_euclid(86_400), ms.rem_euclid(1000))
}

/// The civil date (year, month, day) of `days` since 1970-01-01 (Howard Hinnant's
/// algorithm).
pub fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of a civil date (the inverse of [`civil`]).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hubs_form() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_297_561_042), "2026-11-21T21:46:01.042Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn pythons_form() {
        assert_eq!(python_isoformat_ms(0), "1970-01-01T00:00:00+00:00");
        assert_eq!(
            python_isoformat_ms(1_795_297_561_042),
            "2026-11-21T21:46:01.042000+00:00"
        );
    }

    #[test]
    fn both_forms_read_back() {
        for ms in [
            0,
            1,
            999,
            1_000,
            951_782_400_000,
            1_795_297_561_042,
            -1,
            -86_400_001,
        ] {
            assert_eq!(parse_rfc3339_ms(&rfc3339_ms(ms)), Some(ms), "{ms}");
            assert_eq!(parse_rfc3339_ms(&python_isoformat_ms(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            parse_rfc3339_ms("2026-12-06T09:30:00.5Z"),
            Some(1_796_549_400_500)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-12-06T10:30:00+01:00"),
            Some(1_796_549_400_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-12-06T09:30:00.123456789Z"),
            Some(1_796_549_400_123)
        );
        for bad in [
            "yesterday",
            "",
            "2026-12-06",
            "2026-13-06T00:00:00Z",
            "2026-12-06T00:00:00",
            "2026-12-06T00:00:00.x1Z",
            "2026-12-06T00:00:00+0100",
            "-2026-12-06T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }
}
