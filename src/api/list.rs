//! The list envelope and its query: `limit` (1–100, default 10) and `cursor`.

use super::error::ApiError;
use crate::store::{Page, PageRequest};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

pub const DEFAULT_LIMIT: u64 = 10;
pub const MAX_LIMIT: u64 = 100;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Page size, 1 to 100 (default 10).
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
}
