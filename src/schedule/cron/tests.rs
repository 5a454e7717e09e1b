//! Tests of the Quartz cron expressions: ElasticJob's and Quartz's own edge cases.

use super::*;
use chrono::Timelike;

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn next_n(cron: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
    let s = CronSchedule::parse(cron, tz).unwrap();
    let mut t = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        match s.next_after(t) {
            Some(next) => {
                out.push(next.format("%a %Y-%m-%dT%H:%M:%SZ").to_string());
                t = next;
            }
            None => break,
        }
    }
    out
}

#[test]
fn quartz_edge_cases() {
    let from = "2026-02-01T00:00:00Z"; // a Sunday
    let cases: [(&str, &[&str]); 12] = [
        (
            "0/5 * * * * ?",
            &["Sun 2026-02-01T00:00:05Z", "Sun 2026-02-01T00:00:10Z"],
        ),
        (
            "*/1 * * * * ?",
            &["Sun 2026-02-01T00:00:01Z", "Sun 2026-02-01T00:00:02Z"],
        ),
        (
            "0 0 12 L * ?",
            &["Sat 2026-02-28T12:00:00Z", "Tue 2026-03-31T12:00:00Z"],
        ),
        (
            "0 0 12 LW * ?",
            &["Fri 2026-02-27T12:00:00Z", "Tue 2026-03-31T12:00:00Z"],
        ),
        (
            "0 0 12 15W * ?",
            &["Mon 2026-02-16T12:00:00Z", "Mon 2026-03-16T12:00:00Z"],
        ),
        (
            "0 0 12 1W * ?",
            &["Mon 2026-02-02T12:00:00Z", "Mon 2026-03-02T12:00:00Z"],
        ),
        (
            "0 0 12 ? * 6#3",
            &["Fri 2026-02-20T12:00:00Z", "Fri 2026-03-20T12:00:00Z"],
        ),
        (
            "0 0 12 ? * 6L",
            &["Fri 2026-02-27T12:00:00Z", "Fri 2026-03-27T12:00:00Z"],
        ),
        (
            "0 0 12 ? * L",
            &["Sat 2026-02-07T12:00:00Z", "Sat 2026-02-14T12:00:00Z"],
        ),
        // Quartz numbering: 1 = SUN, 4 = WED, 7 = SAT.
        (
            "0 0 12 ? * 1",
            &["Sun 2026-02-01T12:00:00Z", "Sun 2026-02-08T12:00:00Z"],
        ),
        (
            "0 0 12 ? * 4",
            &["Wed 2026-02-04T12:00:00Z", "Wed 2026-02-11T12:00:00Z"],
        ),
        (
            "0 0 12 ? * mon-fri",
            &["Mon 2026-02-02T12:00:00Z", "Tue 2026-02-03T12:00:00Z"],
        ),
    ];
    for (cron, want) in cases {
        assert_eq!(next_n(cron, "UTC", from, 2), want, "{cron}");
    }
    assert_eq!(
        next_n("0 0 12 L 2 ? 2028", "GMT", from, 1),
        ["Tue 2028-02-29T12:00:00Z"]
    );
    assert_eq!(
        next_n("0 0 12 1 1 ? 1999", "GMT", from, 1),
        Vec::<String>::new()
    );
    assert_eq!(
        next_n("0 0 12 ? * 7", "GMT", from, 1),
        ["Sat 2026-02-07T12:00:00Z"]
    );
    // Strictly after: a time on the schedule gives the next one.
    assert_eq!(
        next_n("0/5 * * * * ?", "UTC", "2026-02-01T00:00:05Z", 1),
        ["Sun 2026-02-01T00:00:10Z"]
    );
    assert_eq!(
        next_n("0/5 * * * * ?", "UTC", "2026-02-01T00:00:04.999Z", 1),
        ["Sun 2026-02-01T00:00:05Z"]
    );
}

#[test]
fn time_zones() {
    let from = "2026-06-01T00:00:00Z";
    let noon = |tz: &str| next_n("0 0 12 * * ?", tz, from, 1);
    assert_eq!(noon("GMT+08:00"), ["Mon 2026-06-01T04:00:00Z"]);
    assert_eq!(noon("GMT+8"), ["Mon 2026-06-01T04:00:00Z"]);
    assert_eq!(noon("GMT+0800"), ["Mon 2026-06-01T04:00:00Z"]);
    assert_eq!(noon("GMT-5"), ["Mon 2026-06-01T17:00:00Z"]);
    assert_eq!(noon("GMT"), ["Mon 2026-06-01T12:00:00Z"]);
    assert_eq!(noon("UTC"), ["Mon 2026-06-01T12:00:00Z"]);
    assert_eq!(noon("Asia/Shanghai"), ["Mon 2026-06-01T04:00:00Z"]);
    // Summer time in New York (EDT, four hours behind UTC).
    assert_eq!(noon("America/New_York"), ["Mon 2026-06-01T16:00:00Z"]);
    // Links of the database are names of their own, as Java knows them.
    assert_eq!(noon("US/Eastern"), ["Mon 2026-06-01T16:00:00Z"]);
    assert_eq!(noon("Etc/GMT-8"), ["Mon 2026-06-01T04:00:00Z"]);
    let shanghai = CronSchedule::parse("0 0 12 * * ?", "Asia/Shanghai").unwrap();
    assert_eq!(
        shanghai.in_zone(utc(from)).to_rfc3339(),
        "2026-06-01T08:00:00+08:00"
    );
    // Strictly after, to the nanosecond, in a named zone as in a fixed one.
    let every_five = |at: &str| next_n("0/5 * * * * ?", "Asia/Shanghai", at, 1);
    assert_eq!(
        every_five("2026-02-01T00:00:05Z"),
        ["Sun 2026-02-01T00:00:10Z"]
    );
    assert_eq!(
        every_five("2026-02-01T00:00:04.999Z"),
        ["Sun 2026-02-01T00:00:05Z"]
    );
    let local = CronSchedule::parse("0 0 12 * * ?", "").unwrap();
    let next = local.next_after(utc(from)).unwrap();
    assert_eq!(next.with_timezone(&Local).hour(), 12);
    assert_eq!(local.time_zone(), "");
    assert_eq!(local.expression(), "0 0 12 * * ?");
    for bad in [
        "Mars/Base",
        "GMT+25",
        "GMT+8:5",
        "GMT8",
        "GMT+",
        "gmt+8",
        "+08:00",
        // Case counts, as in Java's database.
        "asia/shanghai",
        "ASIA/SHANGHAI",
    ] {
        let err = validate_time_zone(bad).unwrap_err().to_string();
        assert!(err.contains(bad) && err.contains("IANA"), "{bad}: {err}");
        assert!(CronSchedule::parse("0 0 12 * * ?", bad).is_err());
    }
}

#[test]
fn daylight_saving_time() {
    let ny = "America/New_York";
    // Spring forward (2026-03-08): 02:30 does not exist and fires at 03:00 EDT.
    assert_eq!(
        next_n("0 30 2 * * ?", ny, "2026-03-08T05:00:00Z", 2),
        ["Sun 2026-03-08T07:00:00Z", "Mon 2026-03-09T06:30:00Z"]
    );
    // Fall back (2026-11-01): 01:30 happens twice and fires once.
    assert_eq!(
        next_n("0 30 1 * * ?", ny, "2026-11-01T04:00:00Z", 2),
        ["Sun 2026-11-01T05:30:00Z", "Mon 2026-11-02T06:30:00Z"]
    );
}

#[test]
fn invalid_expressions_are_named() {
    let cases = [
        ("0 0 12 * *", "5 fields"),
        ("0 0 12 * * ? 2027 x", "8 fields"),
        ("0 0 12 * * *", "must be '?'"),
        ("0 0 12 ? * ?", "only one"),
        ("? 0 12 * * ?", "second"),
        ("0 0 12 1? * ?", "must stand alone"),
        ("0 0 25 * * ?", "hour"),
        ("0 61 * * * ?", "minute"),
        ("0 0 12 L-2 * ?", "L-n"),
        ("0 0 12 ? * 8", "day-of-week"),
        ("0 0 12 ? 13 *", "month"),
        ("0 0 12 32 * ?", "day-of-month"),
        ("0 0 12 * * ? 19x", "year"),
        ("", "0 fields"),
    ];
    for (cron, needle) in cases {
        let err = CronSchedule::parse(cron, "UTC").unwrap_err().to_string();
        assert!(err.contains(needle), "{cron:?}: {err}");
        assert!(err.contains(&format!("{cron:?}")), "{cron:?}: {err}");
    }
}

#[test]
fn schedules_of_one_pattern_share_its_parse() {
    let a = CronSchedule::parse("3 1/7 * * * ? 2090", "UTC").unwrap();
    let b = CronSchedule::parse("3  1/7 * * * ?   2090", "Asia/Shanghai").unwrap();
    let other = CronSchedule::parse("4 1/7 * * * ? 2090", "UTC").unwrap();
    assert!(Arc::ptr_eq(&a.cron, &b.cron), "same fields, same parse");
    assert!(!Arc::ptr_eq(&a.cron, &other.cron));
    // Sharing changes no answer: each schedule keeps its own zone.
    let t = utc("2090-01-01T00:00:00Z");
    assert_eq!(
        a.next_after(t).unwrap().to_rfc3339(),
        "2090-01-01T00:01:03+00:00"
    );
    assert_eq!(
        b.next_after(t).unwrap().to_rfc3339(),
        "2090-01-01T00:01:03+00:00"
    );
    // Once no schedule holds a pattern, parsing it again gives a working schedule.
    drop((a, b));
    let again = CronSchedule::parse("3 1/7 * * * ? 2090", "UTC").unwrap();
    assert_eq!(
        again.next_after(t).unwrap().to_rfc3339(),
        "2090-01-01T00:01:03+00:00"
    );
    assert_eq!(Arc::strong_count(&again.cron), 1);
}
