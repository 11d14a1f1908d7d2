//! The decision rules (pure): how the answers of every hook of one point combine
//! ([`merge`]), and how a `PreToolUse` decision combines with the Approval Gateway's
//! verdict ([`tighten`]) — hooks only ever tighten it.
//!
//! | gateway \ hooks | none / allow | ask | deny (or stop) |
//! |---|---|---|---|
//! | allow | allow | ask (no grant offered) | deny |
//! | ask | ask | ask (no grant offered) | deny |
//! | deny | deny | deny | deny |

use super::HookResponse;
use crate::approval::Verdict;
use foya_protocol::HookDecision;

/// The combined answer of the hooks of one point.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Merged {
    /// The strongest decision: stop > deny > block > ask > allow > none (a failed run
    /// counts as none).
    pub decision: Option<HookDecision>,
    /// The reasons of the hooks that made that decision, one per line.
    pub reason: Option<String>,
    /// Every hook's additional context, in run order.
    pub context: Vec<String>,
}

impl Merged {
    /// The decision (`None` when no hook decided).
    #[must_use]
    pub fn decision(&self) -> HookDecision {
        self.decision.unwrap_or(HookDecision::None)
    }

    /// The contexts joined with blank lines, or `None`.
    #[must_use]
    pub fn context_text(&self) -> Option<String> {
        (!self.context.is_empty()).then(|| self.context.join("\n\n"))
    }
}

fn rank(decision: HookDecision) -> u8 {
    match decision {
        HookDecision::None | HookDecision::Failed => 0,
        HookDecision::Allow => 1,
        HookDecision::Ask => 2,
        HookDecision::Block => 3,
        HookDecision::Deny => 4,
        HookDecision::Stop => 5,
    }
}

/// Combines the answers of one point's hooks (see [`Merged`]).
#[must_use]
pub fn merge(responses: &[HookResponse]) -> Merged {
    let top = responses
        .iter()
        .map(|r| r.decision)
        .max_by_key(|d| rank(*d));
    let decision = top.filter(|d| rank(*d) > 0);
    let reasons: Vec<&str> = responses
        .iter()
        .filter(|r| Some(r.decision) == decision)
        .filter_map(|r| r.reason.as_deref())
        .collect();
    Merged {
        decision,
        reason: (!reasons.is_empty()).then(|| reasons.join("\n")),
        context: responses
            .iter()
            .filter_map(|r| r.additional_context.clone())
            .collect(),
    }
}

/// What an approval question a `PreToolUse` hook asks says of "allow for this session":
/// the answer covers this call only (the session then allows it once).
pub(crate) const HOOK_ASK_NO_GRANT: &str =
    "\"allow for this session\" is not offered (a hook asked): it is asked every time";

/// `reason` without the gateway's clause on what "allow for this session" covers.
fn without_grant_words(reason: &str) -> &str {
    reason
        .find("; \"allow for this session\"")
        .map_or(reason, |at| &reason[..at])
}

/// The gateway's `verdict` after the `PreToolUse` hooks' `merged` answer. `action`
/// names the call for a person when a hook turns an `Allow` into a question.
#[must_use]
pub fn tighten(verdict: Verdict, merged: &Merged, action: impl FnOnce() -> String) -> Verdict {
    let reason = || {
        merged
            .reason
            .clone()
            .unwrap_or_else(|| "no reason given".into())
    };
    match (merged.decision(), verdict) {
        (_, deny @ Verdict::Deny { .. }) => deny,
        (HookDecision::Deny | HookDecision::Stop | HookDecision::Block, _) => Verdict::Deny {
            reason: format!("denied by a PreToolUse hook: {}", reason()),
        },
        (HookDecision::Ask, Verdict::Allow { sandbox }) => Verdict::Ask {
            action: action(),
            reason: format!(
                "a PreToolUse hook asks for approval: {}; {HOOK_ASK_NO_GRANT}",
                reason()
            ),
            grant_key: String::new(),
            sandbox_if_allowed: sandbox,
            if_no_approver: None,
        },
        (
            HookDecision::Ask,
            Verdict::Ask {
                action,
                reason: policy,
                sandbox_if_allowed,
                ..
            },
        ) => Verdict::Ask {
            action,
            // The policy's words on what "allow for this session" would cover no longer
            // hold: a question a hook asks grants nothing for later calls.
            reason: format!(
                "{}; a PreToolUse hook asks too: {}; {HOOK_ASK_NO_GRANT}",
                without_grant_words(&policy),
                reason()
            ),
            grant_key: String::new(),
            sandbox_if_allowed,
            if_no_approver: None,
        },
        // `allow` (or nothing) changes nothing: the policy's question or answer stands.
        (HookDecision::Allow | HookDecision::None | HookDecision::Failed, verdict) => verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::SandboxPolicy;
    use HookDecision::{Allow, Ask, Block, Deny, Failed, None as NoDecision, Stop};

    fn r(decision: HookDecision, reason: &str) -> HookResponse {
        HookResponse::decided(decision, Some(reason.into()))
    }

    const WW: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

    fn allow() -> Verdict {
        Verdict::Allow { sandbox: WW }
    }

    fn ask(grant: &str, reason: &str) -> Verdict {
        Verdict::Ask {
            action: "ls".into(),
            reason: reason.into(),
            grant_key: grant.into(),
            sandbox_if_allowed: WW,
            if_no_approver: None,
        }
    }

    fn deny(reason: &str) -> Verdict {
        Verdict::Deny {
            reason: reason.into(),
        }
    }

    #[test]
    fn the_strongest_decision_wins_with_its_reasons() {
        let merged = merge(&[
            r(Allow, "fine"),
            r(Deny, "no rm"),
            r(Ask, "check"),
            r(Deny, "no push"),
            r(Failed, "timed out"),
        ]);
        assert_eq!(merged.decision, Some(Deny));
        assert_eq!(merged.reason.as_deref(), Some("no rm\nno push"));
        assert_eq!(merge(&[r(Deny, "x"), r(Stop, "halt")]).decision, Some(Stop));
        assert_eq!(merge(&[r(Failed, "crash")]).decision, None);
        assert_eq!(merge(&[]), Merged::default());
        let mut with_context = HookResponse::none();
        with_context.additional_context = Some("a".into());
        let merged = merge(&[with_context.clone(), r(Block, "b"), with_context]);
        assert_eq!(
            (merged.decision(), merged.context_text()),
            (Block, Some("a\n\na".into()))
        );
    }

    #[test]
    fn hooks_only_tighten_the_gateway() {
        let merged = |d: HookDecision| merge(&[r(d, "hook says")]);
        let asked = |reason: &str| ask("", reason);
        let denied = deny("denied by a PreToolUse hook: hook says");
        let table = [
            // An allow skips nothing: the policy's verdict stands.
            (allow(), NoDecision, allow()),
            (allow(), Allow, allow()),
            (ask("shell:ls", "policy"), Allow, ask("shell:ls", "policy")),
            (deny("read-only"), Allow, deny("read-only")),
            (deny("protected"), Allow, deny("protected")),
            // Ask: a person decides, every time (no grant is offered).
            (
                allow(),
                Ask,
                Verdict::Ask {
                    action: "the call".into(),
                    reason: format!(
                        "a PreToolUse hook asks for approval: hook says; {HOOK_ASK_NO_GRANT}"
                    ),
                    grant_key: String::new(),
                    sandbox_if_allowed: WW,
                    if_no_approver: None,
                },
            ),
            (
                ask("shell:ls", "policy"),
                Ask,
                asked(&format!(
                    "policy; a PreToolUse hook asks too: hook says; {HOOK_ASK_NO_GRANT}"
                )),
            ),
            // The policy's words on "allow for this session" give way: nothing is granted.
            (
                ask(
                    "shell:ls",
                    "`shell` wants to run a command; \"allow for this session\" allows `ls` \
                     with any further arguments",
                ),
                Ask,
                asked(&format!(
                    "`shell` wants to run a command; a PreToolUse hook asks too: hook says; \
                     {HOOK_ASK_NO_GRANT}"
                )),
            ),
            (deny("read-only"), Ask, deny("read-only")),
            // Deny always wins; a stop denies the call too.
            (allow(), Deny, denied.clone()),
            (ask("shell:ls", "policy"), Deny, denied.clone()),
            (allow(), Stop, denied),
            (deny("read-only"), Deny, deny("read-only")),
            (allow(), Failed, allow()),
        ];
        for (verdict, decision, expected) in table {
            let got = tighten(verdict.clone(), &merged(decision), || "the call".into());
            assert_eq!(got, expected, "{verdict:?} + {decision:?}");
        }
    }
}
