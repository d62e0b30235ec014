"""Reading #SBATCH directives the way sbatch does, and spotting block-buffered Python."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.admission.sbatch import DirectiveSyntaxError, parse_script, python_buffering_risks, split_arguments

GUIDE_COMMENT = (
    '{"APS":{"workflow_id":"training-example","environment":"customer-slurm","mode":"observe",'
    '"auto_resume_mode":"requeue","max_requeue_times":1}}'
)


def script(*lines: str) -> str:
    return "\n".join(("#!/bin/bash", *lines)) + "\n"


def test_user_guide_directives():
    parsed = parse_script(
        script("#SBATCH --requeue", f"#SBATCH --comment='{GUIDE_COMMENT}'", "", "srun python -u train.py")
    )
    assert parsed.requeue is True
    assert parsed.value("comment") == GUIDE_COMMENT
    assert parsed.notes == ()
    assert parsed.body_first_line == 5
    assert parsed.body.startswith("srun python -u train.py")


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        (' --comment=\'{"APS": {"a": 1}}\'', ['--comment={"APS": {"a": 1}}']),
        (' --comment="{\\"APS\\":{}}"', ['--comment={"APS":{}}']),
        (" -J 'my job' -p gpu", ["-J", "my job", "-p", "gpu"]),
        (" --time=10 # ten minutes", ["--time=10"]),
        (" --job-name=a#b", ["--job-name=a"]),
        (" --job-name='a#b'", ["--job-name=a#b"]),
        (" --job-name=a\\#b", ["--job-name=a#b"]),
        # sbatch checks for whitespace before it applies a backslash, so "\ " does not join arguments
        (" --job-name=a\\ b", ["--job-name=a", "b"]),
        ("", []),
        ("   # only a comment", []),
        (" '' --requeue", []),  # sbatch stops at an empty argument
    ],
)
def test_split_arguments_like_sbatch(rest, expected):
    assert split_arguments(rest) == expected


def test_unmatched_quote_is_refused():
    with pytest.raises(DirectiveSyntaxError):
        split_arguments(' --comment=\'{"APS": {}}')
    parsed = parse_script(script("#SBATCH --comment='{oops}", "true"))
    assert any(n.refused and n.line == 2 for n in parsed.notes)


def test_long_short_and_separate_value_forms():
    parsed = parse_script(
        script(
            "#SBATCH --output=logs/%j.out",
            "#SBATCH --error logs/%j.err",
            "#SBATCH -p gpu,debug",
            "#SBATCH -Jtrain",
            "#SBATCH -o other.out",
            "hostname",
        )
    )
    assert parsed.value("output") == "other.out"  # the later directive wins
    assert parsed.value("error") == "logs/%j.err"
    assert parsed.value("partition") == "gpu,debug"
    assert parsed.value("job-name") == "train"
    assert [o.written for o in parsed.all("output")] == ["--output", "-o"]


def test_abbreviated_long_options_resolve_like_getopt_long():
    parsed = parse_script(script("#SBATCH --part=gpu --requ --comm x", "hostname"))
    assert parsed.value("partition") == "gpu"
    assert parsed.requeue is True
    assert parsed.value("comment") == "x"


def test_ambiguous_and_unknown_options_are_refused():
    parsed = parse_script(script("#SBATCH --mem-per=4G", "#SBATCH --frobnicate", "#SBATCH -Z", "hostname"))
    assert [n.line for n in parsed.notes if n.refused] == [2, 3, 4]


def test_flag_with_a_value_is_refused():
    assert parse_script(script("#SBATCH --requeue=yes", "true")).notes[0].refused


def test_optional_argument_only_with_equals():
    parsed = parse_script(script("#SBATCH --exclusive --requeue", "true"))
    assert parsed.value("exclusive") is None
    assert parsed.requeue is True


def test_non_option_stops_option_processing():
    parsed = parse_script(script("#SBATCH --requeue extra", "#SBATCH --partition=gpu", "true"))
    assert parsed.requeue is True
    assert parsed.value("partition") is None
    assert "stops reading" in parsed.notes[0].message


def test_last_of_requeue_and_no_requeue_wins():
    assert parse_script(script("#SBATCH --requeue", "#SBATCH --no-requeue", "true")).requeue is False
    assert parse_script(script("#SBATCH --no-requeue", "#SBATCH --requeue", "true")).requeue is True
    assert parse_script(script("true")).requeue is None


def test_directives_after_the_first_command_are_ignored():
    parsed = parse_script(script("#SBATCH --job-name=a", "module load cuda", "#SBATCH --requeue", "srun true"))
    assert parsed.requeue is None
    assert parsed.body_first_line == 3
    assert [n.line for n in parsed.notes] == [4]
    assert "ignores" in parsed.notes[0].message


def test_blank_lines_and_comments_do_not_end_the_directives():
    parsed = parse_script(script("", "# setup", "   ", "#SBATCH --requeue", "\t# more", "#SBATCH -p gpu", "true"))
    assert parsed.requeue is True
    assert parsed.value("partition") == "gpu"


def test_indented_directive_is_a_comment():
    parsed = parse_script(script("  #SBATCH --requeue", "true"))
    assert parsed.requeue is None
    assert parsed.notes[0].severity == "warning"


def test_hetjob_ends_the_first_component():
    parsed = parse_script(script("#SBATCH -p gpu", "#SBATCH hetjob", "#SBATCH -p cpu", "true"))
    assert parsed.value("partition") == "gpu"


def test_missing_shebang_dos_line_breaks_and_nul_are_refused():
    assert parse_script("#SBATCH --requeue\ntrue\n").notes[0].refused
    assert any(n.refused for n in parse_script("#!/bin/bash\r\n#SBATCH --requeue\r\ntrue\r\n").notes)
    assert any(n.refused for n in parse_script("#!/bin/bash\ntrue\0\n").notes)


def test_script_without_commands_has_no_body():
    parsed = parse_script(script("#SBATCH --requeue"))
    assert parsed.body_first_line is None and parsed.body == ""


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_script_never_raises(text):
    parsed = parse_script(text)
    python_buffering_risks(parsed)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("#SBATCH -=pqo'\"\\ax\t")), max_size=40), max_size=8))
def test_directive_like_scripts_never_raise(lines):
    parsed = parse_script("#!/bin/bash\n" + "\n".join(lines))
    python_buffering_risks(parsed)


# --- buffering ----------------------------------------------------------------------------------


def risks(*lines: str, directives: tuple[str, ...] = ()) -> list[int]:
    return [r.line for r in python_buffering_risks(parse_script(script(*directives, *lines)))]


@pytest.mark.parametrize(
    "command",
    [
        "python train.py",
        "python3 -m torch.distributed.run train.py",
        "srun python train.py --lr 3e-4",
        "/opt/venv/bin/python3.11 train.py",
        "srun --ntasks=8 torchrun --nproc-per-node=8 train.py",
        "cd run && python train.py",
        "python train.py | tee train.log",
        "PYTHONUNBUFFERED= python train.py",
        "stdbuf -oL python train.py",
    ],
)
def test_buffered_python_is_flagged(command):
    assert risks(command) == [2]


@pytest.mark.parametrize(
    "lines",
    [
        ("python -u train.py",),
        ("python -Bu train.py",),
        ("srun -u python train.py",),
        ("srun --unbuffered python train.py",),
        ("PYTHONUNBUFFERED=1 python train.py",),
        ("env PYTHONUNBUFFERED=1 python train.py",),
        ("export PYTHONUNBUFFERED=1", "python train.py"),
        ("PYTHONUNBUFFERED=1", "export PYTHONUNBUFFERED", "python train.py"),
        ("echo python train.py",),
        ("which python",),
        ("module load python/3.11",),
        ("# python train.py",),
        ("pip install -r requirements.txt",),
    ],
)
def test_unbuffered_or_non_python_lines_are_not_flagged(lines):
    assert risks(*lines) == []


def test_export_directive_with_pythonunbuffered_clears_every_risk():
    assert risks("python train.py", directives=("#SBATCH --export=ALL,PYTHONUNBUFFERED=1",)) == []


def test_export_after_the_python_line_does_not_help_it():
    assert risks("python prep.py", "export PYTHONUNBUFFERED=1", "python train.py") == [2]


def test_unexported_assignment_does_not_help():
    assert risks("PYTHONUNBUFFERED=1", "python train.py") == [3]


def test_continued_lines_are_read_as_one_command():
    assert risks("srun \\", "  python train.py") == [2]
    assert risks("srun -u \\", "  python train.py") == []


def test_python_shebang_without_u_is_flagged():
    parsed = parse_script("#!/usr/bin/env python3\n#SBATCH --requeue\nprint('hi')\n")
    assert [r.line for r in python_buffering_risks(parsed)] == [1]
    parsed = parse_script("#!/usr/bin/env -S python3 -u\n#SBATCH --requeue\nprint('hi')\n")
    assert python_buffering_risks(parsed) == ()
