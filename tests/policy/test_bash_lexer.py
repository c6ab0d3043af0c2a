"""The Bash lexer: what a command line runs and writes, as rules see it (S-SEC-9, S-POL-2)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.policy._bash_lexer import (
    MAX_COMMANDS,
    MAX_NESTING,
    MAX_TEXT,
    WRAPPERS,
    CommandTooComplexError,
    Redirect,
    SimpleCommand,
    bash_commands,
    program_name,
    run_commands,
    split_commands,
    unquote,
    word_value,
)
from supervisor.policy._rule_config import rules_from_config
from supervisor.policy._rules import decide
from supervisor.policy._tool_permissions import permission_checks

PROJECT = "/work/proj"

# --- words -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("rm", "rm"),
        ('"rm"', "rm"),
        ("'rm'", "rm"),
        ("\\rm", "rm"),
        ("r''m", "rm"),
        ('r"m"', "rm"),
        ("$'\\x72m'", "rm"),  # ANSI-C quoting
        ("$'\\162m'", "rm"),
        ("$'it\\'s'", "it's"),
        ('"a \\"b\\" \\c"', 'a "b" \\c'),  # in "...", a backslash escapes only "\\$`
        ('$"x"', "x"),
        ("~/a", "~/a"),  # no tilde, glob or brace expansion
        ("*.py", "*.py"),
        ("'$HOME'", "$HOME"),  # single quotes: no expansion
        ("a$", "a$"),
    ],
)
def test_word_value_removes_quoting(word: str, value: str) -> None:
    assert word_value(word) == value
    assert unquote(word) == value


@pytest.mark.parametrize("word", ["$X", '"$X"', "${X}/a", "$(echo rm)", "`echo rm`", "a$1"])
def test_word_value_is_unknown_where_an_expansion_decides(word: str) -> None:
    assert word_value(word) is None
    assert unquote(word) == word.replace('"', "")  # kept as written


def test_word_value_uses_known_variables() -> None:
    assert word_value('"$HOME"/.ssh', {"HOME": "/home/u"}) == "/home/u/.ssh"
    assert word_value("${HOME}/x", {"HOME": "/home/u"}) == "/home/u/x"
    assert word_value("$HOME/$X", {"HOME": "/home/u"}) is None


@given(st.text(max_size=30).filter(lambda s: "\x00" not in s))
def test_word_value_undoes_shell_quoting(text: str) -> None:
    """Whatever shlex.quote makes of a string, its value is that string."""
    assert word_value(shlex.quote(text)) == text


@given(st.text(st.characters(max_codepoint=0x7F), max_size=20))
def test_word_value_decodes_ansi_c_hex_escapes(text: str) -> None:
    encoded = "$'" + "".join(f"\\x{ord(char):02x}" for char in text) + "'"
    assert word_value(encoded) == text


@pytest.mark.parametrize(
    ("word", "name"),
    [
        ("rm", "rm"),
        ("/bin/rm", "rm"),
        ("/usr/bin/rm", "rm"),
        ("./rm", "rm"),
        ("../tools/rm", "rm"),
        ("~/bin/rm", "rm"),
        ('"/bin/rm"', "rm"),
        ("\\rm", "rm"),
        ("$'\\x72m'", "rm"),
        ("$CMD", "$CMD"),  # unknown: as written
        ("$(which rm)", "$(which rm)"),
    ],
)
def test_program_name(word: str, name: str) -> None:
    """S-SEC-9: a path or quoting names the program its base name names."""
    assert program_name(word) == name


# --- redirections ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "redirect", "writes", "reads"),
    [
        ("echo x > f", Redirect("", ">", "f"), True, False),
        ("echo x>f", Redirect("", ">", "f"), True, False),
        ("echo x >> f", Redirect("", ">>", "f"), True, False),
        ("echo x >| f", Redirect("", ">|", "f"), True, False),
        ("echo x &> f", Redirect("", "&>", "f"), True, False),
        ("echo x &>> f", Redirect("", "&>>", "f"), True, False),
        ("echo x >& f", Redirect("", ">&", "f"), True, False),
        ("ls 2> f", Redirect("2", ">", "f"), True, False),
        ("ls 2>>f", Redirect("2", ">>", "f"), True, False),
        ("exec {fd}> f", Redirect("{fd}", ">", "f"), True, False),
        ("cat <> f", Redirect("", "<>", "f"), True, True),
        ("cat < f", Redirect("", "<", "f"), False, True),
        ("ls 2>&1", Redirect("2", ">&", "1"), False, False),
        ("ls >&2", Redirect("", ">&", "2"), False, False),
        ("ls 2>&-", Redirect("2", ">&", "-"), False, False),
        ("cat <&3", Redirect("", "<&", "3"), False, False),
        ("cat <<< word", Redirect("", "<<<", "word"), False, False),
        ("cat <<EOF\nbody\nEOF", Redirect("", "<<", "EOF"), False, False),
        ('echo x > "a b"', Redirect("", ">", '"a b"'), True, False),
        ("echo x > $(mktemp)", Redirect("", ">", "$(mktemp)"), True, False),
    ],
)
def test_redirections_are_parsed(
    command: str, redirect: Redirect, writes: bool, reads: bool
) -> None:
    [simple] = [c for c in split_commands(command) if c.redirects]
    assert simple.redirects == (redirect,)
    assert (redirect.writes, redirect.reads) == (writes, reads)


def test_echo_digit_is_an_argument_not_a_descriptor() -> None:
    """A digit separated from ``>`` by a space is a word of the command."""
    [command] = split_commands("echo 2 > f")
    assert command == SimpleCommand(("echo", "2"), (Redirect("", ">", "f"),))


@pytest.mark.parametrize(
    ("command", "subjects"),
    [
        # opencode's own test: the redirection is part of the matched text.
        ("echo test > output.txt", ("echo test > output.txt",)),
        (
            "CI=true echo hello > output.txt",
            ("CI=true echo hello > output.txt", "echo hello > output.txt"),
        ),
        ("echo x>/etc/passwd", ("echo x > /etc/passwd",)),
        ("> out echo hi", ("echo hi > out",)),  # redirections go last, wherever written
        ("make 2>&1 | tee log", ("make 2>&1", "tee log")),
        ("> /etc/passwd", ("> /etc/passwd",)),  # a command of redirections only
        ("{ rm x; } > out", ("rm x", "> out")),
        ("(make) 2> err", ("make", "2> err")),
        ("echo x > >(tee f)", ("tee f", "echo x > >(tee f)")),
    ],
)
def test_subjects_keep_redirections(command: str, subjects: tuple[str, ...]) -> None:
    """S-SEC-9: redirections stay in the text ``bash`` rules match, as opencode keeps them."""
    assert bash_commands(command) == subjects


# --- wrappers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("/bin/rm -rf x", "rm -rf x"),
        ("/usr/bin/rm x", "rm x"),
        ("./rm x", "rm x"),
        ('"rm" x', "rm x"),
        ("\\rm x", "rm x"),
        ("$'\\x72m' x", "rm x"),
        ("command rm x", "rm x"),
        ("command -p rm x", "rm x"),
        ("builtin rm x", "rm x"),
        ("exec rm x", "rm x"),
        ("exec -a name rm x", "rm x"),
        ("env rm x", "rm x"),
        ("env -i FOO=1 BAR=2 rm x", "rm x"),
        ("env -u HOME -C /tmp rm x", "rm x"),
        ("env - rm x", "rm x"),
        ("env -- FOO=1 rm x", "rm x"),
        ("env -S 'rm x'", "rm x"),
        ("env --split-string='rm x'", "rm x"),
        ("nice rm x", "rm x"),
        ("nice -n 5 rm x", "rm x"),
        ("nice -n5 rm x", "rm x"),
        ("nice -5 rm x", "rm x"),
        ("nice --adjustment=5 rm x", "rm x"),
        ("nohup rm x", "rm x"),
        ("setsid -f rm x", "rm x"),
        ("timeout 5 rm x", "rm x"),
        ("timeout 5s rm x", "rm x"),
        ("timeout -s KILL 5 rm x", "rm x"),
        ("timeout --signal=KILL -k 1 --preserve-status 5 rm x", "rm x"),
        ("xargs rm", "rm"),
        ("xargs -0 -n 1 rm -f", "rm -f"),
        ("xargs -I{} rm {}", "rm {}"),
        ("xargs -I {} rm {}", "rm {}"),
        ("sudo rm x", "rm x"),
        ("sudo -u bob -E rm x", "rm x"),
        ("sudo -E -H -n -- rm x", "rm x"),
        ("sudo FOO=1 rm x", "rm x"),
        ("doas rm x", "rm x"),
        ("doas -u root -n rm x", "rm x"),
        ("stdbuf -oL rm x", "rm x"),
        ("stdbuf -o L -e 0 rm x", "rm x"),
        ("time rm x", "rm x"),
        ("time -p rm x", "rm x"),
        ("/usr/bin/time -f %e -o t.txt rm x", "rm x"),
        ("ionice -c 3 rm x", "rm x"),
        ("busybox rm x", "rm x"),
        ("watch -n 1 rm x", "rm x"),
        ('watch -n 1 "rm x"', "rm x"),
        ("eval rm x", "rm x"),
        ("eval 'rm x'", "rm x"),
        ("sh -c 'rm x'", "rm x"),
        ('bash -lc "rm x"', "rm x"),
        ("bash -e -o pipefail -c 'cd a && rm x'", "rm x"),
        ("sh -c 'rm \"$1\"' _ x", 'rm "$1"'),
        ("find . -exec rm {} \\;", "rm {}"),
        ("find . -name a -exec echo {} \\; -execdir rm {} +", "rm {}"),
        ("/usr/bin/sudo /usr/bin/env /bin/rm x", "rm x"),
        ("sudo env FOO=1 nice -n 5 /bin/rm -rf x", "rm -rf x"),
        ("time nohup timeout 5 stdbuf -oL xargs -r rm", "rm"),
        ("coproc rm x", "rm x"),
        ("flock /tmp/l rm x", "rm x"),
        ("flock -w 5 /tmp/l -c 'rm x'", "rm x"),
        ("trap 'rm x' EXIT", "rm x"),
        ("trap -- 'rm x' INT TERM", "rm x"),
    ],
)
def test_wrappers_are_seen_through(command: str, inner: str) -> None:
    """S-SEC-9: the command a wrapper runs is matched too, after the command as written."""
    subjects = bash_commands(command)
    assert subjects[0] == command
    assert inner in subjects


@pytest.mark.parametrize(
    "command",
    [
        "command -v rm",  # asks whether rm exists, runs nothing
        "sudo -l rm",
        "bash script.sh rm",  # a script: beyond any lexer
        'sh -c "$CMD"',
        "rmdir x",
        "echo rm x",
        "trap - EXIT",
        "trap -p rm",
        "flock 9",
    ],
)
def test_commands_that_run_no_rm(command: str) -> None:
    assert not any(subject.split()[0] == "rm" for subject in bash_commands(command))


def test_inner_commands_keep_the_wrappers_redirections() -> None:
    assert bash_commands("sudo rm x 2> err") == ("sudo rm x 2> err", "rm x 2> err")


@pytest.mark.parametrize(
    "command",
    [
        "coproc rm -rf victim",
        "coproc NAME { rm -rf victim; }",
        "coproc { rm -rf victim; }",
        "trap 'rm -rf victim' EXIT",
        "flock /tmp/l rm -rf victim",
        "flock -n /tmp/l -c 'rm -rf victim'",
        "function f { rm -rf victim; }; f",
        "function f() { rm -rf victim; }; f",
    ],
)
def test_an_rm_deny_holds_inside_coproc_trap_flock_and_functions(command: str) -> None:
    """S-SEC-9: with ``rm *`` denied and everything else allowed, an rm that ``coproc``,
    ``trap``, ``flock`` or a ``function`` body runs is denied (each was allowed on main)."""
    rules = rules_from_config({"*": "allow", "bash": {"*": "allow", "rm *": "deny"}})
    assert decide(rules, permission_checks("Bash", {"command": command}, PROJECT)) == "deny"


def test_wrappers_table_names_the_documented_wrappers() -> None:
    """S-SEC-9: SPEC's wrappers and the brief's are all known."""
    documented = ["command", "builtin", "exec", "env", "nice", "nohup", "timeout", "xargs"]
    documented += ["sudo", "doas", "stdbuf", "time", "sh", "bash", "coproc", "flock", "trap"]
    assert set(documented) <= set(WRAPPERS)


def test_tee_arguments_are_written_files() -> None:
    [tee] = [
        c
        for c in run_commands("echo x | sudo tee -a /etc/hosts out -- -f")
        if c.words == ("tee", "-a", "/etc/hosts", "out", "--", "-f")
    ]
    assert tee.written_files() == ("/etc/hosts", "out", "-f")


def test_nesting_up_to_the_limit_is_seen_through() -> None:
    nested = "$(" * MAX_NESTING + "rm x" + ")" * MAX_NESTING
    assert "rm x" in bash_commands(nested)


@pytest.mark.parametrize(
    "command",
    [
        "$(" * (MAX_NESTING + 1) + "rm x" + ")" * (MAX_NESTING + 1),
        "sudo " * MAX_COMMANDS + "rm x",  # each layer a command, and a long one
        "".join(f"echo {i}; " for i in range(MAX_COMMANDS + 1)),
        "echo " + "x" * MAX_TEXT,
    ],
)
def test_lines_beyond_the_limits_are_refused_not_checked_in_part(command: str) -> None:
    """S-SEC-9: a line the lexer cannot go through in full raises rather than check a part."""
    with pytest.raises(CommandTooComplexError):
        run_commands(command)


def test_repeated_commands_count_once() -> None:
    assert bash_commands("echo a; " * (MAX_COMMANDS + 1)) == ("echo a",)


# --- properties --------------------------------------------------------------------------

_PROGRAM_SPELLINGS = st.sampled_from(
    ["rm", "/bin/rm", "/usr/bin/rm", "./rm", '"rm"', "'rm'", "\\rm", "$'rm'", "$'\\x72m'"]
)
_PREFIXES = st.sampled_from(
    [
        "command ",
        "builtin ",
        "exec ",
        "exec -a x ",
        "env ",
        "env -i ",
        "env FOO=1 ",
        "env -u HOME ",
        "/usr/bin/env ",
        "nice ",
        "nice -n 5 ",
        "nice -n5 ",
        "nohup ",
        "setsid ",
        "timeout 5 ",
        "timeout -s KILL 5 ",
        "timeout --kill-after=1 5s ",
        "xargs ",
        "xargs -0 -n 1 ",
        "sudo ",
        "sudo -u bob ",
        "sudo -E -H ",
        "sudo -- ",
        "doas ",
        "doas -u root ",
        "stdbuf -oL ",
        "stdbuf -o L ",
        "time ",
        "time -p ",
        "ionice -c 3 ",
        "busybox ",
    ]
)
# Only where a statement starts: outermost, or first inside a command line handed to a shell.
_LEADING = st.sampled_from(["", "", "FOO=1 ", "A=1 B=2 ", "! ", "{ "])
_QUOTING_WRAPPERS = st.sampled_from(
    ["sh -c {}", "bash -lc {}", "eval {}", "watch -n 1 {}", "env -S {}"]
)


@st.composite
def _wrapped_commands(draw: st.DrawFn, target: str) -> str:
    """``target`` (``rm x`` or ``git push x``) under a random stack of wrappers."""
    program, _, args = target.partition(" ")
    command = (draw(_PROGRAM_SPELLINGS) if program == "rm" else program) + " " + args
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            command = draw(_PREFIXES) + command
        else:
            command = draw(_QUOTING_WRAPPERS).format(shlex.quote(_statement(draw, command)))
    return _statement(draw, command)


def _statement(draw: st.DrawFn, command: str) -> str:
    leading = draw(_LEADING)
    return leading + command + ("; }" if leading == "{ " else "")


_DENIED_TARGETS = st.sampled_from(["rm victim", "rm -rf /", "git push origin"])
_OTHER_RULES = st.lists(
    st.tuples(
        st.sampled_from(["*", "sudo *", "env *", "sh *", "nice *", "xargs *", "git *", "echo *"]),
        st.sampled_from(["allow", "ask"]),
    ),
    max_size=4,
)


@given(_DENIED_TARGETS.flatmap(lambda t: st.tuples(st.just(t), _wrapped_commands(t))), _OTHER_RULES)
def test_no_stack_of_wrappers_turns_a_deny_into_an_allow(
    case: tuple[str, str], others: list[tuple[str, str]]
) -> None:
    """S-SEC-9: whatever allow rules precede it, ``rm *`` and ``git push *`` denies hold for the
    command under any stack of wrappers and any spelling of its program."""
    _target, command = case
    rules = rules_from_config({"bash": {**dict(others), "rm *": "deny", "git push *": "deny"}})
    checks = permission_checks("Bash", {"command": command}, PROJECT)
    assert decide(rules, checks) == "deny", (command, [c.subject for c in checks])


_TARGETS = st.sampled_from(
    ["out.txt", "/etc/passwd", "../x", '"a b.txt"', "'q'", "$OUT", "~/.bashrc", "log/$(date)"]
)
_OPERATORS = st.sampled_from([">", ">>", ">|", "&>", "&>>", "<>", "2>", "2>>", "1>", "<"])
_WORDS = st.lists(
    st.sampled_from(["echo", "x", "-n", "'a b'", "make", "ls"]), min_size=1, max_size=4
)


@given(
    _WORDS,
    st.lists(st.tuples(_OPERATORS, st.booleans(), _TARGETS, st.integers(0, 4)), max_size=3),
    st.sampled_from(["", "sudo ", "timeout 5 ", "env A=1 "]),
)
def test_redirect_targets_always_appear_in_the_matched_text(
    words: list[str], redirects: list[tuple[str, bool, str, int]], prefix: str
) -> None:
    """S-SEC-9: every redirection, wherever written, is in the text of every spelling of its
    command, and every target it writes gets an edit check."""
    line = list(words)
    for operator, spaced, target, position in redirects:
        line.insert(min(position, len(line)), operator + (" " if spaced else "") + target)
    command = prefix + " ".join(line)
    # ``date`` is the command of the target ``log/$(date)``, not a spelling of this one.
    subjects = [subject for subject in bash_commands(command) if subject != "date"]
    checks = permission_checks("Bash", {"command": command}, PROJECT)
    edits = {check.subject for check in checks if check.permission == "edit"}
    for operator, _spaced, target, _position in redirects:
        fd, op = (operator[0], operator[1:]) if operator[0].isdigit() else ("", operator)
        assert all(f"{fd}{op} {target}" in subject for subject in subjects), (command, subjects)
        if op != "<":
            assert edits, (command, checks)


@given(st.text(max_size=60))
def test_any_text_lexes(text: str) -> None:
    """Any input, however malformed, gives subjects and checks, or is refused as too complex."""
    try:
        assert bash_commands(text)
        permission_checks("Bash", {"command": text}, PROJECT)
    except CommandTooComplexError:
        pass


@given(st.text(st.sampled_from("ab ;|&<>()$'\"`\\\n{}[]#=-c"), max_size=40))
def test_any_shell_like_text_lexes(text: str) -> None:
    """Shell punctuation in any order gives subjects and checks, or is refused as too complex."""
    try:
        commands = run_commands(text)
        assert bash_commands(text)
    except CommandTooComplexError:
        return
    for command in commands:
        assert command.words or command.redirects or command.assignments
        command.written_files()


# --- against bash ------------------------------------------------------------------------

# The lexer is checked against what bash runs: each line below is run by real bash in an empty
# directory, and where a command ``touch MARK`` hidden in it ran (MARK exists), the lexer must
# have seen it, or refused the line as too complex (S-SEC-9, S-POL-2: an allowed command
# must not hide a denied one).
_MARKER = "touch MARK"
# Places a command can stand in a line; "{}" is what stands there.
_PLACES = st.sampled_from(
    [
        "{}",
        "$({})",
        "`{}`",
        "\\`{}\\`",
        '"$({})"',
        '"`{}`"',
        "$(({}) )",
        "$(( $({}) 0 ))",
        "$(( `{}` 0 ))",
        "$[ $({}) ]",
        "${{y:-$({})}}",
        "${{y:-'$({})'}}",
        "\"${{y:-'$({})'}}\"",
        "${{y:-'}}'}}",
        "a=($({}))",
        "({})",
        "{{ {}; }}",
        "'{}'",
        '"{}"',
        "<({})",
        "x=$({}) true",
        "if {}; then :; fi",
        "(( $({}) ))",
        "((true) ; {})",
    ]
)
# Lines that mean something else to a lexer that reads them wrong.
_NOISE = st.sampled_from(
    [
        "echo ok",
        "echo $[1<<2]",
        "echo ${x:-1<<2}",
        "(( x = 1<<2 ))",
        "echo $((1<<2))",
        "echo $(( (1) + (2) ))",
        "for ((i=0;i<1;i++)); do :; done",
        "cat <<EOF",
        "cat <<'EOF'",
        "cat <<-EOF",
        "cat <<E\\OF",
        "cat <<< here",
        "EOF",
        "\tEOF",
        "x\\",
        'echo "a\'b"',
        "echo '",
        "echo \\'",
        "echo `echo '`",
        "# comment '",
        "a=(1 2)",
        "echo ${x:-{}",
    ]
)
_SEPARATORS = st.sampled_from(["\n", "\n", "; ", " && ", " || ", " | ", " "])


@st.composite
def _lines_hiding_a_marker(draw: st.DrawFn) -> str:
    marker = _MARKER
    for _ in range(draw(st.integers(1, 3))):
        marker = draw(_PLACES).format(marker)
    if draw(st.booleans()):
        marker = "echo ok " + marker
    pieces = draw(st.lists(_NOISE, max_size=5))
    pieces.insert(draw(st.integers(0, len(pieces))), marker)
    line = pieces[0]
    for piece in pieces[1:]:
        line += draw(_SEPARATORS) + piece
    return line


def _bash_runs_marker(line: str, directory: Path) -> bool:
    marker = directory / "MARK"
    marker.unlink(missing_ok=True)
    subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", line],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": os.defpath, "HOME": str(directory)},
        timeout=60,
        check=False,
    )
    return marker.exists()


def _lexer_sees_marker(line: str) -> bool:
    try:
        commands = run_commands(line)
    except CommandTooComplexError:
        return True  # refused: the conservative answer
    # "``touch MARK``" runs a program whose name a substitution makes (empty here): no lexer
    # sees such a name (README, Permissions), and no rule but "*" matches the word it sees.
    return any(
        (command.program == "touch" and "MARK" in command.words)
        or (
            word_value(command.words[0]) is None
            and "touch" in command.words[0]
            and "MARK" in command.text
        )
        for command in commands
        if command.words
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=300)
@given(_lines_hiding_a_marker())
def test_every_command_bash_runs_is_seen_or_the_line_refused(line: str) -> None:
    """S-SEC-9: where real bash runs the marker command hidden in a line (behind here-documents,
    ``<<`` in ``$[..]``, ``${..}`` or ``((..))``, inside arithmetic, backticks, arrays, an
    unquoted here-document body...), the lexer lists it among the line's commands, or refuses
    the line as too complex: a rule can never allow a line whose parts it has not seen."""
    with tempfile.TemporaryDirectory() as directory:
        if _bash_runs_marker(line, Path(directory)):
            assert _lexer_sees_marker(line), (line, bash_commands(line))


@pytest.mark.parametrize(
    "line",
    [
        "git status $[1<<2]\ntouch MARK",
        "git status ${x:-1<<2}\ntouch MARK",
        "(( x = 1<<2 ))\ntouch MARK",
        "git status <<EOF\n$(touch MARK)\nEOF",
        "git status <<EOF\n`touch MARK`\nEOF",
        "git status $(( $(touch MARK) 0 ))",
        "git status $((touch MARK) )",
        "git status $[ `touch MARK` ]",
        "a=($(touch MARK))",
        "echo `echo \\`touch MARK\\``",
        "cat <<EOF\nx\\\nEOF\n'\nEOF\ntouch MARK\n'",
        "echo \"${x:-'$(touch MARK)'}\"",
    ],
)
def test_lines_that_hid_a_command_from_the_lexer(line: str, tmp_path: Path) -> None:
    """S-SEC-9: each of these lines hid the command bash runs (the red team's, with a harmless
    marker): bash runs it, and the lexer sees it or refuses the line."""
    assert _bash_runs_marker(line, tmp_path), line
    assert _lexer_sees_marker(line), (line, bash_commands(line))


@pytest.mark.parametrize(
    "line",
    [
        "cat <<'EOF'\n$(touch MARK)\nEOF",
        "cat <<\\EOF\n`touch MARK`\nEOF",
        "echo ${y:-'$(touch MARK)'}",
        "echo '$(touch MARK)'",
    ],
)
def test_quoted_text_is_not_a_command(line: str, tmp_path: Path) -> None:
    """Control: a quoted here-document body or single-quoted text is not run by bash, and the
    lexer does not list it (an allow rule for the line's own command still allows it)."""
    assert not _bash_runs_marker(line, tmp_path), line
    assert not _lexer_sees_marker(line), (line, bash_commands(line))
