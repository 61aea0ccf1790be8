//! State kept per dense, ever-growing id, whose oldest ids retire.
//!
//! A replay numbers a finite list of requests; a live server numbers its requests for
//! as long as it serves. Indexing by id stays a plain offset, as in a `Vec`, while the
//! memory follows the ids still held: once the oldest ones are done with, they retire.

use std::collections::VecDeque;
use std::ops::{Index, IndexMut};

/// Items indexed by id `base..len()`; ids below `base` have retired.
#[derive(Debug, Clone)]
pub struct IdDeque<T> {
    base: usize,
    items: VecDeque<T>,
}

impl<T> Default for IdDeque<T> {
    fn default() -> Self {
        Self { base: 0, items: VecDeque::new() }
    }
}

impl<T> From<Vec<T>> for IdDeque<T> {
    fn from(v: Vec<T>) -> Self {
        Self { base: 0, items: v.into() }
    }
}

impl<T> IdDeque<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next id to give: every id below it was given (held or retired).
    pub fn len(&self) -> usize {
        self.base + self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The oldest id still held.
    pub fn base(&self) -> usize {
        self.base
    }

    /// How many items are held.
    pub fn held(&self) -> usize {
        self.items.len()
    }

    /// Appends an item under the next id, which it returns.
    pub fn push(&mut self, v: T) -> usize {
        self.items.push_back(v);
        self.len() - 1
    }

    pub fn get(&self, id: usize) -> Option<&T> {
        id.checked_sub(self.base).and_then(|i| self.items.get(i))
    }

    pub fn get_mut(&mut self, id: usize) -> Option<&mut T> {
        id.checked_sub(self.base).and_then(|i| self.items.get_mut(i))
    }

    /// Grows to `len` ids with copies of `v` (never shrinks, never revives retired ids).
    pub fn resize(&mut self, len: usize, v: T)
    where
        T: Clone,
    {
        if len > self.len() {
            self.items.resize(len - self.base, v);
        }
    }

    /// Drops every item but keeps the numbering: the next id is still `len()`.
    pub fn clear(&mut self) {
        self.base = self.len();
        self.items.clear();
    }

    /// The held items, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.items.iter()
    }

    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut T> + ExactSizeIterator {
        self.items.iter_mut()
    }

    /// The held items with their ids.
    pub fn iter_ids(&self) -> impl DoubleEndedIterator<Item = (usize, &T)> + ExactSizeIterator {
        let base = self.base;
        self.items.iter().enumerate().map(move |(i, v)| (base + i, v))
    }

    /// Retires the oldest items while `done` holds for them, handing each to `out`;
    /// stops at the first still needed. Returns how many retired.
    pub fn retire_while(&mut self, mut done: impl FnMut(&T) -> bool, mut out: impl FnMut(usize, T)) -> usize {
        let mut n = 0;
        while self.items.front().is_some_and(&mut done) {
            let v = self.items.pop_front().expect("front checked");
            out(self.base, v);
            self.base += 1;
            n += 1;
        }
        n
    }

    /// Retires every id below `to` (ids not given yet are skipped over: the next given
    /// is then `to`).
    pub fn retire_to(&mut self, to: usize) {
        let k = to.saturating_sub(self.base).min(self.items.len());
        self.items.drain(..k);
        self.base = self.base.max(to);
    }

    /// The held items in id order (all of them when nothing retired).
    pub fn into_vec(self) -> Vec<T> {
        self.items.into()
    }
}

impl<T> Index<usize> for IdDeque<T> {
    type Output = T;
    fn index(&self, id: usize) -> &T {
        match self.get(id) {
            Some(v) => v,
            None => panic!("id {id} is not held (held: {}..{})", self.base, self.len()),
        }
    }
}

impl<T> IndexMut<usize> for IdDeque<T> {
    fn index_mut(&mut self, id: usize) -> &mut T {
        let (base, len) = (self.base, self.len());
        match self.get_mut(id) {
            Some(v) => v,
            None => panic!("id {id} is not held (held: {base}..{len})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_stable_as_the_oldest_retire() {
        let mut d = IdDeque::new();
        for v in 0..10u32 {
            assert_eq!(d.push(v * 10), v as usize);
        }
        let mut gone = Vec::new();
        assert_eq!(d.retire_while(|&v| v < 40 || v == 60, |id, v| gone.push((id, v))), 4);
        assert_eq!(gone, vec![(0, 0), (1, 10), (2, 20), (3, 30)]);
        assert_eq!((d.base(), d.len(), d.held()), (4, 10, 6));
        assert_eq!(d[7], 70);
        assert_eq!(d.get(3), None);
        assert_eq!(d.push(100), 10);
        assert_eq!(d.iter_ids().next(), Some((4, &40)));
    }

    #[test]
    fn retiring_past_the_end_moves_the_numbering_on() {
        let mut d: IdDeque<u8> = IdDeque::new();
        d.push(1);
        d.retire_to(5);
        assert_eq!((d.base(), d.len(), d.held()), (5, 5, 0));
        d.resize(7, 9);
        assert_eq!(d.iter_ids().collect::<Vec<_>>(), vec![(5, &9), (6, &9)]);
        d.retire_to(2);
        assert_eq!(d.base(), 5);
        d.clear();
        assert_eq!((d.base(), d.len()), (7, 7));
    }

    #[test]
    #[should_panic(expected = "id 0 is not held")]
    fn a_retired_id_is_a_loud_error() {
        let mut d = IdDeque::from(vec![1, 2]);
        d.retire_to(1);
        let _ = d[0];
    }
}
