//! Owns [`Messages`]: the history of a [`super::ModelRequest`], a shared prefix plus the
//! step's own messages, so that building a step's request does not copy the messages every
//! earlier step already compiled.

use foya_protocol::Message;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;

/// The message history of a model request, in order: `prefix` (shared, never changed
/// in place) then `tail` (this request's own messages).
///
/// The turn's incremental history fold hands every step the same `prefix` (the
/// conversation up to the latest settled assistant message) and builds only the
/// `tail`; cloning a `Messages` copies the tail and bumps one reference count.
/// Serialises as a plain JSON array of messages (the prefix then the tail).
#[derive(Debug, Clone, Default)]
pub struct Messages {
    prefix: Arc<Vec<Message>>,
    tail: Vec<Message>,
}

impl Messages {
    /// `prefix` followed by `tail`.
    #[must_use]
    pub fn new(prefix: Arc<Vec<Message>>, tail: Vec<Message>) -> Self {
        Self { prefix, tail }
    }

    /// Number of messages.
    #[must_use]
    pub fn len(&self) -> usize {
        self.prefix.len() + self.tail.len()
    }

    /// True when there are no messages.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages in order.
    pub fn iter(
        &self,
    ) -> std::iter::Chain<std::slice::Iter<'_, Message>, std::slice::Iter<'_, Message>> {
        self.prefix.iter().chain(self.tail.iter())
    }

    /// The message at `index`, if any.
    #[must_use]
    pub fn get(&self, index: usize) -> Option<&Message> {
        match index.checked_sub(self.prefix.len()) {
            None => self.prefix.get(index),
            Some(i) => self.tail.get(i),
        }
    }

    /// The first message, if any.
    #[must_use]
    pub fn first(&self) -> Option<&Message> {
        self.get(0)
    }

    /// The last message, if any.
    #[must_use]
    pub fn last(&self) -> Option<&Message> {
        self.tail.last().or_else(|| self.prefix.last())
    }

    /// Appends `message` (to this request's own part; the shared prefix is untouched).
    pub fn push(&mut self, message: Message) {
        self.tail.push(message);
    }

    /// The messages as one owned vector (copies them).
    #[must_use]
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

impl From<Vec<Message>> for Messages {
    fn from(tail: Vec<Message>) -> Self {
        Self {
            prefix: Arc::default(),
            tail,
        }
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = std::iter::Chain<std::slice::Iter<'a, Message>, std::slice::Iter<'a, Message>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl std::ops::Index<usize> for Messages {
    type Output = Message;

    /// # Panics
    /// When `index >= self.len()`, like a slice.
    fn index(&self, index: usize) -> &Message {
        match index.checked_sub(self.prefix.len()) {
            None => &self.prefix[index],
            Some(i) => &self.tail[i],
        }
    }
}

/// Equal when the message sequences are equal, wherever the prefix ends.
impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl PartialEq<Vec<Message>> for Messages {
    fn eq(&self, other: &Vec<Message>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foya_protocol::Input;

    fn user(text: &str) -> Message {
        Message::User(Input::text(text))
    }

    #[test]
    fn a_split_history_reads_serialises_and_compares_like_one_vector() {
        let whole = vec![user("a"), user("b"), user("c")];
        let mut split = Messages::new(Arc::new(vec![user("a"), user("b")]), Vec::new());
        split.push(user("c"));
        assert_eq!(split, whole);
        assert_eq!(split, Messages::from(whole.clone()));
        assert_eq!(split.len(), 3);
        assert_eq!(
            (&split[1], split.get(2), split.get(3)),
            (&whole[1], Some(&whole[2]), None)
        );
        assert_eq!((split.first(), split.last()), (whole.first(), whole.last()));
        assert_eq!(split.to_vec(), whole);
        let json = serde_json::to_string(&split).unwrap();
        assert_eq!(json, serde_json::to_string(&whole).unwrap());
        assert_eq!(serde_json::from_str::<Messages>(&json).unwrap(), whole);
        let prefix_only = Messages::new(Arc::new(whole.clone()), Vec::new());
        assert_eq!(prefix_only.last(), whole.last());
        assert!(Messages::default().is_empty());
        assert_ne!(prefix_only, Messages::from(vec![user("a")]));
    }
}
