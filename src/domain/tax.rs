//! IVA on tax-inclusive prices (CONTRACT §11): the tax codes, the split of an amount into its
//! taxable base and its IVA, an invoice's sums and breakdown, and how a refund spreads over an
//! invoice's lines as a credit note.
//!
//! Rounding rules (each written once, here, and held by the property tests below):
//! - **Split.** The base of an amount at `rate_bps` is round half away from zero of
//!   amount × 10 000 / (10 000 + rate_bps); the IVA is the rest, so base + IVA = amount exactly.
//! - **Spread.** A refund of R over lines with `left_i` still creditable (amount minus what
//!   earlier credit notes took) gives each line ⌊R × left_i / Σ left⌋, then one more cent to the
//!   lines with the largest remainders (ties to the earlier line) until the sum is R. No line
//!   gets more than its `left_i`; a refund of everything left gives each line exactly its
//!   `left_i`.
//! - **A credited line's base.** The split of the credited amount, clamped so that neither the
//!   base nor the IVA credited so far on the line exceeds the invoice line's: the last credit of
//!   a line takes exactly the base and IVA it has left, so credit notes that cover the whole
//!   charge add up to the invoice, base and tax.

use super::money::div_round_half_away;

super::vocabulary! {
    /// A plan's or add-on's IVA treatment. Prices include IVA.
    pub enum TaxCode {
        /// IVA general, 19 %.
        Iva19 => "iva_19",
        /// IVA reducido, 5 %.
        Iva5 => "iva_5",
        /// Exento: taxed at 0 %.
        IvaExempt => "iva_exempt",
        /// Excluido: outside IVA.
        IvaExcluded => "iva_excluded",
    }
}

super::vocabulary! {
    /// The seller's IVA regime.
    pub enum TaxRegime {
        /// Responsable de IVA (DIAN's code 48).
        ResponsableIva => "responsable_iva",
        /// No responsable de IVA (49).
        NoResponsableIva => "no_responsable_iva",
    }
}

impl TaxCode {
    /// The rate in basis points (19 % is 1 900).
    pub fn rate_bps(self) -> i64 {
        match self {
            TaxCode::Iva19 => 1_900,
            TaxCode::Iva5 => 500,
            TaxCode::IvaExempt | TaxCode::IvaExcluded => 0,
        }
    }

    /// The base and the IVA of a tax-inclusive `amount` (the split rule above).
    pub fn split(self, amount: i64) -> Split {
        let rate = i128::from(self.rate_bps());
        let base = div_round_half_away(i128::from(amount) * 10_000, 10_000 + rate);
        let base = i64::try_from(base).unwrap_or(amount);
        Split {
            base,
            tax: amount - base,
        }
    }
}

impl Default for TaxCode {
    /// An account's `default_tax_code` unless it sets another.
    fn default() -> Self {
        TaxCode::Iva19
    }
}

/// A tax-inclusive amount split into its taxable base and its IVA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Split {
    pub base: i64,
    pub tax: i64,
}

/// One line's amount, tax code and split, as sums and breakdowns need them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taxed {
    pub tax_code: TaxCode,
    pub amount: i64,
    pub split: Split,
}

impl Taxed {
    pub fn new(tax_code: TaxCode, amount: i64) -> Self {
        Self {
            tax_code,
            amount,
            split: tax_code.split(amount),
        }
    }
}

/// A document's sums: its lines' bases, IVA and amounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Totals {
    pub subtotal: i64,
    pub tax: i64,
    pub total: i64,
}

pub fn totals(lines: &[Taxed]) -> Totals {
    lines.iter().fold(Totals::default(), |sum, line| Totals {
        subtotal: sum.subtotal + line.split.base,
        tax: sum.tax + line.split.tax,
        total: sum.total + line.amount,
    })
}

/// One entry per tax code present, in the codes' order, summing its lines.
pub fn breakdown(lines: &[Taxed]) -> Vec<(TaxCode, Split)> {
    TaxCode::ALL
        .iter()
        .filter_map(|&code| {
            let of_code = lines.iter().filter(|line| line.tax_code == code);
            let mut present = false;
            let sum = of_code.fold(Split::default(), |sum, line| {
                present = true;
                Split {
                    base: sum.base + line.split.base,
                    tax: sum.tax + line.split.tax,
                }
            });
            present.then_some((code, sum))
        })
        .collect()
}

/// What is left to credit on one invoice line: its amount and split minus what earlier credit
/// notes took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Creditable {
    pub tax_code: TaxCode,
    pub amount: i64,
    pub base: i64,
    pub tax: i64,
}

/// Spreads a refund of `refund` over lines with `left` creditable (the spread rule above):
/// one amount per line, summing to `refund`. `None` when `refund` is negative or exceeds what
/// is left.
pub fn spread(refund: i64, left: &[i64]) -> Option<Vec<i64>> {
    let total: i64 = left.iter().sum();
    if refund < 0 || refund > total || left.iter().any(|&l| l < 0) {
        return None;
    }
    if total == 0 {
        return Some(vec![0; left.len()]);
    }
    let (refund, total) = (i128::from(refund), i128::from(total));
    let mut shares: Vec<(i128, i128)> = left
        .iter()
        .map(|&l| {
            let exact = refund * i128::from(l);
            (exact / total, exact % total)
        })
        .collect();
    let mut short = refund - shares.iter().map(|(share, _)| share).sum::<i128>();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    // Largest remainder first; the sort is stable, so ties go to the earlier line.
    order.sort_by(|&a, &b| shares[b].1.cmp(&shares[a].1));
    for index in order {
        if short == 0 {
            break;
        }
        if shares[index].1 > 0 {
            shares[index].0 += 1;
            short -= 1;
        }
    }
    shares
        .into_iter()
        .map(|(share, _)| i64::try_from(share).ok())
        .collect()
}

/// The split of `amount` credited on a line with `left` creditable (the third rule above).
pub fn credit_split(left: &Creditable, amount: i64) -> Split {
    let natural = left.tax_code.split(amount).base;
    let lowest = (amount - left.tax).max(0);
    let highest = amount.min(left.base);
    let base = natural.clamp(lowest, highest.max(lowest));
    Split {
        base,
        tax: amount - base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn code() -> impl Strategy<Value = TaxCode> {
        prop::sample::select(TaxCode::ALL.to_vec())
    }

    #[test]
    fn nineteen_percent_of_a_colombian_price() {
        // $ 49.900,00 with IVA: base 41.932,77, IVA 7.967,23.
        assert_eq!(
            TaxCode::Iva19.split(4_990_000),
            Split {
                base: 4_193_277,
                tax: 796_723
            }
        );
        assert_eq!(TaxCode::IvaExcluded.split(4_990_000).tax, 0);
        assert_eq!(TaxCode::Iva5.split(105).base, 100);
        // 1 cent at 19 %: 0.84 rounds to 1, no IVA.
        assert_eq!(TaxCode::Iva19.split(1), Split { base: 1, tax: 0 });
    }

    #[test]
    fn a_breakdown_has_one_entry_per_code_present() {
        let lines = [
            Taxed::new(TaxCode::Iva19, 11_900),
            Taxed::new(TaxCode::IvaExcluded, 5_000),
            Taxed::new(TaxCode::Iva19, 119),
        ];
        let entries = breakdown(&lines);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0],
            (
                TaxCode::Iva19,
                Split {
                    base: 10_100,
                    tax: 1_919
                }
            )
        );
        assert_eq!(
            entries[1],
            (
                TaxCode::IvaExcluded,
                Split {
                    base: 5_000,
                    tax: 0
                }
            )
        );
    }

    #[test]
    fn a_spread_refuses_more_than_is_left() {
        assert_eq!(spread(11, &[5, 5]), None);
        assert_eq!(spread(-1, &[5]), None);
        assert_eq!(spread(10, &[5, 5]), Some(vec![5, 5]));
        // 1 cent over two equal lines goes to the first.
        assert_eq!(spread(1, &[5, 5]), Some(vec![1, 0]));
    }

    proptest! {
        #[test]
        fn a_split_adds_back_exactly_and_the_tax_is_never_negative(
            code in code(), amount in 0i64..10_000_000_000_000
        ) {
            let split = code.split(amount);
            prop_assert_eq!(split.base + split.tax, amount);
            prop_assert!(split.tax >= 0 && split.base >= 0);
            if code.rate_bps() == 0 {
                prop_assert_eq!(split.tax, 0);
            }
        }

        #[test]
        fn a_spread_adds_back_exactly_within_each_line(
            left in prop::collection::vec(0i64..1_000_000_000, 1..8),
            fraction in 0u32..=1000,
        ) {
            let total: i64 = left.iter().sum();
            let refund = total * i64::from(fraction) / 1000;
            let shares = spread(refund, &left).expect("within what is left");
            prop_assert_eq!(shares.iter().sum::<i64>(), refund);
            for (share, left) in shares.iter().zip(&left) {
                prop_assert!(*share >= 0 && share <= left);
            }
            if refund == total {
                prop_assert_eq!(shares, left);
            }
        }

        /// Credit notes that refund a charge in any number of parts add up to its invoice,
        /// line by line, base and tax, and never credit more base or IVA than a line has.
        #[test]
        fn partial_credit_notes_end_exactly_at_the_invoice(
            lines in prop::collection::vec((code(), 1i64..100_000_000), 1..5),
            cuts in prop::collection::vec(1u32..1000, 0..6),
        ) {
            let invoice: Vec<Taxed> =
                lines.iter().map(|&(code, amount)| Taxed::new(code, amount)).collect();
            let mut left: Vec<Creditable> = invoice
                .iter()
                .map(|line| Creditable {
                    tax_code: line.tax_code,
                    amount: line.amount,
                    base: line.split.base,
                    tax: line.split.tax,
                })
                .collect();
            let total = totals(&invoice).total;
            let mut refunds: Vec<i64> = cuts.iter().map(|&c| total * i64::from(c) / 10_000).collect();
            let partial: i64 = refunds.iter().sum();
            prop_assume!(partial <= total);
            refunds.push(total - partial);
            for refund in refunds {
                let amounts: Vec<i64> = left.iter().map(|line| line.amount).collect();
                let shares = spread(refund, &amounts).expect("within what is left");
                for (line, share) in left.iter_mut().zip(shares) {
                    let split = credit_split(line, share);
                    prop_assert_eq!(split.base + split.tax, share);
                    prop_assert!(split.base >= 0 && split.tax >= 0);
                    prop_assert!(split.base <= line.base && split.tax <= line.tax);
                    line.amount -= share;
                    line.base -= split.base;
                    line.tax -= split.tax;
                }
            }
            for line in left {
                prop_assert_eq!((line.amount, line.base, line.tax), (0, 0, 0));
            }
        }
    }
}
