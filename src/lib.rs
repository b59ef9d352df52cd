//! billing: a recurring-billing engine.
