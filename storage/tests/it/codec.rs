//! The stored format: every `EventKind` round-trips, golden encodings stay
//! byte-identical, and unknown format versions are refused.
//!
//! Regenerate the golden files only for a deliberate, versioned format change:
//! `FOYA_BLESS=1 cargo test -p foya-storage --test it -- codec::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{VARIANTS, all_kinds, fixed_run, fixed_session, variant_index};
use foya_protocol::{Event, EventKind, Seq, SessionSummary};
use foya_storage::ReadError;
use foya_storage::codec::{self, FORMAT_VERSION};
use std::path::{Path, PathBuf};

#[test]
fn every_event_kind_round_trips() {
    let kinds = all_kinds();
    let mut seen: Vec<usize> = kinds.iter().map(variant_index).collect();
    seen.dedup();
    assert_eq!(
        seen,
        (0..VARIANTS).collect::<Vec<_>>(),
        "all_kinds covers every variant once"
    );
    for (i, kind) in kinds.into_iter().enumerate() {
        let event = Event {
            session_id: fixed_session(1),
            seq: Seq(i as u64 + 1),
            run_id: (i % 2 == 0).then(|| fixed_run(1)),
            at_ms: 1_700_000_000_000 + i as u64,
            kind,
        };
        let bytes = codec::encode_event(&event).unwrap();
        assert_eq!(bytes[0], FORMAT_VERSION);
        let back = codec::decode_event(event.session_id, event.seq, &bytes).unwrap();
        assert_eq!(back, event, "{} round-trips", event.kind.type_name());
    }
}

#[test]
fn summaries_round_trip() {
    let summary = summary();
    let bytes = codec::encode(&summary).unwrap();
    assert_eq!(codec::decode::<SessionSummary>(&bytes).unwrap(), summary);
}

#[test]
fn unknown_format_versions_are_refused() {
    let event = common::created(fixed_session(1));
    let mut bytes = codec::encode_event(&event).unwrap();
    bytes[0] = FORMAT_VERSION + 1;
    assert_eq!(
        codec::decode_event(event.session_id, event.seq, &bytes),
        Err(ReadError::UnsupportedFormat {
            version: FORMAT_VERSION + 1,
            supported: FORMAT_VERSION
        })
    );
    bytes[0] = 0;
    assert_eq!(
        codec::decode::<SessionSummary>(&bytes),
        Err(ReadError::UnsupportedFormat {
            version: 0,
            supported: FORMAT_VERSION
        })
    );
    assert_eq!(
        codec::decode::<SessionSummary>(&[]),
        Err(ReadError::Decode("empty stored value".into()))
    );
    let garbage = codec::decode_event(event.session_id, event.seq, &[FORMAT_VERSION, 0xc1]);
    assert!(matches!(garbage, Err(ReadError::Decode(_))), "{garbage:?}");
}

fn summary() -> SessionSummary {
    SessionSummary {
        id: fixed_session(1),
        title: Some("Fix the build".into()),
        cwd: "/work/project".into(),
        model: "gpt-test".into(),
        created_at_ms: 1_700_000_000_000,
        updated_at_ms: 1_700_000_000_500,
        last_seq: Seq(42),
        deleted: false,
        node: None,
    }
}

/// The golden events: name → event. Never change an existing entry; add new ones.
fn golden_events() -> Vec<(&'static str, Event)> {
    let names = [
        (0, "session_created"),
        (3, "user_message"),
        (6, "assistant_message"),
        (12, "provider_retry"),
        (16, "turn_complete"),
        (19, "compaction_checkpoint"),
        (22, "session_deleted"),
    ];
    let kinds = all_kinds();
    names
        .into_iter()
        .map(|(i, name)| {
            let kind: EventKind = kinds[i].clone();
            assert_eq!(kind.type_name(), name);
            let event = Event {
                session_id: fixed_session(1),
                seq: Seq(i as u64 + 1),
                run_id: Some(fixed_run(2)),
                at_ms: 1_700_000_000_000,
                kind,
            };
            (name, event)
        })
        .collect()
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `bytes` (today's encoding) with the golden file, or writes it when blessing.
/// Returns the golden bytes.
fn check_golden(name: &str, bytes: &[u8]) -> Vec<u8> {
    let path = golden_dir().join(format!("{name}.bin"));
    if std::env::var_os("FOYA_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, bytes).unwrap();
    }
    let golden = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with FOYA_BLESS=1)", path.display()));
    assert_eq!(
        golden,
        bytes,
        "today's encoding of {name} differs from {}",
        path.display()
    );
    golden
}

#[test]
fn golden_events_decode_and_encode_byte_identically() {
    for (name, expected) in golden_events() {
        let golden = check_golden(name, &codec::encode_event(&expected).unwrap());
        let decoded = codec::decode_event(expected.session_id, expected.seq, &golden).unwrap();
        assert_eq!(decoded, expected, "golden {name} decodes");
    }
}

#[test]
fn golden_summary_decodes_and_encodes_byte_identically() {
    let expected = summary();
    let golden = check_golden("session_summary", &codec::encode(&expected).unwrap());
    assert_eq!(codec::decode::<SessionSummary>(&golden).unwrap(), expected);
}
