//! The machine's interface: what happens to a session ([`SessionInput`]) and what the
//! driver must do about it ([`Effect`]).

use super::*;

/// What happened to the session.
#[derive(Debug)]
pub enum SessionInput {
    /// The session actor started from its log: recover an unfinished turn, run the queue.
    Loaded,
    /// Submit an input (applied once per input id).
    SubmitInput {
        input_id: InputId,
        input: Input,
        /// Whether the session's model accepts images (asked only when `input` has some).
        model_takes_images: bool,
    },
    /// Answer to [`Effect::PrepareInput`]: the input to record and what it turns into.
    InputPrepared {
        input_id: InputId,
        input: Input,
        plan: Plan,
    },
    /// A subscriber attaches (an approver answers approval requests).
    Subscribe { approver: bool },
    /// Cancel the active turn (no-op when idle).
    Cancel,
    /// Drop every queued input.
    ClearQueue,
    /// The approval requests waiting for a decision.
    GetPendingApprovals,
    /// A ToolActor asks for approval; the driver chose `request_id` and keeps the reply.
    ApprovalRequested {
        request_id: ApprovalRequestId,
        run_id: RunId,
        tool_call_id: ToolCallId,
        tool_name: String,
        action: String,
        reason: String,
        grant_key: String,
        /// Whether a live approver subscription is attached.
        approver_attached: bool,
    },
    /// A person answered an approval request.
    DecideApproval {
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    },
    /// Set the title by hand.
    SetTitle { title: String },
    /// Use this provider and model from the next turn on.
    SetModel { provider: String, model: String },
    /// Delete the session (cancels the turn first).
    Delete,
    /// The turn (or one of its tools) appends these events of `run_id`, in order.
    TurnAppend {
        run_id: RunId,
        kinds: Vec<EventKind>,
    },
    /// The turn's stream publishes live deltas.
    Deltas { run_id: RunId, deltas: Vec<Delta> },
    /// Answer to [`Effect::Append`]: the events are in the store.
    Committed(Vec<Event>),
    /// Answer to [`Effect::Append`]: the store refused the write (nothing was written).
    CommitFailed(String),
    /// The active TurnActor exited (`failure`: how, when it failed).
    TurnEnded { failure: Option<String> },
    /// A generated title, applied only if the title is still `expected`.
    TitleGenerated {
        title: String,
        expected: Option<(String, TitleSource)>,
    },
    /// Answer to [`Effect::RunSessionEndHooks`]: the `hook_ran` events to record.
    SessionEndHooksRan { kinds: Vec<EventKind> },
    /// The hibernation timer fired: `quiet` when nothing happened for the whole period,
    /// `watched` when a subscriber or a child actor is still there.
    HibernateCheck { quiet: bool, watched: bool },
    /// Runtime shutdown (or a handoff's end): take no more inputs, start nothing,
    /// cancel the turn (its `turn_cancelled` reason: `cause`'s).
    Shutdown { cause: StopCause },
    /// The session is handed off: start nothing more from the queue (an input taken
    /// meanwhile is queued, for the next owner), let the running turn finish; answered
    /// ([`Effect::AnswerDrained`]) once no turn runs.
    Drain,
}

/// What the driver must do, in order.
#[derive(Debug)]
pub enum Effect {
    /// Append these events (dense seqs) and answer with `Committed` or `CommitFailed`.
    Append(Vec<Event>),
    /// Committed events: extend the in-memory log and send them to subscribers.
    Publish(Vec<Event>),
    /// Send these live deltas of `run_id` to subscribers.
    PublishDeltas { run_id: RunId, deltas: Vec<Delta> },
    /// Load the project, expand the input's command and answer with `InputPrepared`.
    PrepareInput { input_id: InputId, input: Input },
    /// Spawn the TurnActor of `run_id` with a new cancel token.
    StartTurn {
        run_id: RunId,
        mode: TurnMode,
        /// The session's first turn in this runtime (its `SessionStart` hooks run).
        first_in_runtime: bool,
    },
    /// Fire the turn's cancel token, then tell the TurnActor why.
    CancelTurn { reason: &'static str },
    /// Fire the turn's cancel token and stop the TurnActor (its appends fail).
    StopTurn,
    /// Spawn a TitleActor.
    StartTitle {
        text: TitleText,
        /// The session's title now (the generated one lands only if it is unchanged).
        expected: Option<(String, TitleSource)>,
    },
    /// Register a subscriber; it replays up to `replay_end`.
    AddSubscriber { approver: bool, replay_end: Seq },
    /// Answer the request being handled.
    Reply(Answer),
    /// Answer a parked approval request.
    AnswerApproval {
        request_id: ApprovalRequestId,
        answer: ApprovalAnswer,
    },
    /// Drop the reply of an approval request (the call reads it as dropped).
    DropApproval { request_id: ApprovalRequestId },
    /// Drop every parked approval reply (their turn ended).
    DropApprovals,
    /// Answer the delete request.
    AnswerDelete(Result<(), Refusal>),
    /// Answer everyone waiting for the shutdown.
    AnswerShutdown,
    /// Answer everyone waiting for the drain: no turn runs, none will start.
    AnswerDrained,
    /// Run the `SessionEnd` hooks and answer with `SessionEndHooksRan`.
    RunSessionEndHooks,
    /// Remove the transcript exported for the session's hooks.
    ForgetTranscript,
    /// Tell subscribers the session closed (`reason`) and drop them.
    CloseSubscribers { reason: &'static str },
    /// The session went idle: keep its log in memory only within the idle budget.
    WentIdle,
    /// Stop the session actor.
    Stop { reason: &'static str },
    /// The session cannot go on (a write it depends on failed): fail the actor, so the
    /// supervisor restarts it from the log.
    Fail(String),
}

/// The text a title is generated from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TitleText {
    /// This input's text.
    Input(String),
    /// The session's first user message with text (read from the log).
    FirstUserMessage,
}

/// An answer to the request being handled.
#[derive(Debug)]
pub enum Answer {
    /// `SubmitInput`.
    Submitted(Result<InputId, Refusal>),
    /// `Cancel`, `ClearQueue`, `DecideApproval`, `SetTitle`, `SetModel`.
    Done(Result<(), Refusal>),
    /// `GetPendingApprovals`, oldest first.
    PendingApprovals(Vec<ApprovalRequest>),
    /// `TurnAppend`.
    Appended(Result<(), AppendRefused>),
    /// `TitleGenerated`: whether the title was applied.
    TitleApplied(bool),
}

/// The effects of one input. Most inputs have one to four: kept inline, so the hot
/// paths (a turn's appends, its deltas) allocate nothing for them.
pub type Effects = SmallVec<[Effect; 4]>;
