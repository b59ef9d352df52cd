//! DIAN's web service (`WcfDianCustomerServices.svc`) from both sides: `envelope` (the signed
//! requests, and reading one), `response` (the `DianResponse` answer), `zip` (the document's
//! archive) and `client` (the calls over HTTP).

pub mod client;
pub mod envelope;
pub mod response;
pub mod zip;
