use super::*;

const S: u64 = 1_000_000_000;

fn spec(s: &str) -> Spec {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn durations() {
    assert_eq!(parse_duration("2s"), Ok(2 * S));
    assert_eq!(parse_duration("2"), Ok(2 * S));
    assert_eq!(parse_duration("1.5"), Ok(1_500_000_000));
    assert_eq!(parse_duration("500ms"), Ok(500_000_000));
    assert_eq!(parse_duration("1m30s"), Ok(90 * S));
    assert_eq!(parse_duration("1h"), Ok(3600 * S));
    assert_eq!(parse_duration("250us"), Ok(250_000));
    for bad in ["", "s", "2x", "-1s", "1m30", "nan", "inf", "1..2s", "ms5"] {
        assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn specs_parse() {
    for good in ["@now", "@12:30", "@12:30:15", "@23:59:59.250", "@2030-01-02T03:04:05", "+2s", "+1m30s", "/5s", "/1h"] {
        spec(good);
    }
    for bad in ["now", "@", "@24:00", "@12:60", "@12", "@12:30:61", "@2030-02-31T00:00:00", "@2030-01-02T03:04", "+", "+x", "/0s", "/500us", "5s", "@12:30:+5"] {
        let e = bad.parse::<Spec>().expect_err(bad);
        assert!(e.contains(bad), "the error names the spec: {e}");
    }
}

#[test]
fn relative_and_aligned() {
    let launch = 1_700_000_003 * S + 123;
    let s = Schedule::resolve(None, Some(&spec("+2s")), launch, launch).unwrap();
    assert_eq!((s.prepare_at, s.activate_at), (launch, launch + 2 * S));
    let s = Schedule::resolve(None, Some(&spec("/5s")), launch, launch).unwrap();
    assert_eq!(s.activate_at, 1_700_000_005 * S);
    // Aligned activation counts from the preparation.
    let s = Schedule::resolve(Some(&spec("+4s")), Some(&spec("/5s")), launch, launch).unwrap();
    assert_eq!((s.prepare_at, s.activate_at), (launch + 4 * S, 1_700_000_010 * S));
    // Without --activate, recording starts once prepared.
    let s = Schedule::resolve(Some(&spec("+1s")), None, launch, launch).unwrap();
    assert_eq!(s.activate_at, launch + S);
    let s = Schedule::resolve(Some(&spec("@now")), Some(&spec("@now")), launch, launch).unwrap();
    assert_eq!((s.prepare_at, s.activate_at), (launch, launch));
}

#[test]
fn past_and_out_of_order_fail() {
    let launch = realtime_ns();
    let e = Schedule::resolve(None, Some(&spec("@2001-01-01T00:00:00")), launch, launch).unwrap_err().to_string();
    assert!(e.contains("--activate @2001-01-01T00:00:00") && e.contains("in the past"), "{e}");
    let e = Schedule::resolve(Some(&spec("+5s")), Some(&spec("+2s")), launch, launch).unwrap_err().to_string();
    assert!(e.contains("--activate +2s") && e.contains("before --prepare +5s"), "{e}");
    // A relative time that passed between the launch and the check.
    let e = Schedule::resolve(Some(&spec("+1ms")), None, launch, launch + S).unwrap_err().to_string();
    assert!(e.contains("--prepare +1ms") && e.contains("in the past"), "{e}");
}

#[test]
fn local_dates_round_trip() {
    let s = spec("@2031-07-04T10:20:30.500");
    let at = s.resolve(0, 0);
    assert_eq!(local_time(at), "2031-07-04 10:20:30.500");
    let launch = realtime_ns();
    let at = spec("@10:20").resolve(launch, launch);
    assert_eq!(&local_time(at)[..10], &local_time(launch)[..10], "today");
    assert_eq!(&local_time(at)[11..], "10:20:00.000");
}
