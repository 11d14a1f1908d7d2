//! The SSE framing's byte scanner: its event-size accounting, and that it hands the
//! parser complete LF-terminated lines only, which the parser reads into exactly the
//! events the raw chunks gave.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use eventsource_stream::Event;
use proptest::prelude::*;

/// `body` with every line terminator (CRLF, CR, LF) as LF.
fn normalized(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut prev_cr = false;
    for &b in body {
        match b {
            b'\n' if prev_cr => {}
            b'\r' | b'\n' => out.push(b'\n'),
            _ => out.push(b),
        }
        prev_cr = b == b'\r';
    }
    out
}

/// Checks what the scanner passes on for `chunks` (in SSE mode, within the size cap):
/// each piece is empty or ends in LF and holds no CR, and all of them with the EOF flush
/// are the normalised body and a blank line.
fn check_lines(chunks: &[Vec<u8>]) -> Result<(), TestCaseError> {
    let mut scanner = Scanner::new(usize::MAX);
    let mut passed = Vec::new();
    for chunk in chunks {
        let piece = scanner.scan(Bytes::from(chunk.clone())).unwrap();
        prop_assert!(piece.is_empty() || piece.ends_with(b"\n"), "{piece:?}");
        prop_assert!(!piece.contains(&b'\r'), "{piece:?}");
        passed.extend_from_slice(&piece);
    }
    let piece = scanner.end().unwrap();
    prop_assert!(piece.ends_with(b"\n") && !piece.contains(&b'\r'));
    passed.extend_from_slice(&piece);
    let mut body = chunks.concat();
    body.extend_from_slice(b"\n\n");
    prop_assert_eq!(passed, normalized(&body));
    Ok(())
}

/// The events (or parser error) `eventsource-stream` reads from `pieces`.
fn parse<S: Stream<Item = Result<Bytes, Framing>>>(pieces: S) -> Vec<Result<Event, String>> {
    futures::executor::block_on(
        pieces
            .eventsource()
            .map(|e| e.map_err(|e| e.to_string()))
            .collect(),
    )
}

/// `body` cut at `cuts` (positions, any order, out-of-range ones clamped).
fn split(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([body.len()]) {
        chunks.push(body[start..cut].to_vec());
        start = cut;
    }
    chunks
}

/// Pieces of SSE text: fields, comments, every line terminator, multi-byte text.
fn token() -> impl Strategy<Value = &'static [u8]> {
    prop_oneof![
        Just(&b"data: x"[..]),
        Just(&b"data:"[..]),
        Just(&b"data"[..]),
        Just(&b"event: e"[..]),
        Just(&b"id: 7"[..]),
        Just(&b"retry: 5"[..]),
        Just(&b": ping"[..]),
        Just("é€".as_bytes()),
        Just(&b" "[..]),
        Just(&b"\n"[..]),
        Just(&b"\r"[..]),
        Just(&b"\r\n"[..]),
        Just(&b"\n\n"[..]),
    ]
}

/// The byte-at-a-time accounting the run-based scan replaced: the state after each
/// chunk, or the chunk index at which an event grew too large.
fn reference(chunks: &[Vec<u8>], max: usize) -> Result<Vec<(usize, usize, bool)>, usize> {
    let (mut line_len, mut since_blank, mut prev_cr) = (0, 0, false);
    let mut states = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        for &b in chunk {
            if b == b'\n' && prev_cr {
                prev_cr = false;
                continue;
            }
            if b == b'\n' || b == b'\r' {
                if line_len == 0 {
                    since_blank = 0;
                }
                line_len = 0;
                prev_cr = b == b'\r';
            } else {
                prev_cr = false;
                line_len += 1;
                since_blank += 1;
                if since_blank > max {
                    return Err(i);
                }
            }
        }
        states.push((line_len, since_blank, prev_cr));
    }
    Ok(states)
}

proptest! {
    #[test]
    fn run_based_scan_counts_like_the_byte_loop(
        chunks in proptest::collection::vec(
            proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'a')], 0..12),
            1..8,
        ),
        max in 1usize..10,
    ) {
        // A leading `d` keeps the body in SSE mode (not sniffed as JSON).
        let mut chunks = chunks;
        chunks[0].insert(0, b'd');
        let mut scanner = Scanner::new(max);
        let mut got = Ok(Vec::new());
        for (i, chunk) in chunks.iter().enumerate() {
            match scanner.scan(Bytes::from(chunk.clone())) {
                Ok(passed) => {
                    prop_assert!(passed.is_empty() || passed.ends_with(b"\n"));
                    if let Ok(states) = &mut got {
                        states.push((scanner.line_len, scanner.since_blank, scanner.prev_cr));
                    }
                }
                Err(Framing::TooLarge(m)) => {
                    prop_assert_eq!(m, max);
                    got = Err(i);
                    break;
                }
                Err(other) => prop_assert!(false, "unexpected {other}"),
            }
        }
        prop_assert_eq!(got, reference(&chunks, max));
    }

    #[test]
    fn only_complete_lines_are_passed_on_and_read_as_the_raw_chunks_were(
        tokens in proptest::collection::vec(token(), 0..40),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        // A leading `d` keeps the body in SSE mode (not sniffed as JSON).
        let body: Vec<u8> = std::iter::once(&b"d"[..]).chain(tokens).collect::<Vec<_>>().concat();
        let chunks = split(&body, &cuts);
        check_lines(&chunks)?;
        // What the parser made of the raw chunks (and the EOF blank line) before the
        // scanner held lines back and normalised their terminators.
        let raw = chunks
            .iter()
            .cloned()
            .chain([b"\n\n".to_vec()])
            .map(|c| Ok::<_, Framing>(Bytes::from(c)));
        let before = parse(stream::iter(raw));
        let input = || stream::iter(chunks.clone().into_iter().map(|c| Ok(Bytes::from(c))));
        prop_assert_eq!(parse(framed(input(), SseLimits::default())), before);
        let pieces: Vec<Bytes> = futures::executor::block_on(
            framed(input(), SseLimits::default()).map(Result::unwrap).collect(),
        );
        for piece in &pieces {
            let lines = piece.iter().filter(|&&b| b == b'\n').count();
            prop_assert!(piece.ends_with(b"\n") && (1..=LINES_PER_PIECE).contains(&lines));
        }
    }
}

#[test]
fn a_long_line_in_small_chunks_is_held_until_it_ends() {
    let mut scanner = Scanner::new(1 << 20);
    assert_eq!(scanner.scan(Bytes::from_static(b"data: {")).unwrap(), "");
    for _ in 0..1000 {
        assert_eq!(scanner.scan(Bytes::from_static(b"xxxxxxxx")).unwrap(), "");
    }
    let mut line = b"data: {".to_vec();
    line.extend(std::iter::repeat_n(b'x', 8000));
    line.extend_from_slice(b"}\n");
    assert_eq!(
        scanner.scan(Bytes::from_static(b"}\n\ndata: ")).unwrap(),
        [&line[..], b"\n"].concat()
    );
    assert_eq!(scanner.end().unwrap(), "data: \n\n");
}

#[test]
fn cr_lf_and_crlf_split_over_chunks_pass_on_as_lf() {
    let mut scanner = Scanner::new(1 << 20);
    let mut scan = |chunk: &'static [u8]| scanner.scan(Bytes::from_static(chunk)).unwrap();
    assert_eq!(scan(b"data: a\r"), "data: a\n");
    // The LF completes the CRLF split over chunks: no blank line.
    assert_eq!(scan(b"\ndata: b\r\r"), "data: b\n\n");
    assert_eq!(scan(b"data: c\r"), "data: c\n");
    assert_eq!(scan(b"data: d"), "");
    assert_eq!(scan(b"\r\n\r"), "data: d\n\n");
    assert_eq!(scanner.end().unwrap(), "\n");
}

#[test]
fn every_chunking_of_the_fixtures_passes_on_whole_lines() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../actors/tests/fixtures/providers");
    let mut n = 0;
    for kind in ["openai-chat", "anthropic", "openai-responses"] {
        for entry in std::fs::read_dir(dir.join(kind)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "sse") {
                let body = std::fs::read(&path).unwrap();
                let bytes: Vec<Vec<u8>> = body.iter().map(|b| vec![*b]).collect();
                check_lines(&bytes).unwrap();
                check_lines(&[body]).unwrap();
                n += 1;
            }
        }
    }
    assert!(n > 0);
}

#[test]
fn many_lines_at_once_go_to_the_parser_a_few_at_a_time() {
    let body: String = (0..40).map(|i| format!("data: {i}\n\n")).collect();
    let input = stream::iter([Ok(Bytes::from(body.clone()))]);
    let pieces: Vec<Bytes> = futures::executor::block_on(
        framed(input, SseLimits::default())
            .map(Result::unwrap)
            .collect(),
    );
    let lines: Vec<usize> = pieces
        .iter()
        .map(|p| p.iter().filter(|&&b| b == b'\n').count())
        .collect();
    // 80 lines, then the EOF's blank lines.
    assert_eq!(lines, vec![16, 16, 16, 16, 16, 2]);
    assert_eq!(pieces.concat(), [body.as_bytes(), b"\n\n"].concat());
}
