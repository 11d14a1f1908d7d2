//! Table-driven tests of what "allow for this session" covers for a command.

use super::{CommandGrant, grant_for};

fn words(text: &str) -> Vec<String> {
    text.split(' ').map(str::to_owned).collect()
}

#[test]
fn plain_commands_grant_their_argv_prefix_or_themselves() {
    let cases = [
        ("git status", CommandGrant::Prefix(words("git status"))),
        (
            "git  status   --short",
            CommandGrant::Prefix(words("git status")),
        ),
        ("'git' \"log\" -p", CommandGrant::Prefix(words("git log"))),
        ("git add -u src", CommandGrant::Prefix(words("git add"))),
        (
            "cargo test -p foya",
            CommandGrant::Prefix(words("cargo test")),
        ),
        ("npm ls", CommandGrant::Prefix(words("npm ls"))),
        ("go test ./...", CommandGrant::Prefix(words("go test"))),
        ("ls -la src", CommandGrant::Exact(words("ls -la src"))),
        ("ls", CommandGrant::Exact(words("ls"))),
        (
            "python3 script.py",
            CommandGrant::Exact(words("python3 script.py")),
        ),
        ("rg -n foo src", CommandGrant::Exact(words("rg -n foo src"))),
        (
            "find . -name x",
            CommandGrant::Exact(words("find . -name x")),
        ),
        ("git", CommandGrant::Exact(words("git"))),
    ];
    for (command, expected) in cases {
        assert_eq!(grant_for(command), expected, "{command}");
    }
    assert_eq!(
        grant_for("git status --short").key().as_deref(),
        Some("git status")
    );
    assert_eq!(grant_for("ls -la").key().as_deref(), Some("=ls -la"));
}

#[test]
fn commands_that_run_other_code_are_never_granted() {
    let refused = [
        "git -c core.pager=evil -p log",
        "git -c alias.x=!cmd x",
        "git --exec-path=/tmp status",
        "git --config-env=core.pager=X log",
        "git -p log",
        "git --git-dir=/tmp/x status",
        "git x",
        "git fetch --upload-pack=evil origin",
        "git push --receive-pack=evil",
        "git rebase -x make main",
        "git grep -O foo",
        "git clone --template=/tmp/t url",
        "git difftool --extcmd=evil",
        "git bisect run make",
        "git submodule foreach evil",
        "rg --pre ./evil foo",
        "rg --pre=./evil foo",
        "find . -exec rm {} ;",
        "find . -execdir sh -c x ;",
        "find . -ok rm {} ;",
        "find . -okdir rm {} ;",
        "find . -delete",
        "fd -x rm",
        "xargs rm",
        "env sh -c x",
        "env",
        "sudo ls",
        "timeout 5 sh",
        "bash -c 'echo hi'",
        "sh -c x",
        "/bin/sh -c x",
        "python3 -c 'print(1)'",
        "python3.12 -c x",
        "node -e x",
        "perl -e x",
        "ruby -e x",
        "awk '{print}' f",
        "FOO=1 git status",
        "cargo --config 'target.x.runner=\"evil\"' test",
        "cargo run",
        "npm run build",
        "npm install",
        "npm ci",
        "pnpm add left-pad",
        "yarn install",
        "pip install evil",
        "go test -exec ./evil ./...",
        "go build -toolexec=./evil",
        "go vet -vettool=./evil",
        "npx evil",
        "tar -I evil -xf a.tar",
        "git status; rm -rf /",
        "git status && evil",
        "echo $(evil)",
        "ls `evil`",
        "cat a > b",
        "ls *",
    ];
    for command in refused {
        let grant = grant_for(command);
        assert!(
            matches!(grant, CommandGrant::None(_)),
            "{command}: {grant:?}"
        );
        assert_eq!(grant.key(), None, "{command}");
    }
}

#[test]
fn a_prefix_grant_does_not_cover_options_that_write_files_or_run_code() {
    let refused = [
        "git log -1 --output=sub/x.txt",
        "git log --output sub/x.txt",
        "git diff --output=d.patch",
        "git show HEAD --output=x",
        "git format-patch -o out HEAD~1",
        "git format-patch -oout HEAD~1",
        "git format-patch --output-directory=out HEAD~1",
        "git apply --build-fake-ancestor=x p.patch",
        "go test -coverprofile=c.out ./...",
        "go test --coverprofile=c.out ./...",
        "go test --exec=./evil ./...",
        "go build -o bin/x .",
        "docker save -o img.tar x",
        "docker image save --output=img.tar x",
        "gh release download -O x.tar v1",
        "uv pip compile -o req.txt req.in",
        "poetry export --output=r.txt",
        "dotnet build -o out",
        "cargo install ripgrep",
        "rustup run stable sh",
        "pip --log=x.log list",
    ];
    for command in refused {
        let grant = grant_for(command);
        assert!(
            matches!(grant, CommandGrant::None(_)),
            "{command}: {grant:?}"
        );
    }
    // Options of the same letters that do not write stay covered.
    let kept = [
        ("git log -1 --oneline", "git log"),
        ("git ls-files -o --exclude-standard", "git ls-files"),
        ("git grep -o foo", "git grep"),
        ("git diff --output-indicator-new=+", "git diff"),
        ("go test -cover ./...", "go test"),
        ("kubectl get pods -o json", "kubectl get"),
        ("pip list -o", "pip list"),
    ];
    for (command, prefix) in kept {
        assert_eq!(
            grant_for(command),
            CommandGrant::Prefix(words(prefix)),
            "{command}"
        );
    }
    assert_eq!(
        grant_for("git log -1 --output=sub/x.txt").describe(),
        "\"allow for this session\" is not offered (`git log --output=sub/x.txt` writes a \
         file the command names); it is asked every time"
    );
}

#[test]
fn the_person_is_told_what_a_grant_covers() {
    assert_eq!(
        grant_for("git status").describe(),
        "\"allow for this session\" allows `git status` with any further arguments"
    );
    assert_eq!(
        grant_for("ls -la").describe(),
        "\"allow for this session\" allows exactly `ls -la` again"
    );
    assert_eq!(
        grant_for("git -c core.pager=x log").describe(),
        "\"allow for this session\" is not offered (`git -c` runs other code or programs); \
         it is asked every time"
    );
}
