"""Read a batch script's #SBATCH directives the way sbatch does, and spot Python output buffering.

Mirrors Slurm's src/sbatch/opt.c: directives are read from lines that *start* with `#SBATCH`
(no leading spaces) until the first line that is neither blank nor a comment; each directive
line is split into arguments with single/double quotes removed, backslash escaping the next
character and an unquoted `#` starting a comment; the arguments of all lines form one argv
that getopt_long reads (long options may be abbreviated; the first non-option argument stops
option processing, as sbatch's "+" option string does). A `hetjob`/`packjob` line ends the
first component, whose options are the ones read here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace

NONE, REQUIRED, OPTIONAL = "none", "required", "optional"

# sbatch's long options and whether they take an argument (sbatch(1), Slurm 23.x/24.x).
LONG_OPTIONS: dict[str, str] = {
    **{
        name: REQUIRED
        for name in (
            "account",
            "acctg-freq",
            "array",
            "batch",
            "bb",
            "bbf",
            "begin",
            "chdir",
            "cluster-constraint",
            "clusters",
            "comment",
            "constraint",
            "container",
            "container-id",
            "core-spec",
            "cores-per-socket",
            "cpu-freq",
            "cpus-per-gpu",
            "cpus-per-task",
            "deadline",
            "delay-boot",
            "dependency",
            "distribution",
            "error",
            "exclude",
            "export",
            "export-file",
            "extra",
            "extra-node-info",
            "gid",
            "gpu-bind",
            "gpu-freq",
            "gpus",
            "gpus-per-node",
            "gpus-per-socket",
            "gpus-per-task",
            "gres",
            "gres-flags",
            "hint",
            "input",
            "job-name",
            "kill-on-invalid-dep",
            "licenses",
            "mail-type",
            "mail-user",
            "mcs-label",
            "mem",
            "mem-bind",
            "mem-per-cpu",
            "mem-per-gpu",
            "mincpus",
            "network",
            "nodefile",
            "nodelist",
            "nodes",
            "ntasks",
            "ntasks-per-core",
            "ntasks-per-gpu",
            "ntasks-per-node",
            "ntasks-per-socket",
            "open-mode",
            "output",
            "partition",
            "power",
            "prefer",
            "priority",
            "profile",
            "qos",
            "reservation",
            "segment",
            "signal",
            "sockets-per-node",
            "switches",
            "thread-spec",
            "threads-per-core",
            "time",
            "time-min",
            "tmp",
            "tres-bind",
            "tres-per-task",
            "uid",
            "wait-all-nodes",
            "wckey",
            "workdir",
            "wrap",
        )
    },
    **{
        name: NONE
        for name in (
            "contiguous",
            "help",
            "hold",
            "ignore-pbs",
            "immediate",
            "no-requeue",
            "overcommit",
            "oversubscribe",
            "parsable",
            "quiet",
            "reboot",
            "requeue",
            "spread-job",
            "test-only",
            "usage",
            "use-min-nodes",
            "verbose",
            "version",
            "wait",
        )
    },
    **{name: OPTIONAL for name in ("exclusive", "get-user-env", "nice", "no-kill", "propagate", "x11")},
}

# Short options (sbatch's getopt string) mapped to their long names.
SHORT_OPTIONS: dict[str, str] = {
    "a": "array",
    "A": "account",
    "b": "begin",
    "B": "extra-node-info",
    "c": "cpus-per-task",
    "C": "constraint",
    "d": "dependency",
    "D": "chdir",
    "e": "error",
    "F": "nodefile",
    "G": "gpus",
    "h": "help",
    "H": "hold",
    "i": "input",
    "I": "immediate",
    "J": "job-name",
    "k": "no-kill",
    "L": "licenses",
    "m": "distribution",
    "M": "clusters",
    "n": "ntasks",
    "N": "nodes",
    "o": "output",
    "O": "overcommit",
    "p": "partition",
    "q": "qos",
    "Q": "quiet",
    "s": "oversubscribe",
    "S": "core-spec",
    "t": "time",
    "v": "verbose",
    "V": "version",
    "w": "nodelist",
    "W": "wait",
    "x": "exclude",
}

MAGIC = "#SBATCH"
_HETJOB = re.compile(r"(?i)hetjob|packjob")


class DirectiveSyntaxError(ValueError):
    """A directive line sbatch would refuse (for example an unmatched quote)."""


@dataclass(frozen=True)
class Option:
    """One option read from the directives, under its full long name."""

    name: str
    value: str | None
    line: int
    written: str  # as the author wrote it, e.g. "-p" or "--part"


@dataclass(frozen=True)
class ScriptNote:
    """Something about the script's directives worth telling its author (line 0: whole file)."""

    line: int
    severity: str  # "error" (sbatch refuses the script or ignores directives) or "warning"
    message: str
    refused: bool = False  # sbatch would refuse to submit the script at all

    def to_dict(self) -> dict[str, object]:
        return {"line": self.line, "severity": self.severity, "message": self.message, "refused": self.refused}


@dataclass(frozen=True)
class BatchScript:
    """A batch script as sbatch reads it: its options, the notes about them, and the body."""

    text: str
    options: tuple[Option, ...]
    notes: tuple[ScriptNote, ...]
    body: str
    body_first_line: int | None  # 1-based line of the first command; None if there is none
    shebang: str | None

    def last(self, name: str) -> Option | None:
        """The option that takes effect: sbatch lets a later directive override an earlier one."""
        for option in reversed(self.options):
            if option.name == name:
                return option
        return None

    def value(self, name: str) -> str | None:
        option = self.last(name)
        return option.value if option else None

    def all(self, name: str) -> tuple[Option, ...]:
        return tuple(o for o in self.options if o.name == name)

    @property
    def requeue(self) -> bool | None:
        """True for --requeue, False for --no-requeue (last wins), None when neither is given."""
        last = None
        for option in self.options:
            if option.name in ("requeue", "no-requeue"):
                last = option.name == "requeue"
        return last


def split_arguments(text: str) -> list[str]:
    """Split the rest of a directive line into arguments, as sbatch's _get_argument does."""
    args: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n or text[i] == "#":
            return args
        arg: list[str] = []
        quote = ""
        escaped = False
        while i < n and (quote or not text[i].isspace()):
            ch = text[i]
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
                i += 1
                continue
            elif quote:
                if ch == quote:
                    quote = ""
                    i += 1
                    continue
            elif ch in "\"'":
                quote = ch
                i += 1
                continue
            elif ch == "#":
                break  # an unquoted '#' starts a comment: the rest of the line is ignored
            arg.append(ch)
            i += 1
        if quote:
            raise DirectiveSyntaxError(f"unmatched {quote} quote")
        if not arg:
            # sbatch returns "no more arguments" for an empty one (e.g. ''), dropping the rest of the line
            return args
        args.append("".join(arg))
        if i < n and text[i] == "#":
            return args


def _resolve_long(name: str) -> tuple[str | None, str | None]:
    """getopt_long's lookup: an exact name, else a unique prefix. Returns (name, problem)."""
    if name in LONG_OPTIONS:
        return name, None
    candidates = sorted(o for o in LONG_OPTIONS if o.startswith(name))
    if len(candidates) == 1:
        return candidates[0], None
    if candidates:
        return None, f"--{name} is ambiguous ({', '.join('--' + c for c in candidates[:6])}); sbatch will refuse it"
    return None, f"--{name} is not an sbatch option (unless a site plugin adds it, sbatch will refuse the script)"


def _take_value(
    given: Option,
    label: str,
    kind: str,
    argv: list[tuple[str, int]],
    i: int,
    options: list[Option],
    notes: list[ScriptNote],
) -> int:
    """Record an option that takes a value: its own (`given.value`, None when not attached), else argv[i]'s.

    An OPTIONAL value is only ever attached. Returns the index of the next token.
    """
    if kind == OPTIONAL or given.value is not None:
        options.append(given)
    elif i < len(argv):
        options.append(replace(given, value=argv[i][0]))
        i += 1
    else:
        notes.append(
            ScriptNote(given.line, "error", f"{label} needs a value; sbatch will refuse the script", refused=True)
        )
    return i


def _read_options(argv: list[tuple[str, int]]) -> tuple[list[Option], list[ScriptNote]]:
    options: list[Option] = []
    notes: list[ScriptNote] = []
    i = 0
    while i < len(argv):
        token, line = argv[i]
        i += 1
        if token == "--":
            break
        if token.startswith("--"):
            raw_name, has_value, value = token[2:].partition("=")
            name, problem = _resolve_long(raw_name)
            if name is None:
                notes.append(ScriptNote(line, "error", problem or "", refused=True))
                continue
            kind = LONG_OPTIONS[name]
            if kind == NONE:
                if has_value:
                    notes.append(
                        ScriptNote(
                            line, "error", f"--{name} takes no value; sbatch will refuse {token!r}", refused=True
                        )
                    )
                    continue
                options.append(Option(name, None, line, "--" + raw_name))
            else:
                inline = value if has_value else None
                i = _take_value(Option(name, inline, line, "--" + raw_name), f"--{name}", kind, argv, i, options, notes)
            continue
        if token.startswith("-") and len(token) > 1:
            j = 1
            while j < len(token):
                letter = token[j]
                long_name = SHORT_OPTIONS.get(letter)
                if long_name is None:
                    notes.append(
                        ScriptNote(
                            line,
                            "error",
                            f"-{letter} is not an sbatch option; sbatch will refuse the script",
                            refused=True,
                        )
                    )
                    j += 1
                    continue
                kind = LONG_OPTIONS[long_name]
                if kind == NONE:
                    options.append(Option(long_name, None, line, "-" + letter))
                    j += 1
                    continue
                given = Option(long_name, token[j + 1 :] or None, line, "-" + letter)
                i = _take_value(given, "-" + letter, kind, argv, i, options, notes)
                break
            continue
        notes.append(
            ScriptNote(
                line,
                "error",
                f"{token!r} is not an option; sbatch stops reading directives here, so this and every "
                f"later #SBATCH option is ignored",
            )
        )
        break
    return options, notes


def parse_script(text: str) -> BatchScript:
    """Read a batch script's directives and body; never raises."""
    notes: list[ScriptNote] = []
    if "\r\n" in text:
        notes.append(
            ScriptNote(
                0,
                "error",
                "the script has DOS line breaks (\\r\\n); sbatch refuses it (convert with dos2unix)",
                refused=True,
            )
        )
    if "\0" in text:
        notes.append(ScriptNote(0, "error", "the script contains a NUL character; sbatch refuses it", refused=True))
    lines = text.split("\n")
    shebang = lines[0] if lines and lines[0].startswith("#!") else None
    if shebang is None:
        notes.append(
            ScriptNote(
                1,
                "error",
                "the first line must start with #! and an interpreter (e.g. #!/bin/bash); sbatch "
                "refuses the script otherwise",
                refused=True,
            )
        )

    argv: list[tuple[str, int]] = []
    body_first_line: int | None = None
    reading = True
    for index, line in enumerate(lines):
        lineno = index + 1
        if not reading:
            break
        if line.startswith(MAGIC):
            if _HETJOB.search(line):
                notes.append(
                    ScriptNote(
                        lineno, "warning", "heterogeneous job: only the first component's directives are read here"
                    )
                )
                reading = False
                continue
            try:
                argv.extend((arg, lineno) for arg in split_arguments(line[len(MAGIC) :]))
            except DirectiveSyntaxError as exc:
                notes.append(ScriptNote(lineno, "error", f"{exc}; sbatch refuses the script", refused=True))
            continue
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if stripped.startswith(MAGIC):
                notes.append(
                    ScriptNote(
                        lineno,
                        "warning",
                        "#SBATCH must start the line; with leading spaces sbatch treats it as a comment and ignores it",
                    )
                )
            continue
        body_first_line = lineno
        break

    if body_first_line is not None:
        for index in range(body_first_line, len(lines)):
            if lines[index].lstrip().startswith(MAGIC):
                notes.append(
                    ScriptNote(
                        index + 1,
                        "warning",
                        f"this #SBATCH line comes after the first command (line {body_first_line}); "
                        f"sbatch ignores it — move it above",
                    )
                )
    options, option_notes = _read_options(argv)
    notes.extend(option_notes)
    body = "\n".join(lines[body_first_line - 1 :]) if body_first_line is not None else ""
    return BatchScript(
        text=text,
        options=tuple(options),
        notes=tuple(sorted(notes, key=lambda n: n.line)),
        body=body,
        body_first_line=body_first_line,
        shebang=shebang,
    )


# --- Python output buffering -------------------------------------------------------------------

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
_LAUNCHERS = {"torchrun", "deepspeed", "accelerate"}  # start Python workers that inherit stdout
_NOT_LAUNCHING = {
    "echo",
    "printf",
    "which",
    "type",
    "command",
    "module",
    "ml",
    "source",
    ".",
    "alias",
    "hash",
    "test",
    "[",
    "[[",
    "declare",
    "local",
    "readonly",
    "unset",
    "cat",
    "ls",
    "grep",
    "cp",
    "mv",
    "rm",
    "mkdir",
    "ln",
    "chmod",
    "head",
    "tail",
    "export",
    "pip",
    "pip3",
    "conda",
    "mamba",
    "uv",
}
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "{", "}", ";;", "|&"}
_UNBUFFERED_ASSIGNMENT = re.compile(r"PYTHONUNBUFFERED=(\S+)")


@dataclass(frozen=True)
class BufferingRisk:
    """A Python command whose output Python will block-buffer into the log."""

    line: int
    command: str

    @property
    def message(self) -> str:
        return (
            f"`{self.command}` runs Python without -u and without PYTHONUNBUFFERED: under Slurm its output is "
            "block-buffered, so progress lines reach the log late and a healthy run can look hung. "
            "Add `export PYTHONUNBUFFERED=1` near the top of the script, or run `python -u`, or `srun --unbuffered`."
        )

    def to_dict(self) -> dict[str, object]:
        return {"line": self.line, "command": self.command, "message": self.message}


def _logical_lines(body: str, first_line: int) -> list[tuple[int, str]]:
    """Join backslash-continued lines, keeping the number of the first physical line."""
    result: list[tuple[int, str]] = []
    pending = ""
    start = first_line
    for offset, raw in enumerate(body.split("\n")):
        if not pending:
            start = first_line + offset
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        result.append((start, pending + raw))
        pending = ""
    if pending:
        result.append((start, pending))
    return result


def _tokens(line: str) -> list[str]:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError:
        return line.split()


def _segments(tokens: list[str]) -> list[list[str]]:
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS or (token and set(token) <= set(";&|(){}")):
            segments.append([])
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


def _env_value_set(value: str) -> bool:
    return value.strip("'\"") != ""


def _exports_unbuffered(value: str | None) -> bool:
    """True when an --export value sets PYTHONUNBUFFERED to a non-empty value."""
    if not value:
        return False
    return any(
        part.strip().startswith("PYTHONUNBUFFERED=") and _env_value_set(part.split("=", 1)[1])
        for part in value.split(",")
    )


def _python_flags_unbuffered(args: list[str]) -> bool:
    skip_next = False
    for token in args:
        if skip_next:
            skip_next = False
            continue
        if not token.startswith("-") or token == "-" or token in ("-m", "-c"):
            return False
        if token in ("-X", "-W"):
            skip_next = True
            continue
        if token.startswith(("-X", "-W")):
            continue
        if re.fullmatch(r"-[A-Za-z]+", token) and "u" in token[1:]:
            return True
    return False


def _srun_unbuffered(tokens: list[str]) -> bool:
    return any(t in ("-u", "--unbuffered") or re.fullmatch(r"-[A-Za-z]*u[A-Za-z]*", t) is not None for t in tokens)


def _command_risk(segment: list[str]) -> bool | None:
    """None: no Python here; True: Python that will block-buffer; False: Python made unbuffered."""
    words = list(segment)
    env_unbuffered = False
    # leading VAR=value assignments apply to this command only
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        if words[0].startswith("PYTHONUNBUFFERED=") and _env_value_set(words[0].split("=", 1)[1]):
            env_unbuffered = True
        words.pop(0)
    if not words or words[0] in _NOT_LAUNCHING:
        return None
    for index, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if word.startswith("PYTHONUNBUFFERED=") and _env_value_set(word.split("=", 1)[1]):
            env_unbuffered = True  # `env PYTHONUNBUFFERED=1 python ...`
        is_python = _PYTHON.fullmatch(base) is not None
        if is_python or base in _LAUNCHERS:
            before = words[:index]
            srun_u = "srun" in [w.rsplit("/", 1)[-1] for w in before] and _srun_unbuffered(before)
            flags_u = is_python and _python_flags_unbuffered(words[index + 1 :])
            return not (env_unbuffered or srun_u or flags_u)
    return None


def python_buffering_risks(script: BatchScript) -> tuple[BufferingRisk, ...]:
    """Python invocations in the script whose output will be block-buffered under Slurm."""
    if _exports_unbuffered(script.value("export")):
        return ()
    risks: list[BufferingRisk] = []
    if script.shebang:
        words = script.shebang[2:].split()
        interpreter = words[0].rsplit("/", 1)[-1] if words else ""
        args = words[1:]
        if interpreter == "env":
            args = [w for w in args if w != "-S"]
            interpreter, args = (args[0], args[1:]) if args else ("", [])
        if _PYTHON.fullmatch(interpreter) and not _python_flags_unbuffered(args):
            risks.append(BufferingRisk(1, script.shebang))
    if script.body_first_line is None:
        return tuple(risks)
    exported = False
    assigned = False
    for lineno, line in _logical_lines(script.body, script.body_first_line):
        if line.lstrip().startswith("#"):
            continue
        tokens = _tokens(line)
        for segment in _segments(tokens):
            head = segment[0]
            if head in ("export", "declare", "typeset"):
                for word in segment[1:]:
                    match = _UNBUFFERED_ASSIGNMENT.fullmatch(word)
                    if (match and _env_value_set(match.group(1))) or (word == "PYTHONUNBUFFERED" and assigned):
                        exported = True
                continue
            if len(segment) == 1 and (match := _UNBUFFERED_ASSIGNMENT.fullmatch(head)):
                assigned = _env_value_set(match.group(1))
                continue
            if exported:
                continue
            if _command_risk(segment):
                risks.append(BufferingRisk(lineno, line.strip()))
                break
    return tuple(risks)
