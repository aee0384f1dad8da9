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

    /// [`matches`](Self::matches) the labels `labels` gives, asked for
    /// only when there is a requirement to test: an item's labels may be
    /// read back from the spool, and the empty selector needs none.
    pub fn matches_with(&self, labels: impl FnOnce() -> BTreeMap<String, String>) -> bool {
        self.is_empty() || self.matches(&labels())
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

/// A structured selector (matchLabels and matchExpressions, as kube's
/// Selector holds them once converted from a metav1.LabelSelector), as
/// requirements: expression by expression, no text in between. kube's
/// Selector has no parser for the string form plugins send and no `>`/`<`,
/// so the string form keeps its own requirements, and both forms are
/// matched by the one matcher above.
impl From<kube_core::Selector> for LabelSelector {
    fn from(selector: kube_core::Selector) -> Self {
        use kube_core::Expression as E;
        let requirements = selector
            .into_iter()
            .map(|e| {
                let (key, op) = match e {
                    E::In(k, set) => (k, Op::In(set)),
                    E::NotIn(k, set) => (k, Op::NotIn(set)),
                    E::Equal(k, v) => (k, Op::Equals(v)),
                    E::NotEqual(k, v) => (k, Op::NotEquals(v)),
                    E::Exists(k) => (k, Op::Exists),
                    E::DoesNotExist(k) => (k, Op::DoesNotExist),
                };
                Requirement { key, op }
            })
            .collect();
        LabelSelector { requirements }
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

/// A label key as apimachinery's `validateLabelKey` checks it; the reason
/// names the key and the rule. Also for keys of the structured form
/// (select/label_object.rs): kube's Selector validates none.
pub(super) fn validate_key(key: &str) -> Result<(), String> {
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

/// A label value as apimachinery's `validateLabelValue` checks it; for
/// the structured form too.
pub(super) fn validate_value(value: &str) -> Result<(), String> {
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
mod tests;
