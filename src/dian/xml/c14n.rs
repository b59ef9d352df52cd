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
/// below it) when given. It walks the tree with a stack of its own, not by recursion, so its
/// cost is the document's size whatever its depth.
pub fn canonicalize(
    tree: &Tree,
    apex: usize,
    method: &Method,
    excluded: Option<usize>,
) -> Result<Vec<u8>, ReadError> {
    enum Step<'t> {
        Open {
            element: usize,
            rendered: usize,
            scope: usize,
        },
        Text(&'t str),
        Close(usize),
    }
    let mut out = String::new();
    // What the rendered output has in force, one map per element that declared something;
    // an element that declares nothing shares its parent's.
    let mut rendered: Vec<BTreeMap<&str, &str>> = vec![BTreeMap::new()];
    // The bindings in force at an element, shared the same way; the apex's come from all its
    // ancestors.
    let apex_parent = tree.elements[apex].parent;
    let mut scopes: Vec<BTreeMap<&str, &str>> =
        vec![apex_parent.map(|p| in_scope(tree, p)).unwrap_or_default()];
    let mut steps = vec![Step::Open {
        element: apex,
        rendered: 0,
        scope: 0,
    }];
    while let Some(step) = steps.pop() {
        match step {
            Step::Text(text) => escape_text(text, &mut out),
            Step::Close(element) => {
                out.push_str("</");
                out.push_str(&tree.elements[element].name);
                out.push('>');
            }
            Step::Open {
                element,
                rendered: parent_rendered,
                scope: parent_scope,
            } => {
                let own = &tree.elements[element].namespaces;
                let scope = if own.is_empty() {
                    parent_scope
                } else {
                    let mut scope = scopes[parent_scope].clone();
                    for (prefix, uri) in own {
                        scope.insert(prefix.as_str(), uri.as_str());
                    }
                    scopes.push(scope);
                    scopes.len() - 1
                };
                let declared = open_tag(
                    tree,
                    element,
                    method,
                    &scopes[scope],
                    &rendered[parent_rendered],
                    element == apex,
                    &mut out,
                )?;
                let in_force = match declared {
                    Some(map) => {
                        rendered.push(map);
                        rendered.len() - 1
                    }
                    None => parent_rendered,
                };
                steps.push(Step::Close(element));
                for child in tree.elements[element].children.iter().rev() {
                    match child {
                        Child::Text(text) => steps.push(Step::Text(text)),
                        Child::Element(index) if Some(*index) == excluded => {}
                        Child::Element(index) => steps.push(Step::Open {
                            element: *index,
                            rendered: in_force,
                            scope,
                        }),
                    }
                }
            }
        }
    }
    Ok(out.into_bytes())
}

/// Every namespace binding in force at `element`: prefix → URI (the default as `""`).
fn in_scope(tree: &Tree, element: usize) -> BTreeMap<&str, &str> {
    let mut chain = Vec::new();
    let mut at = Some(element);
    while let Some(index) = at {
        chain.push(index);
        at = tree.elements[index].parent;
    }
    let mut scope = BTreeMap::new();
    for index in chain.into_iter().rev() {
        for (prefix, uri) in &tree.elements[index].namespaces {
            scope.insert(prefix.as_str(), uri.as_str());
        }
    }
    scope
}

/// Writes `element`'s start tag; answers what the output has in force for its children when
/// the tag declared a namespace (`None`: the same as for `element` itself).
fn open_tag<'t>(
    tree: &'t Tree,
    element: usize,
    method: &Method,
    scope: &BTreeMap<&'t str, &'t str>,
    parent_rendered: &BTreeMap<&'t str, &'t str>,
    apex: bool,
    out: &mut String,
) -> Result<Option<BTreeMap<&'t str, &'t str>>, ReadError> {
    let node = &tree.elements[element];
    let (prefix, _) = split(&node.name);
    let attribute_prefixes = node
        .attributes
        .iter()
        .filter(|(name, _)| name.contains(':'))
        .map(|(name, _)| split(name).0);
    // The bindings this element could render. Inclusively, a descendant that declares nothing
    // has exactly its parent's in force, which its parent rendered: nothing to look at.
    // Exclusively, only the prefixes it or its attributes use, and the listed ones, count.
    let wanted: Vec<&str> = match method {
        Method::Inclusive if !apex && node.namespaces.is_empty() => Vec::new(),
        Method::Inclusive => scope.keys().copied().collect(),
        Method::Exclusive(inclusive) => {
            let listed = inclusive
                .iter()
                .map(|p| if p == "#default" { "" } else { p.as_str() });
            let mut candidates: Vec<&str> = listed
                .chain(std::iter::once(prefix))
                .chain(attribute_prefixes)
                .filter_map(|p| scope.get_key_value(p).map(|(&bound, _)| bound))
                .collect();
            candidates.sort_unstable();
            candidates.dedup();
            candidates
        }
    };
    if !prefix.is_empty() && !scope.contains_key(prefix) {
        return Err(ReadError::Prefix(prefix.to_owned()));
    }
    let mut rendered: Option<BTreeMap<&str, &str>> = None;
    let mut declarations: Vec<(&str, &str)> = Vec::new();
    for p in wanted {
        let Some(&uri) = scope.get(p) else { continue };
        let before = parent_rendered.get(p).copied().unwrap_or("");
        if p.is_empty() && uri.is_empty() && before.is_empty() {
            continue;
        }
        if before != uri {
            declarations.push((p, uri));
            rendered
                .get_or_insert_with(|| parent_rendered.clone())
                .insert(p, uri);
        }
    }
    declarations.sort_unstable();

    // Attributes, with inclusive canonicalization's inherited `xml:*` on the apex.
    let mut attributes: Vec<(&str, &str, &str, &str)> = Vec::new();
    for (name, value) in &node.attributes {
        let (p, local) = split(name);
        let ns = if !name.contains(':') {
            ""
        } else if p == "xml" {
            XML_NS
        } else {
            scope
                .get(p)
                .copied()
                .ok_or_else(|| ReadError::Prefix(p.to_owned()))?
        };
        attributes.push((ns, local, name, value));
    }
    let inherited = if apex && *method == Method::Inclusive {
        inherited_xml_attributes(tree, element)
    } else {
        Vec::new()
    };
    for (name, value) in &inherited {
        if !node.attributes.iter().any(|(own, _)| own == name) {
            attributes.push((XML_NS, split(name).1, name, value));
        }
    }
    attributes.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));

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
    Ok(rendered)
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

    /// The deepest document the reader takes is canonicalized without recursion, and a
    /// redeclaration deep inside still renders where its binding changes.
    #[test]
    fn the_deepest_readable_document_canonicalizes() {
        let depth = crate::dian::xml::tree::Limits::DOCUMENT.depth - 1;
        let xml = format!(
            "<r xmlns=\"urn:r\">{}<x xmlns=\"urn:x\"><y/></x>{}</r>",
            "<a>".repeat(depth - 2),
            "</a>".repeat(depth - 2)
        );
        let out = c14n(&xml, None, Method::Inclusive);
        assert!(out.starts_with("<r xmlns=\"urn:r\"><a><a>"));
        assert!(out.contains("<x xmlns=\"urn:x\"><y></y></x>"));
        assert_eq!(out.matches("xmlns").count(), 2);
    }
}
