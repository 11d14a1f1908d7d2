//! What a user submits. The specification's four kinds of input content — text, a
//! command identifier, references to already-submitted image attachments, and page
//! elements selected in a browser — may appear together in one [`Input`].

use serde::{Deserialize, Serialize};

/// One user input. At least one of its parts is non-empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Free text typed by the user (may be empty when a command or images carry the input).
    #[serde(default)]
    pub text: String,
    /// A command identifier such as `/compact` or a project command, with its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandInvocation>,
    /// Images uploaded earlier, referenced by attachment id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<AttachmentRef>,
    /// Page elements the user selected in a browser.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selected_elements: Vec<PageElement>,
}

impl Input {
    /// A plain text input.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), ..Self::default() }
    }

    /// A command input (`name` without the leading `/`).
    pub fn command(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            command: Some(CommandInvocation { name: name.into(), arguments: arguments.into() }),
            ..Self::default()
        }
    }

    /// True when the input carries nothing at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty()
            && self.command.is_none()
            && self.images.is_empty()
            && self.selected_elements.is_empty()
    }
}

/// A command identifier with its raw argument text (`/review src/main.rs` →
/// `{name: "review", arguments: "src/main.rs"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandInvocation {
    /// Command name without the leading slash.
    pub name: String,
    /// Everything after the name, trimmed; substituted for `$ARGUMENTS` in templates.
    #[serde(default)]
    pub arguments: String,
}

/// A reference to an image attachment submitted before the input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRef {
    /// The attachment id returned when it was uploaded.
    pub id: String,
    /// MIME type (`image/png`, `image/jpeg`, …), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

/// A page element the user selected in a browser.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageElement {
    /// CSS selector of the element.
    pub selector: String,
    /// Its visible text.
    #[serde(default)]
    pub text: String,
    /// URL of the page it was selected on.
    #[serde(default)]
    pub url: String,
}
