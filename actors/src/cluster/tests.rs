//! Codec round trips of every cross-node message type, and how undecodable bytes are
//! surfaced.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::ClusterError;
use super::wire::{GatewayReply, GatewayRequest, Push, WireUpdate};
use foya_protocol::event::{LiveDelta, Notice};
use foya_protocol::{
    ApprovalDecision, ApprovalMode, ApprovalRequestId, Delta, Event, EventKind, Input, InputId,
    RunId, Seq, SessionConfig, SessionId, SessionSummary, SessionUpdate, ToolCallId, TurnStatus,
};
use ractor::BytesConvertable;
use std::sync::Arc;
use std::time::Duration;

fn round_trip<T: BytesConvertable + Clone + PartialEq + std::fmt::Debug>(value: T) {
    let bytes = value.clone().into_bytes();
    assert_eq!(bytes.first(), Some(&foya_storage::codec::FORMAT_VERSION));
    assert_eq!(T::from_bytes(bytes), value);
}

fn summary(node: &str) -> SessionSummary {
    SessionSummary {
        id: SessionId::new(),
        title: Some("t".into()),
        cwd: "/w".into(),
        model: "m".into(),
        created_at_ms: 1,
        updated_at_ms: 2,
        last_seq: Seq(7),
        deleted: false,
        node: Some(node.into()),
    }
}

#[test]
fn every_gateway_request_round_trips() {
    let session_id = SessionId::new();
    let mut config = SessionConfig::new("/work");
    config.approval_mode = ApprovalMode::Auto;
    config.max_steps = Some(3);
    let requests = vec![
        GatewayRequest::Ping,
        GatewayRequest::CreateSession { config },
        GatewayRequest::Submit {
            session_id,
            input_id: InputId::new(),
            input: Input::text("hello"),
        },
        GatewayRequest::Submit {
            session_id,
            input_id: InputId::new(),
            input: Input::command("compact", "now"),
        },
        GatewayRequest::Cancel { session_id },
        GatewayRequest::Delete { session_id },
        GatewayRequest::DecideApproval {
            session_id,
            request_id: ApprovalRequestId::new(),
            decision: ApprovalDecision::Deny,
            message: Some("no".into()),
        },
        GatewayRequest::Subscribe {
            session_id,
            from_seq: Seq(5),
            group: "foya.sub.x".into(),
            epoch: 3,
            approver: true,
        },
        GatewayRequest::ListSessions,
        GatewayRequest::ListClusterSessions,
        GatewayRequest::NameTaken {
            node: "b".into(),
            holder: "127.0.0.1:4370".into(),
        },
    ];
    for request in requests {
        round_trip(request);
    }
}

#[test]
fn every_gateway_reply_round_trips() {
    let replies = vec![
        GatewayReply::Pong {
            node: "b".into(),
            instance: "0192".into(),
            listen: "127.0.0.1:4370".into(),
        },
        GatewayReply::Done,
        GatewayReply::Created {
            session_id: SessionId::new(),
        },
        GatewayReply::Submitted {
            input_id: InputId::new(),
        },
        GatewayReply::Sessions {
            sessions: vec![summary("a"), summary("b")],
        },
        GatewayReply::Failed {
            message: "session x not found".into(),
            error: None,
        },
        GatewayReply::Failed {
            message: "session deleted".into(),
            error: Some(crate::RuntimeError::SessionDeleted(SessionId::new())),
        },
        GatewayReply::ClusterSessions {
            sessions: vec![summary("a")],
            unreachable: vec!["b".into()],
        },
    ];
    for reply in replies {
        round_trip(reply);
    }
}

#[test]
fn every_update_kind_round_trips_through_a_push() {
    let session_id = SessionId::new();
    let run_id = RunId::new();
    let updates = vec![
        SessionUpdate::Event(Event {
            session_id,
            seq: Seq(4),
            run_id: Some(run_id),
            at_ms: 1_700_000_000_000,
            kind: EventKind::TurnComplete {
                status: TurnStatus::Completed,
                reason: None,
                error: None,
            },
        }),
        SessionUpdate::Event(Event {
            session_id,
            seq: Seq(2),
            run_id: None,
            at_ms: 5,
            kind: EventKind::UserMessage {
                input_id: InputId::new(),
                input: Input::text("hi"),
            },
        }),
        SessionUpdate::Delta(LiveDelta {
            session_id,
            run_id,
            delta: Delta::TextDelta { text: "he".into() },
        }),
        SessionUpdate::Delta(LiveDelta {
            session_id,
            run_id,
            delta: Delta::ToolCallDelta {
                index: 0,
                id: Some(ToolCallId::new("c1")),
                name: Some("shell".into()),
                arguments: "{\"co".into(),
            },
        }),
        SessionUpdate::Notice(Notice::Lagged {
            session_id,
            last_seq: Seq(9),
        }),
        SessionUpdate::Notice(Notice::Closed {
            session_id,
            reason: "deleted".into(),
        }),
    ];
    for update in updates {
        let wire = WireUpdate::from_update(&update).unwrap();
        let push = Push::Update {
            epoch: 2,
            update: wire.clone(),
        };
        round_trip(push.clone());
        let Push::Update { update: back, .. } = Push::from_bytes(push.into_bytes()) else {
            panic!("push did not decode");
        };
        assert_eq!(back.into_update().unwrap(), update);
    }
}

#[test]
fn undecodable_bytes_become_explicit_values() {
    assert_eq!(
        GatewayRequest::from_bytes(vec![]),
        GatewayRequest::Undecodable("cannot decode stored value: empty stored value".into())
    );
    assert!(matches!(
        GatewayReply::from_bytes(vec![9, 1, 2]),
        GatewayReply::Failed { message, .. } if message.starts_with("undecodable reply")
    ));
    assert!(matches!(
        Push::from_bytes(vec![1, 0xc1]),
        Push::Undecodable(_)
    ));
}

#[tokio::test]
async fn a_node_given_port_0_listens_on_and_advertises_a_real_port() {
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let model = Arc::new(crate::provider::scripted::ScriptedClient::from_script(
        crate::provider::scripted::Script::default(),
    ));
    let runtime = crate::Runtime::start(crate::RuntimeConfig::new(store, model))
        .await
        .unwrap();
    let config = super::NodeConfig::new("127.0.0.1:0".parse().unwrap(), "c", vec![], "zero");
    let node = super::ClusterNode::start(runtime, config).await.unwrap();
    let listen = node.listen_addr();
    assert_ne!(listen.port(), 0);
    // Something listens there: a peer can dial it.
    assert!(tokio::net::TcpStream::connect(listen).await.is_ok());
    node.shutdown().await;
}

#[tokio::test]
async fn waiting_for_a_node_that_never_comes_ends_at_the_timeout() {
    let (_tx, gateways) = tokio::sync::watch::channel(super::Gateways::default());
    let client = super::ClusterClient::new("me".into(), gateways, Duration::from_secs(1));
    tokio::time::pause();
    let waited = client.wait_for_node("ghost", Duration::from_secs(30)).await;
    assert_eq!(waited, Err(ClusterError::NodeUnreachable("ghost".into())));
}
