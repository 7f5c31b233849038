//! Statistics of a run: latency histogram and percentiles, the published
//! latency buckets and coefficient, per-second series, peak detection.

use crate::error::Error;
use hdrhistogram::Histogram;

/// Upper bounds (inclusive, milliseconds) of the published latency
/// buckets 0–30, 31–60, 61–90, 91–120, 121–150; the sixth is >150 ms.
pub const BUCKET_BOUNDS_MS: [u64; 5] = [30, 60, 90, 120, 150];

/// The published example weights of the latency coefficient.
pub const DEFAULT_WEIGHTS: [f64; 5] = [0.55, 0.445, 0.004, 0.0007, 0.0003];

/// Fewest samples a comparison needs before a report ranks what it
/// compared ("fastest", bold winners): below it, two runs of the same
/// code can swap places.
pub const MIN_TO_RANK: usize = 5;

/// The median of `v` (the mean of the middle two for an even count);
/// NaN for none.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// A ratio over rounds as tables give it: the median (range) and, from
/// nine rounds on, the median's 95 % confidence interval ([`median_ci`]),
/// so that a comparison says whether it moved beyond the rounds' noise.
pub fn ratio_summary(v: &[f64], digits: usize) -> String {
    let shown = |x: f64| format!("{x:.digits$}");
    match median_ci(v).filter(|(lo, hi)| shown(*lo) != shown(*hi)) {
        Some((lo, hi)) => format!(
            "{}, 95 % CI {lo:.digits$}–{hi:.digits$}",
            median_range(v, digits)
        ),
        None => median_range(v, digits),
    }
}

/// A 95 % confidence interval for the median of `v`, free of any
/// assumption about its distribution: the k-th smallest and k-th largest
/// value, with k the largest for which a binomial(n, ½) count falls below
/// k with probability at most 2.5 % (the sign test's interval). `None`
/// below nine values, where that interval is the whole range or less
/// sure than 95 %, and above 1,000.
pub fn median_ci(v: &[f64]) -> Option<(f64, f64)> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    let n = s.len();
    if !(9..=1000).contains(&n) {
        return None;
    }
    s.sort_by(f64::total_cmp);
    // P(X <= i) for X ~ binomial(n, 1/2), summed term by term in logs.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let (mut ln_choose, mut below) = (0.0f64, 0.0f64);
    let mut k = 0;
    for i in 0..n {
        below += (ln_choose + ln_half_n).exp();
        if below > 0.025 {
            break;
        }
        k = i + 1;
        ln_choose += ((n - i) as f64 / (i + 1) as f64).ln();
    }
    (k >= 2).then(|| (s[k - 1], s[n - k]))
}

/// `items` in the order round `round` (from 1) runs them: as given in
/// odd rounds, reversed in even ones (A B, B A, A B, …), so that a
/// machine that slows down or speeds up during a comparison weighs on
/// each alike.
pub fn round_order<T>(items: &[T], round: usize) -> Vec<&T> {
    let mut order: Vec<&T> = items.iter().collect();
    if round.is_multiple_of(2) {
        order.reverse();
    }
    order
}

/// `values` (NaNs left out) as one figure: the value itself, or the
/// median of several with their range in brackets, `2.5 (1.0–4.0)`,
/// unless they agree at `digits`; `-` for none.
pub fn median_range(values: &[f64], digits: usize) -> String {
    let values: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mid = median(&values);
    match values.len() {
        0 => "-".into(),
        _ if format!("{lo:.digits$}") == format!("{hi:.digits$}") => format!("{mid:.digits$}"),
        _ => format!("{mid:.digits$} ({lo:.digits$}–{hi:.digits$})"),
    }
}

/// A 95 % confidence interval as `± 1.23`, or `n=1` (`n=0`) where fewer
/// than two samples leave no interval to state.
pub fn plus_minus(ci: Option<f64>, n: usize, decimals: usize) -> String {
    match ci {
        Some(c) if n >= 2 => format!("± {c:.decimals$}"),
        _ => format!("n={n}"),
    }
}

/// Call latencies in microseconds, 1 µs to 10 min, 3 significant digits.
#[derive(Debug, Clone)]
pub struct Latency {
    hist: Histogram<u64>,
    /// Exact counts per published bucket (the histogram's buckets are
    /// approximate at the edges).
    buckets: [u64; 6],
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            // Bounds are constants that hdrhistogram accepts.
            hist: Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds"),
            buckets: [0; 6],
        }
    }

    /// Records one latency in microseconds (clamped to the range).
    pub fn record_us(&mut self, us: u64) {
        self.hist.saturating_record(us.max(1));
        // Whole milliseconds, as published: 30.9 ms is in 0–30.
        let ms = us / 1000;
        let i = BUCKET_BOUNDS_MS
            .iter()
            .position(|b| ms <= *b)
            .unwrap_or(BUCKET_BOUNDS_MS.len());
        self.buckets[i] += 1;
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides: cannot fail.
        let _ = self.hist.add(&other.hist);
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The latency at quantile `q` (0..=1), in microseconds.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.count() == 0 {
            return 0;
        }
        self.hist.value_at_quantile(q)
    }

    /// Largest sample, in microseconds.
    pub fn max_us(&self) -> u64 {
        self.hist.max()
    }

    /// Mean, in microseconds.
    pub fn mean_us(&self) -> f64 {
        self.hist.mean()
    }

    /// Standard deviation, in microseconds.
    pub fn stdev_us(&self) -> f64 {
        if self.count() < 2 {
            return 0.0;
        }
        self.hist.stdev()
    }

    /// Shares of calls in the six published buckets (sum 1, or all 0
    /// without samples).
    pub fn bucket_shares(&self) -> [f64; 6] {
        let total: u64 = self.buckets.iter().sum();
        let mut shares = [0.0; 6];
        if total == 0 {
            return shares;
        }
        for (s, n) in shares.iter_mut().zip(self.buckets) {
            *s = n as f64 / total as f64;
        }
        shares
    }

    /// Cumulative distribution points (latency µs, share ≤ it), for plots.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let total = self.count().max(1) as f64;
        self.hist
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .scan(0u64, |acc, (value, n)| {
                *acc += n;
                Some((value, *acc as f64 / total))
            })
            .collect()
    }
}

/// The latency coefficient `p1*w1 + … + p5*w5 − p6` of bucket shares `p`.
pub fn coefficient(shares: &[f64; 6], weights: &[f64; 5]) -> f64 {
    shares[..5]
        .iter()
        .zip(weights)
        .map(|(p, w)| p * w)
        .sum::<f64>()
        - shares[5]
}

fn weights(given: &str, why: String) -> Error {
    Error::Weights {
        given: given.to_owned(),
        why,
    }
}

/// Parses weights given as `w1,w2,w3,w4,w5` (they must sum to 1).
pub fn parse_weights(s: &str) -> Result<[f64; 5], Error> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|e| weights(s, e.to_string()))?;
    let w: [f64; 5] = v
        .try_into()
        .map_err(|_| weights(s, "give exactly five numbers".into()))?;
    let sum: f64 = w.iter().sum();
    if w.iter().any(|x| *x < 0.0) || (sum - 1.0).abs() > 1e-6 {
        return Err(weights(
            s,
            format!("must be non-negative and sum to 1 (sum {sum})"),
        ));
    }
    Ok(w)
}

/// One step of a rate ramp: what was offered and what came out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Offered calls/s.
    pub offered: f64,
    /// Successful calls/s.
    pub achieved: f64,
    /// Failed calls in the step.
    pub failed: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
}

impl Step {
    /// Whether the server fully processed this step: no failure, achieved
    /// within `tolerance` of offered, p99 under `max_p99_us`.
    pub fn full(&self, tolerance: f64, max_p99_us: u64) -> bool {
        self.failed == 0
            && self.achieved >= self.offered * (1.0 - tolerance)
            && self.p99_us <= max_p99_us
    }
}

/// Peak and sustainable throughput of a ramp (the published lean-server study): sustainable is
/// the highest offered rate fully processed (no failure, achieved within
/// `tolerance` of offered, p99 under `max_p99_us`); peak is the highest
/// achieved rate among steps that stayed stable (no more than 1 % failed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Highest successful calls/s while stable.
    pub peak: f64,
    /// Highest offered rate fully processed.
    pub sustainable: f64,
}

/// Finds peak and sustainable throughput in a ramp's steps (in order).
pub fn capacity(steps: &[Step], tolerance: f64, max_p99_us: u64) -> Capacity {
    let mut sustainable = 0.0_f64;
    let mut peak = 0.0_f64;
    for s in steps {
        let calls = s.achieved + s.failed as f64;
        let stable = calls > 0.0 && s.failed as f64 <= 0.01 * calls;
        if stable {
            peak = peak.max(s.achieved);
        }
        if s.full(tolerance, max_p99_us) {
            sustainable = sustainable.max(s.offered);
        }
    }
    Capacity { peak, sustainable }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_interval_is_the_sign_tests() {
        let v = |n: usize| (1..=n).map(|x| x as f64).rev().collect::<Vec<_>>();
        // Nine values: P(X <= 1) = 10/512 <= 2.5 % < P(X <= 2).
        assert_eq!(median_ci(&v(9)), Some((2.0, 8.0)));
        // The textbook table: 20 values, the 6th to the 15th; 100, the
        // 40th to the 61st.
        assert_eq!(median_ci(&v(20)), Some((6.0, 15.0)));
        assert_eq!(median_ci(&v(100)), Some((40.0, 61.0)));
        // Fewer than nine: the range, already shown.
        assert_eq!(median_ci(&v(8)), None);
        let mut nan = v(9);
        nan.push(f64::NAN);
        assert_eq!(median_ci(&nan), Some((2.0, 8.0)));
        assert_eq!(ratio_summary(&v(9), 1), "5.0 (1.0–9.0), 95 % CI 2.0–8.0");
        assert_eq!(ratio_summary(&v(3), 1), "2.0 (1.0–3.0)");
        assert_eq!(ratio_summary(&[1.0; 9], 2), "1.00");
    }

    #[test]
    fn median_and_range_of_rounds() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[1.0, 4.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(median_range(&[1.0, 4.0, 2.0, 3.0], 1), "2.5 (1.0–4.0)");
        assert_eq!(median_range(&[7.0], 1), "7.0");
        assert_eq!(median_range(&[100.0, 100.04], 1), "100.0");
        assert_eq!(median_range(&[f64::NAN, 5.0, 7.0], 0), "6 (5–7)");
        assert_eq!(median_range(&[f64::NAN], 1), "-");
        assert_eq!(round_order(&["a", "b", "c"], 1), [&"a", &"b", &"c"]);
        assert_eq!(round_order(&["a", "b", "c"], 2), [&"c", &"b", &"a"]);
    }

    #[test]
    fn no_interval_from_one_sample() {
        assert_eq!(plus_minus(Some(0.0), 1, 1), "n=1");
        assert_eq!(plus_minus(None, 0, 1), "n=0");
        assert_eq!(plus_minus(Some(1.234), 5, 2), "± 1.23");
    }

    #[test]
    fn buckets_shares_and_coefficient() {
        let mut l = Latency::new();
        // 50 calls at 10 ms, 30 at 45 ms, 10 at 100 ms, 10 at 400 ms.
        for (ms, n) in [(10, 50), (45, 30), (100, 10), (400, 10)] {
            for _ in 0..n {
                l.record_us(ms * 1000);
            }
        }
        let s = l.bucket_shares();
        let want = [0.5, 0.3, 0.0, 0.1, 0.0, 0.1];
        for (a, b) in s.iter().zip(want) {
            assert!((a - b).abs() < 1e-9, "{s:?}");
        }
        let c = coefficient(&s, &DEFAULT_WEIGHTS);
        let expect = 0.5 * 0.55 + 0.3 * 0.445 + 0.1 * 0.0007 - 0.1;
        assert!((c - expect).abs() < 1e-12, "{c} vs {expect}");
        // Bucket edges in whole milliseconds: 30.999 ms is in the first
        // bucket, 31 ms in the second, 150.5 ms in the fifth, 151 ms beyond.
        let mut e = Latency::new();
        for us in [30_999, 31_000, 150_500, 151_000] {
            e.record_us(us);
        }
        assert_eq!(e.bucket_shares(), [0.25, 0.25, 0.0, 0.0, 0.25, 0.25]);
    }

    #[test]
    fn percentiles_and_merge() {
        let mut a = Latency::new();
        let mut b = Latency::new();
        for us in 1..=500 {
            a.record_us(us);
        }
        for us in 501..=1000 {
            b.record_us(us);
        }
        a.merge(&b);
        assert_eq!(a.count(), 1000);
        let near = |got: u64, want: u64| got.abs_diff(want) <= want / 500 + 1;
        assert!(near(a.quantile_us(0.5), 500), "{}", a.quantile_us(0.5));
        assert!(near(a.quantile_us(0.99), 990));
        assert!(near(a.max_us(), 1000));
        assert!((a.mean_us() - 500.5).abs() < 1.0);
        let cdf = a.cdf();
        assert!((cdf.last().expect("points").1 - 1.0).abs() < 1e-12);
        assert_eq!(Latency::new().quantile_us(0.99), 0);
        assert_eq!(Latency::new().bucket_shares(), [0.0; 6]);
    }

    #[test]
    fn weights_are_checked() {
        assert_eq!(
            parse_weights("0.55,0.445,0.004,0.0007,0.0003").unwrap(),
            DEFAULT_WEIGHTS
        );
        assert!(parse_weights("0.5,0.5").is_err());
        assert!(parse_weights("0.5,0.5,0.1,0,0").is_err());
        assert!(parse_weights("a,b,c,d,e").is_err());
    }

    #[test]
    fn peak_and_sustainable_on_a_synthetic_ramp() {
        let step = |offered: f64, achieved: f64, failed: u64, p99_ms: u64| Step {
            offered,
            achieved,
            failed,
            p99_us: p99_ms * 1000,
        };
        let ramp = [
            step(1000.0, 1000.0, 0, 2),
            step(2000.0, 1995.0, 0, 3),
            step(4000.0, 3990.0, 0, 20),
            // Falls behind: achieved well below offered, latency grows.
            step(8000.0, 6100.0, 0, 900),
            // Overload: failures.
            step(16000.0, 5200.0, 4000, 5000),
        ];
        let c = capacity(&ramp, 0.05, 200_000);
        assert_eq!(c.sustainable, 4000.0);
        assert_eq!(c.peak, 6100.0);
        // A latency ceiling below step 3's p99 lowers sustainable.
        assert_eq!(capacity(&ramp, 0.05, 10_000).sustainable, 2000.0);
        assert_eq!(capacity(&[], 0.05, 1).peak, 0.0);
    }
}
