//! A document read into a small tree (elements in an arena, their text), enough to
//! canonicalize a signed part of it and to read the values DIAN checks. Built over quick-xml's
//! reader. Deliberately not a general XML library: no DTD (a document with one is refused, as
//! are entity references other than XML's five and character references), no processing
//! instructions or comments kept (canonicalization without comments drops them), and names are
//! kept as written (`cbc:ID`), resolved to their namespace on demand.
//!
//! Anything it reads may come from a stranger (the sandbox DIAN's requests) or from another
//! system (DIAN's answers), so a document's shape is bounded before it can cost anything: its
//! depth, its number of elements and of namespace declarations (`Limits`). Nothing here or in
//! `c14n` recurses, so no document can exhaust a thread's stack.

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

/// The namespace of `xml:` names, bound without a declaration.
pub const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";

/// Why a document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the document is not well-formed XML: {0}")]
    Syntax(String),
    #[error("the document declares a DTD, which is not accepted")]
    Doctype,
    #[error("the document uses the undeclared entity `&{0};`")]
    Entity(String),
    #[error("the prefix `{0}` is not declared")]
    Prefix(String),
    #[error("the document has no root element")]
    Empty,
    #[error("the document is too large: {0}")]
    TooLarge(&'static str),
    #[error("`{0}` is not an XML name")]
    Name(String),
    #[error("the document holds a character XML does not allow (U+{0:04X})")]
    Character(u32),
}

/// The most a document may hold. DIAN's documents and web-service envelopes are far inside
/// them: an invoice nests about fifteen levels, declares a few dozen namespaces and has some
/// thirty elements per line.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub depth: usize,
    pub elements: usize,
    pub namespace_declarations: usize,
    pub attributes_per_element: usize,
}

impl Limits {
    pub const DOCUMENT: Limits = Limits {
        depth: 64,
        elements: 200_000,
        namespace_declarations: 256,
        attributes_per_element: 64,
    };
}

/// One element: its name as written, its namespace declarations and other attributes (values
/// as the parser reports them, normalized and unescaped), and its children in order.
#[derive(Clone, Debug, Default)]
pub struct Element {
    pub parent: Option<usize>,
    pub name: String,
    /// `(prefix, uri)`; the default namespace has the prefix `""`.
    pub namespaces: Vec<(String, String)>,
    /// `(name as written, value)`.
    pub attributes: Vec<(String, String)>,
    pub children: Vec<Child>,
    /// One past the last element of its subtree: elements are numbered in document order,
    /// so `index..end` are the element and all its descendants.
    pub end: usize,
}

#[derive(Clone, Debug)]
pub enum Child {
    Element(usize),
    Text(String),
}

/// A read document: element 0 is the root.
#[derive(Clone, Debug)]
pub struct Tree {
    pub elements: Vec<Element>,
}

impl Tree {
    /// Reads `text` within `Limits::DOCUMENT`. Line ends are normalized to `\n` and attribute
    /// values as XML 1.0 says.
    pub fn parse(text: &str) -> Result<Tree, ReadError> {
        Self::parse_within(text, Limits::DOCUMENT)
    }

    /// Reads `text`, refusing it as soon as it passes one of `limits`.
    pub fn parse_within(text: &str, limits: Limits) -> Result<Tree, ReadError> {
        let mut reader = Reader::from_str(text);
        reader.config_mut().expand_empty_elements = true;
        let mut elements: Vec<Element> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        let mut declarations = 0usize;
        let syntax = |err: quick_xml::Error| ReadError::Syntax(err.to_string());
        loop {
            match reader.read_event().map_err(syntax)? {
                Event::Start(start) => {
                    let parent = open.last().copied();
                    if parent.is_none() && !elements.is_empty() {
                        return Err(ReadError::Syntax("more than one root element".into()));
                    }
                    if open.len() >= limits.depth {
                        return Err(ReadError::TooLarge("elements nest too deep"));
                    }
                    if elements.len() >= limits.elements {
                        return Err(ReadError::TooLarge("too many elements"));
                    }
                    let element = read_start(&start, parent, limits)?;
                    declarations += element.namespaces.len();
                    if declarations > limits.namespace_declarations {
                        return Err(ReadError::TooLarge("too many namespace declarations"));
                    }
                    let index = elements.len();
                    elements.push(element);
                    if let Some(parent) = parent {
                        elements[parent].children.push(Child::Element(index));
                    }
                    open.push(index);
                }
                Event::End(_) => {
                    if let Some(closed) = open.pop() {
                        elements[closed].end = elements.len();
                    }
                }
                Event::Text(text) => {
                    let text = text.xml10_content();
                    allowed_characters(&text)?;
                    if let Some(&current) = open.last() {
                        push_text(&mut elements[current], &text);
                    }
                }
                Event::CData(data) => {
                    let data = data.xml10_content();
                    allowed_characters(&data)?;
                    if let Some(&current) = open.last() {
                        push_text(&mut elements[current], &data);
                    }
                }
                Event::GeneralRef(reference) => {
                    let name = reference.xml10_content();
                    let resolved = match reference.resolve_char_ref() {
                        Ok(Some(ch)) => ch.to_string(),
                        Ok(None) => predefined(&name)
                            .ok_or_else(|| ReadError::Entity(name.to_string()))?
                            .to_owned(),
                        Err(err) => return Err(ReadError::Syntax(err.to_string())),
                    };
                    allowed_characters(&resolved)?;
                    if let Some(&current) = open.last() {
                        push_text(&mut elements[current], &resolved);
                    }
                }
                Event::DocType(_) => return Err(ReadError::Doctype),
                Event::Empty(_) => {
                    // Never reported: empty elements are expanded into a start and an end.
                }
                Event::Comment(_) | Event::Decl(_) | Event::PI(_) => {}
                Event::Eof => break,
            }
        }
        if !open.is_empty() {
            return Err(ReadError::Syntax("an element is not closed".into()));
        }
        if elements.is_empty() {
            return Err(ReadError::Empty);
        }
        Ok(Tree { elements })
    }

    pub fn root(&self) -> usize {
        0
    }

    /// The namespace bound to `prefix` at `element` (the default namespace for `""`), if any.
    pub fn namespace_of(&self, element: usize, prefix: &str) -> Option<&str> {
        if prefix == "xml" {
            return Some(XML_NS);
        }
        let mut at = Some(element);
        while let Some(index) = at {
            let here = &self.elements[index];
            if let Some((_, uri)) = here.namespaces.iter().find(|(p, _)| p == prefix) {
                return Some(uri.as_str()).filter(|uri| !uri.is_empty());
            }
            at = here.parent;
        }
        None
    }

    /// An element's expanded name: its namespace (empty when none) and local name.
    pub fn expanded(&self, element: usize) -> (&str, &str) {
        let (prefix, local) = split(&self.elements[element].name);
        (self.namespace_of(element, prefix).unwrap_or(""), local)
    }

    /// Whether `element` is `local` in namespace `ns`.
    pub fn is(&self, element: usize, ns: &str, local: &str) -> bool {
        self.expanded(element) == (ns, local)
    }

    /// The child elements of `element`, in order.
    pub fn child_elements(&self, element: usize) -> impl Iterator<Item = usize> + '_ {
        self.elements[element]
            .children
            .iter()
            .filter_map(|child| match child {
                Child::Element(index) => Some(*index),
                Child::Text(_) => None,
            })
    }

    /// The first child of `element` named `local` in `ns`.
    pub fn child(&self, element: usize, ns: &str, local: &str) -> Option<usize> {
        self.child_elements(element)
            .find(|&c| self.is(c, ns, local))
    }

    /// Every child of `element` named `local` in `ns`.
    pub fn children<'a>(
        &'a self,
        element: usize,
        ns: &'a str,
        local: &'a str,
    ) -> impl Iterator<Item = usize> + 'a {
        self.child_elements(element)
            .filter(move |&c| self.is(c, ns, local))
    }

    /// Follows `path` from `element`, one child named `(ns, local)` per step.
    pub fn path(&self, element: usize, path: &[(&str, &str)]) -> Option<usize> {
        path.iter()
            .try_fold(element, |at, (ns, local)| self.child(at, ns, local))
    }

    /// Every element below `element` (itself included), in document order.
    pub fn descendants(&self, element: usize) -> std::ops::Range<usize> {
        element..self.elements[element].end
    }

    /// The element whose attribute `Id` (or `wsu:Id`, any prefix) is `id`.
    pub fn by_id(&self, id: &str) -> Option<usize> {
        (0..self.elements.len()).find(|&index| {
            self.elements[index]
                .attributes
                .iter()
                .any(|(name, value)| split(name).1 == "Id" && value == id)
        })
    }

    /// The concatenated text directly inside `element`.
    pub fn text(&self, element: usize) -> String {
        self.elements[element]
            .children
            .iter()
            .filter_map(|child| match child {
                Child::Text(text) => Some(text.as_str()),
                Child::Element(_) => None,
            })
            .collect()
    }

    /// The value of the attribute written `name` (no namespace resolution: our attributes
    /// are unprefixed).
    pub fn attribute(&self, element: usize, name: &str) -> Option<&str> {
        self.elements[element]
            .attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    }
}

/// `prefix:local` → `("prefix", "local")`; an unprefixed name has the prefix `""`.
pub fn split(name: &str) -> (&str, &str) {
    name.split_once(':').unwrap_or(("", name))
}

fn predefined(name: &str) -> Option<&'static str> {
    Some(match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        _ => return None,
    })
}

/// XML 1.0's `Name`: a name start character, then name characters. The reader underneath
/// is lenient about names; a name it let through that XML does not allow would be written
/// back by the canonicalizer as a document nobody can read.
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(is_name_start) && chars.all(is_name_char)
}

fn is_name_start(c: char) -> bool {
    matches!(c,
        ':' | '_' | 'A'..='Z' | 'a'..='z'
        | '\u{C0}'..='\u{D6}' | '\u{D8}'..='\u{F6}' | '\u{F8}'..='\u{2FF}'
        | '\u{370}'..='\u{37D}' | '\u{37F}'..='\u{1FFF}' | '\u{200C}'..='\u{200D}'
        | '\u{2070}'..='\u{218F}' | '\u{2C00}'..='\u{2FEF}' | '\u{3001}'..='\u{D7FF}'
        | '\u{F900}'..='\u{FDCF}' | '\u{FDF0}'..='\u{FFFD}' | '\u{10000}'..='\u{EFFFF}')
}

fn is_name_char(c: char) -> bool {
    is_name_start(c)
        || matches!(c,
            '-' | '.' | '0'..='9' | '\u{B7}' | '\u{300}'..='\u{36F}' | '\u{203F}'..='\u{2040}')
}

/// XML 1.0's `Char`: no C0 control other than tab, line feed and carriage return, and not
/// U+FFFE or U+FFFF (Rust's `char` has no surrogates). The only kind of text DIAN's schemas,
/// and the canonical form, can carry.
fn allowed_characters(text: &str) -> Result<(), ReadError> {
    match text.chars().find(|&c| {
        (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{FFFE}' || c == '\u{FFFF}'
    }) {
        Some(c) => Err(ReadError::Character(u32::from(c))),
        None => Ok(()),
    }
}

fn push_text(element: &mut Element, text: &str) {
    if let Some(Child::Text(last)) = element.children.last_mut() {
        last.push_str(text);
    } else {
        element.children.push(Child::Text(text.to_owned()));
    }
}

fn read_start(
    start: &BytesStart<'_>,
    parent: Option<usize>,
    limits: Limits,
) -> Result<Element, ReadError> {
    let name = start.name().as_ref().to_owned();
    if !is_name(&name) {
        return Err(ReadError::Name(name));
    }
    let mut element = Element {
        parent,
        name,
        ..Element::default()
    };
    for attribute in start.attributes() {
        let attribute = attribute.map_err(|err| ReadError::Syntax(err.to_string()))?;
        if element.attributes.len() + element.namespaces.len() >= limits.attributes_per_element {
            return Err(ReadError::TooLarge("too many attributes on an element"));
        }
        let key = attribute.key.as_ref().to_owned();
        if !is_name(&key) {
            return Err(ReadError::Name(key));
        }
        let value = attribute
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|err| ReadError::Syntax(err.to_string()))?
            .into_owned();
        allowed_characters(&value)?;
        if key == "xmlns" {
            element.namespaces.push((String::new(), value));
        } else if let Some(prefix) = key.strip_prefix("xmlns:") {
            element.namespaces.push((prefix.to_owned(), value));
        } else {
            element.attributes.push((key, value));
        }
    }
    Ok(element)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_to_the_nearest_declaration() {
        let tree = Tree::parse(
            r#"<?xml version="1.0"?><a xmlns="urn:a" xmlns:b="urn:b"><b:c Id="x">1 &amp; 2&#x41;</b:c><d xmlns="urn:d"/></a>"#,
        )
        .expect("reads");
        assert_eq!(tree.expanded(0), ("urn:a", "a"));
        let c = tree.by_id("x").expect("found");
        assert_eq!(tree.expanded(c), ("urn:b", "c"));
        assert_eq!(tree.text(c), "1 & 2A");
        let d = tree.child(0, "urn:d", "d").expect("d");
        assert_eq!(tree.descendants(0).collect::<Vec<_>>(), vec![0, c, d]);
        assert_eq!(tree.descendants(c).collect::<Vec<_>>(), vec![c]);
    }

    #[test]
    fn a_dtd_or_an_unknown_entity_is_refused() {
        assert!(matches!(
            Tree::parse(r#"<!DOCTYPE a [<!ENTITY e "x">]><a>&e;</a>"#),
            Err(ReadError::Doctype)
        ));
        assert!(matches!(
            Tree::parse("<a>&e;</a>"),
            Err(ReadError::Entity(_))
        ));
        assert!(Tree::parse("<a><b></a>").is_err());
        assert!(Tree::parse("<a><b></b>").is_err());
    }

    /// The fuzzer's first finding: a name XML does not allow, read, was written back by the
    /// canonicalizer as a document that could not be read again. Control characters too.
    #[test]
    fn names_and_characters_xml_does_not_allow_are_refused() {
        assert!(matches!(
            Tree::parse("<\u{1}&z<//>"),
            Err(ReadError::Name(_) | ReadError::Syntax(_))
        ));
        assert!(matches!(Tree::parse("<1a/>"), Err(ReadError::Name(_))));
        assert!(matches!(
            Tree::parse("<a b<=\"1\"/>"),
            Err(ReadError::Name(_) | ReadError::Syntax(_))
        ));
        assert!(matches!(
            Tree::parse("<a>\u{1}</a>"),
            Err(ReadError::Character(1))
        ));
        assert!(matches!(
            Tree::parse("<a>&#x1b;</a>"),
            Err(ReadError::Character(0x1b))
        ));
        assert!(matches!(
            Tree::parse("<a b=\"\u{7}\"/>"),
            Err(ReadError::Character(7))
        ));
        let fine =
            Tree::parse("<cbc:Name xml:lang=\"es\">Peña\tY\r\nCía</cbc:Name>").expect("reads");
        assert_eq!(fine.text(0), "Peña\tY\nCía");
    }

    /// What a stranger's request crashed the service with: 5,000 nested elements.
    #[test]
    fn a_document_nested_deeper_than_the_limit_is_refused() {
        let deep = format!("{}{}", "<a>".repeat(5_000), "</a>".repeat(5_000));
        assert!(matches!(Tree::parse(&deep), Err(ReadError::TooLarge(_))));
        let depth = Limits::DOCUMENT.depth;
        let deepest = format!("{}{}", "<a>".repeat(depth), "</a>".repeat(depth));
        assert!(Tree::parse(&deepest).is_ok());
    }

    #[test]
    fn too_many_elements_or_namespace_declarations_are_refused() {
        let limits = Limits {
            elements: 10,
            ..Limits::DOCUMENT
        };
        let wide = format!("<a>{}</a>", "<b/>".repeat(10));
        assert!(matches!(
            Tree::parse_within(&wide, limits),
            Err(ReadError::TooLarge(_))
        ));
        let declarations: String = (0..300)
            .map(|n| format!("<b xmlns:p{n}=\"urn:{n}\"/>"))
            .collect();
        assert!(matches!(
            Tree::parse(&format!("<a>{declarations}</a>")),
            Err(ReadError::TooLarge(_))
        ));
        let attributes: String = (0..100).map(|n| format!(" x{n}=\"1\"")).collect();
        assert!(matches!(
            Tree::parse(&format!("<a{attributes}/>")),
            Err(ReadError::TooLarge(_))
        ));
    }

    /// A comb (each level a leaf and the next level) made `descendants` quadratic.
    #[test]
    fn descendants_of_a_comb_are_every_element_below_in_document_order() {
        let depth = Limits::DOCUMENT.depth - 1;
        let comb = format!("{}{}", "<a><leaf/>".repeat(depth), "</a>".repeat(depth));
        let tree = Tree::parse(&comb).expect("reads");
        let all: Vec<usize> = tree.descendants(0).collect();
        assert_eq!(all, (0..tree.elements.len()).collect::<Vec<_>>());
        let second = tree.child_elements(0).nth(1).expect("the next level");
        assert_eq!(tree.descendants(second).start, second);
        assert_eq!(tree.descendants(second).end, tree.elements.len());
    }
}
