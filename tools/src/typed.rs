//! Owns typed tools: [`TypedTool`] (an argument struct deriving `serde::Deserialize` and
//! `schemars::JsonSchema`, plus an async fn) and [`ToolState`] (the embedder's own
//! values, reachable from every call's [`ToolContext`]).
//!
//! The schema is generated from the argument type; arguments the model sends are
//! deserialised into it, and a failure to do so, like an `Err` of the function, becomes
//! an `is_error` result the model can act on.

use super::{ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolSpec};
use async_trait::async_trait;
use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
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
/// use foya_tools::{SideEffect, ToolContext, ToolRegistry, TypedTool};
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
/// # Ok::<(), foya_tools::InvalidToolSchema>(())
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

    /// Advertises the schema the built-in tools use ([`builtin_parameters_of`]): an
    /// optional argument is left out rather than sent as `null`, an integer's Rust width
    /// is not mentioned.
    #[must_use]
    pub(crate) fn builtin_schema(mut self) -> Self {
        self.spec.parameters = builtin_parameters_of::<A>();
        self
    }
}

/// The JSON Schema of `A` as a function's parameters (without the `$schema` and
/// `title` keys the providers do not need).
fn parameters_of<A: schemars::JsonSchema>() -> serde_json::Value {
    schema_of::<A>(SchemaSettings::draft2020_12())
}

/// The JSON Schema of a built-in tool's argument type `A`, as the model sees it: like
/// [`parameters_of`], except that an optional argument is left out rather than sent as
/// `null` (no `"null"` among its types) and an integer's Rust width (`format: uint64`)
/// is not mentioned.
pub(crate) fn builtin_parameters_of<A: schemars::JsonSchema>() -> serde_json::Value {
    let settings =
        SchemaSettings::draft2020_12().with_transform(RecursiveTransform(omit_null_and_width));
    schema_of::<A>(settings)
}

/// Drops `"null"` from a schema's list of types and an integer `format`.
fn omit_null_and_width(schema: &mut schemars::Schema) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(serde_json::Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            object.insert("type".into(), only);
        }
    }
    let integer_width = object
        .get("format")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"));
    if integer_width {
        object.remove("format");
    }
}

/// The schema of `A` under `settings`, without the root keys the providers do not need
/// (`$schema` and `title`).
fn schema_of<A: schemars::JsonSchema>(settings: SchemaSettings) -> serde_json::Value {
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

/// The call's arguments as the tool's argument type `A`; arguments that do not fit it
/// are the call's `is_error` result, naming the tool and the parameters it expects.
///
/// # Errors
/// That result.
pub(crate) fn arguments<A: DeserializeOwned>(
    spec: &ToolSpec,
    args: serde_json::Value,
) -> Result<A, ToolOutput> {
    serde_json::from_value(args).map_err(|e| {
        ToolOutput::error(format!(
            "invalid arguments for `{}`: {e}; expected parameters: {}",
            spec.name, spec.parameters
        ))
    })
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
        let args: A = match arguments(&self.spec, args) {
            Ok(args) => args,
            Err(invalid) => return invalid,
        };
        // The handler sees the token this call got (`ctx.cancel`), whoever built `ctx`.
        let mut ctx = ctx.clone();
        ctx.cancel = cancel.clone();
        let run = (self.handler)(args, ctx);
        tokio::select! {
            result = run => match result {
                Ok(output) => output.into(),
                Err(e) => ToolOutput::error(e.to_string()),
            },
            // The handler's future is dropped here: whatever it awaited stops; work it
            // handed elsewhere (a blocking thread) sees `ctx.cancel` fired.
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
/// API client, a counter): set on `RuntimeConfig::tool_state` (foya-actors), read in a call
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
