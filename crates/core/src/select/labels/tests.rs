use super::*;
use proptest::prelude::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse(s: &str) -> LabelSelector {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

fn reason(s: &str) -> String {
    match s.parse::<LabelSelector>() {
        Ok(sel) => panic!("{s:?} should not parse, got {sel:?}"),
        Err(e) => {
            assert_eq!(e.input, s);
            e.reason
        }
    }
}

fn set(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| v.to_string()).collect()
}

fn req(key: &str, op: Op) -> Requirement {
    Requirement {
        key: key.into(),
        op,
    }
}

#[test]
fn empty_and_blank_select_everything() {
    for s in ["", " ", "\t\n "] {
        let sel = parse(s);
        assert!(sel.is_empty());
        assert_eq!(sel, LabelSelector::default());
        assert!(sel.matches(&labels(&[])));
        assert!(sel.matches(&labels(&[("a", "b")])));
    }
    assert!(!parse("a").is_empty());
}

#[test]
fn valid_forms() {
    let cases: Vec<(&str, Vec<Requirement>)> = vec![
        ("a=b", vec![req("a", Op::Equals("b".into()))]),
        ("a==b", vec![req("a", Op::Equals("b".into()))]),
        ("a!=b", vec![req("a", Op::NotEquals("b".into()))]),
        ("a", vec![req("a", Op::Exists)]),
        ("!a", vec![req("a", Op::DoesNotExist)]),
        ("! a", vec![req("a", Op::DoesNotExist)]),
        ("a in (x,y)", vec![req("a", Op::In(set(&["x", "y"])))]),
        ("a in(x)", vec![req("a", Op::In(set(&["x"])))]),
        (
            "a notin (x, y ,z)",
            vec![req("a", Op::NotIn(set(&["x", "y", "z"])))],
        ),
        ("a in (y,x,y)", vec![req("a", Op::In(set(&["x", "y"])))]),
        ("a>5", vec![req("a", Op::GreaterThan(5))]),
        ("a < 10", vec![req("a", Op::LessThan(10))]),
        ("a=", vec![req("a", Op::Equals(String::new()))]),
        (
            "a!=,b",
            vec![req("a", Op::NotEquals(String::new())), req("b", Op::Exists)],
        ),
        ("a in ()", vec![req("a", Op::In(set(&[""])))]),
        ("a in (x,)", vec![req("a", Op::In(set(&["x", ""])))]),
        ("a in (,x)", vec![req("a", Op::In(set(&["", "x"])))]),
        ("a in (x,,y)", vec![req("a", Op::In(set(&["x", "", "y"])))]),
        (
            "  app.kubernetes.io/name = web ,  tier  in ( front , back ) , !legacy,env ",
            vec![
                req("app.kubernetes.io/name", Op::Equals("web".into())),
                req("tier", Op::In(set(&["front", "back"]))),
                req("legacy", Op::DoesNotExist),
                req("env", Op::Exists),
            ],
        ),
        // `in`/`notin` are operators only after a key.
        ("in=notin", vec![req("in", Op::Equals("notin".into()))]),
        (
            "in in (in,notin)",
            vec![req("in", Op::In(set(&["in", "notin"])))],
        ),
        ("notin", vec![req("notin", Op::Exists)]),
        ("a=in", vec![req("a", Op::Equals("in".into()))]),
        (
            "A_b.c-D=X_y.z-9",
            vec![req("A_b.c-D", Op::Equals("X_y.z-9".into()))],
        ),
        (
            "example.com/a=b",
            vec![req("example.com/a", Op::Equals("b".into()))],
        ),
        ("a\t=\tb", vec![req("a", Op::Equals("b".into()))]),
        (
            "a=b,a=c",
            vec![
                req("a", Op::Equals("b".into())),
                req("a", Op::Equals("c".into())),
            ],
        ),
    ];
    for (input, want) in cases {
        assert_eq!(parse(input).requirements, want, "{input:?}");
    }
}

#[test]
fn limits_are_inclusive() {
    let name63 = "n".repeat(63);
    let prefix253 = format!("{}.{}", "p".repeat(126), "q".repeat(126));
    assert_eq!(prefix253.len(), 253);
    parse(&format!("{prefix253}/{name63}={name63}"));
    let r = reason(&format!("{}={name63}", "n".repeat(64)));
    assert!(
        r.ends_with("name part must be no more than 63 characters"),
        "{r}"
    );
    let r = reason(&format!("a={}", "v".repeat(64)));
    assert!(r.ends_with("must be no more than 63 characters"), "{r}");
    assert!(r.starts_with("label value \"vvv"), "{r}");
    let r = reason(&format!("{prefix253}p/a"));
    assert!(
        r.ends_with("prefix part must be no more than 253 characters"),
        "{r}"
    );
}

#[test]
fn error_reasons() {
    let cases: &[(&str, &str)] = &[
        ("=b", "empty key"),
        ("==b", "empty key"),
        ("!=b", "empty key"),
        (">1", "empty key"),
        (",a", "empty requirement"),
        ("a,,b", "empty requirement"),
        ("a,", "trailing \",\""),
        ("!", "expected a key after \"!\", found end of input"),
        ("!!a", "expected a key after \"!\", found \"!\""),
        ("!=", "empty key"),
        ("!(a)", "expected a key after \"!\", found \"(\""),
        ("(a)", "expected a key, found \"(\""),
        (")", "expected a key, found \")\""),
        ("!a=b", "\"!a\" takes no operator or value, found \"=\""),
        (
            "!a in (b)",
            "\"!a\" takes no operator or value, found \"in\"",
        ),
        (
            "a b",
            "expected an operator (=, ==, !=, in, notin, >, <) after key \"a\", found \"b\"",
        ),
        (
            "a (b)",
            "expected an operator (=, ==, !=, in, notin, >, <) after key \"a\", found \"(\"",
        ),
        ("a in b", "expected \"(\" after \"in\", found \"b\""),
        ("a in", "expected \"(\" after \"in\", found end of input"),
        ("a notin b", "expected \"(\" after \"notin\", found \"b\""),
        ("a in (b", "missing \")\" after the values of \"in\""),
        ("a in (b,", "missing \")\" after the values of \"in\""),
        ("a in (", "missing \")\" after the values of \"in\""),
        (
            "a in (b c)",
            "expected \",\" or \")\" in the values of \"in\", found \"c\"",
        ),
        (
            "a notin (=)",
            "expected a value, \",\" or \")\" in the values of \"notin\", found \"=\"",
        ),
        ("a=(b)", "expected a value after \"=\", found \"(\""),
        ("a==!b", "expected a value after \"==\", found \"!\""),
        ("a!==b", "expected a value after \"!=\", found \"=\""),
        (
            "a=b c",
            "expected \",\" or end of input after requirement \"a=b\", found \"c\"",
        ),
        (
            "a=b=c",
            "expected \",\" or end of input after requirement \"a=b\", found \"=\"",
        ),
        (
            "a=b)",
            "expected \",\" or end of input after requirement \"a=b\", found \")\"",
        ),
        (
            "a in (b))",
            "expected \",\" or end of input after requirement \"a in (b)\", found \")\"",
        ),
        ("a>b", "value \"b\" after \">\" is not an integer"),
        ("a<1.5", "value \"1.5\" after \"<\" is not an integer"),
        ("a>", "expected an integer after \">\", found end of input"),
        ("a<,b", "expected an integer after \"<\", found \",\""),
        (
            "a>99999999999999999999",
            "value \"99999999999999999999\" after \">\" is not an integer",
        ),
        (
            "a>-1",
            "label value \"-1\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "a=x@y",
            "label value \"x@y\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "a=-x",
            "label value \"-x\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "a=x.",
            "label value \"x.\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "a in (ok,b/c)",
            "label value \"b/c\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "-a=b",
            "label key \"-a\" is not valid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "a.=b",
            "label key \"a.\" is not valid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "a:b",
            "label key \"a:b\" is not valid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "/a",
            "label key \"/a\" is not valid: prefix part must be non-empty",
        ),
        (
            "a/",
            "label key \"a/\" is not valid: name part must be non-empty",
        ),
        (
            "a/b/c",
            "label key \"a/b/c\" is not valid: at most one '/' is allowed",
        ),
        (
            "Example.com/a",
            "label key \"Example.com/a\" is not valid: prefix part must be a lowercase RFC 1123 subdomain: dot-separated labels of lowercase alphanumerics and '-', each starting and ending with an alphanumeric",
        ),
        (
            "a..b/c",
            "label key \"a..b/c\" is not valid: prefix part must be a lowercase RFC 1123 subdomain: dot-separated labels of lowercase alphanumerics and '-', each starting and ending with an alphanumeric",
        ),
        (
            "a_b/c",
            "label key \"a_b/c\" is not valid: prefix part must be a lowercase RFC 1123 subdomain: dot-separated labels of lowercase alphanumerics and '-', each starting and ending with an alphanumeric",
        ),
        (
            "!-a",
            "label key \"-a\" is not valid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
        (
            "ключ=v",
            "label key \"ключ\" is not valid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(reason(input), *want, "{input:?}");
    }
}

#[test]
fn error_display_names_input() {
    let err = "a in b".parse::<LabelSelector>().err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("invalid label selector \"a in b\": expected \"(\" after \"in\", found \"b\"")
    );
}

#[test]
fn matching_semantics() {
    // (selector, labels, expected)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let cases: &[Case] = &[
        ("a=b", &[("a", "b")], true),
        ("a=b", &[("a", "c")], false),
        ("a=b", &[], false),
        ("a==b", &[("a", "b")], true),
        ("a=", &[("a", "")], true),
        ("a=", &[], false),
        ("a=", &[("a", "x")], false),
        // != and notin hold when the key is absent.
        ("a!=b", &[], true),
        ("a!=b", &[("x", "b")], true),
        ("a!=b", &[("a", "b")], false),
        ("a!=b", &[("a", "c")], true),
        ("a notin (b,c)", &[], true),
        ("a notin (b,c)", &[("a", "b")], false),
        ("a notin (b,c)", &[("a", "d")], true),
        ("a in (b,c)", &[("a", "c")], true),
        ("a in (b,c)", &[("a", "d")], false),
        ("a in (b,c)", &[], false),
        ("a in ()", &[("a", "")], true),
        ("a in ()", &[("a", "x")], false),
        ("a", &[("a", "")], true),
        ("a", &[], false),
        ("!a", &[], true),
        ("!a", &[("a", "")], false),
        ("a>5", &[("a", "6")], true),
        ("a>5", &[("a", "5")], false),
        ("a>5", &[("a", "x")], false),
        ("a>5", &[], false),
        ("a<5", &[("a", "-7")], true),
        ("a<5", &[("a", "5")], false),
        ("a<5", &[], false),
        ("a=b,c!=d", &[("a", "b"), ("c", "e")], true),
        ("a=b,c!=d", &[("a", "b"), ("c", "d")], false),
        ("a=b,!c", &[("a", "b"), ("c", "d")], false),
        ("a=b,a=c", &[("a", "b")], false),
        // Keys are case-sensitive.
        ("App=web", &[("app", "web")], false),
        (
            "app.kubernetes.io/name=web",
            &[("app.kubernetes.io/name", "web")],
            true,
        ),
    ];
    for (sel, ls, want) in cases {
        assert_eq!(parse(sel).matches(&labels(ls)), *want, "{sel:?} on {ls:?}");
    }
}

#[test]
fn display_is_canonical() {
    let cases = [
        ("a==b", "a=b"),
        (" a = b ,c", "a=b,c"),
        ("a in (y, x, y)", "a in (x,y)"),
        ("a notin ()", "a notin ()"),
        ("a in (x,)", "a in (,x)"),
        ("! a", "!a"),
        ("a > 007", "a>7"),
        ("a<3", "a<3"),
        ("a!=", "a!="),
        ("", ""),
    ];
    for (input, want) in cases {
        let shown = parse(input).to_string();
        assert_eq!(shown, want, "{input:?}");
        assert_eq!(parse(&shown), parse(input), "{input:?}");
    }
}

fn name_part() -> impl Strategy<Value = String> {
    "[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?"
}

fn key() -> impl Strategy<Value = String> {
    let prefix = "[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,4}[a-z0-9])?){0,3}";
    (proptest::option::of(prefix), name_part()).prop_map(|(p, n)| match p {
        Some(p) => format!("{p}/{n}"),
        None => n,
    })
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), name_part(), Just("in".to_string())]
}

fn op() -> impl Strategy<Value = Op> {
    let values = || proptest::collection::btree_set(value(), 1..4);
    prop_oneof![
        value().prop_map(Op::Equals),
        value().prop_map(Op::NotEquals),
        values().prop_map(Op::In),
        values().prop_map(Op::NotIn),
        Just(Op::Exists),
        Just(Op::DoesNotExist),
        (0..i64::MAX).prop_map(Op::GreaterThan),
        (0..i64::MAX).prop_map(Op::LessThan),
    ]
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    proptest::collection::vec((key(), op()), 0..5).prop_map(|reqs| LabelSelector {
        requirements: reqs
            .into_iter()
            .map(|(key, op)| Requirement { key, op })
            .collect(),
    })
}

proptest! {
    #[test]
    fn display_round_trips(sel in selector()) {
        let shown = sel.to_string();
        let back: LabelSelector = shown.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(back, sel);
    }

    #[test]
    fn parser_never_panics(s in "[a-z0-9 =!(),<>/._-]{0,24}") {
        if let Ok(sel) = s.parse::<LabelSelector>() {
            // Whatever parses must reparse from its canonical form.
            prop_assert_eq!(sel.to_string().parse::<LabelSelector>(), Ok(sel));
        }
    }

    #[test]
    fn parser_never_panics_on_any_text(s in "\\PC{0,32}") {
        let _ = s.parse::<LabelSelector>();
    }

    #[test]
    fn negations_are_complements(k in key(), v in name_part(), present in any::<bool>(), actual in name_part()) {
        let ls = if present { labels(&[(k.as_str(), actual.as_str())]) } else { BTreeMap::new() };
        let eq = parse(&format!("{k}={v}")).matches(&ls);
        let ne = parse(&format!("{k}!={v}")).matches(&ls);
        prop_assert_ne!(eq, ne);
        let inn = parse(&format!("{k} in ({v})")).matches(&ls);
        let notin = parse(&format!("{k} notin ({v})")).matches(&ls);
        prop_assert_ne!(inn, notin);
        prop_assert_eq!(eq, inn);
    }
}
