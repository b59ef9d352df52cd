//! Pure business rules: money, fees, billing periods and proration. No I/O crate is named
//! here (architecture invariant), so everything in it is tested with plain unit and property
//! tests.

mod vocabulary;
pub(crate) use vocabulary::vocabulary;

pub mod calendar;
pub mod charge_purpose;
pub mod charge_status;
pub mod checkout;
pub mod collection_hours;
pub mod console;
pub mod decline;
pub mod dian;
pub mod discount;
pub mod event_type;
pub mod holidays;
pub mod money;
pub mod mrr;
pub mod notices;
pub mod portal;
pub mod reattempts;
pub mod recheck;
pub mod schedule;
pub mod subscription;
pub mod tax;
pub mod tax_id;
pub mod text;
pub mod time;
