//! Owns typed tools: [`TypedTool`] (an argument struct deriving `serde::Deserialize` and
//! `schemars::JsonSchema`, plus an async fn) and [`ToolState`] (the embedder's own
//! values, reachable from every call's [`ToolContext`]).
//!
//! The schema is generated from the argument type; arguments the model sends are
//! deserialised into it, and a failure to do so, like an `Err` of the function, becomes
//! an `is_error` result the model can act on.

use super::{ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolSpec};
use async_trait::async_trait;
use serde::de::DeserializeOwned;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Default [`ToolSpec::default_timeout_ms`] of a [`TypedTool`]: 60 s.
pub const DEFAULT_TYPED_TIMEOUT_MS: u64 = 60_000;

/// A tool made of an argument type `A` and an async function.
///
/// ```
/// use foya_actors::tools::{SideEffect, ToolContext, ToolRegistry, TypedTool};
/// use std::sync::Arc;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add {
///     /// First addend.
///     a: i64,
///     /// Second addend.
///     b: i64,
/// }
///
/// let add = TypedTool::new("add", "Adds two integers", SideEffect::None, |args: Add, _ctx: ToolContext| async move {
///     args.a.checked_add(args.b).map(|sum| sum.to_string()).ok_or("overflow")
/// });
/// let mut tools = ToolRegistry::new();
/// tools.register(Arc::new(add.parallel_safe(true)))?;
/// assert_eq!(tools.names(), ["add"]);
/// # Ok::<(), foya_actors::tools::InvalidToolSchema>(())
/// ```
pub struct TypedTool<A, F> {
    spec: ToolSpec,
    handler: F,
    args: PhantomData<fn() -> A>,
}

impl<A, F> std::fmt::Debug for TypedTool<A, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl<A, F, Fut, O, E> TypedTool<A, F>
where
    A: DeserializeOwned + schemars::JsonSchema + Send + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Into<ToolOutput>,
    E: Display,
{
    /// A tool called `name`, with `description` for the model, the side effect the
    /// Approval Gateway judges it by (say [`SideEffect::Write`] or [`SideEffect::Exec`]
    /// for a tool that changes anything: calls of those ask in the `ask` mode), and
    /// `handler` run for each call with the deserialised arguments and the call's
    /// context. Not parallel-safe, cancellable (the handler's future is dropped when the
    /// turn is cancelled), [`DEFAULT_TYPED_TIMEOUT_MS`].
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        side_effect: SideEffect,
        handler: F,
    ) -> Self {
        Self {
            spec: ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters: parameters_of::<A>(),
                parallel_safe: false,
                side_effect,
                cancellable: true,
                default_timeout_ms: DEFAULT_TYPED_TIMEOUT_MS,
            },
            handler,
            args: PhantomData,
        }
    }

    /// Whether calls may run concurrently with other parallel-safe calls.
    #[must_use]
    pub fn parallel_safe(mut self, yes: bool) -> Self {
        self.spec.parallel_safe = yes;
        self
    }

    /// Timeout of one call, in milliseconds.
    #[must_use]
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.spec.default_timeout_ms = ms;
        self
    }
}

/// The JSON Schema of `A` as a function's parameters (without the `$schema` and
/// `title` keys the providers do not need).
fn parameters_of<A: schemars::JsonSchema>() -> serde_json::Value {
    let mut schema = schemars::schema_for!(A).to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

#[async_trait]
impl<A, F, Fut, O, E> Tool for TypedTool<A, F>
where
    A: DeserializeOwned + schemars::JsonSchema + Send + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Into<ToolOutput>,
    E: Display,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        _progress: &dyn ProgressSink,
    ) -> ToolOutput {
        let args: A = match serde_json::from_value(args) {
            Ok(args) => args,
            Err(e) => {
                return ToolOutput::error(format!(
                    "invalid arguments for `{}`: {e}; expected parameters: {}",
                    self.spec.name, self.spec.parameters
                ));
            }
        };
        let run = (self.handler)(args, ctx.clone());
        tokio::select! {
            result = run => match result {
                Ok(output) => output.into(),
                Err(e) => ToolOutput::error(e.to_string()),
            },
            // The handler's future is dropped here: whatever it awaited stops.
            () = cancel.cancelled() => ToolOutput::error("cancelled"),
        }
    }
}

impl From<String> for ToolOutput {
    fn from(content: String) -> Self {
        Self::ok(content)
    }
}

impl From<&str> for ToolOutput {
    fn from(content: &str) -> Self {
        Self::ok(content)
    }
}

impl From<serde_json::Value> for ToolOutput {
    /// The value as JSON text (a string value as its text).
    fn from(value: serde_json::Value) -> Self {
        match value {
            serde_json::Value::String(text) => Self::ok(text),
            other => Self::ok(other.to_string()),
        }
    }
}

/// The embedder's own values shared with its tools, one per type (a database pool, an
/// API client, a counter): set on [`crate::RuntimeConfig::tool_state`], read in a call
/// with [`ToolContext::state`]. Cheap to clone.
#[derive(Clone, Default)]
pub struct ToolState {
    values: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for ToolState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolState")
            .field("values", &self.values.len())
            .finish()
    }
}

impl ToolState {
    /// No values.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// These values plus `value` (replacing one of the same type).
    #[must_use]
    pub fn with<T: Any + Send + Sync>(self, value: T) -> Self {
        let mut values = Arc::unwrap_or_clone(self.values);
        values.insert(TypeId::of::<T>(), Arc::new(value));
        Self {
            values: Arc::new(values),
        }
    }

    /// The value of type `T`, if one was set.
    #[must_use]
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let value = Arc::clone(self.values.get(&TypeId::of::<T>())?);
        value.downcast::<T>().ok()
    }
}

impl ToolContext {
    /// The runtime's value of type `T` ([`ToolState`]), if one was set.
    #[must_use]
    pub fn state<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.shared.get::<T>()
    }
}
