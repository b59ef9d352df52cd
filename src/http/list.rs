//! The list envelope and its query: `limit` (1–100, default 10) and `cursor`.

use super::error::ApiError;
use crate::store::{Page, PageRequest};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::openapi::schema::{ArrayItems, Schema};
use utoipa::openapi::{OpenApi, Ref, RefOr};
use utoipa::{IntoParams, ToSchema};

pub const DEFAULT_LIMIT: u64 = 10;
pub const MAX_LIMIT: u64 = 100;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Page size, 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl ListQuery {
    pub fn page(&self) -> Result<PageRequest, ApiError> {
        page_request(self.limit, self.cursor.clone())
    }
}

/// Validates the paging parameters of any list query.
pub fn page_request(limit: Option<u64>, cursor: Option<String>) -> Result<PageRequest, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(
            ApiError::bad_request(format!("limit must be between 1 and {MAX_LIMIT}."))
                .param("limit"),
        );
    }
    Ok(PageRequest {
        limit,
        cursor: cursor.filter(|c| !c.is_empty()),
    })
}

/// `{data, has_more, next_cursor}`, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ListOut<T> {
    pub data: Vec<T>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

/// Makes the items of every `ListOut_X` schema a reference to `X`, which utoipa inlines: a
/// generated client then reads a listed object as the same type it reads one object as.
pub fn refer_to_items(openapi: &mut OpenApi) {
    let Some(components) = openapi.components.as_mut() else {
        return;
    };
    let named: Vec<String> = components.schemas.keys().cloned().collect();
    for (name, schema) in components.schemas.iter_mut() {
        let Some(item) = name.strip_prefix("ListOut_") else {
            continue;
        };
        if !named.iter().any(|known| known == item) {
            continue;
        }
        if let RefOr::T(Schema::Object(envelope)) = schema
            && let Some(RefOr::T(Schema::Array(data))) = envelope.properties.get_mut("data")
        {
            data.items = ArrayItems::RefOrSchema(Box::new(Ref::from_schema_name(item).into()));
        }
    }
}

/// Gives every list schema of the document (`ListOut_<item>`) an example: a page holding its
/// item's example, with more to come after it.
pub fn exemplify(openapi: &mut OpenApi) {
    let Some(components) = openapi.components.as_mut() else {
        return;
    };
    let items: Vec<(String, Value)> = components
        .schemas
        .iter()
        .filter(|(name, _)| name.starts_with("ListOut_"))
        .filter_map(|(name, schema)| {
            let RefOr::T(Schema::Object(list)) = schema else {
                return None;
            };
            let Some(RefOr::T(Schema::Array(data))) = list.properties.get("data") else {
                return None;
            };
            let item = match &data.items {
                ArrayItems::RefOrSchema(item) => match item.as_ref() {
                    RefOr::T(Schema::Object(item)) => item.examples.first().cloned(),
                    RefOr::Ref(reference) => {
                        let name = reference.ref_location.rsplit('/').next()?;
                        match components.schemas.get(name)? {
                            RefOr::T(Schema::Object(item)) => item.examples.first().cloned(),
                            _ => None,
                        }
                    }
                    _ => None,
                },
                ArrayItems::False => None,
            }?;
            Some((name.clone(), item))
        })
        .collect();
    for (name, item) in items {
        if let Some(RefOr::T(Schema::Object(list))) = components.schemas.get_mut(&name)
            && list.examples.is_empty()
        {
            let cursor = item.get("id").cloned().unwrap_or(Value::Null);
            list.examples = vec![json!({
                "data": [item],
                "has_more": !cursor.is_null(),
                "next_cursor": cursor,
            })];
        }
    }
}

impl<T> ListOut<T> {
    /// Builds the envelope from a page of rows, with `id_of` giving the cursor of a row.
    pub fn from_page<R>(
        page: Page<R>,
        id_of: impl Fn(&R) -> String,
        out: impl FnMut(R) -> T,
    ) -> Self {
        let next_cursor = if page.has_more {
            page.items.last().map(&id_of)
        } else {
            None
        };
        ListOut {
            data: page.items.into_iter().map(out).collect(),
            has_more: page.has_more,
            next_cursor,
        }
    }

    /// `from_page` with a conversion that may fail (a stored document it cannot read): the
    /// first failure is the answer.
    pub fn try_from_page<R, E>(
        page: Page<R>,
        id_of: impl Fn(&R) -> String,
        out: impl FnMut(R) -> Result<T, E>,
    ) -> Result<Self, E> {
        let ListOut {
            data,
            has_more,
            next_cursor,
        } = ListOut::from_page(page, id_of, out);
        Ok(ListOut {
            data: data.into_iter().collect::<Result<_, _>>()?,
            has_more,
            next_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::extract::parse_query;
    use proptest::prelude::*;

    #[test]
    fn limits_out_of_range_or_not_numbers_are_refused() {
        for query in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=1e2",
            "limit=",
            "limit=18446744073709551616",
            "cursor=a&cursor=b",
            "other=1",
        ] {
            let page = parse_query::<ListQuery>(query).and_then(|q| q.page());
            assert!(page.is_err(), "{query}");
        }
        let page = parse_query::<ListQuery>("limit=100&cursor=").and_then(|q| q.page());
        let page = page.expect("valid");
        assert_eq!((page.limit, page.cursor), (100, None));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The fuzz target `list_query`'s property, bounded.
        #[test]
        fn any_query_string_gives_a_page_in_bounds_or_an_error(
            query in "((limit|cursor|x|%6C%69mit)=(-?[0-9]{0,22}|[a-z_0-9%+&=]{0,12})&?){0,4}",
        ) {
            if let Ok(Ok(page)) = parse_query::<ListQuery>(&query).map(|q| q.page()) {
                prop_assert!((1..=MAX_LIMIT).contains(&page.limit));
                prop_assert!(page.cursor.as_ref().is_none_or(|c| !c.is_empty()));
            }
        }
    }
}
