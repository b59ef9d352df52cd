//! The XML reader and the canonicalizer the sandbox DIAN runs on a stranger's request, and the
//! filing runs on DIAN's answers (`billing::dian::xml`, `billing::dian::verify`).
//!
//! Properties:
//! - any text is read or refused without panicking, and without exhausting the stack: depth,
//!   elements and namespace declarations are bounded by `Limits::DOCUMENT`;
//! - a read tree's `descendants` of the root are all its elements, in order, and each
//!   element's subtree lies inside its parent's;
//! - canonicalizing any element, either way, never panics; the inclusive canonical form of
//!   the root, read again, canonicalizes to itself (it is a fixed point);
//! - `verify` judges any document without panicking, and no document verifies without a
//!   signature made with its key (the fuzzer cannot make one).
#![no_main]

use billing::dian::verify::verify;
use billing::dian::xml::c14n::{Method, canonicalize};
use billing::dian::xml::tree::Tree;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(tree) = Tree::parse(text) else {
        return;
    };
    let count = tree.elements.len();
    assert_eq!(tree.descendants(tree.root()), 0..count);
    for (index, element) in tree.elements.iter().enumerate() {
        let own = tree.descendants(index);
        assert!(own.start == index && own.end > index && own.end <= count);
        if let Some(parent) = element.parent {
            let around = tree.descendants(parent);
            assert!(around.start < own.start && own.end <= around.end);
        }
    }
    for apex in [0, count / 2, count - 1] {
        let _ = canonicalize(&tree, apex, &Method::Inclusive, None);
        let _ = canonicalize(&tree, apex, &Method::Exclusive(vec!["#default".into()]), None);
    }
    if let Ok(canonical) = canonicalize(&tree, 0, &Method::Inclusive, None) {
        let canonical = String::from_utf8(canonical).expect("canonical XML is UTF-8");
        let again = Tree::parse(&canonical).expect("canonical XML reads");
        let twice = canonicalize(&again, 0, &Method::Inclusive, None).expect("canonicalizes");
        assert_eq!(canonical.as_bytes(), twice.as_slice());
    }
    assert!(verify(&tree, None).is_err());
});
