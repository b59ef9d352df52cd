//! Canonical XML 1.0 (inclusive, without comments) and Exclusive XML Canonicalization 1.0 of
//! an element and its descendants, what XMLDSig digests and signs. The DIAN document's
//! signature uses the inclusive form; the web service's WS-Security header the exclusive one.
//!
//! Both render: namespace declarations sorted by prefix (the default first), then attributes
//! sorted by namespace URI and local name; start and end tags for every element; text with
//! `&`, `<`, `>` and carriage returns escaped, attribute values with `&`, `<`, `"`, tab, line
//! feed and carriage return escaped. The subset is always "an element and everything below
//! it", optionally minus one element (the enveloped-signature transform), so the rules about
//! arbitrary node-sets reduce to: the apex element renders every namespace in scope (inclusive)
//! or every one it or its attributes use (exclusive), and a descendant renders a namespace
//! only where its binding differs from what its rendered parent has in force.

use super::tree::{Child, ReadError, Tree, XML_NS, split};
use std::collections::BTreeMap;

/// Which canonicalization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// `http://www.w3.org/TR/2001/REC-xml-c14n-20010315`.
    Inclusive,
    /// `http://www.w3.org/2001/10/xml-exc-c14n#`, with the prefixes of its
    /// `InclusiveNamespaces PrefixList` (`#default` for the default namespace) treated as
    /// inclusive.
    Exclusive(Vec<String>),
}

pub const INCLUSIVE: &str = "http://www.w3.org/TR/2001/REC-xml-c14n-20010315";
pub const EXCLUSIVE: &str = "http://www.w3.org/2001/10/xml-exc-c14n#";

/// The canonical form of `apex` and its descendants, leaving out `excluded` (and everything
/// below it) when given.
pub fn canonicalize(
    tree: &Tree,
    apex: usize,
    method: &Method,
    excluded: Option<usize>,
) -> Result<Vec<u8>, ReadError> {
    let mut out = String::new();
    let rendered = BTreeMap::new();
    render(tree, apex, method, excluded, &rendered, true, &mut out)?;
    Ok(out.into_bytes())
}

/// Every namespace binding in force at `element`: prefix → URI (the default as `""`).
fn in_scope(tree: &Tree, element: usize) -> BTreeMap<String, String> {
    let mut chain = Vec::new();
    let mut at = Some(element);
    while let Some(index) = at {
        chain.push(index);
        at = tree.elements[index].parent;
    }
    let mut scope = BTreeMap::new();
    for index in chain.into_iter().rev() {
        for (prefix, uri) in &tree.elements[index].namespaces {
            scope.insert(prefix.clone(), uri.clone());
        }
    }
    scope
}

fn render(
    tree: &Tree,
    element: usize,
    method: &Method,
    excluded: Option<usize>,
    parent_rendered: &BTreeMap<String, String>,
    apex: bool,
    out: &mut String,
) -> Result<(), ReadError> {
    let node = &tree.elements[element];
    let scope = in_scope(tree, element);
    let (prefix, _) = split(&node.name);
    if !prefix.is_empty() && !scope.contains_key(prefix) {
        return Err(ReadError::Prefix(prefix.to_owned()));
    }

    // The namespaces this element renders, and what is in force for its children after it.
    let wanted: Vec<&String> = match method {
        Method::Inclusive => scope.keys().collect(),
        Method::Exclusive(inclusive) => scope
            .keys()
            .filter(|p| {
                let listed = if p.is_empty() { "#default" } else { p.as_str() };
                inclusive.iter().any(|i| i == listed)
                    || p.as_str() == prefix
                    || node
                        .attributes
                        .iter()
                        .any(|(name, _)| split(name).0 == p.as_str() && name.contains(':'))
            })
            .collect(),
    };
    let mut rendered = parent_rendered.clone();
    let mut declarations: Vec<(String, String)> = Vec::new();
    for p in wanted {
        let uri = &scope[p];
        let before = parent_rendered.get(p).map(String::as_str).unwrap_or("");
        if p.is_empty() && uri.is_empty() && before.is_empty() {
            continue;
        }
        if before != uri {
            declarations.push((p.clone(), uri.clone()));
            rendered.insert(p.clone(), uri.clone());
        }
    }
    declarations.sort();

    // Attributes, with inclusive canonicalization's inherited `xml:*` on the apex.
    let mut attributes: Vec<(String, String, &str, &str)> = Vec::new();
    for (name, value) in &node.attributes {
        let (p, local) = split(name);
        let ns = if name.contains(':') {
            if p == "xml" {
                XML_NS.to_owned()
            } else {
                scope
                    .get(p)
                    .cloned()
                    .ok_or_else(|| ReadError::Prefix(p.to_owned()))?
            }
        } else {
            String::new()
        };
        attributes.push((ns, local.to_owned(), name, value));
    }
    let inherited = if apex && *method == Method::Inclusive {
        inherited_xml_attributes(tree, element)
    } else {
        Vec::new()
    };
    for (name, value) in &inherited {
        if !node.attributes.iter().any(|(own, _)| own == name) {
            let local = split(name).1.to_owned();
            attributes.push((XML_NS.to_owned(), local, name, value));
        }
    }
    attributes.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));

    out.push('<');
    out.push_str(&node.name);
    for (p, uri) in &declarations {
        out.push_str(if p.is_empty() { " xmlns" } else { " xmlns:" });
        out.push_str(p);
        out.push_str("=\"");
        escape_attribute(uri, out);
        out.push('"');
    }
    for (_, _, name, value) in &attributes {
        out.push(' ');
        out.push_str(name);
        out.push_str("=\"");
        escape_attribute(value, out);
        out.push('"');
    }
    out.push('>');
    for child in &node.children {
        match child {
            Child::Text(text) => escape_text(text, out),
            Child::Element(index) if Some(*index) == excluded => {}
            Child::Element(index) => {
                render(tree, *index, method, excluded, &rendered, false, out)?;
            }
        }
    }
    out.push_str("</");
    out.push_str(&node.name);
    out.push('>');
    Ok(())
}

/// The `xml:*` attributes of the apex's ancestors, the nearest winning.
fn inherited_xml_attributes(tree: &Tree, element: usize) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut at = tree.elements[element].parent;
    while let Some(index) = at {
        for (name, value) in &tree.elements[index].attributes {
            if name.starts_with("xml:") && !found.iter().any(|(n, _)| n == name) {
                found.push((name.clone(), value.clone()));
            }
        }
        at = tree.elements[index].parent;
    }
    found
}

fn escape_text(text: &str, out: &mut String) {
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#xD;"),
            other => out.push(other),
        }
    }
}

fn escape_attribute(value: &str, out: &mut String) {
    for ch in value.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '"' => out.push_str("&quot;"),
            '\t' => out.push_str("&#x9;"),
            '\n' => out.push_str("&#xA;"),
            '\r' => out.push_str("&#xD;"),
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c14n(xml: &str, apex_id: Option<&str>, method: Method) -> String {
        let tree = Tree::parse(xml).expect("reads");
        let apex = apex_id.map_or(0, |id| tree.by_id(id).expect("id"));
        String::from_utf8(canonicalize(&tree, apex, &method, None).expect("c14n")).expect("utf8")
    }

    /// The W3C recommendation's example 3.3 (start and end tags), without its DTD's defaults.
    #[test]
    fn the_recommendations_start_and_end_tags_example() {
        let xml = r#"<doc>
   <e1   />
   <e2   ></e2>
   <e3   name = "elem3"   id="elem3"   />
   <e5 a:attr="out" b:attr="sorted" attr2="all" attr="I'm"
      xmlns:b="http://www.ietf.org"
      xmlns:a="http://www.w3.org"
      xmlns="http://example.org"/>
   <e6 xmlns="" xmlns:a="http://www.w3.org">
      <e7 xmlns="http://www.ietf.org">
         <e8 xmlns="" xmlns:a="http://www.w3.org">
            <e9 xmlns="" xmlns:a="http://www.ietf.org"/>
         </e8>
      </e7>
   </e6>
</doc>"#;
        let expected = r#"<doc>
   <e1></e1>
   <e2></e2>
   <e3 id="elem3" name="elem3"></e3>
   <e5 xmlns="http://example.org" xmlns:a="http://www.w3.org" xmlns:b="http://www.ietf.org" attr="I'm" attr2="all" b:attr="sorted" a:attr="out"></e5>
   <e6 xmlns:a="http://www.w3.org">
      <e7 xmlns="http://www.ietf.org">
         <e8 xmlns="">
            <e9 xmlns:a="http://www.ietf.org"></e9>
         </e8>
      </e7>
   </e6>
</doc>"#;
        assert_eq!(c14n(xml, None, Method::Inclusive), expected);
    }

    #[test]
    fn a_subtree_carries_the_namespaces_in_scope_inclusively_and_only_used_ones_exclusively() {
        let xml = r#"<r xmlns="urn:r" xmlns:a="urn:a" xmlns:u="urn:u"><a:x Id="k" b="1 &amp; &lt;2&gt;"><a:y>t&#13;</a:y></a:x></r>"#;
        assert_eq!(
            c14n(xml, Some("k"), Method::Inclusive),
            r#"<a:x xmlns="urn:r" xmlns:a="urn:a" xmlns:u="urn:u" Id="k" b="1 &amp; &lt;2>"><a:y>t&#xD;</a:y></a:x>"#
        );
        assert_eq!(
            c14n(xml, Some("k"), Method::Exclusive(vec![])),
            r#"<a:x xmlns:a="urn:a" Id="k" b="1 &amp; &lt;2>"><a:y>t&#xD;</a:y></a:x>"#
        );
        assert_eq!(
            c14n(xml, Some("k"), Method::Exclusive(vec!["u".into()])),
            r#"<a:x xmlns:a="urn:a" xmlns:u="urn:u" Id="k" b="1 &amp; &lt;2>"><a:y>t&#xD;</a:y></a:x>"#
        );
    }

    #[test]
    fn the_excluded_element_leaves_no_trace() {
        let tree = Tree::parse(r#"<a><b><s Id="sig"><c/></s></b>x</a>"#).expect("reads");
        let sig = tree.by_id("sig");
        let out = canonicalize(&tree, 0, &Method::Inclusive, sig).expect("c14n");
        assert_eq!(String::from_utf8(out).expect("utf8"), "<a><b></b>x</a>");
    }
}
