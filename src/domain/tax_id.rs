//! A customer's tax identity (CONTRACT §11): the kind of document and its number, with DIAN's
//! check digit for a NIT, and the DANE city code of an address.

super::vocabulary! {
    /// The kinds of identity document an invoice may name.
    pub enum TaxIdKind {
        /// Cédula de ciudadanía.
        Cc => "CC",
        /// Cédula de extranjería.
        Ce => "CE",
        /// Número de identificación tributaria.
        Nit => "NIT",
        /// Pasaporte.
        Pp => "PP",
        /// Tarjeta de identidad.
        Ti => "TI",
        /// Documento de identificación extranjero.
        Die => "DIE",
    }
}

/// DIAN's weights, applied from the rightmost digit of a NIT.
const WEIGHTS: [u32; 15] = [3, 7, 13, 17, 19, 23, 29, 37, 41, 43, 47, 53, 59, 67, 71];

/// DIAN's modulo-11 check digit of a NIT's digits (at most 15): the weighted sum's remainder
/// `r`, then 11 − r when r ≥ 2, else r.
pub fn nit_check_digit(digits: &str) -> Option<u8> {
    if digits.is_empty() || digits.len() > WEIGHTS.len() {
        return None;
    }
    let mut sum = 0u32;
    for (digit, weight) in digits.chars().rev().zip(WEIGHTS) {
        sum += digit.to_digit(10)? * weight;
    }
    let remainder = sum % 11;
    Some(if remainder >= 2 {
        11 - remainder
    } else {
        remainder
    } as u8)
}

/// A valid tax identity: its kind, its number (a NIT's without the check digit) and, for a
/// NIT, the check digit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaxId {
    pub kind: TaxIdKind,
    pub number: String,
    pub check_digit: Option<u8>,
}

impl TaxId {
    /// Reads `number` as a document of `kind`: a NIT as `900123456` or `900123456-8` (a check
    /// digit given must be DIAN's), a CC or TI as 3 to 15 digits, the others as 3 to 20 letters
    /// or digits. The error says what is wrong, for the 400 that names `tax_id`.
    pub fn parse(kind: &str, number: &str) -> Result<Self, String> {
        let kind = TaxIdKind::parse(kind)
            .ok_or_else(|| format!("tax_id.type must be one of {}", TaxIdKind::WORDS.join(", ")))?;
        let number = number.trim();
        match kind {
            TaxIdKind::Nit => {
                let (digits, given) = match number.split_once('-') {
                    Some((digits, check)) => (digits, Some(check)),
                    None => (number, None),
                };
                let check = nit_check_digit(digits)
                    .filter(|_| digits.len() >= 6)
                    .ok_or(
                        "a NIT is 6 to 15 digits, optionally followed by - and its check digit",
                    )?;
                if let Some(given) = given
                    && given != check.to_string()
                {
                    return Err(format!(
                        "the check digit of NIT {digits} is {check}, not {given}"
                    ));
                }
                Ok(Self {
                    kind,
                    number: digits.to_owned(),
                    check_digit: Some(check),
                })
            }
            TaxIdKind::Cc | TaxIdKind::Ti => {
                if !(3..=15).contains(&number.len()) || !number.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(format!("a {} is 3 to 15 digits", kind.as_str()));
                }
                Ok(Self {
                    kind,
                    number: number.to_owned(),
                    check_digit: None,
                })
            }
            TaxIdKind::Ce | TaxIdKind::Pp | TaxIdKind::Die => {
                if !(3..=20).contains(&number.len())
                    || !number.bytes().all(|b| b.is_ascii_alphanumeric())
                {
                    return Err(format!("a {} is 3 to 20 letters or digits", kind.as_str()));
                }
                Ok(Self {
                    kind,
                    number: number.to_ascii_uppercase(),
                    check_digit: None,
                })
            }
        }
    }
}

/// Whether `code` is a DANE municipality code: five digits, the first two its department's
/// (05 Antioquia … 99 Vichada; Bogotá is 11001).
pub fn is_dane_city_code(code: &str) -> bool {
    code.len() == 5
        && code.bytes().all(|b| b.is_ascii_digit())
        && code[..2]
            .parse::<u8>()
            .is_ok_and(|department| (5..=99).contains(&department))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dians_own_nit_and_the_contracts_example_check() {
        assert_eq!(nit_check_digit("800197268"), Some(4));
        assert_eq!(nit_check_digit("900123456"), Some(8));
        let nit = TaxId::parse("NIT", "900123456-8").expect("valid");
        assert_eq!(
            (nit.number.as_str(), nit.check_digit),
            ("900123456", Some(8))
        );
        assert!(TaxId::parse("NIT", "900123456-7").is_err());
        assert_eq!(
            TaxId::parse("NIT", "900123456").expect("valid").check_digit,
            Some(8)
        );
        assert!(TaxId::parse("NIT", "9001A3456").is_err());
        assert!(TaxId::parse("RUT", "900123456").is_err());
        assert!(TaxId::parse("CC", "1020304050").is_ok());
        assert!(TaxId::parse("CC", "10-20").is_err());
        assert_eq!(
            TaxId::parse("PP", "ab123456").expect("valid").number,
            "AB123456"
        );
    }

    #[test]
    fn dane_codes_are_five_digits_of_a_department() {
        assert!(is_dane_city_code("11001"));
        assert!(is_dane_city_code("05001"));
        assert!(!is_dane_city_code("1100"));
        assert!(!is_dane_city_code("00001"));
        assert!(!is_dane_city_code("1100A"));
    }

    proptest! {
        /// Exactly one check digit is accepted for any NIT, and it is the computed one.
        #[test]
        fn exactly_one_check_digit_is_accepted(digits in "[1-9][0-9]{5,14}", given in 0u8..10) {
            let check = nit_check_digit(&digits).expect("digits");
            prop_assert!(check < 10);
            let accepted = TaxId::parse("NIT", &format!("{digits}-{given}")).is_ok();
            prop_assert_eq!(accepted, given == check);
        }
    }
}
