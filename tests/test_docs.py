"""The documentation cannot drift from the code.

For README.md, CHANGELOG.md and every page under docs/:

- every relative link points at a file that exists, and every ``#anchor`` at a heading there
  (GitHub's heading ids);
- every ``kiln ...`` command line, in code blocks and in inline code, names a real command and
  real options with valid values, checked with the real parser (``kiln.cli.main.build_parser``);
  a command line in a code block must parse completely (required arguments included); the
  command-line page has a section per command naming every option the command has;
- every ``python`` code block of the user guide runs: the blocks of one page run in order in one
  fresh interpreter, in an empty folder. A block whose info string says ``python no-run`` (a
  template naming files the reader has) is only compiled;
- (slow) every shell line of the command-line page runs and succeeds;
- ``.ci/run`` runs the README's test command verbatim.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
GUIDE = ROOT / "docs" / "guide"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --- a small Markdown reader -------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """A fenced code block."""

    path: Path
    line: int  # line number of the first code line (1-based)
    info: str
    code: str

    @property
    def lang(self) -> str:
        return self.info.split()[0].lower() if self.info.split() else ""

    @property
    def where(self) -> str:
        return f"{_rel(self.path)}:{self.line}"


_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


def parse_markdown(path: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """The fenced code blocks of ``path`` and its paragraphs outside them (first line, text).

    A paragraph is a run of non-blank lines joined by spaces, so that inline code and links
    broken across lines are whole; a heading is a paragraph of its own.
    """
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            line = lines[i]
            joins = (prose and prose[-1][0] + prose[-1][1].count("\n") == i  # continues the last
                     and line.strip() and not line.lstrip().startswith("#")
                     and not prose[-1][1].lstrip().startswith("#"))
            if joins:
                prose[-1] = (prose[-1][0], prose[-1][1] + "\n" + line)
            elif line.strip():
                prose.append((i + 1, line))
            i += 1
            continue
        fence, info = m.group(2), m.group(3).strip()
        body: list[str] = []
        start = i + 2
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        blocks.append(Block(path, start, info, textwrap.dedent("\n".join(body)) + "\n"))
    return blocks, prose


def _strip_inline_code(text: str) -> str:
    return re.sub(r"(`+).*?\1", "", text, flags=re.S)


def heading_ids(path: Path) -> set[str]:
    """GitHub's ids for the headings of ``path`` (lower case, punctuation dropped, spaces to -)."""
    ids: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in parse_markdown(path)[1]:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link outside code."""
    found = []
    for number, line in parse_markdown(path)[1]:
        for m in _LINK.finditer(_strip_inline_code(line)):
            found.append((number, m.group(1)))
    return found


def test_the_docs_are_found() -> None:
    names = {_rel(p) for p in DOCS}
    assert {"README.md", "CHANGELOG.md", "docs/internals.md", "docs/guide/index.md"} <= names
    assert all(links(p) is not None for p in DOCS)


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_relative_links_and_anchors_resolve(doc: Path) -> None:
    broken = []
    for number, target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:: not checked offline
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{_rel(doc)}:{number}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_ids(dest):
            broken.append(f"{_rel(doc)}:{number}: {target}: no heading with id #{anchor} in "
                          f"{_rel(dest)}")
        elif dest.is_file() and not dest.is_relative_to(ROOT):
            broken.append(f"{_rel(doc)}:{number}: {target}: outside the repository")
    assert not broken, "\n".join(broken)


def test_the_link_checker_catches_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A `code` title\n\n[ok](#a-code-title) [bad](#missing) [gone](nope.md) "
                    "`[not a link](x.md)`\n\n```\n[in code](y.md)\n```\n")
    assert links(page) == [(3, "#a-code-title"), (3, "#missing"), (3, "nope.md")]
    assert heading_ids(page) == {"a-code-title"}


# --- kiln command lines ------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """A ``kiln`` command line found in the docs."""

    where: str
    argv: tuple[str, ...]
    complete: bool  # from a code block: must parse fully


_SHELL_LANGS = {"", "sh", "shell", "bash", "console"}  # ``text`` blocks hold output


def _kiln_argv(words: list[str]) -> list[str] | None:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # VAR=value prefixes
        words = words[1:]
    if not words:
        return None
    if Path(words[0]).name == "kiln":
        return words[1:]
    if Path(words[0]).name.startswith("python") and words[1:3] == ["-m", "kiln"]:
        return words[3:]
    return None


def _shell_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line (split at pipes, ;, &&, ||; redirections dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    skip_next = False
    for word in lexer:
        if skip_next:
            skip_next = False
        elif word in ("|", "||", "&&", ";", "&"):
            commands.append([])
        elif word in (">", ">>", "<", "2>", "&>"):
            skip_next = True
        elif word.startswith(("(", ")")):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _inline_argv(span: str) -> list[str]:
    """Words of an inline synopsis: ``[--opt v]`` optional groups opened, ``a|b`` -> ``a``, cut
    at a pipe or ``&&`` standing alone."""
    words = []
    for word in span.replace("\\|", "|").split():
        if word in ("|", "&&", ";", ">"):
            break
        if word.startswith("[") and not re.match(r"^\[\d", word):
            word = word[1:]
        while word.count("]") > word.count("["):
            word = word[:-1]
        if "|" in word and not word.startswith("-"):
            word = word.split("|")[0]
        if word and word not in ("...", "…"):
            words.append(word)
    return words


def kiln_commands(path: Path) -> list[Command]:
    """Every ``kiln`` invocation in ``path``: in shell code blocks and in inline code."""
    blocks, prose = parse_markdown(path)
    found = []
    for block in blocks:
        if block.lang not in _SHELL_LANGS:
            continue
        for offset, raw in enumerate(block.code.splitlines()):
            if block.lang == "console" and not raw.lstrip().startswith("$"):
                continue  # output in a console session
            line = re.sub(r"^\s*\$\s+", "", raw)
            if "kiln" not in line:
                continue
            for words in _shell_commands(line):
                argv = _kiln_argv(words)
                if argv is not None:
                    found.append(Command(f"{_rel(path)}:{block.line + offset}", tuple(argv), True))
    for number, line in prose:
        for m in re.finditer(r"(`+)\s*((?:\S*/)?kiln\s[^`]*?)\s*\1", line):
            argv = _kiln_argv(_inline_argv(m.group(2)))
            if argv and not argv[0].startswith("<"):  # not `kiln ...` or `kiln <command>: error`
                found.append(Command(f"{_rel(path)}:{number}", tuple(argv), False))
    return found


ALL_COMMANDS = [c for doc in DOCS for c in kiln_commands(doc)]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _check_words(parser: argparse.ArgumentParser, words: list[str], complete: bool) -> list[str]:
    """Problems with ``words`` as options and values of ``parser`` (missing arguments allowed)."""
    problems = []
    options = parser._option_string_actions
    positionals = [a for a in parser._actions if not a.option_strings
                   and not isinstance(a, argparse._SubParsersAction)]
    n_positional = 0
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("-") and len(word) > 1 and not re.match(r"^-\d", word):
            name, eq, value = word.partition("=")
            action = options.get(name)
            if action is None:
                problems.append(f"unknown option {name}")
                continue
            if action.nargs == 0:
                continue
            if not eq:
                if i >= len(words) or (action.nargs == "?" and words[i].startswith("-")):
                    continue  # value left out: `kiln run --threads` in prose, or optional
                value = words[i]
                i += 1
            if not complete and re.match(r"^[A-Z][A-Z_]*$", value):
                continue  # a placeholder in a synopsis: --threads N
            if action.choices is not None and value not in action.choices:
                problems.append(f"{name} {value}: not one of {sorted(action.choices)}")
            elif callable(action.type):
                try:
                    action.type(value)
                except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
                    problems.append(f"{name} {value}: {e}")
        else:
            n_positional += 1
    if n_positional > len(positionals) and not any(a.nargs in ("+", "*") for a in positionals):
        problems.append(f"{n_positional} positional arguments, the command takes {len(positionals)}")
    return problems


def check_command(argv: list[str], complete: bool) -> list[str]:
    """Problems with one ``kiln`` command line (an empty list when it is right)."""
    parser = build_parser()
    commands = _subparsers(parser)
    words = list(argv)
    global_words = []
    while words and words[0].startswith("-"):
        global_words.append(words.pop(0))
    if not words:
        if any(w in ("-h", "--help", "--version") for w in global_words):
            return _check_words(parser, global_words, complete)
        return ["no command"]
    name, rest = words[0], words[1:]
    if name not in commands:
        return [f"no command {name!r} (commands: {', '.join(commands)})"]
    command = commands[name]
    while rest and rest[0] in _subparsers(command):  # nested actions: `kiln records show LOG`
        command, rest = _subparsers(command)[rest[0]], rest[1:]
    problems = (_check_words(parser, global_words, complete)
                + _check_words(command, rest, complete))
    if complete and not problems and not {"-h", "--help"} & set(rest):
        try:
            parser.parse_args(argv)
        except SystemExit:
            problems.append("argparse rejects it (see the captured stderr)")
    return problems


def test_cli_page_names_every_option() -> None:
    """Each command's section of the command-line page names each of its options."""
    text = (GUIDE / "cli.md").read_text()
    parts = re.split(r"^## kiln (\w+)\s*$", text, flags=re.M)
    preamble, sections = parts[0], dict(zip(parts[1::2], parts[2::2]))
    missing = []
    for name, sub in _subparsers(build_parser()).items():
        assert name in sections, f"docs/guide/cli.md has no section '## kiln {name}'"
        for action in sub._actions:
            options = [o for o in action.option_strings if o not in ("-h", "--help")]
            where = sections[name] + (preamble if "--verbose" in options else "")
            if options and not any(re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", where)
                                   for o in options):
                missing.append(f"kiln {name} {'/'.join(options)}")
    assert not missing, "options the command-line page does not mention:\n" + "\n".join(missing)


def test_commands_are_found() -> None:
    names = {c.argv[0] for c in ALL_COMMANDS if c.argv and not c.argv[0].startswith("-")}
    assert set(_subparsers(build_parser())) <= names, "every command is documented with an example"
    assert any(c.complete for c in ALL_COMMANDS) and any(not c.complete for c in ALL_COMMANDS)


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=lambda c: f"{c.where} kiln {' '.join(c.argv)}")
def test_documented_kiln_command_is_real(command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    problems = check_command(list(command.argv), command.complete)
    assert not problems, f"{command.where}: kiln {' '.join(command.argv)}: {'; '.join(problems)}"


@pytest.mark.parametrize(("line", "complete", "fragment"), [
    ("kiln bake model.onnx", False, "no command 'bake'"),
    ("kiln compile model.onnx -o m.so --optimize", False, "unknown option --optimize"),
    ("kiln compile model.onnx -o m.so --opt-level three", False, "--opt-level three"),
    ("kiln debug m.so --inputs x.npz --compare tflite", False, "not one of"),
    ("kiln compile model.onnx", True, "argparse rejects it"),  # -o is required
])
def test_the_command_checker_catches_mistakes(line: str, complete: bool, fragment: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = _kiln_argv(line.split())
    assert argv is not None
    assert any(fragment in p for p in check_command(argv, complete))


def test_command_extraction(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Run `kiln compile m.onnx -o m.so [--target c\\|numpy]`.\n\n"
                    "```sh\n$ CC=clang .venv/bin/kiln inspect m.so --json | head  # note\n"
                    "python -m kiln demo && echo kiln\n```\n")
    argv = [(c.argv, c.complete) for c in kiln_commands(page)]
    assert argv == [(("inspect", "m.so", "--json"), True), (("demo",), True),
                    (("compile", "m.onnx", "-o", "m.so", "--target", "c"), False)]


# --- runnable Python -----------------------------------------------------------------------------

_RUNNER = r"""
import json, sys
namespace = {"__name__": "__main__"}
for where, line, code in json.load(sys.stdin):
    print(f"--- {where}", flush=True)
    exec(compile("\n" * (line - 1) + code, where.split(":")[0], "exec"), namespace)
"""

GUIDE_PAGES = sorted(GUIDE.glob("*.md"))


def python_blocks(path: Path) -> list[Block]:
    return [b for b in parse_markdown(path)[0] if b.lang in ("python", "py")]


def test_python_blocks_are_found() -> None:
    runnable = [b for p in GUIDE_PAGES for b in python_blocks(p) if "no-run" not in b.info]
    assert len(runnable) >= 10


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_python_blocks_compile(doc: Path) -> None:
    for block in python_blocks(doc):
        compile("\n" * (block.line - 1) + block.code, _rel(doc), "exec")


@pytest.mark.requires_cc  # the examples build for the C target, as a reader's would
@pytest.mark.parametrize("page", [p for p in GUIDE_PAGES
                                  if any("no-run" not in b.info for b in python_blocks(p))],
                         ids=_rel)
def test_guide_python_runs(page: Path, tmp_path: Path) -> None:
    blocks = [b for b in python_blocks(page) if "no-run" not in b.info]
    payload = json.dumps([(b.where, b.line, b.code) for b in blocks])
    proc = subprocess.run([sys.executable, "-c", _RUNNER], input=payload, capture_output=True,
                          text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, (f"a Python example of {_rel(page)} failed:\n{proc.stdout[-4000:]}\n"
                                  f"{proc.stderr[-6000:]}")


# --- the commands CI runs -------------------------------------------------------------------------

def test_ci_runs_the_readme_test_command() -> None:
    blocks = [b for b in parse_markdown(ROOT / "README.md")[0] if "pytest" in b.code]
    assert blocks, "the README shows the test command"
    test_line = next(line for line in blocks[0].code.splitlines() if "pytest" in line)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_line.strip() in [line.strip() for line in ci], f"{test_line!r} is not in .ci/run"
    assert "-n auto" in test_line


@pytest.mark.slow
@pytest.mark.requires_cc
def test_cli_page_commands_run(tmp_path: Path) -> None:
    """The command-line page is a walkthrough: each of its shell lines runs, in order, and works."""
    (tmp_path / "kiln").mkdir()
    (tmp_path / "kiln" / "data").symlink_to(ROOT / "kiln" / "data")  # paths as in the repository
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    lines = [(b.line + i, line) for b in parse_markdown(GUIDE / "cli.md")[0] if b.lang == "sh"
             for i, line in enumerate(b.code.splitlines()) if line.strip()]
    assert len(lines) >= 10
    for number, line in lines:
        proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, (f"docs/guide/cli.md:{number}: {line}\n{proc.stdout[-2000:]}\n"
                                      f"{proc.stderr[-2000:]}")
