use super::*;

#[test]
fn digits_are_the_exact_value_in_any_notation() {
    let d = |t: &str| Digits::parse(t).map(|d| (d.negative, d.digits, d.exponent));
    assert_eq!(d("1e3"), Some((false, "1".into(), 3)));
    assert_eq!(d("1000.000"), d("1E+3"));
    assert_eq!(d("-12.50"), Some((true, "125".into(), -1)));
    assert_eq!(d("+.5"), Some((false, "5".into(), -1)));
    assert_eq!(d("5."), Some((false, "5".into(), 0)));
    assert_eq!(d("-0.0e7"), Some((false, String::new(), 0)));
    assert_eq!(d("1e99999999999999999999").unwrap().2, EXPONENT_LIMIT);
    assert_eq!(d("1e-99999999999999999999").unwrap().2, -EXPONENT_LIMIT);
    for not in [
        "", "-", ".", "e5", "1e", "1e+", "12abc", "0x10", " 1", "1.2.3", "--1",
    ] {
        assert_eq!(d(not), None, "{not:?}");
    }
}

#[test]
fn integers_in_any_notation_and_nothing_else() {
    let within = |t: &str| integer_within(t, i64::MIN.into(), i64::MAX.into());
    assert_eq!(within("1e3"), Ok(1000));
    assert_eq!(within("1000.0"), Ok(1000));
    assert_eq!(within("-12.50E1"), Ok(-125));
    assert_eq!(within("0e999999"), Ok(0));
    assert_eq!(within("-0.0"), Ok(0));
    assert_eq!(within("+42"), Ok(42));
    assert_eq!(within("-9223372036854775808"), Ok(i64::MIN.into()));
    assert!(within("9223372036854775808").is_err());
    assert!(within("1e400").unwrap_err().contains("out of range"));
    assert!(within("1.5").unwrap_err().contains("not an integer"));
    assert!(within("1e-1").is_err());
    assert!(within("1e-99999999999999999999").is_err());
    assert_eq!(
        integer_within("18446744073709551615", 0, u64::MAX.into()),
        Ok(u64::MAX.into())
    );
    assert!(integer_within("32768", i16::MIN.into(), i16::MAX.into()).is_err());
}

#[test]
fn decimals_fit_their_precision_and_scale_or_are_refused() {
    assert_eq!(decimal_within("12.34", 10, 2), Ok(()));
    assert_eq!(decimal_within("12.340000", 10, 2), Ok(()));
    assert_eq!(decimal_within("1e3", 10, 2), Ok(()));
    assert_eq!(decimal_within("99999999.99", 10, 2), Ok(()));
    assert_eq!(decimal_within("-0", 10, 2), Ok(()));
    assert_eq!(decimal_within("0e-400", 10, 2), Ok(()));
    let e = decimal_within("12.345", 10, 2).unwrap_err();
    assert!(e.contains("3 decimal places; the column keeps 2"), "{e}");
    assert!(decimal_within("1e-7", 10, 2).is_err(), "would be 0.00");
    assert!(
        decimal_within("100000000", 10, 2)
            .unwrap_err()
            .contains("8 digits")
    );
    assert!(decimal_within("1e400", 65, 30).is_err());
    assert_eq!(
        decimal_within("0.123456789012345678901234567890", 65, 30),
        Ok(())
    );
    // PostgreSQL's numeric(2,-3): multiples of 1000 below 100000.
    assert_eq!(decimal_within("12000", 2, -3), Ok(()));
    assert!(
        decimal_within("12500", 2, -3)
            .unwrap_err()
            .contains("multiple of 1e3")
    );
    assert!(decimal_within("120000", 2, -3).is_err());
}

#[test]
fn floats_round_to_the_nearest_but_never_overflow_or_vanish() {
    for near in [
        "0.1",
        "9007199254740993",
        "123456789012345678901234567890",
        "-0",
    ] {
        assert_eq!(float_within(near, Float::Double), Ok(()), "{near}");
        assert_eq!(float_within(near, Float::Single), Ok(()), "{near}");
    }
    assert_eq!(float_within("1e-310", Float::Double), Ok(()), "subnormal");
    assert_eq!(float_within("1e39", Float::Double), Ok(()));
    let e = float_within("1e39", Float::Single).unwrap_err();
    assert!(e.contains("out of range for single precision"), "{e}");
    assert!(
        float_within("1e400", Float::Double)
            .unwrap_err()
            .contains("out of range")
    );
    assert!(float_within("-1e400", Float::Double).is_err());
    let e = float_within("1e-400", Float::Double).unwrap_err();
    assert!(e.contains("stored as 0"), "{e}");
    assert!(
        float_within("1e-50", Float::Single)
            .unwrap_err()
            .contains("stored as 0")
    );
    assert_eq!(float_within("0e-999", Float::Single), Ok(()));
}

#[test]
fn strings_fit_their_length_in_characters_and_bytes() {
    let varchar = TextLimit {
        chars: Some(5),
        bytes: Some(20),
        padded: false,
    };
    assert_eq!(varchar.check("abcde"), Ok(()));
    assert_eq!(varchar.check("😀😀😀😀😀"), Ok(()));
    assert!(
        varchar
            .check("abcde ")
            .unwrap_err()
            .contains("6 characters")
    );
    let bytes = TextLimit {
        bytes: Some(4),
        ..TextLimit::default()
    };
    assert!(bytes.check("ééé").unwrap_err().contains("6 bytes"));
    let char5 = TextLimit {
        padded: true,
        ..varchar
    };
    assert_eq!(char5.check("ab"), Ok(()));
    assert!(char5.check("ab ").is_err());
    assert_eq!(TextLimit::default().check(&"x".repeat(100_000)), Ok(()));
}

#[test]
fn fractions_of_seconds_are_counted_in_every_form() {
    assert_eq!(fraction_digits("2024-05-01T10:00:00Z"), 0);
    assert_eq!(fraction_digits("2024-05-01T10:00:00.120+02:00"), 2);
    assert_eq!(fraction_digits("2024-05-01T10:00:00.123456789Z"), 9);
    assert_eq!(fraction_digits("2024-05-01T10:00:00.0000000001-01:00"), 10);
    assert_eq!(fraction_digits("2024-5-1 10:0:0.5"), 1);
    assert_eq!(fraction_digits("20240501100000.5"), 1);
    assert_eq!(fraction_digits("2024.05.01"), 0);
    assert_eq!(fraction_digits("2024-05-01"), 0);
    assert!(fraction_within("2024-05-01 10:00:00.5", 0).is_err());
    assert_eq!(fraction_within("2024-05-01 10:00:00.500", 1), Ok(()));
}
