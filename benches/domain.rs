//! Micro-benchmarks of the pure billing rules that every renewal runs: the fee, the proration
//! and the period arithmetic. Run with `cargo bench --bench domain`.

use billing::domain::money::FeeSchedule;
use billing::domain::subscription::prorate;
use billing::domain::time::{Cycle, from_millis, period_boundary};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn rules(c: &mut Criterion) {
    let fees = FeeSchedule::default();
    c.bench_function("fee_for", |b| b.iter(|| fees.fee_for(black_box(4_990_000))));
    c.bench_function("prorate", |b| {
        b.iter(|| {
            prorate(
                black_box(3_000_000),
                black_box(6_000_000),
                0,
                2_592_000_000,
                black_box(864_000_000),
            )
        })
    });
    let anchor = from_millis(1_801_000_000_000);
    c.bench_function("period_boundary_monthly_n12", |b| {
        b.iter(|| period_boundary(black_box(anchor), Cycle::Monthly, black_box(12)))
    });
}

criterion_group!(benches, rules);
criterion_main!(benches);
