"""Shell variables, integer arithmetic and `bash -c` strings in launch scripts, as bash reads them, for the
readers that split scripts into words (`planner.check.megatron`, `planner.check.torchtitan_cli`,
`planner.check.engine_launch`): `NAME=value` sets a variable, `$NAME`, `${NAME}` and `${NAME:-default}`
expand to it, and a word whose text came from a variable is split at whitespace as bash splits an unquoted
expansion; `$((expression))` of integers and the file's own integer variables is the number bash computes
(`expand_arithmetic`); `bash -c "STRING"` (also `sh -c`, `bash -lc`, as Slurm launchers wrap a command so
that each task expands its variables) runs the words of STRING (`unwrap`); `let NAME=EXPRESSION` assigns as
`NAME=$((EXPRESSION))` does (`let_assignments`). Nothing is run: a command substitution `$(...)` stays as written,
one word (`join_expansions`), as does a variable assigned one, and arithmetic of a variable the file does not set
stays as written, for the reader to refuse or to stand in for (`unresolved`; torchrun's node count falls back to
--gpus as for an unset variable).

Source: bash(1) "Parameter Expansion" (`${parameter:-word}`: word when unset or null), "Word Splitting"
(default IFS: space, tab, newline; the results of unquoted expansions are split), "Arithmetic Expansion"
(`$((expression))`; names inside are variables, with or without `$`; integer arithmetic, `/` truncating) and
"OPTIONS" (`-c`: commands are read from the first non-option argument).
"""

from __future__ import annotations

import ast
import operator
import re
import shlex

from planner.errors import SpecError

VAR = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")
"""`$NAME`, `${NAME}`, `${NAME:-default}`."""
ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)
"""`NAME=value` (one shell word)."""
NAME = re.compile(r"[A-Za-z_]\w*")
"""A shell variable name (`export NAME`)."""
SHELLS = ("bash", "sh", "dash", "zsh")
"""Shells whose `-c STRING` runs STRING as a command line (`unwrap`)."""
_ARITH_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}
"""Integer operators of bash arithmetic evaluated here (`/` is integer division; the operands here are
non-negative in every script seen, where floor and bash's truncation agree)."""


def substitute(word: str, env: dict[str, str]) -> str:
    """`word` with each variable `env` sets (non-empty) replaced by its value, else by its `:-` default, else
    left as written; then each `$((...))` of integers and `env`'s integer variables replaced by its number
    (`expand_arithmetic`)."""
    return expand_arithmetic(VAR.sub(lambda m: _value(m, env), word), env)


def _value(match: re.Match, env: dict[str, str]) -> str:
    name = match.group(1) or match.group(3)
    if name in env and env[name] != "":
        return env[name]
    return match.group(2) if match.group(2) is not None else match.group(0)


def fields(word: str, raw: str) -> list[str]:
    """The words `word` (`raw` after `substitute`) stands for: split at whitespace when a variable gave its
    text (not when it still holds a `$(` substitution this reader does not run) or when it is a quoted
    `"--flag value"` pair; else itself."""
    if (word != raw and "$(" not in word) or (word.startswith("--") and any(c.isspace() for c in word)):
        return word.split()
    return [word]


def join_expansions(words: list[str]) -> list[str]:
    """Words with a `$((` or `$(` whose closing parenthesis comes in a later word joined back (shlex splits
    `$((A * B))` and `$(scontrol show hostnames | wc -l)` at their spaces), so that an arithmetic expansion is
    one word and a command substitution stays one value (a `|` inside it is no pipeline of the script); one whose
    parenthesis never closes (bash's syntax error) is left as split."""
    out: list[str] = []
    pending: list[str] = []
    for word in words:
        if pending or ("$(" in word and word.count("(") > word.count(")")):
            pending.append(word)
            joined = " ".join(pending)
            if joined.count("(") <= joined.count(")"):
                out.append(joined)
                pending = []
        else:
            out.append(word)
    return out + pending


LET = re.compile(r"^(\s*)let\s+(.*)$")
"""A `let` command at the start of a line."""
_LET_ARGUMENT = re.compile(r"\s*([A-Za-z_]\w*)\s*([-+*/%]?)=\s*(\S.*?)\s*", re.S)
"""One argument of `let`: NAME=expression, or NAME op= expression (+= -= *= /= %=)."""


def let_assignments(text: str) -> str:
    """`text` with each line's `let NAME=EXPRESSION ...` (also `let "NAME = EXPRESSION"` and `NAME op= ...`)
    written as the assignments `NAME=$((EXPRESSION))` it makes, so the readers evaluate them as they evaluate
    `$((...))` (`arithmetic`: integers, the file's integer variables, + - * / %); a `let` of another form
    (`let i++`) is left as written. Source: bash(1) SHELL BUILTIN COMMANDS `let` ("Each arg is an arithmetic
    expression to be evaluated"), "ARITHMETIC EVALUATION" (`=` and `op=` assignment operators)."""
    return "\n".join(_let_line(line) for line in text.split("\n"))


def _let_line(line: str) -> str:
    match = LET.match(line)
    if match is None:
        return line
    try:
        arguments = split(match[2])
    except ValueError:
        return line
    out = []
    for text in arguments:
        argument = _LET_ARGUMENT.fullmatch(text)
        if argument is None:
            return line
        name, op, expression = argument.groups()
        expression = f"{name}{op}({expression})" if op else expression
        out.append(f"{name}=$(({''.join(expression.split())}))")
    return match[1] + " ".join(out) if out else line


def _expansions(word: str) -> list[tuple[int, int, str]]:
    """(start, end, expression) of each `$((expression))` in `word`, parentheses inside it counted."""
    out, at = [], word.find("$((")
    while at >= 0:
        depth, k = 2, at + 3
        while k < len(word) and depth:
            depth += {"(": 1, ")": -1}.get(word[k], 0)
            k += 1
        if depth:
            break
        out.append((at, k, word[at + 3:k - 2]))
        at = word.find("$((", k)
    return out


def arithmetic(expression: str, env: dict[str, str]) -> int | None:
    """The integer value of a bash arithmetic expression of integers, variables (`NAME` or `$NAME`) that `env`
    sets to integers, parentheses and + - * / %, or None when it holds anything else (or divides by 0)."""
    try:
        tree = ast.parse(re.sub(r"\$([A-Za-z_]\w*)", r"\1", expression).replace("/", "//").replace("////", "//").strip(),
                         mode="eval")
    except SyntaxError:
        return None

    def value(node: ast.AST) -> int | None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and re.fullmatch(r"-?\d+", env.get(node.id, "")):
            return int(env[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            left, right = value(node.left), value(node.right)
            if left is None or right is None or (right == 0 and type(node.op) not in (ast.Mult, ast.Add, ast.Sub)):
                return None
            return _ARITH_OPS[type(node.op)](left, right)
        return None
    return value(tree.body)


def expand_arithmetic(word: str, env: dict[str, str]) -> str:
    """`word` with each `$((...))` that `arithmetic` evaluates replaced by its number; others left as written."""
    for start, end, expression in reversed(_expansions(word)):
        number = arithmetic(expression, env)
        if number is not None:
            word = word[:start] + str(number) + word[end:]
    return word


def unresolved(value: str, env: dict[str, str]) -> str | None:
    """Why a value (after `substitute`) is no literal, for a one-line bad-input message: a `$((...))` naming
    the variables the file does not set (or holding more than integers, variables and + - * / %), a `$(...)`
    command substitution, a `$NAME` the file does not set; None when it holds no `$`."""
    if "$((" in value:
        names = sorted({n for _, _, e in _expansions(value) for n in re.findall(r"[A-Za-z_]\w*", e)
                        if not re.fullmatch(r"-?\d+", env.get(n, ""))})
        what = (f"of {', '.join(names)}, which the file does not set to an integer" if names else
                "of more than integers, the file's integer variables and + - * / %")
        return (f"value {value!r} is a shell arithmetic expansion $((...)) {what}: this reader does not "
                f"evaluate it; {'set ' + ', '.join(names) + ' in the file or ' if names else ''}write the number")
    if "$(" in value:
        return f"value {value!r} is a shell command substitution $(...), which this reader does not run; write the value"
    if "$" in value:
        names = sorted({m.group(1) or m.group(3) for m in VAR.finditer(value)}) or ["?"]
        return (f"value {value!r} uses the shell variable {', '.join(names)}, which the file does not set; set it "
                f"in the file or write the value")
    return None


def unwrap(words: list[str], file: str) -> list[str]:
    """`words` with each `bash -c STRING` (any of `SHELLS`, by path or name, with options before `-c` such as
    `-l`, `-e`, or `-lc` written together) replaced by the words of STRING, split as the shell splits a
    command line (`shlex`, `#` comments), recursively: `srun ... bash -c "python pretrain_gpt.py --flag ..."`
    reads as `srun ... python pretrain_gpt.py --flag ...`. Variables inside STRING are expanded by the
    readers as elsewhere in the file (the file's own variables; the inner shell inherits exported ones).

    Raises:
        SpecError: unbalanced quotes inside STRING (exit 2)."""
    out, i = [], 0
    while i < len(words):
        word = words[i]
        at = _command_string(words, i)
        if at is None:
            out.append(word)
            i += 1
            continue
        try:
            inner = join_expansions(split(words[at]))
        except ValueError as exc:
            raise SpecError(f"shell syntax error in the command string of {word} -c: {exc}", file=file) from None
        out += unwrap(inner, file)
        i = at + 1
    return out


def _command_string(words: list[str], i: int) -> int | None:
    """The index of the command string when `words[i]` starts `SHELL [options] -c STRING`, else None."""
    if words[i].rsplit("/", 1)[-1] not in SHELLS:
        return None
    k = i + 1
    while k < len(words) and words[k].startswith("-") and words[k] != "-":
        if not words[k].startswith("--") and "c" in words[k][1:]:
            return k + 1 if k + 1 < len(words) else None
        k += 1
    return None


_SEPARATORS = (";", "&&", "||", "&", "|")
"""Words that end one shell command and start the next on the same line."""


def segments(words: list[str]) -> list[list[str]]:
    """The commands of one line's words, split at `_SEPARATORS` and a `case` branch's `;;` (a word ending in `;`
    or `;;` ends its command)."""
    out: list[list[str]] = [[]]
    for word in words:
        if word in _SEPARATORS or word == ";;":
            out.append([])
        elif word.endswith(";") and len(word) > 1:
            out[-1].append(word.rstrip(";"))
            out.append([])
        else:
            out[-1].append(word)
    return [segment for segment in out if segment]


LOOPS = ("for", "while", "until")
"""Shell keywords that open a loop (`do ... done`)."""


def loops(text: str) -> list[tuple[int, int, str, str | None]]:
    """(first line, last line, keyword, variable) of each `for` / `while` / `until` loop of a script, as its commands
    split (`commands`, `segments`); `variable` is a `for NAME in ...` loop's NAME, else None. A loop left open runs
    to the end of the text. Source: bash(1) "Compound Commands" (for name [ in word ] ; do list ; done; while / until
    list; do list; done)."""
    out, open_ = [], []
    last = 0
    for line, code in commands(text):
        last = line + code.count("\n")
        try:
            words = split(code)
        except ValueError:
            continue
        for segment in segments(words):
            if segment[0] in LOOPS:
                open_.append((line, segment[0], segment[1] if segment[0] == "for" and len(segment) > 1 else None))
            elif segment[0] == "done" and open_:
                start, keyword, name = open_.pop()
                out.append((start, line, keyword, name))
    out += [(start, max(last, start), keyword, name) for start, keyword, name in open_]
    return sorted(out)


CONTINUE, QUOTE, ESCAPED_BLANK, COMMENT, END = "continue", "quote", "escaped blank", "comment", "end"
"""How a line ends for bash (`line_ends`)."""

_WORD_BREAKS = " \t\n;&|()<>"
"""Characters after which a `#` starts a word: blanks and bash's metacharacters. Source: bash(1) "DEFINITIONS"
(metacharacter: space, tab, newline, | & ; ( ) < >)."""


def _scan(line: str, quote: str | None) -> tuple[str | None, bool, int | None]:
    """(quote still open at the end, whether the last character is an unescaped backslash, index of the `#` that
    starts a comment or None) of one line, read from `quote` (the quote open before it). A `#` starts a comment
    only at the start of a word outside quotes: `nvcr.io#nvidia/nemo`, `/data/run#7`, `"#"`, `$#` and `${#VAR}`
    are words, not comments. Source: bash(1) "COMMENTS" (a word beginning with # causes that word and all
    remaining characters on that line to be ignored), "QUOTING"."""
    escaped, previous = False, " "
    for at, char in enumerate(line):
        if escaped:
            escaped, char = False, "\\"   # an escaped character (a blank too) is part of a word
        elif quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif quote == '"':
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and previous in _WORD_BREAKS:
            return quote, False, at
        previous = char
    return quote, escaped, None


def uncommented(lines: list[str]) -> list[str]:
    """`lines` each without its bash comment (`_scan`: a `#` that starts a word outside quotes, and the rest of
    its line), a quote left open on one line carried to the next."""
    out, quote = [], None
    for line in lines:
        quote, _, comment = _scan(line, quote)
        out.append(line if comment is None else line[:comment])
    return out


def code(line: str) -> str:
    """One line (no quote open before it) without its bash comment (`uncommented`)."""
    return uncommented([line])[0]


def split(text: str) -> list[str]:
    """The words of `text` as bash splits them (`shlex`, POSIX rules) after its comments are removed as bash
    removes them (`uncommented`): `shlex`'s own comment handling would cut a word at any `#` in it."""
    return shlex.split("\n".join(uncommented(text.split("\n"))))


def line_ends(lines: list[str]) -> list[str]:
    """For each line, how bash ends it: CONTINUE (a backslash before the newline: the command goes on), QUOTE (a
    quote opened on it or before it is still open: a multi-line string), ESCAPED_BLANK (a backslash then only
    spaces or tabs: bash reads an escaped blank, a word of its own, and the newline ends the command), COMMENT (a
    `#` starting a word outside quotes comments out the rest of the line, a backslash at its end included: the
    newline ends the command; `_scan`), else END. Source: bash(1) "QUOTING" (only backslash-newline is a line
    continuation; a backslash before any other character escapes it), "COMMENTS"."""
    out, quote = [], None
    for line in lines:
        quote, escaped, comment = _scan(line, quote)
        blank_escaped = line.rstrip(" \t")
        trailing = len(blank_escaped) - len(blank_escaped.rstrip("\\"))
        out.append(QUOTE if quote is not None else COMMENT if comment is not None else CONTINUE if escaped
                   else ESCAPED_BLANK if blank_escaped != line and trailing % 2 == 1 else END)
    return out


def continues(lines: list[str]) -> list[bool]:
    """For each line, whether the shell command on it goes on to the next line (`line_ends`: a backslash
    continuation or a quote still open; not a backslash in a comment or before a trailing blank)."""
    return [end in (CONTINUE, QUOTE) for end in line_ends(lines)]


def join_continued(text: str) -> str:
    """`text` with each backslash-newline that continues a command (`line_ends`) removed, as bash removes it
    before splitting words, a backslash at the end of a comment or before a trailing blank kept (the newline
    after it ends the command)."""
    lines = text.split("\n")
    ends = line_ends(lines)
    return "".join(line[:-1] + " " if end in (CONTINUE, QUOTE) and line.endswith("\\") and k + 1 < len(lines)
                   else line + ("\n" if k + 1 < len(lines) else "")
                   for k, (line, end) in enumerate(zip(lines, ends)))


def commands(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each command of `text`: lines joined where `continues` says the command
    goes on (a backslash continuation's backslash dropped; a quoted newline kept as a space)."""
    lines = text.splitlines()
    out, start, parts = [], None, []
    for number, (line, more) in enumerate(zip(lines, continues(lines)), 1):
        start = number if start is None else start
        stripped = line.rstrip()
        parts.append(stripped[:-1] if more and stripped.endswith("\\") else line)
        if not more:
            out.append((start, " ".join(parts)))
            start, parts = None, []
    if parts:
        out.append((start, " ".join(parts)))
    return out


def expand_command(words: list[str], variables: dict[str, str],
                   exported: set[str] | None = None) -> list[str] | None:
    """One shell command's words with the script's variables and integer arithmetic expanded (`substitute`,
    `fields`); None for a command of assignments only (`export` or not), whose values it sets in `variables`
    (expanded with those set before), as bash does. `exported` (when given) collects the names an `export`
    marks (`export NAME=value`, or `export NAME` of one assigned before or after), which bash passes to the
    environment of every later command, and loses those an `unset` removes (None too for `export` / `unset`
    commands). Source: bash(1) "ENVIRONMENT" (export marks names for the environment of subsequently executed
    commands) and SHELL BUILTIN COMMANDS `export`, `unset`."""
    names = words[1:] if words[:1] == ["export"] else words
    if exported is not None and words[:1] in (["export"], ["unset"]) and len(words) > 1 and all(
            ASSIGN.match(w) or NAME.fullmatch(w) for w in words[1:]):
        for word in words[1:]:
            match = ASSIGN.match(word)
            name = match.group(1) if match else word
            if words[0] == "unset":
                variables.pop(name, None)
                exported.discard(name)
                continue
            if match:
                variables[name] = substitute(match.group(2), variables)
            exported.add(name)
        return None
    if names and all(ASSIGN.match(w) for w in names):
        for word in names:
            name, value = ASSIGN.match(word).groups()
            variables[name] = substitute(value, variables)
        return None
    return [f for raw in words for f in fields(substitute(raw, variables), raw)]
