//! Kubernetes label selectors in the string syntax `kubectl -l` and
//! apimachinery's `labels.Parse` accept, with the same validation and
//! matching semantics.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// A conjunction of requirements; the empty selector matches everything.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid label selector {input:?}: {reason}")]
pub struct LabelSelectorError {
    pub input: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    // `=` and `==` mean the same, so they share a variant.
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

impl LabelSelector {
    /// Whether every requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True for the selector that matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        // Absent keys satisfy the negative operators, as in apimachinery.
        match (&self.op, value) {
            (Op::Equals(want), Some(v)) => v == want,
            (Op::In(set), Some(v)) => set.contains(v),
            (Op::NotEquals(want), Some(v)) => v != want,
            (Op::NotIn(set), Some(v)) => !set.contains(v),
            (Op::NotEquals(_) | Op::NotIn(_), None) => true,
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::GreaterThan(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
            (Op::LessThan(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
            (Op::Equals(_) | Op::In(_) | Op::GreaterThan(_) | Op::LessThan(_), None) => false,
        }
    }
}

/// Canonical form that parses back to an equal selector.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        let list = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(",");
        match &self.op {
            Op::Equals(v) => write!(f, "{key}={v}"),
            Op::NotEquals(v) => write!(f, "{key}!={v}"),
            Op::In(set) => write!(f, "{key} in ({})", list(set)),
            Op::NotIn(set) => write!(f, "{key} notin ({})", list(set)),
            Op::Exists => write!(f, "{key}"),
            Op::DoesNotExist => write!(f, "!{key}"),
            Op::GreaterThan(n) => write!(f, "{key}>{n}"),
            Op::LessThan(n) => write!(f, "{key}<{n}"),
        }
    }
}

impl FromStr for LabelSelector {
    type Err = LabelSelectorError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        Parser::new(input)
            .selector()
            .map(|requirements| LabelSelector { requirements })
            .map_err(|reason| LabelSelectorError {
                input: input.to_string(),
                reason,
            })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    // Includes the words `in` and `notin`: whether they are operators
    // depends on position, so the parser decides.
    Ident(&'a str),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Token::Ident(s) => s,
            Token::Not => "!",
            Token::Eq => "=",
            Token::DoubleEq => "==",
            Token::NotEq => "!=",
            Token::Gt => ">",
            Token::Lt => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::End => return f.write_str("end of input"),
        };
        write!(f, "{s:?}")
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '<' | '>')
}

fn lex(input: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut rest = input;
    loop {
        rest = rest.trim_start();
        let mut chars = rest.chars();
        let Some(c) = chars.next() else {
            tokens.push(Token::End);
            return tokens;
        };
        let next = chars.next();
        let (token, len) = match (c, next) {
            ('=', Some('=')) => (Token::DoubleEq, 2),
            ('!', Some('=')) => (Token::NotEq, 2),
            ('=', _) => (Token::Eq, 1),
            ('!', _) => (Token::Not, 1),
            ('>', _) => (Token::Gt, 1),
            ('<', _) => (Token::Lt, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            (',', _) => (Token::Comma, 1),
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || is_special(c))
                    .unwrap_or(rest.len());
                (Token::Ident(&rest[..len]), len)
            }
        };
        tokens.push(token);
        rest = &rest[len..];
    }
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser {
            tokens: lex(input),
            pos: 0,
        }
    }

    fn peek(&self) -> Token<'a> {
        self.tokens.get(self.pos).copied().unwrap_or(Token::End)
    }

    fn next(&mut self) -> Token<'a> {
        let t = self.peek();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        if self.peek() == Token::End {
            return Ok(requirements);
        }
        loop {
            requirements.push(self.requirement()?);
            match self.next() {
                Token::End => return Ok(requirements),
                Token::Comma => {}
                t => {
                    return Err(format!(
                        "expected \",\" or end of input after requirement \"{}\", found {t}",
                        requirements
                            .last()
                            .map(ToString::to_string)
                            .unwrap_or_default()
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let negated = self.peek() == Token::Not;
        if negated {
            self.next();
        }
        let key = match self.next() {
            Token::Ident(k) => k,
            Token::Comma if !negated => return Err("empty requirement".into()),
            Token::End if !negated => return Err("trailing \",\"".into()),
            Token::Eq | Token::DoubleEq | Token::NotEq | Token::Gt | Token::Lt if !negated => {
                return Err("empty key".into());
            }
            t if negated => return Err(format!("expected a key after \"!\", found {t}")),
            t => return Err(format!("expected a key, found {t}")),
        };
        validate_key(key)?;
        let key = key.to_string();
        if negated {
            return match self.peek() {
                Token::End | Token::Comma => Ok(Requirement {
                    key,
                    op: Op::DoesNotExist,
                }),
                t => Err(format!("\"!{key}\" takes no operator or value, found {t}")),
            };
        }
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(Requirement {
                key,
                op: Op::Exists,
            });
        }
        let op = match self.next() {
            Token::Eq => Op::Equals(self.exact_value("=")?),
            Token::DoubleEq => Op::Equals(self.exact_value("==")?),
            Token::NotEq => Op::NotEquals(self.exact_value("!=")?),
            Token::Ident("in") => Op::In(self.value_list("in")?),
            Token::Ident("notin") => Op::NotIn(self.value_list("notin")?),
            Token::Gt => Op::GreaterThan(self.integer(">")?),
            Token::Lt => Op::LessThan(self.integer("<")?),
            t => {
                return Err(format!(
                    "expected an operator (=, ==, !=, in, notin, >, <) after key {key:?}, found {t}"
                ));
            }
        };
        Ok(Requirement { key, op })
    }

    /// A single value; empty when the requirement ends right after the
    /// operator (`k=` selects an empty value, as in apimachinery).
    fn exact_value(&mut self, op: &str) -> Result<String, String> {
        match self.peek() {
            Token::End | Token::Comma => Ok(String::new()),
            Token::Ident(v) => {
                self.next();
                validate_value(v)?;
                Ok(v.to_string())
            }
            t => Err(format!("expected a value after {op:?}, found {t}")),
        }
    }

    fn integer(&mut self, op: &str) -> Result<i64, String> {
        match self.peek() {
            Token::Ident(v) => {
                self.next();
                validate_value(v)?;
                v.parse()
                    .map_err(|_| format!("value {v:?} after {op:?} is not an integer"))
            }
            t => Err(format!("expected an integer after {op:?}, found {t}")),
        }
    }

    /// `( v, v, ... )`; empty entries stand for the empty value, as
    /// apimachinery reads `()`, `(a,)` and `(,a)`.
    fn value_list(&mut self, op: &str) -> Result<BTreeSet<String>, String> {
        match self.next() {
            Token::Open => {}
            t => return Err(format!("expected \"(\" after {op:?}, found {t}")),
        }
        let mut values = BTreeSet::new();
        loop {
            match self.peek() {
                Token::Ident(v) => {
                    self.next();
                    validate_value(v)?;
                    values.insert(v.to_string());
                }
                Token::Comma | Token::Close => {
                    values.insert(String::new());
                }
                Token::End => return Err(format!("missing \")\" after the values of {op:?}")),
                t => {
                    return Err(format!(
                        "expected a value, \",\" or \")\" in the values of {op:?}, found {t}"
                    ));
                }
            }
            match self.next() {
                Token::Comma => {}
                Token::Close => return Ok(values),
                Token::End => return Err(format!("missing \")\" after the values of {op:?}")),
                t => {
                    return Err(format!(
                        "expected \",\" or \")\" in the values of {op:?}, found {t}"
                    ));
                }
            }
        }
    }
}

const NAME_CHARS: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// A label name or value body: `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_qualified_name_part(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    alnum(s.chars().next())
        && alnum(s.chars().next_back())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// RFC 1123 subdomain, as Kubernetes checks label key prefixes.
fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let alnum =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        alnum(label.chars().next())
            && alnum(label.chars().next_back())
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    })
}

fn validate_key(key: &str) -> Result<(), String> {
    key_problem(key).map_or(Ok(()), |p| {
        Err(format!("label key {key:?} is not valid: {p}"))
    })
}

fn key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((_, name)) if name.contains('/') => {
            return Some("at most one '/' is allowed".into());
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if prefix.len() > 253 {
            return Some("prefix part must be no more than 253 characters".into());
        }
        if !is_dns_subdomain(prefix) {
            return Some(
                "prefix part must be a lowercase RFC 1123 subdomain: dot-separated labels of \
                 lowercase alphanumerics and '-', each starting and ending with an alphanumeric"
                    .into(),
            );
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    if !is_qualified_name_part(name) {
        return Some(format!("name part {NAME_CHARS}"));
    }
    None
}

fn validate_value(value: &str) -> Result<(), String> {
    let problem = if value.len() > 63 {
        "must be no more than 63 characters".to_string()
    } else if !value.is_empty() && !is_qualified_name_part(value) {
        NAME_CHARS.to_string()
    } else {
        return Ok(());
    };
    Err(format!("label value {value:?} is not valid: {problem}"))
}

#[cfg(test)]
mod tests {
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
}
