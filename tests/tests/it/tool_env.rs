//! Tool processes do not inherit the runtime's secrets: a `shell` call of `foya run`,
//! sandboxed (`--approval auto`) or not (`bypass`), sees the environment without the
//! variables whose names contain `KEY`, `SECRET` or `TOKEN` (where API keys live), and
//! with every other variable. Nor do they get the other shapes credentials come in
//! (`PGPASSWORD`, `MYSQL_PWD`, `DB_PASSWORD`, a `DATABASE_URL` with a password,
//! `GITHUB_PAT`, `NPM_AUTH`, `SLACK_WEBHOOK_URL`, `DOCKER_AUTH_CONFIG`, `SMTP_PASS`, URLs
//! with a key or a signature in their query): not a shell
//! command, not a hook, not a real stdio MCP server (`tests/mcp/env_server.py`, which
//! starts from an allow-list), while `PATH`, `HOME` and an ordinary `FOO` still reach
//! commands and hooks; the user's `[shell_environment]` and a server's `env` choose more.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::child::{read_until, runs_as_root, spawn_json_lines, wait_exit};
use foya_tests::foya_bin::scripted;
use serde_json::json;
use std::time::{Duration, Instant};

/// Global wait for one run.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The `tool_message` content of a scripted `shell` call of `command` in `foya run
/// --json start` with `approval`, the `foya` command first given to `adjust` (more
/// environment, a wrapper) with the run's temporary directory.
fn tool_message_of(
    approval: &str,
    command: &str,
    adjust: impl FnOnce(std::process::Command, &std::path::Path) -> std::process::Command,
) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": command}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let mut foya = adjust(scripted("run", approval, &script, &data, &work), tmp.path());
    let piped = spawn_json_lines(foya.args(["--json", "start"]));
    let deadline = Instant::now() + TIMEOUT;
    let result = read_until(&piped.lines, deadline, |l| l["type"] == "tool_message")
        .pop()
        .unwrap();
    assert_eq!(wait_exit(piped.child, deadline).code(), Some(0));
    result["content"].as_str().unwrap().to_owned()
}

/// The `tool_message` content of a `shell` call printing three variables, in a `foya run`
/// with `approval`.
fn printed_by_a_tool(approval: &str) -> String {
    let command = r#"printf '%s|%s|%s|%s\n' "$FOYA_TEST_VISIBLE" "$FOYA_TEST_API_KEY" "$MY_SECRET_VALUE" "$Gh_Token""#;
    tool_message_of(approval, command, |mut foya, _| {
        foya.env("FOYA_TEST_VISIBLE", "shown")
            .env("FOYA_TEST_API_KEY", "sk-WITHHELD-1")
            .env("MY_SECRET_VALUE", "WITHHELD-2")
            .env("Gh_Token", "WITHHELD-3");
        foya
    })
}

#[test]
fn a_sandboxed_tool_does_not_see_the_runtimes_keys_secrets_or_tokens() {
    assert_eq!(printed_by_a_tool("auto"), "shown|||\n[exit code: 0]");
}

#[test]
fn an_unsandboxed_tool_does_not_see_them_either() {
    assert_eq!(printed_by_a_tool("bypass"), "shown|||\n[exit code: 0]");
}

/// Credentials in Foya's environment, in the shapes they come in (name → value).
const CREDENTIALS: &[(&str, &str)] = &[
    ("PGPASSWORD", "cred-pg-1"),
    ("MYSQL_PWD", "cred-mysql-2"),
    ("DB_PASSWORD", "cred-db-3"),
    (
        "DATABASE_URL",
        "postgres://app:cred-url-4@localhost:5432/app",
    ),
    ("GITHUB_PAT", "cred-pat-5"),
    ("NPM_AUTH", "cred-npm-6"),
    (
        "SLACK_WEBHOOK_URL",
        "https://hooks.slack.com/services/cred-hook-7",
    ),
    (
        "DOCKER_AUTH_CONFIG",
        r#"{"auths":{"r":{"auth":"cred-docker-8"}}}"#,
    ),
    ("SMTP_PASS", "cred-smtp-9"),
    // URLs whose query carries the credential: an API key, a signed (SAS) URL.
    ("MAPS_URL", "https://maps.example/api/js?key=cred-query-10"),
    (
        "BACKUP_TARGET",
        "copy to https://acct.blob.example/c?sv=2020-01-01&sig=cred-sas-11 nightly",
    ),
];

/// What a `shell` call, a `PreToolUse` hook and the tool `getenv` of a stdio MCP server
/// (`tests/mcp/env_server.py`) see of `names` in one `foya run --approval bypass` whose
/// environment holds [`CREDENTIALS`] and `FOO`, with `config` added to the user's config.
struct Seen {
    shell: String,
    hook: String,
    mcp: String,
}

fn seen(names: &[&str], config: &str) -> Seen {
    let tmp = tempfile::tempdir().unwrap();
    let (home, data, work) = (
        tmp.path().join("home"),
        tmp.path().join("data"),
        tmp.path().join("work"),
    );
    std::fs::create_dir_all(&work).unwrap();
    let hook_out = tmp.path().join("hook-env.txt");
    let list = names.join(",");
    let print = names
        .iter()
        .map(|n| format!("echo \"{n}=${{{n}-unset}}\""))
        .collect::<Vec<_>>()
        .join("; ");
    let hook = format!("({print}) > {}", hook_out.display());
    foya_tests::mcp::write_user_config(
        &home,
        &format!(
            "[mcp_servers.envs]\ncommand = {}\nargs = [{}]\n\n\
             [[hooks.PreToolUse]]\nmatcher = \"shell\"\nhooks = [{{ type = \"command\", command = {hook:?} }}]\n\n{config}",
            foya_tests::mcp::toml_path(&foya_tests::mcp::python()),
            foya_tests::mcp::toml_path(
                &foya_tests::mcp::repo_root().join("tests/mcp/env_server.py")
            ),
        ),
    );
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [
            {"id": "sh", "name": "shell", "arguments": {"command": print}},
            {"id": "mcp", "name": "mcp__envs__getenv", "arguments": {"names": list}}
        ]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let mut command = scripted("run", "bypass", &script, &data, &work);
    command.env("HOME", &home).env("FOO", "harmless-foo");
    for (name, value) in CREDENTIALS {
        command.env(name, value);
    }
    let piped = spawn_json_lines(command.args(["--json", "start"]));
    let deadline = Instant::now() + TIMEOUT;
    let lines = read_until(&piped.lines, deadline, |l| l["type"] == "turn_complete");
    assert_eq!(
        wait_exit(piped.child, deadline).code(),
        Some(0),
        "{lines:#?}"
    );
    let result = |id: &str| {
        lines
            .iter()
            .find(|l| l["type"] == "tool_message" && l["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no result of {id}: {lines:#?}"))["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    Seen {
        shell: result("sh"),
        hook: std::fs::read_to_string(&hook_out).unwrap(),
        mcp: result("mcp"),
    }
}

#[test]
fn credentials_reach_no_tool_server_shell_command_or_hook() {
    foya_tests::foya_bin();
    let mut names: Vec<&str> = CREDENTIALS.iter().map(|(n, _)| *n).collect();
    names.extend(["FOO", "PATH", "HOME"]);
    let seen = seen(&names, "");
    for (what, text) in [
        ("shell", &seen.shell),
        ("hook", &seen.hook),
        ("MCP server", &seen.mcp),
    ] {
        for (name, value) in CREDENTIALS {
            let secret = value
                .split(['/', ':', '@', '"', '=', ' '])
                .find(|p| p.starts_with("cred-"))
                .unwrap();
            assert!(!text.contains(secret), "{what} saw {name}: {text}");
        }
        assert!(text.contains("PATH=/"), "{what}: {text}");
        assert!(text.contains("HOME=/"), "{what}: {text}");
    }
    // Ordinary variables still reach commands and hooks; a tool server gets only an
    // allow-list (and what its config names).
    assert!(seen.shell.contains("FOO=harmless-foo"), "{}", seen.shell);
    assert!(seen.hook.contains("FOO=harmless-foo"), "{}", seen.hook);
    assert!(seen.mcp.contains("FOO unset"), "{}", seen.mcp);
}

#[test]
fn the_users_shell_environment_and_a_servers_env_vars_choose_what_passes() {
    foya_tests::foya_bin();
    // Commands and hooks: the core variables, plus one credential named on purpose, minus
    // one excluded; the server: its `env_vars`.
    let config = "[shell_environment]\ninherit = \"core\"\ninclude = [\"GITHUB_PAT\", \"FOO\"]\nexclude = [\"HOME\"]\n\n\
                  [mcp_servers.envs.env]\nSET_HERE = \"by-config\"\n";
    let seen = seen(
        &[
            "GITHUB_PAT",
            "FOO",
            "HOME",
            "PATH",
            "PGPASSWORD",
            "SET_HERE",
        ],
        config,
    );
    for (what, text) in [("shell", &seen.shell), ("hook", &seen.hook)] {
        assert!(text.contains("GITHUB_PAT=cred-pat-5"), "{what}: {text}");
        assert!(text.contains("FOO=harmless-foo"), "{what}: {text}");
        assert!(text.contains("HOME=unset"), "{what}: {text}");
        assert!(text.contains("PATH=/"), "{what}: {text}");
        assert!(text.contains("PGPASSWORD=unset"), "{what}: {text}");
    }
    assert!(seen.mcp.contains("SET_HERE=by-config"), "{}", seen.mcp);
    assert!(seen.mcp.contains("GITHUB_PAT unset"), "{}", seen.mcp);
}

/// `launcher` (which ends by executing its arguments) given `foya`'s program, arguments
/// and environment.
fn launching(
    mut launcher: std::process::Command,
    foya: &std::process::Command,
) -> std::process::Command {
    launcher.arg(foya.get_program()).args(foya.get_args());
    for (name, value) in foya.get_envs() {
        match value {
            Some(value) => launcher.env(name, value),
            None => launcher.env_remove(name),
        };
    }
    launcher
}

/// The `tool_message` content of a `shell` call telling whether its shell holds
/// descriptor 7, in a `foya run` with `approval` started with descriptor 7 open (a
/// shell's redirection, as a CI runner or a wrapper script leaves one).
fn descriptor_seen_by_a_tool(approval: &str) -> String {
    let command =
        r#"if [ -e /proc/$$/fd/7 ]; then echo "fd 7: $(cat <&7)"; else echo "no fd 7"; fi"#;
    tool_message_of(approval, command, |foya, tmp| {
        let secret = tmp.join("inherited.txt");
        std::fs::write(&secret, "inherited-secret").unwrap();
        // `bash` opens descriptor 7 (not close-on-exec) and becomes `foya`.
        let mut wrapped = std::process::Command::new("bash");
        wrapped
            .arg("-c")
            .arg(r#"exec 7<"$FOYA_TEST_INHERITED"; exec "$@""#)
            .arg("bash")
            .env("FOYA_TEST_INHERITED", &secret);
        launching(wrapped, &foya)
    })
}

#[test]
fn a_descriptor_foya_inherited_reaches_no_sandboxed_tool() {
    assert_eq!(descriptor_seen_by_a_tool("auto"), "no fd 7\n[exit code: 0]");
}

#[test]
fn a_descriptor_foya_inherited_reaches_no_unsandboxed_tool() {
    assert_eq!(
        descriptor_seen_by_a_tool("bypass"),
        "no fd 7\n[exit code: 0]"
    );
}

/// The signal masks of a program a `shell` call starts and of the shell's parent (the sandbox helper's call
/// process), in a `foya run` with `approval` started with SIGHUP and SIGTERM blocked (a
/// launcher's mask, inherited across `exec`).
fn masks_seen_by_a_tool(approval: &str) -> String {
    // `/proc/self`: `grep` itself, a program the command started (the shell blocks
    // SIGCHLD while it waits for a pipeline, so its own mask would say so).
    let command = r#"grep SigBlk /proc/self/status /proc/$PPID/status | cut -d: -f2-"#;
    tool_message_of(approval, command, |foya, _| {
        let mut wrapped = std::process::Command::new("python3");
        wrapped.arg("-c").arg(
            "import os, signal, sys; \
                 signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP, signal.SIGTERM}); \
                 os.execv(sys.argv[1], sys.argv[1:])",
        );
        launching(wrapped, &foya)
    })
}

#[test]
fn a_signal_mask_foya_inherited_reaches_neither_the_helper_nor_a_tool() {
    // Blocked in the helper, SIGHUP (its runtime's death) and SIGTERM never arrive: it
    // and the command's tree outlive a SIGKILLed runtime.
    let clean = "SigBlk:\t0000000000000000";
    for approval in ["auto", "bypass"] {
        let seen = masks_seen_by_a_tool(approval);
        let lines: Vec<&str> = seen.lines().take(2).collect();
        assert_eq!(lines, [clean, clean], "{approval}: {seen}");
    }
}

/// A sandboxed `shell` call that walks up its ancestors and greps each one's
/// `/proc/<pid>/environ` for the key kept out of its own environment; it says when it
/// passed the runtime (`foya run … --json start`), so the walk is known to have tried it.
#[test]
fn a_sandboxed_tool_cannot_read_the_runtimes_keys_from_its_proc_environ() {
    let command = r#"p=$$; while [ "$p" -gt 1 ]; do
  p=$(awk '{print $4}' /proc/$p/stat)
  tr '\0' ' ' < /proc/$p/cmdline | grep -q -- '--json start' && echo 'runtime reached'
  { tr '\0' '\n' < /proc/$p/environ; } 2>/dev/null | grep -h WITHHELD
done; echo end"#;
    let seen = tool_message_of("auto", command, |mut foya, _| {
        foya.env("FOYA_TEST_API_KEY", "sk-WITHHELD-1");
        foya
    });
    // Run as root (CI), the command kept CAP_SYS_ADMIN and CAP_PERFMON, with which it
    // read the runtime's environment through Landlock.
    assert_eq!(seen, "runtime reached\nend\n[exit code: 0]");
}

/// The runtime is not dumpable: a process of the same user (an unsandboxed hook or MCP
/// server, which the environment policy keeps keys from) cannot read its
/// `/proc/<pid>/environ`, whose owner becomes root. Seen from outside: a long-running
/// `foya` (the simulator's server) run as an ordinary user has root-owned `/proc` files.
#[test]
fn the_runtime_is_not_dumpable_so_its_environment_stays_its_own() {
    use std::io::BufRead as _;
    use std::os::unix::fs::MetadataExt as _;
    let root = runs_as_root();
    let mut command = if root {
        // As root every /proc file is root's anyway: run it as `nobody`.
        let mut setpriv = std::process::Command::new("setpriv");
        setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        setpriv.arg(foya_tests::foya_bin::foya_bin());
        setpriv
    } else {
        std::process::Command::new(foya_tests::foya_bin::foya_bin())
    };
    let mut child = command
        .args(["sim-server", "--listen", "127.0.0.1:0"])
        .current_dir("/")
        .env("FOYA_TEST_API_KEY", "sk-WITHHELD-1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its address printed: `main` has run its start.
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("http://"), "{line}");
    let owner = std::fs::metadata(format!("/proc/{}/environ", child.id()))
        .unwrap()
        .uid();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        owner, 0,
        "the runtime's /proc files are its user's: it is dumpable"
    );
}

/// `foya` started by `wrap` (a program and its first arguments; none: `foya` itself).
fn wrapped(foya: std::process::Command, wrap: &[&str]) -> std::process::Command {
    if wrap.is_empty() {
        foya
    } else {
        foya_tests::child::wrapped(&foya, wrap)
    }
}

/// The capabilities a sandboxed `shell` call's command has (`CapEff` of its
/// `/proc/self/status`), in a `foya run` started by `wrap`.
fn sandboxed_effective_capabilities(wrap: &[&str]) -> (u64, String) {
    let seen = tool_message_of("auto", "grep CapEff /proc/self/status", |foya, _| {
        wrapped(foya, wrap)
    });
    let hex = seen
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap_or_else(|| panic!("{seen}"))
        .trim()
        .to_owned();
    (u64::from_str_radix(&hex, 16).unwrap(), hex)
}

/// Run as root (CI), a sandboxed command still had `CAP_SYS_ADMIN` and `CAP_PERFMON`
/// (with which it read the runtime's environment through Landlock), `CAP_SYS_PTRACE`
/// and `CAP_SETFCAP` (with which it planted `setcap cap_sys_ptrace+ep ./py` in the
/// workspace for another user to run), `CAP_MKNOD` (a device node in the workspace is
/// writable there); it keeps only a container's default set less those, also when what
/// started Foya left capabilities in its inheritable set (which root's `execve` adds
/// to the bounding set's: `setpriv --inh-caps`, as older container runtimes and
/// `pam_cap` did). (Run as an ordinary user it has no capability at all.)
#[test]
fn a_sandboxed_tool_has_no_capability_to_inspect_others_or_to_plant_one() {
    let root = runs_as_root();
    let inherited: &[&str] = &[
        "setpriv",
        "--inh-caps=+sys_admin,+mknod,+setfcap,+sys_ptrace,+fsetid",
        "--",
    ];
    let runs: &[&[&str]] = if root { &[&[], inherited] } else { &[&[]] };
    // What root keeps (Docker's default set less CAP_MKNOD, CAP_FSETID, CAP_SETFCAP):
    // CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, KILL 5, SETGID 6, SETUID 7, SETPCAP 8,
    // NET_BIND_SERVICE 10, NET_RAW 13, SYS_CHROOT 18, AUDIT_WRITE 29; nothing else.
    let kept: u64 = [0, 1, 3, 5, 6, 7, 8, 10, 13, 18, 29]
        .iter()
        .map(|bit| 1 << bit)
        .sum();
    for wrap in runs {
        let (effective, hex) = sandboxed_effective_capabilities(wrap);
        // CAP_FSETID 4, CAP_SYS_RAWIO 17, CAP_SYS_PTRACE 19, CAP_SYS_ADMIN 21,
        // CAP_MKNOD 27, CAP_SETFCAP 31, CAP_PERFMON 38.
        for (name, bit) in [
            ("CAP_FSETID", 4),
            ("CAP_SYS_RAWIO", 17),
            ("CAP_SYS_PTRACE", 19),
            ("CAP_SYS_ADMIN", 21),
            ("CAP_MKNOD", 27),
            ("CAP_SETFCAP", 31),
            ("CAP_PERFMON", 38),
        ] {
            assert_eq!(effective & (1 << bit), 0, "{name} in {hex} ({wrap:?})");
        }
        assert_eq!(
            effective & !kept,
            0,
            "more than the kept set in {hex} ({wrap:?})"
        );
        if root {
            // Ordinary root work (owning and writing any file) still has what it needs.
            assert_eq!(
                effective & kept,
                kept,
                "root lost part of the kept set: {hex}"
            );
        }
    }
}

/// Root without `CAP_SETPCAP` (a hardened container, `setpriv --bounding-set=-setpcap`)
/// cannot drop capabilities from its bounding set: its sandboxed command ran with all of
/// them (a device node, a file capability, the runtime's environ). It is not run now, and
/// the tool result says why.
#[test]
fn a_root_helper_that_cannot_drop_capabilities_runs_no_command() {
    let root = runs_as_root();
    if !root {
        // An ordinary user has no capability to drop: nothing to check.
        return;
    }
    let seen = tool_message_of("auto", "echo the-command-ran", |foya, _| {
        let mut foya = wrapped(foya, &["setpriv", "--bounding-set=-setpcap", "--"]);
        // Namespaces need the same right (to drop `CAP_SYS_ADMIN`) and would fail first.
        foya.env("FOYA_SANDBOX_NO_NAMESPACES", "1");
        foya
    });
    assert!(!seen.contains("the-command-ran"), "{seen}");
    assert!(seen.contains("no CAP_SETPCAP"), "{seen}");
}

/// Landlock rules paths, not modes: a sandboxed command could `chmod 4755` a program it
/// wrote in the workspace (or create one with that mode), for another user of the
/// machine to run as the command's user (root in CI). Every way to ask for a set-user-ID
/// bit now fails (a set-group-ID one too when the group is root's), `openat2` (whose
/// mode a filter cannot read) answers `ENOSYS`, no device node can be made, ordinary
/// modes still work, and a set-ID program already in the workspace loses its bits when
/// the command writes it (no `CAP_FSETID`).
#[test]
fn a_sandboxed_tool_cannot_leave_a_set_id_program_behind() {
    use std::os::unix::fs::PermissionsExt as _;
    // Whether the runtime (and so the command) could make a file of group root: run as
    // root, or with root's group among its own.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let ids = |field: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .unwrap_or_default()
            .split_whitespace()
            .map(|id| id.parse().unwrap())
            .collect()
    };
    let root_group = ids("Uid:").get(1) == Some(&0)
        || ids("Gid:").get(1) == Some(&0)
        || ids("Groups:").contains(&0);
    let command = r#"cp /bin/true plain && chmod 755 plain && chmod +x plain
cp /bin/true a && chmod 4755 a; chmod u+s a
python3 - <<'PY'
import ctypes, os
for name, make in [
    ("b", lambda: os.open("b", os.O_CREAT | os.O_WRONLY, 0o4755)),
    ("c", lambda: os.open("c", os.O_CREAT | os.O_WRONLY, 0o2755)),
    ("d", lambda: os.mknod("d", 0o104755)),
    ("e", lambda: os.chmod(os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o4755), 0o755)),
    ("n", lambda: os.mknod("n", 0o20666, os.makedev(1, 3))),
]:
    try:
        make()
        print(name, "made")
    except OSError as e:
        print(name, "refused", e.errno)
fd = os.open("f", os.O_CREAT | os.O_WRONLY, 0o755)
try:
    os.fchmod(fd, 0o4755)
    print("f fchmod made")
except OSError as e:
    print("f fchmod refused", e.errno)
# openat2(AT_FDCWD, "h", {flags O_CREAT|O_WRONLY, mode 04755, resolve 0}, 24)
libc = ctypes.CDLL(None, use_errno=True)
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
r = libc.syscall(437, -100, b"h", how, 24)
print("h openat2", "made" if r >= 0 else "refused %d" % ctypes.get_errno())
PY
install -m 4755 /bin/true g
echo appended >> planted
stat -c 'mode %a %n' plain a b c f g planted 2>&1"#;
    let seen = tool_message_of("auto", command, |foya, tmp| {
        let planted = tmp.join("work/planted");
        std::fs::copy("/bin/true", &planted).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).unwrap();
        assert_eq!(
            std::fs::metadata(&planted).unwrap().permissions().mode() & 0o7777,
            0o4755
        );
        foya
    });
    let modes: Vec<(&str, u32)> = seen
        .lines()
        .filter_map(|l| l.strip_prefix("mode "))
        .filter_map(|l| l.split_once(' '))
        .map(|(mode, name)| (name, u32::from_str_radix(mode, 8).unwrap()))
        .collect();
    // `b`, `d`, `e` and `h` were never made; `g` is whatever `install` left.
    for name in ["plain", "a", "f", "planted"] {
        assert!(modes.iter().any(|(n, _)| *n == name), "no {name}: {seen}");
    }
    for (name, mode) in &modes {
        assert_eq!(mode & 0o4000, 0, "{name} is set-user-ID: {seen}");
        if root_group {
            assert_eq!(mode & 0o2000, 0, "{name} is set-group-ID: {seen}");
        }
    }
    assert!(modes.contains(&("plain", 0o755)), "{seen}");
    // EPERM (1) for the modes a filter reads and for a device node (no `CAP_MKNOD`),
    // ENOSYS (38) for `openat2`.
    let mut refused = vec![
        "b refused 1",
        "d refused 1",
        "e refused 1",
        "n refused 1",
        "f fchmod refused 1",
        "h openat2 refused 38",
    ];
    if root_group {
        refused.push("c refused 1");
    } else {
        assert!(seen.contains("c made"), "{seen}");
    }
    for refused in refused {
        assert!(seen.contains(refused), "{refused}: {seen}");
    }
}
