//! Approvals: with and without an approver, decisions, grants.

use super::*;
use expect_test::expect;

#[test]
fn without_an_approver_a_request_waits_or_is_denied_per_the_setting() {
    for without_approver in [WithoutApprover::Wait, WithoutApprover::Deny] {
        let mut h = Harness::with(
            Settings {
                without_approver,
                ..settings()
            },
            config(),
        );
        h.submit("go");
        let run = h.run(1);
        h.turn_append(run, vec![assistant(&["c1"])]);
        h.ask_approval(run, "c1", "shell:ls", false);
        h.on("get_pending_approvals", SessionInput::GetPendingApprovals);
        h.check(match without_approver {
            WithoutApprover::Wait => expect![[r#"
                > submit i1 "go"
                < append r1 2..3: user_message(i1 "go"), turn_started(i1)
                < start_turn r1 Model first
                < reply submitted i1
                > turn_append r1 [assistant_message]
                < append r1 4..4: assistant_message
                < reply ok
                > approval_requested a1 c1 approver=false
                < append r1 5..5: approval_requested(a1 grant=Some("shell:ls"))
                > get_pending_approvals
                < reply pending [a1]
            "#]],
            WithoutApprover::Deny => expect![[r#"
                > submit i1 "go"
                < append r1 2..3: user_message(i1 "go"), turn_started(i1)
                < start_turn r1 Model first
                < reply submitted i1
                > turn_append r1 [assistant_message]
                < append r1 4..4: assistant_message
                < reply ok
                > approval_requested a1 c1 approver=false
                < append r1 5..6: approval_requested(a1 grant=Some("shell:ls")), approval_decided(a1 Deny grant=None)
                < answer_approval a1 ApprovalAnswer { allowed: false, message: Some("denied: this call needs approval and no approver is attached to the session") }
                > get_pending_approvals
                < reply pending []
            "#]],
        });
    }
}

#[test]
fn an_approvers_decision_is_persisted_before_the_call_hears_it_and_a_grant_answers_later_calls() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1", "c2", "c3", "c4"])]);
    let first = h.ask_approval(run, "c1", "shell:ls", true);
    let second = h.ask_approval(run, "c2", "", true);
    h.on("get_pending_approvals", SessionInput::GetPendingApprovals);
    h.decide(first, ApprovalDecision::AllowForSession);
    h.decide(first, ApprovalDecision::AllowOnce);
    // A grant answers at once, without an event; an empty key offers no grant.
    h.ask_approval(run, "c3", "shell:ls", true);
    h.decide(second, ApprovalDecision::AllowForSession);
    h.ask_approval(run, "c4", "", true);
    // The turn ends with a request waiting: its reply is dropped.
    h.turn_completes(run);
    h.on("get_pending_approvals", SessionInput::GetPendingApprovals);
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message]
        < append r1 4..4: assistant_message
        < reply ok
        > approval_requested a1 c1 approver=true
        < append r1 5..5: approval_requested(a1 grant=Some("shell:ls"))
        > approval_requested a2 c2 approver=true
        < append r1 6..6: approval_requested(a2 grant=Some(""))
        > get_pending_approvals
        < reply pending [a1, a2]
        > decide a1 AllowForSession
        < append r1 7..7: approval_decided(a1 AllowForSession grant=Some("shell:ls"))
        < answer_approval a1 ApprovalAnswer { allowed: true, message: None }
        < reply ok
        > decide a1 AllowOnce
        < reply error: no pending approval request a1
        > approval_requested a3 c3 approver=true
        < answer_approval a3 ApprovalAnswer { allowed: true, message: None }
        > decide a2 AllowForSession
        < append r1 8..8: approval_decided(a2 AllowForSession grant=None)
        < answer_approval a2 ApprovalAnswer { allowed: true, message: None }
        < reply ok
        > approval_requested a4 c4 approver=true
        < append r1 9..9: approval_requested(a4 grant=Some(""))
        > turn_append r1 [turn_complete]
        < append r1 10..10: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > get_pending_approvals
        < reply pending []
    "#]]);
}

#[test]
fn a_denial_carries_the_persons_message_or_a_default() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1", "c2"])]);
    let first = h.ask_approval(run, "c1", "k", true);
    let second = h.ask_approval(run, "c2", "k", true);
    h.on(
        "decide a1 Deny \"not now\"",
        SessionInput::DecideApproval {
            request_id: first,
            decision: ApprovalDecision::Deny,
            message: Some("not now".into()),
        },
    );
    h.decide(second, ApprovalDecision::Deny);
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message]
        < append r1 4..4: assistant_message
        < reply ok
        > approval_requested a1 c1 approver=true
        < append r1 5..5: approval_requested(a1 grant=Some("k"))
        > approval_requested a2 c2 approver=true
        < append r1 6..6: approval_requested(a2 grant=Some("k"))
        > decide a1 Deny "not now"
        < append r1 7..7: approval_decided(a1 Deny grant=None)
        < answer_approval a1 ApprovalAnswer { allowed: false, message: Some("not now") }
        < reply ok
        > decide a2 Deny
        < append r1 8..8: approval_decided(a2 Deny grant=None)
        < answer_approval a2 ApprovalAnswer { allowed: false, message: Some("denied by the user") }
        < reply ok
    "#]]);
}
