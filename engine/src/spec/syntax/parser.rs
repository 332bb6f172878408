//! A parser for RON text into a [`Node`] tree.
//!
//! It accepts the RON grammar that job specs use: structs and tuples with or without a
//! name, unit identifiers, lists, maps, strings (escaped and raw), characters, integers
//! (decimal, hex, octal, binary, with `_` separators), floats (with exponents, `inf`,
//! `NaN`), booleans, comments, trailing commas and `#![enable(...)]` attributes (ignored:
//! `Some` is always implicit here). Every node records where it starts.

use super::{
    cursor::Cursor,
    value::{Field, Node, Value},
};
use crate::spec::{Origin, SpecError};

/// Parses a whole document: one value, optionally preceded by `#![enable(...)]` attributes.
pub fn parse_document(text: &str, origin: &Origin) -> Result<Node, SpecError> {
    parse_with(text, origin, 1)
}

/// Parses one value whose text starts at column `first_col` of its origin (an override).
pub fn parse_value(text: &str, origin: &Origin, first_col: usize) -> Result<Node, SpecError> {
    parse_with(text, origin, first_col)
}

fn parse_with(text: &str, origin: &Origin, first_col: usize) -> Result<Node, SpecError> {
    // Editors on some systems start UTF-8 files with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser { c: Cursor::new(text, origin, first_col), depth: 0 };
    p.c.skip_trivia()?;
    p.attributes()?;
    let node = p.value()?;
    p.c.skip_trivia()?;
    if !p.c.at_end() {
        return Err(p.c.error_here(format!("expected the end of the input after the value, found {}", p.c.found())));
    }
    Ok(node)
}

/// Deeper nesting than any spec needs is refused, rather than overflowing the stack.
const MAX_DEPTH: usize = 128;

struct Parser<'t> {
    c: Cursor<'t>,
    depth: usize,
}

impl Parser<'_> {
    fn attributes(&mut self) -> Result<(), SpecError> {
        while self.c.peek() == Some('#') && self.c.peek_at(1) == Some('!') {
            let start = self.c.loc();
            while let Some(ch) = self.c.bump() {
                if ch == ']' {
                    break;
                }
                if self.c.at_end() {
                    return Err(self.c.error_at(start, "unterminated `#![...]` attribute"));
                }
            }
            self.c.skip_trivia()?;
        }
        Ok(())
    }

    fn value(&mut self) -> Result<Node, SpecError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.c.error_here(format!("values nested deeper than {MAX_DEPTH} levels")));
        }
        let out = self.value_inner();
        self.depth -= 1;
        out
    }

    fn value_inner(&mut self) -> Result<Node, SpecError> {
        let loc = self.c.loc();
        let value = match self.c.peek() {
            Some('[') => self.list()?,
            Some('{') => self.map()?,
            Some('(') => self.parens(None)?,
            Some('"') => Value::Str(self.string()?),
            Some('r') if matches!(self.c.peek_at(1), Some('"' | '#')) && self.raw_string_ahead() => {
                Value::Str(self.raw_string()?)
            }
            Some('\'') => Value::Char(self.char_literal()?),
            Some(c) if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => self.number()?,
            Some(_) => match self.c.ident() {
                Some(word) => self.after_ident(word)?,
                None => return Err(self.c.error_here(format!("expected a value, found {}", self.c.found()))),
            },
            None => return Err(self.c.error_here("expected a value, found the end of the input")),
        };
        Ok(Node::new(loc, value))
    }

    fn after_ident(&mut self, word: String) -> Result<Value, SpecError> {
        match word.as_str() {
            "true" => return Ok(Value::Bool(true)),
            "false" => return Ok(Value::Bool(false)),
            "inf" => return Ok(Value::Float(f64::INFINITY)),
            "NaN" => return Ok(Value::Float(f64::NAN)),
            _ => {}
        }
        // `Name (` with whitespace between is still a named value in RON.
        self.c.skip_trivia()?;
        if self.c.peek() == Some('(') { self.parens(Some(word)) } else { Ok(Value::Ident(word)) }
    }

    fn list(&mut self) -> Result<Value, SpecError> {
        let open = self.c.loc();
        self.c.bump();
        let mut items = Vec::new();
        loop {
            self.c.skip_trivia()?;
            if self.c.eat(']') {
                return Ok(Value::List(items));
            }
            if self.c.at_end() {
                return Err(self.c.error_at(open, "this `[` is never closed"));
            }
            items.push(self.value()?);
            if !self.separator(']', "between list elements")? {
                return Ok(Value::List(items));
            }
        }
    }

    fn map(&mut self) -> Result<Value, SpecError> {
        let open = self.c.loc();
        self.c.bump();
        let mut entries: Vec<(Node, Node)> = Vec::new();
        loop {
            self.c.skip_trivia()?;
            if self.c.eat('}') {
                return Ok(Value::Map(entries));
            }
            if self.c.at_end() {
                return Err(self.c.error_at(open, "this `{` is never closed"));
            }
            let key = self.value()?;
            if entries.iter().any(|(k, _)| k.value == key.value) {
                return Err(self
                    .c
                    .error_at(key.loc.clone(), format!("map key {} is given twice", key.value.describe())));
            }
            self.c.skip_trivia()?;
            self.c.expect(':', "after a map key")?;
            self.c.skip_trivia()?;
            let value = self.value()?;
            entries.push((key, value));
            if !self.separator('}', "between map entries")? {
                return Ok(Value::Map(entries));
            }
        }
    }

    /// After an element: `,` (then maybe the closer) or the closer. Returns whether more
    /// elements may follow; consumes the closer when it ends the sequence.
    fn separator(&mut self, close: char, context: &str) -> Result<bool, SpecError> {
        self.c.skip_trivia()?;
        if self.c.eat(',') {
            return Ok(true);
        }
        if self.c.eat(close) {
            return Ok(false);
        }
        Err(self.c.error_here(format!("expected `,` or `{close}` {context}, found {}", self.c.found())))
    }

    /// `(...)`: a struct if the first thing inside is `name:`, else a tuple.
    fn parens(&mut self, name: Option<String>) -> Result<Value, SpecError> {
        let open = self.c.loc();
        self.c.bump();
        self.c.skip_trivia()?;
        if self.is_field_ahead() {
            return self.struct_fields(name, open);
        }
        let mut items = Vec::new();
        loop {
            self.c.skip_trivia()?;
            if self.c.eat(')') {
                return Ok(Value::Tuple { name, items });
            }
            if self.c.at_end() {
                return Err(self.c.error_at(open, "this `(` is never closed"));
            }
            items.push(self.value()?);
            if !self.separator(')', "between tuple elements")? {
                return Ok(Value::Tuple { name, items });
            }
        }
    }

    fn struct_fields(&mut self, name: Option<String>, open: crate::spec::Location) -> Result<Value, SpecError> {
        let mut fields: Vec<Field> = Vec::new();
        loop {
            self.c.skip_trivia()?;
            if self.c.eat(')') {
                return Ok(Value::Struct { name, fields });
            }
            if self.c.at_end() {
                return Err(self.c.error_at(open, "this `(` is never closed"));
            }
            let name_loc = self.c.loc();
            let Some(field) = self.c.ident() else {
                return Err(self.c.error_here(format!("expected a field name, found {}", self.c.found())));
            };
            if fields.iter().any(|f| f.name == field) {
                return Err(self.c.error_at(name_loc, format!("field `{field}` is given twice")));
            }
            self.c.skip_trivia()?;
            self.c.expect(':', &format!("after field name `{field}`"))?;
            self.c.skip_trivia()?;
            let value = self.value()?;
            fields.push(Field { name: field, name_loc, value });
            if !self.separator(')', "between struct fields")? {
                return Ok(Value::Struct { name, fields });
            }
        }
    }

    /// Whether an identifier followed by `:` comes next (without consuming anything).
    fn is_field_ahead(&self) -> bool {
        let mut i = 0;
        if self.c.peek() == Some('r') && self.c.peek_at(1) == Some('#') {
            i = 2;
        }
        if !self.c.peek_at(i).is_some_and(|c| c.is_ascii_alphabetic() || c == '_') {
            return false;
        }
        while self.c.peek_at(i).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            i += 1;
        }
        while self.c.peek_at(i).is_some_and(char::is_whitespace) {
            i += 1;
        }
        self.c.peek_at(i) == Some(':') && self.c.peek_at(i + 1) != Some(':')
    }

    fn string(&mut self) -> Result<String, SpecError> {
        let start = self.c.loc();
        self.c.bump();
        let mut s = String::new();
        loop {
            match self.c.bump() {
                None => return Err(self.c.error_at(start, "this string is never closed")),
                Some('"') => return Ok(s),
                Some('\\') => s.push(self.escape()?),
                Some(ch) => s.push(ch),
            }
        }
    }

    fn char_literal(&mut self) -> Result<char, SpecError> {
        let start = self.c.loc();
        self.c.bump();
        let ch = match self.c.bump() {
            Some('\\') => self.escape()?,
            Some(ch) if ch != '\'' => ch,
            _ => return Err(self.c.error_at(start, "expected one character between `'`")),
        };
        if !self.c.eat('\'') {
            return Err(self.c.error_at(start, "expected one character between `'`"));
        }
        Ok(ch)
    }

    fn escape(&mut self) -> Result<char, SpecError> {
        let at = self.c.loc();
        let bad = |p: &Self, what: &str| p.c.error_at(at.clone(), format!("invalid escape: {what}"));
        match self.c.bump() {
            Some('n') => Ok('\n'),
            Some('t') => Ok('\t'),
            Some('r') => Ok('\r'),
            Some('0') => Ok('\0'),
            Some('\\') => Ok('\\'),
            Some('"') => Ok('"'),
            Some('\'') => Ok('\''),
            Some('x') => {
                let hex: String = (0..2).filter_map(|_| self.c.bump()).collect();
                u8::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|b| b.is_ascii())
                    .map(char::from)
                    .ok_or_else(|| bad(self, "\\x needs two hex digits below 80"))
            }
            Some('u') => {
                if !self.c.eat('{') {
                    return Err(bad(self, "\\u needs `{`"));
                }
                let mut hex = String::new();
                while let Some(ch) = self.c.bump() {
                    if ch == '}' {
                        break;
                    }
                    hex.push(ch);
                }
                u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| bad(self, "\\u{...} is not a character"))
            }
            Some(ch) => Err(bad(self, &format!("`\\{ch}`"))),
            None => Err(bad(self, "the input ends")),
        }
    }

    fn raw_string_ahead(&self) -> bool {
        let mut i = 1;
        while self.c.peek_at(i) == Some('#') {
            i += 1;
        }
        self.c.peek_at(i) == Some('"')
    }

    fn raw_string(&mut self) -> Result<String, SpecError> {
        let start = self.c.loc();
        self.c.bump();
        let mut hashes = 0;
        while self.c.eat('#') {
            hashes += 1;
        }
        self.c.bump();
        let mut s = String::new();
        loop {
            match self.c.bump() {
                None => return Err(self.c.error_at(start, "this raw string is never closed")),
                Some('"') if (0..hashes).all(|k| self.c.peek_at(k) == Some('#')) => {
                    for _ in 0..hashes {
                        self.c.bump();
                    }
                    return Ok(s);
                }
                Some(ch) => s.push(ch),
            }
        }
    }

    fn number(&mut self) -> Result<Value, SpecError> {
        let start = self.c.loc();
        let mut text = String::new();
        if let Some(sign @ ('-' | '+')) = self.c.peek() {
            text.push(sign);
            self.c.bump();
        }
        if let Some(word) = self.c.ident() {
            return match word.as_str() {
                "inf" => Ok(Value::Float(if text == "-" { f64::NEG_INFINITY } else { f64::INFINITY })),
                "NaN" => Ok(Value::Float(f64::NAN)),
                _ => Err(self.c.error_at(start, format!("expected a number, found `{text}{word}`"))),
            };
        }
        let radix = match (self.c.peek(), self.c.peek_at(1)) {
            (Some('0'), Some('x')) => 16,
            (Some('0'), Some('o')) => 8,
            (Some('0'), Some('b')) => 2,
            _ => 10,
        };
        if radix != 10 {
            self.c.bump();
            self.c.bump();
            let digits = self.digits(|c| c.is_digit(radix));
            let magnitude = i128::from_str_radix(&digits, radix)
                .map_err(|_| self.c.error_at(start.clone(), format!("invalid base-{radix} integer")))?;
            return Ok(Value::Int(if text == "-" { -magnitude } else { magnitude }));
        }
        let int_part = self.digits(|c| c.is_ascii_digit());
        text.push_str(&int_part);
        let mut is_float = false;
        if self.c.peek() == Some('.') && !self.c.peek_at(1).is_some_and(|c| c.is_ascii_alphabetic() || c == '_') {
            self.c.bump();
            is_float = true;
            text.push('.');
            text.push_str(&self.digits(|c| c.is_ascii_digit()));
        }
        if matches!(self.c.peek(), Some('e' | 'E')) {
            self.c.bump();
            is_float = true;
            text.push('e');
            if let Some(sign @ ('-' | '+')) = self.c.peek() {
                text.push(sign);
                self.c.bump();
            }
            text.push_str(&self.digits(|c| c.is_ascii_digit()));
        }
        if !text.chars().any(|c| c.is_ascii_digit()) {
            return Err(self.c.error_at(start, format!("expected a number, found `{text}`")));
        }
        // A suffix such as `1.0f32` or `3u8`: RON allows it; the type comes from the spec.
        if self.c.peek().is_some_and(|c| c == 'f' || c == 'u' || c == 'i') {
            let suffix = self.c.ident().unwrap_or_default();
            if !matches!(
                suffix.as_str(),
                "f32" | "f64" | "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize"
            ) {
                return Err(self.c.error_at(start, format!("invalid number suffix `{suffix}`")));
            }
            is_float |= suffix.starts_with('f');
        }
        let invalid = |p: &Self| p.c.error_at(start.clone(), format!("invalid number `{text}`"));
        if is_float {
            text.parse::<f64>().map(Value::Float).map_err(|_| invalid(self))
        } else {
            text.parse::<i128>().map(Value::Int).map_err(|_| invalid(self))
        }
    }

    /// Digits accepted by `ok`, with `_` separators dropped.
    fn digits(&mut self, ok: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(ch) = self.c.peek().filter(|&ch| ok(ch) || ch == '_') {
            if ch != '_' {
                s.push(ch);
            }
            self.c.bump();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ErrorKind;

    fn parse(text: &str) -> Result<Node, SpecError> {
        parse_document(text, &Origin::File("t.ron".into()))
    }

    fn syntax_at(text: &str) -> (usize, usize, String) {
        match parse(text) {
            Err(e) => match (e.location(), e.kind()) {
                (Some(l), ErrorKind::Syntax(m)) => (l.line, l.col, m.clone()),
                _ => panic!("expected a located syntax error, got {e:?}"),
            },
            Ok(n) => panic!("expected a syntax error, got {n:?}"),
        }
    }

    #[test]
    fn parses_the_forms_specs_use() -> Result<(), SpecError> {
        let n = parse(
            r##"#![enable(implicit_some)]
            // a comment
            Job(a: [1, -2, 0x1F, 1_000], b: 2.5e-3, c: "s\"q\u{e9}", d: r#"raw "x""#, /* block /* nested */ */
                e: Flatten, f: Dense(units: 3,), g: ("x", Add, ["a"]), h: {"k": [28, 28, 1]}, i: (), j: -inf, k: 'c', l: true)"##,
        )?;
        let Value::Struct { name: Some(name), fields } = &n.value else { panic!("{n:?}") };
        assert_eq!(name, "Job");
        let get = |f: &str| n.field(f).map(|f| f.value.value.clone());
        let Some(Value::List(a)) = get("a") else { panic!() };
        let ints: Vec<_> = a.iter().map(|n| n.value.clone()).collect();
        assert_eq!(ints, vec![Value::Int(1), Value::Int(-2), Value::Int(31), Value::Int(1000)]);
        assert_eq!(get("b"), Some(Value::Float(2.5e-3)));
        assert_eq!(get("c"), Some(Value::Str("s\"qé".into())));
        assert_eq!(get("d"), Some(Value::Str("raw \"x\"".into())));
        assert_eq!(get("e"), Some(Value::Ident("Flatten".into())));
        assert!(matches!(get("f"), Some(Value::Struct { name: Some(n), .. }) if n == "Dense"));
        assert!(matches!(get("g"), Some(Value::Tuple { name: None, items }) if items.len() == 3));
        assert!(matches!(get("h"), Some(Value::Map(e)) if e.len() == 1));
        assert_eq!(get("i"), Some(Value::Tuple { name: None, items: vec![] }));
        assert_eq!(get("j"), Some(Value::Float(f64::NEG_INFINITY)));
        assert_eq!(get("k"), Some(Value::Char('c')));
        assert_eq!(get("l"), Some(Value::Bool(true)));
        assert_eq!(fields.len(), 12);
        Ok(())
    }

    #[test]
    fn nodes_know_their_line_and_column() -> Result<(), SpecError> {
        let n = parse("Job(\n  model: Sequential(\n    layers: [Flatten, Dense(units: 3)],\n  ),\n)")?;
        let layers = &n.field("model").map(|f| &f.value).and_then(|m| m.field("layers")).map(|f| &f.value);
        let Some(Node { value: Value::List(items), loc }) = layers else { panic!() };
        assert_eq!((loc.line, loc.col), (3, 13));
        assert_eq!((items[1].loc.line, items[1].loc.col), (3, 23));
        let units = items[1].field("units").map(|f| (f.name_loc.col, f.value.loc.col));
        assert_eq!(units, Some((29, 36)));
        Ok(())
    }

    #[test]
    fn syntax_errors_point_at_the_problem() {
        let (line, col, _) = syntax_at("Job(a: 1 b: 2)");
        assert_eq!((line, col), (1, 10));
        let (line, col, msg) = syntax_at("Job(\n  a: [1, 2,\n)");
        assert_eq!((line, col), (3, 1), "{msg}");
        let (line, col, msg) = syntax_at("(a: 1, a: 2)");
        assert_eq!((line, col), (1, 8));
        assert!(msg.contains("given twice"), "{msg}");
        let (line, col, msg) = syntax_at("Job(a: \"open");
        assert_eq!((line, col), (1, 8));
        assert!(msg.contains("never closed"), "{msg}");
        let (_, col, _) = syntax_at("(a: 1) extra");
        assert_eq!(col, 8);
        let (_, col, msg) = syntax_at("(a: 1.2.3)");
        assert_eq!(col, 8, "{msg}");
    }

    #[test]
    fn a_byte_order_mark_is_skipped() -> Result<(), SpecError> {
        let n = parse("\u{feff}Job(a: 1)")?;
        assert_eq!((n.loc.line, n.loc.col), (1, 1));
        Ok(())
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let text = "[".repeat(10_000);
        assert!(parse(&text).is_err_and(|e| matches!(e.kind(), ErrorKind::Syntax(_))));
    }
}
