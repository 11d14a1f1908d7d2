//! A turn through `foya-actors` built with no default feature: a custom model client (no
//! network) calls a typed tool, then answers; the turn completes with that answer. Every
//! name comes from `foya-actors` and its re-exports (`protocol`, `storage`, `futures`,
//! `CancellationToken`, `schemars`).

use foya_actors::CancellationToken;
use foya_actors::futures::stream::{self, BoxStream};
use foya_actors::protocol::{FinishReason, Input, Message, StreamEvent, ToolCallId, TurnStatus};
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_actors::storage::Store;
use foya_actors::tools::{SideEffect, ToolContext, TypedTool};
use foya_actors::{Agent, image_dimensions};
use std::sync::Arc;
use std::time::Duration;

/// Asks for the stock of `A-1` once, then repeats the tool's answer.
#[derive(Debug)]
struct StockModel;

impl ModelClient for StockModel {
    fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let events = match request.messages.last() {
            Some(Message::Tool(result)) => vec![
                StreamEvent::TextDelta {
                    text: format!("{} units of A-1.", result.content),
                },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop),
                },
            ],
            _ => vec![
                StreamEvent::ToolCallDelta {
                    index: 0,
                    id: Some(ToolCallId::new("call_1")),
                    name: Some("stock".into()),
                    arguments: r#"{"sku":"A-1"}"#.into(),
                    extra: None,
                },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::ToolCalls),
                },
            ],
        };
        Box::pin(stream::iter(events))
    }
}

#[derive(serde::Deserialize, foya_actors::schemars::JsonSchema)]
// The derive names `schemars`; this crate reaches it through `foya_actors`.
#[schemars(crate = "foya_actors::schemars")]
struct Stock {
    /// The product's SKU.
    sku: String,
}

/// The embedder's inventory, reached through `ToolContext::state`.
struct Inventory(Vec<(&'static str, u32)>);

#[tokio::test(flavor = "current_thread")]
async fn a_minimal_build_runs_a_turn_with_a_custom_client_and_a_typed_tool()
-> Result<(), Box<dyn std::error::Error>> {
    let stock = TypedTool::new(
        "stock",
        "Units in stock",
        SideEffect::None,
        |args: Stock, ctx: ToolContext| async move {
            let inventory = ctx.state::<Inventory>().ok_or("no inventory")?;
            inventory
                .0
                .iter()
                .find(|(sku, _)| *sku == args.sku)
                .map(|(_, n)| n.to_string())
                .ok_or(format!("unknown SKU {}", args.sku))
        },
    );
    let agent = Agent::builder(Arc::new(StockModel))
        .instructions("You answer stock questions.")
        .state(Inventory(vec![("A-1", 12)]))
        .tool(Arc::new(stock))?
        .start(Store::open_in_memory(Default::default())?)
        .await?;
    let session = agent.session(std::env::temp_dir()).await?;
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        session.run(Input::text("How many A-1?")),
    )
    .await??;
    assert_eq!(outcome.status, TurnStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.text, "12 units of A-1.");
    assert_eq!(outcome.tool_calls.len(), 1, "{outcome:?}");
    agent.shutdown().await;
    Ok(())
}

/// Without the `images` feature an image is refused with a reason naming the feature.
#[test]
fn a_minimal_build_refuses_images_with_a_reason() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
    let refused = image_dimensions(png, "image/png");
    assert!(
        refused
            .as_ref()
            .is_err_and(|reason| reason.to_string().contains("`images` feature")),
        "{refused:?}"
    );
}

/// Without the `landlock` feature a sandbox policy is refused, never skipped: the sandbox
/// helper exits before the command runs.
#[test]
fn a_minimal_build_refuses_to_sandbox_without_landlock() {
    use foya_actors::tools::SandboxPolicy;
    use foya_actors::tools::sandbox::apply_policy;
    let dir = std::env::temp_dir();
    let refused = apply_policy(SandboxPolicy::ReadOnly, &dir, &dir, &[], false);
    assert!(
        refused
            .as_ref()
            .is_err_and(|reason| reason.to_string().contains("`landlock` feature")),
        "{refused:?}"
    );
    assert_eq!(apply_policy(SandboxPolicy::None, &dir, &dir, &[], false), Ok(()));
}
