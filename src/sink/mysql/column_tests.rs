use super::*;

fn json(t: &str) -> Value {
    serde_json::from_str(t).unwrap()
}

fn of(data_type: &str, column_type: &str) -> MysqlColumnKind {
    MysqlColumnKind::of(&Described {
        data_type: data_type.into(),
        column_type: column_type.into(),
        ..Described::default()
    })
}

fn sent(value: &str, kind: &MysqlColumnKind) -> Result<Option<String>, String> {
    text(&json(value), kind)
}

#[test]
fn integer_columns_refuse_fractions_that_mysql_would_round() {
    let int = of("int", "int(11)");
    assert_eq!(sent("1e3", &int).unwrap().as_deref(), Some("1000"));
    assert_eq!(sent("\"12\"", &int).unwrap().as_deref(), Some("12"));
    assert_eq!(sent("\" +12 \"", &int).unwrap().as_deref(), Some("12"));
    assert!(sent("12.5", &int).unwrap_err().contains("not an integer"));
    assert!(
        sent("\"12.5\"", &int)
            .unwrap_err()
            .contains("not an integer"),
        "MySQL rounds a string too"
    );
    assert!(sent("3000000000", &int).is_err());
    assert_eq!(
        sent("\"12abc\"", &int).unwrap().as_deref(),
        Some("12abc"),
        "not a number: the server refuses it (1265)"
    );
    assert_eq!(sent("true", &int).unwrap().as_deref(), Some("1"));
    assert_eq!(
        sent("12.5", &MysqlColumnKind::Other).unwrap().as_deref(),
        Some("12.5")
    );
}

#[test]
fn every_integer_width_and_signedness_takes_its_whole_range() {
    for (data_type, bits) in [
        ("tinyint", 8),
        ("smallint", 16),
        ("mediumint", 24),
        ("int", 32),
        ("integer", 32),
        ("bigint", 64),
    ] {
        let signed = of(data_type, &format!("{data_type}(20)"));
        let unsigned = of(data_type, &format!("{data_type}(20) unsigned"));
        let (low, high) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
        let most = (1i128 << bits) - 1;
        for (kind, fits, beyond) in [
            (&signed, [low, high], [low - 1, high + 1]),
            (&unsigned, [0, most], [-1, most + 1]),
        ] {
            for v in fits {
                let sent = sent(&v.to_string(), kind).unwrap();
                assert_eq!(sent, Some(v.to_string()), "{data_type} {kind:?}");
            }
            for v in beyond {
                let e = sent(&v.to_string(), kind).unwrap_err();
                assert!(e.contains("out of range"), "{data_type} {v}: {e}");
            }
        }
    }
    let zerofill = of("bigint", "bigint(20) unsigned zerofill");
    assert_eq!(
        sent("18446744073709551615", &zerofill).unwrap().as_deref(),
        Some("18446744073709551615")
    );
}

#[test]
fn decimals_and_floats_are_never_rounded_beyond_their_type() {
    let decimal = MysqlColumnKind::of(&Described {
        data_type: "decimal".into(),
        column_type: "decimal(10,2)".into(),
        numeric_precision: Some(10),
        numeric_scale: Some(2),
        ..Described::default()
    });
    assert_eq!(
        decimal,
        MysqlColumnKind::Decimal {
            precision: 10,
            scale: 2
        }
    );
    assert_eq!(sent("12.50", &decimal).unwrap().as_deref(), Some("12.50"));
    assert!(
        sent("12.345", &decimal)
            .unwrap_err()
            .contains("not rounded")
    );
    assert!(sent("\"12.345\"", &decimal).is_err());
    assert!(sent("1e-7", &decimal).is_err());
    let double = of("double", "double");
    assert_eq!(
        double,
        MysqlColumnKind::Float {
            float: Float::Double,
            scale: None
        }
    );
    assert_eq!(
        sent("9007199254740993", &double).unwrap().as_deref(),
        Some("9007199254740993"),
        "rounded by the server to the nearest double, as documented"
    );
    assert!(sent("1e-400", &double).unwrap_err().contains("stored as 0"));
    assert!(sent("1e400", &double).is_err());
    assert!(sent("1e-50", &of("float", "float")).is_err());
    let float_7_4 = MysqlColumnKind::Float {
        float: Float::Single,
        scale: Some(4),
    };
    assert!(sent("0.12345", &float_7_4).is_err());
    assert_eq!(
        sent("0.1234", &float_7_4).unwrap().as_deref(),
        Some("0.1234")
    );
}

#[test]
fn strings_fit_their_column_or_are_refused() {
    let varchar = MysqlColumnKind::of(&Described {
        data_type: "varchar".into(),
        column_type: "varchar(5)".into(),
        max_chars: Some(5),
        max_bytes: Some(20),
        ..Described::default()
    });
    assert_eq!(
        sent("\"abcde\"", &varchar).unwrap().as_deref(),
        Some("abcde")
    );
    assert!(
        sent("\"abcde \"", &varchar).is_err(),
        "MySQL cuts the space"
    );
    assert!(sent("123456", &varchar).is_err());
    assert_eq!(sent("true", &varchar).unwrap().as_deref(), Some("1"));
    let char5 = MysqlColumnKind::of(&Described {
        data_type: "char".into(),
        column_type: "char(5)".into(),
        max_chars: Some(5),
        max_bytes: Some(20),
        ..Described::default()
    });
    assert_eq!(sent("\"ab\"", &char5).unwrap().as_deref(), Some("ab"));
    assert!(sent("\"ab \"", &char5).is_err());
    assert_eq!(
        sent("[1, 2]", &of("text", "text")).unwrap().as_deref(),
        Some("[1,2]")
    );
}

#[test]
fn time_columns_get_utc_in_their_precision() {
    let kind = MysqlColumnKind::of(&Described {
        data_type: "timestamp".into(),
        column_type: "timestamp(3)".into(),
        datetime_precision: Some(3),
        ..Described::default()
    });
    assert_eq!(kind, MysqlColumnKind::DateTime { precision: 3 });
    assert_eq!(
        sent("\"2024-01-02T03:04:05.5+01:00\"", &kind)
            .unwrap()
            .as_deref(),
        Some("2024-01-02 02:04:05.500")
    );
    assert!(sent("\"2024-01-02T03:04:05.5555Z\"", &kind).is_err());
    assert!(sent("20240102", &kind).unwrap_err().contains("as a string"));
    assert!(sent("true", &of("date", "date")).is_err());
    assert_eq!(
        sent("\"2024-01-02T00:00:00Z\"", &of("date", "date"))
            .unwrap()
            .as_deref(),
        Some("2024-01-02")
    );
}
