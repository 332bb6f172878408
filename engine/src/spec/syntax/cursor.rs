//! A character cursor that knows its line and column, and skips RON's whitespace and
//! comments (`// line`, nested `/* block */`).

use crate::spec::{ErrorKind, FieldPath, Location, Origin, SpecError};

pub(super) struct Cursor<'t> {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    col: usize,
    origin: &'t Origin,
}

impl<'t> Cursor<'t> {
    /// `first_col` lets an override's value report columns within the whole `--set` argument.
    pub fn new(text: &str, origin: &'t Origin, first_col: usize) -> Self {
        Cursor { chars: text.chars().collect(), pos: 0, line: 1, col: first_col, origin }
    }

    pub fn loc(&self) -> Location {
        Location { origin: self.origin.clone(), line: self.line, col: self.col }
    }

    pub fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    pub fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    pub fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    /// Consumes `c` if it is next.
    pub fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    pub fn error_here(&self, message: impl Into<String>) -> SpecError {
        self.error_at(self.loc(), message)
    }

    pub fn error_at(&self, loc: Location, message: impl Into<String>) -> SpecError {
        SpecError::new(Some(loc), FieldPath::root(), ErrorKind::Syntax(message.into()))
    }

    /// What is next, for "expected X, found Y" messages.
    pub fn found(&self) -> String {
        match self.peek() {
            None => "the end of the input".to_string(),
            Some(c) => format!("`{c}`"),
        }
    }

    pub fn expect(&mut self, c: char, context: &str) -> Result<(), SpecError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error_here(format!("expected `{c}` {context}, found {}", self.found())))
        }
    }

    /// Skips whitespace and comments.
    pub fn skip_trivia(&mut self) -> Result<(), SpecError> {
        loop {
            match (self.peek(), self.peek_at(1)) {
                (Some(c), _) if c.is_whitespace() => {
                    self.bump();
                }
                (Some('/'), Some('/')) => {
                    while let Some(c) = self.bump() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                (Some('/'), Some('*')) => self.skip_block_comment()?,
                _ => return Ok(()),
            }
        }
    }

    fn skip_block_comment(&mut self) -> Result<(), SpecError> {
        let start = self.loc();
        self.bump();
        self.bump();
        let mut depth = 1;
        while depth > 0 {
            match (self.bump(), self.peek()) {
                (Some('*'), Some('/')) => {
                    self.bump();
                    depth -= 1;
                }
                (Some('/'), Some('*')) => {
                    self.bump();
                    depth += 1;
                }
                (Some(_), _) => {}
                (None, _) => return Err(self.error_at(start, "unterminated block comment")),
            }
        }
        Ok(())
    }

    /// An identifier (`[A-Za-z_][A-Za-z0-9_]*`, or a raw identifier `r#name`), if one is next.
    pub fn ident(&mut self) -> Option<String> {
        let raw = self.peek() == Some('r') && self.peek_at(1) == Some('#');
        let first = if raw { self.peek_at(2) } else { self.peek() };
        if !first.is_some_and(|c| c.is_ascii_alphabetic() || c == '_') {
            return None;
        }
        if raw {
            self.bump();
            self.bump();
        }
        let mut s = String::new();
        while let Some(c) = self.peek().filter(|c| c.is_ascii_alphanumeric() || *c == '_') {
            s.push(c);
            self.bump();
        }
        Some(s)
    }
}
