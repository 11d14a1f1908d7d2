//! The `shell` tool with real processes: output and exit codes, the output cap, the
//! Landlock sandbox (writes and TCP outside it are denied), and cancel / timeout / drop
//! killing the whole process group.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::testkit::procs::process_gone;
use foya_actors::testkit::{
    Recorder, call_tool as call, sandbox_runner as runner, tool_context, tool_context as ctx,
    wait_until,
};
use foya_actors::tools::builtin::Shell;
use foya_actors::tools::sandbox::SandboxRunner;
use foya_actors::tools::{SandboxPolicy, Tool, ToolOutput};
use foya_protocol::ApprovalMode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WW: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

fn temp_cwd() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

#[tokio::test]
async fn runs_bash_and_reports_the_exit_code() {
    let (_dir, cwd) = temp_cwd();
    let tool = Shell::new(runner());
    for (mode, sandbox) in [
        (ApprovalMode::Bypass, SandboxPolicy::None),
        (ApprovalMode::Auto, WW),
    ] {
        let ctx = ctx(&cwd, mode, sandbox);
        let recorder = Recorder::default();
        let out = tool
            .call(
                &ctx,
                json!({"command": "echo out; echo err >&2; pwd"}),
                CancellationToken::new(),
                &recorder,
            )
            .await;
        let expected = format!("out\nerr\n{}\n", cwd.display());
        assert_eq!(
            out,
            ToolOutput::ok(format!("{expected}[exit code: 0]")),
            "{sandbox:?}"
        );
        assert_eq!(*recorder.output.lock().unwrap(), expected);
        assert_eq!(
            call(&tool, &ctx, json!({"command": "echo oops; exit 3"})).await,
            ToolOutput::error("oops\n[exit code: 3]")
        );
        assert_eq!(
            call(&tool, &ctx, json!({"command": "true"})).await,
            ToolOutput::ok("(no output)\n[exit code: 0]")
        );
    }
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let command = "printf 'h%.0s' $(seq 20000); head -c 60000 /dev/zero | tr '\\0' m; printf 't%.0s' $(seq 20000)";
    let out = call(&Shell::new(runner()), &ctx, json!({"command": command})).await;
    let expected = format!(
        "{}\n[... 67232 bytes of output cut ...]\n{}\n[exit code: 0]",
        "h".repeat(16_384),
        "t".repeat(16_384)
    );
    assert_eq!(out, ToolOutput::ok(expected));
}

#[tokio::test]
async fn sandbox_denies_writes_outside_the_working_directory() {
    let (_dir, cwd) = temp_cwd();
    let (_other, other) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    // The working directory is writable as a whole, its top level included (its
    // protected paths are read-only mounts, see `sandbox/shield.rs`).
    std::fs::create_dir(cwd.join("sub")).unwrap();
    let command = format!(
        "echo in > sub/inside.txt && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo q > /dev/null; \
         echo x > {}/outside.txt",
        other.display()
    );
    let out = call(&Shell::new(runner()), &ctx, json!({"command": command})).await;
    assert_eq!(
        out,
        ToolOutput::error(format!(
            "t\nbash: line 1: {}/outside.txt: Read-only file system\n[exit code: 1]",
            other.display()
        ))
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join("sub/inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!other.join("outside.txt").exists());
    let out = call(
        &Shell::new(runner()),
        &ctx,
        json!({"command": "echo top > top.txt"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        std::fs::read_to_string(cwd.join("top.txt")).unwrap(),
        "top\n"
    );

    // Read-only: no write even in the working directory.
    let ro = tool_context(&cwd, ApprovalMode::Auto, SandboxPolicy::ReadOnly);
    let out = call(
        &Shell::new(runner()),
        &ro,
        json!({"command": "cat sub/inside.txt; echo y > sub/inside.txt"}),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::error(
            "in\nbash: line 1: sub/inside.txt: Read-only file system\n[exit code: 1]"
        )
    );
}

/// Landlock rules TCP `connect` and `bind` alone: with the network off a sandboxed
/// command still sent UDP (a DNS query to any resolver carries any text), raw IP and
/// link-layer packets as root, reached any TCP server through an MPTCP socket (which
/// falls back to TCP), and served on a TCP port of every interface (`listen` binds a
/// fresh socket itself). Each such `socket` now fails with `EPERM` (1), and no datagram
/// arrives; a Unix socket still works. With the network allowed, UDP works as before.
/// Under either, an abstract Unix socket made outside the sandbox cannot be reached
/// (Landlock's scoping: a local service, such as a session bus, could act for it).
#[tokio::test]
async fn sandbox_denies_udp_raw_and_mptcp_sockets_unless_network_is_allowed() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let (_dir, cwd) = temp_cwd();
    let script = format!(
        "import socket
def attempt(name, make):
    try:
        make()
        print(name, 'sent')
    except OSError as e:
        print(name, e.errno)
attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('127.0.0.1', {udp_port})))
attempt('udp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC))
attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {tcp_port})))
attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt('packet', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
attempt('listen', lambda: socket.socket().listen(1))
attempt('unix', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
"
    );
    let command = format!("python3 -c \"{script}\"");
    let offline = call(
        &Shell::new(runner()),
        &ctx(&cwd, ApprovalMode::Auto, WW),
        json!({"command": command}),
    )
    .await;
    assert_eq!(
        offline,
        ToolOutput::ok(
            "udp 1\nudp6 1\nmptcp 1\nraw 1\npacket 1\nlisten 1\nunix sent\n[exit code: 0]"
        )
    );
    let mut buf = [0u8; 16];
    assert!(udp.recv_from(&mut buf).is_err(), "a datagram arrived");
    let networked = ctx(
        &cwd,
        ApprovalMode::Auto,
        SandboxPolicy::WorkspaceWrite { network: true },
    );
    let udp_only = format!(
        "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'sent', ('127.0.0.1', {udp_port})); print('udp sent')\""
    );
    let online = call(
        &Shell::new(runner()),
        &networked,
        json!({"command": udp_only}),
    )
    .await;
    assert_eq!(online, ToolOutput::ok("udp sent\n[exit code: 0]"));
    udp.set_nonblocking(false).unwrap();
    udp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let (n, _) = udp.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"sent");

    use std::os::linux::net::SocketAddrExt as _;
    let name = format!("foya-test-{}", std::process::id());
    let abstract_addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let _service = std::os::unix::net::UnixListener::bind_addr(&abstract_addr).unwrap();
    let reach = format!(
        "python3 -c \"import socket\ntry:\n    socket.socket(socket.AF_UNIX).connect(b'\\\\0{name}'); print('reached')\nexcept OSError as e:\n    print(e.errno)\""
    );
    for policy in [&ctx(&cwd, ApprovalMode::Auto, WW), &networked] {
        let out = call(&Shell::new(runner()), policy, json!({"command": reach})).await;
        assert_eq!(out, ToolOutput::ok("1\n[exit code: 0]"));
    }
}

/// `TIOCSTI` pushes characters into a terminal's input: a sandboxed command shares the
/// runtime's controlling terminal, so it could type a command into the TUI or, once
/// `foya` exits, into the user's shell, outside any sandbox. The request now fails with
/// `EPERM` (1) before the kernel looks at the descriptor (on `/dev/null` it said
/// `ENOTTY`, 25), also with bits set above its 32 bits.
#[tokio::test]
async fn sandbox_refuses_typing_into_a_terminal() {
    let (_dir, cwd) = temp_cwd();
    let command = "python3 -c \"import fcntl, os, termios\nfor request in (termios.TIOCSTI, 0x100005412):\n    try:\n        fcntl.ioctl(os.open('/dev/null', os.O_RDWR), request, b'x'); print('typed')\n    except OSError as e:\n        print(e.errno)\"";
    let out = call(
        &Shell::new(runner()),
        &ctx(&cwd, ApprovalMode::Auto, WW),
        json!({"command": command}),
    )
    .await;
    assert_eq!(out, ToolOutput::ok("1\n1\n[exit code: 0]"));
}

#[tokio::test]
async fn sandbox_denies_tcp_unless_network_is_allowed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_dir, cwd) = temp_cwd();
    let command = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let denied = call(
        &Shell::new(runner()),
        &ctx(&cwd, ApprovalMode::Auto, WW),
        json!({"command": command}),
    )
    .await;
    assert_eq!(
        denied,
        ToolOutput::error(format!(
            "bash: socket: Operation not permitted\nbash: line 1: /dev/tcp/127.0.0.1/{port}: Operation not permitted\n[exit code: 1]"
        ))
    );
    let networked = ctx(
        &cwd,
        ApprovalMode::Auto,
        SandboxPolicy::WorkspaceWrite { network: true },
    );
    let allowed = call(
        &Shell::new(runner()),
        &networked,
        json!({"command": command}),
    )
    .await;
    assert_eq!(allowed, ToolOutput::ok("connected\n[exit code: 0]"));

    // Binding a TCP port is denied too.
    let bind = "python3 -c \"import socket\ntry:\n    socket.socket().bind(('127.0.0.1', 0)); print('bound')\nexcept OSError as e:\n    print(e)\"";
    let denied = call(
        &Shell::new(runner()),
        &ctx(&cwd, ApprovalMode::Auto, WW),
        json!({"command": bind}),
    )
    .await;
    assert_eq!(
        denied,
        ToolOutput::ok("[Errno 1] Operation not permitted\n[exit code: 0]")
    );
    let allowed = call(&Shell::new(runner()), &networked, json!({"command": bind})).await;
    assert_eq!(allowed, ToolOutput::ok("bound\n[exit code: 0]"));
}

#[tokio::test]
async fn a_missing_helper_never_runs_the_command_unsandboxed() {
    let (_dir, cwd) = temp_cwd();
    let tool = Shell::new(SandboxRunner::new("/nonexistent/foya-sandbox"));
    let out = call(
        &tool,
        &ctx(&cwd, ApprovalMode::Auto, WW),
        json!({"command": "touch ran"}),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::error("cannot start the command: No such file or directory (os error 2)")
    );
    assert!(!cwd.join("ran").exists());
}

/// `(shell pid, background child pid)` from output of [`PIDS`].
fn pids(content: &str) -> (i32, i32) {
    let find = |key: &str| -> i32 {
        let line = content.lines().find_map(|l| l.strip_prefix(key)).unwrap();
        line.parse().unwrap()
    };
    (find("shell="), find("child="))
}

/// Starts a background `sleep`, prints both pids, then waits.
const PIDS: &str = "sleep 30 & echo child=$!; echo shell=$$; wait";

#[tokio::test]
async fn cancel_kills_the_whole_process_group() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let (tool, recorder, cancel) = (
        Shell::new(runner()),
        Recorder::default(),
        CancellationToken::new(),
    );
    let (out, ()) = tokio::join!(
        tool.call(&ctx, json!({"command": PIDS}), cancel.clone(), &recorder),
        async {
            wait_until("both pids", || {
                recorder.output.lock().unwrap().contains("shell=")
            })
            .await;
            cancel.cancel();
        }
    );
    let (shell, child) = pids(&out.content);
    assert_eq!(
        out,
        ToolOutput::error(format!(
            "child={child}\nshell={shell}\n[cancelled; the command's process group was killed]"
        ))
    );
    wait_until("the group to be gone", || {
        process_gone(shell) && process_gone(child)
    })
    .await;
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Bypass, SandboxPolicy::None);
    let out = call(
        &Shell::new(runner()),
        &ctx,
        json!({"command": PIDS, "timeout_ms": 2000}),
    )
    .await;
    let (shell, child) = pids(&out.content);
    assert_eq!(
        out,
        ToolOutput::error(format!(
            "child={child}\nshell={shell}\n[timed out after 2000 ms; the command's process group was killed]"
        ))
    );
    wait_until("the group to be gone", || {
        process_gone(shell) && process_gone(child)
    })
    .await;
}

#[tokio::test]
async fn background_processes_do_not_outlive_the_call() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let out = call(
        &Shell::new(runner()),
        &ctx,
        json!({"command": "sleep 30 & echo child=$!; echo shell=$$"}),
    )
    .await;
    let (shell, child) = pids(&out.content);
    assert_eq!(
        out,
        ToolOutput::ok(format!("child={child}\nshell={shell}\n[exit code: 0]"))
    );
    wait_until("the group to be gone", || {
        process_gone(shell) && process_gone(child)
    })
    .await;
}

#[tokio::test]
async fn dropping_the_call_kills_the_whole_process_group() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let (tool, recorder) = (Shell::new(runner()), Recorder::default());
    {
        let call = tool.call(
            &ctx,
            json!({"command": PIDS}),
            CancellationToken::new(),
            &recorder,
        );
        tokio::select! {
            _ = call => panic!("the command should still be running"),
            () = wait_until("both pids", || recorder.output.lock().unwrap().contains("shell=")) => {}
        }
    }
    let (shell, child) = pids(&recorder.output.lock().unwrap());
    wait_until("the group to be gone", || {
        process_gone(shell) && process_gone(child)
    })
    .await;
}

/// The model's first write in its working directory plants a `CACHEDIR.TAG` beside a
/// repository the user had (`write_file`, unasked under `auto`), before any command ran
/// there: the commands' own listings then skip that folder, and before, the next command
/// could write the repository's config (`core.fsmonitor`, run by the user's next `git
/// status`). The file tools list the working directory first, as commands do (looking
/// into tagged folders too), and the shield keeps what that listing found.
#[tokio::test]
async fn a_tag_the_file_tools_plant_first_does_not_unshield_a_nested_repository() {
    let (_dir, cwd) = temp_cwd();
    let config = cwd.join("vendor/lib/.git/config");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "[core]\n").unwrap();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let tag = json!({"path": "vendor/CACHEDIR.TAG", "content": "Signature: 8a477f597d28d172789f06886806bc55\n"});
    let wrote = call(&foya_actors::tools::builtin::write_file(), &ctx, tag).await;
    assert!(!wrote.is_error, "{wrote:?}");
    let command = "p=.gi; p=${p}t; printf '\\tfsmonitor = ./evil\\n' >> vendor/lib/$p/config; \
                   touch made; echo end";
    let out = call(&Shell::new(runner()), &ctx, json!({"command": command})).await;
    assert!(out.content.contains("end\n"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "[core]\n",
        "{out:?}"
    );
    assert!(cwd.join("made").exists(), "{out:?}");
}
