//! An agent with its own instructions and a typed tool, run to completion, and its
//! history read back from the store. The model is scripted (no key, no network): it
//! calls the tool once, then answers.
//!
//! ```text
//! cargo run -p foya-actors --example agent
//! ```

use foya_actors::Agent;
use foya_actors::protocol::{Input, Seq, TurnStatus};
use foya_actors::provider::scripted::ScriptedClient;
use foya_actors::tools::{SideEffect, ToolContext, TypedTool};
use std::sync::Arc;

#[derive(serde::Deserialize, foya_actors::schemars::JsonSchema)]
struct Stock {
    /// The product's SKU.
    sku: String,
}

/// The embedder's inventory, reached by the tool through `ToolContext::state`.
struct Inventory(Vec<(&'static str, u32)>);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let model = Arc::new(ScriptedClient::from_script(serde_json::from_value(
        serde_json::json!({
            "responses": [
                {"tool_calls": [{"id": "c1", "name": "stock", "arguments": {"sku": "A-1"}}]},
                {"text": "There are 12 A-1 in stock."}
            ]
        }),
    )?));
    let stock = TypedTool::new(
        "stock",
        "Units in stock",
        SideEffect::None,
        |args: Stock, ctx: ToolContext| async move {
            let inventory = ctx.state::<Inventory>().ok_or("no inventory")?;
            let units = inventory
                .0
                .iter()
                .find(|(sku, _)| *sku == args.sku)
                .map(|(_, n)| *n);
            units
                .map(|n| n.to_string())
                .ok_or(format!("unknown SKU {}", args.sku))
        },
    );
    // The whole system prompt (`instructions` would add a coding agent's environment and
    // approval-mode sections), and the agent's only tool (tools are explicit;
    // `.read_only_builtin_tools()` would add Foya's read-only file tools).
    let agent = Agent::builder(model)
        .instructions_only("You answer stock questions of the Example Corp warehouse.")
        .state(Inventory(vec![("A-1", 12), ("B-2", 0)]))
        .tool(Arc::new(stock))?
        .start(foya_actors::storage::Store::open_in_memory(
            Default::default(),
        )?)
        .await?;
    let session = agent.session(std::env::temp_dir()).await?;
    let outcome = session.run(Input::text("How many A-1 are left?")).await?;
    println!("{}", outcome.text);
    anyhow::ensure!(outcome.status == TurnStatus::Completed, "{outcome:?}");
    anyhow::ensure!(outcome.tool_calls.len() == 1, "{outcome:?}");
    // What the session persisted, as a program reads it after reopening the store.
    let history = session.history(Seq::FIRST).await?;
    for event in &history {
        println!("{:>3} {}", event.seq.0, event.kind.type_name());
    }
    anyhow::ensure!(history.last().map(|e| e.seq) == Some(*outcome.seqs.end()));
    agent.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_to_completion() -> anyhow::Result<()> {
        super::main()
    }
}
