//! [`RemoteSession`]: a session on any node of the cluster, driven through the same
//! [`SessionApi`] as a local [`SessionHandle`](crate::SessionHandle).

use super::{ClusterClient, ClusterSubscription};
use crate::handle::ApiSource;
use crate::handle::SessionApi;
use crate::kernel::RuntimeError;
use crate::outcome::{TurnOutcome, TurnStream};
use crate::subscription::SubscribeOptions;
use foya_protocol::{ApprovalDecision, ApprovalRequestId, Input, InputId, Seq, SessionId};

/// A handle to a session wherever it lives in the cluster (made by
/// [`ClusterClient::session`]); cheap to clone. Its methods are those of
/// [`SessionApi`], with the signatures of [`SessionHandle`](crate::SessionHandle)'s: a
/// function generic over `SessionApi` drives a local and a remote session alike.
///
/// Errors are [`RuntimeError`]s: the remote runtime's refusal is the variant a local
/// call gets (a deleted session is [`RuntimeError::SessionDeleted`]); a failure of the
/// cluster layer (node unreachable, no answer within the call timeout) is
/// [`RuntimeError::Cluster`].
#[derive(Debug, Clone)]
pub struct RemoteSession {
    client: ClusterClient,
    id: SessionId,
}

impl RemoteSession {
    pub(crate) fn new(client: ClusterClient, id: SessionId) -> Self {
        Self { client, id }
    }

    /// A stream of the turn of `input_id` (submitted with it now, or earlier), read
    /// from a subscription replaying the session's log from its start.
    async fn turn(&self, input_id: InputId, input: Input) -> Result<TurnStream, RuntimeError> {
        let subscription = self
            .subscribe(Seq::FIRST, SubscribeOptions::default())
            .await?;
        self.submit_with_id(input_id, input).await?;
        let source = ApiSource {
            session: self.clone(),
            subscription,
        };
        Ok(TurnStream::from_source(Box::new(source), input_id))
    }
}

#[async_trait::async_trait]
impl SessionApi for RemoteSession {
    type Subscription = ClusterSubscription;

    fn id(&self) -> SessionId {
        self.id
    }

    async fn submit_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<InputId, RuntimeError> {
        Ok(self.client.submit_with_id(self.id, input_id, input).await?)
    }

    async fn run_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<TurnOutcome, RuntimeError> {
        self.turn(input_id, input).await?.outcome().await
    }

    async fn run_streamed(&self, input: Input) -> Result<TurnStream, RuntimeError> {
        self.turn(InputId::new(), input).await
    }

    async fn subscribe(
        &self,
        from_seq: Seq,
        options: SubscribeOptions,
    ) -> Result<ClusterSubscription, RuntimeError> {
        Ok(self
            .client
            .subscribe_with(self.id, from_seq, options)
            .await?)
    }

    async fn cancel(&self) -> Result<(), RuntimeError> {
        Ok(self.client.cancel(self.id).await?)
    }

    async fn decide_approval(
        &self,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    ) -> Result<(), RuntimeError> {
        let decided = self
            .client
            .decide_approval(self.id, request_id, decision, message);
        Ok(decided.await?)
    }

    async fn delete(&self) -> Result<(), RuntimeError> {
        Ok(self.client.delete(self.id).await?)
    }
}
