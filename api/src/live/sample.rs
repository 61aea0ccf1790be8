//! Choosing the next token from a row of logits (temperature, nucleus) and stop
//! sequences on the text streamed so far (held back while it may be a stop's start,
//! as vLLM does, so a client never sees part of a stop string).

use rand::Rng;

/// What a request asks of its sampling (OpenAI's names).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub max_tokens: u32,
    /// 0: greedy (the executor's argmax, bit for bit an offline run's).
    pub temperature: f32,
    pub top_p: f32,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
}

/// A token drawn from `softmax(logits / temperature)` restricted to the smallest set of
/// most likely tokens whose probability reaches `top_p`.
pub fn sample(logits: &[f32], temperature: f32, top_p: f32, rng: &mut impl Rng) -> i32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let t = temperature.max(1e-4) as f64;
    let mut p: Vec<(f64, usize)> =
        logits.iter().enumerate().map(|(i, &l)| ((((l - max) as f64) / t).exp(), i)).collect();
    let sum: f64 = p.iter().map(|x| x.0).sum();
    p.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let (mut kept, mut cum) = (0, 0.0);
    for x in &p {
        kept += 1;
        cum += x.0 / sum;
        if cum >= top_p as f64 {
            break;
        }
    }
    let p = &p[..kept.max(1)];
    let total: f64 = p.iter().map(|x| x.0).sum();
    let mut u = rng.random::<f64>() * total;
    for x in p {
        u -= x.0;
        if u <= 0.0 {
            return x.1 as i32;
        }
    }
    p[p.len() - 1].1 as i32
}

/// The generated text, released to the client up to where no stop sequence may begin.
#[derive(Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    text: String,
    released: usize,
}

impl StopText {
    pub fn new(stops: Vec<String>) -> Self {
        Self { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), text: String::new(), released: 0 }
    }

    /// Appends a token's text; returns the text the client may see now and whether a
    /// stop sequence matched (the text before it is then all released, the stop never).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        let from = self.released;
        self.text.push_str(piece);
        let hit = self.stops.iter().filter_map(|s| self.text[from..].find(s.as_str()).map(|i| from + i)).min();
        if let Some(at) = hit {
            self.released = at;
            self.text.truncate(at);
            return (self.text[from..at].to_string(), true);
        }
        let len = self.text.len();
        let hold = (1..len - from + 1)
            .rev()
            .filter(|&k| self.text.is_char_boundary(len - k))
            .find(|&k| self.stops.iter().any(|s| s.len() > k && s.starts_with(&self.text[len - k..])))
            .unwrap_or(0);
        self.released = len - hold;
        (self.text[from..self.released].to_string(), false)
    }

    /// The rest of the text (the request ended without a stop).
    pub fn flush(&mut self) -> String {
        let rest = self.text[self.released..].to_string();
        self.released = self.text.len();
        rest
    }

    /// Everything released so far.
    pub fn text(&self) -> &str {
        &self.text[..self.released]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_stop_is_never_shown_and_its_prefix_is_held_back() {
        let mut s = StopText::new(vec!["END".into()]);
        assert_eq!(s.push("ab"), ("ab".into(), false));
        assert_eq!(s.push("E"), ("".into(), false), "E may start END");
        assert_eq!(s.push("x"), ("Ex".into(), false), "it did not");
        assert_eq!(s.push("EN"), ("".into(), false));
        assert_eq!(s.push("Dzz"), ("".into(), true));
        assert_eq!(s.text(), "abEx");
        let mut s = StopText::new(vec!["\n\n".into()]);
        assert_eq!(s.push("a\n"), ("a".into(), false));
        assert_eq!(s.flush(), "\n");
    }

    #[test]
    fn sampling_is_seeded_and_top_p_keeps_the_nucleus() {
        let logits = [0.0, 5.0, 4.9, -3.0];
        let draw = |seed| {
            let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            (0..50).map(|_| sample(&logits, 1.0, 0.9, &mut r)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert!(draw(7).iter().all(|&t| t == 1 || t == 2), "top_p 0.9 keeps the two likely tokens");
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        assert!((0..20).all(|_| sample(&logits, 1.0, 0.0, &mut r) == 1), "top_p 0 keeps the argmax");
    }
}
