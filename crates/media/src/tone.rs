//! Sine tones and their detection (Goertzel), to play a known signal and
//! prove at the far end that it arrived.

/// A phase-continuous sine generator.
#[derive(Debug, Clone)]
pub struct Tone {
    step: f64,
    phase: f64,
    amplitude: f64,
}

impl Tone {
    /// `freq` Hz at `rate` samples/s, peak `amplitude` (0 to 32767).
    pub fn new(freq: f64, rate: u32, amplitude: f64) -> Self {
        Self {
            step: std::f64::consts::TAU * freq / f64::from(rate),
            phase: 0.0,
            amplitude: amplitude.clamp(0.0, 32_767.0),
        }
    }

    /// Fills `out` with the next samples.
    pub fn fill(&mut self, out: &mut [i16]) {
        for s in out {
            *s = (self.amplitude * self.phase.sin()).round() as i16;
            self.phase = (self.phase + self.step) % std::f64::consts::TAU;
        }
    }
}

/// Energy of `samples` at `freq` (Goertzel), normalised by the signal's
/// total energy: near 0.5·len for a pure tone at that frequency (the
/// other half sits at -freq), near 0 far from it.
pub fn power_at(samples: &[i16], freq: f64, rate: u32) -> f64 {
    let w = std::f64::consts::TAU * freq / f64::from(rate);
    let coeff = 2.0 * w.cos();
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    let mut total = 0.0f64;
    for &x in samples {
        let x = f64::from(x);
        total += x * x;
        let s0 = x + coeff * s1 - s2;
        s2 = s1;
        s1 = s0;
    }
    if total == 0.0 {
        return 0.0;
    }
    let power = s1 * s1 + s2 * s2 - coeff * s1 * s2;
    power / total
}

/// The frequency among `lo..=hi` (in `step` Hz steps) with the most
/// energy in `samples`, or `None` for silence.
pub fn dominant_frequency(samples: &[i16], rate: u32, lo: f64, hi: f64, step: f64) -> Option<f64> {
    let mut best: Option<(f64, f64)> = None;
    let mut f = lo;
    while f <= hi {
        let p = power_at(samples, f, rate);
        if p > 0.0 && best.is_none_or(|(_, bp)| p > bp) {
            best = Some((f, p));
        }
        f += step;
    }
    best.map(|(f, _)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_tone_is_found_at_its_frequency() {
        let mut t = Tone::new(1_000.0, 8_000, 10_000.0);
        let mut s = vec![0i16; 8_000];
        t.fill(&mut s);
        assert_eq!(
            dominant_frequency(&s, 8_000, 100.0, 3_900.0, 50.0),
            Some(1_000.0)
        );
        assert!(power_at(&s, 1_000.0, 8_000) > 100.0 * power_at(&s, 1_500.0, 8_000));
        assert_eq!(
            dominant_frequency(&[0; 100], 8_000, 100.0, 3_900.0, 50.0),
            None
        );
    }

    #[test]
    fn phase_continues_across_fills() {
        let mut a = Tone::new(440.0, 8_000, 1_000.0);
        let mut whole = vec![0i16; 320];
        a.fill(&mut whole);
        let mut b = Tone::new(440.0, 8_000, 1_000.0);
        let mut halves = vec![0i16; 320];
        b.fill(&mut halves[..160]);
        b.fill(&mut halves[160..]);
        assert_eq!(whole, halves);
    }
}
