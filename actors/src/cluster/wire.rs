//! The messages that cross between cluster nodes and their byte form.
//!
//! Every payload is encoded with the project's versioned codec
//! (`foya_storage::codec::{encode, decode}`: one format byte, then MessagePack with named
//! fields), wrapped into ractor_cluster's serialization through `BytesConvertable`. No
//! `#[serde(flatten)]` form crosses the wire: events travel in their stored form
//! (`encode_event`, session id and seq beside it) and deltas as `{session_id, run_id,
//! delta}`. `BytesConvertable::from_bytes` cannot fail, so bytes that do not decode become
//! an explicit `Undecodable` value that the receiver answers or drops.

use foya_protocol::event::{LiveDelta, Notice};
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, Delta, Event, Input, InputId, RunId, Seq, SessionConfig,
    SessionId, SessionSummary, SessionUpdate,
};
use foya_storage::codec::{decode, decode_event, encode, encode_event};
use ractor::{BytesConvertable, RpcReplyPort};
use ractor_cluster::RactorClusterMessage;
use serde::{Deserialize, Serialize};

/// The process group every node's gateway joins.
pub const GATEWAY_GROUP: &str = "foya.gateway";

/// A request to a node's gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GatewayRequest {
    /// Heartbeat; answered with [`GatewayReply::Pong`].
    Ping,
    /// Create a session on this node.
    CreateSession {
        /// Its configuration.
        config: SessionConfig,
    },
    /// Submit an input; a repeated `input_id` is applied once.
    Submit {
        /// Target session.
        session_id: SessionId,
        /// Client-chosen id (idempotency key).
        input_id: InputId,
        /// The input.
        input: Input,
    },
    /// Cancel the active turn.
    Cancel {
        /// Target session.
        session_id: SessionId,
    },
    /// Delete the session.
    Delete {
        /// Target session.
        session_id: SessionId,
    },
    /// Answer an approval request.
    DecideApproval {
        /// Target session.
        session_id: SessionId,
        /// The request answered.
        request_id: ApprovalRequestId,
        /// The decision.
        decision: ApprovalDecision,
        /// Optional message to the model.
        #[serde(default)]
        message: Option<String>,
    },
    /// Push the session's updates from `from_seq` to the members of process group
    /// `group` (a subscriber actor on the client's node), tagged with `epoch`.
    Subscribe {
        /// Target session.
        session_id: SessionId,
        /// First seq wanted (1 = everything).
        from_seq: Seq,
        /// Process group of the subscriber actor.
        group: String,
        /// Tag echoed in every push, so a client ignores pushes of older attempts.
        epoch: u64,
        /// The subscriber answers approval requests.
        #[serde(default)]
        approver: bool,
    },
    /// The sessions stored on this node (`node` filled in).
    ListSessions,
    /// The sessions of every node this node sees live (its own included), each with
    /// `node`, most recently updated first: what `ClusterClient::list_sessions` gathers
    /// on this node. Answered with [`GatewayReply::ClusterSessions`], which names the
    /// nodes that did not answer.
    ListClusterSessions,
    /// Sent by a node that sees two nodes claiming the name `node`, to the one that
    /// started later: leave the cluster, `holder` (its listen address) keeps the name.
    NameTaken {
        /// The contested name.
        node: String,
        /// Listen address (`host:port`) of the node that keeps it.
        holder: String,
    },
    /// Bytes that did not decode (never sent; produced by `from_bytes`).
    #[serde(skip)]
    Undecodable(String),
}

/// A gateway's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GatewayReply {
    /// Answer to [`GatewayRequest::Ping`].
    Pong {
        /// The node's name.
        node: String,
        /// Identity of this run of the node: a UUIDv7 made when it started, so ids
        /// order by start time (two gateways answering one name with different ids are
        /// two nodes claiming it; the smaller id keeps it).
        #[serde(default)]
        instance: String,
        /// The address (`host:port`) the node listens on.
        #[serde(default)]
        listen: String,
    },
    /// The request was applied.
    Done,
    /// A session was created.
    Created {
        /// Its id.
        session_id: SessionId,
    },
    /// An input was accepted (or had been accepted before under this id).
    Submitted {
        /// Its id.
        input_id: InputId,
    },
    /// The sessions of the node.
    Sessions {
        /// Summaries with `node` set.
        sessions: Vec<SessionSummary>,
    },
    /// The request failed.
    Failed {
        /// What went wrong (a `RuntimeError` rendered).
        message: String,
        /// The runtime's error itself, when a runtime refused (absent from nodes that
        /// predate it, and for failures of the cluster layer).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<crate::kernel::RuntimeError>,
    },
    /// Answer to [`GatewayRequest::ListClusterSessions`]: what the nodes that answered
    /// hold, and the nodes that did not answer.
    ClusterSessions {
        /// Summaries with `node` set, most recently updated first.
        sessions: Vec<SessionSummary>,
        /// Nodes (names, or configured addresses never reached) that did not answer,
        /// sorted; empty when the list is complete.
        #[serde(default)]
        unreachable: Vec<String>,
    },
}

/// A subscription update on the wire (no flattened forms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireUpdate {
    /// A committed event in its stored encoding.
    Event {
        /// The session.
        session_id: SessionId,
        /// Its seq.
        seq: Seq,
        /// `foya_storage::codec::encode_event` bytes.
        body: Vec<u8>,
    },
    /// A live delta.
    Delta {
        /// The session.
        session_id: SessionId,
        /// The turn.
        run_id: RunId,
        /// The fragment.
        delta: Delta,
    },
    /// A control notice.
    Notice {
        /// The notice.
        notice: Notice,
    },
}

impl WireUpdate {
    /// The wire form of an update.
    ///
    /// # Errors
    /// [`foya_storage::codec::EncodeError`] when the event cannot be encoded.
    pub fn from_update(
        update: &SessionUpdate,
    ) -> Result<WireUpdate, foya_storage::codec::EncodeError> {
        Ok(match update {
            SessionUpdate::Event(event) => WireUpdate::Event {
                session_id: event.session_id,
                seq: event.seq,
                body: encode_event(event)?,
            },
            SessionUpdate::Delta(d) => WireUpdate::Delta {
                session_id: d.session_id,
                run_id: d.run_id,
                delta: d.delta.clone(),
            },
            SessionUpdate::Notice(notice) => WireUpdate::Notice {
                notice: notice.clone(),
            },
        })
    }

    /// Back to a [`SessionUpdate`].
    ///
    /// # Errors
    /// [`foya_storage::ReadError`] when the event body does not decode.
    pub fn into_update(self) -> Result<SessionUpdate, foya_storage::ReadError> {
        Ok(match self {
            WireUpdate::Event {
                session_id,
                seq,
                body,
            } => {
                let event: Event = decode_event(session_id, seq, &body)?;
                SessionUpdate::Event(event)
            }
            WireUpdate::Delta {
                session_id,
                run_id,
                delta,
            } => SessionUpdate::Delta(LiveDelta {
                session_id,
                run_id,
                delta,
            }),
            WireUpdate::Notice { notice } => SessionUpdate::Notice(notice),
        })
    }
}

/// One push from a node's forwarder to a subscriber actor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Push {
    /// An update of subscription attempt `epoch`.
    Update {
        /// The attempt it belongs to.
        epoch: u64,
        /// The update.
        update: WireUpdate,
    },
    /// Bytes that did not decode (never sent; produced by `from_bytes`).
    #[serde(skip)]
    Undecodable(String),
}

fn to_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // An encode failure leaves an empty payload, which decodes as `Undecodable` on the
    // other side (the codec rejects empty values).
    encode(value).unwrap_or_default()
}

impl BytesConvertable for GatewayRequest {
    fn into_bytes(self) -> Vec<u8> {
        to_bytes(&self)
    }
    fn from_bytes(bytes: Vec<u8>) -> Self {
        decode(&bytes).unwrap_or_else(|e| GatewayRequest::Undecodable(e.to_string()))
    }
}

impl BytesConvertable for GatewayReply {
    fn into_bytes(self) -> Vec<u8> {
        to_bytes(&self)
    }
    fn from_bytes(bytes: Vec<u8>) -> Self {
        decode(&bytes).unwrap_or_else(|e| GatewayReply::Failed {
            message: format!("undecodable reply: {e}"),
            error: None,
        })
    }
}

impl BytesConvertable for Push {
    fn into_bytes(self) -> Vec<u8> {
        to_bytes(&self)
    }
    fn from_bytes(bytes: Vec<u8>) -> Self {
        decode(&bytes).unwrap_or_else(|e| Push::Undecodable(e.to_string()))
    }
}

/// The gateway actor's mailbox: one RPC carrying a [`GatewayRequest`].
#[derive(RactorClusterMessage)]
pub enum GatewayMsg {
    /// A request and where to answer it.
    #[rpc]
    Request(GatewayRequest, RpcReplyPort<GatewayReply>),
}

impl std::fmt::Debug for GatewayMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayMsg::Request(request, _) => f.debug_tuple("Request").field(request).finish(),
        }
    }
}
